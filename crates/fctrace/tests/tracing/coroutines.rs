//! ucontext coroutines (coro.c): a generator, two coroutines switching to
//! each other thousands of times (one of them finishes, the other is
//! abandoned suspended), a `uc_link` chain (a context finishing into a fresh
//! one, which finishes into main), and getcontext + setcontext used like
//! setjmp/longjmp inside one context.
//!
//! Rendering (docs/engine.md, "Coroutines"): a context's calls nest under
//! the `swapcontext` that switched to it; when a context is left for one
//! lower in the chain of switches (the one that switched to it, directly or
//! not), its open frames are closed there, marked `(unwound)`; when it is
//! resumed later, its new calls nest under the `swapcontext` that resumed
//! it, and its old frames do not show again.

use fctrace_testkit::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn coro(opt: &str) -> PathBuf {
    c_program("coro.c", opt, &[opt])
}

/// The program's functions and the context calls: libc's other functions
/// (atoi or strtol, strcmp, printf) and the C runtime are left out.
const KEEP: &[&str] = &[
    "main()",
    "run_generator()",
    "next_value()",
    "generator()",
    "produce()",
    "yield_value()",
    "consume()",
    "run_pingpong()",
    "ping()",
    "pong()",
    "bump()",
    "run_chain()",
    "task_a()",
    "task_b()",
    "run_jump()",
    "deep()",
    "leave()",
    "getcontext()",
    "makecontext()",
    "swapcontext()",
    "setcontext()",
];

/// `coro all 2`, written from coro.c.
const TREE_ALL_2: &str = r"
    main()
      run_generator()
        getcontext()
        makecontext()
        next_value()
          swapcontext()
            generator() (unwound)
              produce()
              yield_value() (unwound)
                swapcontext() (unwound)
        consume()
        next_value()
          swapcontext()
            produce()
            yield_value() (unwound)
              swapcontext() (unwound)
        consume()
        next_value()
          swapcontext()
      run_pingpong()
        getcontext()
        makecontext()
        getcontext()
        makecontext()
        swapcontext()
          ping()
            bump()
            swapcontext()
              pong() (unwound)
                bump()
                swapcontext() (unwound)
            bump()
            swapcontext()
              bump()
              swapcontext() (unwound)
      run_chain()
        getcontext()
        makecontext()
        getcontext()
        makecontext()
        swapcontext()
          task_a()
            bump()
          task_b()
            bump()
      run_jump()
        getcontext()
        deep() (unwound)
          deep() (unwound)
            deep() (unwound)
              leave() (unwound)
                setcontext()
        deep() (unwound)
          deep() (unwound)
            deep() (unwound)
              leave() (unwound)
                setcontext()
";

const STDOUT_ALL_2: &str =
    "gen: 2 values, sum 3\nping: 2 rounds, bumps 6\nchain: bumps 36\njump: 2\n";

fn check_tree(exe: &Path, opts: &[&str], expected: &str) {
    let native = run_native(exe, &["all", "2"]);
    assert_eq!(native.stdout, STDOUT_ALL_2, "{}", native.describe());
    let rec = record(exe, &["all", "2"], opts);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    assert!(
        !rec.run.stderr.contains("fctrace"),
        "{}",
        rec.run.describe()
    );
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    let kept = project(std::slice::from_ref(main), &|l| KEEP.contains(&l));
    assert_outline_eq(
        &outline(&kept),
        &expected_outline(expected),
        &format!(
            "{} {opts:?} (trace {})",
            exe.display(),
            rec.dir.path.display()
        ),
    );
}

#[test]
fn small_run_tree_o0() {
    check_tree(&coro("-O0"), &[], TREE_ALL_2);
}

#[test]
fn small_run_tree_o2() {
    check_tree(&coro("-O2"), &[], TREE_ALL_2);
}

/// With -l the same tree: libc's own swapcontext and setcontext are left
/// to the agent's wrappers, the program's calls are the ones recorded.
#[test]
fn small_run_tree_nest_libcall() {
    check_tree(&coro("-O2"), &["-l"], TREE_ALL_2);
}

/// Thousands of switches: same output as without fctrace, a well-nested
/// tree (checked by the parser) that closes every call, and counts equal
/// to callgrind's for every function of the program.
fn many_switches(opt: &str, record_opts: &'static [&'static str]) {
    let exe = coro(opt);
    let args = ["all", "3000"];
    let native = run_native(&exe, &args);
    let rec = record(&exe, &args, record_opts);
    let ctx = format!("trace {}", rec.dir.path.display());
    assert_same_behaviour(&native, &rec.run, &ctx);
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    assert_all_closed(std::slice::from_ref(main), &ctx);
    // Each coroutine's calls stay where they ran.
    assert_eq!(main.count("bump()"), 2 * 3000 + 2, "{ctx}");
    main.walk(&mut Vec::new(), &mut |n, path| {
        if n.label == "produce()" {
            assert!(
                path.contains(&"next_value()") && path.contains(&"swapcontext()"),
                "{ctx}: produce() outside the swapcontext that resumed the generator: {path:?}"
            );
        }
        if n.label == "consume()" {
            assert_eq!(
                path.last(),
                Some(&"run_generator()"),
                "{ctx}: consume() runs in main's context"
            );
        }
    });
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    let (cg, resumptions) = callgrind_entries(&exe, &args, &[&exe]);
    assert!(
        resumptions >= 3000,
        "callgrind saw {resumptions} switches into the middle of a function"
    );
    let opts = CompareOptions {
        record_opts,
        ..Default::default()
    };
    if let Err(msg) = compare_with_callgrind(&exe, &rep, &cg, &opts) {
        panic!("{msg}({ctx})");
    }
    assert_eq!(rep.calls("produce"), 3000, "{ctx}");
    assert_eq!(rep.calls("yield_value"), 3000, "{ctx}");
    assert_eq!(rep.calls("pong"), 1, "{ctx}");
}

