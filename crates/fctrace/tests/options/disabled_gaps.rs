//! Tracing turned on by a `trace_on` trigger inside calls entered while it
//! was off (`--disable`), in a thread (issue 10, "What is shown is right"
//! 1): the agent records the calls open where tracing resumed and when
//! each ends, so live mode, `record` with the display filter then
//! `replay`, and `record` then `replay` with it give the same tree, the
//! one derived from record_filters.c's source. (tests/processes/fork_filters.rs has
//! the same over forked children.)

use fctrace_testkit::*;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn program() -> PathBuf {
    c_program("record_filters.c", "-O0", &["-O0", "-pthread"])
}

fn unwind_program() -> PathBuf {
    cxx_program("resume_unwind.cpp", "O1", &["-O1"])
}

/// A replay (or live) output's call lines as `T<n> <call>`, n numbering
/// the threads in order of appearance; headers and durations dropped.
fn normalized(text: &str) -> String {
    let mut tids: HashMap<u64, usize> = HashMap::new();
    let mut out = String::new();
    for line in text.lines() {
        let Some((_, call)) = line.split_once("] | ") else {
            continue;
        };
        let tid = split_replay_line(line)
            .unwrap_or_else(|e| panic!("unexpected replay line {line:?}: {e}"))
            .tid;
        let n = tids.len();
        let t = *tids.entry(tid).or_insert(n);
        out.push_str(&format!("T{t} {call}\n"));
    }
    out
}

/// The three trees of `mode` with the recording options `rec_opts` and
/// the display filter `filter`: live mode, `record` with both then
/// `replay`, and `record` then `replay` with the filter. Checks the
/// program's behaviour each time, that the three are equal and that the
/// replay has no warning; returns the tree.
fn three_ways(mode: &str, rec_opts: &[&str], filter: &[&str]) -> String {
    three_ways_of(&program(), mode, rec_opts, filter)
}

/// [`three_ways`] of program `exe`, run with the argument `mode` (none if
/// empty).
fn three_ways_of(exe: &Path, mode: &str, rec_opts: &[&str], filter: &[&str]) -> String {
    let exe = exe.to_path_buf();
    let args: &[&str] = if mode.is_empty() { &[] } else { &[mode] };
    let native = run_native(&exe, args);
    let ctx = format!("{mode}: record {rec_opts:?}, filter {filter:?}");

    let mut live_args: Vec<&OsStr> = rec_opts.iter().chain(filter).map(OsStr::new).collect();
    live_args.push(exe.as_os_str());
    live_args.extend(args.iter().map(OsStr::new));
    let live = fctrace(&live_args);
    assert_eq!(live.code(), Some(0), "{}", live.describe());
    assert!(
        live.stdout.starts_with(&native.stdout),
        "{ctx}: live output\n{}",
        live.describe()
    );
    let live_tree = normalized(&live.stdout[native.stdout.len()..]);

    let both: Vec<&str> = rec_opts.iter().chain(filter).copied().collect();
    let rec = record(&exe, args, &both);
    assert_same_behaviour(&native, &rec.run, &ctx);
    let recorded_tree = normalized(&replay_text(&rec.dir.path));

    let full = record(&exe, args, rec_opts);
    assert_same_behaviour(&native, &full.run, &ctx);
    let replayed_tree = normalized(&fctrace_on_quietly("replay", &full.dir.path, filter));

    assert_eq!(recorded_tree, live_tree, "{ctx}: record+replay vs live");
    assert_eq!(
        replayed_tree, live_tree,
        "{ctx}: replay-time filter vs live"
    );
    live_tree
}

const TOP: &str =
    "top() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n  leaf();\n} /* top */\n";

/// The lines of a call entered while tracing was off (its entry not
/// recorded) with `body` inside it: `call` opens (`main()`), `name`
/// closes (`main`).
fn entered_off(call: &str, name: &str, body: &str) -> String {
    format!(
        "{call} {{ /* entered while tracing was off */\n{}}} /* {name} */ (entry not recorded)\n",
        prefix_lines(body, "  ")
    )
}

