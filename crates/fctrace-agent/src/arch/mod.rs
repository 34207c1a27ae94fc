//! Architecture-specific code, usable by every layer above `runtime`; it
//! uses `runtime` only (layouts, offsets, the TLS block).
pub mod x86_64;
