//! The call tree, uftrace style:
//!
//! ```text
//! # DURATION     TID     FUNCTION
//! # task 0: pid 4321, tid 4321 (prog), /usr/bin/prog, the program started
//!             [ 4321] | main() {
//!             [ 4321] |   parse_args() {
//!    0.210 us [ 4321] |     strtol();
//!    0.902 us [ 4321] |   } /* parse_args */
//!    0.118 us [ 4321] |   leaf();
//!    5.774 us [ 4321] | } /* main */
//! ```
//!
//! Every task of the trace is printed in one stream in time order (as
//! uftrace does; [`Merge`]): each line has its task's tid, each task its
//! own indentation; a task's header line `# task ID: pid P, tid T (COMM),
//! PROGRAM, ORIGIN` (ORIGIN: `the program started`, `thread of task N`,
//! `forked by task N`, `exec by task N`, `spawned by task N`) comes before
//! its first line. A forked child starts with the calls its parent had
//! open at the fork (their opening lines, at their depths). With
//! `--task-order` ([`TreeStyle`]) the tasks are printed one after the other
//! in the order of info.json (order of creation), tasks after the first
//! preceded by an empty line. Memory does not grow with the trace: with
//! the tasks running at one time and their depths. Within a task:
//! - a function whose exit directly follows its entry is a leaf, one line
//!   `name();` with its duration;
//!   (in time order: whose exit is the next event of its task, even if
//!   other tasks' lines come during it; the line is at its entry's time);
//! - otherwise `name() {` at entry and `} /* name */` with the duration at
//!   exit; 2 spaces of indent per depth, from depth 0;
//! - a recorded return value (`-R`, `-a`) reads as uftrace prints it: on
//!   a leaf `measure(3) = 6;`, on a closing line `} = 6; /* measure */`;
//! - beyond depth [`MAX_INDENT_DEPTH`] the indent stops growing: such lines
//!   have the indent of that depth followed by `(depth N) `, N the real
//!   depth (so lines stay short and the output linear in the events);
//! - an exit by `Unwind` adds ` (unwound)`;
//! - an exit of a function that is open but not on top closes the frames
//!   above it with `} /* name */ (not returned)`, without duration; so do
//!   the frames still open when a task's events end (the process exited or
//!   was killed below them, the thread was killed);
//! - an exit of a function that is not open at all (its entry was not
//!   recorded) prints `} /* name */ (entry not recorded)`;
//! - the calls an attach chain names (open when fctrace attached:
//!   `fctrace_format::argval`) open the task, `main() { /* entered before
//!   the trace began */`; those of a history chain (open where a flight
//!   recorder's kept history begins) have no opening line; what follows
//!   is at its depth inside them; their returns print `} /* name */
//!   (entry not recorded)`, or `(entry not in history)` for a history
//!   chain, without duration;
//! - the calls open where a `trace_on` trigger turned tracing on (a
//!   resume chain), entered while it was off, open there, `main() { /*
//!   entered while tracing was off */`, and close at their end marks,
//!   `} /* main */ (entry not recorded)`;
//! - of both chains, only the calls `-F`/`-N` show open: the recording's
//!   filters are applied to the chain here
//!   ([`ChainChoice`](super::filter::ChainChoice)), a display filter
//!   passes on a chain of the calls it shows (an `Args` event without
//!   function; a resume chain there opens all its calls) and their end
//!   marks as returns;
//! - a `Signal` record prints `/* signal SIGUSR1 */` (or `/* signal 40 */`)
//!   at the current depth, without duration: the calls of the handler
//!   follow at the same depth, as calls of the interrupted function; a
//!   fatal signal is the last line of its task before the frames closed as
//!   not returned;
//! - a `Lost` record prints `... N events lost ...`.
//!
//! With `--last N` ([`last`]) each task shows only its last N calls, with
//! the calls open around them, the task that crashed first.
//!
//! With colour on (`--color`, see [`super::term`]), the unit of a duration
//! of a millisecond or more and the markers above are painted; the
//! common lines take the same code either way.

use super::filter::{EventSource, Filter};
use super::names::{CallNames, TreeName, PIECE};
use super::term::{MAGENTA, RED, RESET, YELLOW};
use super::{is_broken_pipe, warn, Duration, Progress};
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, StoreError, TaskInfo, TaskOrigin, Trace};
use fctrace_options::known_signal_name as signal_name;
use fctrace_options::Options;
use std::io::{self, Write};
use std::rc::Rc;

mod last;

/// The first line of the tree.
pub const HEADER: &str = "# DURATION     TID     FUNCTION";

/// Deepest level whose lines are indented by 2 spaces per level; deeper
/// lines keep this indent and show their depth as `(depth N) `.
pub const MAX_INDENT_DEPTH: usize = 100;

/// What [`write_tree`] met besides the lines it wrote.
#[derive(Debug, Default)]
pub struct TreeSummary {
    /// Events read.
    pub events: u64,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read: the error ended that
    /// task's part of the tree (the other tasks went on).
    pub errors: Vec<StoreError>,
}

/// Prints the call tree of `trace` to `out` (buffered internally), then on
/// stderr: warnings for lost events and for the trace's load warnings.
/// Fails if a task file is unreadable, truncated or corrupt (after printing
/// everything that could be read) or if writing fails; a closed pipe
/// (`| head`) is not a failure.
#[cfg(any(test, feature = "testutil"))]
pub fn print_tree(trace: &Trace, out: &mut dyn Write) -> anyhow::Result<()> {
    print_tree_with(trace, &Options::default(), out)
}

/// How the tree is laid out (the options of `replay` and live mode that
/// are not filters).
#[derive(Clone, Debug, Default)]
pub struct TreeStyle {
    /// `--task-order`: each task's calls after the previous task's, not
    /// interleaved by time.
    pub task_order: bool,
    /// `-f`: the columns before the function, when not the default
    /// (`duration,tid`).
    pub fields: Option<Vec<Field>>,
    /// `--last N`: per task, only its last N calls, with the calls open
    /// around them; the task that crashed first ([`last`]).
    pub last: Option<u64>,
}

/// A column of `-f/--output-fields` (uftrace's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The call's duration (on leaves and closing lines).
    Duration,
    /// `[tid]`.
    Tid,
    /// The line's CLOCK_MONOTONIC time stamp, `SECONDS.NANOSECONDS` (an
    /// entry's for opening lines and leaves, an exit's for closing ones).
    Time,
    /// The time since the previous line of the same task.
    Delta,
    /// The time since the trace's first event.
    Elapsed,
    /// The task's thread name (comm).
    Task,
    /// The file name of the module of the line's function.
    Module,
}

impl Field {
    const ALL: [(&'static str, Field); 7] = [
        ("duration", Field::Duration),
        ("tid", Field::Tid),
        ("time", Field::Time),
        ("delta", Field::Delta),
        ("elapsed", Field::Elapsed),
        ("task", Field::Task),
        ("module", Field::Module),
    ];

    /// The column's title and width (with its leading space).
    fn title(self) -> (&'static str, usize) {
        match self {
            Field::Duration => ("DURATION", 11),
            Field::Tid => ("TID", 8),
            Field::Time => ("TIMESTAMP", 17),
            Field::Delta => ("DELTA", 11),
            Field::Elapsed => ("ELAPSED", 11),
            Field::Task => ("TASK", 16),
            Field::Module => ("MODULE", 16),
        }
    }
}

/// `-f FIELD,...` as uftrace takes it: a list of fields, `+FIELD,...` to
/// add them to the default `duration,tid`, or `none`. `None` for the
/// default.
pub fn parse_fields(spec: &str) -> Result<Option<Vec<Field>>, String> {
    let spec = spec.trim();
    if spec == "none" {
        return Ok(Some(Vec::new()));
    }
    let (mut fields, list) = match spec.strip_prefix('+') {
        Some(rest) => (vec![Field::Duration, Field::Tid], rest),
        None => (Vec::new(), spec),
    };
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(&(_, f)) = Field::ALL.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = Field::ALL.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown field `{name}` (fields: {}, or none)",
                known.join(", ")
            ));
        };
        if !fields.contains(&f) {
            fields.push(f);
        }
    }
    if fields.is_empty() {
        return Err(format!("`{spec}` names no field"));
    }
    Ok((fields != [Field::Duration, Field::Tid]).then_some(fields))
}

/// The `-f` columns of a pass: the fields and the origin of `elapsed`.
struct FieldCtx {
    fields: Vec<Field>,
    origin: u64,
}

/// What a task's lines show in the `-f` columns besides their duration,
/// set by the task before each line.
struct LineInfo {
    tid: String,
    comm: String,
    /// The line's time.
    ns: std::cell::Cell<u64>,
    /// The previous line's time (`delta`).
    prev: std::cell::Cell<Option<u64>>,
    module: std::cell::RefCell<String>,
}

/// The header line for `fields`.
fn fields_header(fields: &[Field]) -> String {
    if fields.is_empty() {
        return "# FUNCTION".to_string();
    }
    let mut h = String::new();
    for f in fields {
        let (title, width) = f.title();
        h.push_str(&format!("{title:>width$}"));
    }
    h.push_str("   FUNCTION");
    h.replace_range(0..1, "#");
    h
}

/// [`print_tree`] of the calls the display filters of `options` show
/// (see [`super::filter`]).
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

