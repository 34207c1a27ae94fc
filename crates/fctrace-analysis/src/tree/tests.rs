//! Tests of the call tree, on hand-built traces.

use super::sink::*;
use super::style::*;
use super::write::*;
use crate::term::{RED, RESET};
use crate::testutil::{ev, fake_trace, FakeTask};
use fctrace_format::event::EventKind;
use fctrace_format::event::EventKind::{Args, Entry, Exit, Lost, Unwind};
use fctrace_format::store::Trace;
use fctrace_options::Options;
use std::io::Write as _;

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
    let (_dir, trace) = kernel_trace();
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

/// replay's `-F FUNC@kernel` shows those kernel functions with what they
/// call, `-N FUNC@kernel` hides them with what they call; the program's
/// functions and system calls are shown as without them.
#[test]
fn kernel_function_filters_at_replay() {
    let (_dir, trace) = kernel_trace();
    let with = |filters: &[&str], notrace: &[&str]| {
        let pattern = |p: &&str| fctrace_options::pattern::FuncPattern::parse(p).unwrap();
        let options = Options {
            filters: filters.iter().map(pattern).collect(),
            notrace: notrace.iter().map(pattern).collect(),
            ..Options::default()
        };
        let mut out = Vec::new();
        write_tree_with(&trace, &options, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .skip(2)
            .take(5)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        with(&["vfs_read@kernel"], &[]),
        [
            "            [ 4321] | main() {",
            "            [ 4321] |   read(3, 0x1000, 16) {",
            "   0.301 us [ 4321] |     [kernel] vfs_read();",
            "   3.000 us [ 4321] |   } = 5 /* read */",
            "            [ 4321] |   --- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL} ---",
        ]
    );
    assert_eq!(
        with(&[], &["vfs_.*@kernel"]),
        [
            "            [ 4321] | main() {",
            "            [ 4321] |   read(3, 0x1000, 16) {",
            "   3.000 us [ 4321] |     [kernel] ksys_read();",
            "   3.000 us [ 4321] |   } = 5 /* read */",
            "            [ 4321] |   --- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL} ---",
        ]
    );
    assert_eq!(
        with(&[], &["ksys_read@kernel"])[..3],
        [
            "            [ 4321] | main() {",
            "   3.000 us [ 4321] |   read(3, 0x1000, 16) = 5",
            "            [ 4321] |   --- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL} ---",
        ]
    );
}

/// A trace whose main() makes a read that runs ksys_read > vfs_read, then
/// gets two signals.
fn kernel_trace() -> (impl Sized, Trace) {
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
    (dir, trace)
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
    assert!(parse_fields("bogus")
        .unwrap_err()
        .contains("fields: duration"));
    assert_eq!(
        with("elapsed,delta,tid,module"),
        "\
#   ELAPSED  TIMEDELTA     TID     MODULE NAME   FUNCTION
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
        format!("{HEADER}\n# task 1: pid 1, tid 1 (prog), /usr/bin/prog, the program started\n")
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

/// With `--last N` (tree/last.rs): the last calls of each task.
mod last {
    use super::*;

    /// The tree of `--last n` over `trace`, with no error.
    fn tree_of_last(trace: &Trace, n: u64) -> String {
        let style = TreeStyle {
            last: Some(n),
            ..TreeStyle::default()
        };
        let mut out = Vec::new();
        let summary =
            super::super::write_tree_styled(trace, &Options::default(), &style, &mut out).unwrap();
        assert!(summary.errors.is_empty());
        String::from_utf8(out).unwrap()
    }

    /// A snapshot's tasks (a history chain first): the calls it names
    /// keep having no opening line; those entered after it open before
    /// the calls shown. The thread whose last event is a signal comes
    /// first; a task without calls says so.
    #[test]
    fn last_calls_of_a_snapshot() {
        use crate::testutil::{ev, fake_trace, payload_events, FakeTask};
        use fctrace_format::event::EventKind::{Args, Entry, Exit, Signal};
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf.
        let mut main = payload_events(Args, 0, 100, |w| {
            assert!(w.history_chain(&[0]));
        });
        main.extend([
            ev(Entry, 1, 200),
            ev(Entry, 3, 300),
            ev(Exit, 3, 310),
            ev(Entry, 2, 400),
            ev(Exit, 2, 410),
            ev(Entry, 3, 500),
            ev(Exit, 3, 510),
            ev(Exit, 1, 600),
            ev(Exit, 0, 700),
        ]);
        let mut thread = payload_events(Args, 1, 150, |w| {
            assert!(w.history_chain(&[1]));
        });
        thread.extend([
            ev(Entry, 3, 160),
            ev(Exit, 3, 170),
            ev(Entry, 2, 180),
            ev(Signal, 11, 190),
        ]);
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(10, main),
            FakeTask::thread(11, 10, thread),
            FakeTask::thread(12, 10, Vec::new()),
        ]);
        assert_eq!(
            tree_of_last(&trace, 2),
            "\
# DURATION     TID     FUNCTION
# task 11: pid 10, tid 11 (prog), /usr/bin/prog, thread of task 10
# all 2 calls; the task that crashed (SIGSEGV)
   0.010 us [   11] |   leaf();
            [   11] |   strtol() {
            [   11] |     /* signal SIGSEGV */
            [   11] |   } /* strtol */ (not returned)
            [   11] | } /* parse_args */ (not returned)

# task 10: pid 10, tid 10 (prog), /usr/bin/prog, the program started
# last 2 of 4 calls
            [   10] |   parse_args() {
   0.010 us [   10] |     strtol();
   0.010 us [   10] |     leaf();
   0.400 us [   10] |   } /* parse_args */
            [   10] | } /* main */ (entry not in history)

# task 12: pid 10, tid 12 (prog), /usr/bin/prog, thread of task 10
# no calls
"
        );
    }

    /// An attach: the calls open when fctrace attached that are still
    /// open at the first call shown open before it, as in the whole tree.
    #[test]
    fn last_calls_of_an_attach() {
        use crate::testutil::{ev, fake_trace, payload_events, FakeTask};
        use fctrace_format::event::EventKind::{Args, Entry, Exit};
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf.
        let mut main = payload_events(Args, 0, 100, |w| {
            assert!(w.attach_chain(&[0, 1]));
        });
        main.extend([
            ev(Entry, 3, 200),
            ev(Exit, 3, 210),
            ev(Exit, 1, 300),
            ev(Entry, 2, 400),
            ev(Exit, 2, 410),
            ev(Exit, 0, 500),
        ]);
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, main)]);
        assert_eq!(
            tree_of_last(&trace, 1),
            "\
# DURATION     TID     FUNCTION
# task 10: pid 10, tid 10 (prog), /usr/bin/prog, the program started
# last 1 of 2 calls; the task that ended last
            [   10] | main() { /* entered before the trace began */
   0.010 us [   10] |   strtol();
            [   10] | } /* main */ (entry not recorded)
"
        );
    }
}

