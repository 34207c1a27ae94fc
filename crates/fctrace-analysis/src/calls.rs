//! Calls rebuilt from a task's events: the one place where entries and
//! exits are paired for the readers that work on whole calls (graph, dump
//! formats, flame graph, Parquet, TUI). [`Calls`] streams: its memory is
//! the open calls of the task (its depth), never the trace.
//!
//! Pairing follows the tree's rules (see [`super::tree`]):
//! - an `Exit` or `Unwind` of the call on top ends it ([`End::Returned`],
//!   [`End::Unwound`]);
//! - an exit of a call that is open but not on top first ends the calls
//!   above it as [`End::NotReturned`], at the time of that exit;
//! - an exit of a function that is not open at all is an
//!   [`Step::Unmatched`] (its entry was not recorded);
//! - the calls still open when the task's events end are ended as
//!   [`End::NotReturned`] at the time of the task's last event;
//! - the calls an attach or history chain names (open when fctrace
//!   attached, or where a flight recorder's kept history begins) are
//!   entered at the chain's time, outermost first, as [`Step::Enter`]s of
//!   calls whose entry was not recorded ([`Open::entry_recorded`]), so
//!   that the calls under them have their real depth.
//!
//! `Args` payloads after an entry are the call's argument values (a
//! recorded backtrace or resume chain is not: the filters use those), a
//! `Retval` payload before an exit its return value; both are kept as the
//! raw payload bytes ([`super::args::format_payload`] turns them into
//! text).
//!
//! [`Functions`] gives calls of every session one identity per function
//! (module and symbol), as the report counts them.

use super::filter::EventSource;
use super::names::unknown;
use super::progress::Progress;
use super::syscalls::SYSCALL_MODULE;
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, StoreError, TaskInfo, Trace};
use std::collections::HashMap;
use std::io;

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its function returned.
    Returned,
    /// Its frame vanished without returning (longjmp, exception, thread
    /// exit).
    Unwound,
    /// It never returned in the trace: a caller returned or unwound past
    /// it, or the task's events ended (process exit, kill, a full disk).
    /// Its end time is when that was seen: not a measured duration.
    NotReturned,
}

/// A call still open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    pub func: u32,
    pub start_ns: u64,
    /// Sum of the durations of its direct children that ended so far.
    pub children_ns: u64,
    /// Argument payload, when recorded.
    pub args: Option<Vec<u8>>,
    /// False for a call named by an attach or history chain: its start is
    /// the chain's time, not its entry's.
    pub entry_recorded: bool,
}

/// A call that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub func: u32,
    /// Number of calls open around it (0: outermost).
    pub depth: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Sum of the durations of its direct children.
    pub children_ns: u64,
    pub end: End,
    /// Argument payload, when recorded.
    pub args: Option<Vec<u8>>,
    /// Return value payload, when recorded.
    pub retval: Option<Vec<u8>>,
    /// As [`Open::entry_recorded`].
    pub entry_recorded: bool,
}

impl Call {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// What happened next in a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A call was entered: it is the top of [`Calls::stack`], with its
    /// arguments when they were recorded.
    Enter { func: u32, ns: u64 },
    /// A call ended: it is no longer on [`Calls::stack`], its callers are.
    Leave(Call),
    /// The exit of a function without a recorded entry (tracing started
    /// below it, or its entry was lost).
    Unmatched { func: u32, ns: u64, end: End },
    /// A signal was delivered (its handler's calls follow, nested in the
    /// open calls).
    Signal { signal: u32, ns: u64 },
    /// `count` events were lost here.
    Lost { count: u32, ns: u64 },
}

