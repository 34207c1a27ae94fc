//! uftrace's `report` options in fctrace: `-f` (uftrace's columns, csv),
//! several sort keys (`-s call,func`), `--avg-total`, `--avg-self`,
//! `--task`, `--format csv|html`, `--sort-column`, on uftrace_readers.c:
//! its header gives the calls (a, b, c 3 times, leaf 9, printf, fflush and
//! syscall twice, one thread each), `nm -S` the functions' sizes, the tids
//! it prints the task rows; the table shapes are uftrace's documented ones.

use super::uftrace_replay::recorded;
use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::process::Command;

/// The rows of a csv table after its `#` header: the cells of each.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

#[test]
fn several_sort_keys_and_csv() {
    let (rec, _, _) = recorded();
    let text = fctrace_on_quietly(
        "report",
        &rec.dir.path,
        &["-f", "call", "-s", "call,func", "--format", "csv"],
    );
    assert_eq!(text.lines().next(), Some("#Calls,Function"), "{text}");
    let rows: Vec<String> = csv_rows(&text).iter().map(|r| r.join(" ")).collect();
    let want = [
        "9 leaf",
        "3 a",
        "3 b",
        "3 c",
        "2 fflush",
        "2 printf",
        "2 syscall",
        "1 main",
        "1 pthread_create",
        "1 pthread_join",
        "1 worker",
    ];
    assert_eq!(rows, want.map(String::from));
}

/// `nm -S`: the sizes of the program's functions.
fn nm_sizes(exe: &std::path::Path) -> BTreeMap<String, u64> {
    let out = Command::new("nm")
        .args(["-S".as_ref(), exe.as_os_str()])
        .output()
        .expect("nm: apt-get install binutils");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4).then(|| (f[3].to_string(), u64::from_str_radix(f[1], 16).unwrap()))
        })
        .collect()
}

#[test]
fn output_fields_times_sizes_and_text_shape() {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let (rec, _, _) = recorded();
    let dir = &rec.dir.path;
    let all = fctrace_on_quietly("report", dir, &["-f", "all", "--format", "csv"]);
    assert_eq!(
        all.lines().next().unwrap(),
        "#Total time,Total avg,Total min,Total max,Total stdv,Self time,Self avg,\
         Self min,Self max,Self stdv,Calls,Size,Function"
    );
    let sizes = nm_sizes(&exe);
    let mut seen = 0;
    for r in csv_rows(&all) {
        let n = |i: usize| -> f64 { r[i].parse().unwrap() };
        let name = r[12].as_str();
        let calls = n(10);
        // min <= avg <= max, avg * calls = the sum of the calls (total,
        // for functions that do not recurse), and the same for self.
        assert!(n(2) <= n(1) && n(1) <= n(3), "{r:?}");
        assert!(n(7) <= n(6) && n(6) <= n(8), "{r:?}");
        assert!((n(1) * calls - n(0)).abs() <= calls, "{r:?}");
        assert!((n(6) * calls - n(5)).abs() <= calls, "{r:?}");
        if calls == 1.0 {
            assert_eq!((n(4), n(9)), (0.0, 0.0), "one call: no deviation {r:?}");
        }
        if name == "leaf" {
            assert_eq!(r[0..5], r[5..10], "leaf calls nothing: self is total");
        }
        if let Some(&size) = sizes.get(name).filter(|_| name.len() <= 6) {
            assert_eq!(n(11) as u64, size, "{name}'s size");
            seen += 1;
        }
    }
    assert_eq!(seen, 6, "main, worker, a, b, c, leaf: {all}");

    // The default table is uftrace's: total, self, call.
    let text = fctrace_on_quietly("report", dir, &[]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("  Total time   Self time       Calls  Function")
    );
    assert_eq!(
        lines.next(),
        Some("  ==========  ==========  ==========  ====================")
    );
    assert_eq!(lines.count(), 11, "{text}");

    // The text shape of uftrace's documentation.
    let text = fctrace_on_quietly("report", dir, &["-f", "total,total-max,self-min,call"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("  Total time   Total max    Self min       Calls  Function")
    );
    assert_eq!(
        lines.next(),
        Some("  ==========  ==========  ==========  ==========  ====================")
    );
    let leaf = text.lines().find(|l| l.ends_with("  leaf")).unwrap();
    assert!(leaf.contains("           9  leaf"), "{leaf}");

    // --avg-total / --avg-self: average, min, max, stdv of each.
    for (opt, word) in [("--avg-total", "Total"), ("--avg-self", "Self")] {
        let text = fctrace_on_quietly("report", dir, &[opt, "-s", "max"]);
        let head = text.lines().next().unwrap();
        let want: Vec<String> = ["avg", "min", "max", "stdv"]
            .iter()
            .map(|w| format!("{word} {w}"))
            .collect();
        let got: Vec<String> = head
            .split("  ")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "Function")
            .map(String::from)
            .collect();
        assert_eq!(got, want, "{text}");
        assert_eq!(text.lines().count(), 2 + 11, "{text}");
        assert!(text.lines().nth(2).unwrap().contains('%'));
    }
}

