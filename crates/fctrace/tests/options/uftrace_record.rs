//! uftrace's record options and trigger actions, as a uftrace user types
//! them (its doc/uftrace-record.md is the reference): `-T FUNC@filter,
//! depth=N`, `-F FUNC@depth=N`, `notrace`, `hide` and `-H`, `-P`/`-U` in
//! order, `-Z SIZE`, `--match glob`, `--max-stack`, `--clock`, `-e`,
//! `--no-args`, `recover` and `color=`. uftrace_record.c at -O0: main
//! calls a() three times (a calls b, b calls c), then big(), tiny() and
//! printf(); each expected tree is the program's call tree with the
//! functions an option leaves out taken away (their calls lifted to
//! their place), not fctrace's output.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::PathBuf;

fn program() -> PathBuf {
    c_program("uftrace_record.c", "-O0", &["-O0"])
}

/// A call of the program: its function and the calls it makes.
struct Call(&'static str, Vec<Call>);

/// main's calls, as uftrace_record.c makes them.
fn program_tree() -> Call {
    let a = || Call("a", vec![Call("b", vec![Call("c", vec![])])]);
    Call(
        "main",
        vec![
            a(),
            a(),
            a(),
            Call("big", vec![]),
            Call("tiny", vec![]),
            Call("printf", vec![]),
        ],
    )
}

/// The replay lines of `calls` at `depth`, keeping the calls of the
/// functions `keep` accepts and `depth_max` levels (the calls of a
/// function not kept are shown in its place).
fn render(calls: &[Call], depth: usize, keep: &dyn Fn(&str) -> bool, out: &mut Vec<String>) {
    for Call(name, kids) in calls {
        if !keep(name) {
            render(kids, depth, keep, out);
            continue;
        }
        let pad = "  ".repeat(depth);
        let mut inner = Vec::new();
        render(kids, depth + 1, keep, &mut inner);
        if inner.is_empty() {
            out.push(format!("{pad}{name}();"));
        } else {
            out.push(format!("{pad}{name}() {{"));
            out.extend(inner);
            out.push(format!("{pad}}} /* {name} */"));
        }
    }
}

/// The program's tree with only the functions `keep` accepts.
fn expected(keep: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    render(&[program_tree()], 0, keep, &mut out);
    out
}

/// The program's tree cut `levels` levels down under every call of
/// `under` (the whole tree for `main`).
fn expected_cut(under: &str, levels: usize) -> Vec<String> {
    fn cut(c: &Call, left: usize) -> Call {
        Call(
            c.0,
            if left <= 1 {
                vec![]
            } else {
                c.1.iter().map(|k| cut(k, left - 1)).collect()
            },
        )
    }
    fn find<'a>(c: &'a Call, name: &str, out: &mut Vec<&'a Call>) {
        if c.0 == name {
            out.push(c);
        } else {
            c.1.iter().for_each(|k| find(k, name, out));
        }
    }
    let tree = program_tree();
    let mut roots = Vec::new();
    find(&tree, under, &mut roots);
    let cut: Vec<Call> = roots.iter().map(|c| cut(c, levels)).collect();
    let mut out = Vec::new();
    render(&cut, 0, &|_| true, &mut out);
    out
}

/// Records with `opts` (the program behaving as natively) and returns the
/// replay's call lines from main's call on (or all of them when main is
/// not recorded).
#[track_caller]
fn recorded(opts: &[&str]) -> Vec<String> {
    let native = run_native(&program(), &[]);
    let rec = record(&program(), &[], opts);
    assert_same_behaviour(&native, &rec.run, &format!("record {opts:?}"));
    main_on(call_lines(&replay_text(&rec.dir.path)))
}

/// The lines from `main() {` to `} /* main */` when main is there.
fn main_on(lines: Vec<String>) -> Vec<String> {
    match lines.iter().position(|l| l == "main() {" || l == "main();") {
        Some(i) => {
            let end = lines
                .iter()
                .position(|l| l == "} /* main */")
                .map_or(lines.len(), |e| e + 1);
            lines[i..end].to_vec()
        }
        None => lines,
    }
}

