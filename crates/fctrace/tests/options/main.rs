//! The integration tests of one area of fctrace, in one test binary:
//! The command line: record options and their arguments, record-time
//! filters, option checks, errors, sending a trace (record --host, recv).
//!
//! Each file is a module (`cargo test --test options FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod args;
mod cli_parse;
mod disabled_gaps;
mod errors;
mod fast_args;
mod filters;
mod option_checks;
mod record_filters;
mod sdt_events;
mod stream;
mod stripped_filters;
mod uftrace_args;
mod uftrace_record;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
