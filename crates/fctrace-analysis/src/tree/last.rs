//! `replay --last N`: per task, only its last N calls, with the calls
//! around them, the task that crashed first:
//!
//! ```text
//! # DURATION     TID     FUNCTION
//! # task 0: pid 4321, tid 4321 (app), /usr/bin/app, the program started
//! # last 3 of 100006 calls; the task that crashed (SIGSEGV)
//!             [ 4321] | main() {
//!             [ 4321] |   run() {
//!    0.052 us [ 4321] |     step();
//!             [ 4321] |     parse() {
//!             [ 4321] |       deref_null() {
//!             [ 4321] |         /* signal SIGSEGV */
//!             [ 4321] |       } /* deref_null */ (not returned)
//!             ...
//!
//! # task 1: pid 4321, tid 4322 (app), /usr/bin/app, thread of task 0
//! # last 3 of 5000 calls
//! ...
//! ```
//!
//! A task's calls are counted by their entries, as the display filters
//! show them. The first call shown is the one whose entry is the N-th
//! last; the calls open at that entry come before it as their opening
//! lines at their depths (without their argument values), closed where
//! they end as in the whole tree; calls open when fctrace attached or
//! where tracing resumed open as in the whole tree (`main() { /* entered
//! before the trace began */`), those of a history chain have no opening
//! line. From that entry on, the task's lines are those
//! of the whole tree (`--task-order`): durations, markers, the fatal
//! signal's line and the calls closed `(not returned)` after it.
//!
//! The task first is the one whose last event shown is a signal (a fatal
//! one: nothing of the task follows), the process's killing signal if
//! several; without one, the task whose events end last. The other tasks
//! follow in the order of info.json.
//!
//! It streams: two passes over each task's events, the first counting its
//! entries, the second writing the lines from the first entry shown on
//! (the lines before it are composed into a sink that drops them, so the
//! open calls, depths and values are exactly the whole tree's). Memory is
//! that of the tree (the open calls) plus a few numbers per task.

use super::frame::{Frame, ENTERED_BEFORE, ENTERED_OFF, ENTERED_WHILE_OFF, NOT_RECORDED};
use super::sink::Sink;
use super::style::{task_header, LineInfo, TreeStyle, TreeSummary};
use super::task::{write_task_lines, TaskState};
use crate::filter::{EventSource, Filter};
use crate::names::CallNames;
use crate::progress::Progress;
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, ExitStatus, TaskInfo, Trace};
use fctrace_options::known_signal_name as signal_name;
use fctrace_options::Options;
use std::io::{self, Write};

/// What the first pass learns of a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ending {
    /// Entries shown.
    entries: u64,
    /// The signal of the task's last call step, when it is one: the
    /// signal that killed it (`(signal, time)`).
    fatal: Option<(u32, u64)>,
    /// The time of its last event.
    last_ns: u64,
    /// Events read.
    events: u64,
}

/// The first pass over one task's events.
fn ending<S: EventSource>(mut events: S, progress: &mut Progress, done: &mut u64) -> Ending {
    let mut end = Ending::default();
    while let Some(e) = events.next_event() {
        end.events += 1;
        if e.kind == EventKind::Data {
            continue;
        }
        end.last_ns = end.last_ns.max(e.ns);
        if e.kind.is_call_step() {
            end.fatal = (e.kind == EventKind::Signal).then_some((e.func, e.ns));
            if e.kind == EventKind::Entry {
                end.entries += 1;
            }
        }
        if end.events & 0xffff == 0 {
            progress.update(*done + end.events);
        }
    }
    // The second pass reports a read error.
    let _ = events.take_error();
    *done += end.events;
    end
}

/// The order of the tasks: the one that crashed (else the one that ended
/// last) first, then the others as they are.
fn first_task(endings: &[Ending], killed_by: Option<u32>) -> Option<usize> {
    let crashed = |want: Option<u32>| {
        endings
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.fatal.map(|(sig, ns)| (i, sig, ns)))
            .filter(|&(_, sig, _)| want.is_none_or(|w| w == sig))
            .max_by_key(|&(i, _, ns)| (ns, std::cmp::Reverse(i)))
            .map(|(i, _, _)| i)
    };
    if let Some(i) = killed_by
        .and_then(|s| crashed(Some(s)))
        .or_else(|| crashed(None))
    {
        return Some(i);
    }
    endings
        .iter()
        .enumerate()
        .filter(|(_, e)| e.events > 0)
        .max_by_key(|&(i, e)| (e.last_ns, std::cmp::Reverse(i)))
        .map(|(i, _)| i)
}