/// The calls of one task, in the order they are entered and end.
pub struct Calls<S> {
    src: S,
    head: Option<Event>,
    stack: Vec<Open>,
    /// Ends queued by one exit: the frames above it, then itself.
    queued: std::collections::VecDeque<Step>,
    /// A `Retval` payload waiting for its exit: `(func, payload)`.
    retval: Option<(u32, Vec<u8>)>,
    /// Calls of a chain still to enter, outermost first, at a time.
    chain: std::collections::VecDeque<(u32, u64)>,
    last_ns: u64,
    events: u64,
    started: bool,
}

impl<S: EventSource> Calls<S> {
    pub fn new(src: S) -> Calls<S> {
        Calls {
            src,
            head: None,
            stack: Vec::new(),
            queued: Default::default(),
            retval: None,
            chain: Default::default(),
            last_ns: 0,
            events: 0,
            started: false,
        }
    }

    /// The calls open now, outermost first.
    pub fn stack(&self) -> &[Open] {
        &self.stack
    }

    /// Events read so far.
    pub fn events_read(&self) -> u64 {
        self.events
    }

    /// The read error that ended the events, once they have all been read.
    pub fn take_error(&mut self) -> Option<StoreError> {
        self.src.take_error()
    }

    fn advance(&mut self) {
        self.head = self.src.next_event();
        if let Some(e) = &self.head {
            self.events += 1;
            self.last_ns = self.last_ns.max(e.ns);
        }
    }

    /// The payload bytes of the `Data` events at `head`.
    fn take_payload(&mut self) -> Vec<u8> {
        let mut bytes = Vec::new();
        while let Some(e) = self.head {
            if e.kind != EventKind::Data {
                break;
            }
            super::args::push_data(&e, &mut bytes);
            self.advance();
        }
        bytes
    }

    /// Ends the frames above index `j` as not returned, then frame `j`.
    fn end_at(&mut self, j: usize, ns: u64, end: End) {
        while self.stack.len() > j + 1 {
            self.end_top(ns, End::NotReturned);
        }
        self.end_top(ns, end);
    }

    fn end_top(&mut self, ns: u64, end: End) {
        if let Some(step) = self.leave_top(ns, end) {
            self.queued.push_back(step);
        }
    }

    /// Ends the frame on top: its [`Step::Leave`].
    #[inline]
    fn leave_top(&mut self, ns: u64, end: End) -> Option<Step> {
        let open = self.stack.pop()?;
        let end_ns = ns.max(open.start_ns);
        let dur = end_ns - open.start_ns;
        if let Some(parent) = self.stack.last_mut() {
            parent.children_ns = parent.children_ns.saturating_add(dur);
        }
        let retval = match self.retval.take() {
            Some((f, v)) if f == open.func && end != End::NotReturned => Some(v),
            other => {
                self.retval = other;
                None
            }
        };
        Some(Step::Leave(Call {
            func: open.func,
            depth: self.stack.len(),
            start_ns: open.start_ns,
            end_ns,
            children_ns: open.children_ns,
            end,
            args: open.args,
            retval,
            entry_recorded: open.entry_recorded,
        }))
    }