/// The header line of a task (without the newline).
pub fn task_header(trace: &Trace, task: &TaskInfo) -> String {
    let parent = task
        .parent
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let origin = match task.origin {
        TaskOrigin::Start if task.parent.is_none() => "the program started".to_string(),
        TaskOrigin::Start => format!("started by task {parent}"),
        TaskOrigin::Thread => format!("thread of task {parent}"),
        TaskOrigin::Fork => format!("forked by task {parent}"),
        TaskOrigin::Exec => format!("exec by task {parent}"),
        TaskOrigin::Spawn => format!("spawned by task {parent}"),
        TaskOrigin::Attach => "running when fctrace attached".to_string(),
    };
    format!(
        "# task {}: pid {}, tid {} ({}), {}, {origin}",
        task.id,
        task.pid,
        task.tid,
        task.comm,
        session_program(trace, task.session)
    )
}

/// The program of a session: its symbol table's executable, or for session
/// 0 without one the program fctrace ran.
pub fn session_program(trace: &Trace, session: u32) -> String {
    match trace.sessions.get(&session) {
        Some(table) => table.exe.clone(),
        None if session == 0 => trace.info.program.clone(),
        None => format!("<session {session}>"),
    }
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
    if let Some(n) = style.last {
        return last::write_last(trace, options, style, n, out);
    }
    // One task: the same lines either way, without the merge (the fast
    // path of the common single-threaded trace).
    if !style.task_order && trace.info.tasks.len() > 1 {
        return write_by_time(trace, options, style, out);
    }
    let mut filter = Filter::new(trace, options, true);
    let mut out = Sink::new(out, style, trace, options);
    let mut summary = TreeSummary::default();
    let mut names = CallNames::with_demangle(trace, options.demangle);
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

/// The tree of every task in one stream, in time order ([`write_by_time`]).
fn write_by_time(
    trace: &Trace,
    options: &Options,
    style: &TreeStyle,
    out: &mut dyn Write,
) -> io::Result<TreeSummary> {
    let mut filter = Filter::new(trace, options, true);
    let mut out = Sink::new(out, style, trace, options);
    let mut summary = TreeSummary::default();
    let mut names = CallNames::with_demangle(trace, options.demangle);
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
struct Merge<'a, 's, 't> {
    trace: &'t Trace,
    out: &'a mut Sink<'s>,
    names: &'a mut CallNames<'t>,
    summary: &'a mut TreeSummary,
    progress: &'a mut Progress,
}

/// What a parent keeps for its forked children not opened yet.
struct ForkWatch {
    /// The functions whose exits begin those children.
    funcs: Vec<u32>,
    /// `(function, entry time, the open calls with it)` at each entry of
    /// one of `funcs`, in time order.
    snaps: Vec<(u32, u64, Rc<Vec<Frame>>)>,
    /// Children not opened yet.
    pending: usize,
}

impl Merge<'_, '_, '_> {
    fn run<S: EventSource>(
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
    fn inherit<S: EventSource>(
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
fn first_exit(trace: &Trace, task: &TaskInfo) -> Option<(u32, u64)> {
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

/// The lines of one task.
fn write_task<S: EventSource>(
    info: &TaskInfo,
    events: S,
    (out, names, summary, progress): &mut (
        &mut Sink,
        &mut CallNames,
        &mut TreeSummary,
        &mut Progress,
    ),
) -> io::Result<()> {
    let fields = out.fields.is_some();
    let mut task = TaskState::new(info, events, fields);
    task.advance(summary);
    write_task_lines(&mut task, &mut (out, names, summary, progress))
}

/// The lines of a task from its next event (in `head`) on.
fn write_task_lines<S: EventSource>(
    task: &mut TaskState<S>,
    (out, names, summary, progress): &mut (
        &mut Sink,
        &mut CallNames,
        &mut TreeSummary,
        &mut Progress,
    ),
) -> io::Result<()> {
    while let Some(event) = task.head.take() {
        task.advance(summary);
        task.handle(event, out, names, summary)?;
        progress.update(summary.events);
    }
    task.finish(out)
}

/// Bytes gathered before they are written out.
const SINK_CAPACITY: usize = 1 << 16;

/// The output: lines are composed in place at the end of `buf`, which goes
/// to `out` when it holds [`SINK_CAPACITY`] bytes (no formatting machinery
/// and no copy per line: replay prints one line per call).
struct Sink<'a> {
    buf: Vec<u8>,
    out: &'a mut dyn Write,
    /// `-f` other than the default.
    fields: Option<Rc<FieldCtx>>,
    /// How a frame still open at the end of its task's events is closed:
    /// `(not returned)`, or `(detached)` when fctrace detached from the
    /// process while it was in progress.
    open_at_end: &'static str,
    /// The recording chose calls (`record -F`, `-N`, `--disable`): a
    /// system call made outside every recorded call is not shown (it
    /// belongs to calls the user left out).
    kernel_in_calls_only: bool,
    /// Which calls of a chain recorded by the agent (attach, or where
    /// tracing resumed) are opened when the events are not filtered.
    choice: super::filter::ChainChoice,
}

/// Spaces of the deepest indent, in whole [`PIECE`]s.
const INDENT: [u8; (2 * MAX_INDENT_DEPTH).div_ceil(PIECE) * PIECE] =
    [b' '; (2 * MAX_INDENT_DEPTH).div_ceil(PIECE) * PIECE];

/// Appends the first `len` bytes of `padded` (whole [`PIECE`]s, at least
/// `len` bytes) to `buf`: copies of a fixed size are a few instructions,
/// where the short copies of a line would each call `memcpy`.
#[inline(always)]
fn put_padded(buf: &mut Vec<u8>, padded: &[u8], len: usize) {
    let start = buf.len();
    for piece in padded[..len.div_ceil(PIECE) * PIECE].chunks_exact(PIECE) {
        let piece: &[u8; PIECE] = piece.try_into().unwrap_or(&[b' '; PIECE]);
        buf.extend_from_slice(piece);
    }
    buf.truncate(start + len);
}

impl<'a> Sink<'a> {
    fn new(
        out: &'a mut dyn Write,
        style: &TreeStyle,
        trace: &Trace,
        options: &Options,
    ) -> Sink<'a> {
        let fields = style.fields.as_ref().map(|f| {
            Rc::new(FieldCtx {
                fields: f.clone(),
                origin: if f.contains(&Field::Elapsed) {
                    super::filter::trace_start_ns(trace)
                } else {
                    0
                },
            })
        });
        Sink {
            buf: Vec::with_capacity(SINK_CAPACITY + 1024),
            out,
            fields,
            open_at_end: if trace.info.detached {
                " */ (detached)"
            } else {
                " */ (not returned)"
            },
            kernel_in_calls_only: Options::from_wire(&trace.info.options)
                .is_ok_and(|o| !o.filters.is_empty() || !o.notrace.is_empty() || o.disabled),
            choice: super::filter::ChainChoice::new(trace, options),
        }
    }

    /// The first line.
    fn header(&mut self) -> io::Result<()> {
        match &self.fields {
            None => writeln!(self, "{HEADER}"),
            Some(f) => {
                let h = fields_header(&f.fields);
                writeln!(self, "{h}")
            }
        }
    }
}

impl Sink<'_> {
    /// A line was appended to `buf`.
    #[inline]
    fn line_done(&mut self) -> io::Result<()> {
        if self.buf.len() >= SINK_CAPACITY {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The start of a line: duration column, task column, indent.
    #[inline(always)]
    fn start(&mut self, dur: Option<u64>, column: &Column, depth: usize) {
        if self.fields.is_some() {
            return self.start_fields(dur, column, depth);
        }
        let buf = &mut self.buf;
        match dur {
            Some(ns) => {
                buf.push(b' ');
                Duration(ns).push_to(buf);
                buf.push(b' ');
            }
            None => buf.extend_from_slice(b"            "),
        }
        put_padded(buf, &column.padded, column.len);
        if depth <= MAX_INDENT_DEPTH {
            put_padded(buf, &INDENT, depth * 2);
        } else {
            put_padded(buf, &INDENT, MAX_INDENT_DEPTH * 2);
            let _ = write!(buf, "(depth {depth}) ");
        }
    }

    /// [`start`](Self::start) with the `-f` columns.
    #[cold]
    #[inline(never)]
    fn start_fields(&mut self, dur: Option<u64>, column: &Column, depth: usize) {
        let (Some(ctx), Some(info)) = (self.fields.clone(), column.info.as_ref()) else {
            return;
        };
        let buf = &mut self.buf;
        let ns = info.ns.get();
        let duration = |buf: &mut Vec<u8>, v: Option<u64>| match v {
            Some(v) => {
                buf.push(b' ');
                Duration(v).push_to(buf);
            }
            None => buf.extend_from_slice(b"           "),
        };
        for f in &ctx.fields {
            match f {
                Field::Duration => duration(buf, dur),
                Field::Tid => buf.extend_from_slice(info.tid.as_bytes()),
                Field::Time => {
                    let _ = write!(buf, " {:>6}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
                }
                Field::Delta => {
                    duration(buf, info.prev.get().map(|p| ns.saturating_sub(p)));
                    info.prev.set(Some(ns));
                }
                Field::Elapsed => duration(buf, Some(ns.saturating_sub(ctx.origin))),
                Field::Task => {
                    let _ = write!(buf, " {:>15}", info.comm);
                }
                Field::Module => {
                    let _ = write!(buf, " {:>15}", info.module.borrow());
                }
            }
        }
        if !ctx.fields.is_empty() {
            buf.extend_from_slice(b" | ");
        }
        if depth <= MAX_INDENT_DEPTH {
            put_padded(buf, &INDENT, depth * 2);
        } else {
            put_padded(buf, &INDENT, MAX_INDENT_DEPTH * 2);
            let _ = write!(buf, "(depth {depth}) ");
        }
    }

    /// A whole line whose text (after the indent) is the first `len` bytes
    /// of `padded`, newline included.
    #[inline(always)]
    fn text_line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        (padded, len): (&[u8], usize),
    ) -> io::Result<()> {
        self.start(dur, column, depth);
        put_padded(&mut self.buf, padded, len);
        self.line_done()
    }

    /// One line whose text is the concatenation of `parts`. The lines of
    /// markers come here (the common lines do not): with colour on, they
    /// are painted on their way ([`Sink::painted_line`]).
    fn line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        parts: &[&str],
    ) -> io::Result<()> {
        if super::term::colour() {
            return self.painted_line(dur, column, depth, parts);
        }
        self.start(dur, column, depth);
        for p in parts {
            self.buf.extend_from_slice(p.as_bytes());
        }
        self.buf.push(b'\n');
        self.line_done()
    }
}

/// The markers that end a line, and their colours.
const END_MARKERS: [(&str, &str); 5] = [
    ("(unwound)", YELLOW),
    ("(not returned)", RED),
    ("(detached)", RED),
    ("(entry not recorded)", RED),
    ("(entry not in history)", RED),
];

impl Sink<'_> {
    /// [`Sink::line`] with colour on: a line ending in a marker of
    /// [`END_MARKERS`] has that marker painted; a signal's line
    /// (`/* signal SIGUSR1 */`) is magenta and a `... N events lost ...`
    /// line red, whole. (Kept apart from the writing of the events, so
    /// that code is the same with colour on or off.)
    #[cold]
    #[inline(never)]
    fn painted_line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        parts: &[&str],
    ) -> io::Result<()> {
        let text = parts.concat();
        let whole = if text.starts_with("/* signal ") {
            Some(MAGENTA)
        } else if text.starts_with("... ") && text.ends_with(" events lost ...") {
            Some(RED)
        } else {
            None
        };
        self.start(dur, column, depth);
        let painted = match whole {
            Some(colour) => format!("{colour}{text}{RESET}"),
            None => match END_MARKERS.iter().find(|(m, _)| text.ends_with(m)) {
                Some((mark, colour)) => {
                    let plain = &text[..text.len() - mark.len()];
                    format!("{plain}{colour}{mark}{RESET}")
                }
                None => text,
            },
        };
        self.buf.extend_from_slice(painted.as_bytes());
        self.buf.push(b'\n');
        self.line_done()
    }
}

