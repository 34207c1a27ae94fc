//! Everything of the agent that is specific to x86_64: the generated hot
//! path (`codegen`), deciding and building per-function stubs (`patch`),
//! and placing executable memory near a module (`arena`).

pub mod arena;
pub mod codegen;
pub mod escape;
pub mod patch;
pub mod redirect;
