//! Finding the program's modules and functions and patching them, and the
//! slow path the generated code calls. Uses every layer below and `arch`.
pub mod adopt;
pub mod modules;
pub mod sanitizer;
pub mod slow_path;