/// The line under a task's header: what part of it follows.
fn note(n: u64, end: &Ending, first: bool) -> String {
    let mut s = if end.entries == 0 {
        "# no calls".to_string()
    } else if end.entries <= n {
        match end.entries {
            1 => "# its 1 call".to_string(),
            all => format!("# all {all} calls"),
        }
    } else {
        format!("# last {n} of {} calls", end.entries)
    };
    if first {
        match end.fatal {
            Some((sig, _)) => {
                let number = sig.to_string();
                let name = i32::try_from(sig)
                    .ok()
                    .and_then(signal_name)
                    .unwrap_or(&number);
                s.push_str(&format!("; the task that crashed ({name})"));
            }
            None if end.events > 0 => s.push_str("; the task that ended last"),
            None => {}
        }
    }
    s
}

/// Writes the last `n` calls of each task of `trace` ([module](self)).
pub(super) fn write_last(
    trace: &Trace,
    options: &Options,
    style: &TreeStyle,
    n: u64,
    out: &mut dyn Write,
) -> io::Result<TreeSummary> {
    let mut filter = Filter::new(trace, options, true);
    let mut out = Sink::new(out, style, trace, options);
    let mut nowhere = io::sink();
    let mut skipped = Sink::new(&mut nowhere, style, trace, options);
    let mut summary = TreeSummary::default();
    let mut names = CallNames::with_options(trace, options);
    let events = trace.info.events;
    let mut counting = Progress::new("counting calls", events, Progress::wanted(true));
    out.header()?;
    let tasks: Vec<&TaskInfo> = trace
        .info
        .tasks
        .iter()
        .filter(|t| filter.as_ref().is_none_or(|f| f.wants_task(t)))
        .collect();
    // The first pass: each task's entries and ending.
    let mut done = 0;
    let endings: Vec<Ending> = tasks
        .iter()
        .map(|info| match trace.task_events(info) {
            Err(_) => Ending::default(),
            Ok(events) => match &mut filter {
                None => ending(events, &mut counting, &mut done),
                Some(f) => ending(f.task(info, events), &mut counting, &mut done),
            },
        })
        .collect();
    counting.finish();
    let mut progress = Progress::new("replay", events, Progress::wanted(true));
    let killed_by = match trace.info.exit {
        Some(ExitStatus::Signal { signal, .. }) => u32::try_from(signal).ok(),
        _ => None,
    };
    let first = first_task(&endings, killed_by);
    let order = first
        .into_iter()
        .chain((0..tasks.len()).filter(|&i| Some(i) != first));
    for (k, i) in order.enumerate() {
        let (info, end) = (tasks[i], &endings[i]);
        if k > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{}", task_header(trace, info))?;
        writeln!(out, "{}", note(n, end, k == 0))?;
        let events = match trace.task_events(info) {
            Ok(events) => events,
            Err(e) => {
                summary.errors.push(e);
                continue;
            }
        };
        let skip = end.entries.saturating_sub(n);
        let mut pass = Pass {
            out: &mut out,
            skipped: &mut skipped,
            names: &mut names,
            summary: &mut summary,
            progress: &mut progress,
        };
        match &mut filter {
            None => pass.task(info, events, skip)?,
            Some(f) => pass.task(info, f.task(info, events), skip)?,
        }
    }
    progress.finish();
    out.flush()?;
    Ok(summary)
}

/// The second pass's state.
struct Pass<'a, 's, 'n, 't> {
    out: &'a mut Sink<'s>,
    /// Where the lines before the first call shown go (nowhere).
    skipped: &'a mut Sink<'n>,
    names: &'a mut CallNames<'t>,
    summary: &'a mut TreeSummary,
    progress: &'a mut Progress,
}

