//! The program's functions the agent defines itself (it is preloaded):
//! processes and threads, signals, unwinders and longjmp, ucontext
//! switches. Uses `runtime`, `recording` and `arch`.
pub mod context;
pub mod forwarded;
pub mod process;
pub mod profiling;
pub mod signal;
pub mod unwind;
