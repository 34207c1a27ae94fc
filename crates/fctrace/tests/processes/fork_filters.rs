//! Display filters over forked children (issue 10, "What is shown is
//! right" 1): a child forked inside `main` runs on inside `main`, so
//! `-F main` shows it. Live mode, `record` with the filter then `replay`,
//! and `record` then `replay` with the filter give the same tree, which is
//! the one derived from forks.c's source (fork, daemon(), vfork + exec,
//! and `--disable` with a trigger inside the `-F` function: the agent
//! records the calls open where the `trace_on` trigger turned tracing on,
//! so a replay-time `-F` knows that the `-F` function, entered before
//! tracing was on, is running).

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::Path;

fn forks_program() -> std::path::PathBuf {
    c_program("forks.c", "O1", &["-O1"])
}

/// The program's output, from its source: each child's work (leaf(1) is
/// 2), then what its parent prints once it has waited for it.
const OUTPUT: &str = "forked 2\nfork: 0\ndaemon 2\ndaemon: 1 byte\nexec 2\nvfork: 3\n";

/// A replay as `task N: ORIGIN` headers and the call lines (indent and
/// text after the tid column): what must not depend on pids or times.
fn normalized(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# task ") {
            let (id, _) = rest.split_once(':').unwrap();
            let origin = rest.rsplit(", ").next().unwrap();
            out.push_str(&format!("task {id}: {origin}\n"));
        } else if let Some((_, call)) = line.split_once("] | ") {
            out.push_str(call);
            out.push('\n');
        }
    }
    out
}

/// The tree under `-F main`, from forks.c: main's calls in task 0; the
/// forked child ends with_fork's `fork` (entered in the parent), works and
/// _exits; the daemon's first child ends `fork`, closes, and _exits inside
/// daemon; the daemon's child ends `daemon`, works, writes and _exits;
/// the exec'd program's main works.
const EXPECTED_F_MAIN: &str = "task 0: the program started
main() {
  with_fork() {
    fork();
    waitpid();
    printf();
    fflush();
  } /* with_fork */
  with_daemon() {
    pipe();
    fork();
    close();
    waitpid();
    read();
    read();
    printf();
    fflush();
  } /* with_daemon */
  with_vfork() {
    vfork();
    waitpid();
    printf();
    fflush();
  } /* with_vfork */
} /* main */
task 1: forked by task 0
} /* fork */ (entry not recorded)
child_work() {
  leaf();
  printf();
  fflush();
} /* child_work */
_exit() {
} /* _exit */ (not returned)
task 2: forked by task 0
} /* fork */ (entry not recorded)
close();
daemon() {
} /* daemon */ (not returned)
task 3: forked by task 2
} /* daemon */ (entry not recorded)
child_work() {
  leaf();
  printf();
  fflush();
} /* child_work */
write();
_exit() {
} /* _exit */ (not returned)
task 4: spawned by task 0
main() {
  child_work() {
    leaf();
    printf();
    fflush();
  } /* child_work */
} /* main */
";

/// `fctrace CMD -d DIR OPTS` with the program's run checked.
fn recorded(exe: &Path, opts: &[&str]) -> Recorded {
    let rec = record(exe, &[], opts);
    assert_eq!(rec.run.stdout, OUTPUT, "{}", rec.run.describe());
    rec
}

/// The three ways to the tree of `exe` with `record_opts` (recording
/// options, e.g. --disable) and `filter` (display filters): live mode,
/// `record` with both then `replay`, `record` then `replay` with the
/// filters. All give the same normalized tree, which is returned.
fn three_ways(exe: &Path, record_opts: &[&str], filter: &[&str]) -> String {
    let (live, replayed) = live_and_replayed(exe, record_opts, filter);
    let ctx = format!("record {record_opts:?}, filters {filter:?}");
    assert_outline_eq(
        &replayed,
        &live,
        &format!("{ctx}: replay-time filter vs live"),
    );
    live
}