impl Write for Sink<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        self.line_done()?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}

/// The task column of a task's lines, `[{tid:>5}] | ` (wider if
/// needed), padded to whole [`PIECE`]s.
struct Column {
    padded: Vec<u8>,
    len: usize,
    /// With `-f` other than the default.
    info: Option<Box<LineInfo>>,
}

impl Column {
    /// With what the `-f` columns show of `task`.
    fn with_info(task: &TaskInfo) -> Column {
        let mut c = Column::new(task.tid);
        c.info = Some(Box::new(LineInfo {
            tid: format!(" [{:>5}]", task.tid),
            comm: task.comm.clone(),
            ns: Default::default(),
            prev: Default::default(),
            module: Default::default(),
        }));
        c
    }

    fn new(tid: u32) -> Column {
        let mut digits = [0u8; 20];
        let tid = fctrace_format::digits::decimal(u64::from(tid), &mut digits);
        let mut padded = b"[".to_vec();
        padded.extend_from_slice(&b"     "[tid.len().min(5)..]);
        padded.extend_from_slice(tid);
        padded.extend_from_slice(b"] | ");
        let len = padded.len();
        padded.resize(len.div_ceil(PIECE) * PIECE, b' ');
        Column {
            padded,
            len,
            info: None,
        }
    }
}

#[derive(Clone)]
struct Frame {
    /// The function id, widened: a frame without padding bytes is stored
    /// whole (a 4-byte id and padding made a slow partial copy).
    func: u64,
    name: Rc<TreeName>,
    /// [`NOT_RECORDED`] for a call open when fctrace attached,
    /// [`NOT_IN_HISTORY`] for one open where a flight recorder's history
    /// begins.
    entry_ns: u64,
}

/// The `i`-th 64-bit word of a kernel event's payload (0 if it is short).
/// A signal the kernel delivered, as strace prints it: `--- SIGUSR1
/// {si_signo=SIGUSR1, si_code=SI_TKILL} ---`, and the action when it is
/// not a handler (`/* default action: terminate */`, `/* ignored */`).
fn kernel_signal_text(sig: u32, bytes: &[u8]) -> String {
    let sig = i32::try_from(sig).unwrap_or(i32::MAX);
    let number = sig.to_string();
    let name = signal_name(sig).unwrap_or(&number);
    let code = payload_word(bytes, 0) as i64 as i32;
    let errno = payload_word(bytes, 1) as i64 as i32;
    let handler = payload_word(bytes, 2);
    let mut text = format!(
        "--- {name} {{si_signo={name}, si_code={}",
        super::syscalls::si_code_name(sig, code)
    );
    if errno != 0 {
        text.push_str(&format!(
            ", si_errno={}",
            super::syscalls::errno_name(errno)
        ));
    }
    text.push_str("} ---");
    match handler {
        0 => {
            text.push_str(" /* default action: ");
            text.push_str(super::syscalls::default_action(sig));
            text.push_str(" */");
        }
        1 => text.push_str(" /* ignored */"),
        _ => {}
    }
    text
}

fn payload_word(b: &[u8], i: usize) -> u64 {
    b.get(8 * i..8 * i + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap()))
}

/// `Frame::entry_ns` of a call whose entry was not recorded: open when
/// fctrace attached (an attach chain, `fctrace_format::argval`).
const NOT_RECORDED: u64 = u64::MAX;

/// `Frame::entry_ns` of a call open where the kept history of a flight
/// recorder's snapshot begins (a history chain: its entry was dropped).
const NOT_IN_HISTORY: u64 = u64::MAX - 1;

/// `Frame::entry_ns` of a call open where tracing resumed for the thread
/// (a `trace_on` trigger), entered while it was off: its entry was not
/// recorded; its return is an end mark (`fctrace_format::argval`).
const ENTERED_OFF: u64 = u64::MAX - 2;

/// The opening line of a call open when fctrace attached: `main() {
/// /* entered before the trace began */`.
const ENTERED_BEFORE: &str = " { /* entered before the trace began */";

/// The opening line of a call open where tracing resumed, entered while
/// it was off: `main() { /* entered while tracing was off */`.
const ENTERED_WHILE_OFF: &str = " { /* entered while tracing was off */";

impl Frame {
    /// A call of a chain (attach, history, or where tracing resumed): no
    /// entry recorded, no duration.
    fn without_entry(&self) -> bool {
        self.entry_ns >= ENTERED_OFF
    }
}

struct TaskState<S> {
    /// `[  tid] | `
    column: Column,
    session: u32,
    events: S,
    /// The next event (one of lookahead, for leaf detection).
    head: Option<Event>,
    stack: Vec<Frame>,
    /// A `Retval` met before the exit of a function that is not a leaf:
    /// `(func, value)`, shown on its closing line.
    retval: Option<(u32, String)>,
    /// The forked children of this task not started yet ([`Merge`]).
    forks: Option<Rc<std::cell::RefCell<ForkWatch>>>,
    /// The time of the last timed event read (the merge's key).
    last_ns: u64,
    /// `forks` or `column.info` is set: one test per event for both.
    extras: bool,
    /// The task began with a history chain: an exit without its entry is
    /// `(entry not in history)`.
    history: bool,
}

impl<S: EventSource> TaskState<S> {
    fn new(info: &TaskInfo, events: S, fields: bool) -> TaskState<S> {
        TaskState {
            column: if fields {
                Column::with_info(info)
            } else {
                Column::new(info.tid)
            },
            session: info.session,
            events,
            head: None,
            stack: Vec::new(),
            retval: None,
            forks: None,
            last_ns: 0,
            extras: fields,
            history: false,
        }
    }

    /// The time of the next event (payload events carry no time: that of
    /// the event before them).
    #[inline]
    fn key(&mut self) -> u64 {
        if let Some(e) = self.head {
            if e.kind != EventKind::Data {
                self.last_ns = e.ns;
            }
        }
        self.last_ns
    }

    /// The `-f` columns of the lines `event` makes: its time and module.
    #[cold]
    #[inline(never)]
    fn line_info(&mut self, event: &Event, names: &CallNames) {
        let Some(info) = &self.column.info else {
            return;
        };
        if event.kind == EventKind::Data {
            return;
        }
        info.ns.set(event.ns);
        let module = match event.kind {
            EventKind::Entry | EventKind::Exit | EventKind::Unwind => {
                names.module_file(self.session, event.func)
            }
            _ => "",
        };
        let mut m = info.module.borrow_mut();
        m.clear();
        m.push_str(module);
    }

