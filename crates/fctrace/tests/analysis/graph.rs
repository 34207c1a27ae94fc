//! `fctrace graph`: the call graph merged by call path, the backtraces and
//! calling graph of a function, and its four formats, on real programs.
//!
//! The expected graphs come from the programs' sources (graph.c's header
//! lists its calls); the graph's counts are compared with `report`'s,
//! computed independently: per function, the sum of its nodes' calls and
//! self times, and the sum of the totals of its outermost nodes.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

fn graph_c() -> std::path::PathBuf {
    c_program("graph.c", "-O0", &["-O0"])
}

/// `fctrace graph -d DIR --format json OPTS...`, parsed.
#[track_caller]
fn graph_json(dir: &Path, opts: &[&str]) -> Value {
    let mut args = vec!["--format", "json"];
    args.extend_from_slice(opts);
    let text = fctrace_on_quietly("graph", dir, &args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("graph JSON does not parse: {e}\n{}", clip(&text, 4000)))
}

/// A node of the JSON graph.
#[derive(Debug, Clone)]
struct N {
    id: u64,
    parent: Option<u64>,
    name: String,
    symbol: Option<String>,
    module: Option<String>,
    calls: u64,
    total_ns: u64,
    self_ns: Option<u64>,
    per_call: Option<f64>,
}

fn nodes(v: &Value) -> Vec<N> {
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| N {
            id: n["id"].as_u64().unwrap(),
            parent: n["parent"].as_u64(),
            name: n["name"].as_str().unwrap().to_string(),
            symbol: n["symbol"].as_str().map(String::from),
            module: n["module"].as_str().map(String::from),
            calls: n["calls"].as_u64().unwrap(),
            total_ns: n["total_ns"].as_u64().unwrap(),
            self_ns: n["self_ns"].as_u64(),
            per_call: n["per_call"].as_f64(),
        })
        .collect()
}

/// Each node's path of function names from below its root, with the node.
fn paths(ns: &[N]) -> Vec<(Vec<String>, N)> {
    let by_id: HashMap<u64, &N> = ns.iter().map(|n| (n.id, n)).collect();
    ns.iter()
        .filter(|n| n.symbol.is_some())
        .map(|n| {
            let mut path = vec![n.name.clone()];
            let mut p = n.parent;
            while let Some(id) = p {
                let up = by_id[&id];
                if up.symbol.is_none() {
                    break;
                }
                path.push(up.name.clone());
                p = up.parent;
            }
            path.reverse();
            (path, n.clone())
        })
        .collect()
}

/// Per function (symbol, module): the calls and self times summed over
/// its nodes, and the totals of the nodes with no node of the same
/// function above them.
fn per_function(ns: &[N]) -> BTreeMap<(String, String), (u64, u64, u64)> {
    let by_id: HashMap<u64, &N> = ns.iter().map(|n| (n.id, n)).collect();
    let mut m: BTreeMap<(String, String), (u64, u64, u64)> = BTreeMap::new();
    for n in ns {
        let (Some(symbol), Some(module)) = (&n.symbol, &n.module) else {
            continue;
        };
        let mut outermost = true;
        let mut p = n.parent;
        while let Some(id) = p {
            let up = by_id[&id];
            if up.symbol == n.symbol && up.module == n.module {
                outermost = false;
                break;
            }
            p = up.parent;
        }
        let e = m.entry((symbol.clone(), module.clone())).or_default();
        e.0 += n.calls;
        e.1 += n.self_ns.unwrap();
        if outermost {
            e.2 += n.total_ns;
        }
    }
    m
}

/// `report --format json OPTS` of `dir`, per function (symbol, module):
/// (calls, self, total).
fn report_per_function(dir: &Path, opts: &[&str]) -> BTreeMap<(String, String), (u64, u64, u64)> {
    let mut args = vec!["--format", "json"];
    args.extend_from_slice(opts);
    let text = fctrace_on_quietly("report", dir, &args);
    let r: Report = serde_json::from_str(&text).unwrap();
    r.functions
        .iter()
        .map(|f| {
            (
                (f.symbol.clone(), f.module.clone()),
                (f.calls, f.self_ns, f.total_ns),
            )
        })
        .collect()
}

