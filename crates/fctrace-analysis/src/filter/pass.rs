//! The display filters of one pass over a trace ([`Filter`]): the
//! patterns resolved per session, the state each task starts in (forked
//! children, calls entered before its events), the global triggers'
//! switches; it builds each task's stages ([`FilteredEvents`]).

use super::events::{FilteredEvents, FullEvents, Inner};
use super::flags::{
    each_function, exe_module, hidden, syscall_flags, SessionFlags, Switch, CALLER, FILTER, HIDE,
    NOTRACE, REC_FILTER, REC_NOTRACE, RESUMES, TRIGGER,
};
use super::held::{Held, Mode};
use super::light::Light;
use super::options::{filters_display, per_call, recorded_with_gaps, trace_start_ns};
use super::range::Range;
use super::visibility::{Start, Visibility};
use fctrace_format::event::EventKind;
use fctrace_format::store::{TaskEvents, TaskInfo, TaskOrigin, Trace};
use fctrace_options::{Action, FuncPattern, Options, TimePoint};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

/// The display-side filters of one pass over a trace.
pub struct Filter<'t> {
    pub(super) trace: &'t Trace,
    pub(super) opts: Options,
    pub(super) sessions: HashMap<u32, Rc<SessionFlags>>,
    /// Global trigger switches by pid, sorted by time.
    pub(super) global: HashMap<u32, Rc<Vec<(u64, Switch)>>>,
    /// Whether backtraces are kept for the tree (the report has no use).
    pub(super) backtraces: bool,
    /// By task id: the visibility state the task starts in (see
    /// [`Filter::start`]), once computed.
    pub(super) starts: HashMap<u32, Option<Rc<Start>>>,
    /// [`recorded_with_gaps`], once asked.
    pub(super) gaps: Option<bool>,
    /// The patterns of the recording's `trace_on` triggers.
    pub(super) resumes: Vec<FuncPattern>,
    /// The recording's `-F` and `-N` patterns.
    pub(super) recorded: (Vec<FuncPattern>, Vec<FuncPattern>),
    /// Options that follow the calls ([`per_call`]).
    pub(super) per_call: bool,
    /// `-r`: the time range, CLOCK_MONOTONIC ns, both ends included.
    pub(super) range: Option<(u64, u64)>,
}