/// Argument and return values (args.rs) in the tree's lines.
mod values {
    use super::*;
    use crate::testutil::payload_events as values;

    #[test]
    fn tree_lines_with_values() {
        use crate::testutil::{ev, fake_trace, FakeTask};
        use fctrace_format::event::EventKind::{Args, Entry, Exit, Retval, Unwind};
        // ids: 0 main, 1 parse_args, 2 strtol, 3 leaf
        let mut events = vec![ev(Entry, 0, 1000)];
        events.push(ev(Entry, 3, 1100));
        events.extend(values(Args, 3, 1100, |w| {
            w.int(fctrace_format::argval::IntFmt::Auto, 8, 2);
            w.int(fctrace_format::argval::IntFmt::Auto, 8, 3);
        }));
        events.extend(values(Retval, 3, 1200, |w| {
            w.int(fctrace_format::argval::IntFmt::Auto, 8, 5);
        }));
        events.push(ev(Exit, 3, 1200));
        events.push(ev(Entry, 1, 1300));
        events.extend(values(Args, 1, 1300, |w| {
            w.string(b"world", false);
        }));
        events.push(ev(Entry, 2, 1400));
        events.push(ev(Exit, 2, 1500));
        events.extend(values(Retval, 1, 1600, |w| {
            w.string(b"hello world, this is long", true);
        }));
        events.push(ev(Exit, 1, 1600));
        // Only a return value; then arguments without any (an empty payload).
        events.push(ev(Entry, 2, 1700));
        events.extend(values(Retval, 2, 1800, |w| {
            w.enumerator(2, "BLUE");
        }));
        events.push(ev(Exit, 2, 1800));
        events.push(ev(Entry, 3, 1900));
        events.extend(values(Args, 3, 1900, |_| {}));
        events.push(ev(Unwind, 3, 2000));
        events.push(ev(Exit, 0, 3000));
        let (_dir, trace) = fake_trace(&[FakeTask::main(7, events)]);
        let mut out = Vec::new();
        write_tree(&trace, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\
# DURATION     TID     FUNCTION
# task 7: pid 7, tid 7 (prog), /usr/bin/prog, the program started
            [    7] | main() {
   0.100 us [    7] |   leaf(2, 3) = 5;
            [    7] |   parse_args(\"world\") {
   0.100 us [    7] |     strtol();
   0.300 us [    7] |   } = \"hello world, this is long\"...; /* parse_args */
   0.100 us [    7] |   strtol() = BLUE;
   0.100 us [    7] |   leaf(); (unwound)
   2.000 us [    7] | } /* main */
"
        );
    }
}
