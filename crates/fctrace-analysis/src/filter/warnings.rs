//! Warnings about the filters: patterns that name no function, `--tid`s
//! that name no task, and `-F`/`-N` over a trace with tracing gaps.

use super::flags::each_function;
use super::options::recorded_with_gaps;
use fctrace_format::store::Trace;
use fctrace_options::{Action, FuncPattern, Options};

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
        crate::progress::warn(
            "the trace was recorded with tracing off for a while (--disable or trace_off) \
             and turned on by a signal or a global trigger: -F/-N cannot see the calls \
             entered while it was off in the threads it turned on; give -F/-N to \
             `fctrace record` to filter on them",
        );
    }
}

/// Whether tracing may have been turned on for a thread other than by a
/// `trace_on` trigger it hit (`--signal ...@trace_on`, a `global` trigger).
pub(super) fn resumes_unknown(trace: &Trace) -> bool {
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

/// The patterns of `opts` (`-F`, `-N`, `-C`, `-H`, `-P`, `-U`, `-T`, `-A`, `-R`) that name no function
/// of the trace, as the user wrote them (a misspelt name would otherwise
/// just show an empty tree).
pub fn unmatched_patterns(trace: &Trace, opts: &Options) -> Vec<String> {
    let mut pats: Vec<(&str, &str, &FuncPattern)> = Vec::new();
    pats.extend(opts.filters.iter().map(|p| ("-F", p.as_str(), p)));
    pats.extend(opts.notrace.iter().map(|p| ("-N", p.as_str(), p)));
    pats.extend(opts.callers.iter().map(|p| ("-C", p.as_str(), p)));
    pats.extend(opts.hide.iter().map(|p| ("-H", p.as_str(), p)));
    pats.extend(opts.patch.iter().map(|r| {
        let flag = if r.patch { "-P" } else { "-U" };
        (flag, r.pattern.as_str(), &r.pattern)
    }));
    pats.extend(
        opts.triggers
            .iter()
            .map(|t| ("-T", t.source.as_str(), &t.pattern)),
    );
    // -A and -R (a spec of return values only is -R's).
    pats.extend(opts.args.iter().map(|a| {
        let retval_only = a.items.iter().all(|i| {
            use fctrace_options::args::Source;
            matches!(i.source, Source::Retval | Source::AutoRetval)
        });
        let opt = if retval_only { "-R" } else { "-A" };
        (opt, a.source.as_str(), &a.pattern)
    }));
    if pats.is_empty() {
        return Vec::new();
    }
    let mut found = vec![false; pats.len()];
    // `NAME@[syscall]`: a system call (`record -k`).
    for (i, (_, _, p)) in pats.iter().enumerate() {
        if p.module() == Some(crate::syscalls::SYSCALL_MODULE) {
            found[i] = syscall_pattern_matches_any(p);
        }
        // `FUNC@kernel`: kernel functions (`record -K`), not checked.
        if p.module() == Some(crate::syscalls::KERNEL_MODULE) {
            found[i] = true;
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
        crate::progress::warn(&format!("{p} matches no function of the trace"));
    }
    for tid in unmatched_tids(trace, opts) {
        crate::progress::warn(&format!(
            "--tid {tid} names no task of the trace (`fctrace info` lists them)"
        ));
    }
}

/// Whether a `NAME@[syscall]` pattern names a system call.
pub(super) fn syscall_pattern_matches_any(p: &FuncPattern) -> bool {
    (0..512u32).any(|nr| {
        let n = crate::syscalls::name(nr);
        !n.starts_with("syscall_") && p.matches_name(&n)
    })
}