/// The graph of `dir` through `opts` counts what the report counts.
#[track_caller]
fn assert_graph_counts_are_the_reports(dir: &Path, opts: &[&str], ctx: &str) -> usize {
    let g = per_function(&nodes(&graph_json(dir, opts)));
    let r = report_per_function(dir, opts);
    assert!(!r.is_empty(), "{ctx}: empty report");
    let keys =
        |m: &BTreeMap<(String, String), (u64, u64, u64)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&g), keys(&r), "{ctx} {opts:?}: functions");
    for (k, v) in &r {
        assert_eq!(&g[k], v, "{ctx} {opts:?}: {k:?} (calls, self, total)");
    }
    r.len()
}

/// fib(k)'s calls at each depth of its recursion (0: fib(k) itself), as
/// graph.c's `fib` makes them.
fn fib_calls_per_depth(k: u32) -> Vec<u64> {
    fn walk(k: u32, depth: usize, out: &mut Vec<u64>) {
        if out.len() <= depth {
            out.push(0);
        }
        out[depth] += 1;
        if k >= 2 {
            walk(k - 1, depth + 1, out);
            walk(k - 2, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    walk(k, 0, &mut out);
    out
}

/// graph.c's call paths below main and their calls, for `n`.
fn graph_c_expected(n: u64) -> BTreeMap<Vec<String>, u64> {
    let p = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut m = BTreeMap::new();
    m.insert(p(&["main"]), 1);
    m.insert(p(&["main", "atoi"]), 1);
    m.insert(p(&["main", "twice"]), n);
    m.insert(p(&["main", "twice", "leaf"]), 2 * n);
    m.insert(p(&["main", "outer"]), 1);
    m.insert(p(&["main", "outer", "inner"]), 2);
    m.insert(p(&["main", "outer", "inner", "leaf"]), 2 * n);
    m.insert(p(&["main", "outer", "twice"]), 1);
    m.insert(p(&["main", "outer", "twice", "leaf"]), 2);
    if n > 20 {
        m.insert(p(&["main", "only_big"]), 1);
        m.insert(p(&["main", "only_big", "leaf"]), 1);
    }
    let mut path = p(&["main"]);
    for calls in fib_calls_per_depth(5) {
        path.push("fib".into());
        m.insert(path.clone(), calls);
    }
    m.insert(p(&["main", "printf"]), 1);
    m
}

#[test]
fn graph_of_a_c_program_is_the_one_its_source_implies() {
    let exe = graph_c();
    let rec = record_same(&exe, &["3"]);
    // sink: twice(0..3) 1+3+5, inner 0+1+2 twice, twice(3) 3+4.
    assert_eq!(rec.run.stdout, "graph: n=3 sink=22 fib=5\n");
    let dir = &rec.dir.path;
    let ns = nodes(&graph_json(dir, &[]));
    let under_main: Vec<(Vec<String>, N)> = paths(&ns)
        .into_iter()
        .filter(|(p, _)| p[0] == "main")
        .collect();
    let got: BTreeMap<Vec<String>, u64> = under_main
        .iter()
        .map(|(p, n)| (p.clone(), n.calls))
        .collect();
    assert_eq!(got, graph_c_expected(3), "trace {}", dir.display());
    // Calls per call of the caller: the caller's calls times it is the
    // node's calls.
    let calls: BTreeMap<Vec<String>, u64> = got.clone();
    for (p, n) in &under_main {
        if p.len() == 1 {
            assert_eq!(n.per_call, None, "main has no calling function");
            continue;
        }
        let parent = calls[&p[..p.len() - 1].to_vec()];
        assert_eq!(
            n.per_call,
            Some(n.calls as f64 / parent as f64),
            "{p:?} per call"
        );
    }
    // Times add up: a node's total is its self time plus its children's
    // totals (every call returned).
    let mut children_total: HashMap<u64, u64> = HashMap::new();
    for n in &ns {
        if let Some(p) = n.parent {
            *children_total.entry(p).or_default() += n.total_ns;
        }
    }
    for n in ns.iter().filter(|n| n.symbol.is_some()) {
        assert_eq!(
            n.total_ns,
            n.self_ns.unwrap() + children_total.get(&n.id).copied().unwrap_or(0),
            "{}",
            n.name
        );
    }

    // The text: main's subtree with its branches, calls and calls per
    // call (times vary from run to run; their columns are left out).
    let text = fctrace_on_quietly("graph", dir, &["--table"]);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.len() > 50 && l[50..].trim_start_matches(['+', '-', '|', ' ']) == "main")
        .unwrap_or_else(|| panic!("no main line\n{text}"));
    let lead = lines[at][50..].len() - "main".len();
    let fib = fib_calls_per_depth(5);
    let mut expected = vec![
        "1 |  | main".to_string(),
        "1 | 1 | +-atoi".into(),
        "3 | 3 | +-twice".into(),
        "6 | 2 | | leaf".into(),
        "1 | 1 | +-outer".into(),
        "2 | 2 | | +-inner".into(),
        "6 | 3 | | | leaf".into(),
        "1 | 1 | | +-twice".into(),
        "2 | 2 | |   leaf".into(),
        "1 | 1 | +-fib".into(),
    ];
    for d in 1..fib.len() {
        let per = fib[d] as f64 / fib[d - 1] as f64;
        let per = if per.fract() == 0.0 {
            format!("{per}")
        } else {
            format!("{per:.2}")
        };
        expected.push(format!("{} | {per} | | fib", fib[d]));
    }
    expected.push("1 | 1 | +-printf".into());
    let got: Vec<String> = lines[at..at + expected.len()]
        .iter()
        .map(|l| {
            format!(
                "{} | {} | {}",
                l[26..36].trim(),
                l[38..48].trim(),
                &l[50 + lead..]
            )
        })
        .collect();
    assert_eq!(got, expected, "\n{text}");
}

#[test]
fn backtraces_of_a_function_called_from_three_chains() {
    let exe = graph_c();
    let n = 4u64;
    let rec = record(&exe, &["4"], &[]);
    let dir = &rec.dir.path;
    let v = graph_json(dir, &["leaf"]);
    let mut chains: Vec<(Vec<String>, Vec<u64>, u64)> = v["backtraces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let chain = b["chain"].as_array().unwrap();
            (
                chain
                    .iter()
                    .map(|l| l["name"].as_str().unwrap().to_string())
                    .collect(),
                chain.iter().map(|l| l["calls"].as_u64().unwrap()).collect(),
                b["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    chains.sort();
    let s = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        chains,
        vec![
            (
                s(&["main", "outer", "inner", "leaf"]),
                vec![1, 1, 2, 2 * n],
                2 * n
            ),
            (s(&["main", "outer", "twice", "leaf"]), vec![1, 1, 1, 2], 2),
            (s(&["main", "twice", "leaf"]), vec![1, n, 2 * n], 2 * n),
        ],
        "trace {}",
        dir.display()
    );
    // Below leaf: nothing but leaf, with all its calls and the report's
    // total.
    let below = nodes(&v);
    assert_eq!(below.len(), 1, "{below:?}");
    let report = report_per_function(dir, &[]);
    let leaf = report
        .iter()
        .find(|((s, _), _)| s == "leaf")
        .map(|(_, v)| *v)
        .unwrap();
    assert_eq!(below[0].calls, 4 * n + 2);
    assert_eq!(
        (below[0].calls, below[0].self_ns.unwrap(), below[0].total_ns),
        leaf
    );

    let text = fctrace_on_quietly("graph", dir, &["--table", "leaf"]);
    assert!(
        text.contains(&format!(
            "# {} calls from 3 distinct chains of callers\n",
            4 * n + 2
        )),
        "{text}"
    );
    assert!(
        text.contains("   [0] main (1 call)\n   [1] outer (1 call, 1 per call of its caller)\n   [2] twice (1 call, 1 per call of its caller)\n   [3] leaf (2 calls, 2 per call of its caller)\n"),
        "{text}"
    );

    // A recursive function: one chain per depth; below it, its outermost
    // call with the recursion inside.
    let v = graph_json(dir, &["fib"]);
    let fib = fib_calls_per_depth(5);
    let hits: Vec<(usize, u64)> = v["backtraces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["chain"].as_array().unwrap().len(),
                b["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut hits = hits;
    hits.sort();
    let expected: Vec<(usize, u64)> = fib.iter().enumerate().map(|(d, &c)| (d + 2, c)).collect();
    assert_eq!(hits, expected);
    let below = paths(&nodes(&v));
    let got: Vec<(usize, u64)> = below.iter().map(|(p, n)| (p.len(), n.calls)).collect();
    let expected: Vec<(usize, u64)> = fib.iter().enumerate().map(|(d, &c)| (d + 1, c)).collect();
    assert_eq!(got, expected);
    let fib_report = report.iter().find(|((s, _), _)| s == "fib").unwrap().1;
    assert_eq!(below[0].1.total_ns, fib_report.2, "outermost fib's total");
}

#[test]
fn graph_counts_equal_the_reports() {
    // C, through the filters too.
    let exe = graph_c();
    let rec = record(&exe, &["25"], &[]);
    for opts in [
        &[][..],
        &["-F", "outer"],
        &["-N", "inner"],
        &["-D", "2"],
        &["-t", "100ns"],
        &["-C", "leaf"],
    ] {
        assert_graph_counts_are_the_reports(&rec.dir.path, opts, "graph.c");
    }
    // The subtree of a -F function is its calling graph.
    let ns = nodes(&graph_json(&rec.dir.path, &["-F", "outer"]));
    let got: BTreeMap<Vec<String>, u64> =
        paths(&ns).into_iter().map(|(p, n)| (p, n.calls)).collect();
    let expected: BTreeMap<Vec<String>, u64> = graph_c_expected(25)
        .into_iter()
        .filter(|(p, _)| p.len() > 1 && p[1] == "outer")
        .map(|(p, c)| (p[1..].to_vec(), c))
        .collect();
    assert_eq!(got, expected);

    // Calls that never return (exit from deep inside: the atexit
    // handler's calls return inside exit), frames a longjmp skips, and
    // C++ exceptions unwinding frames: no time for the calls that did not
    // return, in the graph as in the report.
    let exe = c_program("endings.c", "-O0", &["-O0"]);
    let rec = record_any(&exe, &["exit", "3"], &[]);
    assert_eq!(rec.run.code(), Some(3), "{}", rec.run.describe());
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "endings.c exit");
    let exe = c_program("longjmp.c", "-O2", &["-O2"]);
    let rec = record(&exe, &["tree"], &[]);
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "longjmp.c");
    let exe = cxx_program("exceptions.cpp", "-O2", &["-O2"]);
    let rec = record(&exe, &["loop", "20"], &[]);
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "exceptions.cpp");

    // Processes: fork, daemon, vfork + exec (children whose first events
    // are exits of calls entered before they existed).
    let exe = c_program("forks.c", "O1", &["-O1"]);
    let rec = record(&exe, &[], &[]);
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "forks.c");

    // C++.
    let exe = cxx_program("tree.cpp", "-O2", &["-O2"]);
    let rec = record(&exe, &["basic"], &[]);
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "tree.cpp");

    // Threads: merged under one root, or one root per task.
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    assert_graph_counts_are_the_reports(&rec.dir.path, &[], "threads.c");
    let ns = nodes(&graph_json(&rec.dir.path, &[]));
    let calls: BTreeMap<Vec<String>, u64> = paths(&ns)
        .into_iter()
        .filter(|(p, _)| p[0] == "thread_main")
        .map(|(p, n)| (p, n.calls))
        .collect();
    let s = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        calls,
        BTreeMap::from([
            (s(&["thread_main"]), 100),
            (s(&["thread_main", "work"]), 5050),
            (s(&["thread_main", "work", "leaf"]), 10100),
        ])
    );
    let roots = ns.iter().filter(|n| n.parent.is_none()).count();
    assert_eq!(roots, 1);
    let per_task = graph_json(&rec.dir.path, &["--per-task"]);
    let ns = nodes(&per_task);
    let roots: Vec<&N> = ns.iter().filter(|n| n.parent.is_none()).collect();
    assert_eq!(roots.len(), 101, "one root per task");
    assert!(roots.iter().all(|r| r.calls == 1));
    assert_eq!(
        per_function(&ns),
        per_function(&nodes(&graph_json(&rec.dir.path, &[])))
    );

    // SQLite: real code.
    let exe = sqlite_driver("-O2");
    let rec = record(&exe, &[], &[]);
    let n = assert_graph_counts_are_the_reports(&rec.dir.path, &[], "sqlite");
    assert!(n > 400, "only {n} functions");
    assert_graph_counts_are_the_reports(&rec.dir.path, &["-F", "sqlite3_step"], "sqlite");
}

