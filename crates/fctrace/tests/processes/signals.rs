//! signals.c: signal handlers are traced, marked by a `/* signal SIGx */`
//! line, and nested under the function they interrupted; nested signals,
//! handlers on an alternate stack, SA_SIGINFO, SA_RESETHAND, the signal()
//! family, fatal signals without a handler, and a high rate of timer
//! signals landing anywhere in call-dense code (exact counts).
//!
//! Every program runs natively and under fctrace: same output, same exit
//! status or signal.

use fctrace_testkit::*;

fn signals(opt: &str) -> std::path::PathBuf {
    c_program("signals.c", opt, &[opt])
}

/// Asserts the main thread's tree, projected onto `keep` (and markers).
#[track_caller]
fn assert_tree(rec: &Recorded, keep: &[&str], expected: &str, what: &str) {
    let (text, r) = replay_with_text(&rec.dir.path);
    let t = r
        .main_thread()
        .unwrap_or_else(|| panic!("{what}: no main() in\n{text}"));
    let keepf = |l: &str| is_marker(l) || keep.iter().any(|k| l == format!("{k}()"));
    let got = outline(&project(&t.roots, &keepf));
    assert_outline_eq(
        &got,
        &expected_outline(expected),
        &format!(
            "{what} (trace {})\n--- replay ---\n{}",
            rec.dir.path.display(),
            clip(&text, 6000)
        ),
    );
}

/// The exit status as a shell shows it (128+N for signal N).
fn status_of(r: &Run) -> i32 {
    match (r.code(), r.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => unreachable!(),
    }
}

const RAISE: &[&str] = &[
    "main",
    "outer",
    "inner",
    "raise",
    "on_usr1",
    "handler_work",
    "leaf",
    "printf",
];

#[test]
fn handler_nested_under_interrupted_function() {
    for opt in ["-O0", "-O2"] {
        let exe = signals(opt);
        let rec = record_same(&exe, &["raise"]);
        assert_eq!(rec.run.stdout, "raise: hits=1\n");
        assert_tree(
            &rec,
            RAISE,
            "
            main()
              outer()
                inner()
                  raise()
                    /* signal SIGUSR1 */
                    on_usr1()
                      handler_work()
                        leaf()
                leaf()
              leaf()
              printf()
            ",
            &format!("raise {opt}"),
        );
    }
}

#[test]
fn nested_signals() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["nested"]);
    assert_eq!(rec.run.stdout, "nested: hits=2\n");
    assert_tree(
        &rec,
        &[
            "main",
            "outer",
            "inner",
            "raise",
            "on_usr1_nesting",
            "on_usr2",
            "handler_work",
            "leaf",
        ],
        "
        main()
          outer()
            inner()
              raise()
                /* signal SIGUSR1 */
                on_usr1_nesting()
                  handler_work()
                    leaf()
                  raise()
                    /* signal SIGUSR2 */
                    on_usr2()
                      leaf()
            leaf()
        ",
        "nested",
    );
}

#[test]
fn handlers_on_alternate_stack() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["altstack"]);
    assert_eq!(rec.run.stdout, "altstack: hits=1 on_alt=1 sink=21\n");
    assert_tree(
        &rec,
        &[
            "main",
            "outer",
            "inner",
            "raise",
            "on_alt_usr1",
            "on_alt_usr2",
            "depth",
            "leaf",
        ],
        "
        main()
          outer()
            inner()
              raise()
                /* signal SIGUSR1 */
                on_alt_usr1()
                  depth()
                    depth()
                      depth()
                        depth()
                  raise()
                    /* signal SIGUSR2 */
                    on_alt_usr2()
                      leaf()
            leaf()
        ",
        "altstack",
    );
}

#[test]
fn siginfo_handler_reads_its_info() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["siginfo"]);
    assert_eq!(
        rec.run.stdout,
        "siginfo: signo_ok=1 code_is_queue=1 value=4242\n"
    );
    assert_tree(
        &rec,
        &["main", "sigqueue", "on_info", "leaf"],
        // SIGRTMIN has no standard name: the marker gives its number.
        &format!(
            "
            main()
              sigqueue()
                /* signal {} */
                on_info()
                  leaf()
            ",
            libc::SIGRTMIN()
        ),
        "siginfo",
    );
}

