//! thread_endings.c: threads that end abnormally. pthread_exit three
//! frames down and pthread_cancel of a thread blocked in read() three
//! frames down are forced unwinding: every frame the thread leaves gets its
//! exit marked ` (unwound)` before the thread is gone, cleanup handlers run
//! (under the frame that pushed them) exactly as without fctrace. Built as
//! plain C (glibc runs the cleanup handlers after an internal longjmp into
//! the frame that pushed them, then goes on with __pthread_unwind_next) and
//! with -fexceptions (the unwinder runs them from landing pads, then
//! _Unwind_Resume), and as C++ (the cleanup is an object's destructor, run
//! from a landing pad): the last two need the unwinder to walk through traced
//! frames, which glibc drives without going through fctrace's interposed
//! unwinder entry points. A detached thread still blocked when main returns
//! changes nothing in the program's output or status, and its trace shows
//! its calls still open.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::PathBuf;

struct Variant {
    label: &'static str,
    exe: PathBuf,
    /// Built by g++: names carry their parameter types, and
    /// pthread_cleanup_push is an object whose destructor runs the handler.
    cxx: bool,
    /// C with -fexceptions, or C++: cleanup handlers run from landing pads.
    exceptions: bool,
    /// Whether the handler is run by an out-of-line function (a call, at
    /// -O0): glibc's `__pthread_cleanup_routine` (C -fexceptions) or the
    /// cleanup object's constructor and destructor (C++).
    cleanup_calls: bool,
}

impl Variant {
    /// A function's label in the tree: `name()` in C, with its parameter
    /// types in C++.
    fn f(&self, name: &str, cxx_params: &str) -> String {
        if self.cxx {
            format!("{name}({cxx_params})")
        } else {
            format!("{name}()")
        }
    }

    /// A function's name in the report: the bare name in C, with its
    /// parameter types in C++.
    fn report_name(&self, name: &str, cxx_params: &str) -> String {
        if self.cxx {
            format!("{name}({cxx_params})")
        } else {
            name.to_string()
        }
    }
}

const CLEANUP_CLASS: &str = "__pthread_cleanup_class";

fn variants() -> Vec<Variant> {
    let mut v = Vec::new();
    for (label, flags, exceptions) in [
        ("-O0", vec!["-O0", "-pthread"], false),
        ("-O2", vec!["-O2", "-pthread"], false),
        (
            "-O0-fexceptions",
            vec!["-O0", "-fexceptions", "-pthread"],
            true,
        ),
        (
            "-O2-fexceptions",
            vec!["-O2", "-fexceptions", "-pthread"],
            true,
        ),
    ] {
        let exe = c_program("thread_endings.c", label, &flags);
        let dynsyms = tool(
            "readelf",
            &[OsStr::new("-sW"), OsStr::new("--dyn-syms"), exe.as_os_str()],
        );
        v.push(Variant {
            label,
            cleanup_calls: dynsyms.stdout.contains("__pthread_cleanup_routine"),
            exe,
            cxx: false,
            exceptions,
        });
    }
    for (label, opt) in [("-O0-cxx", "-O0"), ("-O2-cxx", "-O2")] {
        // g++ compiles a .c file as C++.
        let exe = Build::new(
            Lang::Cxx,
            &format!("thread_endings{label}"),
            &[program_source("thread_endings.c")],
            &[opt, "-pthread"],
        )
        .build();
        let cleanup_calls = function_symbols(&exe)
            .iter()
            .any(|s| s.name.contains(CLEANUP_CLASS));
        v.push(Variant {
            label,
            exe,
            cxx: true,
            exceptions: true,
            cleanup_calls,
        });
    }
    v
}

/// The one thread whose outermost call is `root`.
fn thread_tree(replay: &Replay, root: &str, ctx: &str) -> String {
    let t: Vec<&ThreadTree> = replay
        .threads
        .iter()
        .filter(|t| t.roots.iter().any(|r| r.label == root))
        .collect();
    assert_eq!(t.len(), 1, "{ctx}: threads starting with {root}");
    outline(&t[0].roots)
}

/// How a cleanup handler shows up at `depth`, by variant.
fn cleanup_lines(v: &Variant, depth: usize) -> String {
    let pad = "  ".repeat(depth);
    let cleanup = v.f("cleanup", "void*");
    if !v.exceptions {
        format!("{pad}{cleanup}\n{pad}__pthread_unwind_next() (unwound)\n")
    } else if v.cleanup_calls && v.cxx {
        format!(
            "{pad}{CLEANUP_CLASS}::~{CLEANUP_CLASS}()\n{pad}  {cleanup}\n{pad}_Unwind_Resume() (unwound)\n"
        )
    } else if v.cleanup_calls {
        format!(
            "{pad}__pthread_cleanup_routine()\n{pad}  {cleanup}\n{pad}_Unwind_Resume() (unwound)\n"
        )
    } else {
        format!("{pad}{cleanup}\n{pad}_Unwind_Resume() (unwound)\n")
    }
}

