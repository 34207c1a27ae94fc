//! Every command-line option of fctrace, in one place.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// Default trace directory, as uftrace's `uftrace.data`.
pub const DEFAULT_DIR: &str = "fctrace.data";

#[derive(Parser, Debug)]
#[command(
    name = "fctrace",
    version,
    about = "Show every function call a program makes, as a call tree with durations",
    long_about = "Show every function call a program makes, as a call tree with durations.\n\n\
        `fctrace PROGRAM [ARGS...]` runs PROGRAM, lets its output through untouched, and prints \
        its call tree when it ends. No recompilation and no debug information are needed.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub live: LiveArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a program and record its calls into a trace directory
    Record(RecordArgs),
    /// Print the call tree of a recorded trace
    Replay(ReplayArgs),
    /// Per-function statistics of a recorded trace
    Report(ReportArgs),
    /// What a trace holds: program, tasks, instrumented functions, events
    Info(InfoArgs),
}

/// What to trace: shared by live mode and `record`.
#[derive(Args, Debug, Clone, Default)]
pub struct TraceOptions {
    /// Also trace every function inside the shared libraries (not only the
    /// calls from the program into them)
    #[arg(short = 'l', long = "nest-libcall")]
    pub nest_libcall: bool,
}

#[derive(Args, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    pub trace: TraceOptions,
    /// The program to run, then its arguments
    #[arg(value_name = "PROGRAM", required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Trace directory to write
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub trace: TraceOptions,
    /// The program to run, then its arguments
    #[arg(value_name = "PROGRAM", required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Trace directory to read
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Total,
    #[value(name = "self")]
    SelfTime,
    Calls,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace directory to read
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Sort by total time, self time or number of calls
    #[arg(short = 's', long = "sort", value_enum, default_value = "total")]
    pub sort: SortKey,
    /// Output format
    #[arg(long = "format", value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Trace directory to read
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
}

pub fn parse() -> Cli {
    Cli::parse()
}
