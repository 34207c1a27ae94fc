//! Finding the program's functions and patching them.
pub mod modules;
pub mod slow_path;
