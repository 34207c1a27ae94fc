//! Record-time filters and triggers (`-F`, `-N`, `-D`, `-T`, `--disable`,
//! `--signal`), applied by the agent: the recorded trees are exact, the
//! program behaves as without them, and `record -X; replay` gives the same
//! tree as `record; replay -X` (the display-side filters).
//! record_filters.c is built at -O0 (every function patchable).

use fctrace_testkit::*;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn program() -> PathBuf {
    c_program("record_filters.c", "-O0", &["-O0", "-pthread"])
}

/// The replay text of a trace (with `opts`), each line as `T<n> <call>`
/// where n numbers the threads in order of appearance; headers and
/// durations dropped.
fn tree(dir: &Path, opts: &[&str]) -> String {
    // Task by task: the threads of two runs interleave differently.
    let ordered: Vec<&str> = opts.iter().copied().chain(["--task-order"]).collect();
    let text = fctrace_on("replay", dir, &ordered);
    let mut tids: HashMap<u64, usize> = HashMap::new();
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let tid = split_replay_line(line)
            .unwrap_or_else(|e| panic!("unexpected replay line {line:?}: {e}"))
            .tid;
        let call = line.split_once("] | ").unwrap().1;
        let n = tids.len();
        let t = *tids.entry(tid).or_insert(n);
        out.push_str(&format!("T{t} {call}\n"));
    }
    out
}

/// The lines of `main()`'s call, `main() {` to `} /* main */` included,
/// without the thread prefix (only its thread's: the tree interleaves the
/// threads by time).
fn main_call(tree: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    let mut thread = "";
    for l in tree.lines() {
        let (tag, text) = l.split_once(' ').unwrap_or(("", ""));
        if !inside && (text == "main() {" || text == "main();") {
            inside = true;
            thread = tag;
        }
        if inside && tag != thread {
            continue;
        }
        if inside {
            out.push_str(text);
            out.push('\n');
        }
        if text == "} /* main */" || text == "main();" {
            inside = false;
        }
    }
    out
}

/// The main thread's lines after main()'s return (the exit-time calls),
/// without the thread prefix.
fn after_main(tree: &str) -> String {
    let t0: Vec<&str> = tree.lines().filter_map(|l| l.strip_prefix("T0 ")).collect();
    let end = t0
        .iter()
        .position(|l| *l == "} /* main */")
        .unwrap_or_else(|| panic!("main does not return in\n{tree}"));
    prefix_lines(&t0[end + 1..].join("\n"), "")
}

/// Records `mode` with `opts` and checks the program behaves as natively
/// (`native`: false when the options change what it does on purpose, a
/// signal that would kill it); returns the recorded tree.
#[track_caller]
fn record_tree(mode: &str, opts: &[&str], native: bool) -> String {
    let exe = program();
    let rec = record_any(&exe, &[mode], opts);
    if native {
        let n = run(std::process::Command::new(&exe).arg(mode));
        assert_same_behaviour(&n, &rec.run, &format!("{mode} {opts:?}"));
    } else {
        assert!(rec.run.success(), "{}", rec.run.describe());
    }
    tree(&rec.dir.path, &[])
}

/// `record -X; replay` == `record; replay -X`, and returns that tree.
#[track_caller]
fn same_as_replay(mode: &str, opts: &[&str]) -> String {
    let filtered = record_tree(mode, opts, true);
    let exe = program();
    let rec = record(&exe, &[mode], &[]);
    let replayed = tree(&rec.dir.path, opts);
    assert_eq!(
        filtered, replayed,
        "{mode} {opts:?}: record-time filtering differs from replay-time filtering\n\
         --- record {opts:?}; replay ---\n{filtered}--- record; replay {opts:?} ---\n{replayed}"
    );
    filtered
}

const TOP: &str =
    "top() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n  leaf();\n} /* top */\n";

fn indent(s: &str, n: usize) -> String {
    prefix_lines(s, &"  ".repeat(n))
}