impl Pass<'_, '_, '_, '_> {
    /// The lines of one task from its entry number `skip` (0: the first)
    /// on, after the calls open there.
    fn task<S: EventSource>(&mut self, info: &TaskInfo, events: S, skip: u64) -> io::Result<()> {
        let fields = self.out.fields.is_some();
        let mut task = TaskState::new(info, events, fields);
        task.advance(self.summary);
        // Up to the entry number `skip`, the lines go nowhere (the state
        // they leave is the whole tree's).
        let mut entries = 0u64;
        let shown = |e: &Event, entries: u64| e.kind == EventKind::Entry && entries == skip;
        while let Some(event) = task.head.filter(|e| skip > 0 && !shown(e, entries)) {
            task.advance(self.summary);
            entries += u64::from(event.kind == EventKind::Entry);
            task.handle(event, self.skipped, self.names, self.summary)?;
            self.progress.update(self.summary.events);
        }
        self.skipped.buf.clear();
        if skip > 0 {
            self.context(&task)?;
        }
        let mut pass = (
            &mut *self.out,
            &mut *self.names,
            &mut *self.summary,
            &mut *self.progress,
        );
        write_task_lines(&mut task, &mut pass)
    }

    /// The opening lines of the calls open before the first call shown.
    fn context<S: EventSource>(&mut self, task: &TaskState<S>) -> io::Result<()> {
        let info = task.column.info.as_ref();
        let prev = info.map(|i| i.prev.take());
        for (depth, frame) in task.stack.iter().enumerate() {
            // Calls open when fctrace attached or where tracing resumed
            // open as in the whole tree; those of a history chain do not.
            let text = match frame.entry_ns {
                NOT_RECORDED => ENTERED_BEFORE,
                ENTERED_OFF => ENTERED_WHILE_OFF,
                _ if frame.without_entry() => continue,
                _ => {
                    if let Some(info) = info {
                        context_info(info, frame, task.session, self.names);
                    }
                    self.out
                        .text_line(None, &task.column, depth, frame.name.open_line())?;
                    continue;
                }
            };
            self.out
                .line(None, &task.column, depth, &[&frame.name.name, text])?;
        }
        if let (Some(info), Some(prev)) = (info, prev) {
            info.prev.set(prev);
        }
        Ok(())
    }
}

/// The `-f` columns of the opening line of `frame`: its entry's time and
/// module.
fn context_info(info: &LineInfo, frame: &Frame, session: u32, names: &CallNames) {
    info.ns.set(frame.entry_ns);
    let func = u32::try_from(frame.func).unwrap_or(u32::MAX);
    let mut m = info.module.borrow_mut();
    m.clear();
    m.push_str(names.module_file(session, func));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(entries: u64, fatal: Option<(u32, u64)>, last_ns: u64) -> Ending {
        Ending {
            entries,
            fatal,
            last_ns,
            events: 2 * entries + 1,
        }
    }

    #[test]
    fn the_task_that_crashed_comes_first() {
        let plain = [end(3, None, 10), end(4, None, 30), end(5, None, 20)];
        assert_eq!(first_task(&plain, None), Some(1));
        let crashed = [
            end(3, None, 10),
            end(4, None, 30),
            end(5, Some((11, 15)), 15),
        ];
        assert_eq!(first_task(&crashed, Some(11)), Some(2));
        assert_eq!(first_task(&crashed, None), Some(2));
        // Two signals last: the one that killed the process wins.
        let two = [end(3, Some((6, 40)), 40), end(4, Some((11, 30)), 30)];
        assert_eq!(first_task(&two, Some(11)), Some(1));
        assert_eq!(first_task(&two, None), Some(0));
        assert_eq!(first_task(&[Ending::default()], None), None);
        assert_eq!(first_task(&[], None), None);
    }

    #[test]
    fn notes() {
        assert_eq!(note(5, &end(100, None, 1), false), "# last 5 of 100 calls");
        assert_eq!(note(5, &end(3, None, 1), false), "# all 3 calls");
        assert_eq!(note(5, &end(1, None, 1), false), "# its 1 call");
        assert_eq!(note(5, &Ending::default(), true), "# no calls");
        assert_eq!(
            note(5, &end(100, Some((11, 1)), 1), true),
            "# last 5 of 100 calls; the task that crashed (SIGSEGV)"
        );
        assert_eq!(
            note(5, &end(100, None, 1), true),
            "# last 5 of 100 calls; the task that ended last"
        );
    }
}
