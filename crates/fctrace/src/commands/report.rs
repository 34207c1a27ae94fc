//! `fctrace report`: per-function statistics of a recorded trace.

use super::output::{finish, Output, Terminal};
use crate::cli::{Format, ReportArgs};
use anyhow::Context;
use fctrace_analysis::{diff, report, warn};
use fctrace_format::store::Trace;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

pub fn run(args: ReportArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    if let Some(other) = &args.diff {
        let policy = args
            .diff_policy
            .as_deref()
            .map(diff::Policy::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("invalid --diff-policy: {e}"))?
            .unwrap_or_default();
        return run_diff(&args, other, &given, policy, terminal);
    }
    let trace = super::naming::open(&args.dir, &args.naming)?;
    if args.kernel {
        return run_kernel(&args, &trace, terminal);
    }
    let mut stats = aggregate(&trace, &given);
    report::sort(&mut stats.functions, args.sort.into());

    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Text => report::write_text(&mut out, &stats.functions),
        Format::Json => {
            report::write_json(&mut out, &trace, &stats.functions, stats.lost_in_streams)
        }
    }
    .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the report");
    }

    finish(&trace, STATS, stats.lost_in_streams, stats.errors)
}

/// `report -k`: the system calls of the whole trace, as `strace -c` sums
/// them.
fn run_kernel(args: &ReportArgs, trace: &Trace, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    for w in &trace.load_warnings {
        warn(w);
    }
    let (rows, errors) = fctrace_analysis::syscalls::summarize(trace);
    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Text => {
            fctrace_analysis::syscalls::write_summary(&mut out, &rows, args.sort.into())
        }
        Format::Json => fctrace_analysis::syscalls::write_summary_json(&mut out, &rows),
    }
    .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the report");
    }
    if rows.is_empty() {
        warn("the trace holds no system calls: record it with -k");
    }
    finish(trace, STATS, 0, errors)
}

/// Warns about what loading `trace` met and about the filters, then
/// aggregates it.
fn aggregate(trace: &Trace, given: &fctrace_options::Options) -> report::Report {
    for w in &trace.load_warnings {
        warn(w);
    }
    fctrace_analysis::filter::warn_unmatched(trace, given);
    fctrace_analysis::filter::warn_tracing_gaps(trace, given);
    // `record -C`/`-t`: acting here, as in live mode.
    let options = fctrace_analysis::filter::with_recorded_display(given, trace);
    report::aggregate_with(trace, &options)
}

/// `report --diff OTHER`: both traces through the same filters.
fn run_diff(
    args: &ReportArgs,
    other_dir: &std::path::Path,
    given: &fctrace_options::Options,
    policy: diff::Policy,
    terminal: &Terminal,
) -> anyhow::Result<ExitCode> {
    let base = super::naming::open(&args.dir, &args.naming)?;
    let other = super::naming::open(other_dir, &args.naming)?;
    let a = aggregate(&base, given);
    let b = aggregate(&other, given);
    let lost = [a.lost_in_streams, b.lost_in_streams];
    let mut rows = diff::pair(a.functions, b.functions);
    diff::sort(&mut rows, args.sort.into(), policy);
    let sides = (
        diff::Side {
            dir: &args.dir,
            trace: &base,
        },
        diff::Side {
            dir: other_dir,
            trace: &other,
        },
    );
    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Text => diff::write_text(&mut out, &sides.0, &sides.1, &rows, policy),
        Format::Json => diff::write_json(&mut out, &sides.0, &sides.1, lost, &rows),
    }
    .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the report");
    }
    let first = finish(&base, STATS, a.lost_in_streams, a.errors);
    let second = finish(&other, STATS, b.lost_in_streams, b.errors);
    first.and(second)
}

/// What the warning about lost events says is incomplete.
const STATS: &str = "the statistics are";
