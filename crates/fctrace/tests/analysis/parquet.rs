//! `fctrace dump --parquet -o DIR`: calls.parquet, functions.parquet and
//! tasks.parquet, read back with DuckDB (the Python package, as a user
//! would): its counts of calls per function and sums of self times equal
//! the report's, on flame.c (whose calls are known from its source, with
//! arguments and return values) and on SQLite.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// `fctrace dump --parquet -d DIR -o OUT [opts]`; asserts success.
#[track_caller]
fn dump_parquet(dir: &Path, out: &Path, opts: &[&str]) {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("dump"),
        OsStr::new("--parquet"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
    ];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(r.success(), "dump --parquet failed\n{}", r.describe());
    assert_eq!(r.stderr, "", "{}", r.describe());
    for table in ["calls", "functions", "tasks"] {
        assert!(out.join(format!("{table}.parquet")).is_file(), "{table}");
    }
}

/// The rows of a DuckDB query (run in `dir`), as JSON arrays.
#[track_caller]
fn duckdb(dir: &Path, sql: &str) -> Vec<Vec<Value>> {
    let script = "import duckdb, json, sys\n\
        rows = duckdb.sql(sys.argv[1]).fetchall()\n\
        print(json.dumps([[v if v is None or isinstance(v, (int, float, str)) else str(v) \
        for v in r] for r in rows]))";
    let r = run(Command::new("python3")
        .current_dir(dir)
        .args(["-c", script, sql]));
    assert!(
        !r.stderr.contains("No module named 'duckdb'"),
        "DuckDB is missing: `python3 -m pip install --break-system-packages duckdb` (./scripts/test installs it)"
    );
    assert!(r.success(), "duckdb: {sql}\n{}", r.describe());
    serde_json::from_str(&r.stdout).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// DuckDB's calls and self times per function in calls.parquet, and the
/// functions.parquet table, equal the report's.
#[track_caller]
fn assert_tables_are_the_reports(trace: &Path, out: &Path, opts: &[&str]) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("report"), OsStr::new("-d"), trace.as_os_str()];
    args.extend(["--format", "json"].iter().map(OsStr::new));
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(r.success(), "{}", r.describe());
    let report: Report = serde_json::from_str(&r.stdout).unwrap();
    let expected: BTreeMap<(String, String), (u64, u64)> = report
        .functions
        .iter()
        .map(|f| ((f.symbol.clone(), f.module.clone()), (f.calls, f.self_ns)))
        .collect();
    let rows = duckdb(
        out,
        "SELECT symbol, module, count(*), coalesce(sum(self_ns), 0) \
         FROM 'calls.parquet' GROUP BY symbol, module",
    );
    let counted: BTreeMap<(String, String), (u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()),
                (u(&r[2]), u(&r[3])),
            )
        })
        .collect();
    assert_eq!(counted, expected, "calls.parquet of {}", trace.display());

    let rows = duckdb(
        out,
        "SELECT function, symbol, module, calls, total_ns, self_ns, min_ns, max_ns, avg_ns \
         FROM 'functions.parquet'",
    );
    let tabled: BTreeMap<(String, String), Vec<Value>> = rows
        .into_iter()
        .map(|r| {
            let key = (r[1].as_str().unwrap().into(), r[2].as_str().unwrap().into());
            (key, [&r[..1], &r[3..]].concat())
        })
        .collect();
    let reported: BTreeMap<(String, String), Vec<Value>> = report
        .functions
        .iter()
        .map(|f| {
            (
                (f.symbol.clone(), f.module.clone()),
                vec![
                    f.name.clone().into(),
                    f.calls.into(),
                    f.total_ns.into(),
                    f.self_ns.into(),
                    f.min_ns.into(),
                    f.max_ns.into(),
                    f.avg_ns.map(|a| a as u64).into(),
                ],
            )
        })
        .collect();
    assert_eq!(tabled, reported, "functions.parquet of {}", trace.display());
}

