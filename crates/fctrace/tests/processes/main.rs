//! The integration tests of one area of fctrace, in one test binary:
//! Processes and threads: threads and their endings, signals, fork and exec,
//! how a recording ends, the flight recorder, robustness, privacy,
//! capabilities.
//!
//! Each file is a module (`cargo test --test processes FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod capabilities;
mod endings;
mod fork_filters;
mod privacy;
mod processes;
mod ring;
mod robustness;
mod signals;
mod thread_endings;
mod threads;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
