//! Per-function statistics (`fctrace report`).
//!
//! A function is identified by the module that defines it and its raw
//! symbol name, so the same function is merged across tasks, processes and
//! sessions (whose function ids differ). Per function:
//! - `calls`: entries;
//! - `total`: the sum of the durations of its calls, where a call nested in
//!   another call of the same function in the same task (recursion) is not
//!   added again;
//! - `self`: the sum over its calls of the duration minus the durations of
//!   the direct children;
//! - `min`/`avg`/`max`: over the calls that have an exit (`Exit` or
//!   `Unwind`); a call still open when its task ends counts in `calls`
//!   only.
//!
//! With display filters ([`aggregate_with`], see [`super::filter`]) only
//! the calls the tree would show are counted, and only their time: a
//! hidden call (by `-t`, `-N`, `-D`, ...) is no child of its caller here,
//! so its time stays in the caller's self time, and the caller keeps its
//! full duration.

use super::calls::{Functions, IdCache};
use super::duration::Duration;
use super::filter::{EventSource, Filter};
use super::progress::Progress;
use super::sort::SortKey;
use fctrace_format::event::EventKind;
use fctrace_format::store::{StoreError, Trace};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{self, Write};

/// The statistics of one function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    /// Demangled name (without `()`).
    pub name: String,
    /// Raw ELF symbol name.
    pub symbol: String,
    /// Path of the ELF object defining the function.
    pub module: String,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// Calls that have an exit.
    pub returned: u64,
    /// Sum of the durations of the calls that have an exit (recursive ones
    /// included): the numerator of the average.
    pub sum_ns: u64,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    /// Time in system calls made under its calls (outermost calls, as
    /// `total_ns`; `record -k`).
    pub kernel_ns: u64,
    /// The least and largest self time of a call that has an exit.
    pub self_min_ns: Option<u64>,
    pub self_max_ns: Option<u64>,
    /// The sums of the squares of those calls' durations and self times
    /// (their standard deviations).
    pub total_sq: u128,
    pub self_sq: u128,
    /// The function's size in bytes (its symbol's; 0 for imports and
    /// system calls).
    pub size: u64,
}

impl FuncStats {
    pub fn avg_ns(&self) -> Option<u64> {
        (self.returned > 0).then(|| {
            // Rounded to the nearest nanosecond.
            ((u128::from(self.sum_ns) + u128::from(self.returned) / 2) / u128::from(self.returned))
                as u64
        })
    }
}