    /// The next step; `None` once the task's events (and its open calls)
    /// are all done.
    pub fn next_step(&mut self) -> Option<Step> {
        if let Some(step) = self.queued.pop_front() {
            return Some(step);
        }
        if let Some((func, ns)) = self.chain.pop_front() {
            self.stack.push(Open {
                func,
                start_ns: ns,
                children_ns: 0,
                args: None,
                entry_recorded: false,
            });
            return Some(Step::Enter { func, ns });
        }
        if !self.started {
            self.started = true;
            self.advance();
        }
        loop {
            let Some(event) = self.head.take() else {
                // The end: close what is open.
                if self.stack.is_empty() {
                    return None;
                }
                let ns = self.last_ns;
                self.end_at(0, ns, End::NotReturned);
                return self.queued.pop_front();
            };
            self.advance();
            match event.kind {
                EventKind::Entry => {
                    self.stack.push(Open {
                        func: event.func,
                        start_ns: event.ns,
                        children_ns: 0,
                        args: None,
                        entry_recorded: true,
                    });
                    if matches!(self.head, Some(e) if e.kind == EventKind::Args && e.func == event.func)
                    {
                        self.advance();
                        let bytes = self.take_payload();
                        if fctrace_format::argval::decode_backtrace(&bytes).is_none() {
                            if let Some(top) = self.stack.last_mut() {
                                top.args = Some(bytes);
                            }
                        }
                    }
                    return Some(Step::Enter {
                        func: event.func,
                        ns: event.ns,
                    });
                }
                EventKind::Exit | EventKind::Unwind => {
                    let end = if event.kind == EventKind::Exit {
                        End::Returned
                    } else {
                        End::Unwound
                    };
                    let j = match self.stack.last() {
                        // The common case: the call on top returns (no
                        // frame above it to queue first).
                        Some(top) if top.func == event.func => {
                            return self.leave_top(event.ns, end);
                        }
                        _ => match self.stack.iter().rposition(|o| o.func == event.func) {
                            Some(j) => j,
                            None => {
                                self.retval = None;
                                return Some(Step::Unmatched {
                                    func: event.func,
                                    ns: event.ns,
                                    end,
                                });
                            }
                        },
                    };
                    self.end_at(j, event.ns, end);
                    return self.queued.pop_front();
                }
                EventKind::Retval => {
                    let bytes = self.take_payload();
                    self.retval = Some((event.func, bytes));
                }
                EventKind::Args => {
                    // Not after its entry: an attach or history chain
                    // opens the calls it names (entered one step at a
                    // time); a resume chain's end mark or the values of a
                    // call the filters hid are not a call's.
                    let bytes = self.take_payload();
                    if let Some(chain) =
                        fctrace_format::argval::decode_backtrace(&bytes).filter(|c| c.attached)
                    {
                        self.chain
                            .extend(chain.funcs.into_iter().map(|f| (f, event.ns)));
                        if let Some(step) = self.next_step() {
                            return Some(step);
                        }
                    }
                }
                EventKind::Signal => {
                    return Some(Step::Signal {
                        signal: event.func,
                        ns: event.ns,
                    })
                }
                EventKind::Lost => {
                    return Some(Step::Lost {
                        count: event.func,
                        ns: event.ns,
                    })
                }
                // System calls (`record -k`) are not calls of the
                // program's functions; their values follow as Data.
                EventKind::Data
                | EventKind::Syscall
                | EventKind::SyscallExit
                | EventKind::OffCpu
                | EventKind::PageFault
                | EventKind::KernelSignal
                | EventKind::KernelEntry
                | EventKind::KernelExit => {}
            }
        }
    }
}

