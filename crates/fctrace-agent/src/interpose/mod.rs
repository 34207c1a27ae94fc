//! The agent's definitions of the program's functions.
pub mod context;
pub mod process;
pub mod signal;
pub mod unwind;