/// Without filters, the calls open where a `trace_on` trigger turned
/// tracing on (entered while it was off) open the tree, outermost first,
/// so that what follows is drawn at its depth; each closes at its return,
/// without duration (its entry was not recorded).
#[test]
fn calls_open_where_tracing_turned_on_open_the_tree() {
    let opts = ["--disable", "-T", "on@trace_on"];
    // "basic": main calls top(1), other(2), off(3), top(4) with tracing
    // off, then on(5) (where it turns on), top(6) and printf.
    let t = three_ways("basic", &opts, &[]);
    let expected = format!(
        "main() {{ /* entered while tracing was off */\n\
         {}}} /* main */ (entry not recorded)\n",
        prefix_lines(
            &format!("on() {{\n  leaf();\n}} /* on */\n{TOP}printf();\n"),
            "  "
        )
    );
    assert_eq!(t, prefix_lines(&expected, "T0 "));
    // "threads": the worker thread calls off() (where tracing turns on
    // with off@trace_on), then top(2), and returns; main never calls off.
    let t = three_ways("threads", &["--disable", "-T", "off@trace_on"], &[]);
    let expected = format!(
        "worker() {{ /* entered while tracing was off */\n\
         {}}} /* worker */ (entry not recorded)\n",
        prefix_lines(&format!("off() {{\n  leaf();\n}} /* off */\n{TOP}"), "  ")
    );
    assert_eq!(t, prefix_lines(&expected, "T0 "));
}

/// `replay --last N`: the calls open where tracing turned on that are
/// still open at the first call shown open before it, as in the whole
/// tree (with -F main too).
#[test]
fn last_calls_open_inside_the_calls_entered_while_tracing_was_off() {
    let opts = ["--disable", "-T", "on@trace_on"];
    let native = run_native(&program(), &["basic"]);
    let rec = record(&program(), &["basic"], &opts);
    assert_same_behaviour(&native, &rec.run, "--disable");
    // main's last call is printf (the exit-time calls after main are the
    // C runtime's, hidden).
    let expected = prefix_lines(&entered_off("main()", "main", "printf();\n"), "T0 ");
    for filter in [&[][..], &["-F", "main"]] {
        let mut args = vec!["--last", "1"];
        args.extend_from_slice(filter);
        let t = normalized(&fctrace_on_quietly("replay", &rec.dir.path, &args));
        assert_eq!(t, expected, "{filter:?}");
    }
}

/// The recording's -F holds under a display filter: `replay -N other`
/// over a `record -F on` trace opens none of the calls open where tracing
/// turned on (main is outside on: the agent recorded nothing of it), as
/// `replay` alone does not.
#[test]
fn the_recordings_filter_holds_for_the_calls_open_where_tracing_turned_on() {
    let native = run_native(&program(), &["basic"]);
    let opts = ["--disable", "-T", "on@trace_on", "-F", "on"];
    let rec = record(&program(), &["basic"], &opts);
    assert_same_behaviour(&native, &rec.run, "-F on");
    let expected = "T0 on() {\nT0   leaf();\nT0 } /* on */\n";
    assert_eq!(normalized(&replay_text(&rec.dir.path)), expected);
    let t = normalized(&fctrace_on_quietly(
        "replay",
        &rec.dir.path,
        &["-N", "other"],
    ));
    assert_eq!(t, expected);
}

#[test]
fn trace_on_inside_a_filter_function_in_a_thread() {
    // "threads": the worker thread calls off() then top(2) and returns;
    // tracing turns on at off(), inside worker (entered while it was
    // off). Under -F worker: worker, opened where tracing turned on,
    // with off and top inside, in the worker's thread (the only one
    // recorded: main never calls off). worker's own entry and return are
    // not recorded.
    let worker_calls = format!("off() {{\n  leaf();\n}} /* off */\n{TOP}");
    let t = three_ways(
        "threads",
        &["--disable", "-T", "off@trace_on"],
        &["-F", "worker"],
    );
    assert_eq!(
        t,
        prefix_lines(&entered_off("worker()", "worker", &worker_calls), "T0 ")
    );
    // -D 1 counts from the first recorded level: worker, entered before
    // tracing was on, is not a level (as in the agent).
    let t = three_ways(
        "threads",
        &["--disable", "-T", "off@trace_on"],
        &["-F", "worker", "-D", "1"],
    );
    assert_eq!(
        t,
        prefix_lines(
            &entered_off("worker()", "worker", "off();\ntop();\n"),
            "T0 "
        )
    );
    // -N worker hides everything the worker does.
    let t = three_ways(
        "threads",
        &["--disable", "-T", "off@trace_on"],
        &["-N", "worker"],
    );
    assert_eq!(t, "");
}

