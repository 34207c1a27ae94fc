//! The bottom layer: what every other part of the agent stands on.
pub mod alloc;
pub mod buffer;
pub mod frames;
pub mod log;
pub mod real;
pub mod shm;
pub mod state;
pub mod thread;
pub mod tls;