#[test]
fn calls_functions_and_tasks_of_a_c_program() {
    let exe = flame_program();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, FLAME_OUTPUT, "{}", native.describe());
    let rec = record(&exe, &[], &["-A", "lex@arg1", "-R", "fib@retval"]);
    assert_eq!(rec.run.stdout, FLAME_OUTPUT, "{}", rec.run.describe());
    let trace = &rec.dir.path;
    let out = scratch("parquet-flame");
    dump_parquet(trace, &out.path, &[]);
    assert_tables_are_the_reports(trace, &out.path, &[]);

    // Depths of fib's calls below main (depth 0): 1, 2, 4, 6, 2 calls at
    // depths 1 to 5; return values fib(0..5) of the source.
    let rows = duckdb(
        &out.path,
        "SELECT depth, count(*), string_agg(retval, ',' ORDER BY retval) \
         FROM 'calls.parquet' WHERE function = 'fib' GROUP BY depth ORDER BY depth",
    );
    let fib: Vec<(u64, u64, String)> = rows
        .iter()
        .map(|r| (u(&r[0]), u(&r[1]), r[2].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        fib,
        [
            (1, 1, "5".to_string()),
            (2, 2, "2,3".to_string()),
            (3, 4, "1,1,1,2".to_string()),
            (4, 6, "0,0,1,1,1,1".to_string()),
            (5, 2, "0,1".to_string()),
        ]
    );
    // lex's arguments per thread: 0 1 2 0 1 in main's, 0 1 2 3 in the
    // worker's; all at depth 2, all returned, with a duration and no more
    // self time than it.
    let rows = duckdb(
        &out.path,
        "SELECT c.tid = t.pid, string_agg(args, ' ' ORDER BY start_ns), min(depth), \
         max(depth), bool_and(ended = 'returned'), bool_and(self_ns <= duration_ns), \
         bool_and(end_ns = start_ns + duration_ns) \
         FROM 'calls.parquet' c JOIN 'tasks.parquet' t USING (task) \
         WHERE function = 'lex' GROUP BY ALL ORDER BY 1 DESC",
    );
    assert_eq!(
        rows,
        [
            serde_json::json!([true, "0 1 2 0 1", 2, 2, true, true, true]),
            serde_json::json!([false, "0 1 2 3", 2, 2, true, true, true]),
        ]
        .map(|v| v.as_array().unwrap().clone())
    );
    // The tasks: the program and its thread, with their calls (the report
    // with the dump's options: the C runtime's calls hidden).
    let report: Report =
        serde_json::from_str(&fctrace_on("report", trace, &["--format", "json"])).unwrap();
    let rows = duckdb(
        &out.path,
        "SELECT tid, pid, origin, program, calls, events, parent IS NULL \
         FROM 'tasks.parquet' ORDER BY task",
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(rows.len(), report.tasks.len());
    let program = canonical(&exe).display().to_string();
    assert_eq!(rows[0][2], "start");
    assert_eq!(rows[1][2], "thread");
    assert_eq!(
        (rows[0][6].clone(), rows[1][6].clone()),
        (true.into(), false.into())
    );
    for (row, task) in rows.iter().zip(&report.tasks) {
        assert_eq!((u(&row[0]), u(&row[1])), (task.tid, task.pid));
        assert_eq!(
            canonical(Path::new(row[3].as_str().unwrap()))
                .display()
                .to_string(),
            program
        );
    }
    // The worker's calls: worker, parse, 4 lex.
    assert_eq!(u(&rows[1][4]), 6);
    // The calls of the dump's options: the C runtime's hidden (report()
    // shows them).
    let shown: Report =
        serde_json::from_str(&fctrace_on("report", trace, &["--format", "json"])).unwrap();
    let total: u64 = shown.functions.iter().map(|f| f.calls).sum();
    assert_eq!(u(&rows[0][4]) + u(&rows[1][4]), total);

    // With filters: what the report shows with them.
    let filtered = scratch("parquet-flame-filtered");
    dump_parquet(trace, &filtered.path, &["-F", "parse", "-N", "lex"]);
    assert_tables_are_the_reports(trace, &filtered.path, &["-F", "parse", "-N", "lex"]);
    let rows = duckdb(&filtered.path, "SELECT count(*) FROM 'calls.parquet'");
    assert_eq!(u(&rows[0][0]), 3, "the three calls of parse");
}

#[test]
fn sqlite_calls_are_the_reports() {
    let exe = sqlite_driver("-O2");
    let rec = record_same(&exe, &[]);
    let out = scratch("parquet-sqlite");
    dump_parquet(&rec.dir.path, &out.path, &[]);
    assert_tables_are_the_reports(&rec.dir.path, &out.path, &[]);
    // Several row groups (each with its own dictionaries of names and
    // tasks), so the counts above span them.
    let groups = duckdb(
        &out.path,
        "SELECT count(DISTINCT row_group_id) FROM parquet_metadata('calls.parquet')",
    );
    assert!(u(&groups[0][0]) > 1, "{groups:?}");
}

/// threads.c: thread i calls work() i + 1 times (its source says so),
/// each work() leaf() twice; every row carries its thread's pid and tid,
/// as tasks.parquet lists them.
#[test]
fn rows_of_a_hundred_threads() {
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let out = scratch("parquet-threads");
    dump_parquet(&rec.dir.path, &out.path, &[]);
    assert_tables_are_the_reports(&rec.dir.path, &out.path, &[]);
    let rows = duckdb(
        &out.path,
        "SELECT tid, count(*) FILTER (function = 'work'), count(*) FILTER (function = 'leaf'), \
         min(pid), max(pid), count(DISTINCT task) \
         FROM 'calls.parquet' GROUP BY tid ORDER BY 2",
    );
    assert_eq!(rows.len(), 101, "{rows:?}");
    let works: Vec<u64> = rows.iter().map(|r| u(&r[1])).collect();
    let expected: Vec<u64> = std::iter::once(0).chain(1..=100).collect();
    assert_eq!(works, expected);
    // The main thread (no work) has the process's pid as its tid.
    let pid = u(&rows[0][0]);
    for r in &rows {
        assert_eq!(u(&r[2]), 2 * u(&r[1]), "{r:?}");
        assert_eq!((u(&r[3]), u(&r[4])), (pid, pid), "{r:?}");
        assert_eq!(u(&r[5]), 1, "one task per thread: {r:?}");
    }
    // tasks.parquet: the same tasks, tids and calls.
    let joined = duckdb(
        &out.path,
        "SELECT count(*), count(*) FILTER (t.tid = c.tid AND t.pid = c.pid AND t.calls = c.n) \
         FROM 'tasks.parquet' t JOIN (SELECT task, min(tid) tid, min(pid) pid, count(*) n \
         FROM 'calls.parquet' GROUP BY task) c USING (task)",
    );
    assert_eq!(joined, vec![vec![Value::from(101), Value::from(101)]]);
}

#[test]
fn bad_output_is_a_clear_error() {
    let rec = record(&flame_program(), &[], &[]);
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--parquet"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(2), "-o is required\n{}", r.describe());
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--parquet"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("/proc/version/x"),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .starts_with("fctrace: cannot create /proc/version/x"),
        "{}",
        r.describe()
    );
}