#[test]
fn demangle_names_the_graphs_functions() {
    // shape.cpp's main calls geo::Box<long>::get(int) const and
    // twice<long>(long), once each.
    let exe = cxx_program("shape.cpp", "-O2", &["-O2"]);
    let rec = record(&exe, &[], &[]);
    let calls = |opts: &[&str]| -> BTreeMap<Vec<String>, u64> {
        paths(&nodes(&graph_json(&rec.dir.path, opts)))
            .into_iter()
            .map(|(p, n)| (p, n.calls))
            .collect()
    };
    let s = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        calls(&["--demangle=simple"]),
        BTreeMap::from([
            (s(&["main"]), 1),
            (s(&["main", "geo::Box::get"]), 1),
            (s(&["main", "twice"]), 1),
        ]),
        "simple: no parameter lists nor template arguments"
    );
    let full: BTreeSet<String> = calls(&[]).into_keys().flatten().collect();
    assert!(
        full.iter()
            .any(|n| n.starts_with("geo::Box<long>::get(int)")),
        "{full:?}"
    );
    let raw: BTreeSet<String> = calls(&["--demangle=no"]).into_keys().flatten().collect();
    assert!(raw.contains("_ZNK3geo3BoxIlE3getEi"), "{raw:?}");
}

/// Graphviz's `dot` (package graphviz, installed by ./scripts/test).
fn dot() -> &'static str {
    let ok = Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`dot` is missing: install the graphviz package (apt-get install graphviz; ./scripts/test does)"
    );
    "dot"
}