/// fctrace's stderr and exit status for a command that must be refused.
#[track_caller]
fn refused(args: &[&str]) -> String {
    let r = fctrace(args);
    assert_no_panic(&r);
    assert!(!r.success(), "{}", r.describe());
    r.stderr
}

#[test]
fn trigger_filter_with_depth() {
    // uftrace: -T main@filter,depth=2 is -F main with depth 2 under it.
    assert_eq!(
        recorded(&["-T", "main@filter,depth=2"]),
        expected_cut("main", 2)
    );
    // And a filter with the action after its function.
    assert_eq!(recorded(&["-F", "a@depth=1"]), expected_cut("a", 1));
    assert_eq!(
        recorded(&["-F", "main@depth=3", "-T", "b@depth=1"]),
        expected_cut("main", 3)
    );
}

#[test]
fn notrace_and_hide_actions() {
    // notrace: b and what it calls are gone.
    let no_b = {
        let mut t = program_tree();
        for k in &mut t.1 {
            if k.0 == "a" {
                k.1.clear();
            }
        }
        let mut out = Vec::new();
        render(&[t], 0, &|_| true, &mut out);
        out
    };
    assert_eq!(recorded(&["-T", "b@notrace"]), no_b);
    assert_eq!(recorded(&["-N", "b@recover"]), no_b);
    // hide (and -H): b alone is gone, c shown in its place.
    let hide_b = expected(&|f| f != "b");
    assert_eq!(recorded(&["-T", "b@hide"]), hide_b);
    assert_eq!(recorded(&["-H", "b"]), hide_b);
    assert_eq!(
        recorded(&["--hide", "^(b|tiny)$"]),
        expected(&|f| f != "b" && f != "tiny")
    );
    // color= and recover change nothing in fctrace.
    assert_eq!(
        recorded(&["-T", "a@color=red,recover"]),
        expected(&|_| true)
    );
    let e = refused(&["record", "-T", "a@color=pink", "true"]);
    assert!(e.contains("colours are red"), "{e}");
}

#[test]
fn hide_in_live_mode_and_replay() {
    let exe = program();
    let out = fctrace(&[OsStr::new("-H"), OsStr::new("c"), exe.as_os_str()]);
    assert!(out.success(), "{}", out.describe());
    let native = run_native(&program(), &[]);
    let lines = main_on(call_lines(&out.stdout));
    assert_eq!(lines, expected(&|f| f != "c"));
    assert!(out.stdout.starts_with(&native.stdout), "{}", out.stdout);
    // Recorded whole, hidden at replay.
    let rec = record(&program(), &[], &[]);
    let text = fctrace_on("replay", &rec.dir.path, &["-H", "a"]);
    assert_eq!(main_on(call_lines(&text)), expected(&|f| f != "a"));
}

#[test]
fn patch_and_unpatch_in_order() {
    // -P selects: only a and c are patched (printf is a library call,
    // which -P leaves alone as uftrace does).
    assert_eq!(
        recorded(&["-P", "a", "-P", "c"]),
        expected(&|f| matches!(f, "a" | "c" | "printf"))
    );
    // The later of -P/-U decides.
    assert_eq!(recorded(&["-P", ".", "-U", "a"]), expected(&|f| f != "a"));
    assert_eq!(recorded(&["-U", "a", "-P", "."]), expected(&|_| true));
    assert_eq!(
        recorded(&["--unpatch", "^(b|big)$"]),
        expected(&|f| f != "b" && f != "big")
    );
    // A pattern that names nothing is said (live mode), as for -F.
    let exe = program();
    let r = fctrace(&[
        OsStr::new("-P"),
        OsStr::new("no_such_fn"),
        OsStr::new("-H"),
        OsStr::new("nor_this"),
        exe.as_os_str(),
    ]);
    for w in [
        "-P no_such_fn matches no function",
        "-H nor_this matches no function",
    ] {
        assert!(r.success() && r.stderr.contains(w), "{}", r.describe());
    }
    // The functions left out are not traced, with the reason.
    let rec = record(&program(), &[], &["-U", "tiny"]);
    let info = fctrace_on("info", &rec.dir.path, &["-v"]);
    assert!(
        info.lines()
            .any(|l| l.contains("tiny") && l.contains("not selected by -P/-U")),
        "{info}"
    );
}

