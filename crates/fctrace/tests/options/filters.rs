//! The display-side filters of `replay` and `report` (-F, -N, -D, -t,
//! --tid, -C, -T) on a recorded trace of a real program (filters.c, whose
//! call tree is known by construction), and `-F` counts against
//! callgrind's count of the calls made under the function (dense.c).

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn filters_exe() -> PathBuf {
    c_program("filters.c", "-O0", &["-O0", "-pthread"])
}

/// One recording shared by the tests (they only read it).
fn recorded() -> &'static Path {
    static REC: OnceLock<Recorded> = OnceLock::new();
    &REC.get_or_init(|| record(&filters_exe(), &[], &[]))
        .dir
        .path
}

/// `replay OPTS`: its text and tree.
#[track_caller]
fn replay_opts(opts: &[&str]) -> (String, Replay) {
    let text = fctrace_on("replay", recorded(), opts);
    let tree = parse_replay(&text)
        .unwrap_or_else(|e| panic!("replay {opts:?}: not a call tree: {e}\n{text}"));
    (text, tree)
}

/// The outline of the main thread's calls (all of its outermost calls).
#[track_caller]
fn main_thread_outline(opts: &[&str]) -> String {
    let (text, tree) = replay_opts(opts);
    let main = tree
        .threads
        .first()
        .unwrap_or_else(|| panic!("replay {opts:?}: no thread\n{text}"));
    outline(&main.roots)
}

/// The outline of main()'s subtree.
#[track_caller]
fn main_outline(opts: &[&str]) -> String {
    let (_, tree) = replay_opts(opts);
    outline(std::slice::from_ref(tree.main()))
}

/// The worker thread's outline.
#[track_caller]
fn worker_outline(opts: &[&str]) -> String {
    let (text, tree) = replay_opts(opts);
    assert_eq!(tree.threads.len(), 2, "replay {opts:?}\n{text}");
    outline(&tree.threads[1].roots)
}

const OUTER: &str = "
outer()
  inner()
    helper()
      leaf()
    leaf()
  helper()
    leaf()
";

fn indent(text: &str, levels: usize) -> String {
    prefix_lines(&expected_outline(text), &"  ".repeat(levels))
}

/// main()'s whole subtree, from the source.
fn full_main() -> String {
    let outer = indent(OUTER, 1);
    format!(
        "main()\n{outer}{}{}{}{outer}{}{outer}{}",
        indent("via1()\n  target()\n    leaf()\n", 1),
        indent("via2()\n  leaf()\n  target()\n    leaf()\n", 1),
        indent("quiet()\n  leaf()\n", 1),
        indent("loud()\n  leaf()\n", 1),
        indent(
            "slow()\n  nanosleep()\npthread_create()\npthread_join()\nprintf()\n",
            1
        ),
    )
}

#[test]
fn unfiltered_tree_is_the_source() {
    assert_outline_eq(&main_outline(&[]), &full_main(), "replay");
    assert_outline_eq(
        &worker_outline(&[]),
        &format!("worker()\n{}", indent(OUTER, 1)),
        "replay, worker",
    );
}

#[test]
fn filter() {
    // Only the -F functions and what they call, wherever they are.
    let inner = indent("inner()\n  helper()\n    leaf()\n  leaf()\n", 0);
    assert_outline_eq(
        &main_thread_outline(&["-F", "inner"]),
        &inner.repeat(3),
        "-F inner",
    );
    assert_outline_eq(&worker_outline(&["-F", "inner"]), &inner, "-F inner");
    // Two patterns, one a regular expression; target inside via2 once.
    assert_outline_eq(
        &main_thread_outline(&["-F", "^via2$", "--filter", "targ.t"]),
        &expected_outline(
            "
            target()
              leaf()
            via2()
              leaf()
              target()
                leaf()
            ",
        ),
        "-F ^via2$ -F targ.t",
    );
    // FUNC@MODULE: nanosleep is libc's, leaf is not.
    let exe = filters_exe();
    let module = exe.file_name().unwrap().to_str().unwrap();
    assert_outline_eq(
        &main_thread_outline(&["-F", "nanosleep@libc", "-F", "leaf@libc"]),
        "nanosleep()\n",
        "-F nanosleep@libc",
    );
    assert_outline_eq(
        &main_thread_outline(&["-F", &format!("via1@{module}")]),
        &expected_outline("via1()\n  target()\n    leaf()\n"),
        "-F via1@exe",
    );
}