#[test]
fn sa_resethand_runs_once_then_default_kills() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["resethand"]);
    assert_eq!(
        rec.run.stdout,
        "before: on_once flags=0x84000000 mask=0\n\
         after: SIG_DFL flags=0x84000000 mask=0\n\
         resethand: hits=1\n"
    );
    assert_eq!(status_of(&rec.run), 128 + libc::SIGUSR1);
    // The second SIGUSR1 takes the default action: no handler, no marker
    // (SIGUSR1 is not one of the crash signals the agent marks).
    assert_tree(
        &rec,
        &["main", "outer", "inner", "raise", "on_once", "leaf"],
        "
        main() (open)
          outer()
            inner()
              raise()
                /* signal SIGUSR1 */
                on_once()
                  leaf()
            leaf()
          outer() (open)
            inner() (open)
              raise() (open)
        ",
        "resethand",
    );
}

#[test]
fn sa_resethand_on_sigsegv_then_crash_is_marked() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["resetsegv"]);
    assert_eq!(status_of(&rec.run), 128 + libc::SIGSEGV);
    assert_tree(
        &rec,
        &["main", "crash", "fault", "on_once", "leaf"],
        "
        main() (open)
          crash() (open)
            fault() (open)
              /* signal SIGSEGV */
              on_once()
                leaf()
              /* signal SIGSEGV */
        ",
        "resetsegv",
    );
}

#[test]
fn signal_family_and_queries_are_unchanged() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["api"]);
    assert_eq!(
        rec.run.stdout,
        "segv: SIG_DFL flags=0 mask=0\n\
         abrt: SIG_DFL flags=0 mask=0\n\
         signal: old_dfl=1\n\
         signal: on_usr2 flags=0x14000000 mask=0x400\n\
         signal: old_is_usr2=1\n\
         bsd_signal: old_is_usr1=1\n\
         sysv_signal: old_dfl=1\n\
         sysv: on_once flags=0xc4000000 mask=0\n\
         sysv after: SIG_DFL flags=0xc4000000 mask=0\n\
         sigset: old_dfl=1\n\
         sigset hold: old_is_usr2=1\n\
         signal segv: old_dfl=1\n\
         signal segv: old_dfl=1\n\
         signal segv: old_is_usr1=1\n\
         segv: SIG_DFL flags=0x14000000 mask=0x800\n\
         api: hits=3\n"
    );
    assert_tree(
        &rec,
        &[
            "main", "outer", "inner", "raise", "on_usr1", "on_usr2", "on_once",
        ],
        "
        main()
          outer()
            inner()
              raise()
                /* signal SIGUSR1 */
                on_usr1()
          outer()
            inner()
              raise()
          outer()
            inner()
              raise()
                /* signal SIGUSR2 */
                on_once()
          outer()
            inner()
              raise()
                /* signal SIGUSR2 */
                on_usr2()
        ",
        "api",
    );
}

#[test]
fn crash_without_handler_is_shown_where_it_happened() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["segv"]);
    assert_eq!(status_of(&rec.run), 128 + libc::SIGSEGV);
    assert_tree(
        &rec,
        &["main", "crash", "fault"],
        "
        main() (open)
          crash() (open)
            fault() (open)
              /* signal SIGSEGV */
        ",
        "segv",
    );
    let rec = record_same(&exe, &["abort"]);
    assert_eq!(status_of(&rec.run), 128 + libc::SIGABRT);
    assert_tree(
        &rec,
        &["main", "do_abort", "abort"],
        "
        main() (open)
          do_abort() (open)
            abort() (open)
              /* signal SIGABRT */
        ",
        "abort",
    );
}

/// A program that blocks SIGSEGV and faults is killed by the kernel
/// without any handler running (no marker), as without fctrace. A stack
/// overflow with an alternate signal stack and no handler: the agent's
/// marker runs on the alternate stack, marks the crash in the deepest
/// frame, and the program dies by SIGSEGV.
#[test]
fn crash_signals_blocked_or_on_alternate_stack() {
    let exe = signals("-O2");
    let rec = record_same(&exe, &["blocked"]);
    assert_eq!(status_of(&rec.run), 128 + libc::SIGSEGV);
    assert_tree(
        &rec,
        &["main", "crash", "fault"],
        "
        main() (open)
          crash() (open)
            fault() (open)
        ",
        "blocked",
    );
    let rec = record_same(&exe, &["overflow"]);
    assert_eq!(status_of(&rec.run), 128 + libc::SIGSEGV);
    let text = replay_text(&rec.dir.path);
    let lines: Vec<&str> = text.lines().collect();
    let markers: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("/* signal SIGSEGV */"))
        .collect();
    assert_eq!(markers.len(), 1, "one marker expected");
    let opens = lines.iter().filter(|l| l.ends_with("runaway() {")).count();
    assert!(opens > 10_000, "only {opens} levels of recursion");
    assert!(
        lines[markers[0] - 1].ends_with("runaway() {"),
        "the marker is not inside the deepest call: {:?}",
        &lines[markers[0] - 1..markers[0] + 1]
    );
    // Every later line of the thread closes a call left open.
    assert!(lines[markers[0] + 1..]
        .iter()
        .filter(|l| l.contains("runaway"))
        .all(|l| l.contains("} /* runaway */ (not returned)")));
}

