//! The display-side filters: which recorded calls `replay`, `report` and
//! live mode show, driven by [`Options`] (`-F`, `-N`, `-C`, `-D`, `-t`,
//! `--tid`, `-T`), with uftrace's meaning.
//!
//! Display-only options ([`fctrace_options::display`]) act here too, for
//! every reader of the trace: the C runtime's own calls
//! ([`RUNTIME_FUNCTIONS`], unless `--show-runtime`) and with `--no-libcall`
//! the calls into shared libraries are hidden without their subtrees:
//! their entries, exits and values go, the calls they make are shown in
//! their place (at their depth in the tree; they are no level of `-D`).
//! Without any other option that is the only stage ([`Light`]: a flag
//! test per event); `-r START~STOP` is a last stage ([`Range`]) after the
//! others. `--demangle` acts on names ([`super::names`]).
//!
//! A task's events go through up to three stages, each streaming:
//!
//! 1. **Visibility** (`-F`, `-N`, `-D`, `-T`), decided at a call's entry: a
//!    call is shown when tracing is on for its task, it is not inside (nor
//!    itself) a `-N` function, and, if any `-F` is given, it is inside (or
//!    itself) a `-F` function; then `-D N` keeps the N outermost levels of
//!    what is shown (levels count shown calls only: with `-F`, the `-F`
//!    function is level 1). Triggers act at the entry of their function,
//!    whether that call is shown or not: `trace_on` (the function itself is
//!    shown), `trace_off` (it is not), `depth=N` (the function's shown
//!    subtree is limited to N levels, the function being level 1, for as
//!    long as it runs; it only ever narrows `-D`), `backtrace` (a line
//!    `/* backtrace: main > a > b */`, the callers active at the entry,
//!    shown or not, is printed before the function in the tree), `finish`
//!    (nothing of the process is shown after it, not even the exits of the
//!    calls still open, which end as "not returned", as when the agent
//!    stops tracing; the function itself is not shown). `trace_on` and
//!    `trace_off` act on the task that hit them, or with `global` on every
//!    task of the same process; `finish` always acts on the whole process.
//!    Acting on other tasks goes in time order: a first pass over the
//!    process's tasks finds when (only when such a trigger is given). The exit of a shown call is
//!    shown; signal marks and argument values are shown when the call they
//!    happened in is; `Lost` marks are always shown. `--disable` and
//!    `--signal` are recording options only: the recorded trace already
//!    reflects them, and replay ignores them. Where a recorded `trace_on`
//!    trigger turned tracing on, the agent recorded the calls open then
//!    (entered while it was off) and marks where each ends: they count as
//!    open calls from that entry to that mark ([`Visibility::pull`]).
//!    For the tree, those of them shown, and those of an attach chain,
//!    are passed on as a chain for it to open ([`Visibility::draw_opened`];
//!    not with `-C`).
//! 2. **Callers** (`-C FUNC`): the calls of FUNC with their subtrees, and
//!    the chain of callers that led to each; every other call is hidden.
//!    A call outside FUNC is held until a call of FUNC is entered under it
//!    (it is then shown, with the rest of the chain) or it returns (it is
//!    then dropped): memory is one held entry per open call.
//! 3. **Time** (`-t TIME`): calls shorter than TIME are hidden with their
//!    subtrees; the calls around them keep their full durations (so their
//!    self time includes the hidden calls' time, in the report too). A call
//!    is held from its entry until it has lasted TIME (it is then shown:
//!    the time is taken from the later events) or it returns (it is then
//!    dropped): what is held is the entries of the open calls that have not
//!    yet lasted TIME and the marks inside them, never a finished subtree.
//!    Calls still open when the task's events end are shown (they never
//!    returned).
//!
//! `--tid` keeps only the tasks of those threads ([`Filter::wants_task`]).
//!
//! Patterns are resolved to function ids once per session symbol table (a
//! byte of flags per function), never per event; a trace read without any
//! of these options does not go through this module at all.

use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, StoreError, TaskEvents, TaskInfo, TaskOrigin, Trace};
use fctrace_format::symtab::SymTab;
use fctrace_options::pattern::name_forms;
use fctrace_options::{Action, FuncPattern, Options, TimePoint};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

/// A task's events, filtered ([`FilteredEvents`]) or not ([`TaskEvents`]).
/// The readers are generic over it, so that the unfiltered loop is the
/// same code as without filters.
pub trait EventSource {
    /// The next event to show.
    fn next_event(&mut self) -> Option<Event>;

    /// The read error that ended the events, once they have all been read.
    fn take_error(&mut self) -> Option<StoreError>;

    /// For an `Entry` taken from [`next_event`](Self::next_event) (in
    /// order; the caller may look ahead in between): the function ids of
    /// the callers to print as a backtrace before it, outermost first.
    #[inline]
    fn backtrace(&mut self, _entry: &Event) -> Option<Vec<u32>> {
        None
    }

    /// Whether the calls open where the task's events begin, read by the
    /// source (not passed on), came from a history chain: their returns,
    /// shown without their entries, are `(entry not in history)`.
    #[inline]
    fn history(&self) -> bool {
        false
    }

    /// Whether the source chooses calls (`-F`, `-N`, `-D`, triggers...):
    /// it does not pass on the calls open where tracing resumed.
    fn chooses_calls(&self) -> bool {
        false
    }
}

impl EventSource for TaskEvents {
    #[inline(always)]
    fn next_event(&mut self) -> Option<Event> {
        TaskEvents::next_event(self)
    }

    #[inline]
    fn take_error(&mut self) -> Option<StoreError> {
        TaskEvents::take_error(self)
    }
}

impl EventSource for FilteredEvents {
    #[inline(always)]
    fn next_event(&mut self) -> Option<Event> {
        FilteredEvents::next_event(self)
    }

    fn take_error(&mut self) -> Option<StoreError> {
        if !self.out.is_empty() {
            return None;
        }
        match &mut self.inner {
            Inner::Light(l) => l.src.take_error(),
            Inner::Full(f) if f.out.is_empty() && f.done => f.src.take_error(),
            Inner::Full(_) => None,
        }
    }

    #[inline]
    fn backtrace(&mut self, entry: &Event) -> Option<Vec<u32>> {
        match &mut self.inner {
            Inner::Light(_) => None,
            Inner::Full(f) => f.backtrace(entry),
        }
    }

    fn chooses_calls(&self) -> bool {
        matches!(self.inner, Inner::Full(_))
    }

    fn history(&self) -> bool {
        match &self.inner {
            // Chains go through to the tree.
            Inner::Light(_) => false,
            Inner::Full(f) => f.vis.history,
        }
    }
}

/// Flag bits of a function.
const FILTER: u8 = 1;
const NOTRACE: u8 = 2;
const CALLER: u8 = 4;
const TRIGGER: u8 = 8;
/// A `trace_on` trigger of the recording: the agent records the calls
/// open where tracing resumed at its entry ([`Visibility::pull`]).
const RESUMES: u8 = 16;
/// Hidden without its subtree (the C runtime's own calls, calls into
/// shared libraries with `--no-libcall`): the calls it makes are shown in
/// its place, at its depth.
const HIDE: u8 = 32;
/// A `-F` function of the recording (the agent recorded only what is
/// inside one): the tree opens no call of a chain outside it.
const REC_FILTER: u8 = 64;
/// A `-N` function of the recording.
const REC_NOTRACE: u8 = 128;

/// The C runtime's own functions, which run around `main` (crt1.o, crti.o,
/// crtbegin.o and the C library's start and exit paths) and Rust's
/// standard library initialisation run from `.init_array`: hidden unless
/// `--show-runtime` (symbol names; `::`-qualified ones are Rust paths,
/// matched in the demangled name).
pub const RUNTIME_FUNCTIONS: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "__do_global_ctors_aux",
    "__libc_start_main",
    "__libc_start_call_main",
    "__libc_csu_init",
    "__libc_csu_fini",
    "__libc_init_first",
    "__cxa_finalize",
    "_dl_relocate_static_pie",
    "__gmon_start__",
    "_dl_start",
    "_dl_init",
    "_dl_fini",
    "call_init",
    "_IO_cleanup",
];

/// Whether a function (raw symbol name, demangled name) is part of the
/// runtime ([`RUNTIME_FUNCTIONS`]).
pub fn is_runtime(raw: &str, demangled: &str) -> bool {
    RUNTIME_FUNCTIONS.contains(&raw)
        // Rust's std (ARGV_INIT_ARRAY::init_wrapper, ::really_init).
        || demangled.contains("::ARGV_INIT_ARRAY::")
}

/// The calls open at an entry, recorded by the agent after it (outermost
/// first).
struct Chain {
    funcs: Vec<u32>,
    /// Recorded because tracing resumed there (else a backtrace).
    resume: bool,
    /// An end mark: the call of `funcs[0]`, open where tracing resumed
    /// (entered while it was off), ends here.
    end: bool,
    /// The calls open when fctrace attached (entries not recorded), at
    /// the start of a task.
    attached: bool,
    /// With `attached`: the calls open where a flight recorder's history
    /// begins (a history chain).
    history: bool,
}

/// Per session: flags by function id, and the triggers of each triggered
/// function (indices in `Options::triggers`).
struct SessionFlags {
    flags: Vec<u8>,
    triggers: HashMap<u32, Vec<usize>>,
    /// `-F`/`-N` bits by system call number (`NAME@[syscall]`).
    syscalls: Vec<u8>,
}

/// A switch of tracing by a global trigger, at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Switch {
    On,
    Off,
    Finish,
}

/// The display-side filters of one pass over a trace.
pub struct Filter<'t> {
    trace: &'t Trace,
    opts: Options,
    sessions: HashMap<u32, Rc<SessionFlags>>,
    /// Global trigger switches by pid, sorted by time.
    global: HashMap<u32, Rc<Vec<(u64, Switch)>>>,
    /// Whether backtraces are kept for the tree (the report has no use).
    backtraces: bool,
    /// By task id: the visibility state the task starts in (see
    /// [`Filter::start`]), once computed.
    starts: HashMap<u32, Option<Rc<Start>>>,
    /// [`recorded_with_gaps`], once asked.
    gaps: Option<bool>,
    /// The patterns of the recording's `trace_on` triggers.
    resumes: Vec<FuncPattern>,
    /// The recording's `-F` and `-N` patterns.
    recorded: (Vec<FuncPattern>, Vec<FuncPattern>),
    /// Options that follow the calls ([`per_call`]).
    per_call: bool,
    /// `-r`: the time range, CLOCK_MONOTONIC ns, both ends included.
    range: Option<(u64, u64)>,
}