#[test]
fn filter_only_top() {
    let t = same_as_replay("basic", &["-F", "top"]);
    assert_eq!(t.replace("T0 ", ""), TOP.repeat(3));
    // With a depth: top is level 1.
    let t = same_as_replay("basic", &["-F", "top", "-D", "2"]);
    let top2 = "top() {\n  mid();\n  leaf();\n} /* top */\n";
    assert_eq!(t.replace("T0 ", ""), top2.repeat(3));
    // -F with -N inside it.
    let t = same_as_replay("basic", &["-F", "top", "-N", "mid"]);
    let top_no_mid = "top() {\n  leaf();\n} /* top */\n";
    assert_eq!(t.replace("T0 ", ""), top_no_mid.repeat(3));
    // Two -F, one by regex.
    let t = same_as_replay("basic", &["-F", "^oth", "-F", "on"]);
    let expected = "other() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n} /* other */\non() {\n  leaf();\n} /* on */\n";
    assert_eq!(t.replace("T0 ", ""), expected);
}

#[test]
fn notrace_and_depth() {
    let t = same_as_replay("basic", &["-N", "mid", "-N", "leaf"]);
    let m = main_call(&t);
    assert!(!m.contains("mid") && !m.contains("leaf"), "{m}");
    assert!(
        m.contains("  top();\n  other();\n  off();\n  top();\n  on();\n  top();\n"),
        "{m}"
    );
    assert_eq!(
        m,
        "main() {\n  strcmp();\n  top();\n  other();\n  off();\n  top();\n  on();\n  top();\n  \
         printf();\n} /* main */\n"
    );
    let t = same_as_replay("basic", &["-D", "1"]);
    // Only the outermost calls: main and the start-up/exit functions.
    assert!(t.contains("T0 main();\n"), "{t}");
    assert!(!t.contains("top"), "{t}");
    assert_eq!(main_call(&t), "main();\n");
    let t = same_as_replay("basic", &["-D", "3"]);
    assert_eq!(
        main_call(&t),
        "main() {\n  strcmp();\n  top() {\n    mid();\n    leaf();\n  } /* top */\n  other() {\n    mid();\n  } /* other */\n  off() {\n    leaf();\n  } /* off */\n  top() {\n    mid();\n    leaf();\n  } /* top */\n  on() {\n    leaf();\n  } /* on */\n  top() {\n    mid();\n    leaf();\n  } /* top */\n  printf();\n} /* main */\n"
    );
    // The generated -N entry and exit with a depth limit, and with a
    // trace_off inside the -N function (tracing stays off after it).
    same_as_replay("basic", &["-N", "mid", "-D", "2"]);
    let t = same_as_replay("longjmp", &["-N", "hidden", "-T", "thrower@trace_off"]);
    assert_eq!(
        main_call(&t),
        "main() {\n  strcmp();\n  strcmp();\n  _setjmp();\n} /* main */\n"
    );
    same_as_replay("longjmp", &["-N", "thrower", "-D", "3"]);
    // depth=N narrows for the function's duration.
    let t = same_as_replay("basic", &["-T", "top@depth=1", "-F", "main"]);
    assert_eq!(
        main_call(&t),
        "main() {\n  strcmp();\n  top();\n  other() {\n    mid() {\n      leaf();\n      leaf();\n    } /* mid */\n  } /* other */\n  off() {\n    leaf();\n  } /* off */\n  top();\n  on() {\n    leaf();\n  } /* on */\n  top();\n  printf();\n} /* main */\n"
    );
}

