//! The integration tests of one area of fctrace, in one test binary:
//! Call trees of C, C++ and Rust programs: nesting, shapes of the patched
//! code, unwinding, exceptions, longjmp, coroutines, panics, libraries
//! loaded late, separate debug files, programs that inspect themselves, the
//! extended CPU state.
//!
//! Each file is a module (`cargo test --test tracing FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod backtraces;
mod coroutines;
mod cpp;
mod debugfile;
mod dense;
mod depth;
mod dlopen;
mod dlopen_exceptions;
mod enums;
mod exceptions;
mod ext_state;
mod longjmp;
mod nest_libcall;
mod nested;
mod panics;
mod patch_shapes;
mod rust_prog;
mod same_names;
mod segments;
mod self_inspect;
mod shape;
mod split_parts;
mod startcache;
mod stripped;
mod stripped_debian;
mod trap_fallback;
mod tree;
mod unwind;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