#[test]
fn notrace() {
    let want = full_main()
        .replace(&indent(OUTER, 1), "")
        .replace("    nanosleep()\n", "");
    assert_outline_eq(
        &main_outline(&["-N", "outer", "--notrace", "nanosleep"]),
        &want,
        "-N outer -N nanosleep",
    );
    assert_eq!(worker_outline(&["-N", "outer"]), "worker()\n");
    // -F and -N together.
    assert_outline_eq(
        &main_thread_outline(&["-F", "outer", "-N", "inner"]),
        &indent("outer()\n  helper()\n    leaf()\n", 0).repeat(3),
        "-F outer -N inner",
    );
}

#[test]
fn depth() {
    assert_eq!(main_outline(&["-D", "1"]), "main()\n");
    assert_outline_eq(
        &main_outline(&["--depth", "2"]),
        &expected_outline(
            "
            main()
              outer()
              via1()
              via2()
              quiet()
              outer()
              loud()
              outer()
              slow()
              pthread_create()
              pthread_join()
              printf()
            ",
        ),
        "-D 2",
    );
    // With -F, the -F function is level 1.
    assert_outline_eq(
        &main_thread_outline(&["-F", "outer", "-D", "2"]),
        &indent("outer()\n  inner()\n  helper()\n", 0).repeat(3),
        "-F outer -D 2",
    );
}

#[test]
fn time_filter() {
    // Only slow (150 ms) and its nanosleep last long: everything else is a
    // few instructions, or at most a few milliseconds (thread creation,
    // printf), far below 40 ms.
    let (text, tree) = replay_opts(&["-t", "40ms"]);
    assert_eq!(
        outline(&tree.threads[0].roots),
        "main()\n  slow()\n    nanosleep()\n",
        "{text}"
    );
    assert!(
        tree.threads.len() == 1,
        "the worker's calls are all short\n{text}"
    );
    // Callers keep their full durations: main lasts at least slow's time.
    let dur = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.contains(name) && !l.contains('{'))
            .unwrap_or_else(|| panic!("no closing line of {name}\n{text}"));
        let d = split_replay_line(line).unwrap().duration.to_string();
        let (v, unit) = d.split_once(' ').unwrap();
        let v: f64 = v.trim().parse().unwrap();
        match unit.trim() {
            "us" => v / 1000.0,
            "ms" => v,
            "s" => v * 1000.0,
            u => panic!("unit {u}"),
        }
    };
    assert!(dur("nanosleep") >= 150.0, "{text}");
    assert!(dur("/* main */") >= dur("/* slow */"), "{text}");
    // The report: only the shown calls, the hidden ones' time in their
    // callers' self time.
    let rep: Report = serde_json::from_str(&fctrace_on(
        "report",
        recorded(),
        &["--format", "json", "-t", "40ms"],
    ))
    .unwrap();
    let mut names: Vec<(&str, u64)> = rep
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.calls))
        .collect();
    names.sort();
    assert_eq!(names, [("main", 1), ("nanosleep", 1), ("slow", 1)]);
    let main = rep.function("main").unwrap();
    let slow = rep.function("slow").unwrap();
    assert_eq!(main.self_ns, main.total_ns - slow.total_ns);
}

#[test]
fn tids() {
    let rep = report(recorded());
    assert_eq!(rep.tasks.len(), 2);
    let worker = rep.tasks.iter().find(|t| t.tid != t.pid).unwrap();
    let (text, tree) = replay_opts(&["--tid", &worker.tid.to_string()]);
    assert_eq!(tree.threads.len(), 1, "{text}");
    assert_eq!(tree.threads[0].tid, worker.tid);
    assert_eq!(text.matches("# task ").count(), 1, "{text}");
    assert_outline_eq(
        &outline(&tree.threads[0].roots),
        &format!("worker()\n{}", indent(OUTER, 1)),
        "--tid",
    );
    let list = format!("{},{}", worker.pid, worker.tid);
    assert_eq!(replay_opts(&["--tid", &list]).1.threads.len(), 2);
    let rep: Report = serde_json::from_str(&fctrace_on(
        "report",
        recorded(),
        &["--format", "json", "--tid", &worker.tid.to_string()],
    ))
    .unwrap();
    assert_eq!(rep.calls("outer"), 1);
    assert_eq!(rep.calls("main"), 0);
}

#[test]
fn caller_filter() {
    assert_outline_eq(
        &main_thread_outline(&["-C", "target"]),
        &expected_outline(
            "
            main()
              via1()
                target()
              via2()
                target()
            ",
        ),
        "-C target: target a leaf, as uftrace's -C",
    );
    // --caller-tree: target's calls too.
    assert_outline_eq(
        &main_thread_outline(&["-C", "target", "--caller-tree"]),
        &expected_outline(
            "
            main()
              via1()
                target()
                  leaf()
              via2()
                target()
                  leaf()
            ",
        ),
        "-C target --caller-tree",
    );
    assert_eq!(replay_opts(&["-C", "target"]).1.threads.len(), 1);
    // Several FUNCs; with --caller-tree FUNC's subtree is shown.
    assert_outline_eq(
        &main_thread_outline(&[
            "-C",
            "nanosleep",
            "--caller-filter",
            "loud",
            "--caller-tree",
        ]),
        &expected_outline(
            "
            main()
              loud()
                leaf()
              slow()
                nanosleep()
            ",
        ),
        "-C nanosleep -C loud",
    );
}