#[test]
fn trace_on_inside_a_filter_function_then_its_return() {
    // "basic": main calls top(1), other(2), off(3), top(4), on(5), top(6),
    // then printf. Tracing turns on at on(), inside main (entered while it
    // was off): under -F main, main opened there, with on and what main
    // calls after it inside; nothing after main's return (the exit-time
    // calls are outside main).
    let t = three_ways(
        "basic",
        &["--disable", "-T", "on@trace_on"],
        &["-F", "main"],
    );
    let expected = format!("on() {{\n  leaf();\n}} /* on */\n{TOP}printf();\n");
    assert_eq!(
        t,
        prefix_lines(&entered_off("main()", "main", &expected), "T0 ")
    );
    // Under -N main: only the exit-time calls after main's return, as an
    // unfiltered recording shows them after main: the C runtime's, hidden
    // unless --show-runtime.
    let t = three_ways(
        "basic",
        &["--disable", "-T", "on@trace_on"],
        &["-N", "main"],
    );
    assert_eq!(t, "");
    let disabled = record(&program(), &["basic"], &["--disable", "-T", "on@trace_on"]);
    let t = normalized(&fctrace_on_quietly(
        "replay",
        &disabled.dir.path,
        &["-N", "main", "--show-runtime"],
    ));
    let all = normalized(&fctrace_on(
        "replay",
        &record(&program(), &["basic"], &[]).dir.path,
        &["--show-runtime"],
    ));
    let end = all
        .find("T0 } /* main */\n")
        .unwrap_or_else(|| panic!("main does not return in\n{all}"));
    let exit_calls = &all[end + "T0 } /* main */\n".len()..];
    assert!(!exit_calls.is_empty(), "{all}");
    assert_eq!(t, exit_calls);
    // Under -F top: top(6) only (main, around it, is not shown).
    let t = three_ways("basic", &["--disable", "-T", "on@trace_on"], &["-F", "top"]);
    assert_eq!(t, prefix_lines(TOP, "T0 "));
}

#[test]
fn open_calls_ended_by_an_exception() {
    // resume_unwind.cpp: tracing turns on at on(), inside thrower <
    // passthru < catcher < main; the exception leaves thrower and passthru
    // together (two ends at once), then catcher's handler runs. Those of
    // the four the filter shows open where tracing turned on; each closes
    // at its end.
    let exe = unwind_program();
    assert_eq!(run_native(&exe, &[]).stdout, "5\n");
    let opts = ["--disable", "-T", "on@trace_on"];
    // What thrower runs after on() until the throw leaves it.
    let throw = "on(int) {\n  leaf(int);\n} /* on(int) */\n__cxa_allocate_exception();\n\
                 std::runtime_error::runtime_error(char const*);\n__cxa_throw(); (unwound)\n";
    // catcher's handler.
    let handler = "__cxa_begin_catch();\nleaf(int);\n__cxa_end_catch() {\n  \
                   std::runtime_error::~runtime_error();\n} /* __cxa_end_catch */\n";
    let thrown = entered_off(
        "passthru(int)",
        "passthru(int)",
        &entered_off("thrower(int)", "thrower(int)", throw),
    );
    let t = three_ways_of(&exe, "", &opts, &["-F", "passthru"]);
    assert_eq!(t, prefix_lines(&thrown, "T0 "), "-F passthru");
    let caught = entered_off(
        "catcher(int)",
        "catcher(int)",
        &format!("{thrown}{handler}"),
    );
    let t = three_ways_of(&exe, "", &opts, &["-F", "catcher"]);
    assert_eq!(t, prefix_lines(&caught, "T0 "), "-F catcher");
    let t = three_ways_of(&exe, "", &opts, &["-F", "main"]);
    let main_calls = format!("{caught}leaf(int);\nprintf();\n");
    assert_eq!(
        t,
        prefix_lines(&entered_off("main()", "main", &main_calls), "T0 "),
        "-F main"
    );
    // -N passthru: only what comes after it, in catcher and main, and
    // after main. on() is not shown: the calls open there are not opened
    // (the agent records them only at an entry it records).
    let t = three_ways_of(&exe, "", &opts, &["-N", "passthru", "-F", "main"]);
    assert_eq!(
        t,
        prefix_lines(&format!("{handler}leaf(int);\nprintf();\n"), "T0 "),
        "-N passthru -F main"
    );
}