#[test]
fn trace_on_off_and_finish() {
    let t = same_as_replay("basic", &["-T", "off@trace_off", "-T", "on@trace_on"]);
    // off and what follows are hidden until on, which is shown.
    assert_eq!(
        main_call(&t),
        format!(
            "main() {{\n  strcmp();\n{}  other() {{\n    mid() {{\n      leaf();\n      leaf();\n    }} /* mid */\n  }} /* other */\n  on() {{\n    leaf();\n  }} /* on */\n{}  printf();\n}} /* main */\n",
            indent(TOP, 1),
            indent(TOP, 1)
        )
    );
    // finish: nothing after it, not even the exit of main.
    let t = same_as_replay("basic", &["-T", "other@finish"]);
    let expected = format!(
        "T0 main() {{\nT0   strcmp();\n{}T0 }} /* main */ (not returned)\n",
        prefix_lines(&indent(TOP, 1), "T0 ")
    );
    assert!(t.ends_with(&expected), "{t}");
    // --disable: nothing until on (and then everything), inside main,
    // entered while tracing was off.
    let t = record_tree("basic", &["--disable", "-T", "on@trace_on"], true);
    assert!(
        t.starts_with(&format!(
            "T0 main() {{ /* entered while tracing was off */\n\
             T0   on() {{\nT0     leaf();\nT0   }} /* on */\n{}T0   printf();\n\
             T0 }} /* main */ (entry not recorded)\n",
            prefix_lines(&indent(TOP, 1), "T0 ")
        )),
        "{t}"
    );
    // -F limits what trace_on turns on.
    let t = record_tree(
        "basic",
        &["--disable", "-T", "off@trace_on", "-F", "top"],
        true,
    );
    assert_eq!(t.replace("T0 ", ""), TOP.repeat(2));
}

/// A recursive -F function: the nested calls take the generated -F entry
/// (a plain call inside the region), the outermost one opens the region.
#[test]
fn recursive_filter_function() {
    const MID: &str = "mid() {\n  leaf();\n  leaf();\n} /* mid */\n";
    let rec1 = format!(
        "rec() {{\n  rec() {{\n    leaf();\n  }} /* rec */\n{}}} /* rec */\n",
        indent(MID, 1)
    );
    let rec2 = format!(
        "rec() {{\n{}{}}} /* rec */\n",
        indent(&rec1, 1),
        indent(MID, 1)
    );
    let t = same_as_replay("recurse", &["-F", "rec"]);
    assert_eq!(t.replace("T0 ", ""), format!("{rec2}{rec1}"));
    // Depth counts from the outermost -F call.
    let t = same_as_replay("recurse", &["-F", "rec", "-D", "2"]);
    assert_eq!(
        t.replace("T0 ", ""),
        "rec() {\n  rec();\n  mid();\n} /* rec */\nrec() {\n  rec();\n  mid();\n} /* rec */\n"
    );
    // -N inside, and a second -F function nested in the first.
    same_as_replay("recurse", &["-F", "rec", "-N", "mid"]);
    same_as_replay("recurse", &["-F", "rec", "-F", "mid"]);
    same_as_replay("recurse", &["-F", "rec", "-T", "rec@trace_off"]);
}

/// A -F-only function called from outside every region opens it in the
/// generated -F entry and closes it in the generated exit (the slow path
/// only for what is unusual): the same trees as filtering at replay.
#[test]
fn filter_regions_opened_outside() {
    const MID: &str = "mid() {\n  leaf();\n  leaf();\n} /* mid */\n";
    let t = same_as_replay("basic", &["-F", "leaf"]);
    assert_eq!(t.replace("T0 ", ""), "leaf();\n".repeat(13));
    let t = same_as_replay("basic", &["-F", "mid"]);
    assert_eq!(t.replace("T0 ", ""), MID.repeat(4));
    // Thousands of regions, and -F functions nested in each other.
    let t = same_as_replay("loop", &["-F", "leaf"]);
    assert_eq!(t.replace("T0 ", ""), "leaf();\n".repeat(3000));
    let t = same_as_replay("loop", &["-F", "leaf", "-F", "mid"]);
    assert_eq!(t.replace("T0 ", ""), format!("leaf();\n{MID}").repeat(1000));
    same_as_replay("loop", &["-F", "mid", "-N", "leaf"]);
    same_as_replay("loop", &["-F", "leaf", "-D", "1"]);
    same_as_replay("loop", &["-F", "mid", "-T", "mid@trace_off"]);
    same_as_replay("recurse", &["-F", "leaf"]);
    same_as_replay("recurse", &["-F", "mid"]);
    // Threads: each its own regions.
    let t = same_as_replay("threads", &["-F", "leaf"]);
    assert!(t.contains("T1 leaf();\n"), "{t}");
    same_as_replay("threads", &["-F", "mid", "-T", "off@trace_off,global"]);
    // A signal handler; a longjmp out of a -F function.
    same_as_replay("handler", &["-F", "leaf"]);
    same_as_replay("handler", &["-F", "handler"]);
    let t = same_as_replay("longjmp", &["-F", "thrower"]);
    assert_eq!(
        t.replace("T0 ", ""),
        "thrower() {\n  leaf();\n  longjmp(); (unwound)\n} /* thrower */ (unwound)\n"
    );
    same_as_replay("longjmp", &["-F", "leaf", "-F", "thrower"]);
    same_as_replay("longjmp", &["-F", "thrower", "-F", "top"]);
}