/// The statistics of a whole trace.
#[derive(Debug, Default)]
pub struct Report {
    /// In no particular order until [`sort`].
    pub functions: Vec<FuncStats>,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read (their readable part is
    /// counted).
    pub errors: Vec<StoreError>,
}

struct Frame {
    func: u32,
    stats: usize,
    entry_ns: u64,
    children_ns: u64,
    /// Time in system calls under it so far.
    kernel_ns: u64,
}

/// Reads every task of `trace` once and computes the statistics.
#[cfg(any(test, feature = "testutil"))]
pub fn aggregate(trace: &Trace) -> Report {
    aggregate_with(trace, &fctrace_options::Options::default())
}

/// [`aggregate`] of the calls the display filters of `options` show.
pub fn aggregate_with(trace: &Trace, options: &fctrace_options::Options) -> Report {
    let mut filter = Filter::new(trace, options, false);
    let mut pass = Pass {
        report: Report::default(),
        functions: Functions::with_options(options),
        by_id: HashMap::new(),
        progress: Progress::new("report", trace.info.events, Progress::wanted(false)),
        done: 0,
    };

    for task in &trace.info.tasks {
        if filter.as_ref().is_some_and(|f| !f.wants_task(task)) {
            continue;
        }
        let events = match trace.task_events(task) {
            Ok(events) => events,
            Err(e) => {
                pass.report.errors.push(e);
                continue;
            }
        };
        // One loop per kind of source: the unfiltered one stays as fast.
        match &mut filter {
            None => aggregate_task(trace, task.session, events, &mut pass),
            Some(f) => aggregate_task(trace, task.session, f.task(task, events), &mut pass),
        }
    }
    pass.report
}

/// The state of [`aggregate_with`] across tasks.
struct Pass {
    report: Report,
    /// One index per function (module, symbol): report.functions has the
    /// same order.
    functions: Functions,
    /// (session, func id) -> index in report.functions: a vector per
    /// session (ids are dense), looked up once per entry.
    by_id: HashMap<u32, IdCache>,
    progress: Progress,
    /// Events read.
    done: u64,
}

/// Adds the calls of one task to the report.
///
/// This pairs entries and exits itself instead of going through
/// [`super::calls::Calls`] (whose rules it follows: the same pairing, a
/// call that did not return has no duration): built on `Calls`, the report
/// of a 18 M-event trace (`dense fib 34`) took 0.68 to 0.84 s of CPU
/// instead of 0.38 to 0.51 s, and 867 M instructions instead of 537 M for
/// `fib 30` (callgrind): `Calls` keeps each call's arguments, return value
/// and end, which the report does not need.
fn aggregate_task<S: EventSource>(trace: &Trace, session: u32, mut events: S, pass: &mut Pass) {
    let Pass {
        report,
        functions,
        by_id,
        progress,
        done,
    } = pass;
    let mut done_here = *done;
    let mut stack: Vec<Frame> = Vec::new();
    // Open calls per function (by index in report.functions) in this
    // task, for recursion; as long as report.functions.
    let mut open: Vec<u32> = vec![0; report.functions.len()];
    let mut ids = by_id.remove(&session).unwrap_or_default();
    // The system call entered and not returned yet: (number, time, index).
    let mut syscall: Option<(u32, u64, usize)> = None;
    // SDT probes (`record -E`) are events, not functions: uftrace's
    // report leaves them out.
    let probes = sdt_probes(trace, session);
    while let Some(event) = events.next_event() {
        done_here += 1;
        progress.update(done_here);
        if !probes.is_empty()
            && matches!(
                event.kind,
                EventKind::Entry | EventKind::Exit | EventKind::Unwind
            )
            && probes.contains(&event.func)
        {
            continue;
        }
        match event.kind {
            EventKind::Entry => {
                let stats = match ids.get(event.func) {
                    Some(x) => x,
                    None => {
                        let x = functions.index(trace, session, event.func);
                        grow_stats(report, functions, &mut open);
                        ids.set(event.func, x);
                        let f = &mut report.functions[x];
                        f.size = f.size.max(function_size(trace, session, event.func));
                        x
                    }
                };
                report.functions[stats].calls += 1;
                open[stats] += 1;
                stack.push(Frame {
                    func: event.func,
                    stats,
                    entry_ns: event.ns,
                    children_ns: 0,
                    kernel_ns: 0,
                });
            }
            EventKind::Exit | EventKind::Unwind => {
                // Nearly always the call on top; otherwise the frames
                // above it did not return: no time for them.
                let frame = match stack.last() {
                    Some(top) if top.func == event.func => stack.pop(),
                    _ => {
                        let Some(j) = stack.iter().rposition(|f| f.func == event.func) else {
                            continue; // entry not recorded: no duration
                        };
                        for frame in stack.drain(j + 1..) {
                            open[frame.stats] -= 1;
                        }
                        stack.pop()
                    }
                };
                let Some(frame) = frame else {
                    continue;
                };
                let dur = event.ns.saturating_sub(frame.entry_ns);
                let n = &mut open[frame.stats];
                *n -= 1;
                let outermost = *n == 0;
                let f = &mut report.functions[frame.stats];
                f.returned += 1;
                f.sum_ns = f.sum_ns.saturating_add(dur);
                let self_dur = dur.saturating_sub(frame.children_ns);
                f.self_ns = f.self_ns.saturating_add(self_dur);
                f.self_min_ns = Some(f.self_min_ns.map_or(self_dur, |m| m.min(self_dur)));
                f.self_max_ns = Some(f.self_max_ns.map_or(self_dur, |m| m.max(self_dur)));
                f.total_sq += u128::from(dur) * u128::from(dur);
                f.self_sq += u128::from(self_dur) * u128::from(self_dur);
                if outermost {
                    f.total_ns = f.total_ns.saturating_add(dur);
                    f.kernel_ns = f.kernel_ns.saturating_add(frame.kernel_ns);
                }
                f.min_ns = Some(f.min_ns.map_or(dur, |m| m.min(dur)));
                f.max_ns = Some(f.max_ns.map_or(dur, |m| m.max(dur)));
                if let Some(parent) = stack.last_mut() {
                    parent.children_ns = parent.children_ns.saturating_add(dur);
                    parent.kernel_ns = parent.kernel_ns.saturating_add(frame.kernel_ns);
                }
            }
            // A system call (`record -k`): a call of a `[syscall]`
            // function, whose time is the kernel's under the calls open.
            EventKind::Syscall => {
                let stats = functions.syscall_index(event.func);
                grow_stats(report, functions, &mut open);
                report.functions[stats].calls += 1;
                syscall = Some((event.func, event.ns, stats));
            }
            EventKind::SyscallExit => {
                let Some((nr, start, stats)) = syscall.take() else {
                    continue;
                };
                if nr != event.func {
                    continue;
                }
                let dur = event.ns.saturating_sub(start);
                let f = &mut report.functions[stats];
                f.returned += 1;
                f.sum_ns = f.sum_ns.saturating_add(dur);
                f.self_ns = f.self_ns.saturating_add(dur);
                f.self_min_ns = Some(f.self_min_ns.map_or(dur, |m| m.min(dur)));
                f.self_max_ns = Some(f.self_max_ns.map_or(dur, |m| m.max(dur)));
                f.total_sq += u128::from(dur) * u128::from(dur);
                f.self_sq += u128::from(dur) * u128::from(dur);
                f.total_ns = f.total_ns.saturating_add(dur);
                f.kernel_ns = f.kernel_ns.saturating_add(dur);
                f.min_ns = Some(f.min_ns.map_or(dur, |m| m.min(dur)));
                f.max_ns = Some(f.max_ns.map_or(dur, |m| m.max(dur)));
                if let Some(parent) = stack.last_mut() {
                    parent.children_ns = parent.children_ns.saturating_add(dur);
                    parent.kernel_ns = parent.kernel_ns.saturating_add(dur);
                }
            }
            EventKind::Lost => {
                report.lost_in_streams =
                    report.lost_in_streams.saturating_add(u64::from(event.func));
            }
            // A signal does not change the calls (the handler's calls
            // are children of the interrupted call), nor do argument
            // values.
            _ => {}
        }
    }
    if let Some(e) = events.take_error() {
        report.errors.push(e);
    }
    by_id.insert(session, ids);
    *done = done_here;
}

/// The function ids of `session`'s SDT probes.
fn sdt_probes(trace: &Trace, session: u32) -> std::collections::HashSet<u32> {
    trace
        .sessions
        .get(&session)
        .map_or_else(Default::default, |t| {
            t.functions
                .iter()
                .filter(|f| f.kind == fctrace_format::symtab::FuncKind::Sdt)
                .map(|f| f.id)
                .collect()
        })
}

/// The size of function `func` of `session` in bytes (0: unknown, or an
/// import).
fn function_size(trace: &Trace, session: u32, func: u32) -> u64 {
    trace
        .sessions
        .get(&session)
        .and_then(|t| t.function(func))
        .filter(|f| f.kind == fctrace_format::symtab::FuncKind::Function)
        .map_or(0, |f| f.size)
}

/// A row of statistics (and an open-call count) for every function
/// `functions` knows.
fn grow_stats(report: &mut Report, functions: &Functions, open: &mut Vec<u32>) {
    while report.functions.len() < functions.list.len() {
        let f = &functions.list[report.functions.len()];
        report.functions.push(FuncStats {
            name: f.name.clone(),
            symbol: f.symbol.clone(),
            module: f.module.clone(),
            ..FuncStats::default()
        });
    }
    if open.len() < report.functions.len() {
        open.resize(report.functions.len(), 0);
    }
}

/// Sorts by `key`, descending; ties by name.
pub fn sort(functions: &mut [FuncStats], key: SortKey) {
    functions.sort_by(|a, b| {
        let primary = match key {
            SortKey::Total => b.total_ns.cmp(&a.total_ns),
            SortKey::SelfTime => b.self_ns.cmp(&a.self_ns),
            SortKey::Calls => b.calls.cmp(&a.calls),
        };
        primary
            .then(b.total_ns.cmp(&a.total_ns))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
}

/// The text table, as uftrace's: total time, self time, calls, function
/// (and with system calls recorded, `record -k`, the time in the kernel
/// under each function); the min, avg and max times are `-f`'s
/// (`report_fields`).
pub fn write_text(out: &mut dyn Write, functions: &[FuncStats]) -> io::Result<()> {
    // With system calls (`record -k`): the time in the kernel under each.
    let kernel = functions.iter().any(|f| f.kernel_ns > 0);
    let kernel_head = if kernel { "  Kernel time" } else { "" };
    writeln!(
        out,
        "  {:>10}  {:>10}  {:>10}{kernel_head}  Function",
        "Total time", "Self time", "Calls"
    )?;
    writeln!(
        out,
        "  {0}  {0}  {0}{2}  {1}",
        "=".repeat(10),
        "=".repeat(20),
        if kernel {
            format!("  {}", "=".repeat(11))
        } else {
            String::new()
        }
    )?;
    // A name that rows of two modules have is shown with its module.
    let mut modules_of: HashMap<&str, &str> = HashMap::new();
    let mut ambiguous: std::collections::HashSet<&str> = Default::default();
    for f in functions {
        match modules_of.insert(&f.name, &f.module) {
            Some(m) if m != f.module => {
                ambiguous.insert(&f.name);
            }
            _ => {}
        }
    }
    for f in functions {
        let name = if ambiguous.contains(f.name.as_str()) {
            format!("{}@{}", f.name, super::names::module_file(&f.module))
        } else {
            f.name.clone()
        };
        let kernel_col = if kernel {
            format!("  {:>11}", Duration(f.kernel_ns).painted())
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {:>10}  {:>10}  {:>10}{kernel_col}  {}",
            Duration(f.total_ns).painted(),
            Duration(f.self_ns).painted(),
            f.calls,
            name
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonReport<'a> {
    functions: Vec<JsonFunction<'a>>,
    tasks: Vec<JsonTask<'a>>,
    events: u64,
    lost_events: u64,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    symbol: &'a str,
    module: &'a str,
    calls: u64,
    total_ns: u64,
    self_ns: u64,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
    avg_ns: Option<u64>,
    /// Time in system calls under its calls (`record -k`; 0 without).
    kernel_ns: u64,
}

#[derive(Serialize)]
struct JsonTask<'a> {
    /// The task's id in the trace (tids are not unique: exec keeps them).
    id: u32,
    /// start, thread, fork, exec, spawn.
    origin: &'a str,
    /// The id of the task that created it.
    parent: Option<u32>,
    events: u64,
    tid: u32,
    pid: u32,
    ppid: u32,
    session: u32,
    comm: &'a str,
}

/// The JSON document: `{"functions": [...], "tasks": [...], "events": N,
/// "lost_events": N}` (functions aggregated over every task; a task:
/// `id`, `origin`, `parent`, `events`, `tid`, `pid`, `ppid`, `session`,
/// `comm`); `min_ns`/`max_ns`/`avg_ns` are `null` for a function
/// none of whose calls returned.
pub fn write_json(
    out: &mut dyn Write,
    trace: &Trace,
    functions: &[FuncStats],
    lost_in_streams: u64,
) -> io::Result<()> {
    let doc = JsonReport {
        functions: functions
            .iter()
            .map(|f| JsonFunction {
                name: &f.name,
                symbol: &f.symbol,
                module: &f.module,
                calls: f.calls,
                total_ns: f.total_ns,
                self_ns: f.self_ns,
                min_ns: f.min_ns,
                max_ns: f.max_ns,
                avg_ns: f.avg_ns(),
                kernel_ns: f.kernel_ns,
            })
            .collect(),
        tasks: trace
            .info
            .tasks
            .iter()
            .map(|t| JsonTask {
                id: t.id,
                origin: t.origin.as_str(),
                parent: t.parent,
                events: t.events,
                tid: t.tid,
                pid: t.pid,
                ppid: t.ppid,
                session: t.session,
                comm: &t.comm,
            })
            .collect(),
        events: trace.info.events,
        lost_events: trace.info.lost_events.max(lost_in_streams),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{default_symtab, ev, fake_trace_with, FakeTask, LIBC, PROG};
    use fctrace_format::event::EventKind::{Entry, Exit, Lost, Unwind};

    fn find<'a>(r: &'a Report, symbol: &str) -> &'a FuncStats {
        r.functions
            .iter()
            .find(|f| f.symbol == symbol)
            .unwrap_or_else(|| panic!("no {symbol}"))
    }

    fn sample() -> (tempfile::TempDir, Trace) {
        // Session 1 is the same program with other ids: 0 <-> 3 swapped.
        let mut s1 = default_symtab(1);
        s1.functions.swap(0, 3);
        s1.functions[0].id = 0;
        s1.functions[3].id = 3;
        fake_trace_with(
            &[default_symtab(0), s1],
            &[
                FakeTask::main(
                    10,
                    vec![
                        ev(Entry, 0, 0),   // main
                        ev(Entry, 4, 100), // foo(3)
                        ev(Entry, 4, 200), // foo(2)
                        ev(Entry, 4, 300), // foo(1)
                        ev(Entry, 2, 350), // strtol
                        ev(Exit, 2, 390),
                        ev(Exit, 4, 400),  // foo(1) = 100
                        ev(Exit, 4, 600),  // foo(2) = 400
                        ev(Entry, 3, 700), // leaf
                        ev(Exit, 3, 750),
                        ev(Exit, 4, 1_000),  // foo(3) = 900
                        ev(Entry, 1, 1_100), // parse_args: never returns
                        ev(Entry, 3, 1_200), // leaf (30), child of parse_args
                        ev(Unwind, 3, 1_230),
                        ev(Lost, 4, 1_300),
                        ev(Exit, 0, 2_000), // main = 2000, closes parse_args
                    ],
                ),
                FakeTask {
                    session: 1,
                    ..FakeTask::main(
                        20,
                        vec![
                            ev(Entry, 3, 5_000), // main in session 1
                            ev(Entry, 0, 5_010), // leaf
                            ev(Exit, 0, 5_020),
                            ev(Entry, 2, 5_100), // strtol
                        ],
                    )
                },
            ],
        )
    }

    #[test]
    fn aggregation() {
        let (_dir, trace) = sample();
        let r = aggregate(&trace);
        assert!(r.errors.is_empty());
        assert_eq!(r.lost_in_streams, 4);
        assert_eq!(r.functions.len(), 5);

        let main = find(&r, "main");
        assert_eq!((main.calls, main.returned), (2, 1));
        assert_eq!(main.total_ns, 2_000);
        // children: foo(3) 900; parse_args did not return.
        assert_eq!(main.self_ns, 1_100);
        assert_eq!(
            (main.min_ns, main.max_ns, main.avg_ns()),
            (Some(2000), Some(2000), Some(2000))
        );
        assert_eq!(main.module, PROG);
        assert_eq!(main.name, "main");

        let foo = find(&r, "_Z3fooi");
        assert_eq!(foo.name, "foo(int)");
        assert_eq!((foo.calls, foo.returned), (3, 3));
        // Recursion counted once: only the outermost 900.
        assert_eq!(foo.total_ns, 900);
        // self: foo(1) 100-40, foo(2) 400-100, foo(3) 900-400-50
        assert_eq!(foo.self_ns, 60 + 300 + 450);
        assert_eq!(foo.min_ns, Some(100));
        assert_eq!(foo.max_ns, Some(900));
        assert_eq!(foo.avg_ns(), Some(467)); // 1400 / 3 rounded

        let leaf = find(&r, "leaf");
        assert_eq!((leaf.calls, leaf.returned), (3, 3));
        assert_eq!((leaf.total_ns, leaf.self_ns), (50 + 30 + 10, 90));
        assert_eq!((leaf.min_ns, leaf.max_ns), (Some(10), Some(50)));

        let strtol = find(&r, "strtol");
        assert_eq!(strtol.module, LIBC);
        assert_eq!((strtol.calls, strtol.returned, strtol.total_ns), (2, 1, 40));

        let parse = find(&r, "parse_args");
        assert_eq!((parse.calls, parse.returned, parse.total_ns), (1, 0, 0));
        assert_eq!(parse.avg_ns(), None);
    }

    #[test]
    fn sorting_and_text() {
        let (_dir, trace) = sample();
        let mut r = aggregate(&trace);
        sort(&mut r.functions, SortKey::Total);
        let order: Vec<_> = r.functions.iter().map(|f| f.symbol.as_str()).collect();
        assert_eq!(order, ["main", "_Z3fooi", "leaf", "strtol", "parse_args"]);
        sort(&mut r.functions, SortKey::SelfTime);
        assert_eq!(r.functions[0].symbol, "main");
        assert_eq!(r.functions[1].symbol, "_Z3fooi");
        sort(&mut r.functions, SortKey::Calls);
        let order: Vec<_> = r.functions.iter().map(|f| f.symbol.as_str()).collect();
        assert_eq!(order, ["_Z3fooi", "leaf", "main", "strtol", "parse_args"]);

        sort(&mut r.functions, SortKey::Total);
        let mut out = Vec::new();
        write_text(&mut out, &r.functions[..2]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  Total time   Self time       Calls  Function
  ==========  ==========  ==========  ====================
    2.000 us    1.100 us           2  main
    0.900 us    0.810 us           3  foo(int)
"
        );
        let mut out = Vec::new();
        write_text(&mut out, &r.functions[4..]).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("    0.000 us    0.000 us           1  parse_args\n"));
    }

    #[test]
    fn json_keys() {
        let (_dir, trace) = sample();
        let mut r = aggregate(&trace);
        sort(&mut r.functions, SortKey::Total);
        let mut out = Vec::new();
        write_json(&mut out, &trace, &r.functions, r.lost_in_streams).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&v), ["events", "functions", "lost_events", "tasks"]);
        assert_eq!(
            keys(&v["functions"][0]),
            [
                "avg_ns",
                "calls",
                "kernel_ns",
                "max_ns",
                "min_ns",
                "module",
                "name",
                "self_ns",
                "symbol",
                "total_ns"
            ]
        );
        assert_eq!(
            keys(&v["tasks"][0]),
            ["comm", "events", "id", "origin", "parent", "pid", "ppid", "session", "tid"]
        );
        let foo = &v["functions"][1];
        assert_eq!(foo["name"], "foo(int)");
        assert_eq!(foo["symbol"], "_Z3fooi");
        assert_eq!(foo["module"], PROG);
        assert_eq!(foo["calls"], 3);
        assert_eq!(foo["total_ns"], 900);
        assert_eq!(foo["self_ns"], 810);
        assert_eq!(foo["min_ns"], 100);
        assert_eq!(foo["max_ns"], 900);
        assert_eq!(foo["avg_ns"], 467);
        assert_eq!(v["functions"][4]["avg_ns"], serde_json::Value::Null);
        assert_eq!(v["events"], 20);
        assert_eq!(v["lost_events"], 4);
        assert_eq!(v["tasks"][1]["session"], 1);
        assert_eq!(v["tasks"][1]["tid"], 20);
    }
}
