//! `fctrace report --diff OTHER`: two runs of graph.c with different
//! sizes differ by exactly what its source implies (see the header of
//! tests/programs/graph.c), in text and JSON, sorted by the largest
//! change.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

/// graph.c's calls per function of the executable, for argument `n`.
fn expected_calls(n: i64) -> BTreeMap<&'static str, i64> {
    let mut m = BTreeMap::from([
        ("main", 1),
        ("twice", n + 1),
        ("outer", 1),
        ("inner", 2),
        // main's twice: 2n, inner: 2n, outer's twice: 2, only_big: 1.
        ("leaf", 4 * n + 2 + i64::from(n > 20)),
        ("fib", 15),
    ]);
    if n > 20 {
        m.insert("only_big", 1);
    }
    m
}

fn diff_json(base: &Path, other: &Path, opts: &[&str]) -> Value {
    let mut args = vec!["--diff", other.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(opts);
    let text = fctrace_on_quietly("report", base, &args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{}", clip(&text, 3000)))
}

/// The rows of the program's own functions: name -> (base calls, other
/// calls, calls diff), a missing side as None.
fn own_rows(v: &Value, exe: &Path) -> BTreeMap<String, (Option<i64>, Option<i64>, i64)> {
    let exe = canonical(exe);
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| canonical(Path::new(f["module"].as_str().unwrap())) == exe)
        .filter(|f| !CRT_FUNCTIONS.contains(&f["name"].as_str().unwrap()))
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                (
                    f["base"]["calls"].as_i64(),
                    f["other"]["calls"].as_i64(),
                    f["diff"]["calls"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn diff_of_two_sizes_is_what_the_source_implies() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    let small = record_same(&exe, &["10"]);
    let big = record_same(&exe, &["25"]);
    let (a, b) = (expected_calls(10), expected_calls(25));
    let mut expected = BTreeMap::new();
    for name in a.keys().chain(b.keys()) {
        let (x, y) = (a.get(name).copied(), b.get(name).copied());
        expected.insert(name.to_string(), (x, y, y.unwrap_or(0) - x.unwrap_or(0)));
    }

    let v = diff_json(&small.dir.path, &big.dir.path, &["-s", "calls"]);
    assert_eq!(own_rows(&v, &exe), expected, "small -> big");
    // Largest change of calls first: leaf (+61), twice (+15), only_big
    // (+1), then no change among the program's functions.
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .filter(|n| expected.contains_key(*n))
        .collect();
    assert_eq!(&names[..3], ["leaf", "twice", "only_big"]);
    let changes: Vec<u64> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["diff"]["calls"].as_i64().unwrap().unsigned_abs())
        .collect();
    assert!(changes.windows(2).all(|w| w[0] >= w[1]), "{changes:?}");
    // Each side's values are that trace's report.
    for (side, dir) in [("base", &small.dir.path), ("other", &big.dir.path)] {
        let r = report(dir);
        for f in v["functions"].as_array().unwrap() {
            let Some(s) = f[side].as_object() else {
                continue;
            };
            let rf = r
                .functions
                .iter()
                .find(|x| x.symbol == f["symbol"] && x.module == f["module"])
                .unwrap_or_else(|| panic!("{f} not in the {side} report"));
            assert_eq!(
                (
                    s["calls"].as_u64(),
                    s["total_ns"].as_u64(),
                    s["self_ns"].as_u64()
                ),
                (Some(rf.calls), Some(rf.total_ns), Some(rf.self_ns)),
                "{side} {f}"
            );
            let d = f["diff"]["total_ns"].as_i64().unwrap();
            let other = f[if side == "base" { "other" } else { "base" }]["total_ns"]
                .as_i64()
                .unwrap_or(0);
            let this = rf.total_ns as i64;
            let expect = if side == "base" {
                other - this
            } else {
                this - other
            };
            assert_eq!(d, expect, "total diff of {f}");
        }
    }
    // The default sort: the largest change of total time first.
    let v = diff_json(&small.dir.path, &big.dir.path, &[]);
    let changes: Vec<u64> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["diff"]["total_ns"].as_i64().unwrap().unsigned_abs())
        .collect();
    assert!(changes.windows(2).all(|w| w[0] >= w[1]), "{changes:?}");

    // The other way round: only_big is gone, every change negated.
    let v = diff_json(&big.dir.path, &small.dir.path, &["-s", "calls"]);
    let back: BTreeMap<String, (Option<i64>, Option<i64>, i64)> = expected
        .iter()
        .map(|(k, (x, y, d))| (k.clone(), (*y, *x, -d)))
        .collect();
    assert_eq!(own_rows(&v, &exe), back, "big -> small");

    // Text: both traces' values and the change; an empty side is `-`.
    let text = fctrace_on_quietly(
        "report",
        &small.dir.path,
        &["--diff", big.dir.path.to_str().unwrap(), "-s", "calls"],
    );
    let row = |name: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.ends_with(&format!("  {name}")))
            .unwrap_or_else(|| panic!("no {name}\n{text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        // total: base, other, diff (value unit each), self likewise, then
        // calls base, other, diff, name.
        let n = cols.len();
        cols[n - 4..n - 1].iter().map(|s| s.to_string()).collect()
    };
    assert_eq!(row("leaf"), ["42", "103", "+61"], "\n{text}");
    assert_eq!(row("twice"), ["11", "26", "+15"], "\n{text}");
    assert_eq!(row("only_big"), ["-", "1", "+1"], "\n{text}");
    assert_eq!(row("fib"), ["15", "15", "+0"], "\n{text}");
    let only_big = text.lines().find(|l| l.ends_with("  only_big")).unwrap();
    assert!(only_big.trim_start().starts_with("- "), "{only_big}");
    assert!(
        text.contains(&format!("base:  {}", small.dir.path.display())),
        "{text}"
    );

    // Compact with percentages: the change only.
    let text = fctrace_on_quietly(
        "report",
        &small.dir.path,
        &[
            "--diff",
            big.dir.path.to_str().unwrap(),
            "-s",
            "calls",
            "--diff-policy",
            "compact,percent",
        ],
    );
    let leaf = text.lines().find(|l| l.ends_with("  leaf")).unwrap();
    let cols: Vec<&str> = leaf.split_whitespace().collect();
    // 61 / 42 calls.
    assert_eq!(cols[2], format!("{:+.2}%", 61.0 * 100.0 / 42.0), "{text}");
    let only_big = text.lines().find(|l| l.ends_with("  only_big")).unwrap();
    assert_eq!(only_big.split_whitespace().nth(2), Some("new"), "{text}");

    // -f chooses the columns (uftrace's call, total, self), in its order:
    // calls alone are leaf's 42, 103, +61 then the name.
    let text = fctrace_on_quietly(
        "report",
        &small.dir.path,
        &[
            "--diff",
            big.dir.path.to_str().unwrap(),
            "-s",
            "calls",
            "-f",
            "call",
        ],
    );
    assert!(
        text.lines().any(|l| l
            .trim_start()
            .starts_with("Calls (base, other, diff)  Function")),
        "{text}"
    );
    let leaf = text.lines().find(|l| l.ends_with("  leaf")).unwrap();
    assert_eq!(
        leaf.split_whitespace().collect::<Vec<_>>(),
        ["42", "103", "+61", "leaf"],
        "{text}"
    );
    let r = fctrace(&[
        OsStr::new("report"),
        OsStr::new("-d"),
        small.dir.path.as_os_str(),
        OsStr::new("--diff"),
        big.dir.path.as_os_str(),
        OsStr::new("-f"),
        OsStr::new("total-avg"),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("with --diff, -f takes total, self and call"),
        "{}",
        r.describe()
    );
}

#[test]
fn diff_with_filters_and_bad_input() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    let small = record(&exe, &["3"], &[]);
    let big = record(&exe, &["30"], &[]);
    // The filters apply to both traces: under outer only.
    let v = diff_json(&small.dir.path, &big.dir.path, &["-F", "outer"]);
    let rows = own_rows(&v, &exe);
    assert_eq!(
        rows,
        BTreeMap::from([
            ("outer".to_string(), (Some(1), Some(1), 0)),
            ("inner".to_string(), (Some(2), Some(2), 0)),
            ("twice".to_string(), (Some(1), Some(1), 0)),
            ("leaf".to_string(), (Some(8), Some(62), 54)),
        ])
    );
    let d = small.dir.path.to_str().unwrap();
    for (args, message) in [
        (
            vec!["report", "-d", d, "--diff", "/nonexistent/trace"],
            "no trace at",
        ),
        (
            vec!["report", "-d", d, "--diff", d, "--diff-policy", "sideways"],
            "unknown diff policy `sideways`",
        ),
        (
            vec!["report", "-d", d, "--diff-policy", "abs"],
            "--diff <OTHER_DIR>",
        ),
    ] {
        let r = fctrace(&args);
        assert!(
            !r.success() && r.stderr.contains(message),
            "{args:?}\n{}",
            r.describe()
        );
    }
    // A trace compared with itself: no change at all.
    let v = diff_json(&small.dir.path, &small.dir.path, &[]);
    for f in v["functions"].as_array().unwrap() {
        assert_eq!(
            f["diff"],
            serde_json::json!({"calls": 0, "total_ns": 0, "self_ns": 0}),
            "{f}"
        );
    }
}