#[test]
fn triggers() {
    // trace_off at quiet (not shown), trace_on at loud (shown): per
    // thread, the worker is not affected.
    let opts = ["-T", "quiet@trace_off", "-T", "loud@trace_on"];
    let outer = indent(OUTER, 1);
    let want = full_main().replacen(
        &format!("{}{outer}", indent("quiet()\n  leaf()\n", 1)),
        "",
        1,
    );
    assert_outline_eq(&main_outline(&opts), &want, "trace_off/trace_on");
    assert_outline_eq(
        &worker_outline(&opts),
        &format!("worker()\n{}", indent(OUTER, 1)),
        "trace_off/trace_on, worker",
    );
    // global: the worker runs after quiet, tracing is off for it too.
    let opts = ["-T", "quiet@trace_off,global"];
    let (text, tree) = replay_opts(&opts);
    assert_eq!(tree.threads.len(), 1, "{text}");
    // main: everything before quiet; main's own return is still shown.
    assert_outline_eq(
        &outline(std::slice::from_ref(tree.main())),
        &format!(
            "main()\n{}{}{}",
            indent(OUTER, 1),
            indent("via1()\n  target()\n    leaf()\n", 1),
            indent("via2()\n  leaf()\n  target()\n    leaf()\n", 1)
        ),
        "trace_off,global",
    );
    // depth=N, everywhere outer is called.
    assert_outline_eq(
        &worker_outline(&["-T", "outer@depth=2"]),
        "worker()\n  outer()\n    inner()\n    helper()\n",
        "depth=2",
    );
    // backtrace: the callers, even when -F hides them.
    let (text, _) = replay_opts(&["-F", "target", "-T", "target@backtrace"]);
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| split_replay_line(l).ok())
        .map(|l| l.text)
        .collect();
    assert_eq!(
        lines,
        [
            "/* backtrace: main > via1 */",
            "target() {",
            "leaf();",
            "} /* target */",
            "/* backtrace: main > via2 */",
            "target() {",
            "leaf();",
            "} /* target */",
        ],
        "{text}"
    );
    // finish: nothing of the process after via2's entry; main never
    // returns in the tree, the worker (later) shows nothing.
    let (text, tree) = replay_opts(&["-T", "via2@finish"]);
    assert_eq!(tree.threads.len(), 1, "{text}");
    assert_outline_eq(
        &outline(std::slice::from_ref(tree.main())),
        &format!(
            "main() (open)\n{}{}",
            indent(OUTER, 1),
            indent("via1()\n  target()\n    leaf()\n", 1)
        ),
        "finish",
    );
}

#[test]
fn patterns_naming_no_function_are_warned_about() {
    for cmd in ["replay", "report"] {
        let mut args: Vec<&OsStr> = vec![OsStr::new(cmd), OsStr::new("-d"), recorded().as_os_str()];
        args.extend(
            [
                "-F",
                "main",
                "-N",
                "no_such_function",
                "-T",
                "nope.*zz@trace_off",
            ]
            .iter()
            .map(OsStr::new),
        );
        let r = fctrace(&args);
        assert!(r.success(), "{}", r.describe());
        assert!(
            r.stderr
                .contains("-N no_such_function matches no function of the trace"),
            "{}",
            r.describe()
        );
        assert!(
            r.stderr
                .contains("-T nope.*zz@trace_off matches no function"),
            "{}",
            r.describe()
        );
        assert!(!r.stderr.contains("-F main"), "{}", r.describe());
    }
}

#[test]
fn bad_specs_are_errors() {
    for opts in [
        &["-F", "f("][..],
        &["-t", "10 parsecs"],
        &["--tid", "x"],
        &["-T", "leaf"],
        &["-T", "leaf@explode"],
        &["-D", "0"],
    ] {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("replay"),
            OsStr::new("-d"),
            recorded().as_os_str(),
        ];
        args.extend(opts.iter().map(OsStr::new));
        let r = fctrace(&args);
        assert!(!r.success(), "{opts:?} accepted\n{}", r.describe());
        assert!(r.stdout.is_empty(), "{opts:?}: output\n{}", r.describe());
        assert!(
            r.stderr.contains("invalid") || r.stderr.contains("error"),
            "{opts:?}\n{}",
            r.describe()
        );
    }
}