#[test]
fn dot_output_renders_with_graphviz() {
    let dot = dot();
    let exe = graph_c();
    let rec = record(&exe, &["3"], &[]);
    let dir = &rec.dir.path;
    let out = scratch("graph-dot");
    for (name, opts) in [
        ("whole", &["--format", "dot"][..]),
        ("leaf", &["--format", "dot", "leaf"]),
        ("filtered", &["--format", "dot", "-F", "outer"]),
    ] {
        let text = fctrace_on_quietly("graph", dir, opts);
        let src = out.path.join(format!("{name}.dot"));
        std::fs::write(&src, &text).unwrap();
        let svg = out.path.join(format!("{name}.svg"));
        let r = run(Command::new(dot).arg("-Tsvg").arg(&src).arg("-o").arg(&svg));
        assert!(
            r.success() && r.stderr.is_empty(),
            "dot failed on {}\n{}\n{}",
            src.display(),
            r.describe(),
            clip(&text, 4000)
        );
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(svg.contains("<svg"), "{name}");
        // One SVG node per graph node, titled with its id.
        let nodes = text
            .lines()
            .filter(|l| l.contains(" [label=") && !l.contains("->"))
            .count();
        assert_eq!(svg.matches("class=\"node\"").count(), nodes, "{name}");
        assert!(svg.contains(">leaf</text>"), "{name}");
    }
    // A C++ name with quotes and angle brackets stays a valid graph.
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["basic"], &[]);
    let text = fctrace_on_quietly("graph", &rec.dir.path, &["--format", "dot"]);
    let src = out.path.join("cpp.dot");
    std::fs::write(&src, &text).unwrap();
    let r = run(Command::new(dot)
        .arg("-Tsvg")
        .arg(&src)
        .arg("-o")
        .arg(out.path.join("cpp.svg")));
    assert!(r.success() && r.stderr.is_empty(), "{}", r.describe());
    assert!(text.contains("operator+"), "{}", clip(&text, 3000));
}