/// endings.c exits from deep inside: the calls that never returned have
/// no duration nor self time, and the others add up as in the report.
#[test]
fn calls_that_never_returned_have_no_time() {
    let exe = c_program("endings.c", "-O0", &["-O0"]);
    let native = run(std::process::Command::new(&exe).args(["exit", "3"]));
    let rec = record_any(&exe, &["exit", "3"], &[]);
    assert_same_behaviour(&native, &rec.run, "endings exit 3");
    let out = scratch("parquet-endings");
    dump_parquet(&rec.dir.path, &out.path, &[]);
    assert_tables_are_the_reports(&rec.dir.path, &out.path, &[]);
    let rows = duckdb(
        &out.path,
        "SELECT function, depth, ended, duration_ns IS NULL, self_ns IS NULL \
         FROM 'calls.parquet' WHERE function IN ('main', 'descend', 'leave') ORDER BY depth",
    );
    let mut expected = vec![serde_json::json!(["main", 0, "not_returned", true, true])];
    for depth in 1..=6 {
        expected.push(serde_json::json!([
            "descend",
            depth,
            "not_returned",
            true,
            true
        ]));
    }
    expected.push(serde_json::json!(["leave", 7, "not_returned", true, true]));
    let expected: Vec<Vec<Value>> = expected
        .into_iter()
        .map(|v| v.as_array().unwrap().clone())
        .collect();
    assert_eq!(rows, expected);
}