/// `-T FUNC@backtrace` at record time: replay prints the chain of callers
/// before each call of FUNC, as `record; replay -T FUNC@backtrace` does.
#[test]
fn backtrace_trigger() {
    let t = same_as_replay("basic", &["-T", "leaf@backtrace"]);
    let m = main_call(&t);
    assert!(
        m.contains(
            "  top() {\n    mid() {\n      /* backtrace: main > top > mid */\n      leaf();\n      \
             /* backtrace: main > top > mid */\n      leaf();\n    } /* mid */\n    \
             /* backtrace: main > top */\n    leaf();\n  } /* top */\n"
        ),
        "{m}"
    );
}

/// The agent records the chain of callers from the real stack, so that
/// callers hidden by record-time filters are in it (`-F leaf` records
/// nothing but leaf): the same lines as `record; replay -F leaf -T
/// leaf@backtrace`, which has every call.
#[test]
fn backtrace_of_hidden_callers() {
    let opts = ["-F", "leaf", "-T", "leaf@backtrace"];
    let t = same_as_replay("basic", &opts);
    let bt = |chain: &str| format!("/* backtrace: main > {chain} */\nleaf();\n");
    let top = [bt("top > mid"), bt("top > mid"), bt("top")].concat();
    let expected = [
        top.clone(),
        bt("other > mid").repeat(2),
        bt("off"),
        top.clone(),
        bt("on"),
        top,
    ]
    .concat();
    assert_eq!(t.replace("T0 ", ""), expected);
    // Another thread: its chain starts at its start routine.
    let t = same_as_replay("threads", &opts);
    assert!(
        t.contains("T1 /* backtrace: worker > off */\nT1 leaf();\n"),
        "{t}"
    );
    assert!(
        t.contains("T1 /* backtrace: worker > top > mid */\n"),
        "{t}"
    );
    // Recursion.
    let t = same_as_replay("recurse", &opts);
    assert!(
        t.contains("/* backtrace: main > rec > rec > rec */\nT0 leaf();\n"),
        "{t}"
    );
    assert!(
        t.contains("/* backtrace: main > rec > rec > mid */\n"),
        "{t}"
    );
    // A signal handler: the interrupted library call (traced where the
    // program calls it) is in the chain, as in the recorded calls.
    let t = same_as_replay("handler", &opts);
    assert!(
        t.contains("/* backtrace: main > raise > handler */\nT0 leaf();\n"),
        "{t}"
    );
    // Replay's own -T over the recorded backtraces prints one line.
    let rec = record_any(&program(), &["basic"], &opts);
    assert!(rec.run.success(), "{}", rec.run.describe());
    let plain = tree(&rec.dir.path, &[]);
    assert_eq!(plain, tree(&rec.dir.path, &["-T", "leaf@backtrace"]));
    assert_eq!(plain.replace("T0 ", ""), expected);
}

#[test]
fn longjmp_out_of_notrace_region() {
    let t = same_as_replay("longjmp", &["-N", "hidden"]);
    assert_eq!(
        main_call(&t),
        format!(
            "main() {{\n  strcmp();\n  strcmp();\n  _setjmp();\n{}  printf();\n}} /* main */\n",
            indent(TOP, 1)
        )
    );
    // A -F region left by longjmp ends too: nothing after it is shown.
    let t = same_as_replay("longjmp", &["-F", "hidden"]);
    assert_eq!(
        t.replace("T0 ", ""),
        "hidden() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n  thrower() {\n    leaf();\n    longjmp(); (unwound)\n  } /* thrower */ (unwound)\n} /* hidden */ (unwound)\n"
    );
}