    /// At the entry of a function whose exit begins a forked child: the
    /// calls open with it, for the child.
    #[cold]
    #[inline(never)]
    fn watch_fork(&mut self, event: &Event, names: &mut CallNames) {
        let Some(w) = &self.forks else {
            return;
        };
        let mut w = w.borrow_mut();
        if !w.funcs.contains(&event.func) {
            return;
        }
        let mut stack = self.stack.clone();
        stack.push(Frame {
            func: u64::from(event.func),
            name: names.get(self.session, event.func),
            entry_ns: event.ns,
        });
        w.snaps.push((event.func, event.ns, Rc::new(stack)));
    }

    /// Reads the next event into `head`; a read error ends the task.
    #[inline(always)]
    fn advance(&mut self, summary: &mut TreeSummary) {
        self.head = self.events.next_event();
        match self.head {
            Some(_) => summary.events += 1,
            None => summary.errors.extend(self.events.take_error()),
        }
    }

    // Inlined into both loops (task by task, by time): a call per event
    // costs about a tenth of replay's time.
    #[inline(always)]
    fn handle(
        &mut self,
        event: Event,
        out: &mut Sink,
        names: &mut CallNames,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        if self.extras {
            self.line_info(&event, names);
        }
        let column = &self.column;
        let depth = self.stack.len();
        match event.kind {
            EventKind::Entry => {
                if self.extras {
                    self.watch_fork(&event, names);
                }
                let mut note = self.events.backtrace(&event);
                // A backtrace recorded by the agent (an `Args` payload right
                // after the entry) wins over the one rebuilt from the calls.
                let mut taken_args = None;
                if matches!(self.head, Some(e) if e.kind == EventKind::Args && e.func == event.func)
                {
                    match self.take_backtrace_or_args(summary) {
                        // The calls open where tracing resumed, entered
                        // while it was off: opened before this entry.
                        Ok(bt) if bt.resume => {
                            if !self.events.chooses_calls() {
                                self.open_resumed(&bt.funcs, out, names)?;
                            }
                        }
                        Ok(bt) => {
                            let mut callers = bt.funcs;
                            if bt.cut {
                                callers.insert(0, u32::MAX);
                            }
                            note = Some(callers);
                        }
                        Err(args) => taken_args = Some(args),
                    }
                }
                if let Some(callers) = note {
                    self.backtrace_line(&callers, out, names)?;
                }
                let name = names.get(self.session, event.func);
                if let Some(args) = taken_args {
                    return self.entry_with_values(event, name, out, summary, Some(args));
                }
                let column = &self.column;
                let depth = self.stack.len();
                let leaf_exit = match self.head {
                    Some(next)
                        if next.func == event.func
                            && matches!(next.kind, EventKind::Exit | EventKind::Unwind) =>
                    {
                        Some(next)
                    }
                    _ => None,
                };
                match leaf_exit {
                    Some(exit) => {
                        let dur = exit.ns.saturating_sub(event.ns);
                        if exit.kind == EventKind::Exit {
                            out.text_line(Some(dur), column, depth, name.leaf_line())?;
                        } else {
                            out.line(Some(dur), column, depth, &[&name.name, "; (unwound)"])?;
                        }
                        self.advance(summary);
                        Ok(())
                    }
                    None => {
                        // Not a leaf as far as the next event says: it may
                        // be the call's values.
                        if let Some(Event {
                            kind: EventKind::Args | EventKind::Retval,
                            func,
                            ..
                        }) = self.head
                        {
                            if func == event.func {
                                return self.entry_with_values(event, name, out, summary, None);
                            }
                        }
                        out.text_line(None, column, depth, name.open_line())?;
                        self.stack.push(Frame {
                            func: u64::from(event.func),
                            name,
                            entry_ns: event.ns,
                        });
                        Ok(())
                    }
                }
            }
            EventKind::Exit | EventKind::Unwind => {
                let j = match self.stack.last() {
                    Some(top) if top.func == u64::from(event.func) => Some(depth - 1),
                    _ => self
                        .stack
                        .iter()
                        .rposition(|f| f.func == u64::from(event.func)),
                };
                match j {
                    Some(j) => {
                        while self.stack.len() > j + 1 {
                            self.close_not_returned(out)?;
                        }
                        let Some(frame) = self.stack.pop() else {
                            return Ok(());
                        };
                        if frame.without_entry() {
                            return self.close_unrecorded(event, frame, j, out);
                        }
                        let dur = event.ns.saturating_sub(frame.entry_ns);
                        let retval = match self.retval.take() {
                            Some((f, text)) if u64::from(f) == frame.func => Some(text),
                            _ => None,
                        };
                        if let Some(text) = retval {
                            // uftrace's shape: `} = 6; /* measure */`.
                            let end = if event.kind == EventKind::Exit {
                                " */"
                            } else {
                                " */ (unwound)"
                            };
                            out.line(
                                Some(dur),
                                &self.column,
                                j,
                                &["} = ", &text, "; /* ", frame.name.bare(), end],
                            )
                        } else if event.kind == EventKind::Exit {
                            out.text_line(Some(dur), &self.column, j, frame.name.close_line())
                        } else {
                            out.line(
                                Some(dur),
                                &self.column,
                                j,
                                &["} /* ", frame.name.bare(), " */ (unwound)"],
                            )
                        }
                    }
                    None => {
                        let name = names.get(self.session, event.func);
                        // In a task that begins with a history chain: a
                        // call it names, through display filters (they
                        // keep the chain), or one entered before it.
                        let why = if self.history || self.events.history() {
                            " */ (entry not in history)"
                        } else {
                            " */ (entry not recorded)"
                        };
                        out.line(None, column, depth, &["} /* ", name.bare(), why])
                    }
                }
            }
            EventKind::Signal => {
                let sig = i32::try_from(event.func).unwrap_or(i32::MAX);
                let number = event.func.to_string();
                let name = signal_name(sig).unwrap_or(&number);
                out.line(None, column, depth, &["/* signal ", name, " */"])
            }
            EventKind::Lost => {
                summary.lost_in_streams += u64::from(event.func);
                let count = event.func.to_string();
                out.line(None, column, depth, &["... ", &count, " events lost ..."])
            }
            EventKind::Retval => {
                let text = self.take_values(summary);
                self.retval = Some((event.func, text));
                Ok(())
            }
            EventKind::Args => {
                // Without its entry: the calls open when fctrace attached
                // (an attach chain) or where a flight recorder's history
                // begins (a history chain, in a task of any origin), else
                // not expected and skipped.
                let bytes = self.take_payload(summary);
                if let Some(chain) = fctrace_format::argval::decode_backtrace(&bytes) {
                    if chain.attached {
                        self.open_attached(chain, out, names)?;
                    } else if chain.end {
                        self.close_resumed(event, out)?;
                    } else if chain.resume {
                        // The calls a display filter chose, open where
                        // tracing resumed: all of them open here.
                        self.open_calls(&chain.funcs, ENTERED_WHILE_OFF, ENTERED_OFF, out, names)?;
                    }
                }
                Ok(())
            }
            EventKind::Data => Ok(()),
            EventKind::Syscall
            | EventKind::SyscallExit
            | EventKind::OffCpu
            | EventKind::PageFault
            | EventKind::KernelSignal
            | EventKind::KernelEntry
            | EventKind::KernelExit => self.kernel_event(event, out, summary),
        }
    }

    /// An entry followed by its argument values and maybe (a leaf) its
    /// return value: `add(2, 3) = 5;` or `greet("world") {`.
    #[cold]
    #[inline(never)]
    fn entry_with_values(
        &mut self,
        event: Event,
        name: Rc<TreeName>,
        out: &mut Sink,
        summary: &mut TreeSummary,
        taken_args: Option<String>,
    ) -> io::Result<()> {
        let depth = self.stack.len();
        let mut call = name.name.clone();
        let args = match taken_args {
            Some(a) => Some(a),
            None if matches!(self.head, Some(e) if e.kind == EventKind::Args && e.func == event.func) =>
            {
                self.advance(summary);
                Some(self.take_values(summary))
            }
            None => None,
        };
        if let Some(args) = args {
            // A C++ name's parameter list gives way to the values.
            let bare = fctrace_options::pattern::without_params(name.bare());
            call = format!("{bare}({args})");
        }
        let mut ret = None;
        if matches!(self.head, Some(e) if e.kind == EventKind::Retval && e.func == event.func) {
            self.advance(summary);
            ret = Some(self.take_values(summary));
        }
        match self.head {
            Some(next)
                if next.func == event.func
                    && matches!(next.kind, EventKind::Exit | EventKind::Unwind) =>
            {
                let dur = next.ns.saturating_sub(event.ns);
                self.advance(summary);
                let ret = ret.map(|r| format!(" = {r}")).unwrap_or_default();
                let end = if next.kind == EventKind::Exit {
                    ";"
                } else {
                    "; (unwound)"
                };
                out.line(Some(dur), &self.column, depth, &[&call, &ret, end])
            }
            _ => {
                if let Some(r) = ret {
                    self.retval = Some((event.func, r));
                }
                out.line(None, &self.column, depth, &[&call, " {"])?;
                self.stack.push(Frame {
                    func: u64::from(event.func),
                    name,
                    entry_ns: event.ns,
                });
                Ok(())
            }
        }
    }