/// Adds to `opts` the `backtrace` actions of the triggers the trace was
/// recorded with (info.json's `options`). The agent records each chain of
/// callers (from the real stack: callers that record-time filters hid are
/// in it) as an `Args` payload after the call's entry, which the tree
/// prints instead of the chain rebuilt here from the recorded calls; this
/// is the fallback for a call whose chain could not be recorded (and for
/// traces of older agents).
pub fn add_recorded_backtraces(opts: &mut Options, trace: &Trace) {
    let Ok(recorded) = Options::from_wire(&trace.info.options) else {
        return;
    };
    for t in recorded.triggers {
        if t.actions.contains(&Action::Backtrace) {
            opts.triggers.push(fctrace_options::Trigger {
                actions: vec![Action::Backtrace],
                global: false,
                ..t
            });
        }
    }
}

/// The display options of a pass over `trace`: `given` (the options of
/// `replay` or `report`), plus the display-only options the trace was
/// recorded with (`record -C FUNC`, `record -t TIME`: the agent does not
/// apply them, so they are kept in info.json and act here, as in live
/// mode) where `given` has none of that kind.
pub fn with_recorded_display(given: &Options, trace: &Trace) -> Options {
    let mut opts = given.clone();
    if let Ok(recorded) = Options::from_wire(&trace.info.options) {
        if opts.callers.is_empty() {
            opts.callers = recorded.callers;
        }
        if opts.time_filter.is_none() {
            opts.time_filter = recorded.time_filter;
        }
        if opts.tids.is_empty() {
            opts.tids = recorded.tids;
        }
    }
    opts
}

/// Warns (stderr) when `given` filters on calls (`-F`, `-N`) over a trace
/// recorded with tracing off for a while (`--disable`, a `trace_off`
/// trigger or signal) where tracing could resume with calls open that
/// the trace does not know: a call entered while tracing was off has no
/// recorded entry. Where a `trace_on` trigger turns tracing on for the
/// thread that hits it, the agent records the calls open then and the
/// end of each ([`Visibility::pull`]); where a `--signal` or a `global`
/// trigger hit by another thread does, it does not. Recording with the
/// filter has no such gap (the agent sees every call).
pub fn warn_tracing_gaps(trace: &Trace, given: &Options) {
    if given.filters.is_empty() && given.notrace.is_empty() {
        return;
    }
    if recorded_with_gaps(trace) && resumes_unknown(trace) {
        super::warn(
            "the trace was recorded with tracing off for a while (--disable or trace_off) \
             and turned on by a signal or a global trigger: -F/-N cannot see the calls \
             entered while it was off in the threads it turned on; give -F/-N to \
             `fctrace record` to filter on them",
        );
    }
}

/// Whether tracing may have been turned on for a thread other than by a
/// `trace_on` trigger it hit (`--signal ...@trace_on`, a `global` trigger).
fn resumes_unknown(trace: &Trace) -> bool {
    let Ok(recorded) = Options::from_wire(&trace.info.options) else {
        return false;
    };
    recorded
        .signals
        .iter()
        .any(|s| s.actions.contains(&Action::TraceOn))
        || recorded
            .triggers
            .iter()
            .any(|t| t.global && t.actions.contains(&Action::TraceOn))
}

/// Whether `trace` was recorded with tracing off for a while
/// (`--disable`, a `trace_off` trigger or signal).
fn recorded_with_gaps(trace: &Trace) -> bool {
    let Ok(recorded) = Options::from_wire(&trace.info.options) else {
        return false;
    };
    recorded.disabled
        || recorded
            .triggers
            .iter()
            .any(|t| t.actions.contains(&Action::TraceOff))
        || recorded
            .signals
            .iter()
            .any(|s| s.actions.contains(&Action::TraceOff))
}

/// The patterns of `opts` (`-F`, `-N`, `-C`, `-T`, `-A`, `-R`) that name no function
/// of the trace, as the user wrote them (a misspelt name would otherwise
/// just show an empty tree).
pub fn unmatched_patterns(trace: &Trace, opts: &Options) -> Vec<String> {
    let mut pats: Vec<(&str, &str, &FuncPattern)> = Vec::new();
    pats.extend(opts.filters.iter().map(|p| ("-F", p.as_str(), p)));
    pats.extend(opts.notrace.iter().map(|p| ("-N", p.as_str(), p)));
    pats.extend(opts.callers.iter().map(|p| ("-C", p.as_str(), p)));
    pats.extend(
        opts.triggers
            .iter()
            .map(|t| ("-T", t.source.as_str(), &t.pattern)),
    );
    // -A and -R (a spec of return values only is -R's).
    pats.extend(opts.args.iter().map(|a| {
        let retval_only = a
            .items
            .iter()
            .all(|i| i.source == fctrace_options::args::Source::Retval);
        let opt = if retval_only { "-R" } else { "-A" };
        (opt, a.source.as_str(), &a.pattern)
    }));
    if pats.is_empty() {
        return Vec::new();
    }
    let mut found = vec![false; pats.len()];
    // `NAME@[syscall]`: a system call (`record -k`).
    for (i, (_, _, p)) in pats.iter().enumerate() {
        if p.module() == Some(super::calls::SYSCALL_MODULE) {
            found[i] = syscall_pattern_matches_any(p);
        }
    }
    for table in trace.sessions.values() {
        if found.iter().all(|&x| x) {
            break;
        }
        each_function(table, |_, module, names| {
            for (i, (_, _, p)) in pats.iter().enumerate() {
                if !found[i] && p.matches(module, names) {
                    found[i] = true;
                }
            }
            !found.iter().all(|&x| x)
        });
    }
    pats.iter()
        .zip(found)
        .filter(|(_, f)| !f)
        .map(|((opt, text, _), _)| format!("{opt} {text}"))
        .collect()
}

/// Calls `f` with the id, module path and name forms ([`name_forms`]) of
/// each function of `table`, until it returns false.
fn each_function(table: &SymTab, mut f: impl FnMut(u32, &str, [&str; 3]) -> bool) {
    for func in &table.functions {
        let module = table.module(func.module).map_or("", |m| m.path.as_str());
        let display = fctrace_symbols::demangle(&func.name);
        if !f(func.id, module, name_forms(&func.name, &display)) {
            return;
        }
    }
}

/// The index of the module of `table`'s executable.
fn exe_module(table: &SymTab) -> u32 {
    table
        .modules
        .iter()
        .find(|m| m.path == table.exe)
        .map_or(0, |m| m.index)
}

/// Whether `func` is hidden without its subtree ([`HIDE`]): the C
/// runtime's (unless `--show-runtime`), a shared library's with
/// `--no-libcall` (`exe`: [`exe_module`]).
fn hidden(o: &Options, func: &fctrace_format::symtab::Function, exe: u32) -> bool {
    let runtime = !o.show_runtime
        && (RUNTIME_FUNCTIONS.contains(&func.name.as_str())
            || (func.name.contains("ARGV_INIT_ARRAY")
                && is_runtime(&func.name, &fctrace_symbols::demangle(&func.name))));
    runtime || (o.no_libcall && func.module != exe)
}

/// Which calls of a chain the agent recorded (open when fctrace attached,
/// or where a `trace_on` trigger turned tracing on) the tree opens when it
/// reads the events unfiltered: those the recording's `-F`/`-N` chose (a
/// call is inside a `-F` function, or is one, and neither inside nor
/// itself a `-N` function, as the agent decides; the chain is the whole
/// stack), but the hidden ones ([`hidden`]). With display filters the
/// filter decides instead ([`Visibility::draw_opened`]).
pub struct ChainChoice {
    filters: Vec<FuncPattern>,
    notrace: Vec<FuncPattern>,
    display: Options,
}

impl ChainChoice {
    /// For `trace` shown with the display options of `given`.
    pub fn new(trace: &Trace, given: &Options) -> ChainChoice {
        let recorded = Options::from_wire(&trace.info.options).unwrap_or_default();
        ChainChoice {
            filters: recorded.filters,
            notrace: recorded.notrace,
            display: display_only(given),
        }
    }

    /// Per call of `chain` (function ids of `table`, outermost first):
    /// whether it is shown.
    pub fn shown(&self, table: Option<&SymTab>, chain: &[u32]) -> Vec<bool> {
        let exe = table.map_or(0, exe_module);
        let (mut in_filter, mut in_notrace) = (false, false);
        chain
            .iter()
            .map(|&id| {
                let Some(func) = table.and_then(|t| t.function(id)) else {
                    return !in_notrace && (self.filters.is_empty() || in_filter);
                };
                let module = table
                    .and_then(|t| t.module(func.module))
                    .map_or("", |m| m.path.as_str());
                let display = fctrace_symbols::demangle(&func.name);
                let names = name_forms(&func.name, &display);
                let filter = self.filters.iter().any(|p| p.matches(module, names));
                let notrace = self.notrace.iter().any(|p| p.matches(module, names));
                in_filter |= filter;
                in_notrace |= notrace;
                !in_notrace
                    && (self.filters.is_empty() || in_filter)
                    && !hidden(&self.display, func, exe)
            })
            .collect()
    }
}

/// The thread ids of `opts.tids` that no task of the trace has.
pub fn unmatched_tids(trace: &Trace, opts: &Options) -> Vec<u32> {
    let mut missing: Vec<u32> = opts
        .tids
        .iter()
        .copied()
        .filter(|&tid| !trace.info.tasks.iter().any(|t| t.tid == tid))
        .collect();
    missing.dedup();
    missing
}

/// Warns (stderr) about each pattern of `opts` that names no function,
/// and each `--tid` that names no task.
pub fn warn_unmatched(trace: &Trace, opts: &Options) {
    for p in unmatched_patterns(trace, opts) {
        super::warn(&format!("{p} matches no function of the trace"));
    }
    for tid in unmatched_tids(trace, opts) {
        super::warn(&format!(
            "--tid {tid} names no task of the trace (`fctrace info` lists them)"
        ));
    }
}

/// Whether a `NAME@[syscall]` pattern names a system call.
fn syscall_pattern_matches_any(p: &FuncPattern) -> bool {
    (0..512u32).any(|nr| {
        let n = super::syscalls::name(nr);
        !n.starts_with("syscall_") && p.matches_name(&n)
    })
}

/// `-F`/`-N` bits of each system call number, from the patterns whose
/// module is `[syscall]` (`read@[syscall]`; a pattern without a module
/// names functions only).
fn syscall_flags(o: &Options) -> Vec<u8> {
    let syscall = |ps: &[FuncPattern], name: &str| {
        ps.iter()
            .any(|p| p.module() == Some(super::calls::SYSCALL_MODULE) && p.matches_name(name))
    };
    (0..512u32)
        .map(|nr| {
            let n = super::syscalls::name(nr);
            let mut bits = 0;
            if syscall(&o.filters, &n) {
                bits |= FILTER;
            }
            if syscall(&o.notrace, &n) {
                bits |= NOTRACE;
            }
            bits
        })
        .collect()
}