#[test]
fn threads_per_thread_and_global() {
    // Per thread: the worker stops tracing at off(), main goes on.
    let t = same_as_replay("threads", &["-T", "off@trace_off"]);
    assert_eq!(
        main_call(&t),
        format!(
            "main() {{\n  strcmp();\n  strcmp();\n  strcmp();\n{}  pthread_create();\n{}  pthread_join();\n  printf();\n}} /* main */\n",
            indent(TOP, 1),
            indent(TOP, 1)
        )
    );
    assert!(t.contains("T1 worker();\n"), "{t}");
    // Global: main stops too (its later calls come after the worker's
    // off()); its open call still gets its exit.
    let t = same_as_replay("threads", &["-T", "off@trace_off,global"]);
    assert_eq!(
        main_call(&t),
        format!(
            "main() {{\n  strcmp();\n  strcmp();\n  strcmp();\n{}  pthread_create();\n}} /* main */\n",
            indent(TOP, 1)
        )
    );
    // --disable, turned on in the worker only, inside worker (entered
    // while tracing was off).
    let t = record_tree("threads", &["--disable", "-T", "off@trace_on"], true);
    assert_eq!(
        t,
        format!(
            "T0 worker() {{ /* entered while tracing was off */\n\
             T0   off() {{\nT0     leaf();\nT0   }} /* off */\n{}\
             T0 }} /* worker */ (entry not recorded)\n",
            prefix_lines(&indent(TOP, 1), "T0 ")
        )
    );
    // ... and in every thread from there on with `global`: main's top(3)
    // comes after the worker's off(). Task by task: the threads run at
    // the same time from there on.
    let exe = program();
    let opts = ["--disable", "-T", "off@trace_on,global"];
    let rec = record_any(&exe, &["threads"], &opts);
    let n = run(std::process::Command::new(&exe).arg("threads"));
    assert_same_behaviour(&n, &rec.run, &format!("threads {opts:?}"));
    let t = tree(&rec.dir.path, &[]);
    // After main returns: the C runtime's exit-time calls, as an
    // unfiltered recording of the same mode shows them.
    let all = record(&program(), &["threads"], &[]);
    let exit_calls = after_main(&tree(&all.dir.path, &[]));
    let t0 = prefix_lines(
        &format!("{TOP}pthread_join();\nprintf();\n{exit_calls}"),
        "T0 ",
    );
    // The worker, where off() turned tracing on: inside worker.
    let t1 = prefix_lines(
        &format!(
            "worker() {{ /* entered while tracing was off */\n{}}} /* worker */ (entry not recorded)\n",
            indent(&format!("off() {{\n  leaf();\n}} /* off */\n{TOP}"), 1)
        ),
        "T1 ",
    );
    assert_eq!(t, format!("{t0}{t1}"));
}

#[test]
fn signal_triggers() {
    // The program leaves SIGUSR1 at its default action (it would die):
    // the trigger is all the signal does.
    let t = record_tree(
        "signal",
        &["--disable", "--signal", "SIGUSR1@trace_on"],
        false,
    );
    assert!(
        t.starts_with(&format!(
            "T0 /* signal SIGUSR1 */\n{}T0 printf();\n",
            prefix_lines(TOP, "T0 ")
        )),
        "{t}"
    );
    // The program's own handler still runs (after the trigger).
    let t = record_tree("handler", &["--disable", "--signal", "USR1@trace_on"], true);
    assert!(
        t.starts_with(&format!(
            "T0 /* signal SIGUSR1 */\nT0 handler() {{\nT0   leaf();\nT0 }} /* handler */\n{}T0 printf();\n",
            prefix_lines(TOP, "T0 ")
        )),
        "{t}"
    );
    // A signal the program ignores stays ignored (and sigaction says so).
    let t = record_tree("ignore", &["--signal", "SIGUSR1@trace_off"], true);
    let m = main_call(&t);
    assert!(
        m.ends_with(&format!(
            "  sigaction();\n{}  raise();\n}} /* main */\n",
            indent(TOP, 1)
        )),
        "{m}"
    );
}