/// What a reader does with the calls of each task ([`each_task`]).
pub trait StepSink {
    /// The steps of `task` follow.
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()>;
    /// One step of the current task; `stack`: the calls open after it.
    fn step(&mut self, step: &Step, stack: &[Open]) -> io::Result<()>;
    /// The current task's steps are all done.
    fn end_task(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// After each step: the events read so far in the whole pass.
    #[inline]
    fn events_read(&mut self, _total: u64) -> io::Result<()> {
        Ok(())
    }
}

/// What [`each_task`] met besides the calls.
#[derive(Debug, Default)]
pub struct Pass {
    /// Tasks whose events could not all be read (their readable part was
    /// given to the sink).
    pub errors: Vec<StoreError>,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Events read.
    pub events: u64,
}

/// Gives the steps of every task the display filters of `options` show
/// to `sink`, task after task (in the trace's order), with a progress
/// line labelled `label` when `progress` (see [`Progress::wanted`]).
/// Memory: the open calls of one task. An error of the sink (writing its
/// output) stops the pass.
pub fn each_task(
    trace: &Trace,
    options: &fctrace_options::Options,
    label: &'static str,
    progress: bool,
    sink: &mut impl StepSink,
) -> io::Result<Pass> {
    let mut filter = super::filter::Filter::new(trace, options, false);
    let mut progress = Progress::new(label, trace.info.events, progress);
    let mut pass = Pass::default();
    let mut done = 0;
    for task in &trace.info.tasks {
        if filter.as_ref().is_some_and(|f| !f.wants_task(task)) {
            continue;
        }
        let events = match trace.task_events(task) {
            Ok(events) => events,
            Err(e) => {
                pass.errors.push(e);
                continue;
            }
        };
        sink.begin_task(task)?;
        // One loop per kind of source: the unfiltered one stays as fast.
        let (read, error) = match &mut filter {
            None => task_steps(Calls::new(events), sink, &mut progress, done, &mut pass)?,
            Some(f) => task_steps(
                Calls::new(f.task(task, events)),
                sink,
                &mut progress,
                done,
                &mut pass,
            )?,
        };
        done += read;
        pass.errors.extend(error);
        sink.end_task()?;
    }
    progress.finish();
    pass.events = done;
    Ok(pass)
}

/// The steps of one task into `sink`: the events read, and the read error
/// that ended them.
fn task_steps<S: EventSource>(
    mut calls: Calls<S>,
    sink: &mut impl StepSink,
    progress: &mut Progress,
    done: u64,
    pass: &mut Pass,
) -> io::Result<(u64, Option<StoreError>)> {
    while let Some(step) = calls.next_step() {
        if let Step::Lost { count, .. } = step {
            pass.lost_in_streams = pass.lost_in_streams.saturating_add(u64::from(count));
        }
        sink.step(&step, calls.stack())?;
        let read = done + calls.events_read();
        progress.update(read);
        sink.events_read(read)?;
    }
    Ok((calls.events_read(), calls.take_error()))
}

/// A function as the readers merge it across tasks, processes and
/// sessions: the module that defines it and its raw symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Demangled name (without `()`).
    pub name: String,
    /// Raw symbol name.
    pub symbol: String,
    /// Path of the ELF object defining it.
    pub module: String,
}

/// Dense indices for the functions of a trace: `(session, function id)`
/// is looked up in a vector, the name only once per session and id.
#[derive(Default)]
pub struct Functions {
    pub list: Vec<Function>,
    /// How names are demangled (`--demangle`).
    demangle: fctrace_options::Demangle,
    by_key: HashMap<(String, String), usize>,
    by_id: HashMap<u32, Vec<usize>>,
    /// `--srcline`: names end with ` [FILE:LINE]`; `--libname`: names
    /// carry their module's file name (`getpid@libc.so.6`).
    srcline: bool,
    libname: bool,
}

impl Functions {
    /// Names demangled as `--demangle` says.
    pub fn demangled(demangle: fctrace_options::Demangle) -> Functions {
        Functions {
            demangle,
            ..Functions::default()
        }
    }

    /// Names as `options` ask: `--demangle`, `--srcline`, `--libname`.
    pub fn with_options(options: &fctrace_options::Options) -> Functions {
        Functions {
            srcline: options.srcline,
            libname: options.libname,
            ..Functions::demangled(options.demangle)
        }
    }

    /// The index of function `func` of `session`.
    pub fn index(&mut self, trace: &Trace, session: u32, func: u32) -> usize {
        let ids = self.by_id.entry(session).or_default();
        let i = func as usize;
        if let Some(&x) = ids.get(i) {
            if x != usize::MAX {
                return x;
            }
        }
        let mut f = describe(trace, session, func, self.demangle);
        if self.libname && !f.module.starts_with('<') {
            f.name = super::names::with_module(&f.name, &f.module);
        }
        if self.srcline {
            if let Some(at) = crate::srclines::text(trace, session, func) {
                f.name = format!("{} [{at}]", f.name);
            }
        }
        let list = &mut self.list;
        let x = *self
            .by_key
            .entry((f.module.clone(), f.symbol.clone()))
            .or_insert_with(|| {
                list.push(f);
                list.len() - 1
            });
        // A stray huge id (corrupt trace) is not cached.
        if i < ids.len() + 1_000_000 {
            if ids.len() <= i {
                ids.resize(i + 1, usize::MAX);
            }
            ids[i] = x;
        }
        x
    }