/// Whether `opts` hides anything at display time (the C runtime's calls
/// are hidden by default).
pub fn filters_display(opts: &Options) -> bool {
    per_call(opts)
        || !opts.tids.is_empty()
        || !opts.show_runtime
        || opts.no_libcall
        || opts.time_range.is_some()
}

/// Whether `opts` has options that follow the calls of a task
/// (stages 1 to 3 of the module documentation); without them, a task's
/// events go through the plain [`Light`] stage.
fn per_call(opts: &Options) -> bool {
    !opts.filters.is_empty()
        || !opts.notrace.is_empty()
        || !opts.callers.is_empty()
        || opts.depth.is_some()
        || opts.time_filter.is_some_and(|t| t > 0)
        || !opts.triggers.is_empty()
}

/// The display-only options of `opts` (`--show-runtime`, `--no-libcall`,
/// `-r`, `--demangle`), without any filter.
pub fn display_only(opts: &Options) -> Options {
    Options {
        show_runtime: opts.show_runtime,
        no_libcall: opts.no_libcall,
        time_range: opts.time_range,
        demangle: opts.demangle,
        ..Options::default()
    }
}

/// CLOCK_MONOTONIC time of the trace's first event (the origin of
/// elapsed times: `-r 100ms~`, `-f elapsed`); 0 for a trace without
/// events.
pub fn trace_start_ns(trace: &Trace) -> u64 {
    trace
        .info
        .tasks
        .iter()
        .filter_map(|t| {
            let mut events = trace.task_events(t).ok()?;
            std::iter::from_fn(|| events.next_event()).find(|e| e.kind.is_call_step())
        })
        .map(|e| e.ns)
        .min()
        .unwrap_or(0)
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
    fn full(&mut self, task: &TaskInfo, events: TaskEvents) -> FullEvents {
        let flags = self.session(task.session);
        let mut vis = self.visibility(task);
        let start = self.start(task, 0);
        if let Some(start) = &start {
            vis.resume(start);
        }
        let o = &self.opts;
        vis.draws = self.backtraces && o.callers.is_empty();
        let callers = (!o.callers.is_empty()).then(|| {
            let mut held = Held::new(Mode::Callers, Some(flags));
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
            time: o
                .time_filter
                .filter(|&t| t > 0)
                .map(|t| Held::new(Mode::Time(t), None)),
        }
    }

    /// Stage 1 of `task`, as it is before the task's first event.
    fn visibility(&mut self, task: &TaskInfo) -> Visibility {
        let flags = self.session(task.session);
        let global = self.global_switches(task);
        let o = &self.opts;
        Visibility {
            flags,
            triggers: o.triggers.clone(),
            has_filters: !o.filters.is_empty(),
            on: true,
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
    fn start(&mut self, task: &TaskInfo, generation: u32) -> Option<Rc<Start>> {
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
    fn fork_starts(&mut self, task: &TaskInfo, generation: u32) {
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
    fn outer_calls_start(&mut self, task: &TaskInfo) -> Option<Rc<Start>> {
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
    fn session(&mut self, session: u32) -> Rc<SessionFlags> {
        if let Some(f) = self.sessions.get(&session) {
            return f.clone();
        }
        let o = &self.opts;
        let mut flags = Vec::new();
        let mut triggers: HashMap<u32, Vec<usize>> = HashMap::new();
        if let Some(table) = self.trace.sessions.get(&session) {
            let any = |ps: &[FuncPattern], module: &str, names: [&str; 3]| {
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
                if any(&self.resumes, module, names) {
                    bits |= RESUMES;
                }
                if any(&self.recorded.0, module, names) {
                    bits |= REC_FILTER;
                }
                if any(&self.recorded.1, module, names) {
                    bits |= REC_NOTRACE;
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
            for func in &table.functions {
                if hidden(o, func, exe) {
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
        });
        self.sessions.insert(session, f.clone());
        f
    }

    /// The switches of the global `trace_on`/`trace_off` triggers and of
    /// the `finish` triggers hit by the tasks of `task`'s process, in time
    /// order (one pass over those tasks, the first time one of them is
    /// read).
    fn global_switches(&mut self, task: &TaskInfo) -> Rc<Vec<(u64, Switch)>> {
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

/// The chain of calls open where tracing resumed, recorded by the agent
/// as the payload of the `Args` event right after the entry of `func`
/// whose next event `src` holds: the events read are put in `ahead`. A
/// backtrace (the same chain, for a `backtrace` trigger) serves too.
#[cold]
#[inline(never)]
fn read_chain(func: u32, src: &mut TaskEvents, ahead: &mut VecDeque<Event>) -> Option<Chain> {
    let args = src.next_event()?;
    ahead.push_back(args);
    if args.kind != EventKind::Args || args.func != func {
        return None;
    }
    let mut bytes = Vec::new();
    while let Some(d) = src.next_event() {
        ahead.push_back(d);
        if d.kind != EventKind::Data {
            break;
        }
        super::args::push_data(&d, &mut bytes);
    }
    fctrace_format::argval::decode_backtrace(&bytes)
        .filter(|b| !b.end && !b.attached)
        .map(|b| Chain {
            funcs: b.funcs,
            resume: b.resume,
            end: false,
            attached: false,
            history: false,
        })
}

/// For an `Args` event just read from `src`: its payload if it is an end
/// mark (`fctrace_format::argval`), whose `Data` events are then consumed;
/// else `None`, and the events read are put in `ahead`, in order.
#[cold]
#[inline(never)]
fn read_end_mark(src: &mut TaskEvents, ahead: &mut VecDeque<Event>) -> Option<Chain> {
    let mut bytes = Vec::new();
    let mut data = Vec::new();
    let mut after = None;
    while let Some(d) = src.next_event() {
        if d.kind != EventKind::Data {
            after = Some(d);
            break;
        }
        super::args::push_data(&d, &mut bytes);
        data.push(d);
    }
    let chain = fctrace_format::argval::decode_backtrace(&bytes)
        .filter(|b| (b.end && b.funcs.len() == 1) || b.attached)
        .map(|b| Chain {
            funcs: b.funcs,
            resume: !b.attached,
            end: b.end,
            attached: b.attached,
            history: b.history,
        });
    if chain.is_none() {
        ahead.extend(data);
    }
    ahead.extend(after);
    chain
}

/// A task's events through the filter stages.
pub struct FilteredEvents {
    inner: Inner,
    /// `-r`, after the other stages.
    range: Option<Range>,
    /// Events the range stage let through, not yet taken.
    out: VecDeque<Event>,
}

enum Inner {
    /// Only [`HIDE`] functions to hide.
    Light(Light),
    /// Stages 1 to 3.
    Full(Box<FullEvents>),
}

impl FilteredEvents {
    #[inline(always)]
    pub fn next_event(&mut self) -> Option<Event> {
        if let (None, Inner::Light(l)) = (&self.range, &mut self.inner) {
            return l.next_event();
        }
        self.next_slow()
    }

    #[inline(never)]
    fn next_slow(&mut self) -> Option<Event> {
        let Some(range) = &mut self.range else {
            return match &mut self.inner {
                Inner::Light(l) => l.next_event(),
                Inner::Full(f) => f.next_event(),
            };
        };
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            let e = match &mut self.inner {
                Inner::Light(l) => l.next_event(),
                Inner::Full(f) => f.next_event(),
            };
            match e {
                Some(e) => range.push(e, &mut self.out),
                None if range.done => return None,
                None => range.finish(&mut self.out),
            }
        }
    }
}

/// The events of a task without the calls of [`HIDE`] functions (their
/// entries, exits and values; what happens inside them is shown): the
/// only stage when no option follows the calls ([`per_call`]).
struct Light {
    src: TaskEvents,
    flags: Rc<SessionFlags>,
    /// The `Data` events read belong to a hidden function's values.
    payload_hidden: bool,
}

impl Light {
    #[inline(always)]
    fn next_event(&mut self) -> Option<Event> {
        let e = self.src.next_event()?;
        // Entries and exits (nearly every event) go through with one test;
        // the others go to `skip`, which keeps `payload_hidden`.
        let hidden = match e.kind {
            EventKind::Entry | EventKind::Exit | EventKind::Unwind => {
                self.flags.flags.get(e.func as usize).copied().unwrap_or(0) & HIDE != 0
            }
            _ => true,
        };
        if hidden {
            self.skip(e)
        } else {
            Some(e)
        }
    }

    /// `e` is hidden, or a mark or value: the next event to show from it.
    #[cold]
    #[inline(never)]
    fn skip(&mut self, mut e: Event) -> Option<Event> {
        loop {
            let hidden = match e.kind {
                EventKind::Data => self.payload_hidden,
                EventKind::Entry
                | EventKind::Exit
                | EventKind::Unwind
                | EventKind::Args
                | EventKind::Retval => {
                    let h = self.flags.flags.get(e.func as usize).copied().unwrap_or(0) & HIDE != 0;
                    self.payload_hidden = h;
                    h
                }
                _ => {
                    self.payload_hidden = false;
                    false
                }
            };
            if !hidden {
                return Some(e);
            }
            e = self.src.next_event()?;
        }
    }
}

/// `-r START~STOP` over the events the other stages show: a call is shown
/// when it runs at some time of the range (it was entered at or before
/// STOP and had not returned before START), with its whole duration; so
/// are the marks within the range and inside the calls shown. The calls
/// entered before START are held (their entries and values, memory one
/// per open call) until START (they are then shown: the calls open at
/// START) or their exits (they are dropped).
struct Range {
    start: u64,
    stop: u64,
    /// An event at or after START was seen.
    started: bool,
    /// Open calls: (function, shown). Before START, all held.
    stack: Vec<(u32, bool)>,
    /// Before START: the events of each held call, from its entry.
    held: Vec<Vec<Event>>,
    /// The task's events have ended.
    done: bool,
}

impl Range {
    fn new(start: u64, stop: u64) -> Range {
        Range {
            start,
            stop,
            started: false,
            stack: Vec::new(),
            held: Vec::new(),
            done: false,
        }
    }

    fn push(&mut self, e: Event, out: &mut VecDeque<Event>) {
        let timed = e.kind.is_call_step();
        if timed && !self.started && e.ns >= self.start {
            // The calls open at START are shown.
            self.started = true;
            for h in self.held.drain(..) {
                out.extend(h);
            }
            for f in &mut self.stack {
                f.1 = true;
            }
        }
        if !self.started {
            match e.kind {
                EventKind::Entry => {
                    self.stack.push((e.func, false));
                    self.held.push(vec![e]);
                }
                EventKind::Exit | EventKind::Unwind => {
                    if let Some(j) = self.stack.iter().rposition(|f| f.0 == e.func) {
                        self.stack.truncate(j);
                        self.held.truncate(j);
                    }
                }
                _ => {
                    if let Some(h) = self.held.last_mut() {
                        if !timed {
                            h.push(e);
                        }
                    }
                }
            }
            return;
        }
        match e.kind {
            EventKind::Entry => {
                let shown = e.ns <= self.stop && self.stack.last().is_none_or(|f| f.1);
                self.stack.push((e.func, shown));
                if shown {
                    out.push_back(e);
                }
            }
            EventKind::Exit | EventKind::Unwind => {
                match self.stack.iter().rposition(|f| f.0 == e.func) {
                    Some(j) => {
                        let shown = self.stack[j].1;
                        self.stack.truncate(j);
                        if shown {
                            out.push_back(e);
                        }
                    }
                    // Entry not recorded: shown if it ends in the range.
                    None => {
                        if e.ns <= self.stop && self.stack.last().is_none_or(|f| f.1) {
                            out.push_back(e);
                        }
                    }
                }
            }
            _ => {
                let inside = match self.stack.last() {
                    Some(f) => f.1,
                    None => !timed || e.ns <= self.stop,
                };
                if inside && (!timed || e.ns <= self.stop || !self.stack.is_empty()) {
                    out.push_back(e);
                }
            }
        }
    }

    /// The task's events have ended (before START: nothing is shown).
    fn finish(&mut self, _out: &mut VecDeque<Event>) {
        self.done = true;
        self.held.clear();
    }
}

/// A task's events through stages 1 to 3.
struct FullEvents {
    src: TaskEvents,
    /// Events read ahead of the entry of a trigger function (its chain
    /// payload), not yet through stage 1 ([`Visibility::pull`]).
    ahead: VecDeque<Event>,
    done: bool,
    /// Events ready to be shown.
    out: VecDeque<Event>,
    /// Between the callers stage and the time stage.
    mid: VecDeque<Event>,
    vis: Visibility,
    callers: Option<Held>,
    time: Option<Held>,
}

impl FullEvents {
    fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            match self.vis.pull(&mut self.src, &mut self.ahead) {
                Some((e, chain)) => {
                    if let Some(e) = self.vis.push_with(e, chain.as_ref()) {
                        if self.vis.opened.iter().any(|o| !o.is_empty()) {
                            let mut before = Vec::new();
                            self.vis.take_opened(&e, &mut before);
                            for o in before {
                                self.stages(o);
                            }
                            self.stages(e);
                            continue;
                        }
                        if self.callers.is_none() && self.time.is_none() {
                            // `out` is empty: straight through.
                            return Some(e);
                        }
                        self.stages(e);
                    }
                }
                None => self.end(),
            }
        }
    }

    /// The task's events have ended: what the stages hold goes out.
    #[cold]
    #[inline(never)]
    fn end(&mut self) {
        self.done = true;
        if let Some(c) = &mut self.callers {
            match &mut self.time {
                None => c.finish(&mut self.out),
                Some(t) => {
                    c.finish(&mut self.mid);
                    while let Some(m) = self.mid.pop_front() {
                        t.push(m, &mut self.out);
                    }
                }
            }
        }
        if let Some(t) = &mut self.time {
            t.finish(&mut self.out);
        }
    }

    #[inline(never)]
    fn stages(&mut self, e: Event) {
        match (&mut self.callers, &mut self.time) {
            (None, None) => self.out.push_back(e),
            (Some(c), None) => c.push(e, &mut self.out),
            (None, Some(t)) => t.push(e, &mut self.out),
            (Some(c), Some(t)) => {
                c.push(e, &mut self.mid);
                while let Some(m) = self.mid.pop_front() {
                    t.push(m, &mut self.out);
                }
            }
        }
    }

    fn backtrace(&mut self, entry: &Event) -> Option<Vec<u32>> {
        let notes = &mut self.vis.notes;
        // Notes of entries hidden by a later stage are older.
        while notes.front().is_some_and(|n| n.tsc < entry.tsc) {
            notes.pop_front();
        }
        match notes.front() {
            Some(n) if n.tsc == entry.tsc && n.func == entry.func => {
                notes.pop_front().map(|n| n.callers)
            }
            _ => None,
        }
    }
}

/// A backtrace to print before the entry of `func` at `tsc`.
struct Note {
    func: u32,
    tsc: u64,
    callers: Vec<u32>,
}

/// An open call of the task (every recorded one).
#[derive(Clone, Copy)]
struct RawFrame {
    func: u32,
    /// FILTER / NOTRACE bits this call opened.
    opened: u8,
    shown: bool,
    /// Entered before the task's events begin, not counted as a level of
    /// `-D` ([`Filter::start`]).
    outer: bool,
    /// A [`HIDE`] function: not shown, what it calls is.
    hide: bool,
    /// An outer call (of an attach chain, or open where tracing resumed)
    /// that the tree is told to open ([`Visibility::draw_opened`]).
    drawn: bool,
    /// The depth limit before this call (restored at its exit).
    saved_limit: u32,
}

/// Fork chains longer than this start their deepest children from their
/// own events only (bounds the recursion of [`Filter::start`]).
const MAX_FORK_GENERATIONS: u32 = 256;

/// The state of stage 1 a task starts in ([`Filter::start`]).
#[derive(Clone)]
struct Start {
    on: bool,
    finished: bool,
    notrace_open: u32,
    filter_open: u32,
    shown: u32,
    limit: u32,
    stack: Vec<RawFrame>,
}

/// Stage 1: `-F`, `-N`, `-D`, `-T`.
struct Visibility {
    flags: Rc<SessionFlags>,
    triggers: Vec<fctrace_options::Trigger>,
    has_filters: bool,
    on: bool,
    finished: bool,
    /// Open -N calls.
    notrace_open: u32,
    /// Open -F calls.
    filter_open: u32,
    /// Open shown calls.
    shown: u32,
    /// Shown calls may be open while `shown < limit`.
    limit: u32,
    stack: Vec<RawFrame>,
    global: Rc<Vec<(u64, Switch)>>,
    global_next: usize,
    backtraces: bool,
    notes: VecDeque<Note>,
    /// The recording had `trace_on` triggers: its `Args` events may be end
    /// marks ([`Visibility::pull`]).
    marks: bool,
    /// No entry or exit of the task read yet: its `Args` events may be
    /// attach chains.
    at_start: bool,
    /// Inside a system call's events (`record -k`): whether they are
    /// shown (its values and return follow its entry).
    in_syscall: Option<bool>,
    /// A history chain was read ([`EventSource::history`]).
    history: bool,
    /// For the tree (without `-C`): the outer calls shown are passed on
    /// as chains for the tree to open ([`draw_opened`](Self::draw_opened)).
    draws: bool,
    /// Outer calls to open before the next event passed on: those of an
    /// attach chain, and those open where tracing resumed (outermost
    /// first).
    opened: [Vec<u32>; 2],
    /// The recording had `-F` patterns ([`REC_FILTER`]).
    recorded_filters: bool,
}

impl Visibility {
    fn snapshot(&self) -> Start {
        Start {
            on: self.on,
            finished: self.finished,
            notrace_open: self.notrace_open,
            filter_open: self.filter_open,
            shown: self.shown,
            limit: self.limit,
            stack: self.stack.clone(),
        }
    }

    fn resume(&mut self, s: &Start) {
        self.on = s.on;
        self.finished = s.finished;
        self.notrace_open = s.notrace_open;
        self.filter_open = s.filter_open;
        self.shown = s.shown;
        self.limit = s.limit;
        self.stack = s.stack.clone();
        self.at_start = true;
    }

    /// Tracing resumed with the calls of `chain` open (outermost first,
    /// as the agent walked the stack): those the task's events did not
    /// enter (entered while tracing was off) are added around the open
    /// calls it knows, as calls entered before its events
    /// ([`outer_call`](Self::outer_call): they count for `-F` and `-N`,
    /// not for `-D`, as in the agent). A chain cut to its innermost part
    /// keeps the known calls below it.
    #[cold]
    #[inline(never)]
    fn open_calls(&mut self, chain: &[u32]) {
        let known = std::mem::take(&mut self.stack);
        let mut j = 0;
        for &func in chain {
            match known[j..].iter().position(|f| f.func == func) {
                Some(k) => {
                    self.stack.extend_from_slice(&known[j..=j + k]);
                    j += k + 1;
                }
                None => self.outer_call(func),
            }
        }
        self.stack.extend_from_slice(&known[j..]);
    }

    /// For the tree ([`draws`](Self::draws)): the outer calls shown (not
    /// [`HIDE`]) after the last call the tree has open (one whose entry
    /// it showed, or an outer call it opened) are to be opened before the
    /// next event passed on, as an attach chain (`attached`) or as calls
    /// entered while tracing was off; the calls before it cannot be put
    /// around lines already printed.
    #[cold]
    #[inline(never)]
    fn draw_opened(&mut self, attached: bool) {
        if !self.draws {
            return;
        }
        let from = self
            .stack
            .iter()
            .rposition(|f| (!f.outer && f.shown) || f.drawn)
            .map_or(0, |k| k + 1);
        // Nor those the recording's -F/-N left out (as its own tree:
        // [`ChainChoice`]).
        let (mut in_filter, mut in_notrace) = (!self.recorded_filters, false);
        let flags = &self.flags.flags;
        let opened = &mut self.opened[usize::from(!attached)];
        for (k, f) in self.stack.iter_mut().enumerate() {
            let bits = flags.get(f.func as usize).copied().unwrap_or(0);
            in_filter |= bits & REC_FILTER != 0;
            in_notrace |= bits & REC_NOTRACE != 0;
            let recorded = in_filter && !in_notrace;
            if k >= from && recorded && f.outer && f.shown && !f.hide && !f.drawn {
                f.drawn = true;
                opened.push(f.func);
            }
        }
    }

    /// The payload events of the outer calls to open before `e` (an
    /// `Args` event with a chain payload, `fctrace_format::argval`, with
    /// `e`'s time and no function: the tree opens them), in order.
    #[cold]
    #[inline(never)]
    fn take_opened(&mut self, e: &Event, out: &mut Vec<Event>) {
        for (k, funcs) in self.opened.iter_mut().enumerate() {
            for part in funcs.chunks(fctrace_format::argval::MAX_ATTACH_CHAIN) {
                let mut buf = vec![0u8; 4 + 4 * part.len()];
                let mut w = fctrace_format::argval::Writer::new(&mut buf);
                if k == 0 {
                    w.attach_chain(part);
                } else {
                    w.chain(part, false, true);
                }
                let len = w.len();
                out.push(Event {
                    kind: EventKind::Args,
                    func: u32::MAX,
                    ..*e
                });
                for bytes in buf[..len].chunks(16) {
                    let mut b = [0u8; 16];
                    b[..bytes.len()].copy_from_slice(bytes);
                    let word =
                        |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
                    out.push(Event {
                        kind: EventKind::Data,
                        func: bytes.len() as u32,
                        tsc: word(0),
                        ns: word(8),
                    });
                }
            }
            funcs.clear();
        }
    }

    /// A call entered before the task's events begin (outermost first).
    fn outer_call(&mut self, func: u32) {
        let bits = self.bits(func);
        let shown = self.context_shown(bits);
        let opened = bits & (FILTER | NOTRACE);
        if opened & NOTRACE != 0 {
            self.notrace_open += 1;
        }
        if opened & FILTER != 0 {
            self.filter_open += 1;
        }
        self.stack.push(RawFrame {
            func,
            opened,
            shown,
            outer: true,
            hide: bits & HIDE != 0,
            drawn: false,
            saved_limit: self.limit,
        });
    }

    fn apply(&mut self, s: Switch) {
        match s {
            Switch::On => self.on = true,
            Switch::Off => self.on = false,
            Switch::Finish => self.finished = true,
        }
    }

    /// The next event of `src` (after those read ahead before, in
    /// `ahead`), with, for the entry of a trigger function, the calls open
    /// where tracing resumed at it, when the agent recorded them (a chain
    /// payload right after the entry: `fctrace_format::argval`). The
    /// events read to find it are kept in `ahead`, in order.
    fn pull(
        &mut self,
        src: &mut TaskEvents,
        ahead: &mut VecDeque<Event>,
    ) -> Option<(Event, Option<Chain>)> {
        // The last event read ahead is the one after what was looked at
        // (the events before it belong to an entry or a mark already
        // looked at): it is looked at as one read now, its following
        // events being still in `src`.
        let (e, fresh) = match ahead.pop_front() {
            Some(e) => (e, ahead.is_empty()),
            None => (src.next_event()?, true),
        };
        if !matches!(e.kind, EventKind::Args | EventKind::Data) {
            self.at_start = false;
        }
        match e.kind {
            EventKind::Entry if self.bits(e.func) & (TRIGGER | RESUMES) != 0 => {
                // A backtrace recorded where the recording's trace_on
                // function resumed tracing is that chain too.
                let resumes = self.bits(e.func) & RESUMES != 0;
                let chain = read_chain(e.func, src, ahead).map(|mut c| {
                    c.resume |= resumes;
                    c
                });
                Some((e, chain))
            }
            EventKind::Args if fresh && (self.marks || self.at_start) => {
                Some((e, read_end_mark(src, ahead)))
            }
            _ => Some((e, None)),
        }
    }

    /// The event if it is shown; `chain`: for an entry, the calls open
    /// where tracing resumed at it, as the agent found them on the stack.
    fn push_with(&mut self, e: Event, chain: Option<&Chain>) -> Option<Event> {
        if self.finished {
            return (e.kind == EventKind::Lost).then_some(e);
        }
        let was_on = self.on;
        if e.kind.is_call_step() {
            while let Some(&(ns, s)) = self.global.get(self.global_next) {
                if ns > e.ns {
                    break;
                }
                self.apply(s);
                self.global_next += 1;
            }
            if self.finished {
                return (e.kind == EventKind::Lost).then_some(e);
            }
        }
        // A system call's values and return go with it.
        match (e.kind, self.in_syscall) {
            (
                EventKind::Data
                | EventKind::SyscallExit
                | EventKind::KernelEntry
                | EventKind::KernelExit,
                Some(shown),
            ) => {
                return shown.then_some(e);
            }
            (EventKind::Data, None) => {}
            _ => self.in_syscall = None,
        }
        match e.kind {
            EventKind::Syscall => {
                // Shown where the call it is in is (its own -F/-N
                // `NAME@[syscall]` aside).
                let bits = self
                    .flags
                    .syscalls
                    .get(e.func as usize)
                    .copied()
                    .unwrap_or(0);
                let around = match self.stack.last() {
                    Some(top) if top.hide => self
                        .stack
                        .iter()
                        .rev()
                        .find(|f| !f.hide)
                        .map_or_else(|| self.context_shown(0), |f| f.shown),
                    Some(top) => top.shown,
                    None => self.context_shown(0),
                };
                let shown = bits & NOTRACE == 0
                    && self.on
                    && (around || bits & FILTER != 0 && self.notrace_open == 0);
                self.in_syscall = Some(shown);
                shown.then_some(e)
            }
            EventKind::Entry => self.entry(e, chain.filter(|c| c.resume || !was_on)),
            EventKind::Args if chain.is_some_and(|c| c.attached) => {
                // The calls open when fctrace attached: outer calls for
                // the filters (those the task's start already counts, from
                // their exits, are kept). Those shown open the tree (not
                // those of a history chain); their returns are shown
                // where they come.
                if let Some(c) = chain {
                    self.open_calls(&c.funcs);
                    self.history |= c.history;
                    if !c.history {
                        self.draw_opened(true);
                    }
                }
                None
            }
            EventKind::Args if chain.is_some_and(|c| c.end) => {
                // The end of a call open where tracing resumed: its
                // frame (and any left above it) is gone; shown as its
                // return when the tree opened it.
                if let Some(j) = self.stack.iter().rposition(|f| f.func == e.func) {
                    let drawn = self.stack[j].drawn;
                    while self.stack.len() > j {
                        self.pop();
                    }
                    if drawn {
                        return Some(Event {
                            kind: EventKind::Exit,
                            ..e
                        });
                    }
                }
                None
            }
            EventKind::Exit | EventKind::Unwind => {
                // rposition looks at the top first.
                match self.stack.iter().rposition(|f| f.func == e.func) {
                    Some(j) => {
                        let shown = self.stack[j].shown;
                        while self.stack.len() > j {
                            self.pop();
                        }
                        shown.then_some(e)
                    }
                    // Entry not recorded: shown where a call of it would be.
                    None => {
                        let bits = self.bits(e.func);
                        (bits & HIDE == 0 && self.context_shown(bits)).then_some(e)
                    }
                }
            }
            EventKind::Lost => Some(e),
            // A signal from the kernel's side, kernel functions outside a
            // system call: with their values, where the call they came in
            // is shown.
            EventKind::KernelSignal | EventKind::KernelEntry => {
                let shown = match self.stack.last() {
                    Some(top) if top.hide => match self.stack.iter().rev().find(|f| !f.hide) {
                        Some(f) => f.shown,
                        None => self.context_shown(0),
                    },
                    Some(top) => top.shown,
                    None => self.context_shown(0),
                };
                self.in_syscall = Some(shown);
                shown.then_some(e)
            }
            // Signal marks, arguments and return values belong to the call
            // they came in.
            _ => match self.stack.last() {
                Some(top) if top.hide => {
                    // A hidden call's values are hidden; a mark in it
                    // belongs to where its calls are shown.
                    if matches!(
                        e.kind,
                        EventKind::Args | EventKind::Retval | EventKind::Data
                    ) {
                        return None;
                    }
                    match self.stack.iter().rev().find(|f| !f.hide) {
                        Some(f) => f.shown.then_some(e),
                        None => self.context_shown(0).then_some(e),
                    }
                }
                Some(top) => top.shown.then_some(e),
                None => self.context_shown(0).then_some(e),
            },
        }
    }

    #[inline]
    fn bits(&self, func: u32) -> u8 {
        self.flags.flags.get(func as usize).copied().unwrap_or(0)
    }

    /// Whether a call with these flags would be shown, depth aside.
    fn context_shown(&self, bits: u8) -> bool {
        self.on
            && self.notrace_open == 0
            && bits & NOTRACE == 0
            && (!self.has_filters || self.filter_open > 0 || bits & FILTER != 0)
    }

    /// `resumed`: the chain recorded at this entry when tracing resumed
    /// there (in the recording, or for this display's triggers).
    fn entry(&mut self, e: Event, resumed: Option<&Chain>) -> Option<Event> {
        let bits = self.bits(e.func);
        let saved_limit = self.limit;
        let mut backtrace = false;
        if bits & TRIGGER != 0 {
            backtrace = self.trigger(e.func);
            if self.finished {
                return None;
            }
        }
        if let Some(chain) = resumed.filter(|c| c.resume || self.on) {
            self.open_calls(&chain.funcs);
        }
        let hide = bits & HIDE != 0;
        let shown = !hide && self.context_shown(bits) && self.shown < saved_limit.min(self.limit);
        // The tree opens them before this entry when it shows it (the
        // agent records them only then).
        if shown && resumed.is_some() {
            self.draw_opened(false);
        }
        if shown && backtrace && self.backtraces {
            self.notes.push_back(Note {
                func: e.func,
                tsc: e.tsc,
                callers: self.stack.iter().map(|f| f.func).collect(),
            });
        }
        let opened = bits & (FILTER | NOTRACE);
        if opened & NOTRACE != 0 {
            self.notrace_open += 1;
        }
        if opened & FILTER != 0 {
            self.filter_open += 1;
        }
        if shown {
            self.shown += 1;
        }
        self.stack.push(RawFrame {
            func: e.func,
            opened,
            shown,
            outer: false,
            hide,
            drawn: false,
            saved_limit,
        });
        shown.then_some(e)
    }

    /// Applies the triggers of `func` at its entry; whether one asks for
    /// a backtrace.
    #[inline(never)]
    fn trigger(&mut self, func: u32) -> bool {
        let mut backtrace = false;
        let flags = self.flags.clone();
        for &i in flags.triggers.get(&func).into_iter().flatten() {
            for k in 0..self.triggers[i].actions.len() {
                match self.triggers[i].actions[k] {
                    Action::TraceOn => self.on = true,
                    Action::TraceOff => self.on = false,
                    Action::Finish => self.finished = true,
                    Action::Depth(n) => {
                        self.limit = self.limit.min(self.shown.saturating_add(n));
                    }
                    Action::Backtrace => backtrace = true,
                    // A recording's action: nothing to do in a reader.
                    Action::Snapshot => {}
                }
            }
        }
        backtrace
    }

    fn pop(&mut self) {
        if let Some(f) = self.stack.pop() {
            if f.opened & NOTRACE != 0 {
                self.notrace_open -= 1;
            }
            if f.opened & FILTER != 0 {
                self.filter_open -= 1;
            }
            if f.shown && !f.outer {
                self.shown -= 1;
            }
            self.limit = f.saved_limit;
        }
    }
}

/// What a [`Held`] stage waits for before showing a call.
#[derive(Clone, Copy)]
enum Mode {
    /// `-C`: a call of a caller-filter function under it.
    Callers,
    /// `-t`: to have lasted this long (ns).
    Time(u64),
}

/// An open call (of the calls the stage receives).
struct HeldFrame {
    func: u32,
    entry_ns: u64,
    /// Position of its entry in the stage's buffer (absolute), while held.
    start: u64,
    /// `-C`: a call of a caller-filter function.
    caller: bool,
}

/// A stage that holds calls until it knows whether to show them (stages 2
/// and 3 of the module documentation).
struct Held {
    mode: Mode,
    frames: Vec<HeldFrame>,
    /// `frames[..shown]` have been passed on; the others are held.
    shown: usize,
    /// Events held since the entry of `frames[shown]`.
    buf: VecDeque<Event>,
    /// Absolute position of `buf[0]`.
    base: u64,
    /// `-C`: open calls of caller-filter functions among the shown ones.
    in_caller: u32,
    /// `-C`: the flags of the session's functions.
    callers: Option<Rc<SessionFlags>>,
}

impl Held {
    fn new(mode: Mode, callers: Option<Rc<SessionFlags>>) -> Held {
        Held {
            mode,
            frames: Vec::new(),
            shown: 0,
            buf: VecDeque::new(),
            base: 0,
            in_caller: 0,
            callers,
        }
    }

    /// Passes on or holds an event, in order.
    #[inline]
    fn emit(&mut self, e: Event, out: &mut VecDeque<Event>) {
        if self.shown < self.frames.len() {
            self.buf.push_back(e);
        } else {
            out.push_back(e);
        }
    }

    /// Shows the held calls `frames[shown..k]` with what is held under
    /// them up to the next held call.
    fn show_upto(&mut self, k: usize, out: &mut VecDeque<Event>) {
        if k <= self.shown {
            return;
        }
        let end = match self.frames.get(k) {
            Some(f) => f.start,
            None => self.base + self.buf.len() as u64,
        };
        let n = (end - self.base) as usize;
        out.extend(self.buf.drain(..n));
        self.base = end;
        for f in &self.frames[self.shown..k] {
            if f.caller {
                self.in_caller += 1;
            }
        }
        self.shown = k;
    }

    /// Drops the held calls from `frames[j]` up (`j >= shown`) with
    /// everything held under them, but `Lost` marks.
    fn drop_from(&mut self, j: usize) {
        if let Some(f) = self.frames.get(j) {
            let keep = (f.start - self.base) as usize;
            if self.buf.range(keep..).any(|e| e.kind == EventKind::Lost) {
                let lost: Vec<Event> = self
                    .buf
                    .drain(keep..)
                    .filter(|e| e.kind == EventKind::Lost)
                    .collect();
                self.buf.extend(lost);
            } else {
                self.buf.truncate(keep);
            }
            self.frames.truncate(j);
        }
    }

    fn push(&mut self, e: Event, out: &mut VecDeque<Event>) {
        if let Mode::Time(t) = self.mode {
            if e.kind.is_call_step() && self.shown < self.frames.len() {
                let k = self.shown
                    + self.frames[self.shown..]
                        .iter()
                        .take_while(|f| e.ns.saturating_sub(f.entry_ns) >= t)
                        .count();
                self.show_upto(k, out);
            }
        }
        match e.kind {
            EventKind::Entry => {
                let caller = match self.mode {
                    Mode::Callers => self.is_caller(e.func),
                    Mode::Time(_) => false,
                };
                let start = self.base + self.buf.len() as u64;
                self.frames.push(HeldFrame {
                    func: e.func,
                    entry_ns: e.ns,
                    start,
                    caller,
                });
                match self.mode {
                    Mode::Callers if caller || self.in_caller > 0 => {
                        self.buf.push_back(e);
                        self.show_upto(self.frames.len(), out);
                    }
                    _ => self.buf.push_back(e),
                }
            }
            EventKind::Exit | EventKind::Unwind => {
                // rposition looks at the top first.
                match self.frames.iter().rposition(|f| f.func == e.func) {
                    Some(j) if j >= self.shown => self.drop_from(j),
                    Some(j) => {
                        self.drop_from(self.shown);
                        for f in self.frames.drain(j..) {
                            if f.caller {
                                self.in_caller -= 1;
                            }
                        }
                        self.shown = j;
                        out.push_back(e);
                    }
                    None => match self.mode {
                        Mode::Callers if self.in_caller == 0 => {}
                        _ => self.emit(e, out),
                    },
                }
            }
            EventKind::Lost => self.emit(e, out),
            _ => match self.mode {
                // Outside the calls shown by -C: only within held callers.
                Mode::Callers if self.frames.is_empty() => {}
                _ => self.emit(e, out),
            },
        }
    }

    /// A call entered before the task's events begin (outermost first):
    /// open, its entry not in the stream; shown at once if it or a call
    /// around it is a caller-filter function.
    fn outer_call(&mut self, func: u32) {
        let caller = self.is_caller(func);
        self.frames.push(HeldFrame {
            func,
            entry_ns: 0,
            start: self.base + self.buf.len() as u64,
            caller,
        });
        if caller || self.in_caller > 0 {
            self.show_upto(self.frames.len(), &mut VecDeque::new());
        }
    }

    fn is_caller(&self, func: u32) -> bool {
        self.callers
            .as_ref()
            .is_some_and(|f| f.flags.get(func as usize).copied().unwrap_or(0) & CALLER != 0)
    }

    /// The task's events have ended.
    fn finish(&mut self, out: &mut VecDeque<Event>) {
        match self.mode {
            // Never led to a call of a caller-filter function.
            Mode::Callers => self.drop_from(self.shown),
            // Never returned: shown.
            Mode::Time(_) => {}
        }
        self.show_upto(self.frames.len(), out);
        out.extend(self.buf.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::{ev, fake_trace, FakeTask};
    use crate::tree::{write_tree_styled, TreeStyle};
    use fctrace_format::event::EventKind::{Entry, Exit, Lost, Signal, Unwind};
    use fctrace_format::event::RawEvent;
    use fctrace_format::store::Trace;
    use fctrace_options::{FuncPattern, Options, Trigger};

    fn opts(f: impl FnOnce(&mut Options)) -> Options {
        let mut o = Options::default();
        f(&mut o);
        o
    }

    fn pats(list: &[&str]) -> Vec<FuncPattern> {
        list.iter()
            .map(|p| FuncPattern::parse(p).unwrap())
            .collect()
    }

    fn trigs(list: &[&str]) -> Vec<Trigger> {
        list.iter().map(|p| Trigger::parse(p).unwrap()).collect()
    }

    /// The tree's lines after its header, task headers included.
    fn tree(trace: &Trace, o: &Options) -> String {
        let mut out = Vec::new();
        // Task after task: these tests are about which calls are shown.
        let style = TreeStyle {
            task_order: true,
            ..TreeStyle::default()
        };
        let summary = write_tree_styled(trace, o, &style, &mut out).unwrap();
        assert!(summary.errors.is_empty(), "{:?}", summary.errors);
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .skip(1)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    }

    /// Lines of task 1 (after its header), without the task column.
    fn calls(trace: &Trace, o: &Options) -> String {
        tree(trace, o)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.replacen(" [    1] | ", " | ", 1) + "\n")
            .collect()
    }

    /// ids: 0 main, 1 parse_args, 2 strtol (libc), 3 leaf, 4 foo(int),
    /// 5 S::get() const.
    ///
    /// main (0..10000) { parse_args (100..5100) { strtol (200..300) }
    /// leaf (6000..6050) foo(int) (7000..9000) { S::get (7100..7200) {
    /// strtol (7110..7120) } leaf (8000..8001) } }
    fn sample() -> Vec<RawEvent> {
        vec![
            ev(Entry, 0, 0),
            ev(Entry, 1, 100),
            ev(Entry, 2, 200),
            ev(Exit, 2, 300),
            ev(Exit, 1, 5_100),
            ev(Entry, 3, 6_000),
            ev(Exit, 3, 6_050),
            ev(Entry, 4, 7_000),
            ev(Entry, 5, 7_100),
            ev(Entry, 2, 7_110),
            ev(Exit, 2, 7_120),
            ev(Exit, 5, 7_200),
            ev(Entry, 3, 8_000),
            ev(Exit, 3, 8_001),
            ev(Exit, 4, 9_000),
            ev(Exit, 0, 10_000),
        ]
    }

    fn one(events: Vec<RawEvent>) -> (tempfile::TempDir, Trace) {
        fake_trace(&[FakeTask::main(1, events)])
    }

    /// An `Args` record of `func` at `t` and its payload records.
    fn payload(
        func: u32,
        t: u64,
        fill: impl FnOnce(&mut fctrace_format::argval::Writer),
    ) -> Vec<RawEvent> {
        crate::testutil::payload_events(fctrace_format::event::EventKind::Args, func, t, fill)
    }

    /// The calls open when fctrace attached (an attach chain first in the
    /// task) open the tree, and everything is at its depth; with filters,
    /// they are calls open for -F/-N (the filters' start counts them
    /// once, though their exits say so too), and those shown open it.
    #[test]
    fn calls_open_when_fctrace_attached() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf.
        let mut events = payload(0, 90, |w| {
            w.attach_chain(&[0, 1]);
        });
        events.extend([
            ev(Entry, 3, 100),
            ev(Exit, 3, 110),
            ev(Exit, 1, 120),
            ev(Entry, 2, 130),
            ev(Exit, 2, 140),
            ev(Exit, 0, 150),
        ]);
        let (_d, t) = one(events);
        let all = "            | main() { /* entered before the trace began */
            |   parse_args() { /* entered before the trace began */
   0.010 us |     leaf();
            |   } /* parse_args */ (entry not recorded)
   0.010 us |   strtol();
            | } /* main */ (entry not recorded)
";
        assert_eq!(calls(&t, &Options::default()), all);
        // -D counts levels from the first recorded one, as the agent.
        assert_eq!(calls(&t, &opts(|o| o.depth = Some(1))), all);
        let inside = opts(|o| o.filters = pats(&["parse_args"]));
        assert_eq!(
            calls(&t, &inside),
            "            | parse_args() { /* entered before the trace began */
   0.010 us |   leaf();
            | } /* parse_args */ (entry not recorded)
"
        );
        let outside = opts(|o| o.notrace = pats(&["parse_args"]));
        assert_eq!(
            calls(&t, &outside),
            "            | main() { /* entered before the trace began */
   0.010 us |   strtol();
            | } /* main */ (entry not recorded)
"
        );
    }

    /// A flight recorder's snapshot: a history chain first in a task of
    /// any origin (here a thread's) is read as an attach chain: calls open
    /// for -F/-N, their returns `(entry not in history)`.
    #[test]
    fn calls_open_where_the_history_begins() {
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf.
        let events_after = [
            ev(Entry, 3, 100),
            ev(Exit, 3, 110),
            ev(Exit, 1, 120),
            ev(Entry, 2, 130),
            ev(Exit, 2, 140),
            ev(Exit, 0, 150),
        ];
        let mut events = payload(0, 90, |w| {
            w.history_chain(&[0, 1]);
        });
        events.extend_from_slice(&events_after);
        let (_d, t) = fake_trace(&[
            FakeTask::main(2, vec![ev(Entry, 3, 10), ev(Exit, 3, 20)]),
            FakeTask::thread(1, 2, events),
        ]);
        let thread = |o: &Options| -> String {
            let text = tree(&t, o);
            let part = text.split("# task 1:").nth(1).unwrap_or_default();
            part.lines()
                .skip(1)
                .map(|l| l.replacen(" [    1] | ", " | ", 1) + "\n")
                .collect()
        };
        assert_eq!(
            thread(&Options::default()),
            "   0.010 us |     leaf();
            |   } /* parse_args */ (entry not in history)
   0.010 us |   strtol();
            | } /* main */ (entry not in history)
"
        );
        let inside = opts(|o| o.filters = pats(&["parse_args"]));
        assert_eq!(
            thread(&inside),
            "   0.010 us | leaf();
            | } /* parse_args */ (entry not in history)
"
        );
        let outside = opts(|o| o.notrace = pats(&["parse_args"]));
        assert_eq!(
            thread(&outside),
            "   0.010 us | strtol();
            | } /* main */ (entry not in history)
"
        );
        // With -D and -t: what an attach chain's filtered tree shows
        // without the calls it opens (a history chain's are not drawn).
        assert_eq!(
            thread(&opts(|o| o.depth = Some(1))),
            "   0.010 us | leaf();
            | } /* parse_args */ (entry not in history)
   0.010 us | strtol();
            | } /* main */ (entry not in history)
"
        );
        assert_eq!(
            thread(&opts(|o| o.time_filter = Some(50))),
            "            | } /* parse_args */ (entry not in history)
            | } /* main */ (entry not in history)
"
        );
        // -C reads it as the same attach chain would be read.
        let mut attached = payload(0, 90, |w| {
            w.attach_chain(&[0, 1]);
        });
        attached.extend_from_slice(&events_after);
        let (_a, at) = one(attached);
        let o = opts(|o| o.callers = pats(&["strtol"]));
        assert_eq!(
            thread(&o),
            calls(&at, &o).replace("(entry not recorded)", "(entry not in history)")
        );
    }

    /// Backtraces recorded by the agent (`record -F strtol -T
    /// strtol@backtrace`): printed whether replay asks for them or not,
    /// once, before the call's line (with its values after them), and
    /// hidden with their call.
    #[test]
    fn recorded_backtraces() {
        let mut events = vec![ev(Entry, 2, 200)];
        events.extend(payload(2, 200, |w| {
            w.backtrace(&[0, 1], false);
        }));
        events.push(ev(Exit, 2, 300));
        events.push(ev(Entry, 2, 7_110));
        events.extend(payload(2, 7_110, |w| {
            w.backtrace(&[4, 5], true);
        }));
        events.extend(payload(2, 7_110, |w| {
            w.int(fctrace_format::argval::IntFmt::Auto, 8, 10);
        }));
        events.push(ev(Exit, 2, 7_120));
        let (_d, t) = one(events);
        let expected = "            | /* backtrace: main > parse_args */
   0.100 us | strtol();
            | /* backtrace: ... > foo(int) > S::get() const */
   0.010 us | strtol(10);
";
        assert_eq!(calls(&t, &Options::default()), expected);
        let again = opts(|o| o.triggers = trigs(&["strtol@backtrace"]));
        assert_eq!(calls(&t, &again), expected);
        let hidden = opts(|o| o.notrace = pats(&["strtol"]));
        assert_eq!(calls(&t, &hidden), "");
        let short = opts(|o| o.time_filter = Some(50));
        assert_eq!(
            calls(&t, &short),
            "            | /* backtrace: main > parse_args */
   0.100 us | strtol();
"
        );
    }

    /// The calls open where tracing resumed, recorded by the agent after
    /// the entry of a `trace_on` trigger function: not shown, but open
    /// calls for -F/-N from there on.
    #[test]
    fn recorded_open_calls_where_tracing_resumed() {
        let resumed = |with_chain: bool| {
            let mut events = vec![ev(Entry, 3, 100)];
            if with_chain {
                events.extend(payload(3, 100, |w| {
                    w.chain(&[0], false, true);
                }));
            }
            events.extend([ev(Exit, 3, 200), ev(Entry, 4, 300), ev(Exit, 4, 400)]);
            one(events)
        };
        let (_d, t) = resumed(true);
        // main opens the tree where tracing resumed; it never returns.
        let plain = "            | main() { /* entered while tracing was off */
   0.100 us |   leaf();
   0.100 us |   foo(int);
            | } /* main */ (not returned)
