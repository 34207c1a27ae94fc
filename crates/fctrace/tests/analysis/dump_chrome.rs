//! `fctrace dump --chrome` (Chrome trace-event JSON) and the plain `fctrace
//! dump` (one text line per event), on real traces: tree.c, tree.cpp's
//! exceptions, threads.c's 101 threads and SQLite. The JSON must parse,
//! hold exactly one complete (`X`) event per call, the events of each
//! thread must nest (two calls of a thread either do not overlap or one
//! holds the other), and the calls per function must equal `report
//! --format json`'s; arguments and return values are the program's.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::Path;

/// One complete event.
#[derive(Debug, Clone)]
struct X {
    name: String,
    cat: String,
    start: u64,
    end: u64,
    pid: u64,
    tid: u64,
    args: Value,
}

/// The parsed dump: its complete events, and every event.
struct Chrome {
    xs: Vec<X>,
    all: Vec<Value>,
}

/// Microseconds with three decimals to nanoseconds.
fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) * 1000.0).round() as u64
}

#[track_caller]
fn parse(text: &[u8], ctx: &str) -> Chrome {
    let v: Value = serde_json::from_slice(text)
        .unwrap_or_else(|e| panic!("{ctx}: the Chrome JSON does not parse: {e}"));
    let all = v["traceEvents"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no traceEvents array"))
        .clone();
    let xs = all
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            let start = ns(&e["ts"]);
            X {
                name: e["name"].as_str().unwrap().to_string(),
                cat: e["cat"].as_str().unwrap().to_string(),
                start,
                end: start + ns(&e["dur"]),
                pid: e["pid"].as_u64().unwrap(),
                tid: e["tid"].as_u64().unwrap(),
                args: e["args"].clone(),
            }
        })
        .collect();
    Chrome { xs, all }
}

/// `fctrace dump --chrome -d DIR OPTS -o FILE`, parsed.
#[track_caller]
fn chrome(dir: &Path, opts: &[&str]) -> Chrome {
    let mut all = vec!["--chrome"];
    all.extend(opts);
    let (_out, file) = dump_file(dir, &all, "trace.json");
    let text = std::fs::read(&file).unwrap();
    parse(
        &text,
        &format!("dump --chrome {opts:?} of {}", dir.display()),
    )
}

/// The calls of each thread nest: sorted by start (the longer first at
/// the same start), each call either starts at or after the end of the
/// calls open before it, or ends within the innermost of them.
#[track_caller]
fn assert_nested(xs: &[X], ctx: &str) {
    let mut by_thread: HashMap<(u64, u64), Vec<&X>> = HashMap::new();
    for x in xs {
        assert!(x.end >= x.start, "{ctx}: {x:?}");
        by_thread.entry((x.pid, x.tid)).or_default().push(x);
    }
    for (thread, mut calls) in by_thread {
        calls.sort_by_key(|x| (x.start, std::cmp::Reverse(x.end)));
        let mut open: Vec<&X> = Vec::new();
        for x in calls {
            while open.last().is_some_and(|top| top.end <= x.start) {
                open.pop();
            }
            if let Some(top) = open.last() {
                assert!(
                    x.end <= top.end,
                    "{ctx}: thread {thread:?}: {} overlaps {} without being inside it\n{x:?}\n{top:?}",
                    x.name,
                    top.name
                );
            }
            open.push(x);
        }
    }
}

/// Calls per (name, module file name), counted in the events.
fn counts(xs: &[X]) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for x in xs {
        *m.entry((x.name.clone(), x.cat.clone())).or_insert(0) += 1;
    }
    m
}

/// Nesting, and the report's calls per function (with the same options).
#[track_caller]
fn check(dir: &Path, opts: &[&str]) -> Chrome {
    let ctx = format!("dump --chrome {opts:?} of {}", dir.display());
    let c = chrome(dir, opts);
    assert_nested(&c.xs, &ctx);
    let mut report_args = vec!["--format", "json"];
    report_args.extend(opts);
    let rep: Report = serde_json::from_str(&fctrace_on("report", dir, &report_args)).unwrap();
    assert_eq!(
        counts(&c.xs),
        rep.calls_by_name_and_module(),
        "{ctx}: calls per function, Chrome JSON (left) and report (right)"
    );
    // Every thread with calls is named.
    let named: BTreeSet<u64> = c
        .all
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    let with_calls: BTreeSet<u64> = c.xs.iter().map(|x| x.tid).collect();
    assert!(with_calls.is_subset(&named), "{ctx}: unnamed threads");
    c
}