#[test]
fn options_in_info() {
    let exe = program();
    let rec = record(&exe, &["basic"], &["-F", "top", "-D", "2", "--disable"]);
    let info = info_text(&rec.dir.path);
    assert!(
        info.contains("Record options: -F top -D 2 --disable"),
        "{info}"
    );
    let rec = record(&exe, &["basic"], &[]);
    assert!(!info_text(&rec.dir.path).contains("Record options"));
}

#[test]
fn bad_specs_are_errors() {
    let exe = program();
    for opts in [
        &["-F", "f("][..],
        &["-T", "top@bogus"],
        &["--signal", "SIGKILL@trace_on"],
    ] {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("record"),
            OsStr::new("-d"),
            OsStr::new("/nonexistent/x"),
        ];
        args.extend(opts.iter().map(OsStr::new));
        args.push(exe.as_os_str());
        let r = fctrace(&args);
        assert!(!r.success(), "{opts:?} accepted\n{}", r.describe());
        assert!(r.stderr.contains("invalid"), "{}", r.describe());
    }
}

const EXCEPTIONS: &str = r#"
#include <cstdio>
#include <stdexcept>
extern "C" {
__attribute__((noinline)) int leaf(int x) { return x + 1; }
__attribute__((noinline)) void thrower(int x) { leaf(x); throw std::runtime_error("x"); }
__attribute__((noinline)) int hidden(int x) { leaf(x); thrower(x); return 0; }
__attribute__((noinline)) int top(int x) { return leaf(x) + leaf(x + 1); }
}
int main() {
    int s = 0;
    try {
        s += hidden(1);
    } catch (const std::exception &) {
        s += 10;
    }
    s += top(2);
    std::printf("%d\n", s);
    return 0;
}
"#;

#[test]
fn exception_out_of_notrace_region() {
    let src = write_cached_source("record_filters_exc.cpp", EXCEPTIONS);
    for opt in ["-O0", "-O2"] {
        let exe = Build::new(
            Lang::Cxx,
            &format!("record_filters_exc{opt}"),
            std::slice::from_ref(&src),
            &[opt],
        )
        .build();
        let native = run_native(&exe, &[]);
        let rec = record(&exe, &[], &["-N", "hidden"]);
        assert_same_behaviour(&native, &rec.run, opt);
        let t = tree(&rec.dir.path, &[]);
        let m = main_call(&t);
        // Everything of hidden() (the throw included) is hidden; the catch
        // and what follows are traced again.
        assert!(
            !m.contains("thrower") && !m.contains("__cxa_throw"),
            "{opt}: {m}"
        );
        assert!(
            m.contains("  top() {\n    leaf();\n    leaf();\n  } /* top */\n"),
            "{opt}: {m}"
        );
        assert!(m.contains("__cxa_begin_catch"), "{opt}: {m}");
        // The same tree as filtering at replay.
        let all = record(&exe, &[], &[]);
        assert_eq!(t, tree(&all.dir.path, &["-N", "hidden"]), "{opt}");
        // An exception out of a -F function (its region opened and closed
        // in generated code) ends the region.
        for opts in [&["-F", "thrower"][..], &["-F", "leaf"], &["-F", "hidden"]] {
            let rec = record(&exe, &[], opts);
            assert_same_behaviour(&native, &rec.run, &format!("{opt} {opts:?}"));
            let t = tree(&rec.dir.path, &[]);
            assert_eq!(t, tree(&all.dir.path, opts), "{opt} {opts:?}");
        }
    }
}

