//! uftrace's `graph` and `dump` options in fctrace: `graph -f` (uftrace's
//! columns), `graph --task` (the task graph), `dump --format=chrome|
//! flame-graph|graphviz|mermaid` as uftrace spells them, and `dump
//! --debug`, on uftrace_readers.c (calls listed in its header, tids
//! printed by it).

use super::uftrace_replay::recorded;
use fctrace_testkit::*;
use std::collections::BTreeMap;

#[test]
fn graph_output_fields_and_task_graph() {
    let (rec, main, worker) = recorded();
    let dir = &rec.dir.path;
    // The calling graph below c: c 3 times, leaf 6 times under it.
    let text = fctrace_on_quietly(
        "graph",
        dir,
        &["--table", "c", "-f", "call,total-min,total-max"],
    );
    let below = text.split_once("CALL GRAPH BELOW c").unwrap().1;
    let mut lines = below.lines().skip(1);
    assert_eq!(
        lines.next(),
        Some("       Calls   Total min   Total max  Function")
    );
    assert_eq!(
        lines.next(),
        Some("  ==========  ==========  ==========  ====================")
    );
    let rows: Vec<(String, String)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f.last().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        rows,
        [("3".into(), "c".into()), ("6".into(), "leaf".into())],
        "{text}"
    );
    // min <= max on each line.
    for l in below.lines().skip(3) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let us = |v: &str, unit: &str| -> f64 {
            v.parse::<f64>().unwrap() * if unit == "ms" { 1000.0 } else { 1.0 }
        };
        assert!(us(f[1], f[2]) <= us(f[3], f[4]), "{l}");
    }

    // --format html: the text as a page; normal: the text.
    let html = fctrace_on_quietly("graph", dir, &["--table", "--format", "html", "-f", "call"]);
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(
        html.contains("           2  | +-a\n"),
        "main calls a twice: {html}"
    );
    let normal = fctrace_on_quietly(
        "graph",
        dir,
        &["--table", "--format", "normal", "-f", "call"],
    );
    assert!(normal.contains("           2  | +-a\n"), "{normal}");

    // --task: uftrace's task graph, the worker thread under main.
    let text = fctrace_on_quietly("graph", dir, &["--task"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "========== TASK GRAPH ==========");
    assert_eq!(lines[1], "# TOTAL TIME   SELF TIME     TID     TASK NAME");
    assert!(
        lines[2].ends_with(&format!("[{main:>6}] : uftrace_readers")),
        "{text}"
    );
    assert!(
        lines[3].ends_with(&format!("[{worker:>6}] :  +-uftrace_readers")),
        "{text}"
    );
    assert_eq!(lines.len(), 4, "{text}");
}

#[test]
fn dump_formats_as_uftrace_spells_them() {
    let (rec, main, worker) = recorded();
    let dir = &rec.dir.path;
    // flame-graph, weighed by calls: the paths of the program's calls.
    let folded = fctrace_on_quietly("dump", dir, &["--format=flame-graph", "--sample-count"]);
    let paths: BTreeMap<&str, u64> = folded
        .lines()
        .map(|l| {
            let (p, n) = l.rsplit_once(' ').unwrap();
            (p, n.parse().unwrap())
        })
        .collect();
    assert_eq!(paths["main;a;b;c;leaf"], 4);
    assert_eq!(paths["worker;a;b;c;leaf"], 2);
    assert_eq!(paths["main;a;leaf"], 2);
    assert_eq!(paths["worker;a"], 1);

    // chrome: one complete event per call.
    let json = fctrace_on_quietly("dump", dir, &["--format=chrome"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            *calls
                .entry(e["name"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(
        [
            calls["a"],
            calls["b"],
            calls["c"],
            calls["leaf"],
            calls["worker"]
        ],
        [3, 3, 3, 9, 1]
    );

    // graphviz and mermaid: the call graph drawn.
    let dot = fctrace_on_quietly("dump", dir, &["--format=graphviz"]);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("leaf\\n2 calls"), "{dot}");
    let mermaid = fctrace_on_quietly("dump", dir, &["--format", "mermaid"]);
    assert!(mermaid.contains("flowchart"), "{mermaid}");
    assert_eq!(mermaid, fctrace_on_quietly("dump", dir, &["--mermaid"]));

    // --debug: every stored event; the worker thread's 10 calls (worker,
    // syscall, printf, fflush, a, b, c, leaf x3) entered and returned.
    let raw = fctrace_on_quietly("dump", dir, &["--debug", "--tid", &worker.to_string()]);
    let kinds: Vec<&str> = raw
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f[0], worker.to_string(), "{l}");
            f[1]
        })
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "Entry").count(), 10, "{raw}");
    assert_eq!(kinds.iter().filter(|k| **k == "Exit").count(), 10, "{raw}");
    let all = fctrace_on_quietly("dump", dir, &["--debug"]);
    assert!(all.lines().any(|l| l.starts_with(&format!("{main} Entry"))));
}

