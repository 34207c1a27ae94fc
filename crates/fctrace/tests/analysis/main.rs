//! The integration tests of one area of fctrace, in one test binary:
//! Reading a trace: replay (`--last`), info on damaged traces, report,
//! graph, diff, functions of stripped programs named from debug files, flame graphs, Parquet, Chrome and Perfetto exports, the TUI,
//! the terminal.
//!
//! Each file is a module (`cargo test --test analysis FILE::` runs one); the
//! shared helpers are the `fctrace-testkit` crate.

mod archive;
mod damaged;
mod dump_chrome;
mod dump_perfetto;
mod flame;
mod graph;
mod last;
mod parquet;
mod perfetto_ui;
mod report_diff;
mod stripped_names;
mod terminal;
mod tui;
mod uftrace_graph_dump;
mod uftrace_info;
mod uftrace_replay;
mod uftrace_report;
mod uftrace_script;
mod uftrace_srcline;

/// Every test binary starts with the default action for each signal,
/// whatever it inherited (see `fctrace_testkit::signals`): run by the C
/// runtime before main.
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = fctrace_testkit::signals::default_signal_actions;