";
        assert_eq!(calls(&t, &Options::default()), plain);
        let f_main = opts(|o| {
            o.filters = pats(&["main"]);
            o.triggers = trigs(&["leaf@trace_on"]);
        });
        assert_eq!(calls(&t, &f_main), plain);
        let f_leaf = opts(|o| {
            o.filters = pats(&["leaf"]);
            o.triggers = trigs(&["leaf@trace_on"]);
        });
        assert_eq!(calls(&t, &f_leaf), "   0.100 us | leaf();\n");
        let n_main = opts(|o| {
            o.notrace = pats(&["main"]);
            o.triggers = trigs(&["leaf@trace_on"]);
        });
        assert_eq!(calls(&t, &n_main), "");
        // Without the chain (an older agent), main is not known.
        let (_d2, old) = resumed(false);
        assert_eq!(calls(&old, &f_main), "");
    }

    #[test]
    fn no_options_is_the_plain_tree() {
        let (_d, t) = one(sample());
        assert_eq!(
            calls(&t, &Options::default()),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
   0.050 us |   leaf();
            |   foo(int) {
            |     S::get() const {
   0.010 us |       strtol();
   0.100 us |     } /* S::get() const */
   0.001 us |     leaf();
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        // Nothing to hide (the runtime shown): no filter at all.
        let all = opts(|o| o.show_runtime = true);
        assert!(super::Filter::new(&t, &all, true).is_none());
        assert!(super::Filter::new(&t, &Options::default(), true).is_some());
    }

    #[test]
    fn filter_and_notrace() {
        let (_d, t) = one(sample());
        // -F: the function and what it calls, C++ names without their
        // parameters, regexes anywhere in the name.
        assert_eq!(
            calls(&t, &opts(|o| o.filters = pats(&["foo"]))),
            "            | foo(int) {
            |   S::get() const {
   0.010 us |     strtol();
   0.100 us |   } /* S::get() const */
   0.001 us |   leaf();
   2.000 us | } /* foo(int) */
"
        );
        assert_eq!(
            calls(&t, &opts(|o| o.filters = pats(&["^S::", "parse_args"]))),
            "            | parse_args() {
   0.100 us |   strtol();
   5.000 us | } /* parse_args */
            | S::get() const {
   0.010 us |   strtol();
   0.100 us | } /* S::get() const */
"
        );
        // Modules: strtol is libc's, leaf is not.
        assert_eq!(
            calls(
                &t,
                &opts(|o| o.filters = pats(&["strtol@libc", "leaf@libc"]))
            ),
            "   0.100 us | strtol();
   0.010 us | strtol();
"
        );
        // -N hides the function and its subtree; with -F both apply.
        assert_eq!(
            calls(&t, &opts(|o| o.notrace = pats(&["parse_args", "S::get"]))),
            "            | main() {
   0.050 us |   leaf();
            |   foo(int) {
   0.001 us |     leaf();
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        assert_eq!(
            calls(
                &t,
                &opts(|o| {
                    o.filters = pats(&["foo"]);
                    o.notrace = pats(&["leaf"]);
                })
            ),
            "            | foo(int) {
            |   S::get() const {
   0.010 us |     strtol();
   0.100 us |   } /* S::get() const */
   2.000 us | } /* foo(int) */
"
        );
    }

    #[test]
    fn depth() {
        let (_d, t) = one(sample());
        assert_eq!(
            calls(&t, &opts(|o| o.depth = Some(1))),
            "  10.000 us | main();\n"
        );
        assert_eq!(
            calls(&t, &opts(|o| o.depth = Some(2))),
            "            | main() {
   5.000 us |   parse_args();
   0.050 us |   leaf();
   2.000 us |   foo(int);
  10.000 us | } /* main */
"
        );
        // With -F, the -F function is level 1.
        assert_eq!(
            calls(
                &t,
                &opts(|o| {
                    o.filters = pats(&["foo"]);
                    o.depth = Some(2);
                })
            ),
            "            | foo(int) {
   0.100 us |   S::get() const;
   0.001 us |   leaf();
   2.000 us | } /* foo(int) */
"
        );
    }

    #[test]
    fn time_filter_keeps_the_callers_durations() {
        let (_d, t) = one(sample());
        assert_eq!(
            calls(&t, &opts(|o| o.time_filter = Some(1_000))),
            "            | main() {
   5.000 us |   parse_args();
   2.000 us |   foo(int);
  10.000 us | } /* main */
"
        );
        assert_eq!(
            calls(&t, &opts(|o| o.time_filter = Some(100))),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
            |   foo(int) {
   0.100 us |     S::get() const;
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        // Everything is shorter: nothing is shown.
        assert_eq!(calls(&t, &opts(|o| o.time_filter = Some(10_001))), "");
        // The report counts only the shown calls; the hidden ones' time
        // stays in their callers' self time.
        let r = crate::report::aggregate_with(&t, &opts(|o| o.time_filter = Some(1_000)));
        let f = |n: &str| r.functions.iter().find(|f| f.name == n).cloned();
        let main = f("main").unwrap();
        assert_eq!(
            (main.calls, main.total_ns, main.self_ns),
            (1, 10_000, 3_000)
        );
        let pa = f("parse_args").unwrap();
        assert_eq!((pa.calls, pa.total_ns, pa.self_ns), (1, 5_000, 5_000));
        assert!(f("strtol").is_none() && f("leaf").is_none());
    }

    #[test]
    fn time_filter_marks_open_calls_and_unwinds() {
        // A lost mark inside a hidden call stays; a signal inside it goes;
        // an exit that closes calls above it; calls never returned are
        // shown; an unwound long call.
        let (_d, t) = one(vec![
            ev(Entry, 0, 0),
            ev(Entry, 3, 10),
            ev(Signal, 10, 11),
            ev(Lost, 7, 12),
            ev(Exit, 3, 20),
            ev(Entry, 1, 100),
            ev(Entry, 3, 110),   // not returned, lasted 4.94 us: shown
            ev(Entry, 2, 5_000), // not returned, lasted 50 ns: hidden
            ev(Entry, 5, 5_010), // the same
            ev(Exit, 1, 5_050),
            ev(Entry, 4, 6_000),
            ev(Unwind, 4, 8_000),
            ev(Entry, 3, 9_000), // open at the end, shown
        ]);
        assert_eq!(
            calls(&t, &opts(|o| o.time_filter = Some(1_000))),
            "            | main() {
            |   ... 7 events lost ...
            |   parse_args() {
            |     leaf() {
            |     } /* leaf */ (not returned)
   4.950 us |   } /* parse_args */
   2.000 us |   foo(int); (unwound)
            |   leaf() {
            |   } /* leaf */ (not returned)
            | } /* main */ (not returned)
"
        );
    }

    #[test]
    fn callers() {
        let (_d, t) = one(sample());
        assert_eq!(
            calls(&t, &opts(|o| o.callers = pats(&["strtol"]))),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
            |   foo(int) {
            |     S::get() const {
   0.010 us |       strtol();
   0.100 us |     } /* S::get() const */
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        // FUNC's own subtree is shown.
        assert_eq!(
            calls(&t, &opts(|o| o.callers = pats(&["S::get"]))),
            "            | main() {
            |   foo(int) {
            |     S::get() const {
   0.010 us |       strtol();
   0.100 us |     } /* S::get() const */
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        // With -t: the callers' chain is shown only if long enough.
        assert_eq!(
            calls(
                &t,
                &opts(|o| {
                    o.callers = pats(&["strtol"]);
                    o.time_filter = Some(1_000);
                })
            ),
            "            | main() {
   5.000 us |   parse_args();
   2.000 us |   foo(int);
  10.000 us | } /* main */
"
        );
        // No call of FUNC: nothing.
        assert_eq!(calls(&t, &opts(|o| o.callers = pats(&["tiny"]))), "");
    }

    #[test]
    fn tids() {
        let (_d, t) = fake_trace(&[
            FakeTask::main(1, vec![ev(Entry, 0, 0), ev(Exit, 0, 10)]),
            FakeTask::thread(2, 1, vec![ev(Entry, 3, 5), ev(Exit, 3, 7)]),
            FakeTask::thread(3, 1, vec![ev(Entry, 2, 5), ev(Exit, 2, 8)]),
        ]);
        assert_eq!(
            tree(&t, &opts(|o| o.tids = vec![3, 2])),
            "# task 2: pid 1, tid 2 (prog), /usr/bin/prog, thread of task 1
   0.002 us [    2] | leaf();

# task 3: pid 1, tid 3 (prog), /usr/bin/prog, thread of task 1
   0.003 us [    3] | strtol();
"
        );
        let r = crate::report::aggregate_with(&t, &opts(|o| o.tids = vec![2]));
        assert_eq!(r.functions.len(), 1);
        assert_eq!(r.functions[0].name, "leaf");
    }

    #[test]
    fn triggers() {
        let (_d, t) = one(sample());
        // trace_off: from the function's entry (it is not shown); the
        // calls already shown keep their exits. trace_on: the function is
        // shown.
        assert_eq!(
            calls(
                &t,
                &opts(|o| o.triggers = trigs(&["leaf@trace_off", "S::get@trace_on"]))
            ),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
            |   S::get() const {
   0.010 us |     strtol();
   0.100 us |   } /* S::get() const */
  10.000 us | } /* main */
"
        );
        // depth=N: N levels from the function down, for as long as it runs.
        assert_eq!(
            calls(&t, &opts(|o| o.triggers = trigs(&["foo@depth=2"]))),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
   0.050 us |   leaf();
            |   foo(int) {
   0.100 us |     S::get() const;
   0.001 us |     leaf();
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
        );
        // backtrace: the callers, shown or not.
        assert_eq!(
            calls(
                &t,
                &opts(|o| {
                    o.filters = pats(&["strtol"]);
                    o.triggers = trigs(&["strtol@backtrace"]);
                })
            ),
            "            | /* backtrace: main > parse_args */
   0.100 us | strtol();
            | /* backtrace: main > foo(int) > S::get() const */
   0.010 us | strtol();
"
        );
        // finish: nothing after it, not even exits.
        assert_eq!(
            calls(&t, &opts(|o| o.triggers = trigs(&["leaf@finish"]))),
            "            | main() {
            |   parse_args() {
   0.100 us |     strtol();
   5.000 us |   } /* parse_args */
            | } /* main */ (not returned)
"
        );
    }

    #[test]
    fn global_triggers_act_on_every_thread_in_time_order() {
        // Thread 2 calls leaf at 50 (trace_off, global) and S::get at 500
        // (trace_on, global); the main thread's calls in between are
        // hidden.
        let (_d, t) = fake_trace(&[
            FakeTask::main(
                1,
                vec![
                    ev(Entry, 0, 0),
                    ev(Entry, 1, 10),
                    ev(Exit, 1, 20),
                    ev(Entry, 2, 100),
                    ev(Exit, 2, 110),
                    ev(Entry, 1, 600),
                    ev(Exit, 1, 610),
                    ev(Exit, 0, 1_000),
                ],
            ),
            FakeTask::thread(
                2,
                1,
                vec![
                    ev(Entry, 3, 50),
                    ev(Exit, 3, 60),
                    ev(Entry, 5, 500),
                    ev(Exit, 5, 510),
                ],
            ),
        ]);
        let o = opts(|o| o.triggers = trigs(&["leaf@trace_off,global", "S::get@trace_on,global"]));
        assert_eq!(
            tree(&t, &o),
            "# task 1: pid 1, tid 1 (prog), /usr/bin/prog, the program started
            [    1] | main() {
   0.010 us [    1] |   parse_args();
   0.010 us [    1] |   parse_args();
   1.000 us [    1] | } /* main */

# task 2: pid 1, tid 2 (prog), /usr/bin/prog, thread of task 1
   0.010 us [    2] | S::get() const;
"
        );
        // Not global: only the thread that hit them.
        let o = opts(|o| o.triggers = trigs(&["leaf@trace_off", "S::get@trace_on"]));
        assert!(tree(&t, &o).contains("strtol();"));
        // finish: the whole process, from its time.
        assert_eq!(
            tree(&t, &opts(|o| o.triggers = trigs(&["leaf@finish"]))),
            "# task 1: pid 1, tid 1 (prog), /usr/bin/prog, the program started
            [    1] | main() {
   0.010 us [    1] |   parse_args();
            [    1] | } /* main */ (not returned)

# task 2: pid 1, tid 2 (prog), /usr/bin/prog, thread of task 1
"
        );
    }

    /// A forked child starts inside the calls its parent had open at the
    /// fork: main (0) > parse_args (1) > strtol (2, "fork"); the child's
    /// events begin with the exit of strtol, then leaf (3) and the exit of
    /// parse_args. The parent forks twice: the second child starts inside
    /// foo (4) > strtol, outside -F parse_args.
    #[test]
    fn forked_children_start_in_the_parent_state() {
        use crate::testutil::fake_trace;
        use fctrace_format::store::TaskOrigin;
        let parent = FakeTask::main(1, sample());
        let child = |id: u32, events| FakeTask {
            id,
            origin: TaskOrigin::Fork,
            parent: Some(1),
            pid: id,
            ..FakeTask::main(id, events)
        };
        let first = child(
            2,
            vec![
                ev(Exit, 2, 250),
                ev(Entry, 3, 260),
                ev(Exit, 3, 270),
                ev(Exit, 1, 280),
            ],
        );
        let second = child(
            3,
            vec![ev(Exit, 2, 7_115), ev(Entry, 3, 7_130), ev(Exit, 3, 7_140)],
        );
        let (_d, t) = fake_trace(&[parent, first, second]);
        let text = tree(&t, &opts(|o| o.filters = pats(&["parse_args"])));
        let task = |n: u32| -> String {
            text.lines()
                .skip_while(|l| !l.starts_with(&format!("# task {n}:")))
                .skip(1)
                .take_while(|l| !l.starts_with('#') && !l.is_empty())
                .map(|l| l.split_once("] | ").unwrap().1.to_string() + "\n")
                .collect()
        };
        assert_eq!(
            task(2),
            "} /* strtol */ (entry not recorded)\nleaf();\n} /* parse_args */ (entry not recorded)\n",
            "{text}"
        );
        assert_eq!(task(3), "", "{text}");
        // -D 2: strtol is at level 3 in the parent, so in the child too.
        let text = tree(&t, &opts(|o| o.depth = Some(2)));
        let child_lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("# task 2:"))
            .skip(1)
            .take_while(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert_eq!(child_lines.len(), 1, "{text}");
        assert!(
            child_lines[0].ends_with("} /* parse_args */ (entry not recorded)"),
            "{text}"
        );
    }

    /// A task whose events end calls they do not enter (entered while
    /// tracing was off) starts inside them: `-F main` shows what runs
    /// there, `-N main` hides it; they are no level of `-D`.
    #[test]
    fn calls_entered_before_the_events_count_for_filters() {
        let (_d, mut t) = one(vec![
            ev(Entry, 1, 100),
            ev(Entry, 2, 200),
            ev(Exit, 2, 300),
            ev(Exit, 1, 400),
            ev(Exit, 0, 500),
        ]);
        // Known only from a recording with tracing off for a while: in
        // one without, a task starting with an entry starts outside any
        // call (no pass over its events to find out): -N main hides only
        // main's exit.
        assert_eq!(
            calls(&t, &opts(|o| o.notrace = pats(&["main"])))
                .lines()
                .count(),
            3
        );
        t.info.options = "disable 1\n".to_string();
        let shown = "            | parse_args() {
   0.100 us |   strtol();
   0.300 us | } /* parse_args */
            | } /* main */ (entry not recorded)
";
        assert_eq!(calls(&t, &opts(|o| o.filters = pats(&["main"]))), shown);
        assert_eq!(calls(&t, &opts(|o| o.notrace = pats(&["main"]))), "");
        assert_eq!(
            calls(
                &t,
                &opts(|o| {
                    o.filters = pats(&["main"]);
                    o.depth = Some(1)
                })
            ),
            "   0.300 us | parse_args();\n            | } /* main */ (entry not recorded)\n"
        );
    }
}
