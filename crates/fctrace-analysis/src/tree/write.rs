//! The tree's entry points: the whole tree of a trace, printed (with
//! the warnings) or written, task after task or by time.

use super::merge::write_by_time;
use super::sink::Sink;
use super::style::{task_header, TreeStyle, TreeSummary};
use super::task::write_task;
use crate::filter::Filter;
use crate::names::CallNames;
use crate::progress::{is_broken_pipe, warn, Progress};
use fctrace_format::store::Trace;
use fctrace_options::Options;
use std::io::{self, Write};

/// Prints the call tree of `trace` to `out` (buffered internally), then on
/// stderr: warnings for lost events and for the trace's load warnings.
/// Fails if a task file is unreadable, truncated or corrupt (after printing
/// everything that could be read) or if writing fails; a closed pipe
/// (`| head`) is not a failure.
#[cfg(any(test, feature = "testutil"))]
pub fn print_tree(trace: &Trace, out: &mut dyn Write) -> anyhow::Result<()> {
    print_tree_with(trace, &Options::default(), out)
}

/// [`print_tree`] of the calls the display filters of `options` show
/// (see [`crate::filter`]).
#[cfg(any(test, feature = "testutil"))]
pub fn print_tree_with(
    trace: &Trace,
    options: &Options,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    print_tree_styled(trace, options, &TreeStyle::default(), out)
}

/// [`print_tree_with`], laid out as `style` says.
pub fn print_tree_styled(
    trace: &Trace,
    options: &Options,
    style: &TreeStyle,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    for w in &trace.load_warnings {
        warn(w);
    }
    let summary = match write_tree_styled(trace, options, style, out) {
        Ok(summary) => summary,
        Err(e) => {
            let e = anyhow::Error::from(e);
            if is_broken_pipe(&e) {
                return Ok(());
            }
            return Err(e.context("cannot write the call tree"));
        }
    };
    let lost = trace.info.lost_events.max(summary.lost_in_streams);
    if lost > 0 {
        let why = trace.info.loss_reasons();
        warn(&format!(
            "{lost} events were lost: parts of the tree are missing{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ));
    }
    let mut errors = summary.errors.into_iter();
    if let Some(first) = errors.next() {
        for other in errors {
            warn(&other.to_string());
        }
        return Err(first.into());
    }
    Ok(())
}

/// Writes the call tree of `trace` to `out`. Errors reading a task are
/// collected in the summary, not returned; only a write error is.
#[cfg(any(test, feature = "testutil"))]
pub fn write_tree(trace: &Trace, out: &mut dyn Write) -> io::Result<TreeSummary> {
    write_tree_with(trace, &Options::default(), out)
}

/// [`write_tree`] through the display filters of `options`: only the tasks
/// and calls they show (a task hidden by `--tid` has no header either).
#[cfg(any(test, feature = "testutil"))]
pub fn write_tree_with(
    trace: &Trace,
    options: &Options,
    out: &mut dyn Write,
) -> io::Result<TreeSummary> {
    write_tree_styled(trace, options, &TreeStyle::default(), out)
}

/// [`write_tree_with`], laid out as `style` says.
pub fn write_tree_styled(
    trace: &Trace,
    options: &Options,
    style: &TreeStyle,
    out: &mut dyn Write,
) -> io::Result<TreeSummary> {
    // Kernel functions' filters: applied to their lines only.
    if options
        .filters
        .iter()
        .chain(&options.notrace)
        .any(|p| p.module() == Some(super::style::KERNEL_MODULE))
    {
        let (rest, kernel) = super::style::KernelShown::split(options);
        let style = TreeStyle {
            kernel,
            ..style.clone()
        };
        return write_tree_styled(trace, &rest, &style, out);
    }
    if let Some(n) = style.last {
        return super::last::write_last(trace, options, style, n, out);
    }
    // One task: the same lines either way, without the merge (the fast
    // path of the common single-threaded trace).
    if !style.task_order && trace.info.tasks.len() > 1 {
        return write_by_time(trace, options, style, out);
    }
    let mut filter = Filter::new(trace, options, true);
    let mut out = Sink::new(out, style, trace, options);
    let mut summary = TreeSummary::default();
    let mut names = CallNames::with_options(trace, options);
    let mut progress = Progress::new("replay", trace.info.events, Progress::wanted(true));
    out.header()?;

    let mut first = true;
    for info in &trace.info.tasks {
        if filter.as_ref().is_some_and(|f| !f.wants_task(info)) {
            continue;
        }
        if !std::mem::take(&mut first) {
            writeln!(out)?;
        }
        writeln!(out, "{}", task_header(trace, info))?;
        out.task_started(info.tid);
        let events = match trace.task_events(info) {
            Ok(events) => events,
            Err(e) => {
                summary.errors.push(e);
                continue;
            }
        };
        // One loop per kind of source: the unfiltered one stays as fast.
        let mut pass = (&mut out, &mut names, &mut summary, &mut progress);
        match &mut filter {
            None => write_task(info, events, &mut pass)?,
            Some(f) => write_task(info, f.task(info, events), &mut pass)?,
        }
    }
    progress.finish();
    out.flush()?;
    Ok(summary)
}
