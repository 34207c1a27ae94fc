//! The integration tests of one area of fctrace, in one test binary:
//! Attaching to running programs (`fctrace -p`) and detaching.
//!
//! Each file is a module (`cargo test --test attach FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod attach;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