    /// The values of the payload whose `Data` events start at `head`.
    fn take_values(&mut self, summary: &mut TreeSummary) -> String {
        let bytes = self.take_payload(summary);
        super::args::format_payload(&bytes)
    }

    /// The bytes of the payload whose `Data` events start at `head`.
    fn take_payload(&mut self, summary: &mut TreeSummary) -> Vec<u8> {
        let mut bytes = Vec::new();
        while let Some(e) = self.head {
            if e.kind != EventKind::Data {
                break;
            }
            super::args::push_data(&e, &mut bytes);
            self.advance(summary);
        }
        bytes
    }

    /// Takes the `Args` event at `head` and its payload: a recorded
    /// backtrace, or else the argument values (formatted).
    #[cold]
    #[inline(never)]
    fn take_backtrace_or_args(
        &mut self,
        summary: &mut TreeSummary,
    ) -> Result<fctrace_format::argval::Backtrace, String> {
        self.advance(summary);
        let bytes = self.take_payload(summary);
        fctrace_format::argval::decode_backtrace(&bytes)
            .ok_or_else(|| super::args::format_payload(&bytes))
    }

    /// `/* backtrace: main > a > b */` (a `backtrace` trigger).
    fn backtrace_line(
        &self,
        callers: &[u32],
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        let mut text = String::from("/* backtrace: ");
        for (i, &f) in callers.iter().enumerate() {
            if i > 0 {
                text.push_str(" > ");
            }
            if f == u32::MAX {
                // Outer callers left out of a recorded backtrace.
                text.push_str("...");
            } else {
                text.push_str(names.get(self.session, f).bare());
            }
        }
        if callers.is_empty() {
            text.push_str("(none)");
        }
        text.push_str(" */");
        out.line(None, &self.column, self.stack.len(), &[&text])
    }

    /// Tracing resumed for the thread at an entry (without `-F`/`-N`),
    /// with the calls of `chain` open (outermost first, as the agent walked the stack): those
    /// the tree has not open (entered while tracing was off) are opened,
    /// `name() { /* entered while tracing was off */`, after the last one
    /// it has open (a call it has open is found in the chain in order; the
    /// calls of the chain before it that it has not are not drawn: they
    /// cannot be put around lines already printed).
    #[cold]
    #[inline(never)]
    fn open_resumed(
        &mut self,
        chain: &[u32],
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        let mut j = 0;
        for frame in &self.stack {
            match chain[j..].iter().position(|&f| u64::from(f) == frame.func) {
                Some(k) => j += k + 1,
                None => break,
            }
        }
        let shown = out
            .choice
            .shown(names.trace().sessions.get(&self.session), chain);
        let opened: Vec<u32> = (j..chain.len())
            .filter(|&i| shown[i])
            .map(|i| chain[i])
            .collect();
        self.open_calls(&opened, ENTERED_WHILE_OFF, ENTERED_OFF, out, names)
    }

    /// An attach chain (or a history chain) without display filters (or
    /// the calls a display filter chose of one): its calls shown
    /// ([`ChainChoice`](super::filter::ChainChoice)) open the task,
    /// `name() { /* entered before the trace began */`; those of a history
    /// chain have no opening line.
    #[cold]
    #[inline(never)]
    fn open_attached(
        &mut self,
        chain: fctrace_format::argval::Backtrace,
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        self.history |= chain.history;
        if chain.history {
            for f in chain.funcs {
                let name = names.get(self.session, f);
                self.stack.push(Frame {
                    func: u64::from(f),
                    name,
                    entry_ns: NOT_IN_HISTORY,
                });
            }
            return Ok(());
        }
        let funcs = if self.events.chooses_calls() {
            chain.funcs
        } else {
            let shown = out
                .choice
                .shown(names.trace().sessions.get(&self.session), &chain.funcs);
            (chain.funcs.iter().zip(shown))
                .filter_map(|(&f, shown)| shown.then_some(f))
                .collect()
        };
        self.open_calls(&funcs, ENTERED_BEFORE, NOT_RECORDED, out, names)
    }

    /// Opens the calls of `funcs` (outermost first), whose entries were
    /// not recorded: `name` then `text` at its depth (`entry_ns`: why).
    fn open_calls(
        &mut self,
        funcs: &[u32],
        text: &str,
        entry_ns: u64,
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        for &f in funcs {
            let name = names.get(self.session, f);
            let depth = self.stack.len();
            out.line(None, &self.column, depth, &[&name.name, text])?;
            self.stack.push(Frame {
                func: u64::from(f),
                name,
                entry_ns,
            });
        }
        Ok(())
    }

    /// The end mark of a call open where tracing resumed (it returned or
    /// was unwound): the innermost such call of its function is closed,
    /// `} /* name */ (entry not recorded)`, the calls above it as not
    /// returned. An end mark of a call the tree did not open is skipped.
    #[cold]
    #[inline(never)]
    fn close_resumed(&mut self, event: Event, out: &mut Sink) -> io::Result<()> {
        let func = u64::from(event.func);
        let Some(j) = self
            .stack
            .iter()
            .rposition(|f| f.func == func && f.entry_ns == ENTERED_OFF)
        else {
            return Ok(());
        };
        while self.stack.len() > j + 1 {
            self.close_not_returned(out)?;
        }
        match self.stack.pop() {
            Some(frame) => self.close_unrecorded(event, frame, j, out),
            None => Ok(()),
        }
    }

    /// The return (or unwinding) of a call open when fctrace attached,
    /// at depth `j`: `} /* name */ (entry not recorded)`, no duration; of
    /// one open where a flight recorder's history begins: `(entry not in
    /// history)`.
    #[cold]
    #[inline(never)]
    fn close_unrecorded(
        &mut self,
        event: Event,
        frame: Frame,
        j: usize,
        out: &mut Sink,
    ) -> io::Result<()> {
        let unwound = if event.kind == EventKind::Unwind {
            " (unwound)"
        } else {
            ""
        };
        let why = if frame.entry_ns == NOT_IN_HISTORY {
            " */ (entry not in history)"
        } else {
            " */ (entry not recorded)"
        };
        match self.retval.take() {
            Some((f, text)) if u64::from(f) == frame.func => out.line(
                None,
                &self.column,
                j,
                &["} = ", &text, "; /* ", frame.name.bare(), why, unwound],
            ),
            _ => out.line(
                None,
                &self.column,
                j,
                &["} /* ", frame.name.bare(), why, unwound],
            ),
        }
    }

    /// A kernel event (`record -k`) at the current depth: a system call,
    /// time off the CPU, page faults. With calls chosen at record time,
    /// those outside every recorded call are not shown (a call with its
    /// return).
    #[cold]
    #[inline(never)]
    fn kernel_event(
        &mut self,
        event: Event,
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        let depth = self.stack.len();
        let bytes = self.take_payload(summary);
        if depth == 0 && out.kernel_in_calls_only {
            // With the kernel functions it ran.
            while matches!(self.head, Some(n) if matches!(n.kind, EventKind::KernelEntry | EventKind::KernelExit))
            {
                self.advance(summary);
                self.take_payload(summary);
            }
            if event.kind == EventKind::Syscall
                && matches!(self.head, Some(n) if n.kind == EventKind::SyscallExit && n.func == event.func)
            {
                self.advance(summary);
                self.take_payload(summary);
            }
            return Ok(());
        }
        match event.kind {
            EventKind::Syscall | EventKind::SyscallExit => {
                self.syscall(event, depth, &bytes, out, summary)
            }
            EventKind::KernelSignal => {
                let text = kernel_signal_text(event.func, &bytes);
                out.line(None, &self.column, depth, &[&text])
            }
            EventKind::KernelEntry | EventKind::KernelExit => {
                self.kernel_functions(event, bytes, depth, out, summary)
            }
            _ => self.kernel_note(event, depth, &bytes, out, summary),
        }
    }

    /// Kernel functions (`record -K`) from `first` on, while they follow,
    /// from `depth`: `[kernel] vfs_read() {`, `[kernel] rw_verify_area();`
    /// and `} /* [kernel] vfs_read */` with their durations.
    fn kernel_functions(
        &mut self,
        first: Event,
        first_bytes: Vec<u8>,
        depth: usize,
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        // The name after a function event's values (an exit's duration).
        let name_of = |b: &[u8], at: usize| -> String {
            let n = b
                .get(at..at + 2)
                .map_or(0, |l| u16::from_le_bytes([l[0], l[1]]) as usize);
            String::from_utf8_lossy(b.get(at + 2..at + 2 + n).unwrap_or(&[])).into_owned()
        };
        let mut open: Vec<String> = Vec::new();
        let mut next = Some((first, first_bytes));
        while let Some((e, bytes)) = next.take() {
            if e.kind == EventKind::KernelEntry {
                let name = name_of(&bytes, 0);
                // A leaf: its exit right after.
                if matches!(self.head, Some(h) if h.kind == EventKind::KernelExit) {
                    self.advance(summary);
                    let exit = self.take_payload(summary);
                    let dur = payload_word(&exit, 0);
                    out.line(
                        Some(dur),
                        &self.column,
                        depth + open.len(),
                        &["[kernel] ", &name, "();"],
                    )?;
                } else {
                    out.line(
                        None,
                        &self.column,
                        depth + open.len(),
                        &["[kernel] ", &name, "() {"],
                    )?;
                    open.push(name);
                }
            } else if let Some(name) = open.pop() {
                let dur = payload_word(&bytes, 0);
                out.line(
                    Some(dur),
                    &self.column,
                    depth + open.len(),
                    &["} /* [kernel] ", &name, " */"],
                )?;
            }
            if let Some(h) = self.head {
                if matches!(h.kind, EventKind::KernelEntry | EventKind::KernelExit) {
                    self.advance(summary);
                    next = Some((h, self.take_payload(summary)));
                }
            }
        }
        // Not returned when its events end.
        while let Some(name) = open.pop() {
            out.line(
                None,
                &self.column,
                depth + open.len(),
                &["} /* [kernel] ", &name, " */ (not returned)"],
            )?;
        }
        Ok(())
    }