fn leaf_values(c: &Chrome) -> BTreeSet<(String, String)> {
    c.xs.iter()
        .filter(|x| x.name == "leaf")
        .map(|x| {
            (
                x.args["args"].as_str().unwrap_or("-").to_string(),
                x.args["retval"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect()
}

#[test]
fn chrome_c_tree_with_arguments() {
    let exe = c_program("tree.c", "-O0", &["-O0"]);
    let rec = record(&exe, &[], &["-A", "leaf@arg1", "-R", "leaf@retval"]);
    let c = check(&rec.dir.path, &[]);
    // tree.c: leaf(1) = 10; nest1(2): nest2(2) calls leaf(2) = 17, then
    // leaf(nest2(2) = 17 + inc(2) = 20) = 143.
    let expected: BTreeSet<(String, String)> = [("1", "10"), ("2", "17"), ("20", "143")]
        .iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect();
    assert_eq!(leaf_values(&c), expected);
    // rec(3) -> rec(2) -> rec(1): three calls, each inside the one before.
    let mut recs: Vec<&X> = c.xs.iter().filter(|x| x.name == "rec").collect();
    recs.sort_by_key(|x| x.start);
    assert_eq!(recs.len(), 3);
    assert!(recs
        .windows(2)
        .all(|w| w[0].start <= w[1].start && w[1].end <= w[0].end));

    // The same document on standard output.
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--chrome"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    let s = parse(r.stdout.as_bytes(), "stdout");
    assert_eq!(s.all, c.all);

    // Filters: only nest1's subtree, as the report counts it.
    let f = check(&rec.dir.path, &["-F", "nest1"]);
    let names: BTreeSet<&str> = f.xs.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["nest1", "nest2", "leaf", "inc"]));
    assert_eq!(f.xs.len(), 5);
}

#[test]
fn chrome_cpp_exceptions_unwind() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["exceptions"], &[]);
    let c = check(&rec.dir.path, &[]);
    // An exception leaves frames that never return: their calls end, as
    // unwound, where the frames vanished.
    let unwound: Vec<&X> = c.xs.iter().filter(|x| x.args["end"] == "unwound").collect();
    assert!(
        !unwound.is_empty(),
        "no unwound call in tree.cpp's exceptions"
    );
    assert!(c.xs.iter().any(|x| x.name.starts_with("geo::")));
}

#[test]
fn chrome_threads_one_track_per_thread() {
    const N: u64 = 100;
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let c = check(&rec.dir.path, &[]);
    let count = |name: &str| c.xs.iter().filter(|x| x.name == name).count() as u64;
    // threads.c: thread i calls work() i + 1 times, each work() calls
    // leaf() twice.
    assert_eq!(count("thread_main"), N);
    assert_eq!(count("work"), N * (N + 1) / 2);
    assert_eq!(count("leaf"), N * (N + 1));
    let tids: BTreeSet<u64> = c.xs.iter().map(|x| x.tid).collect();
    assert_eq!(tids.len() as u64, N + 1);
    // Each worker's work() calls are inside its thread_main().
    for tid in &tids {
        let mine = |name: &str| -> Vec<&X> {
            c.xs.iter()
                .filter(|x| x.tid == *tid && x.name == name)
                .collect()
        };
        if let [t] = mine("thread_main")[..] {
            assert!(mine("work")
                .iter()
                .all(|w| t.start <= w.start && w.end <= t.end));
        }
    }
}

#[test]
fn chrome_sqlite() {
    let exe = sqlite_driver("-O2");
    let rec = record(&exe, &[], &[]);
    let c = check(&rec.dir.path, &[]);
    let binds =
        c.xs.iter()
            .filter(|x| x.name == "sqlite3_bind_double")
            .count() as u64;
    assert_eq!(binds, SQLITE_ROWS);
    assert!(c.xs.len() > 100_000, "only {} calls", c.xs.len());
}

