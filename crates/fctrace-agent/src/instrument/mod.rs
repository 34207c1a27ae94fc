//! Finding the program's modules and functions and patching them, and the
//! slow path the generated code calls. Uses every layer below and `arch`.
//!
//! Bottom first: `loaded` (the loaded objects), `module_file` (a module's
//! file: analysis, code), `session` (ids, symbol table), `stubs` (arenas,
//! stubs, patches), `imports` (the program's calls into libraries, the
//! agent's interposers), `modules` (the module walk), `startcache` (a module's
//! analysis and plans kept between runs), `dlopen` (libraries loaded
//! later), `start` (the start-up); `adopt`, `sanitizer` and
//! `slow_path` beside them.
pub mod adopt;
pub mod dlopen;
pub mod imports;
mod loaded;
mod module_file;
pub mod modules;
pub mod python;
pub mod sanitizer;
pub mod sdt;
mod session;
pub mod slow_path;
pub mod start;
mod startcache;
mod stubs;