    /// A system call (`record -k`), at the current depth: one line
    /// `read(3, 0x7ffd..., 512) = 512` with its duration, when its return
    /// follows; `= ?` without one (`exit_group`, or the task's events
    /// end); `<... read resumed> = 512` for a return whose entry was not
    /// recorded (the `execve` that started the program).
    fn syscall(
        &mut self,
        event: Event,
        depth: usize,
        bytes: &[u8],
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        let word = payload_word;
        if event.kind == EventKind::SyscallExit {
            let ret = word(bytes, 0) as i64;
            let name = super::syscalls::name(event.func);
            let result = super::syscalls::result_text(event.func, ret);
            return out.line(
                None,
                &self.column,
                depth,
                &["<... ", &name, " resumed> = ", &result],
            );
        }
        let mut args = [0u64; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = word(bytes, i);
        }
        // The path it was given, after the arguments: length, bytes.
        let path = bytes.get(48..50).and_then(|l| {
            let n = u16::from_le_bytes([l[0], l[1]]) as usize;
            bytes.get(50..50 + n)
        });
        let call = super::syscalls::call_text(event.func, &args, path);
        // The kernel functions it ran (-K): `read(...) {`, them, `} = R`.
        let mut nested = false;
        if let Some(first) = self.head.filter(|h| h.kind == EventKind::KernelEntry) {
            out.line(None, &self.column, depth, &[&call, " {"])?;
            self.advance(summary);
            let b = self.take_payload(summary);
            self.kernel_functions(first, b, depth + 1, out, summary)?;
            nested = true;
        }
        match self.head {
            Some(next) if next.kind == EventKind::SyscallExit && next.func == event.func => {
                self.advance(summary);
                let ret_bytes = self.take_payload(summary);
                let ret = word(&ret_bytes, 0) as i64;
                let result = super::syscalls::result_text(event.func, ret);
                let dur = next.ns.saturating_sub(event.ns);
                // The time the thread spent off the CPU in it.
                let off = match word(&ret_bytes, 1) {
                    0 => String::new(),
                    ns => format!(" /* off-CPU {} */", Duration(ns).to_string().trim()),
                };
                if nested {
                    let name = super::syscalls::name(event.func);
                    return out.line(
                        Some(dur),
                        &self.column,
                        depth,
                        &["} = ", &result, " /* ", &name, " */", &off],
                    );
                }
                out.line(
                    Some(dur),
                    &self.column,
                    depth,
                    &[&call, " = ", &result, &off],
                )
            }
            _ if nested => out.line(None, &self.column, depth, &["} = ?"]),
            _ => out.line(None, &self.column, depth, &[&call, " = ?"]),
        }
    }

    /// `/* off-CPU 1.002 ms (blocked) */` (or `(preempted)`: runnable,
    /// waiting for a CPU) for time the thread spent off the CPU outside a
    /// system call; `/* 3 page faults */` for the page faults in a row
    /// (`record -k`).
    fn kernel_note(
        &mut self,
        event: Event,
        depth: usize,
        bytes: &[u8],
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        if event.kind == EventKind::OffCpu {
            let word = |i: usize| payload_word(bytes, i);
            let how = if word(1) != 0 { "preempted" } else { "blocked" };
            let text = format!(
                "/* off-CPU {} ({how}) */",
                Duration(word(0)).to_string().trim()
            );
            return out.line(None, &self.column, depth, &[&text]);
        }
        let mut n = 1u64;
        while matches!(self.head, Some(e) if e.kind == EventKind::PageFault) {
            self.advance(summary);
            self.take_payload(summary);
            n += 1;
        }
        let text = if n == 1 {
            "/* 1 page fault */".to_string()
        } else {
            format!("/* {n} page faults */")
        };
        out.line(None, &self.column, depth, &[&text])
    }

    fn close_not_returned(&mut self, out: &mut Sink) -> io::Result<()> {
        self.close_open(out, " */ (not returned)")
    }

    /// Closes the frame on top with `} /* name` and `end`.
    fn close_open(&mut self, out: &mut Sink, end: &str) -> io::Result<()> {
        if let Some(frame) = self.stack.pop() {
            let depth = self.stack.len();
            out.line(
                None,
                &self.column,
                depth,
                &["} /* ", frame.name.bare(), end],
            )?;
        }
        Ok(())
    }

