//! Every task in one stream in time order ([`write_by_time`]): the tasks
//! running at one time are read together, a forked child after its
//! parent's fork.

use super::sink::Sink;
use super::style::{task_header, TreeStyle, TreeSummary};
use super::task::{ForkWatch, TaskState};
use crate::filter::{EventSource, Filter};
use crate::names::CallNames;
use crate::progress::Progress;
use fctrace_format::event::EventKind;
use fctrace_format::store::{TaskInfo, TaskOrigin, Trace};
use fctrace_options::Options;
use std::io::{self, Write};
use std::rc::Rc;

/// The tree of every task in one stream, in time order ([`write_by_time`]).
pub(super) fn write_by_time(
    trace: &Trace,
    options: &Options,
    style: &TreeStyle,
    out: &mut dyn Write,
) -> io::Result<TreeSummary> {
    let mut filter = Filter::new(trace, options, true);
    let mut out = Sink::new(out, style, trace, options);
    let mut summary = TreeSummary::default();
    let mut names = CallNames::with_options(trace, options);
    let mut progress = Progress::new("replay", trace.info.events, Progress::wanted(true));
    out.header()?;
    let tasks: Vec<&TaskInfo> = trace
        .info
        .tasks
        .iter()
        .filter(|t| filter.as_ref().is_none_or(|f| f.wants_task(t)))
        .collect();
    let mut merge = Merge {
        trace,
        out: &mut out,
        names: &mut names,
        summary: &mut summary,
        progress: &mut progress,
    };
    // One loop per kind of source: the unfiltered one stays as fast.
    match &mut filter {
        None => merge.run(&tasks, |_, events| events)?,
        Some(f) => merge.run(&tasks, |info, events| f.task(info, events))?,
    }
    progress.finish();
    out.flush()?;
    Ok(summary)
}

/// The k-way merge by time of the tasks' events ([`write_by_time`]).
///
/// A task's events are opened when time reaches its first event (the
/// header of its first chunk says when: [`Trace::first_event_ns`]) and
/// closed at their end: memory holds the tasks running at a time, not
/// every task of the trace. The task whose next event is the earliest
/// (ties: the first in info.json) writes its lines for as long as its
/// events come before every other task's next one: a trace of one thread
/// is one loop as in `--task-order`. Its header line comes before its
/// first line; the headers of tasks without events come last.
///
/// A forked child starts inside the calls its parent had open at the
/// fork: its stream begins with the exit of the function that forked
/// (`fork`), entered in the parent. The parent's open calls at the last
/// entry of that function before the child's first event (kept for the
/// children not yet opened) are the child's first lines, at their depths,
/// with the parent's entry times, so that its exits close them.
pub(super) struct Merge<'a, 's, 't> {
    pub(super) trace: &'t Trace,
    pub(super) out: &'a mut Sink<'s>,
    pub(super) names: &'a mut CallNames<'t>,
    pub(super) summary: &'a mut TreeSummary,
    pub(super) progress: &'a mut Progress,
}

