//! What the options of a pass ask of the filters: the display options
//! a trace was recorded with, whether anything is filtered at all, the
//! display-only options, and the origin of elapsed times (`-r`).

use fctrace_format::store::Trace;
use fctrace_options::{Action, Options};

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
/// recorded with (`record -C FUNC`, `record -t TIME`, `record -H FUNC`: the agent does not
/// apply them, so they are kept in info.json and act here, as in live
/// mode) where `given` has none of that kind.
pub fn with_recorded_display(given: &Options, trace: &Trace) -> Options {
    let mut opts = given.clone();
    if let Ok(recorded) = Options::from_wire(&trace.info.options) {
        if opts.callers.is_empty() {
            opts.callers = recorded.callers;
            opts.caller_tree = recorded.caller_tree;
        }
        if opts.time_filter.is_none() {
            opts.time_filter = recorded.time_filter;
        }
        if opts.tids.is_empty() {
            opts.tids = recorded.tids;
        }
        if opts.hide.is_empty() {
            opts.hide = recorded.hide;
        }
        if opts.time_actions.is_empty() {
            opts.time_actions = recorded.time_actions;
        }
    }
    opts
}

/// Whether `trace` was recorded with tracing off for a while
/// (`--disable`, a `trace_off` trigger or signal).
pub(super) fn recorded_with_gaps(trace: &Trace) -> bool {
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

/// Whether `opts` hides anything at display time (the C runtime's calls
/// are hidden by default).
pub fn filters_display(opts: &Options) -> bool {
    per_call(opts)
        || !opts.tids.is_empty()
        || !opts.show_runtime
        || opts.no_libcall
        || !opts.loc_filters.is_empty()
        || opts.time_range.is_some()
}

/// Whether `opts` has options that follow the calls of a task
/// (stages 1 to 3 of the module documentation); without them, a task's
/// events go through the plain [`Light`] stage.
pub(super) fn per_call(opts: &Options) -> bool {
    !opts.filters.is_empty()
        || !opts.notrace.is_empty()
        || !opts.callers.is_empty()
        || opts.depth.is_some()
        || opts.time_filter.is_some_and(|t| t > 0)
        || !opts.time_actions.is_empty()
        || !opts.triggers.is_empty()
        || opts.disabled
}

/// The display-only options of `opts` (`--show-runtime`, `--no-libcall`,
/// `-r`, `--demangle`), without any filter.
pub fn display_only(opts: &Options) -> Options {
    Options {
        show_runtime: opts.show_runtime,
        no_libcall: opts.no_libcall,
        time_range: opts.time_range,
        demangle: opts.demangle,
        srcline: opts.srcline,
        libname: opts.libname,
        loc_filters: opts.loc_filters.clone(),
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
