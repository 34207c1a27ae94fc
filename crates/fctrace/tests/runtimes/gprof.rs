//! Programs built with `-pg` (gprof): glibc's `mcount` (and `__fentry__`
//! with `-mfentry`) records each call arc from the caller's return
//! address, which a traced frame's slot holds as the entry stub's return
//! site. The agent's own hooks hand glibc the real address: gprof's call
//! graph (`gprof -b -q`) from a traced run has the same arcs and counts as
//! from a native run, and as gprof_arcs.c makes them.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Arcs (caller, callee) → calls, from gprof_arcs.c.
fn expected() -> BTreeMap<(String, String), u64> {
    [
        ("main", "a", 10),
        ("main", "c", 10),
        ("main", "b", 1),
        ("c", "a", 10),
        ("c", "b", 10),
        ("a", "leaf", 40),
        ("b", "leaf", 33),
    ]
    .into_iter()
    .map(|(f, t, n)| ((f.to_string(), t.to_string()), n))
    .collect()
}

/// The arcs of `gprof -b -q exe gmon.out` run in `dir`: in each entry of
/// the call graph, the lines above the function's own (`[i] ...`) are its
/// callers, with `calls/total` in the "called" column.
fn arcs(exe: &Path, dir: &Path) -> BTreeMap<(String, String), u64> {
    let r = run(Command::new("gprof")
        .current_dir(dir)
        .args(["-b", "-q"])
        .arg(exe)
        .arg("gmon.out"));
    assert!(
        r.success() && !r.stderr.contains("missing call-graph"),
        "gprof failed in {}: {}",
        dir.display(),
        r.describe()
    );
    let mut out = BTreeMap::new();
    let mut callers: Vec<(String, u64)> = Vec::new();
    for l in r.stdout.lines() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if l.starts_with("-----") {
            callers.clear();
        } else if t.first().is_some_and(|s| s.starts_with('[')) && t.len() >= 6 {
            // [i] %time self children called name [i]
            let name = t[5].to_string();
            for (from, n) in callers.drain(..) {
                *out.entry((from, name.clone())).or_insert(0) += n;
            }
        } else if t.len() == 5 && t[2].contains('/') {
            // self children calls/total name [i]
            let n = t[2].split('/').next().unwrap().parse().unwrap();
            callers.push((t[3].to_string(), n));
        } else if t.first() == Some(&"Index") {
            break;
        }
    }
    out
}

fn check(flags: &[&str], suffix: &str, record_opts: &[&str]) {
    let found = Command::new("gprof").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "gprof is missing: apt-get install binutils (./scripts/test installs it)"
    );
    let mut all = flags.to_vec();
    all.push("-pg");
    let exe = Build::new(
        Lang::C,
        &format!("gprof_arcs{suffix}"),
        &[program_source("gprof_arcs.c")],
        &all,
    )
    .build();
    let native_dir = TraceDir::new("gprof-native");
    std::fs::create_dir_all(&native_dir.path).unwrap();
    let native = run(Command::new(&exe).current_dir(&native_dir.path));
    native.expect_success();
    let native_arcs = arcs(&exe, &native_dir.path);
    assert_eq!(native_arcs, expected(), "{}: native", exe.display());

    let cwd = TraceDir::new("gprof-traced");
    std::fs::create_dir_all(&cwd.path).unwrap();
    let trace = cwd.path.join("trace");
    let traced = run(Command::new(fctrace_bin())
        .current_dir(&cwd.path)
        .arg("record")
        .arg("-d")
        .arg(&trace)
        .args(record_opts)
        .arg(&exe));
    let ctx = format!(
        "{} {record_opts:?} (trace {})",
        exe.display(),
        trace.display()
    );
    assert_same_behaviour(&native, &traced, &ctx);
    assert_eq!(arcs(&exe, &cwd.path), native_arcs, "{ctx}");
    // The program's functions were traced, as many times as it calls them.
    let rep = report(&trace);
    assert_eq!(rep.calls("leaf"), 73, "{ctx}");
    assert_eq!(rep.calls("a"), 20, "{ctx}");
    // The compiler's hook at every entry is not one of the program's calls.
    for hook in ["mcount", "_mcount", "__fentry__"] {
        assert_eq!(rep.calls(hook), 0, "{ctx}: {hook}");
    }
}

#[test]
fn gprof_call_graph_as_natively_o0() {
    check(&["-O0"], "-O0", &[]);
}

#[test]
fn gprof_call_graph_as_natively_o2() {
    check(&["-O2"], "-O2", &[]);
}

#[test]
fn gprof_call_graph_as_natively_fentry() {
    check(&["-O2", "-mfentry"], "-O2-fentry", &[]);
}

#[test]
fn gprof_call_graph_as_natively_nest_libcall() {
    check(&["-O2"], "-O2", &["-l"]);
}

#[test]
fn gprof_call_graph_as_natively_fentry_nest_libcall() {
    check(&["-O2", "-mfentry"], "-O2-fentry", &["-l"]);
}