/// The trees of [`three_ways`]: live mode and `record` with both then
/// `replay` (checked equal: the first returned), then `record` then
/// `replay` with the filters.
///
/// Every tree is laid out task by task (`--task-order`): the processes run
/// at the same time, so their lines interleave differently in each run;
/// a child's tree then starts with the exit of `fork` (its parent's calls
/// are not known there).
fn live_and_replayed(exe: &Path, record_opts: &[&str], filter: &[&str]) -> (String, String) {
    let mut live_args: Vec<&OsStr> = record_opts.iter().map(OsStr::new).collect();
    live_args.extend(filter.iter().map(OsStr::new));
    live_args.push(OsStr::new("--task-order"));
    live_args.push(exe.as_os_str());
    let live = fctrace(&live_args);
    assert_eq!(live.code(), Some(0), "{}", live.describe());
    let at = live.stdout.find("# DURATION").expect("a tree");
    assert_eq!(&live.stdout[..at], OUTPUT, "{}", live.describe());
    let live_tree = normalized(&live.stdout[at..]);

    let both: Vec<&str> = record_opts.iter().chain(filter).copied().collect();
    let rec = recorded(exe, &both);
    let recorded_tree = normalized(&fctrace_on("replay", &rec.dir.path, &["--task-order"]));

    let full = recorded(exe, record_opts);
    // With --disable, the calls entered before tracing was on are known
    // from where a trigger turned it on, with their ends: replay has no
    // gap to warn about.
    let replay = if record_opts.contains(&"--disable") {
        fctrace_on_quietly
    } else {
        fctrace_on
    };
    let ordered: Vec<&str> = filter.iter().copied().chain(["--task-order"]).collect();
    let replayed_tree = normalized(&replay("replay", &full.dir.path, &ordered));

    let ctx = format!("record {record_opts:?}, filters {filter:?}");
    assert_outline_eq(
        &recorded_tree,
        &live_tree,
        &format!("{ctx}: record+replay vs live"),
    );
    (live_tree, replayed_tree)
}

#[test]
fn forked_children_inherit_the_filter() {
    let exe = forks_program();
    assert_eq!(run_native(&exe, &[]).stdout, OUTPUT);
    let tree = three_ways(&exe, &[], &["-F", "main"]);
    assert_outline_eq(&tree, EXPECTED_F_MAIN, "-F main");
}

#[test]
fn forked_children_inherit_the_depth() {
    let exe = forks_program();
    // -F main -D 2: main and its direct calls. Every fork happens at level
    // 3 (main > with_* > fork), so nothing of the forked children is
    // shown; the exec'd program's main starts at level 1.
    let expected = "task 0: the program started
main() {
  with_fork();
  with_daemon();
  with_vfork();
} /* main */
task 1: forked by task 0
task 2: forked by task 0
task 3: forked by task 2
task 4: spawned by task 0
main() {
  child_work();
} /* main */
";
    let tree = three_ways(&exe, &[], &["-F", "main", "-D", "2"]);
    assert_outline_eq(&tree, expected, "-F main -D 2");
    // -D 4 -F main: the children's calls at level 4 (main > with_fork >
    // child_work > leaf) are shown, not deeper ones.
    let tree = three_ways(&exe, &[], &["-F", "main", "-D", "3"]);
    let child = normalized_task(&tree, 1);
    assert_eq!(
        child,
        "} /* fork */ (entry not recorded)\nchild_work();\n_exit() {\n} /* _exit */ (not returned)\n",
        "-F main -D 3: the forked child's child_work is at level 3\n{tree}"
    );
}