    /// Per function of [`Functions::list`]: a `(session, function id)`
    /// that it stands for (the first session's when several sessions
    /// have it; `None` for a system call).
    pub fn origins(&self) -> Vec<Option<(u32, u32)>> {
        let mut out = vec![None; self.list.len()];
        let mut sessions: Vec<&u32> = self.by_id.keys().collect();
        sessions.sort();
        for &session in sessions {
            for (id, &x) in self.by_id[&session].iter().enumerate() {
                if let Some(o) = out.get_mut(x) {
                    o.get_or_insert((session, id as u32));
                }
            }
        }
        out
    }

    /// The index of system call `nr`: a function of the module
    /// [`SYSCALL_MODULE`] named as strace names it (`record -k`).
    pub fn syscall_index(&mut self, nr: u32) -> usize {
        let name = super::syscalls::name(nr).into_owned();
        let list = &mut self.list;
        *self
            .by_key
            .entry((SYSCALL_MODULE.to_string(), name.clone()))
            .or_insert_with(|| {
                list.push(Function {
                    name: name.clone(),
                    symbol: name,
                    module: SYSCALL_MODULE.to_string(),
                });
                list.len() - 1
            })
    }

    /// The functions whose name another function (of another module)
    /// shares: shown as `name@module-file` where a text must tell them
    /// apart.
    pub fn ambiguous(&self) -> Vec<bool> {
        let mut first: HashMap<&str, (usize, bool)> = HashMap::new();
        for (i, f) in self.list.iter().enumerate() {
            first
                .entry(f.name.as_str())
                .and_modify(|e| e.1 = true)
                .or_insert((i, false));
        }
        self.list
            .iter()
            .map(|f| first.get(f.name.as_str()).is_some_and(|e| e.1))
            .collect()
    }

    /// The name of function `i` as a text shows it: `name`, or
    /// `name@module-file` when `ambiguous[i]`.
    pub fn shown_name(&self, i: usize, ambiguous: &[bool]) -> String {
        let f = &self.list[i];
        if ambiguous.get(i).copied().unwrap_or(false) {
            format!("{}@{}", f.name, super::names::module_file(&f.module))
        } else {
            f.name.clone()
        }
    }
}

/// A reader's cache of [`Functions::index`] for the functions of one
/// session (ids are dense): one vector lookup per call, where the index
/// itself looks the session up first.
#[derive(Default)]
pub struct IdCache(Vec<u32>);

impl IdCache {
    /// The cached index of function `func`.
    #[inline(always)]
    pub fn get(&self, func: u32) -> Option<usize> {
        match self.0.get(func as usize) {
            Some(&x) if x != 0 => Some(x as usize - 1),
            _ => None,
        }
    }

