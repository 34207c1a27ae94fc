//! The integration tests of one area of fctrace, in one test binary:
//! The program sees its own world (environment, descriptors, allocator,
//! namespaces), the crates keep their layers, and the test harness itself is
//! checked.
//!
//! Each file is a module (`cargo test --test hygiene FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod function_length;
mod harness;
mod hygiene;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
