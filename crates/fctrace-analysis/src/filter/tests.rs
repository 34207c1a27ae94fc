//! Tests of the display filters, through the tree they choose the calls
//! of.

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
    assert!(super::pass::Filter::new(&t, &all, true).is_none());
    assert!(super::pass::Filter::new(&t, &Options::default(), true).is_some());
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
    // FUNC is a leaf (uftrace's -C).
    assert_eq!(
        calls(&t, &opts(|o| o.callers = pats(&["S::get"]))),
        "            | main() {
            |   foo(int) {
   0.100 us |     S::get() const;
   2.000 us |   } /* foo(int) */
  10.000 us | } /* main */
"
    );
    // --caller-tree: FUNC's own subtree is shown.
    assert_eq!(
        calls(
            &t,
            &opts(|o| {
                o.callers = pats(&["S::get"]);
                o.caller_tree = true;
            })
        ),
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
