//! fctrace-analysis: the readers of a recorded trace, shared by live mode
//! and the `replay`, `report`, `graph`, `dump`, `flamegraph`, `info` and
//! `tui` commands. It reads a trace directory through `fctrace-format`
//! and never controls a process (no unsafe code); the command line turns
//! its options into the plain values taken here (`fctrace_options`'
//! `Options`, [`tree::TreeStyle`], [`sort::SortKey`], colour on or off).
//!
//! How a trace flows through it, bottom up:
//!
//! 1. A task's events come from `fctrace_format::store::Trace`, through
//!    the display filters when any is given ([`filter`]: which calls are
//!    shown, `-F`, `-N`, `-C`, `-D`, `-t`, `-r`, `--tid`, `-T`), as an
//!    [`filter::EventSource`].
//! 2. The readers take them from there: [`tree`] draws the calls line by
//!    line (`replay`, live mode); [`calls`] rebuilds whole calls and one
//!    identity per function across sessions, for [`graph`] (calls merged
//!    by call path: `graph`, the flame graph, the TUI), the `dump`
//!    formats ([`chrome`], [`perfetto`], [`events`], [`flame`],
//!    [`parquet`]); [`report`] sums per function (`report`; [`diff`] two
//!    traces compared) and [`syscalls`] per system call (`report -k`).
//! 3. Their text is named by [`names`] (functions), [`args`] (values),
//!    [`syscalls`] (system calls as strace prints them), with durations
//!    as one column (`duration.rs`) coloured by [`term`]; long passes show
//!    a progress line and warn on stderr (`progress.rs`).
//!
//! [`testutil`] (feature `testutil`) builds traces by hand for tests.

#![forbid(unsafe_code)]

pub mod args;
pub mod calls;
pub mod chrome;
pub mod diff;
mod duration;
pub mod events;
pub mod filter;
pub mod flame;
pub mod flat;
pub mod graph;
pub mod names;
pub mod parquet;
pub mod perfetto;
mod progress;
pub mod report;
pub mod report_fields;
pub mod script;
pub mod sort;
pub mod srclines;
pub mod syscalls;
pub mod term;
pub mod tree;

/// Hand-built traces for tests (this crate's and the command line's).
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

pub use duration::{duration, Duration};
pub use progress::{is_broken_pipe, warn, Progress};