/// `report -F FUNC` counts every call made (transitively) under FUNC, and
/// FUNC's own calls, exactly as callgrind does.
#[track_caller]
fn filter_counts_match_callgrind(exe: &Path, func: &str, expected_calls: u64) {
    let rec = record(exe, &[], &[]);
    let rep: Report = serde_json::from_str(&fctrace_on(
        "report",
        &rec.dir.path,
        &["--format", "json", "-F", func],
    ))
    .unwrap();
    assert_eq!(rep.lost_events, 0);
    let cg = callgrind_under(exe, &[], func);
    match compare_with_callgrind(exe, &rep, &cg, &CompareOptions::default()) {
        Ok(c) => assert_eq!(
            c.total_calls, expected_calls,
            "-F {func}: calls compared ({c:?})"
        ),
        Err(msg) => panic!("-F {func}: {msg}(trace {})", rec.dir.path.display()),
    }
    // Nothing outside: the executable's functions shown are FUNC's subtree.
    assert!(rep.calls("main") == 0 && rep.calls(func) > 0);
}

#[test]
fn filter_counts_match_callgrind_dense() {
    let exe = c_program("dense.c", "-O0", &["-O0"]);
    // apply: 600000 calls, each calling square and one of add1/mul3/xor5.
    filter_counts_match_callgrind(&exe, "apply", 600_000 * 3);
    // strings: one call, mix 2 x 20000 times (libc's calls not compared).
    filter_counts_match_callgrind(&exe, "strings", 1 + 40_000);
}

/// Every thread's outline, in order.
fn outlines(tree: &Replay) -> Vec<String> {
    tree.threads.iter().map(|t| outline(&t.roots)).collect()
}

/// `record X` then `replay` shows the same tree as `record` then
/// `replay X`: the agent's filters and the display's agree, and the
/// display's are idempotent on a filtered trace (live mode applies them
/// again).
#[test]
fn record_time_and_replay_time_filters_agree() {
    let exe = filters_exe();
    for opts in [
        &["-F", "outer"][..],
        &["-N", "outer", "-N", "via1"],
        &["-D", "2"],
        &["-F", "outer", "-D", "2"],
        &["-F", "via.", "-N", "target"],
        &["-T", "quiet@trace_off", "-T", "loud@trace_on"],
        &["-T", "quiet@trace_off,global"],
        &["-T", "outer@depth=2"],
        &["-T", "via2@finish"],
    ] {
        let filtered = record(&exe, &[], opts);
        let (text, tree) = {
            let text = fctrace_on("replay", &filtered.dir.path, &[]);
            let tree = parse_replay(&text).unwrap();
            (text, tree)
        };
        let (want_text, want) = replay_opts(opts);
        assert_eq!(
            outlines(&tree),
            outlines(&want),
            "record {opts:?} then replay\n{text}\nrecord then replay {opts:?}\n{want_text}"
        );
        // Again on the filtered trace: nothing changes.
        let again = parse_replay(&fctrace_on("replay", &filtered.dir.path, opts)).unwrap();
        assert_eq!(outlines(&again), outlines(&want), "replay {opts:?} twice");
    }
}

/// Live mode applies the display filters to what it recorded.
#[test]
fn live_mode_filters() {
    let exe = filters_exe();
    let r = fctrace(&[
        OsStr::new("-t"),
        OsStr::new("40ms"),
        OsStr::new("-C"),
        OsStr::new("nanosleep"),
        exe.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    // The program's own line comes first: the same as natively, and what
    // filters.c computes (leaf(x) = x+1, helper = 2(x+1), inner = 3(x+1),
    // outer = 5(x+1), target = x+1, via1 = x+2, via2 = 2(x+1)).
    let native = run_native(&exe, &[]);
    let outer = |x: i64| 5 * (x + 1);
    let sum = outer(1) + (2 + 2) + 2 * (3 + 1) + (4 + 1) + outer(5) + (6 + 1) + outer(7) + outer(8);
    assert_eq!(native.stdout, format!("filters: {sum}\n"));
    let replay = r
        .stdout
        .strip_prefix(native.stdout.as_str())
        .unwrap_or_else(|| panic!("not the program's output first\n{}", r.describe()));
    let tree = parse_replay(replay).unwrap();
    assert_eq!(
        outlines(&tree),
        ["main()\n  slow()\n    nanosleep()\n"],
        "{}",
        r.stdout
    );
    let r = fctrace(&[OsStr::new("-F"), OsStr::new("f("), exe.as_os_str()]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("-F/--filter"), "{}", r.describe());
}
