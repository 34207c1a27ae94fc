//! The tree as uftrace users know it: the C runtime's calls hidden
//! (`--show-runtime`), return values on closing lines, threads and forked
//! children interleaved by time (`--task-order`), `--no-libcall`, `-r`,
//! `--demangle`. Programs: tests/programs/shape.c, interleave.c,
//! shape.cpp; every expected tree is written from their source.

use fctrace_testkit::*;
use std::collections::BTreeMap;

/// The lines of a replay as `X text`: `X` a letter per thread, in the
/// order of their first line or header (`# X` for a task's header), the
/// text with its indent; empty lines left out.
fn tagged(text: &str) -> String {
    let mut letters: BTreeMap<u64, char> = BTreeMap::new();
    let mut letter = |tid: u64| {
        let n = letters.len();
        *letters
            .entry(tid)
            .or_insert_with(|| char::from(b'A' + n as u8))
    };
    let mut out = String::new();
    for line in text.lines().skip(1) {
        if let Some(rest) = line.strip_prefix("# task ") {
            let tid = rest
                .split_once(", tid ")
                .and_then(|(_, t)| t.split(' ').next())
                .and_then(|t| t.parse().ok())
                .expect("a task header names its tid");
            out.push_str(&format!("# {}\n", letter(tid)));
        } else if !line.is_empty() {
            let l = split_replay_line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let text = line.split_once("] | ").unwrap().1;
            out.push_str(&format!("{} {text}\n", letter(l.tid)));
        }
    }
    out
}

fn interleave() -> std::path::PathBuf {
    c_program("interleave.c", "-O2", &["-O2", "-pthread"])
}

/// Two threads taking turns: their lines in time order, each indented by
/// its own depth; a call whose exit is the next event of its thread is
/// one line at its start (the other thread's lines during it follow).
#[test]
fn threads_are_interleaved_by_time() {
    let exe = interleave();
    let rec = record_same(&exe, &[]);
    let text = replay_text(&rec.dir.path);
    assert_eq!(
        tagged(&text),
        "# A
A main() {
A   threads() {
A     pipe();
A     pipe();
A     pthread_create();
# B
B worker() {
A     ping();
A     handoff();
B   pong();
B   handoff();
A     ping();
A     handoff();
B   pong();
B   handoff() {
B   } /* handoff */ (not returned)
B } /* worker */ (not returned)
A     ping();
A   } /* threads */
A   puts();
A } /* main */
",
        "{text}"
    );
    // --task-order: the main thread's calls, then the worker's.
    let text = fctrace_on("replay", &rec.dir.path, &["--task-order"]);
    assert_eq!(
        tagged(&text),
        "# A
A main() {
A   threads() {
A     pipe();
A     pipe();
A     pthread_create();
A     ping();
A     handoff();
A     ping();
A     handoff();
A     ping();
A   } /* threads */
A   puts();
A } /* main */
# B
B worker() {
B   pong();
B   handoff();
B   pong();
B   handoff() {
B   } /* handoff */ (not returned)
B } /* worker */ (not returned)
",
        "{text}"
    );
    // --tid keeps one thread, and live mode interleaves as replay does.
    let worker_tid = text
        .lines()
        .filter_map(|l| split_replay_line(l).ok())
        .find(|l| l.text == "worker() {")
        .map(|l| l.tid)
        .unwrap();
    let only = fctrace_on("replay", &rec.dir.path, &["--tid", &worker_tid.to_string()]);
    assert_eq!(
        call_lines(&only),
        [
            "worker() {",
            "  pong();",
            "  handoff();",
            "  pong();",
            "  handoff() {",
            "  } /* handoff */ (not returned)",
            "} /* worker */ (not returned)"
        ]
    );
    let live = fctrace(&[exe.as_os_str()]);
    assert!(live.success(), "{}", live.describe());
    let tree = live.stdout.strip_prefix("done\n").unwrap_or(&live.stdout);
    assert_eq!(
        tagged(tree).lines().filter(|l| !l.starts_with('#')).count(),
        tagged(&replay_text(&rec.dir.path))
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count(),
        "{tree}"
    );
}

