//! Record-time filters on Python functions (issue 29): `-F`, `-N`, `-D`
//! and a `depth=N` trigger name Python functions as they name native
//! ones, and decide which Python calls (and the native calls under them)
//! are recorded, with the same meaning (uftrace's). Checked through both
//! ways fctrace sees Python calls: pyenv's 3.11.7 through the frame
//! evaluation function, the same with `FCTRACE_PYTHON_PROFILE=1` and
//! Debian's 3.11.2 through a profile function (the interpreter's C
//! functions traced too). The expected counts follow from the script: its
//! loop runs `TURNS` times.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const TURNS: u64 = 5;

const SCRIPT: &str = r#"def leaf(x):
    return x + 1


def inner(x):
    return leaf(x) * 2


def skipped(x):
    return leaf(x)


def outer(n):
    t = 0
    for i in range(n):
        t += inner(i) + skipped(i)
    return t


def other():
    return leaf(0)


def main():
    print(outer(5), other())


main()
"#;

/// The Python functions' call counts of a recording of the script.
fn counts(python: &Path, opts: &[&str], env: &[(&str, &str)]) -> BTreeMap<String, u64> {
    let dir = scratch("python-filters");
    let script = dir.path.join("filters.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let native = run(Command::new(python).arg(&script));
    assert!(native.success(), "{}", native.describe());
    let rec = record_env_with(python, &[script.to_str().unwrap()], opts, env);
    assert_same_behaviour_with(&native, &rec.run, &format!("{opts:?}"), |s| {
        without_fctrace_notes(s)
    });
    check_nesting(&rec.dir.path, &format!("{opts:?} {env:?}"), SCRIPT_CALLS);
    report(&rec.dir.path)
        .functions
        .into_iter()
        .filter(|f| f.name.starts_with("__main__."))
        .map(|f| (f.name.trim_start_matches("__main__.").to_string(), f.calls))
        .collect()
}

/// Each recorded Python call is closed, and its nearest recorded Python
/// ancestor (if any) is one of its callers in the script: the calls nest
/// as made, whatever the interpreter's C functions around them.
fn check_nesting(dir: &Path, ctx: &str, calls: &[(&str, &[&str])]) {
    let caller = |f: &str| -> &[&str] {
        calls
            .iter()
            .find(|(callee, _)| *callee == f)
            .map_or(&[], |(_, callers)| callers)
    };
    let tree = replay(dir);
    for t in &tree.threads {
        for root in &t.roots {
            root.walk(&mut Vec::new(), &mut |n, path| {
                let Some(f) = n.label.strip_prefix("__main__.") else {
                    return;
                };
                let f = f.split('(').next().unwrap_or(f);
                assert!(n.closed, "{ctx}: {f} not closed, under {path:?}");
                let up = path
                    .iter()
                    .rev()
                    .find_map(|l| l.strip_prefix("__main__."))
                    .map(|l| l.split('(').next().unwrap_or(l));
                if let Some(up) = up {
                    assert!(caller(f).contains(&up), "{ctx}: {f} under {up}: {path:?}");
                }
            });
        }
    }
}

/// Who calls whom in `SCRIPT`.
const SCRIPT_CALLS: &[(&str, &[&str])] = &[
    ("leaf", &["inner", "skipped", "other"]),
    ("inner", &["outer"]),
    ("skipped", &["outer"]),
    ("outer", &["main"]),
    ("other", &["main"]),
    ("main", &["<module>"]),
];

fn want(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

/// `python_only`: the interpreter's C functions are not traced (pyenv's
/// libpython without -l), so Python levels are the only ones `-D`
/// counts.
fn check(python: &Path, env: &[(&str, &str)], ctx: &str, python_only: bool) {
    let t = TURNS;
    // Only outer and what it calls.
    assert_eq!(
        counts(python, &["-F", "__main__.outer"], env),
        want(&[("outer", 1), ("inner", t), ("skipped", t), ("leaf", 2 * t)]),
        "{ctx}: -F"
    );
    // Without skipped and what it calls.
    assert_eq!(
        counts(
            python,
            &["-F", "__main__.outer", "-N", "__main__.skipped"],
            env
        ),
        want(&[("outer", 1), ("inner", t), ("leaf", t)]),
        "{ctx}: -F -N"
    );
    // A pattern: every function whose name ends in "er".
    assert_eq!(
        counts(python, &["-N", "__main__.*er"], env),
        want(&[("<module>", 1), ("main", 1), ("leaf", 0)])
            .into_iter()
            .filter(|(_, c)| *c > 0)
            .collect(),
        "{ctx}: -N pattern"
    );
    if python_only {
        // Two levels from outer.
        assert_eq!(
            counts(python, &["-F", "__main__.outer", "-D", "2"], env),
            want(&[("outer", 1), ("inner", t), ("skipped", t)]),
            "{ctx}: -F -D 2"
        );
        // inner alone, its leaf not: the other leaf calls are.
        assert_eq!(
            counts(python, &["-T", "__main__.inner@depth=1"], env),
            want(&[
                ("<module>", 1),
                ("main", 1),
                ("outer", 1),
                ("inner", t),
                ("skipped", t),
                ("other", 1),
                ("leaf", t + 1),
            ]),
            "{ctx}: depth=1 trigger"
        );
    }
}

#[test]
fn python_filters_through_the_frame_evaluation_function() {
    check(&pyenv_python_version("3.11.7"), &[], "pyenv 3.11.7", true);
}

#[test]
fn python_filters_through_a_profile_function() {
    check(
        &pyenv_python_version("3.11.7"),
        &[("FCTRACE_PYTHON_PROFILE", "1")],
        "pyenv 3.11.7, profile function",
        true,
    );
}

#[test]
fn python_filters_with_the_interpreter_traced() {
    check(&debian_python(), &[], "Debian python3.11", false);
}

/// `-A`/`-R` on a Python function: each argument's short form (integers,
/// floats, True/False/None, strings and bytes cut at `--max-string`,
/// `<TYPE object>` for the rest: no `__repr__` runs), a missing one shown
/// `?`, and the return value; through both ways, and where the
/// interpreter is traced (the values stay with their call).
const ARGS_SCRIPT: &str = r#"class Shape:
    def __init__(self, side):
        self.side = side


def parse(text, count, ratio, flag, blob, nothing, shape, big):
    return text.upper() * count


def main():
    print(parse("hello world", 2, 1.5, True, b"\x00ab", None, Shape(3), 2**70))


main()
"#;

/// Who calls whom in `ARGS_SCRIPT`.
const ARGS_CALLS: &[(&str, &[&str])] = &[
    ("Shape", &["<module>"]),
    ("Shape.__init__", &["main"]),
    ("parse", &["main"]),
    ("main", &["<module>"]),
];

fn check_args(python: &Path, env: &[(&str, &str)], ctx: &str) {
    let dir = scratch("python-args");
    let script = dir.path.join("args.py");
    std::fs::write(&script, ARGS_SCRIPT).unwrap();
    let spec = "__main__.parse@arg1,arg2,arg3,arg4,arg5,arg6,arg7,arg8,arg9";
    for extra in [&[][..], &["-F", "__main__.main"][..]] {
        let mut opts = vec![
            "-A",
            spec,
            "-R",
            "__main__.parse@retval",
            "--max-string",
            "8",
        ];
        opts.extend_from_slice(extra);
        let rec = record_env_with(python, &[script.to_str().unwrap()], &opts, env);
        assert!(rec.run.success(), "{ctx}: {}", rec.run.describe());
        check_nesting(&rec.dir.path, ctx, ARGS_CALLS);
        let text = replay_text(&rec.dir.path);
        let args = r#"__main__.parse("hello wo"..., 2, 1.5, True, "\0ab", None, <Shape object>, <int beyond 64 bits>, ?)"#;
        assert!(text.contains(args), "{ctx} {extra:?}: no {args} in\n{text}");
        assert!(
            text.contains(r#"= "HELLO WO"...;"#),
            "{ctx} {extra:?}: no return value in\n{text}"
        );
    }
}

#[test]
fn python_arguments_and_return_values() {
    check_args(&pyenv_python_version("3.11.7"), &[], "pyenv 3.11.7");
    check_args(
        &pyenv_python_version("3.11.7"),
        &[("FCTRACE_PYTHON_PROFILE", "1")],
        "pyenv 3.11.7, profile function",
    );
    check_args(&debian_python(), &[], "Debian python3.11");
}