#[test]
fn size_filter() {
    let syms = function_symbols(&program());
    let size = |name: &str| {
        syms.iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no symbol {name}"))
            .size
    };
    // Only the functions at least as large as big (a PLT entry, printf's,
    // is 16 bytes: as in uftrace, smaller).
    let z = size("big");
    assert!(z > 16 && size("tiny") < z, "big {z}, tiny {}", size("tiny"));
    let keep = |f: &str| f != "printf" && size(f) >= z;
    assert_eq!(recorded(&["-Z", &z.to_string()]), expected(&keep));
    assert_eq!(recorded(&["--size-filter", "1"]), expected(&|_| true));
}

#[test]
fn glob_patterns() {
    // As a glob `?ig` is big; as a regex it is refused.
    assert_eq!(
        recorded(&["--match", "glob", "-F", "?ig"]),
        vec!["big();".to_string()]
    );
    // `t*` matches tiny only as a glob (as a regex, every name with a t).
    assert_eq!(
        recorded(&["--match=glob", "-N", "t*", "-D", "2"]),
        expected_cut("main", 2)
            .into_iter()
            .filter(|l| l.trim() != "tiny();")
            .collect::<Vec<_>>()
    );
    assert_eq!(
        recorded(&["--match", "glob", "-P", "[ab]", "-U", "b"]),
        expected(&|f| matches!(f, "a" | "printf"))
    );
}

#[test]
fn max_stack_clock_trace_state_estimate_return_no_args() {
    assert_eq!(recorded(&["--max-stack", "2"]), expected_cut("main", 2));
    assert_eq!(
        recorded(&["--max-stack", "3", "-D", "2"]),
        expected_cut("main", 2)
    );
    assert_eq!(recorded(&["--clock", "mono", "-e"]), expected(&|_| true));
    assert_eq!(
        recorded(&["--estimate-return", "-A", "a@arg1", "--no-args"]),
        expected(&|_| true)
    );
    // --trace=off: tracing starts off (nothing turns it on here).
    assert_eq!(recorded(&["--trace=off"]), Vec::<String>::new());
    assert_eq!(recorded(&["--trace", "on"]), expected(&|_| true));
    let e = refused(&["record", "--clock", "realtime", "true"]);
    assert!(e.contains("--clock realtime"), "{e}");
}

/// `--clock mono|mono_raw|boot`: the trace's times are on that clock.
/// clocks.c reads it just before and after calling mark(): mark()'s entry
/// and the system call it makes (-k: the kernel's events share the clock)
/// are between the two readings in `replay -f time`. (CLOCK_MONOTONIC_RAW
/// is not slewed and drifts from CLOCK_MONOTONIC, 0.2 s here: a trace on
/// the wrong clock is far outside.)
#[test]
fn timestamps_are_on_the_chosen_clock() {
    let exe = c_program("clocks.c", "-O2", &["-O2"]);
    for (name, id) in [("mono", "1"), ("mono_raw", "4"), ("boot", "7")] {
        let rec = record(&exe, &[id], &["--clock", name, "-k"]);
        assert!(rec.run.success(), "{}", rec.run.describe());
        let read: Vec<u64> = rec
            .run
            .stdout
            .split_whitespace()
            .take(2)
            .map(|w| w.parse().unwrap())
            .collect();
        let (before, after) = (read[0], read[1]);
        let r = fctrace(&[
            OsStr::new("replay"),
            OsStr::new("-f"),
            OsStr::new("time"),
            OsStr::new("-d"),
            rec.dir.path.as_os_str(),
        ]);
        assert!(r.success(), "{}", r.describe());
        let text = r.stdout;
        let at = |needle: &str| -> u64 {
            let line = text
                .lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle}\n{text}\n{}", rec.run.describe()));
            let (secs, ns) = line
                .trim()
                .split(' ')
                .next()
                .unwrap()
                .split_once('.')
                .unwrap();
            secs.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap()
        };
        for needle in ["mark() {", "getppid() = "] {
            let t = at(needle);
            assert!(
                (before..=after).contains(&t),
                "--clock {name}: {needle} at {t}, not in {before}..={after}\n{text}"
            );
        }
    }
}

