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
    let text = fctrace_on_quietly("graph", dir, &["c", "-f", "call,total-min,total-max"]);
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
    let html = fctrace_on_quietly("graph", dir, &["--format", "html", "-f", "call"]);
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(
        html.contains("           2  | +-a\n"),
        "main calls a twice: {html}"
    );
    let normal = fctrace_on_quietly("graph", dir, &["--format", "normal", "-f", "call"]);
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
