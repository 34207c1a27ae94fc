//! The integration tests of one area of fctrace, in one test binary:
//! Programs of other runtimes and toolchains: Go with cgo, the JVM, V8,
//! sanitizers, musl, scripts, SQLite, gprof, Python functions (CPython).
//!
//! Each file is a module (`cargo test --test runtimes FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod go_cgo;
mod gprof;
mod jvm;
mod musl;
mod python_filters;
mod python_functions;
mod sanitizers;
mod scripts;
mod sqlite;
mod v8;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