/// The lines of task `id` in a normalized tree.
fn normalized_task(tree: &str, id: u32) -> String {
    let head = format!("task {id}: ");
    tree.lines()
        .skip_while(|l| !l.starts_with(&head))
        .skip(1)
        .take_while(|l| !l.starts_with("task "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn forked_children_under_a_narrower_filter() {
    let exe = forks_program();
    // -F with_daemon: with_daemon's calls, the daemon's two children.
    let mut expected = String::new();
    let mut keep = false;
    for l in EXPECTED_F_MAIN.lines() {
        if l.starts_with("task ") {
            keep = matches!(l, "task 2: forked by task 0" | "task 3: forked by task 2");
            expected.push_str(l);
            expected.push('\n');
        } else if l.starts_with("  with_daemon") || l.starts_with("  } /* with_daemon") {
            expected.push_str(&l[2..]);
            expected.push('\n');
            keep = l.ends_with('{');
        } else if keep {
            let l = if l.starts_with("    ") { &l[2..] } else { l };
            expected.push_str(l);
            expected.push('\n');
        }
    }
    let tree = three_ways(&exe, &[], &["-F", "with_daemon"]);
    assert_outline_eq(&tree, &expected, "-F with_daemon");
}

#[test]
fn disabled_start_with_a_trigger_inside_the_filter() {
    let exe = forks_program();
    // Tracing starts at with_fork's entry: main, entered before, opens
    // there (its entry was not recorded; its return is recorded as an end
    // mark, where it closes, so the exit-time calls after it are outside
    // -F main), and the exec'd program starts with tracing off. The
    // forked children inherit tracing on.
    let expected = per_task(EXPECTED_F_MAIN, |task, l| match task {
        0 if l == "main() {" => Some("main() { /* entered while tracing was off */"),
        0 if l == "} /* main */" => Some("} /* main */ (entry not recorded)"),
        4 => None,
        _ => Some(l),
    });
    let tree = three_ways(
        &exe,
        &["--disable", "-T", "with_fork@trace_on"],
        &["-F", "main"],
    );
    assert_outline_eq(&tree, &expected, "--disable -T with_fork@trace_on -F main");
    // With a backtrace too: one chain, shown as the backtrace (main).
    let tree = three_ways(
        &exe,
        &["--disable", "-T", "with_fork@trace_on,backtrace"],
        &["-F", "main"],
    );
    let with_bt = expected.replacen(
        "  with_fork() {",
        "  /* backtrace: main */\n  with_fork() {",
        1,
    );
    assert_outline_eq(&tree, &with_bt, "-T with_fork@trace_on,backtrace -F main");
}

#[test]
fn disabled_start_with_a_trigger_in_a_forked_child() {
    let exe = forks_program();
    // Tracing turns on at child_work's entry: in the child forked inside
    // with_fork (which it never leaves: it _exits), in the daemon's child
    // inside with_daemon, and in the exec'd program's main. Under
    // -F with_fork only the first child's calls from child_work on are
    // shown: with_fork and fork were entered (in the parent, before the
    // fork) while tracing was off, so neither their entries nor fork's
    // return in the child are recorded: with_fork opens where tracing
    // turned on, and never returns (the child _exits). The parent never
    // calls child_work and records nothing.
    let expected = "task 0: the program started
task 1: forked by task 0
with_fork() { /* entered while tracing was off */
  child_work() {
    leaf();
    printf();
    fflush();
  } /* child_work */
  _exit() {
  } /* _exit */ (not returned)
} /* with_fork */ (not returned)
task 2: forked by task 0
task 3: forked by task 2
task 4: spawned by task 0
";
    let tree = three_ways(
        &exe,
        &["--disable", "-T", "child_work@trace_on"],
        &["-F", "with_fork"],
    );
    assert_outline_eq(
        &tree,
        expected,
        "--disable -T child_work@trace_on -F with_fork",
    );
    // Under -F with_daemon: the daemon's child, from child_work on
    // (with_daemon, entered in the first child's parent, is in the calls
    // open where tracing turned on: it opens there, and never returns).
    let expected = "task 0: the program started
task 1: forked by task 0
task 2: forked by task 0
task 3: forked by task 2
with_daemon() { /* entered while tracing was off */
  child_work() {
    leaf();
    printf();
    fflush();
  } /* child_work */
  write();
  _exit() {
  } /* _exit */ (not returned)
} /* with_daemon */ (not returned)
task 4: spawned by task 0
";
    let tree = three_ways(
        &exe,
        &["--disable", "-T", "child_work@trace_on"],
        &["-F", "with_daemon"],
    );
    assert_outline_eq(
        &tree,
        expected,
        "--disable -T child_work@trace_on -F with_daemon",
    );
}

#[test]
fn forked_children_under_a_caller_filter() {
    let exe = forks_program();
    // -C with_daemon --caller-tree: with_daemon's calls under main, and
    // what the daemon's children (forked inside with_daemon) do.
    let mut inside = false;
    let expected = per_task(EXPECTED_F_MAIN, |task, l| match task {
        0 if l.starts_with("  with_daemon") => {
            inside = true;
            Some(l)
        }
        0 if l.starts_with("  } /* with_daemon") => {
            inside = false;
            Some(l)
        }
        // main's lines, and with_daemon's calls (between its open and
        // close lines)
        0 if l.starts_with("main()") || l.starts_with("} /* main") || inside => Some(l),
        2 | 3 => Some(l),
        _ => None,
    });
    let tree = three_ways(&exe, &[], &["-C", "with_daemon", "--caller-tree"]);
    assert_outline_eq(&tree, &expected, "-C with_daemon --caller-tree");
}

/// `text`'s lines with each task's lines (after its `task N: ...` header,
/// kept) passed through `f(N, line)`: the line it gives, or none.
fn per_task<'a>(text: &'a str, mut f: impl FnMut(u32, &'a str) -> Option<&'a str>) -> String {
    let mut out = String::new();
    let mut task = 0;
    for l in text.lines() {
        let kept = match l.strip_prefix("task ") {
            Some(rest) => {
                task = rest.split(':').next().unwrap().parse().unwrap();
                Some(l)
            }
            None => f(task, l),
        };
        if let Some(k) = kept {
            out.push_str(k);
            out.push('\n');
        }
    }
    out
}
