//! `fctrace replay`: print the call tree of a recorded trace.

use crate::cli::ReplayArgs;
use crate::output::{filter, tree};
use fctrace_format::store::Trace;
use std::io;
use std::process::ExitCode;

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    let style = args.tree.style()?;
    let trace = Trace::open(&args.dir)?;
    // Only the patterns given here are checked, not the record-time
    // options added next (a replay without options stays quiet).
    filter::warn_unmatched(&trace, &given);
    filter::warn_tracing_gaps(&trace, &given);
    let mut options = filter::with_recorded_display(&given, &trace);
    filter::add_recorded_backtraces(&mut options, &trace);
    let stdout = io::stdout();
    tree::print_tree_styled(&trace, &options, &style, &mut stdout.lock())?;
    Ok(ExitCode::SUCCESS)
}
