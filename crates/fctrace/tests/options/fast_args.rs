//! The values that the agent's generated code records (`-A`/`-R` with
//! integer and pointer formats of register arguments, and per-thread
//! `trace_on`/`trace_off` triggers that have nothing to do) on
//! fastargs.c: exactly the values the program passes and returns, cut to
//! each format's size, and the same trees as the slow path's (forced by a
//! global `trace_on` trigger on the same functions, which the generated
//! code leaves to the slow path and which changes nothing while tracing
//! stays on); `depth=N` triggers, also in generated code.

use fctrace_testkit::*;
use std::path::PathBuf;

fn prog() -> PathBuf {
    c_program("fastargs.c", "-O2", &["-O2"])
}

/// The replay's call lines of `fastargs N` recorded with `opts`.
#[track_caller]
fn lines(n: u32, opts: &[&str]) -> Vec<String> {
    let rec = record(&prog(), &[&n.to_string()], opts);
    assert!(rec.run.stdout.contains("s="), "{}", rec.run.describe());
    let info = info_text(&rec.dir.path);
    assert!(
        !info.contains("lost events: ") || info.contains("lost events: 0"),
        "{info}"
    );
    call_lines(&replay_text(&rec.dir.path))
}

/// `opts` plus a global `trace_on` trigger on each of `funcs`: every call
/// of them then takes the slow path.
fn slow(opts: &[&str], funcs: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    for f in funcs {
        v.push("-T".into());
        v.push(format!("{f}@trace_on,global"));
    }
    v
}

/// `bump(P) = P + 1` (P the address of a buffer of the program, which
/// address-space randomisation moves from run to run) becomes
/// `bump(BUF) = BUF + 1` once checked.
#[track_caller]
fn without_addresses(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .map(|l| {
            let Some(rest) = l.strip_prefix("  bump(").filter(|r| *r != ");") else {
                return l;
            };
            let (arg, ret) = rest
                .strip_suffix(";")
                .and_then(|r| r.split_once(") = "))
                .unwrap_or_else(|| panic!("{l}"));
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            assert!(arg.starts_with("0x") && ret.starts_with("0x"), "{l}");
            assert_eq!(hex(ret), hex(arg) + 1, "{l}");
            "  bump(BUF) = BUF + 1;".to_string()
        })
        .collect()
}

#[track_caller]
fn same_as_slow(n: u32, opts: &[&str], funcs: &[&str]) -> Vec<String> {
    let fast = without_addresses(lines(n, opts));
    let s = slow(opts, funcs);
    let s: Vec<&str> = s.iter().map(|x| x.as_str()).collect();
    let slow = without_addresses(lines(n, &s));
    assert_eq!(fast, slow, "fast and slow paths differ for {opts:?}");
    fast
}

/// Sign-extended `size` bytes of `v`.
fn signed(v: i64, size: u32) -> i64 {
    let shift = 64 - 8 * size;
    (v << shift) >> shift
}

/// `size` bytes of `v`.
fn unsigned(v: i64, size: u32) -> u64 {
    if size == 8 {
        v as u64
    } else {
        (v as u64) & ((1u64 << (8 * size)) - 1)
    }
}

#[test]
fn every_format_and_size_of_six_arguments() {
    let opts = [
        "-F",
        "main",
        "-N",
        "hot",
        "-N",
        "on",
        "-N",
        "off",
        "-N",
        "both",
        "-A",
        "six@arg1/i8,arg2/u16,arg3/x32,arg4/i,arg5/p,arg6/u32",
        "-R",
        "six@retval/x",
        "-A",
        "neg@arg1,arg1/i32,arg1/x16",
        "-R",
        "neg@retval",
        "-A",
        "letter@arg1/c",
        "-R",
        "letter@retval/c",
        "-A",
        "bump@arg1/p",
        "-R",
        "bump@retval/p",
    ];
    let l = same_as_slow(10, &opts, &["six", "neg", "letter", "bump"]);
    // The calls as fastargs.c makes them.
    let calls: [[i64; 6]; 2] = [
        [-1, -2, 0x1234567890abcdef, -300, 0x7fff00001234, 70000],
        [0x80, 0x8000, 0x80000000, i64::MIN, 0, 0x41],
    ];
    // (atol calls strtol.)
    let mut expected = vec!["main() {".to_string(), "  strtol();".to_string()];
    for c in calls {
        let ret = c.iter().fold(0i64, |a, b| a ^ b);
        expected.push(format!(
            "  six({}, {}, {:#x}, {}, {:#x}, {}) = {:#x};",
            signed(c[0], 1),
            unsigned(c[1], 2),
            unsigned(c[2], 4),
            c[3],
            c[4],
            unsigned(c[5], 4),
            ret as u64
        ));
    }
    // neg: the default format shows small numbers in decimal, others in
    // hex.
    let auto = |v: i64| {
        if (-0x10000..0x1_0000_0000).contains(&v) {
            v.to_string()
        } else {
            format!("{:#x}", v as u64)
        }
    };
    for x in [5i64, -0x123456789] {
        expected.push(format!(
            "  neg({}, {}, {:#x}) = {};",
            auto(x),
            signed(x, 4),
            unsigned(x, 2),
            auto(-x)
        ));
    }
    // bump(buf) = buf + 1 (checked by `without_addresses`).
    expected.push("  bump(BUF) = BUF + 1;".into());
    expected.push("  letter('A') = 'B';".into());
    expected.push("  printf();".into());
    expected.push("} /* main */".into());
    assert_eq!(l, expected);
}