/// What pthread_cleanup_push itself calls, by variant.
fn push_lines(v: &Variant, depth: usize) -> String {
    let pad = "  ".repeat(depth);
    if !v.exceptions {
        format!("{pad}__sigsetjmp()\n{pad}__pthread_register_cancel()\n")
    } else if v.cxx && v.cleanup_calls {
        format!("{pad}{CLEANUP_CLASS}::{CLEANUP_CLASS}(void (*)(void*), void*)\n")
    } else {
        String::new()
    }
}

#[test]
fn pthread_exit_from_deep_inside() {
    for v in variants() {
        let native = run_native(&v.exe, &["exit"]);
        assert_eq!(native.stdout, "exit: cleanups=1 ret=42\n");
        let rec = record(&v.exe, &["exit"], &[]);
        assert_same_behaviour(&native, &rec.run, v.label);
        let ctx = format!("{} (trace {})", v.label, rec.dir.path.display());
        let replay = replay(&rec.dir.path);
        let want = format!(
            "{} (unwound)\n  {} (unwound)\n{}    {} (unwound)\n      pthread_exit() (unwound)\n{}",
            v.f("x_outer", "void*"),
            v.f("x_middle", "int"),
            push_lines(&v, 2),
            v.f("x_inner", "int"),
            cleanup_lines(&v, 2)
        );
        assert_outline_eq(
            &thread_tree(&replay, &v.f("x_outer", "void*"), &ctx),
            &want,
            &ctx,
        );
        let run_exit = v.f("run_exit", "int");
        let keep = [
            "main()",
            run_exit.as_str(),
            "pthread_create()",
            "pthread_join()",
            "printf()",
        ];
        assert_outline_eq(
            &outline(&project(std::slice::from_ref(replay.main()), &|l| {
                keep.contains(&l)
            })),
            &format!(
                "main()\n  {run_exit}\n    pthread_create()\n    pthread_join()\n  printf()\n"
            ),
            &ctx,
        );
    }
}

#[test]
fn pthread_cancel_of_a_blocked_thread() {
    for v in variants() {
        let native = run_native(&v.exe, &["cancel"]);
        assert_eq!(native.stdout, "cancel: cleanups=2 canceled=1\n");
        let rec = record(&v.exe, &["cancel"], &[]);
        assert_same_behaviour(&native, &rec.run, v.label);
        let ctx = format!("{} (trace {})", v.label, rec.dir.path.display());
        let replay = replay(&rec.dir.path);
        let want = format!(
            "{} (unwound)\n{}  {} (unwound)\n{}    {} (unwound)\n      sem_post()\n      read() (unwound)\n{}{}",
            v.f("c_outer", "void*"),
            push_lines(&v, 1),
            v.f("c_middle", "int"),
            push_lines(&v, 2),
            v.f("c_inner", "int"),
            cleanup_lines(&v, 2),
            cleanup_lines(&v, 1)
        );
        assert_outline_eq(
            &thread_tree(&replay, &v.f("c_outer", "void*"), &ctx),
            &want,
            &ctx,
        );
    }
}

#[test]
fn detached_thread_still_running_at_exit() {
    for v in variants() {
        let native = run(std::process::Command::new(&v.exe).arg("detached"));
        assert_eq!(native.code(), Some(3), "{}", native.describe());
        assert_eq!(
            native.stdout,
            "detached: main returns while the thread waits\n"
        );
        let rec = record_any(&v.exe, &["detached"], &[]);
        assert_eq!(rec.run.code(), Some(3), "{}", rec.run.describe());
        assert_same_behaviour(&native, &rec.run, v.label);
        let ctx = format!("{} (trace {})", v.label, rec.dir.path.display());
        let replay = replay(&rec.dir.path);
        assert_outline_eq(
            &thread_tree(&replay, &v.f("d_outer", "void*"), &ctx),
            &format!(
                "{} (open)\n  {} (open)\n    gettid()\n    sem_post()\n    read() (open)\n",
                v.f("d_outer", "void*"),
                v.f("d_inner", "")
            ),
            &ctx,
        );
        let rep = report(&rec.dir.path);
        assert_eq!(rep.lost_events, 0, "{ctx}");
        assert_eq!(rep.calls(&v.report_name("d_inner", "")), 1, "{ctx}");
    }
}

/// Hundreds of threads ended each way: counts equal callgrind's.
#[test]
fn thread_endings_counts_match_callgrind() {
    for v in variants() {
        let args = ["loop", "200"];
        let native = run_native(&v.exe, &args);
        assert_eq!(native.stdout, "loop: cleanups=600\n");
        let (rep, _) = assert_counts_match_callgrind(&v.exe, &args, &CompareOptions::default());
        let calls = |name: &str, params: &str| rep.calls(&v.report_name(name, params));
        assert_eq!(calls("cleanup", "void*"), 600, "{}", v.label);
        assert_eq!(calls("x_inner", "int"), 200, "{}", v.label);
        assert_eq!(calls("c_inner", "int"), 200, "{}", v.label);
        let rec = record(&v.exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, v.label);
        // Every call of every thread was closed (returned or unwound).
        let replay = replay(&rec.dir.path);
        for t in &replay.threads {
            assert_all_closed(&t.roots, v.label);
        }
    }
}
