//! The integration tests of one area of fctrace, in one test binary:
//! The kernel's side of a trace (`-k`, `-K`): system calls, tracepoints,
//! function_graph (kgraph_vm: on Debian's kernels, booted under qemu).
//!
//! Each file is a module (`cargo test --test kernel FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod kernel;
mod kgraph_vm;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