/// A hot function: thousands of calls, the buffers switched many times
/// in the middle of the generated code's records.
#[test]
fn hot_function_across_buffers() {
    let n = 20_000;
    let opts = ["-F", "hot", "-A", "hot@arg1/i32", "-R", "hot@retval/i32"];
    let l = same_as_slow(n, &opts, &["hot"]);
    let expected: Vec<String> = (0..n as i64)
        .map(|i| {
            let x = i - 1000;
            format!("hot({x}) = {};", x * 3 + 1)
        })
        .collect();
    assert_eq!(l.len(), expected.len());
    assert_eq!(l, expected);
    // Only -R: no Args record, the return value by the generated exit.
    let l = lines(300, &["-F", "hot", "-R", "hot@retval/u"]);
    let expected: Vec<String> = (0..300i64)
        .map(|i| format!("hot() = {};", ((i - 1000) * 3 + 1) as u64))
        .collect();
    assert_eq!(l, expected);
}

/// Per-thread trace_on and trace_off triggers, one of them on a function
/// that also records its argument and return value: the generated entry
/// takes a call only when the trigger has nothing to do; the others go
/// to the slow path, which switches tracing (and records the calls open
/// where it resumes).
#[test]
fn triggers_with_arguments() {
    let opts = [
        "--disable",
        "-N",
        "hot",
        "-T",
        "on@trace_on",
        "-T",
        "off@trace_off",
        "-T",
        "both@trace_on",
        "-A",
        "both@arg1/i",
        "-R",
        "both@retval/i",
        "-A",
        "on@arg1",
    ];
    // (Not against the slow path: a global trace_on would change what
    // the trace_off does.)
    let l = lines(10, &opts);
    // fastargs.c's loop: off(i) (tracing goes off), both(i) (on again),
    // on(i), both(i + 10); with --disable nothing before the first both,
    // which turns tracing on inside main: main opens the tree, entered
    // while tracing was off, and its end closes it.
    let mut expected = vec!["main() { /* entered while tracing was off */".to_string()];
    for i in 0..3i64 {
        for (x, on) in [(i, false), (i + 10, true)] {
            expected.push(format!("  both({x}) {{"));
            expected.push("    inner();".into());
            expected.push(format!("  }} = {}; /* both */", (x - 1) * 2));
            if !on {
                expected.push(format!("  on({i});"));
            }
        }
    }
    expected.push("  printf();".into());
    expected.push("} /* main */ (entry not recorded)".into());
    assert_eq!(l, expected);
}

/// `depth=N` triggers: the generated entry narrows the depth limit, the
/// generated exit puts it back; alone, with arguments and return values,
/// and inside -D.
#[test]
fn depth_triggers() {
    // Two levels from main (main, its calls, not theirs); or one from
    // `both` (not its call of `inner`): the same tree.
    let mut plain = vec!["main() {".to_string()];
    for f in ["strtol", "six", "six", "neg", "neg", "bump", "letter"] {
        plain.push(format!("  {f}();"));
    }
    for _ in 0..3 {
        for f in ["off", "both", "on", "both"] {
            plain.push(format!("  {f}();"));
        }
    }
    plain.push("  printf();".into());
    plain.push("} /* main */".into());
    for opts in [
        &["-N", "hot", "-T", "main@depth=2"][..],
        &["-N", "hot", "-T", "both@depth=1"],
        &["-N", "hot", "-D", "3", "-T", "both@depth=1"],
        &["-N", "hot", "-D", "2", "-T", "main@depth=5"],
    ] {
        let l = same_as_slow(10, opts, &["main", "both"]);
        assert_eq!(l, plain, "{opts:?}");
    }
    // With its argument and return value (the exit then takes the slow
    // path); depth=2 shows `inner`.
    let mut expected = plain.clone();
    let mut k = 0;
    for l in expected.iter_mut() {
        if l == "  both();" {
            let x = [0i64, 10, 1, 11, 2, 12][k];
            k += 1;
            *l = format!("  both({x}) = {};", (x - 1) * 2);
        }
    }
    let opts = [
        "-N",
        "hot",
        "-T",
        "both@depth=1",
        "-A",
        "both@arg1",
        "-R",
        "both@retval",
    ];
    assert_eq!(same_as_slow(10, &opts, &["both"]), expected);
    let opts = ["-N", "hot", "-T", "both@depth=2", "-A", "both@arg1"];
    let l = same_as_slow(10, &opts, &["both"]);
    let both: Vec<&String> = l.iter().filter(|l| l.contains("both(")).collect();
    assert_eq!(both.len(), 6, "{l:#?}");
    assert_eq!(
        l.iter().filter(|l| l.trim() == "inner();").count(),
        6,
        "{l:#?}"
    );
    // Thousands of calls, each a depth region of its own.
    let opts = ["-F", "main", "-T", "hot@depth=1", "-A", "hot@arg1/i32"];
    let l = same_as_slow(5000, &opts, &["hot"]);
    let hots: Vec<String> = l
        .iter()
        .filter(|l| l.contains("hot("))
        .map(|l| l.trim().to_string())
        .collect();
    let expected: Vec<String> = (0..5000i64)
        .map(|i| format!("hot({});", i - 1000))
        .collect();
    assert_eq!(hots, expected);
}