/// A forked child starts inside the calls its parent had open at the
/// fork, at their depths, and ends them (the parent waits for it inside
/// do_fork: its exit of do_fork comes after the child's lines).
#[test]
fn forked_child_nests_in_its_parents_calls() {
    let exe = interleave();
    let rec = record_same(&exe, &["fork"]);
    let text = replay_text(&rec.dir.path);
    assert_eq!(
        tagged(&text),
        "# A
A main() {
A   forks() {
A     do_fork() {
A       fork();
# B
B main() {
B   forks() {
B     do_fork() {
B       fork() {
B       } /* fork */
B     } /* do_fork */
B     child_work();
B     _exit() {
B     } /* _exit */ (not returned)
B   } /* forks */ (not returned)
B } /* main */ (not returned)
A     } /* do_fork */
A   } /* forks */
A   puts();
A } /* main */
",
        "{text}"
    );
    // The child's inherited calls last from the parent's entries.
    let tree = parse_replay(&text).unwrap();
    assert_eq!(tree.threads.len(), 2);
    // Display filters see the same calls: -F child_work keeps one line.
    let f = fctrace_on("replay", &rec.dir.path, &["-F", "child_work"]);
    assert_eq!(call_lines(&f), ["child_work();"], "{f}");
}

fn shape() -> std::path::PathBuf {
    c_program("shape.c", "-O2", &["-O2"])
}

/// shape.c's tree without the C runtime's calls: the constructor and the
/// atexit handler, which the runtime calls, beside main.
const SHAPE_TREE: &str = "setup() {
  twice() = 2;
} /* setup */
main() {
  atexit() {
    __cxa_atexit();
  } /* atexit */
  qsort() {
    cmp();
  } /* qsort */
  measure() {
    twice() = 6;
  } = 6; /* measure */
  printf();
} /* main */
teardown() {
  twice() = 4;
} /* teardown */
";

fn lines_of(text: &str) -> String {
    call_lines(text).iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn runtime_hidden_and_return_values_as_uftrace() {
    let exe = shape();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "6 1 2\n");
    let rec = record(&exe, &[], &["-R", "measure@retval", "-R", "twice@retval"]);
    assert_same_behaviour(&native, &rec.run, "shape");
    let text = replay_text(&rec.dir.path);
    assert_eq!(lines_of(&text), SHAPE_TREE, "{text}");
    // Through the per-call filter stages too (-N with nothing to hide).
    let n = fctrace_on("replay", &rec.dir.path, &["-N", "no_such_function_here"]);
    assert_eq!(lines_of(&n), SHAPE_TREE, "{n}");
    // -D counts shown levels only: the runtime is no level.
    let d = fctrace_on("replay", &rec.dir.path, &["-D", "1"]);
    assert_eq!(
        call_lines(&d),
        ["setup();", "main();", "teardown();"],
        "{d}"
    );
    // --show-runtime: the runtime's own calls, at depth 0.
    let all = fctrace_on("replay", &rec.dir.path, &["--show-runtime"]);
    let top: Vec<String> = call_lines(&all)
        .into_iter()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('}'))
        .collect();
    for f in ["_init();", "frame_dummy() {", "__do_global_dtors_aux() {"] {
        assert!(top.iter().any(|l| l == f), "{f} in\n{all}");
    }
    assert!(lines_of(&all).contains(SHAPE_TREE.split("teardown").next().unwrap()));
    // The report: the same calls.
    let r: Report =
        serde_json::from_str(&fctrace_on("report", &rec.dir.path, &["--format", "json"])).unwrap();
    assert_eq!(r.calls("twice"), 3);
    for f in ["_init", "frame_dummy", "__do_global_dtors_aux", "_fini"] {
        assert_eq!(r.calls(f), 0, "{f}");
    }
    let all = fctrace_on(
        "report",
        &rec.dir.path,
        &["--show-runtime", "--format", "json"],
    );
    let all: Report = serde_json::from_str(&all).unwrap();
    assert_eq!(all.calls("frame_dummy"), 1);
    assert_eq!(all.calls("twice"), 3);
}

