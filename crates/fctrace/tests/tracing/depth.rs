//! depth.c: recursion 1,000,000 deep on a thread with a 512 MiB stack. No
//! depth limit: the trace holds every call (the report's count of `down` is
//! exactly 1,000,001, callgrind's), nothing is lost, and the call tree
//! nests one level per call.
//!
//! The replay shows lines deeper than its indentation limit with their
//! depth written out (`(depth 1000001) down();`), so its text stays linear
//! in the number of calls (about 500 MB here): the test reads all of it as
//! it comes and checks every line of the deep thread.

use fctrace_testkit::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const N: u64 = 1_000_000;

/// Checks `fctrace replay`'s whole output, line by line as it comes (about
/// 500 MB): the deep thread's lines are `deep() {`, then `down() {` one
/// level deeper each, the innermost `down();`, then the closing lines back
/// up to `} /* deep */`. Lines deeper than the indentation limit show
/// their depth as `(depth N) `. Returns the number of the thread's lines.
fn check_deep_thread(dir: &std::path::Path, ctx: &str) -> u64 {
    let mut child = Command::new(fctrace_bin())
        .arg("replay")
        .arg("-d")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fctrace replay");
    let mut out = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
    let mut tid: Option<u64> = None;
    let mut seen = 0u64;
    let mut buf = Vec::with_capacity(512);
    loop {
        buf.clear();
        if out.read_until(b'\n', &mut buf).expect("replay output") == 0 {
            break;
        }
        let l = std::str::from_utf8(&buf)
            .expect("replay output is text")
            .trim_end_matches('\n');
        if !l.contains(" | ") {
            continue;
        }
        let ReplayLine {
            tid: this_tid,
            depth,
            text,
            ..
        } = split_replay_line(l).unwrap_or_else(|e| panic!("{ctx}: {e}: {l:?}"));
        match tid {
            None if text == "deep() {" => tid = Some(this_tid),
            Some(t) if t == this_tid => {}
            _ => continue,
        }
        // Line k (from 0) of the thread: deep at 0, down k deep for
        // k in 1..=N, the leaf at N+1, then the closes.
        let k = seen;
        let (want_depth, want) = if k == 0 {
            (0, "deep() {")
        } else if k <= N {
            (k, "down() {")
        } else if k == N + 1 {
            (N + 1, "down();")
        } else if k <= 2 * N + 1 {
            (2 * N + 2 - k, "} /* down */")
        } else {
            (0, "} /* deep */")
        };
        if depth as u64 != want_depth || text != want {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{ctx}: line {k} of the deep thread: {l:?}, expected {want:?} at depth {want_depth}");
        }
        seen += 1;
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{ctx}: replay failed: {status}");
    seen
}

#[test]
fn a_million_calls_deep() {
    for opt in ["-O0", "-O2"] {
        let exe = c_program("depth.c", opt, &[opt, "-pthread"]);
        let native = run_native(&exe, &[]);
        assert_eq!(native.stdout, format!("depth: {N}\n"));
        let rec = record(&exe, &[], &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let rep = report(&rec.dir.path);
        assert_eq!(rep.lost_events, 0);
        let cg = callgrind(&exe, &[]);
        if let Err(e) = compare_with_callgrind(&exe, &rep, &cg, &CompareOptions::default()) {
            panic!("{opt}: {e}(trace {})", rec.dir.path.display());
        }
        assert_eq!(rep.calls("down"), N + 1, "{opt}");
        assert_eq!(rep.calls("deep"), 1, "{opt}");
        let down = rep.function("down").unwrap();
        let deep = rep.function("deep").unwrap();
        // Every call of down returned (a duration for each), the outermost
        // inside deep's only call.
        assert!(
            down.max_ns.unwrap() <= deep.max_ns.unwrap(),
            "{down:?} {deep:?}"
        );
        assert!(down.min_ns.unwrap() <= down.max_ns.unwrap());

        // The whole tree of the deep thread, nested one level per call
        // (once: the replay is the same code whatever the build).
        if opt == "-O0" {
            let ctx = format!("{opt} (trace {})", rec.dir.path.display());
            assert_eq!(check_deep_thread(&rec.dir.path, &ctx), 2 * N + 3, "{ctx}");
        }
    }
}
