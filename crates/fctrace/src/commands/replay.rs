//! `fctrace replay`: print the call tree of a recorded trace.

use super::output::{Output, Terminal};
use crate::cli::ReplayArgs;
use fctrace_analysis::{filter, tree};
use std::process::ExitCode;

pub fn run(args: ReplayArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    let style = args.tree.style()?;
    let trace = super::naming::open(&args.dir, &args.naming)?;
    // Only the patterns given here are checked, not the record-time
    // options added next (a replay without options stays quiet).
    filter::warn_unmatched(&trace, &given);
    filter::warn_tracing_gaps(&trace, &given);
    let mut options = filter::with_recorded_display(&given, &trace);
    filter::add_recorded_backtraces(&mut options, &trace);
    let mut out = Output::open(&args.output, terminal)?;
    tree::print_tree_styled(&trace, &options, &style, &mut out.writer)?;
    Ok(ExitCode::SUCCESS)
}