#[test]
fn many_switches_o0() {
    many_switches("-O0", &[]);
}

#[test]
fn many_switches_o2() {
    many_switches("-O2", &[]);
}

#[test]
fn many_switches_o2_nest_libcall() {
    many_switches("-O2", &["-l"]);
}

/// callgrind's call counts, where a call is a transfer that enters the
/// callee at its first instruction.
///
/// callgrind tells calls from returns by the stack pointer: a context
/// switch to a stack below the current one that lands in the middle of a
/// function (a context resumed inside `swapcontext`, then returning into
/// its caller) is counted as a call of that function, one above as a
/// return. Its output with `--dump-instr=yes` gives each call's target
/// address: for the functions of `objects`, only calls whose target is the
/// function's entry are kept. (coro.c lays its stacks out so that each
/// fresh context starts below the context that starts it, so that its
/// first entry is seen as a call.) Returns the counts and the number of
/// calls dropped.
fn callgrind_entries(exe: &Path, args: &[&str], objects: &[&Path]) -> (Callgrind, u64) {
    let out = cache_root().join(format!("coroutines-cg-{}.out", unique_suffix()));
    let r = run_with_timeout(
        Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg("--demangle=no")
            .arg("--show-below-main=yes")
            .arg("--dump-instr=yes")
            .arg("--dump-line=no")
            .arg("--compress-pos=no")
            .arg("--compress-strings=no")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(exe)
            .args(args),
        Duration::from_secs(600),
    );
    assert!(r.success(), "callgrind run failed\n{}", r.describe());
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let entries: HashMap<PathBuf, HashMap<String, u64>> = objects
        .iter()
        .map(|o| {
            let m = function_symbols(o)
                .into_iter()
                .map(|s| (s.name, s.addr))
                .collect();
            (canonical(o), m)
        })
        .collect();
    let mut cg = Callgrind::default();
    let mut dropped = 0;
    let (mut ob, mut fun, mut cob, mut cfn) = (String::new(), String::new(), None, None);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            ob = v.to_string();
        } else if let Some(v) = line.strip_prefix("fn=") {
            fun = v.to_string();
            cob = None;
        } else if let Some(v) = line.strip_prefix("cob=") {
            cob = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("cfn=") {
            cfn = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("calls=") {
            let mut it = v.split_whitespace();
            let n: u64 = it.next().and_then(|x| x.parse().ok()).expect("calls=N");
            let target = it
                .next()
                .and_then(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok())
                .expect("calls=N TARGET (--dump-instr=yes)");
            let obj = cob.take().unwrap_or_else(|| ob.clone());
            let name = strip_rec_suffix(&cfn.take().expect("cfn= before calls=")).to_string();
            if let Some(syms) = entries.get(&canonical(Path::new(&obj))) {
                let entry = match name.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16).ok(),
                    None => syms.get(&name).copied(),
                };
                if entry.is_some_and(|e| e != target) {
                    dropped += n;
                    continue;
                }
            }
            *cg.calls.entry((obj.clone(), name.clone())).or_insert(0) += n;
            if obj == ob && strip_rec_suffix(&fun) == name {
                *cg.self_calls.entry((obj, name)).or_insert(0) += n;
            }
        }
    }
    cg.file = exe.to_path_buf();
    (cg, dropped)
}

/// A context started on the main thread, switched out, then resumed on
/// another thread (and abandoned there): each thread's tree shows the calls
/// that ran on it; nothing breaks.
fn resumed_on_another_thread(opt: &str) {
    let exe = coro(opt);
    let native = run_native(&exe, &["thread"]);
    assert_eq!(native.stdout, "thread: bumps 300\n");
    let rec = record(&exe, &["thread"], &[]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    let ctx = format!("{} (trace {})", exe.display(), rec.dir.path.display());
    let replay = replay(&rec.dir.path);
    let keep =
        |l: &str| KEEP.contains(&l) || ["co_body()", "resumer()", "run_thread()"].contains(&l);
    let main_thread = replay.main_thread().expect("the main thread");
    assert_outline_eq(
        &outline(&project(&main_thread.roots, &keep)),
        &expected_outline(
            r"
            main()
              run_thread()
                getcontext()
                makecontext()
                swapcontext()
                  co_body() (unwound)
                    bump()
                    swapcontext() (unwound)
            ",
        ),
        &ctx,
    );
    let other: Vec<&ThreadTree> = replay
        .threads
        .iter()
        .filter(|t| t.tid != main_thread.tid)
        .collect();
    assert_eq!(other.len(), 1, "{ctx}");
    assert_outline_eq(
        &outline(&project(&other[0].roots, &keep)),
        &expected_outline(
            r"
            resumer()
              swapcontext()
                bump()
                swapcontext() (unwound)
            ",
        ),
        &ctx,
    );
    let rep = report(&rec.dir.path);
    let (cg, _) = callgrind_entries(&exe, &["thread"], &[&exe]);
    if let Err(msg) = compare_with_callgrind(&exe, &rep, &cg, &CompareOptions::default()) {
        panic!("{msg}({ctx})");
    }
}

#[test]
fn resumed_on_another_thread_o0() {
    resumed_on_another_thread("-O0");
}

#[test]
fn resumed_on_another_thread_o2() {
    resumed_on_another_thread("-O2");
}
