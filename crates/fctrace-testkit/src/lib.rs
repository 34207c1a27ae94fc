//! The shared helpers of fctrace's integration tests (`crates/fctrace/tests`),
//! compiled once for all the test binaries. One module per topic:
//!
//! * [`paths`]: where the fctrace binary, the test programs and the cache
//!   are; names unique to a test; locks on files of the cache;
//! * [`process`]: running commands with a time limit; the tools the tests
//!   need, with their Debian package;
//! * [`programs`]: building the test programs of `tests/programs/` (gcc,
//!   g++, rustc; cargo for Rust programs that need its profiles), cached
//!   under `target/tmp` by a hash of compiler, flags and sources, so reruns
//!   do not recompile (safe for parallel tests and for parallel `cargo test`
//!   runs: file locks plus atomic renames);
//! * [`record`]: running fctrace (`record`, `replay`, `info`) with a time
//!   limit, checking it never panicked, and comparing a program's behaviour
//!   natively and under `fctrace record`;
//! * [`report`], [`replay`], [`dump`], [`exports`], [`info_json`],
//!   [`notes`]: fctrace's outputs read back (`replay`'s call tree per task
//!   and thread is checked to nest properly; signal markers are leaves,
//!   which [`strip_markers`] removes);
//! * [`elf`]: ELF symbols (readelf) and disassembly (objdump);
//! * [`callgrind`]: callgrind's count of calls per function, compared with
//!   fctrace's, function by function, for the main executable;
//! * [`sanitizers`]: sanitizer reports with their addresses and ids
//!   normalised;
//! * [`vm`]: booting a Linux kernel under qemu with an initramfs of the
//!   test's programs, for CPUs and kernels other than this machine's;
//! * [`debuginfod`]: a local debuginfod server on loopback;
//! * [`signals`]: the default action for every signal at the start of each
//!   test binary (each `main.rs` of the tests links it in).
//!
//! Everything is re-exported here: a test file says `use fctrace_testkit::*;`.

pub mod callgrind;
pub mod cli_args;
mod clones;
pub mod debuginfod;
pub mod driven;
pub mod dump;
pub mod elf;
pub mod exports;
pub mod info_json;
pub mod notes;
pub mod paths;
pub mod process;
pub mod programs;
pub mod pythons;
pub mod record;
pub mod replay;
pub mod report;
pub mod sanitizers;
pub mod scratch;
pub mod signals;
pub mod sqlite_build;
pub mod vm;

pub use callgrind::*;
pub use cli_args::*;
pub use debuginfod::*;
pub use driven::*;
pub use dump::*;
pub use elf::*;
pub use exports::*;
pub use info_json::*;
pub use notes::*;
pub use paths::*;
pub use process::*;
pub use programs::*;
pub use pythons::*;
pub use record::*;
pub use replay::*;
pub use report::*;
pub use sanitizers::*;
pub use scratch::*;
pub use sqlite_build::*;
