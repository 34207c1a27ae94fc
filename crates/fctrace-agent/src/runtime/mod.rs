//! The bottom layer: per-thread state, buffers, TLS, the shared memory,
//! the allocator and the helpers every other part of the agent uses. It
//! uses no other layer (docs/engine.md, "Code layout").
pub mod alloc;
pub mod buffer;
pub mod dlerror;
pub mod frames;
pub mod journal;
pub mod loader;
pub mod log;
pub mod maps;
pub mod real;
pub mod shm;
pub mod state;
pub mod thread;
pub mod tls;
