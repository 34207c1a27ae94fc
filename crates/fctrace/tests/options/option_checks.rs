//! Options either act where they are given or are refused there with a
//! message (issue 10, "Nothing lost" 4): record-time `-t` and `-C` act
//! when the trace is replayed or reported (as in live mode), record-time
//! `--tid` is refused, a `--tid` naming no task is warned about, a
//! trigger action written where a module goes is an error, and -T's help
//! names every action.

use fctrace_testkit::*;
use std::ffi::OsStr;

fn options_program() -> std::path::PathBuf {
    c_program("options.c", "O1", &["-O1"])
}

/// The program's output, derived from its source: 1 + 2 + 3.
const OUTPUT: &str = "sum 6\n";

/// The calls of options.c's main thread that last 10 ms or more: slow()
/// sleeps 30 ms, everything else (quick, printf) is far shorter; main
/// holds slow.
const LONG_CALLS: &str = "main()\n  slow()\n    nanosleep()\n";

#[test]
fn record_time_filter_acts_at_replay_report_and_live() {
    let exe = options_program();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, OUTPUT);
    let rec = record(&exe, &[], &["-t", "10ms"]);
    assert_same_behaviour(&native, &rec.run, "record -t 10ms");

    let text = replay_text(&rec.dir.path);
    let tree = parse_replay(&text).unwrap();
    assert_outline_eq(
        &outline(&tree.main_thread().unwrap().roots),
        LONG_CALLS,
        "replay of record -t 10ms",
    );
    // Replay's own -t replaces the recorded one: quick's 3 calls are there.
    let all = fctrace_on("replay", &rec.dir.path, &["-t", "0"]);
    assert_eq!(
        call_lines(&all)
            .iter()
            .filter(|l| l.trim() == "quick();")
            .count(),
        3,
        "{all}"
    );
    let report = report(&rec.dir.path);
    assert_eq!(report.calls("quick"), 0);
    assert_eq!(report.calls("slow"), 1);
    assert!(info_text(&rec.dir.path).contains("Record options: -t "));

    // Live mode shows the same tree.
    let live = fctrace(&[OsStr::new("-t"), OsStr::new("10ms"), exe.as_os_str()]);
    assert_eq!(live.code(), Some(0), "{}", live.describe());
    let (program_out, tree_text) = live
        .stdout
        .split_at(live.stdout.find("# DURATION").unwrap());
    assert_eq!(program_out, OUTPUT);
    let live_tree = parse_replay(tree_text).unwrap();
    assert_outline_eq(
        &outline(&live_tree.main_thread().unwrap().roots),
        LONG_CALLS,
        "live -t 10ms",
    );
}

#[test]
fn record_time_caller_filter_acts_at_replay() {
    let exe = options_program();
    let rec = record(&exe, &[], &["-C", "nanosleep"]);
    let tree = parse_replay(&replay_text(&rec.dir.path)).unwrap();
    assert_outline_eq(
        &outline(&tree.main_thread().unwrap().roots),
        LONG_CALLS,
        "replay of record -C nanosleep",
    );
}

#[test]
fn record_time_tid_is_refused() {
    let exe = options_program();
    let dir = TraceDir::new("tid");
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
        OsStr::new("--tid"),
        OsStr::new("1"),
        exe.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("--tid") && r.stderr.contains("replay"),
        "{}",
        r.describe()
    );
    assert!(
        r.stdout.is_empty(),
        "the program must not run\n{}",
        r.describe()
    );
    assert!(!dir.path.exists());
}

#[test]
fn tid_naming_no_task_is_warned_about() {
    let exe = options_program();
    let rec = record(&exe, &[], &[]);
    let tasks: Vec<u32> = {
        let info = info_json(&rec.dir.path);
        info["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tid"].as_u64().unwrap() as u32)
            .collect()
    };
    // A tid that is no task's: above every pid the kernel hands out.
    let absent = 4_194_304 + 1;
    assert!(!tasks.contains(&absent));
    for cmd in ["replay", "report"] {
        let r = fctrace(&[
            OsStr::new(cmd),
            OsStr::new("-d"),
            rec.dir.path.as_os_str(),
            OsStr::new("--tid"),
            OsStr::new(&absent.to_string()),
        ]);
        assert!(r.success(), "{}", r.describe());
        assert!(
            r.stderr.contains(&format!(
                "warning: --tid {absent} names no task of the trace"
            )),
            "{cmd}\n{}",
            r.describe()
        );
    }
    // A tid of the trace: no warning.
    let r = fctrace(&[
        OsStr::new("replay"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("--tid"),
        OsStr::new(&tasks[0].to_string()),
    ]);
    assert!(!r.stderr.contains("names no task"), "{}", r.describe());
}

/// uftrace's trigger actions that fctrace does not have are refused with
/// what to use instead, wherever actions go (after `-T`'s function, and
/// after `-F`'s and `-N`'s as uftrace allows: `-F a@depth=1` is a filter
/// and a trigger, `options/uftrace_record.rs`).
#[test]
fn uftrace_actions_fctrace_lacks_are_errors() {
    let exe = options_program();
    let rec = record(&exe, &[], &[]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["-F", "slow@size=100"],
            "`size=100` is a uftrace action that fctrace does not have",
        ),
        (
            &["-N", "slow@depth=1,callsite"],
            "`callsite` is a uftrace action that fctrace does not have",
        ),
        (
            &["-T", "slow@read=pmu-cycle"],
            "`read=pmu-cycle` is a uftrace action that fctrace does not have",
        ),
        (&["-T", "slow@filter,if:arg1=0"], "expected argN==VALUE"),
        (&["-T", "slow@filter,bogus"], "unknown action `bogus`"),
    ];
    for (opts, message) in cases {
        for cmd in ["replay", "report"] {
            let mut args: Vec<&OsStr> =
                vec![OsStr::new(cmd), OsStr::new("-d"), rec.dir.path.as_os_str()];
            args.extend(opts.iter().map(OsStr::new));
            let r = fctrace(&args);
            assert_eq!(r.code(), Some(1), "{opts:?}\n{}", r.describe());
            assert!(r.stderr.contains(message), "{opts:?}\n{}", r.describe());
            assert!(r.stdout.is_empty(), "{}", r.describe());
        }
        // Refused before the program runs.
        let mut args: Vec<&OsStr> = opts.iter().map(OsStr::new).collect();
        args.push(exe.as_os_str());
        let r = fctrace(&args);
        assert_eq!(r.code(), Some(1), "{opts:?}\n{}", r.describe());
        assert!(
            r.stdout.is_empty(),
            "the program must not run\n{}",
            r.describe()
        );
    }
}

#[test]
fn trigger_help_lists_every_action() {
    // The actions the -T parser accepts (fctrace-options' spec.rs), each
    // in `record --help`'s and live mode's text of -T.
    for args in [&["record", "--help"][..], &["--help"][..]] {
        let help = fctrace(args);
        help.expect_success();
        let text: String = help
            .stdout
            .lines()
            .skip_while(|l| !l.contains("--trigger <FUNC@ACTION>"))
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('-'))
            .collect::<Vec<_>>()
            .join(" ");
        for action in [
            "trace_on",
            "trace_off",
            "depth=N",
            "backtrace",
            "finish",
            "snapshot",
            "global",
            // uftrace's.
            "filter",
            "notrace",
            "hide",
            "time=",
            "trace ",
            "auto-args",
            "if:",
            "recover",
            "color=",
        ] {
            assert!(
                text.contains(action),
                "{args:?}: -T's help lacks {action}: {text}"
            );
        }
    }
}