impl Merge<'_, '_, '_> {
    pub(super) fn run<S: EventSource>(
        &mut self,
        tasks: &[&TaskInfo],
        mut open: impl FnMut(&TaskInfo, fctrace_format::store::TaskEvents) -> S,
    ) -> io::Result<()> {
        use std::cmp::Reverse;
        use std::collections::{BinaryHeap, HashMap};
        let trace = self.trace;
        // (first event time, order) of each task with events, latest
        // first (popped from the end).
        let mut pending: Vec<(u64, usize)> = Vec::new();
        let mut empty: Vec<usize> = Vec::new();
        for (i, t) in tasks.iter().enumerate() {
            match trace.first_event_ns(t) {
                Some(ns) => pending.push((ns, i)),
                None if t.events > 0 => pending.push((0, i)),
                None => empty.push(i),
            }
        }
        pending.sort_unstable_by_key(|&k| Reverse(k));
        // Forked children by parent id: (child's order, its first
        // function, the time of its first event).
        let mut children: HashMap<u32, Vec<(usize, u32, u64)>> = HashMap::new();
        for (i, c) in tasks.iter().enumerate() {
            if c.origin != TaskOrigin::Fork {
                continue;
            }
            let Some(parent) = c.parent.and_then(|p| tasks.iter().find(|t| t.id == p)) else {
                continue;
            };
            if parent.session != c.session {
                continue;
            }
            if let Some((func, ns)) = first_exit(trace, c) {
                children.entry(parent.id).or_default().push((i, func, ns));
            }
        }
        let mut watches: HashMap<u32, Rc<std::cell::RefCell<ForkWatch>>> = HashMap::new();
        let mut slots: Vec<Option<TaskState<S>>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        // Reverse((time of the next event, order, slot)).
        let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
        loop {
            let next_open = pending.last().copied();
            let next_event = heap.peek().map(|Reverse((ns, order, _))| (*ns, *order));
            match (next_open, next_event) {
                (Some(o), e) if e.is_none_or(|e| o <= e) => {
                    pending.pop();
                    let (_, order) = o;
                    let info = tasks[order];
                    writeln!(self.out, "{}", task_header(trace, info))?;
                    self.out.task_started(info.tid);
                    let events = match trace.task_events(info) {
                        Ok(events) => events,
                        Err(e) => {
                            self.summary.errors.push(e);
                            continue;
                        }
                    };
                    let fields = self.out.fields.is_some();
                    let mut task = TaskState::new(info, open(info, events), fields);
                    if let Some(kids) = children.get(&info.id) {
                        let w = Rc::new(std::cell::RefCell::new(ForkWatch {
                            funcs: kids.iter().map(|k| k.1).collect(),
                            snaps: Vec::new(),
                            pending: kids.len(),
                        }));
                        watches.insert(info.id, w.clone());
                        task.forks = Some(w);
                        task.extras = true;
                    }
                    if info.origin == TaskOrigin::Fork {
                        self.inherit(&mut task, info, order, &children, &mut watches)?;
                    }
                    task.advance(self.summary);
                    if task.head.is_none() {
                        task.finish(self.out)?;
                        continue;
                    }
                    let slot = free.pop().unwrap_or(slots.len());
                    if slot == slots.len() {
                        slots.push(None);
                    }
                    heap.push(Reverse((task.key(), order, slot)));
                    slots[slot] = Some(task);
                }
                (_, Some(_)) => {
                    let Some(Reverse((_, order, slot))) = heap.pop() else {
                        break;
                    };
                    // This task goes on while its events come first.
                    let limit = match (heap.peek(), pending.last()) {
                        (Some(Reverse((ns, o, _))), Some(&p)) => (*ns, *o).min(p),
                        (Some(Reverse((ns, o, _))), None) => (*ns, *o),
                        (None, Some(&p)) => p,
                        (None, None) => (u64::MAX, usize::MAX),
                    };
                    let Some(task) = slots[slot].as_mut() else {
                        continue;
                    };
                    // Locals: the loop keeps them in registers.
                    let (out, names, summary) =
                        (&mut *self.out, &mut *self.names, &mut *self.summary);
                    let progress = &mut *self.progress;
                    while let Some(event) = task.head.take() {
                        task.advance(summary);
                        task.handle(event, out, names, summary)?;
                        progress.update(summary.events);
                        let Some(next) = task.head else {
                            break;
                        };
                        // The next event's time, as `key` (payload events
                        // follow their call's at once: no other task's
                        // line comes between them).
                        if next.kind != EventKind::Data
                            && (next.ns > limit.0 || (next.ns == limit.0 && order > limit.1))
                        {
                            break;
                        }
                    }
                    if task.head.is_some() {
                        heap.push(Reverse((task.key(), order, slot)));
                    } else if let Some(mut task) = slots[slot].take() {
                        task.finish(self.out)?;
                        free.push(slot);
                    }
                }
                _ => break,
            }
        }
        for i in empty {
            writeln!(self.out, "{}", task_header(trace, tasks[i]))?;
        }
        Ok(())
    }

    /// Starts a forked child inside its parent's open calls at the fork.
    pub(super) fn inherit<S: EventSource>(
        &mut self,
        task: &mut TaskState<S>,
        info: &TaskInfo,
        order: usize,
        children: &std::collections::HashMap<u32, Vec<(usize, u32, u64)>>,
        watches: &mut std::collections::HashMap<u32, Rc<std::cell::RefCell<ForkWatch>>>,
    ) -> io::Result<()> {
        let Some(parent) = info.parent else {
            return Ok(());
        };
        let Some(&(_, func, first)) = children
            .get(&parent)
            .and_then(|kids| kids.iter().find(|k| k.0 == order))
        else {
            return Ok(());
        };
        let Some(w) = watches.get(&parent).cloned() else {
            return Ok(());
        };
        let mut w = w.borrow_mut();
        let stack = w
            .snaps
            .iter()
            .rev()
            .find(|(f, ns, _)| *f == func && *ns <= first)
            .map(|s| s.2.clone());
        w.pending = w.pending.saturating_sub(1);
        if w.pending == 0 {
            w.snaps.clear();
            w.funcs.clear();
        }
        drop(w);
        if let Some(stack) = stack {
            for frame in stack.iter() {
                let depth = task.stack.len();
                self.out
                    .text_line(None, &task.column, depth, frame.name.open_line())?;
                task.stack.push(frame.clone());
            }
        }
        Ok(())
    }
}

/// A forked child's first event when it is an exit (of the function that
/// forked): the function and the event's time.
pub(super) fn first_exit(trace: &Trace, task: &TaskInfo) -> Option<(u32, u64)> {
    let mut events = trace.task_events(task).ok()?;
    let e = std::iter::from_fn(|| events.next_event()).find(|e| {
        matches!(
            e.kind,
            EventKind::Entry
                | EventKind::Exit
                | EventKind::Unwind
                | EventKind::Signal
                | EventKind::Lost
        )
    })?;
    matches!(e.kind, EventKind::Exit | EventKind::Unwind).then_some((e.func, e.ns))
}
