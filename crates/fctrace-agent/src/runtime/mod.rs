//! The bottom layer: what every other part of the agent stands on.
pub mod alloc;
pub mod real;
pub mod shm;
pub mod thread;
pub mod tls;