/// signals.c's sampling profiler (5000 SIGALRMs whose handler takes a
/// backtrace(), landing anywhere in a loop of traced calls) under
/// record-time filters: a signal that interrupts the filtered hot path,
/// the generated -N entry or exit included, in the middle of a
/// shadow-stack update must not break the backtrace or the returns.
#[test]
fn filters_under_a_signal_storm() {
    let exe = c_program("signals.c", "-O2", &["-O2"]);
    let args = ["timer", "5000", "bt"];
    let native = run_native(&exe, &args);
    for opts in [
        &["-N", "step"][..],
        &["-N", "work"],
        &["-D", "2"],
        &["-F", "work"],
        &["-F", "step"],
        &["-F", "step", "-F", "tick", "-F", "leaf"],
        &["-F", "leaf", "-F", "work"],
        // The fast flagged entry and the fast -R exit (generated code).
        &["-A", "step@arg1/i32", "-R", "step@retval/i32"],
        &[
            "-T",
            "step@trace_on",
            "-A",
            "step@arg1",
            "-R",
            "step@retval",
        ],
        // Depth regions opened and closed by generated code.
        &["-T", "work@depth=1"],
        &["-T", "step@depth=1", "-A", "step@arg1", "-R", "step@retval"],
    ] {
        let rec = record_any(&exe, &args, opts);
        assert_same_behaviour(&native, &rec.run, &format!("{opts:?}"));
        let (text, _tree) = replay_with_text(&rec.dir.path);
        if opts == ["-N", "step"] {
            assert!(!text.contains("step()"), "{opts:?}");
            assert!(text.contains("work()"), "{opts:?}");
        }
        if opts[..2] == ["-F", "step"] {
            // Each of the 500,000 calls opens and closes its own region
            // (generated code, under the signals): every one is there,
            // returned (those a signal landed in show its handler inside).
            let opened = text.matches("step() {").count();
            assert_eq!(text.matches("/* step */").count(), opened, "{opts:?}");
            assert_eq!(
                text.matches("step();").count() + opened,
                500_000,
                "{opts:?}"
            );
            assert!(!text.contains("not returned"), "{opts:?}");
        }
        if opts == ["-T", "work@depth=1"] {
            // The 200 calls of work, none of step under them.
            assert_eq!(text.matches("work()").count(), 200, "{opts:?}");
            assert!(!text.contains("step("), "{opts:?}");
            assert!(!text.contains("not returned"), "{opts:?}");
        }
        if opts.contains(&"step@retval") || opts.contains(&"step@retval/i32") {
            // Every one of the 500,000 calls of step(i) = 3i + 1, in
            // order, with its value and its return value (its handler
            // inside when a signal landed in it).
            let mut args = Vec::new();
            let mut rets = Vec::new();
            for l in text.lines() {
                let Some((_, t)) = l.split_once("] | ") else {
                    continue;
                };
                let t = t.trim_start();
                if let Some(r) = t.strip_prefix("step(") {
                    let (a, rest) = r.split_once(')').unwrap();
                    args.push(a.parse::<i64>().unwrap_or_else(|_| panic!("{l}")));
                    if let Some(v) = rest.strip_prefix(" = ").and_then(|v| v.strip_suffix(';')) {
                        rets.push(v.parse::<i64>().unwrap());
                    }
                } else if let Some(v) = t
                    .strip_prefix("} = ")
                    .and_then(|v| v.strip_suffix("; /* step */"))
                {
                    rets.push(v.parse::<i64>().unwrap());
                }
            }
            let expected: Vec<i64> = (0..200).flat_map(|_| 0..2500).collect();
            assert!(args == expected, "{opts:?}: the arguments of step differ");
            let expected: Vec<i64> = expected.iter().map(|i| 3 * i + 1).collect();
            let first = rets.iter().zip(&expected).position(|(a, b)| a != b);
            assert!(
                rets == expected,
                "{opts:?}: the return values of step differ: {} recorded, {} expected, \
                 first difference at {first:?}: {:?} for {:?}",
                rets.len(),
                expected.len(),
                first.map(|i| &rets[i.saturating_sub(2)..(i + 3).min(rets.len())]),
                first.map(|i| &expected[i.saturating_sub(2)..(i + 3).min(expected.len())]),
            );
            assert!(!text.contains("not returned"), "{opts:?}");
        }
    }
}