#[test]
fn mermaid_output_is_a_well_formed_flowchart() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["basic"], &[]);
    let dir = &rec.dir.path;
    let json_nodes = nodes(&graph_json(dir, &[]));
    let text = fctrace_on_quietly("graph", dir, &["--format", "mermaid"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "---");
    assert!(lines[1].starts_with("title: \""), "{}", lines[1]);
    assert_eq!(lines[2], "---");
    assert_eq!(lines[3], "flowchart TD");
    let mut defined: HashMap<String, String> = HashMap::new();
    let mut edges = 0;
    for l in &lines[4..] {
        let l = l
            .strip_prefix("  ")
            .unwrap_or_else(|| panic!("indent: {l}"));
        if let Some(rest) = l.strip_prefix("style ") {
            let (id, style) = rest.split_once(' ').unwrap();
            assert!(
                defined.contains_key(id) && style.starts_with("fill:"),
                "{l}"
            );
        } else if let Some((from, rest)) = l.split_once(" -->|\"") {
            let (label, to) = rest.split_once("\"| ").unwrap_or_else(|| panic!("{l}"));
            assert!(
                defined.contains_key(from) && defined.contains_key(to),
                "{l}"
            );
            assert!(
                !label.contains('"') && label.split(' ').next().unwrap().parse::<u64>().is_ok(),
                "{l}"
            );
            edges += 1;
        } else {
            let (id, label) = l.split_once("[\"").unwrap_or_else(|| panic!("{l}"));
            let label = label.strip_suffix("\"]").unwrap_or_else(|| panic!("{l}"));
            assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{l}");
            // No character Mermaid would take as syntax inside the label.
            for part in label.split("<br/>") {
                assert!(!part.contains(['"', '<', '>', '|']), "{l}");
            }
            assert!(
                defined.insert(id.to_string(), label.to_string()).is_none(),
                "twice: {l}"
            );
        }
    }
    assert_eq!(defined.len(), json_nodes.len());
    assert_eq!(
        edges,
        json_nodes.len() - 1,
        "a tree: one edge per node but the root"
    );
    // Template and operator names are escaped, not dropped.
    assert!(
        defined.values().any(|l| l.contains("#lt;")),
        "no escaped template name: {defined:?}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let exe = graph_c();
    let rec = record(&exe, &["3"], &[]);
    let dir = rec.dir.path.to_str().unwrap();
    for (args, message) in [
        (
            vec!["graph", "-d", dir, "no_such_function"],
            "no_such_function names no function called",
        ),
        (vec!["graph", "-d", dir, "(unclosed"], "invalid FUNC"),
        (vec!["graph", "-d", "/nonexistent/trace"], "no trace at"),
        (
            vec!["graph", "-d", dir, "--format", "svg"],
            "invalid value 'svg'",
        ),
    ] {
        let r = fctrace(&args);
        assert!(!r.success(), "{args:?}\n{}", r.describe());
        assert!(r.stderr.contains(message), "{args:?}\n{}", r.describe());
    }
    // A function the filters hid is not called in what is shown.
    let r = fctrace(&["graph", "-d", dir, "-N", "outer", "inner"]);
    assert!(
        !r.success() && r.stderr.contains("(with these filters)"),
        "{}",
        r.describe()
    );
}