const TICKS: usize = 2000;

/// The marker of a SIGALRM.
const ALARM: &str = "/* signal SIGALRM */";

/// 2000 SIGALRMs, 20 µs apart, land anywhere in a loop of 500,000
/// traced calls (inside stubs, between a reservation and its write, in the
/// slow paths); the handler makes traced calls of its own. Every handler
/// is marked and nested; the counts equal callgrind's.
#[test]
fn timer_signals_in_call_dense_code() {
    let exe = signals("-O2");
    let ticks = TICKS.to_string();
    let args = ["timer", ticks.as_str()];
    let rec = record_same(&exe, &args);
    assert_eq!(
        rec.run.stdout,
        format!("timer: total=1750000 ticks={TICKS}\n")
    );
    let (text, r) = replay_with_text(&rec.dir.path);
    let t = r.main_thread().expect("main thread");
    // The timer may fire once more before it is stopped: that handler
    // returns at once.
    let markers = t.count(ALARM);
    assert!((TICKS..TICKS + 3).contains(&markers), "{markers} markers");
    assert_eq!(t.count("on_alarm()"), markers);
    assert_eq!(t.count("tick()"), TICKS);
    assert_eq!(t.count("step()"), 500_000);
    // Every handler call directly follows its marker, as a sibling, and
    // holds exactly tick() { leaf() } (and setitimer() at the last one).
    let main = r.main();
    let mut checked = 0;
    main.walk(&mut Vec::new(), &mut |n, path| {
        for (i, c) in n.children.iter().enumerate() {
            if c.label == "on_alarm()" {
                checked += 1;
                assert!(
                    i > 0 && n.children[i - 1].label == ALARM,
                    "on_alarm without its marker under {path:?} / {}",
                    n.label
                );
                let kids: Vec<&str> = c.children.iter().map(|k| k.label.as_str()).collect();
                assert!(
                    kids == ["tick()"] || kids == ["tick()", "setitimer()"] || kids.is_empty(),
                    "on_alarm calls {kids:?}"
                );
                if let Some(tick) = c.children.first() {
                    assert_eq!(tick.children.len(), 1);
                    assert_eq!(tick.children[0].label, "leaf()");
                }
            }
            if c.label == ALARM {
                assert!(
                    n.children.get(i + 1).map(|x| x.label.as_str()) == Some("on_alarm()"),
                    "marker not followed by on_alarm under {}",
                    n.label
                );
            }
        }
    });
    assert_eq!(checked, markers, "{}", clip(&text, 2000));
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    assert_eq!(rep.calls("on_alarm"), markers as u64);
    assert_eq!(rep.calls("tick"), TICKS as u64);
    // Exact counts against callgrind, for every function the handler and
    // the program call. callgrind counts no call of the handler itself (the
    // kernel enters it without a call instruction), fctrace one per signal
    // (checked above against the markers).
    assert_counts_match_callgrind(
        &exe,
        &args,
        &CompareOptions {
            only: Some(|s| s != "on_alarm"),
            ..Default::default()
        },
    );
}

/// A sampling profiler: the timer handler takes a backtrace() at every
/// signal, so the unwinder walks the thread's frames while the hot path it
/// interrupted may be half-way through a shadow-stack update (the agent
/// completes or undoes that update before the handler runs; without that,
/// this program ends in "returned through a stack slot the agent does not
/// know"). Same output, every backtrace whole, exact counts.
#[test]
fn profiler_backtraces_in_timer_handler() {
    let exe = signals("-O2");
    let args = ["timer", "5000", "bt"];
    let rec = record_same(&exe, &args);
    assert_eq!(
        rec.run.stdout,
        "timer: total=1750000 ticks=5000\nbacktraces: 5000\n"
    );
    let r = replay(&rec.dir.path);
    let t = r.main_thread().expect("main thread");
    assert_eq!(t.count("tick()"), 5000);
    assert_eq!(t.count("on_alarm()"), t.count(ALARM));
    assert_eq!(t.count("step()"), 500_000);
    assert_counts_match_callgrind(
        &exe,
        &args,
        &CompareOptions {
            only: Some(|s| s != "on_alarm"),
            ..Default::default()
        },
    );
}
