//! Python functions in the tree (issue 29): a real Python script with
//! recursion, a class, a generator, caught and uncaught exceptions, C
//! functions calling back into Python (`sorted(key=...)`, an SQL function
//! of the standard library's sqlite3), json's C encoder and scanner, a
//! libc call, threads, a forked `multiprocessing` child and a `subprocess`
//! child, traced under Debian's stripped `python3.11` (libpython inside
//! the program) and under pyenv's `--enable-shared` 3.11.7 (the
//! interpreter in `libpython3.11.so`, traced with `-l`). Each Python
//! function's call count equals what a counting `sys.setprofile` (and
//! `threading.setprofile`) profile sees in a second run of the same
//! script, in all its processes; the exit status, output and traceback
//! are the native run's; Python frames nest with the native calls.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const APP: &str = r#"import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Shape:
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side * self.side


def squares(n):
    for i in range(n):
        yield i * i


def risky(x):
    if x % 3 == 0:
        raise ValueError(x)
    return x


def careful():
    caught = 0
    for x in range(7):
        try:
            risky(x)
        except ValueError:
            caught += 1
    return caught


def by_length(word):
    return len(word)


def pid():
    return os.getpid()


def worker(n):
    return sum(fib(k) for k in range(n))


def double(x):
    return 2 * x


def query():
    db = sqlite3.connect(":memory:")
    db.create_function("double", 1, double)
    rows = db.execute("select double(a) from (select 1 as a union all select 2)").fetchall()
    db.close()
    return rows


def encode():
    return json.dumps({"a": [1, 2, "x"], "b": None})


def decode():
    return json.loads('{"k": [1, 2, 3]}')


def child_only(n):
    return [fib(k) for k in range(n)]


def in_child(q):
    q.put(sum(child_only(5)))


def spawned():
    return Shape(3).area()


def children():
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=in_child, args=(q,))
    p.start()
    print("forked", q.get())
    p.join()
    print("exit", p.exitcode)
    out = subprocess.run([sys.executable, __file__, "spawned"], capture_output=True, text=True)
    print(out.stdout.strip(), out.returncode)