    /// The task's events have ended: close what is still open.
    fn finish(&mut self, out: &mut Sink) -> io::Result<()> {
        while !self.stack.is_empty() {
            let end = out.open_at_end;
            self.close_open(out, end)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::{Args, Entry, Exit, Lost, Unwind};

    fn render(trace: &Trace) -> (String, TreeSummary) {
        let mut out = Vec::new();
        let summary = write_tree(trace, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    /// `record -K`'s kernel functions nest under the system call that ran
    /// them (`read(...) {`, `} = 5 /* read */`); signals from the kernel's
    /// side show as strace prints them.
    #[test]
    fn kernel_functions_and_signals() {
        use fctrace_format::store::kernel::{sys_file_of, KernelEvent, KernelWriter};
        let (dir, trace) = fake_trace(&[FakeTask::main(
            4321,
            vec![ev(Entry, 0, 1000), ev(Exit, 0, 90_000)],
        )]);
        let path = dir.path().join(sys_file_of(&trace.info.tasks[0].file));
        let mut w = KernelWriter::new(std::fs::File::create(&path).unwrap(), &path).unwrap();
        let f = |ns, name: &str| KernelEvent::FuncEntry {
            ns,
            name: name.into(),
        };
        let x = |ns, dur, name: &str| KernelEvent::FuncExit {
            ns,
            dur,
            name: name.into(),
        };
        for e in [
            KernelEvent::Enter {
                nr: 0,
                ns: 2_000,
                args: [3, 0x1000, 16, 0, 0, 0],
            },
            f(2_999, "ksys_read"),
            f(2_999, "vfs_read"),
            x(3_300, 301, "vfs_read"),
            KernelEvent::Exit {
                nr: 0,
                ns: 5_000,
                ret: 5,
            },
            x(5_999, 3_000, "ksys_read"),
            KernelEvent::Signal {
                ns: 6_000,
                sig: 10,
                code: -6,
                errno: 0,
                handler: 0x1234,
                flags: 0,
            },
            KernelEvent::Signal {
                ns: 7_000,
                sig: 11,
                code: 1,
                errno: 0,
                handler: 0,
                flags: 0,
            },
        ] {
            w.write(&e).unwrap();
        }
        w.finish().unwrap();
        let trace = Trace::open(dir.path()).unwrap();
        let (text, _) = render(&trace);
        let body: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            body,
            [
                "            [ 4321] | main() {",
                "            [ 4321] |   read(3, 0x1000, 16) {",
                "            [ 4321] |     [kernel] ksys_read() {",
                "   0.301 us [ 4321] |       [kernel] vfs_read();",
                "   3.000 us [ 4321] |     } /* [kernel] ksys_read */",
                "   3.000 us [ 4321] |   } = 5 /* read */",
                "            [ 4321] |   --- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL} ---",
                "            [ 4321] |   --- SIGSEGV {si_signo=SIGSEGV, si_code=SEGV_MAPERR} --- \
                 /* default action: core */",
                "  89.000 us [ 4321] | } /* main */",
            ],
            "{text}"
        );
    }

    #[test]
    fn example_from_the_spec() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            4321,
            vec![
                ev(Entry, 0, 1000),
                ev(Entry, 1, 1100),
                ev(Entry, 2, 1200),
                ev(Exit, 2, 1410),
                ev(Exit, 1, 2002),
                ev(Entry, 3, 3000),
                ev(Exit, 3, 3118),
                ev(Exit, 0, 6774),
            ],
        )]);
        let (text, summary) = render(&trace);
        assert_eq!(
            text,
            "\
# DURATION     TID     FUNCTION
# task 4321: pid 4321, tid 4321 (prog), /usr/bin/prog, the program started
            [ 4321] | main() {
            [ 4321] |   parse_args() {
   0.210 us [ 4321] |     strtol();
   0.902 us [ 4321] |   } /* parse_args */
   0.118 us [ 4321] |   leaf();
   5.774 us [ 4321] | } /* main */
"
        );
        assert_eq!(summary.events, 8);
        assert!(summary.errors.is_empty());
    }

    #[test]
    fn calls_open_when_fctrace_attached_close_at_their_depth() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf. main > parse_args
        // were running when fctrace attached (an attach chain first): they
        // open the tree.
        let mut events = crate::testutil::payload_events(Args, 0, 900, |w| {
            assert!(w.attach_chain(&[0, 1]));
        });
        events.extend([
            ev(Entry, 3, 1000),
            ev(Exit, 3, 1100),
            ev(Exit, 1, 1200),
            ev(Entry, 2, 1300),
            ev(Exit, 2, 1400),
            ev(Exit, 0, 1500),
        ]);
        let (_dir, trace) = fake_trace(&[FakeTask::main(4321, events)]);
        let (text, _) = render(&trace);
        let body: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            body,
            [
                "            [ 4321] | main() { /* entered before the trace began */",
                "            [ 4321] |   parse_args() { /* entered before the trace began */",
                "   0.100 us [ 4321] |     leaf();",
                "            [ 4321] |   } /* parse_args */ (entry not recorded)",
                "   0.100 us [ 4321] |   strtol();",
                "            [ 4321] | } /* main */ (entry not recorded)",
            ],
            "{text}"
        );
    }

    /// A flight recorder's snapshot: each task begins with a history
    /// chain (the calls open where its kept history begins), whatever its
    /// origin; read as an attach chain, their returns say `(entry not in
    /// history)`, painted as `(entry not recorded)` is.
    #[test]
    fn calls_open_where_the_history_begins_close_at_their_depth() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf.
        let history = |t: u64, funcs: &'static [u32]| {
            crate::testutil::payload_events(Args, funcs[0], t, |w| {
                assert!(w.history_chain(funcs));
            })
        };
        let mut main = history(900, &[0, 1]);
        main.extend([
            ev(Entry, 3, 1000),
            ev(Exit, 3, 1100),
            ev(Unwind, 1, 1200),
            ev(Entry, 2, 1300),
            ev(Exit, 2, 1400),
        ]);
        let mut thread = history(950, &[1]);
        // Then the exit of a call entered before the history, not in the
        // chain (its events lost).
        thread.extend([
            ev(Entry, 2, 1050),
            ev(Exit, 2, 1060),
            ev(Exit, 1, 1070),
            ev(Exit, 3, 1080),
        ]);
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(4321, main),
            FakeTask::thread(4322, 4321, thread),
        ]);
        let (text, _) = render(&trace);
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "   0.100 us [ 4321] |     leaf();",
                "   0.010 us [ 4322] |   strtol();",
                "            [ 4322] | } /* parse_args */ (entry not in history)",
                "            [ 4322] | } /* leaf */ (entry not in history)",
                "            [ 4321] |   } /* parse_args */ (entry not in history) (unwound)",
                "   0.100 us [ 4321] |   strtol();",
                "            [ 4321] | } /* main */ (not returned)",
            ],
            "{text}"
        );
        assert!(
            text.contains("thread of task 4321") && text.contains("the program started"),
            "{text}"
        );
        // In colour, the marker is painted as `(entry not recorded)` is.
        let mut bytes = Vec::new();
        let mut sink = Sink::new(
            &mut bytes,
            &TreeStyle::default(),
            &trace,
            &Options::default(),
        );
        sink.painted_line(
            None,
            &Column::new(7),
            0,
            &["} /* main */ (entry not in history)"],
        )
        .unwrap();
        sink.flush().unwrap();
        drop(sink);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            format!("            [    7] | }} /* main */ {RED}(entry not in history){RESET}\n")
        );
    }

    #[test]
    fn output_fields() {
        // main (1000..6774) { strtol (1200..1410) }, libc's strtol.
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            42,
            vec![
                ev(Entry, 0, 1000),
                ev(Entry, 2, 1200),
                ev(Exit, 2, 1410),
                ev(Exit, 0, 6774),
            ],
        )]);
        let with = |spec: &str| {
            let style = TreeStyle {
                fields: parse_fields(spec).unwrap(),
                ..TreeStyle::default()
            };
            let mut out = Vec::new();
            write_tree_styled(&trace, &Options::default(), &style, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(parse_fields("duration,tid"), Ok(None));
        assert_eq!(parse_fields("+tid"), Ok(None));
        assert!(parse_fields("addr")
            .unwrap_err()
            .contains("fields: duration"));
        assert_eq!(
            with("elapsed,delta,tid,module"),
            "\
#   ELAPSED      DELTA     TID          MODULE   FUNCTION
# task 42: pid 42, tid 42 (prog), /usr/bin/prog, the program started
   0.000 us            [   42]            prog | main() {
   0.200 us   0.200 us [   42]       libc.so.6 |   strtol();
   5.774 us   5.574 us [   42]            prog | } /* main */
"
        );
        assert_eq!(
            with("none"),
            "\
# FUNCTION
# task 42: pid 42, tid 42 (prog), /usr/bin/prog, the program started
main() {
  strtol();
} /* main */
"
        );
        let timed = with("+time,task");
        let line = timed.lines().nth(3).unwrap();
        // `   0.210 us [   42]    SSSS.NNNNNNNNN            prog | strtol();`
        let time = line[19..36].trim();
        let (secs, nanos) = time.split_once('.').unwrap();
        assert!(secs.parse::<u64>().is_ok() && nanos.len() == 9, "{timed}");
        assert!(line.ends_with("            prog |   strtol();"), "{timed}");
    }

    #[test]
    fn unwound_not_returned_lost_unknown_and_cpp() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf, 4 _Z3fooi, 5 _ZNK1S3getEv
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            7,
            vec![
                ev(Entry, 0, 0),
                ev(Entry, 4, 10),
                ev(Entry, 5, 20),
                ev(Unwind, 5, 1_020), // leaf, unwound
                ev(Entry, 1, 2_000),  // open
                ev(Entry, 3, 2_500),  // open (its exit is never seen)
                ev(Entry, 2, 2_600),  // leaf
                ev(Exit, 2, 2_700),
                ev(Unwind, 1, 3_000), // closes leaf as not returned, then parse_args unwound
                ev(Lost, 12, 3_100),  // a Lost record
                ev(Entry, 99, 3_200), // unknown id, leaf
                ev(Exit, 99, 3_250),
                ev(Exit, 3, 3_300),          // exit without entry
                ev(Exit, 4, 4_000),          // closes foo(int)
                ev(Entry, 1, 1_000_000_000), // never returns; nor does main
            ],
        )]);
        let (text, summary) = render(&trace);
        assert_eq!(
            text,
            "\
# DURATION     TID     FUNCTION
# task 7: pid 7, tid 7 (prog), /usr/bin/prog, the program started
            [    7] | main() {
            [    7] |   foo(int) {
   1.000 us [    7] |     S::get() const; (unwound)
            [    7] |     parse_args() {
            [    7] |       leaf() {
   0.100 us [    7] |         strtol();
            [    7] |       } /* leaf */ (not returned)
   1.000 us [    7] |     } /* parse_args */ (unwound)
            [    7] |     ... 12 events lost ...
   0.050 us [    7] |     <unknown #99>;
            [    7] |     } /* leaf */ (entry not recorded)
   3.990 us [    7] |   } /* foo(int) */
            [    7] |   parse_args() {
            [    7] |   } /* parse_args */ (not returned)
            [    7] | } /* main */ (not returned)
"
        );
        assert_eq!(summary.lost_in_streams, 12);
    }

    #[test]
    fn markers_and_long_durations_in_colour() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            7,
            vec![
                ev(Entry, 0, 0),
                ev(Entry, 2, 10),
                ev(Exit, 2, 2_500_010), // 2.5 ms: green unit
                ev(Entry, 1, 3_000_000),
                ev(Entry, 2, 3_000_100),
                ev(Unwind, 2, 3_000_200), // leaf, unwound
                ev(EventKind::Signal, 10, 3_000_300),
                ev(Lost, 12, 3_000_400),
                ev(Exit, 3, 3_000_500),       // exit without entry
                ev(Unwind, 1, 2_003_000_000), // 2 s: yellow unit, unwound
                ev(Entry, 3, 2_003_000_100),
                ev(Exit, 3, 62_003_000_100),  // a minute: red unit
                ev(Entry, 1, 62_003_000_200), // never returns; nor does main
            ],
        )]);
        crate::term::set_colour(true);
        let (text, _) = render(&trace);
        crate::term::set_colour(false);
        let (g, y, r, m, o) = ("\x1b[32m", "\x1b[33m", "\x1b[91m", "\x1b[35m", "\x1b[0m");
        let expected = format!(
            "\
# DURATION     TID     FUNCTION
# task 7: pid 7, tid 7 (prog), /usr/bin/prog, the program started
            [    7] | main() {{
   2.500 {g}ms{o} [    7] |   strtol();
            [    7] |   parse_args() {{
   0.100 us [    7] |     strtol(); {y}(unwound){o}
            [    7] |     {m}/* signal SIGUSR1 */{o}
            [    7] |     {r}... 12 events lost ...{o}
            [    7] |     }} /* leaf */ {r}(entry not recorded){o}
   2.000 {y}s{o}  [    7] |   }} /* parse_args */ {y}(unwound){o}
  60.000 {r}s{o}  [    7] |   leaf();
            [    7] |   parse_args() {{
            [    7] |   }} /* parse_args */ {r}(not returned){o}
            [    7] | }} /* main */ {r}(not returned){o}
