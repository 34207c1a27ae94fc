//! uftrace's `script -S FILE.py` and `record -S`: a Python script that
//! counts the calls of uftrace_readers.c per function and per thread
//! (counts from its header: a, b, c 3 times each, one of them from the
//! worker thread, leaf 9 times, with arguments 1, 2 and 3 three times
//! each), checks each exit against its entry, and the errors of a script
//! that does not compile, raises, or finds no python3.

use super::uftrace_replay::recorded;
use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The counting script: entries and exits per function, calls per
/// thread, leaf's first arguments; each exit's depth and duration checked
/// against its entry's (kept on a stack per thread).
const COUNT: &str = r#"
UFTRACE_FUNCS = ["^(main|worker|a|b|c|leaf)$"]
calls = {}
exits = {}
per_tid = {}
leaf_args = {}
stacks = {}

def uftrace_begin(ctx):
    program = ctx["cmds"][0].rsplit("/", 1)[-1]
    print("begin record=%s program=%s" % (ctx["record"], program.startswith("uftrace_readers")))

def uftrace_entry(ctx):
    name = ctx["name"]
    calls[name] = calls.get(name, 0) + 1
    key = (name, ctx["tid"])
    per_tid[key] = per_tid.get(key, 0) + 1
    if name == "leaf" and "args" in ctx:
        leaf_args[ctx["args"][0]] = leaf_args.get(ctx["args"][0], 0) + 1
    assert ctx["address"] > 0
    stacks.setdefault(ctx["tid"], []).append((name, ctx["depth"], ctx["timestamp"]))

def uftrace_exit(ctx):
    name, depth, start = stacks[ctx["tid"]].pop()
    assert (name, depth) == (ctx["name"], ctx["depth"]), (name, depth, ctx)
    assert ctx["duration"] == ctx["timestamp"] - start, ctx
    exits[name] = exits.get(name, 0) + 1

def uftrace_end():
    for name in sorted(calls):
        print("%s %d %d" % (name, calls[name], exits[name]))
    a_tids = sorted(n for (f, t), n in per_tid.items() if f == "a")
    print("a per thread %s" % a_tids)
    print("leaf args %s" % sorted(leaf_args.items()))
    print("end")
"#;

