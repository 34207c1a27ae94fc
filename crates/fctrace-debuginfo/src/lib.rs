//! Read-time naming of the functions no symbol named at record time.
//!
//! The agent instruments functions of stripped files too (found through
//! their call frame information) and writes them into the session symbol
//! table under a module-and-offset name, `git+0x4a3f0`, with the module's
//! build-id and `.gnu_debuglink`. A reader of the trace, maybe on another
//! machine, looks for the module's separate debug file ([`locate`]: the
//! user's `--debug-dir`s, `/usr/lib/debug`, then debuginfod servers,
//! [`debuginfod`]) and names those functions from its `.symtab`
//! ([`symbols`]), in the trace's symbol tables, before anything is shown
//! ([`naming`]).

#![forbid(unsafe_code)]

pub mod debuginfod;
pub mod elfid;
mod http;
pub mod locate;
pub mod naming;
pub mod symbols;

pub use locate::{Config, Finder, Found, Source};
pub use naming::{name_symtab, name_trace, ModuleNaming, Naming, Origin};