    /// Caches index `x` for `func` (a stray huge id of a corrupt trace is
    /// not cached).
    pub fn set(&mut self, func: u32, x: usize) {
        let i = func as usize;
        if i < self.0.len() + 1_000_000 {
            if self.0.len() <= i {
                self.0.resize(i + 1, 0);
            }
            self.0[i] = x as u32 + 1;
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The name, symbol and module of a function id of a session.
pub fn describe(
    trace: &Trace,
    session: u32,
    func: u32,
    demangle: fctrace_options::Demangle,
) -> Function {
    let table = trace.sessions.get(&session);
    match table.and_then(|t| Some((t, t.function(func)?))) {
        Some((table, f)) => Function {
            name: super::names::report_name(&f.name, demangle),
            symbol: f.name.clone(),
            module: table
                .module(f.module)
                .map_or_else(String::new, |m| m.path.clone()),
        },
        None => Function {
            name: unknown(func),
            symbol: unknown(func),
            module: format!("<session {session}>"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, payload_events, FakeTask};
    use fctrace_format::argval::Writer;
    use EventKind::*;

    fn steps(events: Vec<fctrace_format::event::RawEvent>) -> Vec<Step> {
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, events)]);
        let task = &trace.info.tasks[0];
        let mut calls = Calls::new(trace.task_events(task).unwrap());
        let mut out = Vec::new();
        while let Some(s) = calls.next_step() {
            out.push(s);
        }
        assert!(calls.take_error().is_none());
        out
    }

    fn leave(func: u32, depth: usize, span: (u64, u64), children_ns: u64, end: End) -> Step {
        Step::Leave(Call {
            func,
            depth,
            start_ns: span.0,
            end_ns: span.1,
            children_ns,
            end,
            args: None,
            retval: None,
            entry_recorded: true,
        })
    }

    /// The calls an attach or history chain names are entered at the
    /// chain's time, one step each (the stack then holds the calls up to
    /// it), without a recorded entry; the calls under them have their
    /// real depth; a later chain continues the first.
    #[test]
    fn chains_open_the_calls_they_name() {
        for history in [false, true] {
            let chain = |funcs: &'static [u32]| {
                move |w: &mut Writer| {
                    assert!(if history {
                        w.history_chain(funcs)
                    } else {
                        w.attach_chain(funcs)
                    });
                }
            };
            let mut events = payload_events(Args, 1, 5, chain(&[1, 2]));
            events.extend(payload_events(Args, 1, 5, chain(&[3])));
            events.extend([
                ev(Entry, 4, 10),
                ev(Exit, 4, 20),
                ev(Exit, 3, 25),
                ev(Exit, 2, 30),
            ]);
            let (_dir, trace) = fake_trace(&[FakeTask::main(10, events.clone())]);
            let mut calls = Calls::new(trace.task_events(&trace.info.tasks[0]).unwrap());
            for (func, depth) in [(1, 1), (2, 2), (3, 3)] {
                assert_eq!(calls.next_step(), Some(Step::Enter { func, ns: 5 }));
                assert_eq!(calls.stack().len(), depth);
                assert!(!calls.stack()[depth - 1].entry_recorded);
            }
            assert_eq!(calls.next_step(), Some(Step::Enter { func: 4, ns: 10 }));
            assert!(calls.stack()[3].entry_recorded);
            let chain_leave = |func, depth, span, children, end| {
                let Step::Leave(mut c) = leave(func, depth, span, children, end) else {
                    unreachable!()
                };
                c.entry_recorded = false;
                Step::Leave(c)
            };
            let s = steps(events);
            assert_eq!(
                s[4..],
                [
                    leave(4, 3, (10, 20), 0, End::Returned),
                    chain_leave(3, 2, (5, 25), 10, End::Returned),
                    chain_leave(2, 1, (5, 30), 20, End::Returned),
                    chain_leave(1, 0, (5, 30), 25, End::NotReturned),
                ],
                "history {history}"
            );
        }
    }

    #[test]
    fn nested_calls_with_self_times() {
        // main(0..100) { a(10..40) { b(15..25) } a(50..60) }
        let s = steps(vec![
            ev(Entry, 1, 0),
            ev(Entry, 2, 10),
            ev(Entry, 3, 15),
            ev(Exit, 3, 25),
            ev(Exit, 2, 40),
            ev(Entry, 2, 50),
            ev(Exit, 2, 60),
            ev(Exit, 1, 100),
        ]);
        assert_eq!(
            s,
            vec![
                Step::Enter { func: 1, ns: 0 },
                Step::Enter { func: 2, ns: 10 },
                Step::Enter { func: 3, ns: 15 },
                leave(3, 2, (15, 25), 0, End::Returned),
                leave(2, 1, (10, 40), 10, End::Returned),
                Step::Enter { func: 2, ns: 50 },
                leave(2, 1, (50, 60), 0, End::Returned),
                leave(1, 0, (0, 100), 40, End::Returned),
            ]
        );
        if let Step::Leave(c) = &s[4] {
            assert_eq!((c.duration_ns(), c.children_ns), (30, 10));
        }
    }

    #[test]
    fn unwinds_unmatched_exits_and_the_end_of_the_task() {
        // An exit of main while b is open: b did not return. Then an exit
        // of a function never entered, a signal, a loss, and calls left
        // open at the end of the events.
        let s = steps(vec![
            ev(Entry, 1, 0),
            ev(Entry, 2, 10),
            ev(Unwind, 1, 30),
            ev(Exit, 9, 31),
            ev(Signal, 10, 32),
            ev(Lost, 5, 33),
            ev(Entry, 4, 40),
            ev(Entry, 5, 45),
            ev(Exit, 6, 50),
        ]);
        assert_eq!(
            s,
            vec![
                Step::Enter { func: 1, ns: 0 },
                Step::Enter { func: 2, ns: 10 },
                leave(2, 1, (10, 30), 0, End::NotReturned),
                leave(1, 0, (0, 30), 20, End::Unwound),
                Step::Unmatched {
                    func: 9,
                    ns: 31,
                    end: End::Returned
                },
                Step::Signal { signal: 10, ns: 32 },
                Step::Lost { count: 5, ns: 33 },
                Step::Enter { func: 4, ns: 40 },
                Step::Enter { func: 5, ns: 45 },
                Step::Unmatched {
                    func: 6,
                    ns: 50,
                    end: End::Returned
                },
                leave(5, 1, (45, 50), 0, End::NotReturned),
                leave(4, 0, (40, 50), 5, End::NotReturned),
            ]
        );
    }

    #[test]
    fn arguments_and_return_values_go_with_their_call() {
        let fill = |w: &mut Writer| {
            assert!(w.int(fctrace_format::argval::IntFmt::Signed, 4, 7));
        };
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        fill(&mut w);
        let n = w.len();
        let args = buf[..n].to_vec();
        let mut events = vec![ev(Entry, 1, 0), ev(Entry, 2, 5)];
        events.extend(payload_events(Args, 2, 5, fill));
        events.extend(payload_events(Retval, 2, 8, fill));
        events.extend([ev(Exit, 2, 8), ev(Exit, 1, 9)]);
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, events.clone())]);
        let mut calls = Calls::new(trace.task_events(&trace.info.tasks[0]).unwrap());
        calls.next_step();
        assert_eq!(calls.next_step(), Some(Step::Enter { func: 2, ns: 5 }));
        let top = calls.stack().last().unwrap();
        assert_eq!(top.args.as_deref(), Some(&args[..]), "at its entry");
        let s = steps(events);
        let Step::Leave(c) = &s[2] else {
            panic!("{s:?}")
        };
        assert_eq!((c.func, c.args.as_deref()), (2, Some(&args[..])));
        assert_eq!(c.retval.as_deref(), Some(&args[..]));
        let Step::Leave(m) = &s[3] else {
            panic!("{s:?}")
        };
        assert_eq!((m.func, m.args.clone(), m.retval.clone()), (1, None, None));
    }

    #[test]
    fn functions_are_merged_by_module_and_symbol() {
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, vec![])]);
        let mut f = Functions::default();
        let a = f.index(&trace, 0, 1);
        assert_eq!(f.index(&trace, 0, 1), a);
        let b = f.index(&trace, 0, 2);
        assert_ne!(a, b);
        let unknown = f.index(&trace, 7, 1);
        assert_eq!(f.list[unknown].module, "<session 7>");
        assert_eq!(f.ambiguous(), vec![false; f.list.len()]);
    }
}