fn script_file(name: &str, text: &str) -> PathBuf {
    let dir = target_tmpdir().join(format!("script-{}", unique_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn python3_present() {
    assert!(
        Command::new("python3").arg("-V").output().is_ok(),
        "these tests need python3: apt-get install python3"
    );
}

/// The counts uftrace_readers.c's structure gives; `leaf_args`: what
/// the script prints for leaf's arguments.
fn expected(record: bool, leaf_args: &str) -> String {
    let mut s = format!(
        "begin record={} program=True\n",
        if record { "True" } else { "False" }
    );
    for (name, n) in [
        ("a", 3),
        ("b", 3),
        ("c", 3),
        ("leaf", 9),
        ("main", 1),
        ("worker", 1),
    ] {
        s += &format!("{name} {n} {n}\n");
    }
    s += "a per thread [1, 2]\n";
    s += &format!("leaf args {leaf_args}\nend\n");
    s
}

#[test]
fn script_counts_calls_per_function() {
    python3_present();
    let (rec, _, _) = recorded();
    let script = script_file("count.py", COUNT);
    let out = fctrace_on_quietly("script", &rec.dir.path, &["-S", script.to_str().unwrap()]);
    assert_eq!(out, expected(false, "[]"));
}

#[test]
fn record_runs_the_script_after_recording() {
    python3_present();
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let script = script_file("count.py", COUNT);
    let rec = record(
        &exe,
        &[],
        &["-S", script.to_str().unwrap(), "-A", "leaf@arg1"],
    );
    // The program's two lines first, then the script's.
    let (program, scripted) = rec.run.stdout.split_once("begin").unwrap();
    assert_eq!(program.lines().count(), 2, "{}", rec.run.describe());
    assert_eq!(
        format!("begin{scripted}"),
        expected(true, "[(1, 3), (2, 3), (3, 3)]")
    );
    // Live mode: the program's lines, the script's, then the tree; the
    // script's `uftrace-option:` lines are record options.
    let script = script_file(
        "count_args.py",
        &format!("#\n# uftrace-option: -A leaf@arg1\n#\n{COUNT}"),
    );
    let live = fctrace(&["-S".as_ref(), script.as_os_str(), exe.as_os_str()]);
    assert!(live.success(), "{}", live.describe());
    let (_, scripted) = live.stdout.split_once("begin").unwrap();
    let (scripted, tree) = scripted.split_once("end\n").unwrap();
    assert_eq!(
        format!("begin{scripted}end\n"),
        expected(true, "[(1, 3), (2, 3), (3, 3)]")
    );
    assert!(tree.starts_with("# DURATION"), "{}", live.describe());
}

fn script_run(script: &Path, dir: &Path, path_env: Option<&str>) -> Run {
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("script").arg("-S").arg(script).arg("-d").arg(dir);
    if let Some(p) = path_env {
        cmd.env("PATH", p);
    }
    let r = run_with_timeout(&mut cmd, FCTRACE_TIMEOUT);
    assert_no_panic(&r);
    r
}

#[test]
fn script_errors_are_said() {
    python3_present();
    let (rec, _, _) = recorded();
    let dir = &rec.dir.path;
    let bad = script_file("bad.py", "def uftrace_entry(ctx)\n    pass\n");
    let r = script_run(&bad, dir, None);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("SyntaxError"), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!(
            "fctrace: the script {} could not be compiled",
            bad.display()
        )),
        "{}",
        r.describe()
    );

    let raises = script_file(
        "raises.py",
        "def uftrace_entry(ctx):\n    raise ValueError('no ' + ctx['name'])\n",
    );
    let r = script_run(&raises, dir, None);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("ValueError: no main"), "{}", r.describe());
    assert!(
        r.stderr.contains("raises.py\", line 2, in uftrace_entry"),
        "{}",
        r.describe()
    );
    assert!(r.stderr.contains("raised an exception"), "{}", r.describe());

    let ok = script_file("ok.py", "def uftrace_end():\n    print('end')\n");
    let empty = target_tmpdir().join(format!("empty-path-{}", unique_suffix()));
    std::fs::create_dir_all(&empty).unwrap();
    let r = script_run(&ok, dir, Some(empty.to_str().unwrap()));
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("needs python3, which is not on PATH (apt-get install python3)"),
        "{}",
        r.describe()
    );

    let lua = script_file("count.lua", "");
    let r = script_run(&lua, dir, None);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("Lua scripts are not supported"),
        "{}",
        r.describe()
    );
}

#[test]
fn script_records_first_and_leaves_values_out() {
    python3_present();
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let script = script_file("count.py", COUNT);
    // --no-args: the recorded arguments of leaf are not given.
    let rec = record(&exe, &[], &["-A", "leaf@arg1"]);
    let out = fctrace_on_quietly(
        "script",
        &rec.dir.path,
        &["-S", script.to_str().unwrap(), "--no-args"],
    );
    assert_eq!(out, expected(false, "[]"));
    // --record COMMAND: recorded into -d with the script's
    // `uftrace-option:` options, then the script, ctx["record"] true; the
    // program's output first.
    let script = script_file(
        "count_args.py",
        &format!("#\n# uftrace-option: -A leaf@arg1\n#\n{COUNT}"),
    );
    let dir = target_tmpdir().join(format!("script-record-{}", unique_suffix()));
    let r = fctrace(&[
        "script".as_ref(),
        "-S".as_ref(),
        script.as_os_str(),
        "-d".as_ref(),
        dir.as_os_str(),
        "--record".as_ref(),
        exe.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    let (program, scripted) = r.stdout.split_once("begin").unwrap();
    assert_eq!(program.lines().count(), 2, "{}", r.describe());
    assert_eq!(
        format!("begin{scripted}"),
        expected(true, "[(1, 3), (2, 3), (3, 3)]")
    );
    assert!(dir.join("info.json").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