/// --no-libcall hides qsort, printf, __cxa_atexit: cmp, which qsort
/// calls, takes its place.
#[test]
fn no_libcall() {
    let exe = shape();
    let rec = record(&exe, &[], &[]);
    let text = fctrace_on("replay", &rec.dir.path, &["--no-libcall"]);
    assert_eq!(
        lines_of(&text),
        "setup() {
  twice();
} /* setup */
main() {
  atexit();
  cmp();
  measure() {
    twice();
  } /* measure */
} /* main */
teardown() {
  twice();
} /* teardown */
",
        "{text}"
    );
    let r: Report = serde_json::from_str(&fctrace_on(
        "report",
        &rec.dir.path,
        &["--no-libcall", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(
        (r.calls("printf"), r.calls("qsort"), r.calls("cmp")),
        (0, 0, 1)
    );
}

/// -r 200ms~600ms of `shape phases` (the constructor, phase1 at 0,
/// phase2 at 400 ms, phase3 at 800 ms): main and both sleeps run in that
/// range, phase2 too; the others do not.
#[test]
fn time_range() {
    let exe = shape();
    let rec = record(&exe, &["phases"], &[]);
    let text = fctrace_on("replay", &rec.dir.path, &["-r", "200ms~600ms"]);
    assert_eq!(
        lines_of(&text),
        "main() {\n  usleep();\n  phase2();\n  usleep();\n} /* main */\n",
        "{text}"
    );
    // Open ends.
    let text = fctrace_on("replay", &rec.dir.path, &["-r", "600ms~"]);
    assert_eq!(
        lines_of(&text),
        "main() {\n  usleep();\n  phase3();\n} /* main */\n",
        "{text}"
    );
    let text = fctrace_on("replay", &rec.dir.path, &["-r", "~200ms"]);
    assert_eq!(
        lines_of(&text),
        "setup() {\n  twice();\n} /* setup */\nmain() {\n  strcmp();\n  phase1();\n  usleep();\n} /* main */\n",
        "{text}"
    );
    let r: Report = serde_json::from_str(&fctrace_on(
        "report",
        &rec.dir.path,
        &["-r", "200ms~600ms", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(
        (r.calls("phase1"), r.calls("phase2"), r.calls("usleep")),
        (0, 1, 2)
    );
    // A bad range is an error.
    let bad = fctrace(&[
        std::ffi::OsStr::new("replay"),
        "-d".as_ref(),
        rec.dir.path.as_os_str(),
        "-r".as_ref(),
        "2s".as_ref(),
    ]);
    assert_eq!(bad.code(), Some(1), "{}", bad.describe());
    assert!(bad.stderr.contains("START~STOP"), "{}", bad.describe());
    assert_no_panic(&bad);
}

#[test]
fn demangle_styles() {
    let exe = cxx_program("shape.cpp", "-O2", &["-O2"]);
    let rec = record_same(&exe, &[]);
    let full = fctrace_on("replay", &rec.dir.path, &[]);
    assert_eq!(
        call_lines(&full),
        [
            "main() {",
            "  geo::Box<long>::get(int) const;",
            "  long twice<long>(long);",
            "} /* main */"
        ],
        "{full}"
    );
    let simple = fctrace_on("replay", &rec.dir.path, &["--demangle=simple"]);
    assert_eq!(
        call_lines(&simple),
        [
            "main() {",
            "  geo::Box::get();",
            "  twice();",
            "} /* main */"
        ],
        "{simple}"
    );
    let raw = fctrace_on("replay", &rec.dir.path, &["--demangle=no"]);
    assert_eq!(
        call_lines(&raw),
        [
            "main() {",
            "  _ZNK3geo3BoxIlE3getEi();",
            "  _Z5twiceIlET_S0_();",
            "} /* main */"
        ],
        "{raw}"
    );
    let r: Report = serde_json::from_str(&fctrace_on(
        "report",
        &rec.dir.path,
        &["--demangle=simple", "--format", "json"],
    ))
    .unwrap();
    assert_eq!((r.calls("geo::Box::get"), r.calls("twice")), (1, 1));
}

/// The display-only options are refused by `record` (the trace is whole).
#[test]
fn record_refuses_display_options() {
    let exe = shape();
    for opt in [&["--show-runtime"][..], &["-r", "1s~"], &["--demangle=no"]] {
        let dir = TraceDir::new("shape-refused");
        let mut args: Vec<&std::ffi::OsStr> = vec!["record".as_ref(), "-d".as_ref()];
        args.push(dir.path.as_os_str());
        args.extend(opt.iter().map(std::ffi::OsStr::new));
        args.push(exe.as_os_str());
        let r = fctrace(&args);
        assert_eq!(r.code(), Some(1), "{opt:?}: {}", r.describe());
        assert!(r.stderr.contains("fctrace replay"), "{}", r.describe());
        assert_no_panic(&r);
    }
}
