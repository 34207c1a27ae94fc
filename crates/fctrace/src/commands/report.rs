//! `fctrace report`: per-function statistics of a recorded trace.

use super::output::{finish, Output, Terminal};
use crate::cli::{Format, ReportArgs};
use anyhow::Context;
use fctrace_analysis::report_fields::{self as fields, AvgOf, Col, Key};
use fctrace_analysis::sort::SortKey;
use fctrace_analysis::{diff, report, warn};
use fctrace_format::store::Trace;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

/// `-s`'s keys (`--avg-total`/`--avg-self` giving avg, min and max
/// their meaning).
fn sort_keys(args: &ReportArgs) -> anyhow::Result<Vec<Key>> {
    fields::parse_keys(&args.sort, avg_of(args))
        .map_err(|e| anyhow::anyhow!("invalid -s/--sort: {e}"))
}

fn avg_of(args: &ReportArgs) -> Option<AvgOf> {
    if args.avg_total {
        Some(AvgOf::Total)
    } else if args.avg_self {
        Some(AvgOf::SelfTime)
    } else {
        None
    }
}

/// The first sort key as the tables of `--diff` and `-k` take it.
fn plain_key(keys: &[Key]) -> SortKey {
    match keys.first() {
        Some(Key::Col(Col::Call)) => SortKey::Calls,
        Some(Key::Col(
            Col::SelfTime | Col::SelfAvg | Col::SelfMin | Col::SelfMax | Col::SelfStdv,
        )) => SortKey::SelfTime,
        _ => SortKey::Total,
    }
}

/// uftrace's columns when `-f`, `--avg-total` or `--avg-self` asks for
/// them (none: fctrace's own table).
fn columns(args: &ReportArgs) -> anyhow::Result<Option<Vec<Col>>> {
    if let Some(of) = avg_of(args) {
        return Ok(Some(fields::avg_cols(of)));
    }
    args.output_fields
        .as_deref()
        .map(fields::parse_cols)
        .transpose()
        .map_err(|e| anyhow::anyhow!("invalid -f/--output-fields: {e}"))
}

pub fn run(args: ReportArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    // (`FUNC@kernel`: kernel function lines, which report does not list.)
    let (given, _) = fctrace_analysis::tree::KernelShown::split(&args.filter.to_options()?);
    let keys = sort_keys(&args)?;
    if args.task {
        return run_tasks(&args, &given, terminal);
    }
    let cols = columns(&args)?;
    if (args.diff.is_some() || args.kernel) && matches!(args.format, Format::Csv | Format::Html) {
        anyhow::bail!(
            "--format csv and html are for the function and task tables, not with --diff or -k"
        );
    }
    if let Some(other) = &args.diff {
        let policy = args
            .diff_policy
            .as_deref()
            .map(diff::Policy::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("invalid --diff-policy: {e}"))?
            .unwrap_or_default();
        let names: Option<Vec<&str>> = match (&cols, args.output_fields.as_deref()) {
            (Some(_), Some(spec)) if spec.trim() == "none" => Some(Vec::new()),
            (Some(_), Some(spec)) => Some(
                spec.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .collect(),
            ),
            _ => None,
        };
        let order = diff::columns(names.as_deref())
            .map_err(|e| anyhow::anyhow!("invalid -f/--output-fields: {e}"))?;
        return run_diff(
            &args,
            other,
            &given,
            (plain_key(&keys), policy, &order),
            terminal,
        );
    }
    let trace = super::naming::open(&args.dir, &args.naming)?;
    if args.kernel {
        return run_kernel(&args, &trace, plain_key(&keys), terminal);
    }
    let mut stats = aggregate(&trace, &given);
    fields::sort_by(&mut stats.functions, &keys);

    let mut output = Output::open(&args.output, terminal)?;
    if matches!(args.format, Format::Csv | Format::Html) {
        fctrace_analysis::term::set_colour(false);
    }
    let mut text = Vec::new();
    let mut out = BufWriter::new(&mut output.writer);
    let table = |out: &mut dyn Write, csv: bool| match &cols {
        Some(cols) => fields::write_table(out, &stats.functions, cols, csv),
        None if csv => fields::write_table(out, &stats.functions, &DEFAULT_CSV, true),
        None => report::write_text(out, &stats.functions),
    };
    let written = match args.format {
        Format::Text => table(&mut out, false),
        Format::Csv => table(&mut out, true),
        Format::Html => table(&mut text, false)
            .and_then(|()| super::replay::write_html(&String::from_utf8_lossy(&text), &mut out)),
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

/// The csv columns without `-f`: uftrace's default, those of the table.
const DEFAULT_CSV: [Col; 3] = [Col::Total, Col::SelfTime, Col::Call];

/// `report --task`: per task, its times and calls.
fn run_tasks(
    args: &ReportArgs,
    given: &fctrace_options::Options,
    terminal: &Terminal,
) -> anyhow::Result<ExitCode> {
    let cols = fields::parse_task_cols(args.output_fields.as_deref())
        .map_err(|e| anyhow::anyhow!("invalid -f/--output-fields: {e}"))?;
    let trace = super::naming::open(&args.dir, &args.naming)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    let options = fctrace_analysis::filter::with_recorded_display(given, &trace);
    let (tasks, errors) = fields::aggregate_tasks(&trace, &options);
    let mut output = Output::open(&args.output, terminal)?;
    if matches!(args.format, Format::Csv | Format::Html) {
        fctrace_analysis::term::set_colour(false);
    }
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Csv => fields::write_tasks(&mut out, &tasks, &cols, true),
        Format::Html => {
            let mut text = Vec::new();
            fields::write_tasks(&mut text, &tasks, &cols, false)
                .and_then(|()| super::replay::write_html(&String::from_utf8_lossy(&text), &mut out))
        }
        Format::Json => fields::write_tasks_json(&mut out, &tasks),
        Format::Text => fields::write_tasks(&mut out, &tasks, &cols, false),
    }
    .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the report");
    }
    finish(&trace, STATS, 0, errors)
}

/// `report -k`: the system calls of the whole trace, as `strace -c` sums
/// them.
fn run_kernel(
    args: &ReportArgs,
    trace: &Trace,
    key: SortKey,
    terminal: &Terminal,
) -> anyhow::Result<ExitCode> {
    for w in &trace.load_warnings {
        warn(w);
    }
    let (rows, errors) = fctrace_analysis::syscalls::summarize(trace);
    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Json => fctrace_analysis::syscalls::write_summary_json(&mut out, &rows),
        _ => fctrace_analysis::syscalls::write_summary(&mut out, &rows, key),
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
    (key, policy, order): (SortKey, diff::Policy, &[usize]),
    terminal: &Terminal,
) -> anyhow::Result<ExitCode> {
    let base = super::naming::open(&args.dir, &args.naming)?;
    let other = super::naming::open(other_dir, &args.naming)?;
    let a = aggregate(&base, given);
    let b = aggregate(&other, given);
    let lost = [a.lost_in_streams, b.lost_in_streams];
    let mut rows = diff::pair(a.functions, b.functions);
    diff::sort_column(&mut rows, key, policy, args.sort_column.unwrap_or(2));
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
        Format::Json => diff::write_json(&mut out, &sides.0, &sides.1, lost, &rows),
        _ => diff::write_text(&mut out, (&sides.0, &sides.1), &rows, policy, order),
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