/// `graph FUNC` and `graph` in uftrace's shape (uftrace's
/// doc/uftrace-graph.md and its graph tests): the header naming FUNC, its
/// backtraces (`backtrace #N: hit CALLS, time T` and `[LEVEL] name`), then
/// `TIME : (CALLS) name` lines, ` +-` for each of several children and a
/// `:  |` line after each but the last; the calls are graph_sort.c's.
#[test]
fn graph_has_uftraces_shape() {
    let exe = c_program("graph_sort.c", "-O0", &["-O0"]);
    let native = std::process::Command::new(&exe).status().unwrap();
    assert_eq!(native.code(), Some(0));
    let rec = record(&exe, &[], &[]);
    let dir = &rec.dir.path;
    // The time column is left out (it varies from run to run); the rest
    // of each line is the program's structure.
    let shape = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| match l.split_once(" : ") {
                Some((_, rest)) => format!(": {rest}"),
                None => l.trim_end().to_string(),
            })
            .collect()
    };
    let text = fctrace_on_quietly("graph", dir, &["main"]);
    let want = [
        "=============== BACKTRACE ===============",
        " backtrace #0: hit 1, time",
        "   [0] main",
        "",
        "========== FUNCTION CALL GRAPH ==========",
        "# TOTAL TIME   FUNCTION",
        ": (1) main",
        ":  +-(2) foo",
        ":  | (6) loop",
        ":  |",
        ":  +-(1) bar",
        ":    (1) loop",
    ];
    let got = shape(&text);
    assert!(
        got[0].starts_with("# Function Call Graph for 'main' (session: "),
        "{text}"
    );
    let mut got: Vec<String> = got[1..].to_vec();
    // The backtrace's time varies: its text up to `time`.
    got[1] = got[1]
        .split_once(" time")
        .map_or(got[1].clone(), |(h, _)| format!("{h} time"));
    assert_eq!(got, want, "{text}");

    // loop's backtraces: through foo (6 calls) and through bar (1).
    let text = fctrace_on_quietly("graph", dir, &["loop"]);
    let bt: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(" backtrace #") || l.starts_with("   ["))
        .map(|l| l.split(", time").next().unwrap())
        .collect();
    assert_eq!(
        bt,
        [
            " backtrace #0: hit 6",
            "   [0] main",
            "   [1] foo",
            "   [2] loop",
            " backtrace #1: hit 1",
            "   [0] main",
            "   [1] bar",
            "   [2] loop",
        ],
        "{text}"
    );

    // The whole graph: the program at the root, then main's tree.
    let text = fctrace_on_quietly("graph", dir, &[]);
    let name = exe.file_name().unwrap().to_str().unwrap();
    let got = shape(&text);
    assert_eq!(
        got[0],
        format!("# Function Call Graph for '{name}' (session: 0)"),
        "{text}"
    );
    assert_eq!(
        got[1..4],
        [
            "========== FUNCTION CALL GRAPH ==========".to_string(),
            "# TOTAL TIME   FUNCTION".to_string(),
            format!(": (1) {name}"),
        ],
        "{text}"
    );
    assert_eq!(got[4..], want[6..], "{text}");
    // -f: uftrace's column titles, one cell per field.
    let text = fctrace_on_quietly("graph", dir, &["-f", "total,self,call", "loop"]);
    let tree = text
        .split_once("FUNCTION CALL GRAPH ==========\n")
        .unwrap()
        .1;
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["#", "TOTAL", "TIME", "SELF", "TIME", "CALLS", "FUNCTION"]
    );
    assert!(lines[1].ends_with("          7 : (7) loop"), "{text}");
    assert_eq!(lines.len(), 2, "{text}");
}
