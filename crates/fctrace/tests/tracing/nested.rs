//! fctrace tracing fctrace: `fctrace record -d A fctrace record -d B ./prog`
//! (and the same in live mode). The outer fctrace traces the inner one; the
//! program the inner one runs is the inner one's: its calls are in the
//! inner trace (they were silently missing: the outer agent put its own
//! variables back into the program's environment), and not in the outer.

use fctrace_testkit::*;
use std::ffi::OsStr;

const TOP_TREE: &str = "top()\n  mid()\n    leaf()\n";

fn outline_of(text: &str, ctx: &str) -> String {
    let tree = parse_replay(text).unwrap_or_else(|e| panic!("{ctx}: {e}\n{text}"));
    tree.threads.iter().map(|t| outline(&t.roots)).collect()
}

#[test]
fn record_inside_record() {
    let exe = cli_args_program();
    let fct = fctrace_bin();
    let outer = TraceDir::new("outer");
    let inner = TraceDir::new("inner");
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        outer.path.as_os_str(),
        fct.as_os_str(),
        OsStr::new("record"),
        OsStr::new("-d"),
        inner.path.as_os_str(),
        exe.as_os_str(),
        OsStr::new("x"),
    ]);
    let native = run_env(&exe, &["x"], &[]);
    assert_eq!(native.stdout, cli_args_output(&["x"]));
    assert_same_behaviour(&native, &r, "record inside record");

    // The program's calls are in the inner trace, all of them.
    let text = fctrace_on("replay", &inner.path, &["-F", "top"]);
    assert_outline_eq(&outline_of(&text, "inner"), TOP_TREE, "inner trace");
    let rep = report(&inner.path);
    assert_eq!(rep.calls("main"), 1, "inner trace");
    assert_eq!(rep.calls("leaf"), 1, "inner trace");
    assert_eq!(rep.lost_events, 0);

    // The outer trace has the inner fctrace, and not the program.
    let rep = report(&outer.path);
    // (the inner fctrace's threads: its main thread and its recorder's
    // heartbeat thread)
    assert!(!rep.tasks.is_empty());
    for t in &rep.tasks {
        assert_eq!(t.comm, "fctrace", "{:?}", rep.tasks);
        assert_eq!(t.pid, rep.tasks[0].pid, "one process: {:?}", rep.tasks);
    }
    assert_eq!(rep.calls("main"), 1, "the inner fctrace's main");
    assert_eq!(rep.calls("top"), 0, "the program is not in the outer trace");
}

#[test]
fn live_inside_live() {
    let exe = cli_args_program();
    let fct = fctrace_bin();
    let r = fctrace(&[
        OsStr::new("-D"),
        OsStr::new("1"),
        fct.as_os_str(),
        OsStr::new("-F"),
        OsStr::new("top"),
        exe.as_os_str(),
    ]);
    let native = run_env(&exe, &[], &[]);
    assert_eq!(r.code(), native.code(), "{}", r.describe());
    // The program's output, the inner tree, then the outer tree.
    let rest = r
        .stdout
        .strip_prefix(cli_args_output(&[]).as_str())
        .unwrap_or_else(|| panic!("the program's output first\n{}", r.describe()));
    let second = rest[1..]
        .find("# DURATION")
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("two trees\n{}", r.describe()));
    let (inner, outer) = rest.split_at(second);
    assert_outline_eq(&outline_of(inner, "inner"), TOP_TREE, "inner live tree");
    let outer = outline_of(outer, "outer");
    assert!(
        outer.lines().any(|l| l == "main()") && !outer.contains("top()"),
        "the outer tree is the inner fctrace's, one level deep\n{outer}"
    );
}