def main():
    if sys.argv[1:] == ["spawned"]:
        print("spawned", spawned())
        return
    print("fib", fib(10))
    print("area", sum(Shape(s).area() for s in range(4)))
    print("squares", list(squares(5)))
    print("caught", careful())
    print("sorted", sorted(["ccc", "a", "bb"], key=by_length))
    print("pid", pid() > 0)
    print("query", query())
    print("json", encode(), decode())
    threads = [threading.Thread(target=worker, args=(6 + i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    children()
    if sys.argv[1:] == ["boom"]:
        risky(3)


main()
"#;

/// The oracle: a `sitecustomize` module that sets a counting profile
/// (`sys.setprofile`, and `threading.setprofile` for the threads) in every
/// Python process started with it on `PYTHONPATH`: the script's, its
/// `multiprocessing` child (forked: the profile carries over) and its
/// `subprocess` child. Each call of a function of the script
/// (`FCTRACE_TEST_TARGET`) is a line `module.qualname` appended at once
/// to `<FCTRACE_TEST_COUNTS>.<pid>` (a forked child ends by `os._exit`:
/// nothing written at exit would survive).
const COUNT: &str = r#"import os
import sys
import threading

_target = os.environ["FCTRACE_TEST_TARGET"]
_prefix = os.environ["FCTRACE_TEST_COUNTS"]
_files = {}


def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == _target:
        pid = os.getpid()
        fd = _files.get(pid)
        if fd is None:
            fd = os.open("%s.%d" % (_prefix, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            _files[pid] = fd
        name = "%s.%s\n" % (frame.f_globals.get("__name__"), frame.f_code.co_qualname)
        os.write(fd, name.encode())


threading.setprofile(_profile)
sys.setprofile(_profile)
"#;

/// pyenv's CPython 3.11.7 built with --enable-shared (the machine image's
/// `python3`): the interpreter in lib/libpython3.11.so.
fn pyenv_python() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is not set");
    let root = Path::new(&home).join(".pyenv/versions/3.11.7");
    let p = root.join("bin/python3.11");
    assert!(
        p.is_file() && root.join("lib/libpython3.11.so").exists(),
        "{} with lib/libpython3.11.so is missing: pyenv's CPython 3.11.7 built \
         with --enable-shared (PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.11.7)",
        p.display()
    );
    p
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The oracle's counts for the script: a second run with the counting
/// `sitecustomize` ([`COUNT`]), summed over its processes (at least the
/// script's and its two children).
fn profile_counts(python: &Path, dir: &Path, app: &Path) -> BTreeMap<String, u64> {
    let site = dir.join("oracle");
    std::fs::create_dir_all(&site).unwrap();
    write(&site, "sitecustomize.py", COUNT);
    let prefix = dir.join("calls");
    let r = run(Command::new(python)
        .arg(app)
        .env("PYTHONPATH", &site)
        .env("FCTRACE_TEST_TARGET", app)
        .env("FCTRACE_TEST_COUNTS", &prefix));
    assert!(r.success(), "the counting run failed\n{}", r.describe());
    let mut counts = BTreeMap::new();
    let mut processes = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("calls.") {
            continue;
        }
        processes += 1;
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            *counts.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    assert!(
        processes >= 3,
        "the oracle saw {processes} processes: {counts:?}"
    );
    counts
}

/// fctrace's call count of each function of the script (`__main__.*`).
fn traced_counts(dir: &Path) -> BTreeMap<String, u64> {
    report(dir)
        .functions
        .into_iter()
        .filter(|f| f.name.starts_with("__main__."))
        .map(|f| (f.name, f.calls))
        .collect()
}

fn is_python(label: &str) -> bool {
    label.starts_with("__main__.")
}

/// Every call of `label` in the replay, with its ancestors (outermost first).
fn calls_of<'a>(tree: &'a Replay, label: &str) -> Vec<(&'a Node, Vec<&'a str>)> {
    let mut found = Vec::new();
    for t in &tree.threads {
        for root in &t.roots {
            root.walk(&mut Vec::new(), &mut |n, path| {
                if n.label == label {
                    found.push((n, path.to_vec()));
                }
            });
        }
    }
    found
}

/// The longest chain of `label` calls, each the nearest Python call
/// below the last (the interpreter's C functions between them passed
/// through: with the frame evaluation function, a Python call goes
/// through CPython's calling functions).
fn python_chain(n: &Node, label: &str) -> usize {
    fn below(n: &Node, label: &str) -> usize {
        n.children
            .iter()
            .map(|c| {
                if c.label == label {
                    python_chain(c, label)
                } else if is_python(&c.label) {
                    0
                } else {
                    below(c, label)
                }
            })
            .max()
            .unwrap_or(0)
    }
    usize::from(n.label == label) + below(n, label)
}

/// The line of `def NAME` in the script (1-based).
fn def_line(name: &str) -> usize {
    APP.lines()
        .position(|l| l.trim_start().starts_with(&format!("def {name}(")))
        .unwrap()
        + 1
}

/// Where the interpreter's C functions are traced (inside the program, or
/// a libpython with -l): Python nests with them. `frames`: Python calls
/// are seen by the frame evaluation function (3.11.4 and later, 3.12), so
/// each encloses its evaluation loop; else by a profile function called
/// from inside the loop, so each is inside it.
fn check_native_nesting(tree: &Replay, ctx: &str, frames: bool) {
    // A C function calling back into Python: the key function nests under
    // sorted's native code (at least the evaluation loop and the C
    // function that called it) inside main.
    for (node, path) in calls_of(tree, "__main__.by_length()") {
        assert!(node.closed && !node.unwound);
        let caller = path.iter().rposition(|l| is_python(l)).unwrap();
        assert_eq!(path[caller], "__main__.main()", "{ctx}: {path:?}");
        assert!(
            path.len() - caller > 2,
            "{ctx}: by_length directly under main: {path:?}"
        );
        if frames {
            assert!(!is_python(path.last().unwrap()), "{ctx}: {path:?}");
            assert_eq!(
                node.children.first().map(|c| c.label.as_str()),
                Some("_PyEval_EvalFrameDefault()"),
                "{ctx}: by_length's evaluation loop"
            );
        } else {
            assert_eq!(path.last(), Some(&"_PyEval_EvalFrameDefault()"), "{ctx}");
        }
    }
    // A libc call made by Python code nests under that Python function.
    let pid = calls_of(tree, "__main__.pid()");
    assert_eq!(pid.len(), 1, "{ctx}");
    let (pid, _) = pid[0];
    let mut getpid = Vec::new();
    pid.walk(&mut Vec::new(), &mut |n, path| {
        // (With -l, libc's own name for it.)
        if matches!(n.label.as_str(), "getpid()" | "__getpid()") {
            getpid.push(path.iter().filter(|l| is_python(l)).count());
        }
    });
    assert_eq!(getpid, vec![1], "{ctx}: getpid under pid()");
}

/// `c_traced`: the interpreter's C functions are traced (Debian's, inside
/// the program, or a libpython with -l). `frames`: the interpreter's
/// version has its Python functions seen by the frame evaluation function.
fn check_interpreter(python: &Path, opts: &[&str], ctx: &str, c_traced: bool, frames: bool) {
    let dir = scratch(&format!("python-{ctx}"));
    let app = write(&dir.path, "app.py", APP);
    let app_arg = app.to_str().unwrap();
    let stderr = |s: &str| without_fctrace_notes(s);

    // The same output, status and traceback as natively, for a clean run
    // and for one that ends by an uncaught exception.
    let native = run(Command::new(python).arg(&app));
    assert!(native.success(), "{}", native.describe());
    let rec = record_any(python, &[app_arg], opts);
    assert_same_behaviour_with(&native, &rec.run, &format!("{ctx}: app.py"), stderr);
    let boom_native = run(Command::new(python).arg(&app).arg("boom"));
    assert_eq!(boom_native.code(), Some(1), "{}", boom_native.describe());
    assert!(boom_native.stderr.contains("ValueError: 3"));
    let boom = record_any(python, &[app_arg, "boom"], opts);
    assert_same_behaviour_with(
        &boom_native,
        &boom.run,
        &format!("{ctx}: app.py boom"),
        stderr,
    );

    // Every function's calls, as the counting profile sees them.
    let want = profile_counts(python, &dir.path, &app);
    assert!(want.len() >= 12, "{ctx}: the oracle saw only {want:?}");
    assert_eq!(
        traced_counts(&rec.dir.path),
        want,
        "{ctx}: calls per function"
    );

    let tree = replay(&rec.dir.path);
    // Recursion nests: fib(10) calls itself 10 deep, each call a direct
    // child of its caller.
    let deepest = calls_of(&tree, "__main__.fib()")
        .iter()
        .map(|(n, _)| python_chain(n, "__main__.fib()"))
        .max()
        .unwrap_or(0);
    assert_eq!(deepest, 10, "{ctx}: fib's recursion");
    // Exceptions: risky raises for 0, 3 and 6 (caught): those calls are
    // unwound, the others return.
    let risky = calls_of(&tree, "__main__.risky()");
    let unwound = risky.iter().filter(|(n, _)| n.unwound).count();
    let raising = (0..7).filter(|x| x % 3 == 0).count();
    assert_eq!((risky.len(), unwound), (7, raising), "{ctx}: risky's exits");
    if c_traced {
        check_native_nesting(&tree, ctx, frames);
    }
    // With -l, sqlite3's library is traced: the query's sqlite3_step under
    // the Python function that ran it, and the SQL function's Python code
    // called back from inside sqlite3_step.
    if opts.contains(&"-l") {
        let steps = calls_of(&tree, "sqlite3_step()");
        assert!(!steps.is_empty(), "{ctx}: no sqlite3_step");
        for (_, path) in &steps {
            let caller = path.iter().rposition(|l| is_python(l));
            assert_eq!(
                caller.map(|i| path[i]),
                Some("__main__.query()"),
                "{ctx}: {path:?}"
            );
        }
        // The json module's C encoder and scanner (`_json`, an
        // extension module loaded by dlopen) under the Python functions
        // that used them.
        for (c, python) in [
            ("encoder_call()", "__main__.encode()"),
            ("scanner_call()", "__main__.decode()"),
        ] {
            let calls = calls_of(&tree, c);
            assert_eq!(calls.len(), 1, "{ctx}: {c}");
            assert!(calls[0].1.contains(&python), "{ctx}: {:?}", calls[0].1);
        }
        let doubles = calls_of(&tree, "__main__.double()");
        assert_eq!(doubles.len(), 2, "{ctx}");
        for (_, path) in doubles {
            let caller = path.iter().rposition(|l| is_python(l)).unwrap();
            assert_eq!(path[caller], "__main__.query()", "{ctx}: {path:?}");
            assert!(
                path[caller..].contains(&"sqlite3_step()"),
                "{ctx}: double not under sqlite3_step: {path:?}"
            );
        }
    }
    // Threads: each worker runs on a thread of its own.
    let workers: Vec<u64> = tree
        .threads
        .iter()
        .filter(|t| t.count("__main__.worker()") == 1)
        .map(|t| t.tid)
        .collect();
    assert_eq!(workers.len(), 3, "{ctx}: worker threads");
    // The children: the forked multiprocessing child is a task of its own
    // where child_only, first called there, nests under in_child; the
    // subprocess runs spawned under its own main.
    let tid_of = |label: &str| {
        let tids: Vec<u64> = tree
            .threads
            .iter()
            .filter(|t| t.count(label) == 1)
            .map(|t| t.tid)
            .collect();
        assert_eq!(tids.len(), 1, "{ctx}: threads with {label}: {tids:?}");
        tids[0]
    };
    let (parent, forked, spawned) = (
        tid_of("__main__.children()"),
        tid_of("__main__.in_child()"),
        tid_of("__main__.spawned()"),
    );
    assert!(
        parent != forked && parent != spawned && forked != spawned,
        "{ctx}: {parent} {forked} {spawned}"
    );
    for (label, under) in [
        ("__main__.child_only()", "__main__.in_child()"),
        ("__main__.spawned()", "__main__.main()"),
    ] {
        let calls = calls_of(&tree, label);
        assert_eq!(calls.len(), 1, "{ctx}: {label}");
        assert!(calls[0].1.contains(&under), "{ctx}: {:?}", calls[0].1);
    }
    // The forked child met child_only first: a session of its own, said
    // to be forked (its functions its parent's).
    let summary = fctrace_on("info", &rec.dir.path, &[]);
    assert!(
        summary.contains(", forked from session "),
        "{ctx}: {summary}"
    );
    // Where each function is defined: `fctrace info --symbols`' list.
    let info = fctrace_on("info", &rec.dir.path, &["--symbols"]);
    for name in ["fib", "careful", "worker"] {
        let want = format!("__main__.{name} ({}:{})", app.display(), def_line(name));
        assert!(info.contains(&want), "{ctx}: no {want:?} in\n{info}");
    }

    // The uncaught exception unwinds main and the module (the script's
    // process's; the subprocess child's return).
    let boom_tree = replay(&boom.dir.path);
    for label in ["__main__.main()", "__main__.<module>()"] {
        let calls = calls_of(&boom_tree, label);
        let unwound = calls.iter().filter(|(n, _)| n.unwound).count();
        assert_eq!((calls.len(), unwound), (2, 1), "{ctx}: {label}");
    }
}

/// Debian's python3.11 (the interpreter inside the program, traced
/// without -l).
#[test]
fn python_functions_debian_python3() {
    check_interpreter(&debian_python(), &[], "debian", true, false);
}

/// pyenv's shared-library build, with -l (the interpreter in libpython).
#[test]
fn python_functions_pyenv_shared() {
    check_interpreter(&pyenv_python(), &["-l"], "pyenv", true, true);
}

/// pyenv's CPython 3.12 and 3.13 (the machine image's `--enable-shared`
/// builds), without -l: Python functions only (the interpreter in its
/// library untraced), counted and nested as under 3.11.
#[test]
fn python_functions_pyenv_3_12() {
    check_interpreter(
        &pyenv_python_version("3.12.1"),
        &[],
        "pyenv-3.12",
        false,
        true,
    );
}

#[test]
fn python_functions_pyenv_3_13() {
    check_interpreter(
        &pyenv_python_version("3.13.0"),
        &[],
        "pyenv-3.13",
        false,
        false,
    );
}