impl<'t> Filter<'t> {
    /// `None` when `opts` shows everything (the plain, fastest path).
    /// `backtraces`: keep the `backtrace` triggers' callers for
    /// [`TaskStream::backtrace`].
    pub fn new(trace: &'t Trace, opts: &Options, backtraces: bool) -> Option<Filter<'t>> {
        let range = opts.time_range.map(|r| {
            let needs_start = matches!(r.start, Some(TimePoint::Elapsed(_)))
                || matches!(r.stop, Some(TimePoint::Elapsed(_)));
            let origin = if needs_start {
                trace_start_ns(trace)
            } else {
                0
            };
            let at = |p: Option<TimePoint>, none: u64| match p {
                None => none,
                Some(TimePoint::Absolute(ns)) => ns,
                Some(TimePoint::Elapsed(ns)) => origin.saturating_add(ns),
            };
            (at(r.start, 0), at(r.stop, u64::MAX))
        });
        filters_display(opts).then(|| Filter {
            per_call: per_call(opts),
            range,
            trace,
            opts: opts.clone(),
            sessions: HashMap::new(),
            global: HashMap::new(),
            backtraces,
            starts: HashMap::new(),
            gaps: None,
            resumes: Options::from_wire(&trace.info.options)
                .map(|o| {
                    o.triggers
                        .into_iter()
                        .filter(|t| t.actions.contains(&Action::TraceOn))
                        .map(|t| t.pattern)
                        .collect()
                })
                .unwrap_or_default(),
            recorded: Options::from_wire(&trace.info.options)
                .map(|o| (o.filters, o.notrace))
                .unwrap_or_default(),
        })
    }

    /// Whether the task is shown at all (`--tid`).
    pub fn wants_task(&self, task: &TaskInfo) -> bool {
        self.opts.tids.is_empty() || self.opts.tids.contains(&task.tid)
    }

    /// The filtered events of `task`.
    pub fn task(&mut self, task: &TaskInfo, events: TaskEvents) -> FilteredEvents {
        let inner = if self.per_call {
            Inner::Full(Box::new(self.full(task, events)))
        } else {
            Inner::Light(Light {
                src: events,
                flags: self.session(task.session),
                payload_hidden: false,
            })
        };
        FilteredEvents {
            inner,
            range: self.range.map(|(start, stop)| Range::new(start, stop)),
            out: VecDeque::new(),
        }
    }

    /// Stages 1 to 3 over the events of `task`.
    pub(super) fn full(&mut self, task: &TaskInfo, events: TaskEvents) -> FullEvents {
        let flags = self.session(task.session);
        let mut vis = self.visibility(task);
        let start = self.start(task, 0);
        if let Some(start) = &start {
            vis.resume(start);
        }
        let o = &self.opts;
        vis.draws = self.backtraces && o.callers.is_empty();
        let callers = (!o.callers.is_empty()).then(|| {
            let mut held = Held::new(Mode::Callers, Some(flags.clone()));
            held.leaf = !o.caller_tree;
            // The calls the task starts in that stage 1 shows are open
            // calls of this stage too (`-C do_fork` shows what a child
            // forked in do_fork does).
            for f in start.iter().flat_map(|s| &s.stack).filter(|f| f.shown) {
                held.outer_call(f.func);
            }
            held
        });
        FullEvents {
            src: events,
            ahead: VecDeque::new(),
            done: false,
            out: VecDeque::new(),
            mid: VecDeque::new(),
            vis,
            callers,
            time: (o.time_filter.is_some_and(|t| t > 0) || !o.time_actions.is_empty())
                .then(|| Held::new(Mode::Time(o.time_filter.unwrap_or(0)), Some(flags))),
        }
    }

    /// Stage 1 of `task`, as it is before the task's first event.
    pub(super) fn visibility(&mut self, task: &TaskInfo) -> Visibility {
        let flags = self.session(task.session);
        let global = self.global_switches(task);
        let o = &self.opts;
        Visibility {
            flags,
            triggers: o.triggers.clone(),
            has_filters: !o.filters.is_empty(),
            on: !o.disabled,
            finished: false,
            notrace_open: 0,
            filter_open: 0,
            shown: 0,
            limit: o.depth.unwrap_or(u32::MAX),
            stack: Vec::new(),
            global,
            global_next: 0,
            backtraces: self.backtraces,
            notes: VecDeque::new(),
            marks: !self.resumes.is_empty(),
            at_start: true,
            in_syscall: None,
            history: false,
            draws: false,
            opened: [Vec::new(), Vec::new()],
            recorded_filters: !self.recorded.0.is_empty(),
        }
    }

    /// The visibility state `task` starts in, when its first events are
    /// inside calls entered before its stream begins:
    ///
    /// * a forked child runs on in the calls its parent had open at the
    ///   fork (`main > do_fork > fork`: the child's stream begins with the
    ///   exit of `fork`). It starts in the parent's state right after the
    ///   entry of that function (the last entry before the child's first
    ///   event), as the agent's state is copied into the child: inside the
    ///   same `-F` and `-N` calls, with the same depth and the same
    ///   `trace_on`/`trace_off` state;
    /// * any other task (and a forked child whose parent's events are not
    ///   in the trace) starts inside the calls whose exits its events have
    ///   without their entries at the outermost level: entered before
    ///   tracing was on (`--disable`, a thread started inside the C
    ///   library). They count for `-F` and `-N`, not for `-D` (the agent
    ///   counts levels from where recording starts). A call that never
    ///   returns while recorded cannot be known this way. This takes a
    ///   pass over the task's events, made only when the task's first
    ///   event is such an exit or the trace was recorded with tracing off
    ///   for a while ([`recorded_with_gaps`]).
    ///
    /// `None` when the task starts outside any call, or the options do not
    /// depend on the calls around (`-t`, `--tid` only). With `-C`, the
    /// calls it starts in that stage 1 shows are open calls of stage 2.
    /// Computed once per task: the children of one parent together, in one
    /// pass over the parent's events up to its last fork.
    pub(super) fn start(&mut self, task: &TaskInfo, generation: u32) -> Option<Rc<Start>> {
        let o = &self.opts;
        if o.filters.is_empty()
            && o.notrace.is_empty()
            && o.depth.is_none()
            && o.triggers.is_empty()
            && o.callers.is_empty()
        {
            return None;
        }
        if let Some(s) = self.starts.get(&task.id) {
            return s.clone();
        }
        if task.origin == TaskOrigin::Fork && generation < MAX_FORK_GENERATIONS {
            self.fork_starts(task, generation);
            if let Some(Some(s)) = self.starts.get(&task.id) {
                return Some(s.clone());
            }
        }
        let s = self.outer_calls_start(task);
        self.starts.insert(task.id, s.clone());
        s
    }

    /// [`start`](Self::start) of the forked children of `task`'s parent
    /// that start in a state of the parent (not computed for the others).
    pub(super) fn fork_starts(&mut self, task: &TaskInfo, generation: u32) {
        let trace = self.trace;
        let Some(parent) = task
            .parent
            .and_then(|p| trace.info.tasks.iter().find(|t| t.id == p))
        else {
            return;
        };
        // Each child: the function whose exit begins it, and the time of
        // its first event.
        let mut pending: Vec<(u32, Option<u32>, u64)> = Vec::new();
        for c in trace.info.tasks.iter().filter(|c| {
            c.origin == TaskOrigin::Fork
                && c.parent == Some(parent.id)
                && c.session == parent.session
                && !self.starts.contains_key(&c.id)
        }) {
            let Ok(mut events) = trace.task_events(c) else {
                continue;
            };
            while let Some(e) = events.next_event() {
                if e.kind.is_call_step() {
                    let func =
                        matches!(e.kind, EventKind::Exit | EventKind::Unwind).then_some(e.func);
                    pending.push((c.id, func, e.ns));
                    break;
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        pending.sort_by_key(|&(_, _, ns)| std::cmp::Reverse(ns));
        let mut vis = self.visibility(parent);
        vis.backtraces = false;
        if let Some(start) = self.start(parent, generation + 1) {
            vis.resume(&start);
        }
        let Ok(mut events) = trace.task_events(parent) else {
            return;
        };
        // The functions whose exits begin children, and the parent's state
        // right after the last entry of each so far: a child starts in the
        // one of its function when the parent's events reach its time.
        let firsts: HashSet<u32> = pending.iter().filter_map(|&(_, f, _)| f).collect();
        let mut at_entry: HashMap<u32, Rc<Start>> = HashMap::new();
        let mut done = |(id, first, _): (u32, Option<u32>, u64),
                        at_entry: &HashMap<u32, Rc<Start>>,
                        vis: &Visibility| {
            let s = first
                .and_then(|f| at_entry.get(&f).cloned())
                .unwrap_or_else(|| Rc::new(vis.snapshot()));
            self.starts.insert(id, Some(s));
        };
        let mut ahead = VecDeque::new();
        while let Some((e, chain)) = vis.pull(&mut events, &mut ahead) {
            if e.kind.is_call_step() {
                while pending.last().is_some_and(|&(_, _, ns)| ns < e.ns) {
                    if let Some(child) = pending.pop() {
                        done(child, &at_entry, &vis);
                    }
                }
                if pending.is_empty() {
                    break;
                }
            }
            let entry = (e.kind == EventKind::Entry).then_some(e.func);
            vis.push_with(e, chain.as_ref());
            if let Some(func) = entry.filter(|f| firsts.contains(f)) {
                at_entry.insert(func, Rc::new(vis.snapshot()));
            }
        }
        while let Some(child) = pending.pop() {
            done(child, &at_entry, &vis);
        }
    }

    /// The start of a task inside the calls whose exits its events have
    /// at the outermost level without their entries (a pass over them).
    pub(super) fn outer_calls_start(&mut self, task: &TaskInfo) -> Option<Rc<Start>> {
        let o = &self.opts;
        if o.filters.is_empty() && o.notrace.is_empty() && o.callers.is_empty() {
            return None;
        }
        let mut events = self.trace.task_events(task).ok()?;
        let mut stack: Vec<u32> = Vec::new();
        // Innermost first.
        let mut outer: Vec<u32> = Vec::new();
        // A task that starts with an entry, in a trace recorded with
        // tracing on all along, starts outside any call: no pass (the
        // common case: replay -F costs one reading of the events).
        let gaps = *self
            .gaps
            .get_or_insert_with(|| recorded_with_gaps(self.trace));
        if !gaps {
            let first =
                std::iter::from_fn(|| events.next_event()).find(|e| e.kind.is_call_step())?;
            match first.kind {
                EventKind::Exit | EventKind::Unwind => outer.push(first.func),
                _ => return None,
            }
        }
        while let Some(e) = events.next_event() {
            match e.kind {
                EventKind::Entry => stack.push(e.func),
                EventKind::Exit | EventKind::Unwind => {
                    match stack.iter().rposition(|&f| f == e.func) {
                        Some(j) => stack.truncate(j),
                        None if stack.is_empty() => outer.push(e.func),
                        None => {}
                    }
                }
                _ => {}
            }
        }
        if outer.is_empty() {
            return None;
        }
        let mut vis = self.visibility(task);
        for &func in outer.iter().rev() {
            vis.outer_call(func);
        }
        Some(Rc::new(vis.snapshot()))
    }

    /// The flags of a session's functions, computed on first use.
    pub(super) fn session(&mut self, session: u32) -> Rc<SessionFlags> {
        if let Some(f) = self.sessions.get(&session) {
            return f.clone();
        }
        let o = &self.opts;
        let mut flags = Vec::new();
        let mut triggers: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut times: HashMap<u32, (Option<u64>, bool)> = HashMap::new();
        if let Some(table) = self.trace.sessions.get(&session) {
            let any = |ps: &[FuncPattern], module: &str, names: [&str; 4]| {
                ps.iter().any(|p| p.matches(module, names))
            };
            each_function(table, |id, module, names| {
                let mut bits = 0;
                if any(&o.filters, module, names) {
                    bits |= FILTER;
                }
                if any(&o.notrace, module, names) {
                    bits |= NOTRACE;
                }
                if any(&o.callers, module, names) {
                    bits |= CALLER;
                }
                if any(&o.hide, module, names) {
                    bits |= HIDE;
                }
                if any(&self.resumes, module, names) {
                    bits |= RESUMES;
                }
                if any(&self.recorded.0, module, names) {
                    bits |= REC_FILTER;
                }
                if any(&self.recorded.1, module, names) {
                    bits |= REC_NOTRACE;
                }
                for (p, t) in &o.time_actions {
                    if p.matches(module, names) {
                        let e = times.entry(id).or_insert((None, false));
                        match t {
                            Some(t) => e.0 = Some(*t),
                            None => e.1 = true,
                        }
                    }
                }
                let hits: Vec<usize> = o
                    .triggers
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.pattern.matches(module, names))
                    .map(|(i, _)| i)
                    .collect();
                if !hits.is_empty() {
                    bits |= TRIGGER;
                    triggers.insert(id, hits);
                }
                let id = id as usize;
                if bits != 0 {
                    if flags.len() <= id {
                        flags.resize(id + 1, 0);
                    }
                    flags[id] = bits;
                }
                true
            });
        }
        if let Some(table) = self.trace.sessions.get(&session) {
            let exe = exe_module(table);
            let locs: Vec<fctrace_options::LocFilter> = o
                .loc_filters
                .iter()
                .filter_map(|l| fctrace_options::LocFilter::parse(l).ok())
                .collect();
            for func in &table.functions {
                let located = || {
                    let file = crate::srclines::of_function(table, func.id).map(|l| l.file);
                    !fctrace_options::loc_shown(&locs, file.as_deref())
                };
                if hidden(o, func, exe) || (!locs.is_empty() && located()) {
                    let id = func.id as usize;
                    if flags.len() <= id {
                        flags.resize(id + 1, 0);
                    }
                    flags[id] |= HIDE;
                }
            }
        }
        let syscalls = syscall_flags(o);
        let f = Rc::new(SessionFlags {
            flags,
            triggers,
            syscalls,
            times,
        });
        self.sessions.insert(session, f.clone());
        f
    }

    /// The switches of the global `trace_on`/`trace_off` triggers and of
    /// the `finish` triggers hit by the tasks of `task`'s process, in time
    /// order (one pass over those tasks, the first time one of them is
    /// read).
    pub(super) fn global_switches(&mut self, task: &TaskInfo) -> Rc<Vec<(u64, Switch)>> {
        let global_actions = |t: &fctrace_options::Trigger| {
            t.actions
                .iter()
                .filter_map(|a| match a {
                    Action::TraceOn if t.global => Some(Switch::On),
                    Action::TraceOff if t.global => Some(Switch::Off),
                    Action::Finish => Some(Switch::Finish),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        if !self
            .opts
            .triggers
            .iter()
            .any(|t| !global_actions(t).is_empty())
        {
            return Rc::new(Vec::new());
        }
        if let Some(g) = self.global.get(&task.pid) {
            return g.clone();
        }
        let mut switches = Vec::new();
        let trace = self.trace;
        for t in trace.info.tasks.iter().filter(|t| t.pid == task.pid) {
            let flags = self.session(t.session);
            let Ok(mut events) = trace.task_events(t) else {
                continue;
            };
            while let Some(e) = events.next_event() {
                if e.kind != EventKind::Entry {
                    continue;
                }
                if flags.flags.get(e.func as usize).copied().unwrap_or(0) & TRIGGER == 0 {
                    continue;
                }
                for &i in flags.triggers.get(&e.func).into_iter().flatten() {
                    let trig = &self.opts.triggers[i];
                    switches.extend(global_actions(trig).into_iter().map(|s| (e.ns, s)));
                }
            }
        }
        switches.sort_by_key(|&(ns, _)| ns);
        let g = Rc::new(switches);
        self.global.insert(task.pid, g.clone());
        g
    }
}

/// Fork chains longer than this start their deepest children from their
/// own events only (bounds the recursion of [`Filter::start`]).
pub(super) const MAX_FORK_GENERATIONS: u32 = 256;