#[test]
fn conditions_on_arguments() {
    // main calls a(0), a(1), a(2) (lines 1..6, 6..11, 11..16 of the
    // whole tree); a(x) calls b(x), b calls c.
    let whole = expected(&|_| true);
    let one_a: Vec<String> = whole[1..6].iter().map(|l| l[2..].to_string()).collect();
    let as_leaf = |t: &mut Vec<String>, from: usize| {
        t.splice(from..from + 5, ["  a();".to_string()]);
    };
    // -F a@if:arg1==1: only the call a(1), with what it calls.
    assert_eq!(recorded(&["-F", "a@if:arg1==1"]), one_a);
    // -N a@if:arg1&2: a(2) and its calls are gone.
    let mut t = whole.clone();
    t.drain(11..16);
    assert_eq!(recorded(&["-N", "a@if:arg1&2"]), t);
    // notrace as a trigger action, on b(x) for x >= 1: a(1) and a(2)
    // are leaves then.
    let mut t = whole.clone();
    as_leaf(&mut t, 11);
    as_leaf(&mut t, 6);
    assert_eq!(recorded(&["-T", "b@if:arg1>=1,notrace"]), t);
    // depth=1 under a(0) only.
    let mut t = whole.clone();
    as_leaf(&mut t, 1);
    assert_eq!(recorded(&["-T", "a@if:arg1==0x0,depth=1"]), t);
    // Conditions are read while recording: replay refuses them.
    let rec = record(&program(), &[], &[]);
    let r = fctrace(&[
        OsStr::new("replay"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("-F"),
        OsStr::new("a@if:arg1==1"),
    ]);
    assert!(
        !r.success() && r.stderr.contains("act while recording"),
        "{}",
        r.describe()
    );
}

#[test]
fn time_and_trace_actions() {
    let exe = c_program("uftrace_time.c", "-O0", &["-O0"]);
    let native = run_native(&exe, &[]);
    let lines = |opts: &[&str]| {
        let rec = record(&exe, &[], opts);
        assert_same_behaviour(&native, &rec.run, &format!("record {opts:?}"));
        call_lines(&replay_text(&rec.dir.path))
    };
    let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The 30 ms sleep and what waits for it; nothing else lasts 10 ms.
    let slow_part = [
        "main() {",
        "  slow() {",
        "    wait_ms() {",
        "      nanosleep();",
        "    } /* wait_ms */",
    ];
    // `trace`: fast() is shown however short (not quick(), under it).
    let mut want = v(&slow_part);
    want.extend(v(&["  } /* slow */", "  fast();", "} /* main */"]));
    assert_eq!(lines(&["-t", "10ms", "-T", "fast@trace"]), want);
    // `time=0`: everything under slow() is shown.
    let mut want = v(&slow_part);
    want.extend(v(&["    quick();", "  } /* slow */", "} /* main */"]));
    assert_eq!(lines(&["-t", "10ms", "-T", "slow@time=0"]), want);
    // `trace` on quick(): both calls, with the calls around them.
    let mut want = v(&slow_part);
    want.extend(v(&[
        "    quick();",
        "  } /* slow */",
        "  fast() {",
        "    quick();",
        "  } /* fast */",
        "} /* main */",
    ]));
    assert_eq!(lines(&["-t", "10ms", "-T", "quick@trace"]), want);
}