"
        );
        assert_eq!(text, expected);
        // Without colour, the same text without the escapes.
        let (plain, _) = render(&trace);
        let mut stripped = expected;
        for code in [g, y, r, m, o] {
            stripped = stripped.replace(code, "");
        }
        assert_eq!(plain, stripped);
    }

    #[test]
    fn tasks_by_time_or_one_after_the_other() {
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(
                100,
                vec![
                    ev(Entry, 0, 0),
                    ev(Entry, 1, 100),
                    ev(Exit, 1, 400),
                    ev(Entry, 3, 500),
                    ev(Entry, 2, 600),
                    ev(Exit, 2, 610),
                    ev(Exit, 3, 700),
                    ev(Exit, 0, 2_000),
                ],
            ),
            FakeTask::thread(
                123456,
                100,
                vec![
                    ev(Entry, 3, 50),
                    ev(Entry, 2, 200),
                    ev(Exit, 2, 1_200),
                    ev(Exit, 3, 1_250),
                    ev(Entry, 2, 1_500),
                ],
            ),
        ]);
        // In time order (the default): main enters at 0, the thread's
        // leaf at 50, parse_args at 100, the thread's strtol at 200...
        let (text, _) = render(&trace);
        assert_eq!(
            text,
            "\
# DURATION     TID     FUNCTION
# task 100: pid 100, tid 100 (prog), /usr/bin/prog, the program started
            [  100] | main() {
# task 123456: pid 100, tid 123456 (prog), /usr/bin/prog, thread of task 100
            [123456] | leaf() {
   0.300 us [  100] |   parse_args();
   1.000 us [123456] |   strtol();
            [  100] |   leaf() {
   0.010 us [  100] |     strtol();
   0.200 us [  100] |   } /* leaf */
   1.200 us [123456] | } /* leaf */
            [123456] | strtol() {
            [123456] | } /* strtol */ (not returned)
   2.000 us [  100] | } /* main */
"
        );
        let mut out = Vec::new();
        let style = TreeStyle {
            task_order: true,
            ..TreeStyle::default()
        };
        write_tree_styled(&trace, &Options::default(), &style, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\
# DURATION     TID     FUNCTION
# task 100: pid 100, tid 100 (prog), /usr/bin/prog, the program started
            [  100] | main() {
   0.300 us [  100] |   parse_args();
            [  100] |   leaf() {
   0.010 us [  100] |     strtol();
   0.200 us [  100] |   } /* leaf */
   2.000 us [  100] | } /* main */

# task 123456: pid 100, tid 123456 (prog), /usr/bin/prog, thread of task 100
            [123456] | leaf() {
   1.000 us [123456] |   strtol();
   1.200 us [123456] | } /* leaf */
            [123456] | strtol() {
            [123456] | } /* strtol */ (not returned)
"
        );
    }

    #[test]
    fn empty_and_missing_symbols() {
        let (_dir, trace) = fake_trace(&[FakeTask::main(1, vec![])]);
        assert_eq!(
            render(&trace).0,
            format!(
                "{HEADER}\n# task 1: pid 1, tid 1 (prog), /usr/bin/prog, the program started\n"
            )
        );
        let (_dir, trace) = fake_trace(&[FakeTask {
            session: 9,
            ..FakeTask::main(2, vec![ev(Entry, 0, 0), ev(Exit, 0, 5)])
        }]);
        assert_eq!(
            render(&trace).0,
            format!(
                "{HEADER}\n# task 2: pid 2, tid 2 (prog), <session 9>, the program started\n   \
                 0.005 us [    2] | <unknown #0>;\n"
            )
        );
        assert_eq!(trace.load_warnings.len(), 1);
    }

    #[test]
    fn truncated_task_is_an_error_after_the_rest() {
        let (dir, trace) = fake_trace(&[
            FakeTask::main(1, vec![ev(Entry, 0, 0), ev(Exit, 0, 5)]),
            FakeTask::thread(2, 1, vec![ev(Entry, 1, 1), ev(Exit, 1, 3)]),
        ]);
        let path = fctrace_format::store::task_path(dir.path(), 2);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let (text, summary) = render(&trace);
        assert_eq!(
            text,
            format!(
                "{HEADER}\n# task 1: pid 1, tid 1 (prog), /usr/bin/prog, the program started\n   \
                 0.005 us [    1] | main();\n# task 2: pid 1, tid 2 (prog), /usr/bin/prog, \
                 thread of task 1\n"
            )
        );
        assert_eq!(summary.errors.len(), 1);
        let err = print_tree(&trace, &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string()
                .contains("tasks/2.dat is truncated after 0 events"),
            "{err}"
        );
    }

    #[test]
    fn signals_are_marked_where_they_came() {
        use fctrace_format::event::EventKind::Signal;
        // main -> parse_args, SIGUSR1 arrives: its handler (leaf) runs,
        // then parse_args goes on; SIGRTMIN+6 (40): a number; then a
        // SIGSEGV in strtol kills the task.
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            5,
            vec![
                ev(Entry, 0, 0),
                ev(Entry, 1, 10),
                ev(Signal, 10, 20),
                ev(Entry, 3, 30),
                ev(Exit, 3, 40),
                ev(Signal, 40, 50),
                ev(Exit, 1, 60),
                ev(Entry, 2, 70),
                ev(Signal, 11, 80),
            ],
        )]);
        let (text, _) = render(&trace);
        assert_eq!(
            text,
            "\
# DURATION     TID     FUNCTION
# task 5: pid 5, tid 5 (prog), /usr/bin/prog, the program started
            [    5] | main() {
            [    5] |   parse_args() {
            [    5] |     /* signal SIGUSR1 */
   0.010 us [    5] |     leaf();
            [    5] |     /* signal 40 */
   0.050 us [    5] |   } /* parse_args */
            [    5] |   strtol() {
            [    5] |     /* signal SIGSEGV */
            [    5] |   } /* strtol */ (not returned)
            [    5] | } /* main */ (not returned)
"
        );
    }

    #[test]
    fn deep_lines_show_their_depth() {
        let depth = 250_000u32;
        let mut events = Vec::new();
        for i in 0..depth {
            events.push(ev(Entry, 3, u64::from(i)));
        }
        events.push(ev(Entry, 2, 1_000_000));
        events.push(ev(Exit, 2, 1_000_001));
        for i in 0..depth {
            events.push(ev(Exit, 3, 2_000_000 + u64::from(i)));
        }
        let (_dir, trace) = fake_trace(&[FakeTask::main(9, events)]);
        let started = std::time::Instant::now();
        let (text, summary) = render(&trace);
        assert!(summary.errors.is_empty());
        // Linear: well under a second for half a million events (a
        // quadratic indent would take minutes).
        assert!(started.elapsed().as_secs() < 20);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 2 * depth as usize + 1);
        let prefix = "            [    9] | ";
        let width = prefix.len() + 2 * MAX_INDENT_DEPTH;
        assert_eq!(lines[2], format!("{prefix}leaf() {{"));
        assert_eq!(
            lines[2 + MAX_INDENT_DEPTH],
            format!("{prefix}{:w$}leaf() {{", "", w = 2 * MAX_INDENT_DEPTH)
        );
        assert_eq!(
            lines[3 + MAX_INDENT_DEPTH],
            format!(
                "{:width$}(depth {}) leaf() {{",
                prefix,
                MAX_INDENT_DEPTH + 1
            )
        );
        assert_eq!(
            lines[2 + depth as usize],
            format!(
                "   0.001 us [    9] | {:w$}(depth {depth}) strtol();",
                "",
                w = 2 * MAX_INDENT_DEPTH
            )
        );
        assert!(
            lines.iter().all(|l| l.len() <= width + 40),
            "a line is too long"
        );
        assert_eq!(lines.last().unwrap(), &"   2.250 ms [    9] | } /* leaf */");
    }

    #[test]
    fn tasks_with_one_tid_exec() {
        use fctrace_format::store::TaskOrigin;
        // Task 0 forks task 1 (pid 21), which execs (task 2, same tid).
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(20, vec![ev(Entry, 0, 0), ev(Exit, 0, 100)]),
            FakeTask {
                id: 1,
                origin: TaskOrigin::Fork,
                parent: Some(20),
                ..FakeTask::main(21, vec![ev(Entry, 1, 10)])
            },
            FakeTask {
                id: 2,
                origin: TaskOrigin::Exec,
                parent: Some(1),
                comm: "ls".into(),
                ..FakeTask::main(21, vec![ev(Entry, 0, 30), ev(Exit, 0, 40)])
            },
        ]);
        let (text, _) = render(&trace);
        assert_eq!(
            text,
            "\
# DURATION     TID     FUNCTION
# task 20: pid 20, tid 20 (prog), /usr/bin/prog, the program started
   0.100 us [   20] | main();
# task 1: pid 21, tid 21 (prog), /usr/bin/prog, forked by task 20
            [   21] | parse_args() {
            [   21] | } /* parse_args */ (not returned)
# task 2: pid 21, tid 21 (ls), /usr/bin/prog, exec by task 1
   0.010 us [   21] | main();
"
        );
    }
}