/// Without a format flag: one line per event; the entries per function
/// are the report's calls, and every entry has an end.
#[test]
fn plain_dump_has_a_line_per_event() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["exceptions"], &[]);
    // With the C runtime's calls, as `report()` counts them.
    let text = fctrace_on_quietly("dump", &rec.dir.path, &["--show-runtime"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("# tid time_ns event depth function values")
    );
    let mut entries: BTreeMap<String, u64> = BTreeMap::new();
    let mut ends = 0;
    let mut depth: HashMap<String, i64> = HashMap::new();
    for l in lines {
        let f: Vec<&str> = l.splitn(5, ' ').collect();
        assert_eq!(f.len(), 5, "{l}");
        let d: i64 = f[3].parse().unwrap();
        let open = depth.entry(f[0].to_string()).or_insert(0);
        match f[2] {
            "entry" => {
                assert_eq!(d, *open, "{l}");
                *open += 1;
                *entries.entry(f[4].to_string()).or_insert(0) += 1;
            }
            "exit" | "unwind" | "noreturn" => {
                *open -= 1;
                assert_eq!(d, *open, "{l}");
                ends += 1;
            }
            other => panic!("unexpected event {other}: {l}"),
        }
    }
    assert!(depth.values().all(|&d| d == 0));
    let rep = report(&rec.dir.path);
    assert_eq!(entries, rep.calls_by_name());
    assert_eq!(ends, rep.functions.iter().map(|f| f.calls).sum::<u64>());
}

#[test]
fn dump_errors_are_clear() {
    let exe = c_program("tree.c", "-O0", &["-O0"]);
    let rec = record(&exe, &[], &[]);
    let d = rec.dir.path.as_os_str();
    // One format at a time.
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--chrome"),
        OsStr::new("--perfetto"),
        OsStr::new("-d"),
        d,
    ]);
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    assert!(r.stderr.contains("cannot be used with"), "{}", r.describe());
    // No trace there.
    let r = fctrace(&["dump", "--chrome", "-d", "/nonexistent/fctrace.data"]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("no trace at"), "{}", r.describe());
    // An output that cannot be created.
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--chrome"),
        OsStr::new("-d"),
        d,
        OsStr::new("-o"),
        OsStr::new("/nonexistent/trace.json"),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("cannot create /nonexistent/trace.json"),
        "{}",
        r.describe()
    );
}

/// A damaged task file: the other tasks are dumped, the output is whole
/// (the JSON parses), and fctrace names the damage and exits with 1.
#[test]
fn dump_of_a_damaged_trace_names_the_damage() {
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let rep = report(&rec.dir.path);
    // A worker thread's file cut in half.
    let worker = rep.tasks.iter().find(|t| t.tid != t.pid).unwrap();
    let file = rec.dir.path.join(format!("tasks/{}.dat", worker.tid));
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    for (format, name) in [("--chrome", "trace.json"), ("--perfetto", "trace.pftrace")] {
        let out = scratch("dump-damaged");
        let path = out.path.join(name);
        let r = fctrace(&[
            OsStr::new("dump"),
            OsStr::new(format),
            OsStr::new("-d"),
            rec.dir.path.as_os_str(),
            OsStr::new("-o"),
            path.as_os_str(),
        ]);
        assert_eq!(r.code(), Some(1), "{format}\n{}", r.describe());
        assert!(
            r.stderr.contains(&format!("{}.dat", worker.tid)),
            "{format}: the damaged file is not named\n{}",
            r.describe()
        );
        if format == "--chrome" {
            let c = parse(&std::fs::read(&path).unwrap(), "damaged");
            let tids: BTreeSet<u64> = c.xs.iter().map(|x| x.tid).collect();
            // Every other thread is there.
            assert!(tids.len() >= rep.tasks.len() - 1, "{tids:?}");
            assert_nested(&c.xs, "damaged");
        }
    }
}