#[test]
fn task_summary_html_and_sort_column() {
    let (rec, main, worker) = recorded();
    let dir = &rec.dir.path;
    let text = fctrace_on_quietly("report", dir, &["--task"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("  Total time   Self time     TID   Num funcs  Task name")
    );
    assert_eq!(
        lines.next(),
        Some("  ==========  ==========  ======  ==========  ====================")
    );
    // main: main, syscall, printf, fflush, pthread_create, pthread_join
    // and two a() (a, b, c, leaf x3); the worker: worker, syscall, printf,
    // fflush and one a().
    let rows: Vec<(u32, u64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[4].parse().unwrap(), f[5].parse().unwrap())
        })
        .collect();
    assert_eq!(rows, [(main, 18), (worker, 10)], "{text}");
    let csv = fctrace_on_quietly(
        "report",
        dir,
        &["--task", "-f", "tid,func", "--format", "csv"],
    );
    assert_eq!(
        csv,
        format!(
            "#TID,Num funcs,Task name\n{main},18,uftrace_readers\n{worker},10,uftrace_readers\n"
        )
    );

    let html = fctrace_on_quietly("report", dir, &["--format", "html", "-f", "call"]);
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("           9  leaf\n"), "{html}");

    // --sort-column 0 / 1: by this trace's or the other's total: main,
    // which waits for the worker, first in both.
    let other = record(
        &c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]),
        &[],
        &[],
    );
    for col in ["0", "1"] {
        let text = fctrace_on_quietly(
            "report",
            dir,
            &[
                "--diff",
                other.dir.path.to_str().unwrap(),
                "--sort-column",
                col,
            ],
        );
        let first = text
            .lines()
            .find(|l| !l.starts_with('#') && !l.contains("Function") && !l.contains("==="))
            .unwrap();
        assert!(first.ends_with("  main"), "--sort-column {col}: {text}");
    }
}

#[test]
fn live_report_before_the_tree() {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let out = TraceDir::new("live-report");
    let r = fctrace(&[
        "--report".as_ref(),
        "-o".as_ref(),
        out.path.as_os_str(),
        exe.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stdout.starts_with("main ") && r.stdout.contains("\nworker "),
        "{}",
        r.stdout
    );
    let text = std::fs::read_to_string(&out.path).unwrap();
    let (report, tree) = text
        .strip_prefix("#\n# fctrace report\n#\n")
        .unwrap_or_else(|| panic!("no report heading: {text}"))
        .split_once("\n#\n# fctrace replay\n#\n")
        .unwrap_or_else(|| panic!("no replay heading: {text}"));
    let calls: BTreeMap<String, u64> = report
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.last().unwrap().to_string(), f[4].parse().unwrap())
        })
        .collect();
    assert_eq!(
        [
            calls["a"],
            calls["b"],
            calls["c"],
            calls["leaf"],
            calls["main"]
        ],
        [3, 3, 3, 9, 1],
        "{report}"
    );
    assert!(
        tree.starts_with("# DURATION     TID     FUNCTION\n"),
        "{tree}"
    );
    assert_eq!(tree.matches("  leaf();").count(), 9, "{tree}");
}

#[test]
fn live_record_keeps_the_trace() {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    // A fresh working directory: the trace goes to ./fctrace.data.
    let cwd = TraceDir::new("live-record");
    std::fs::create_dir_all(&cwd.path).unwrap();
    let r = run_with_timeout(
        Command::new(fctrace_bin()).current_dir(&cwd.path).args([
            "--record".as_ref(),
            "-o".as_ref(),
            "tree.txt".as_ref(),
            exe.as_os_str(),
        ]),
        FCTRACE_TIMEOUT,
    );
    assert!(r.success(), "{}", r.describe());
    let kept = cwd.path.join("fctrace.data");
    let csv = fctrace_on_quietly(
        "report",
        &kept,
        &["-f", "call", "--format", "csv", "-s", "call,func"],
    );
    let rows: Vec<String> = csv_rows(&csv).iter().take(4).map(|r| r.join(" ")).collect();
    assert_eq!(rows, ["9 leaf", "3 a", "3 b", "3 c"], "{csv}");
    let tree = std::fs::read_to_string(cwd.path.join("tree.txt")).unwrap();
    assert_eq!(tree.matches("  leaf();").count(), 9, "{tree}");
}
