//! Checks of the test harness itself, independent of fctrace's engine: the
//! callgrind oracle gives the counts the programs' semantics dictate, and the
//! parsers read what they should. If these fail, the other tests' verdicts
//! mean nothing.

use fctrace_testkit::*;

const TREE_EXAMPLE: &str = "\
# DURATION     TID     FUNCTION
            [ 4321] | main() {
            [ 4321] |   parse_args() {
   0.210 us [ 4321] |     strtol();
   0.902 us [ 4321] |   } /* parse_args */
   0.118 us [ 4321] |   leaf();
   5.774 us [ 4321] | } /* main */
";

#[test]
fn replay_parser_reads_the_contract_example() {
    let r = parse_replay(TREE_EXAMPLE).unwrap();
    assert_eq!(r.threads.len(), 1);
    assert_eq!(r.threads[0].tid, 4321);
    assert_eq!(
        outline(&r.threads[0].roots),
        expected_outline(
            "
            main()
              parse_args()
                strtol()
              leaf()
            "
        )
    );
    assert_eq!(r.main().children.len(), 2);
}

#[test]
fn replay_parser_reads_cpp_names_threads_and_unwound_frames() {
    let text = "\
# DURATION     TID     FUNCTION
            [   10] | main() {
            [   11] | worker(void*) {
            [   10] |   ns::f(int) {
   1.000 us [   11] |   ns::S::operator[](unsigned long) const;
   1.000 us [   10] |     operator new(unsigned long);
   2.000 us [   10] |   } /* ns::f(int) */
            [   10] |   outer() {
   0.500 us [   10] |     longjmp(); (unwound)
   3.000 us [   10] |   } /* outer */ (unwound)
   9.000 us [   11] | } /* worker(void*) */
";
    let r = parse_replay(text).unwrap();
    assert_eq!(
        r.threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
        vec![10, 11]
    );
    assert_eq!(
        outline(&r.thread(10).unwrap().roots),
        expected_outline(
            "
            main() (open)
              ns::f(int)
                operator new(unsigned long)
              outer() (unwound)
                longjmp() (unwound)
            "
        )
    );
    assert_eq!(
        outline(&r.thread(11).unwrap().roots),
        "worker(void*)\n  ns::S::operator[](unsigned long) const\n"
    );
}

#[test]
fn replay_parser_rejects_bad_nesting() {
    let wrong_depth = "            [ 1] | main() {\n   1.0 us [ 1] | leaf();\n";
    assert!(parse_replay(wrong_depth).is_err());
    let wrong_close = "            [ 1] | main() {\n            [ 1] |   f() {\n   1.0 us [ 1] |   } /* main */\n";
    assert!(parse_replay(wrong_close).is_err());
    let stray_close = "   1.0 us [ 1] | } /* main */\n";
    assert!(parse_replay(stray_close).is_err());
    let no_duration = "            [ 1] | main() {\n            [ 1] |   leaf();\n";
    assert!(parse_replay(no_duration).is_err());
}

#[test]
fn projection_lifts_the_kept_descendants() {
    let r = parse_replay(
        "\
            [ 1] | main() {
            [ 1] |   std::vector<int>::push_back(int const&) {
   1.0 us [ 1] |     geo::f();
   1.0 us [ 1] |   } /* std::vector<int>::push_back(int const&) */
   1.0 us [ 1] |   geo::g();
   1.0 us [ 1] | } /* main */
",
    )
    .unwrap();
    let p = project(&r.threads[0].roots, &|l| !l.starts_with("std::"));
    assert_eq!(outline(&p), "main()\n  geo::f()\n  geo::g()\n");
}

#[test]
fn callgrind_parser_handles_compression_and_objects() {
    let text = "\
# callgrind format
events: Ir
ob=(1) /bin/prog
fl=(1) ???
fn=(1) main
cob=(2) /lib/libc.so.6
cfi=(2) ???
cfn=(2) puts
calls=1 0
0 5
cfn=(3) fib
calls=1 0
0 10
fn=(3)
cfn=(4) fib'2
calls=2 0
0 3
fn=(4)
cfn=(4)
calls=4 0
0 1
ob=(2)
fn=(5) qsort
cob=(1)
cfn=(6) cmp
calls=7 0
0 1
";
    let cg = parse_callgrind(text).unwrap();
    let get = |o: &str, f: &str| {
        cg.calls
            .get(&(o.to_string(), f.to_string()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(get("/lib/libc.so.6", "puts"), 1);
    assert_eq!(get("/bin/prog", "fib"), 1 + 2 + 4);
    assert_eq!(get("/bin/prog", "cmp"), 7);
    assert_eq!(get("/bin/prog", "puts"), 0);
    assert_eq!(
        cg.self_calls
            .get(&("/bin/prog".to_string(), "fib".to_string()))
            .copied(),
        Some(6)
    );
}

#[test]
fn objdump_parser_finds_targets() {
    let text = "
0000000000001250 <spin_entry>:
    1250:\tsub    $0x1,%edi
    1253:\tjg     1250 <spin_entry>
    1255:\tmov    $0x2a,%eax
    125a:\tret

0000000000001330 <g>:
    1330:\tlea    (%rdi,%rdi,2),%edi
    1333:\tjmp    1320 <h>
    1335:\tnotrack jmp *%rax
    1338:\tbnd jmp 1320 <h>
";
    let f = parse_objdump(text);
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].self_entry_jumps().len(), 1);
    assert_eq!(f[1].insns[1].target, Some(0x1320));
    assert_eq!(f[1].insns[2].mnemonic, "jmp");
    assert_eq!(f[1].insns[2].target, None);
    assert_eq!(f[1].insns[3].target, Some(0x1320));
}

/// Counts of the executable's functions (by name) in one callgrind run.
fn cg_counts(exe: &std::path::Path, args: &[&str]) -> std::collections::BTreeMap<String, u64> {
    callgrind(exe, args).of_object(exe)
}

/// dense.c at -O0 keeps every call as written: callgrind must find exactly
/// the counts of its semantics.
#[test]
fn callgrind_counts_dense_o0_as_the_program_says() {
    let exe = c_program("dense.c", "-O0", &["-O0"]);
    let c = cg_counts(&exe, &[]);
    let fib = |n: u64| -> u64 {
        let (mut a, mut b) = (0u64, 1u64);
        for _ in 0..n {
            (a, b) = (b, a + b);
        }
        a
    };
    let want: &[(&str, u64)] = &[
        ("main", 1),
        ("fib", 2 * fib(26 + 1) - 1),
        ("add1", 200_000),
        ("mul3", 200_000),
        ("xor5", 200_000),
        ("square", 600_000),
        ("apply", 600_000),
        ("mix", 600_000 + 1 + 1 + 2 * 20_000),
        ("lcg", 40_000),
        ("strings", 1),
    ];
    for (name, n) in want {
        assert_eq!(
            c.get(*name).copied(),
            Some(*n),
            "callgrind count of {name} in {}: {c:?}",
            exe.display()
        );
    }
    // qsort's comparator is called from libc, at least n-1 times.
    assert!(c["cmp_int"] >= 39_999, "cmp_int: {}", c["cmp_int"]);
}

#[test]
fn callgrind_counts_threads_as_the_program_says() {
    for (suffix, flags) in [("-O0", ["-O0", "-pthread"]), ("-O2", ["-O2", "-pthread"])] {
        let exe = c_program("threads.c", suffix, &flags);
        let c = cg_counts(&exe, &[]);
        assert_eq!(c.get("thread_main").copied(), Some(100), "{c:?}");
        assert_eq!(c.get("work").copied(), Some(5050), "{c:?}");
        assert_eq!(c.get("leaf").copied(), Some(10100), "{c:?}");
        assert_eq!(c.get("main").copied(), Some(1), "{c:?}");
    }
}

/// What callgrind makes of tree.c's shapes at -O2 (documented in
/// common/mod.rs): tail calls count, a jump to a function's own entry counts
/// as a recursive call, the `.cold` part counts as a function.
#[test]
fn callgrind_on_tree_o2_shapes() {
    let exe = c_program("tree.c", "-O2", &["-O2"]);
    let cg = callgrind(&exe, &[]);
    let c = cg.of_object(&exe);
    let get = |n: &str| c.get(n).copied().unwrap_or(0);
    assert_eq!(get("main"), 1);
    assert_eq!(get("h"), 1, "the tail jump g -> h counts as a call");
    assert_eq!(
        get("inc"),
        2,
        "one call from nest2, one tail jump from rec(1)"
    );
    assert_eq!(get("rec"), 3, "recursion: rec + rec'2");
    assert_eq!(
        get("spin_entry"),
        3,
        "spin_entry(3) jumps to its own entry twice"
    );
    let self_calls = cg
        .self_calls
        .get(&(exe.to_string_lossy().into_owned(), "spin_entry".into()))
        .copied();
    assert_eq!(self_calls, Some(2));
    assert_eq!(get("sum_to"), 1, "a loop head at offset 2 is not an entry");
    assert_eq!(
        get("checked.cold"),
        1,
        "the jump into the .cold part counts as a call"
    );
    assert_eq!(get("scale.constprop.0"), 2);
    assert_eq!(
        get("_start"),
        1,
        "ld.so jumps to _start: a jump into another object counts"
    );
}

/// The comparison itself, fed with callgrind's own counts as if fctrace had
/// reported them: must agree, with spin_entry counted once.
#[test]
fn comparison_accepts_the_oracle_itself() {
    let exe = c_program("tree.c", "-O2", &["-O2"]);
    let cg = callgrind(&exe, &[]);
    let syms = function_symbols(&exe);
    let counts = cg.of_object(&exe);
    let mut functions = Vec::new();
    for s in syms
        .iter()
        .filter(|s| !CRT_FUNCTIONS.contains(&s.name.as_str()) && !s.name.contains(".cold"))
    {
        let mut n = counts.get(&s.name).copied().unwrap_or(0);
        if s.name == "spin_entry" {
            n = 1;
        }
        functions.push(FnStat {
            name: s.name.clone(),
            symbol: s.name.clone(),
            module: exe.to_string_lossy().into_owned(),
            calls: n,
            total_ns: 0,
            self_ns: 0,
            min_ns: None,
            max_ns: None,
            avg_ns: None,
        });
    }
    let rep = Report {
        functions,
        tasks: vec![],
        events: 0,
        lost_events: 0,
    };
    let c = compare_with_callgrind(&exe, &rep, &cg, &CompareOptions::default()).unwrap();
    assert!(
        c.self_entry
            .iter()
            .any(|(n, total, want)| n == "spin_entry" && *total == 3 && *want == 1),
        "{c:?}"
    );
    assert!(c.excluded.iter().any(|(n, _)| n == "checked.cold"), "{c:?}");
    // And a wrong count is caught, with its name in the message.
    let mut bad = rep.clone();
    bad.functions
        .iter_mut()
        .find(|f| f.symbol == "leaf")
        .unwrap()
        .calls += 1;
    let err = compare_with_callgrind(&exe, &bad, &cg, &CompareOptions::default()).unwrap_err();
    assert!(err.contains("leaf: fctrace 4, callgrind 3"), "{err}");
    // A .cold part reported by fctrace is an error.
    let mut cold = rep.clone();
    cold.functions.push(FnStat {
        symbol: "checked.cold".into(),
        name: "checked.cold".into(),
        calls: 1,
        ..rep.functions[0].clone()
    });
    assert!(
        compare_with_callgrind(&exe, &cold, &cg, &CompareOptions::default())
            .unwrap_err()
            .contains(".cold")
    );
}

/// Every program whose counts the tests compare: callgrind's names for its
/// code all resolve to function symbols of the executable.
#[test]
fn oracle_resolves_for_every_program() {
    for opt in ["-O0", "-O2"] {
        assert_oracle_resolves(&c_program("tree.c", opt, &[opt]), &[]);
        assert_oracle_resolves(&c_program("dense.c", opt, &[opt]), &[]);
        assert_oracle_resolves(&c_program("threads.c", opt, &[opt, "-pthread"]), &[]);
        assert_oracle_resolves(&c_program("unwind.c", opt, &[opt]), &[]);
        for mode in ["basic", "exceptions"] {
            assert_oracle_resolves(&cxx_program("tree.cpp", opt, &[opt]), &[mode]);
        }
    }
    assert_oracle_resolves(&c_program("libcall.c", "-O0", &["-O0"]), &[]);
    for opt in [0, 2] {
        for v0 in [false, true] {
            assert_oracle_resolves(&rust_prog(opt, v0), &[]);
        }
    }
}

/// Calls still running when the process ended (killed, or exit() deep
/// down) are closed as ` (not returned)`, without a duration.
#[test]
fn replay_parser_reads_not_returned_frames() {
    let text = "\
            [   7] | main() {
   0.020 us [   7] |   work();
            [   7] |   raise() {
            [   7] |   } /* raise */ (not returned)
            [   7] | } /* main */ (not returned)
";
    let r = parse_replay(text).unwrap();
    assert_eq!(
        outline(&r.threads[0].roots),
        "main() (open)\n  work()\n  raise() (open)\n"
    );
}

/// What replay prints besides calls, written from its documentation
/// (crates/fctrace-analysis/src/tree/): `# task N:` headers (an exec'd program is a new
/// task with the same tid: another tree), signal markers (leaves at the
/// interrupted call's depth, which `strip_markers` removes and
/// `marker_lines` lists), and a fork child's first line, the exit of the
/// `fork` its parent entered (it closes nothing).
#[test]
fn replay_parser_reads_tasks_and_signal_markers() {
    let text = "\
# DURATION     TID     FUNCTION
# task 0: pid 7, tid 7 (prog), /bin/prog, the program started
            [    7] | main() {
            [    7] |   raise() {
            [    7] |     /* signal SIGUSR1 */
   0.100 us [    7] |     on_usr1();
   1.000 us [    7] |   } /* raise */
   0.200 us [    7] |   fork();
            [    7] |   execl() {
            [    7] |   } /* execl */ (not returned)
            [    7] | } /* main */ (not returned)

# task 1: pid 8, tid 8 (prog), /bin/prog, forked by task 0
   1.000 us [    8] | } /* fork */ (entry not recorded)
   0.500 us [    8] | work();

# task 2: pid 7, tid 7 (other), /bin/other, exec by task 0
   0.300 us [    7] | main();
";
    let r = parse_replay(text).unwrap();
    assert_eq!(
        r.threads
            .iter()
            .map(|t| (t.task, t.tid))
            .collect::<Vec<_>>(),
        [(Some(0), 7), (Some(1), 8), (Some(2), 7)]
    );
    assert_eq!(
        outline(&r.threads[0].roots),
        expected_outline(
            "
            main() (open)
              raise()
                /* signal SIGUSR1 */
                on_usr1()
              fork()
              execl() (open)
            "
        )
    );
    assert!(is_marker(
        &r.threads[0].roots[0].children[0].children[0].label
    ));
    assert_eq!(
        outline(&strip_markers(&r.threads[0].roots)),
        expected_outline(
            "
            main() (open)
              raise()
                on_usr1()
              fork()
              execl() (open)
            "
        )
    );
    assert_eq!(r.count("/* signal SIGUSR1 */"), 1);
    assert_eq!(r.without_markers().count("/* signal SIGUSR1 */"), 0);
    assert_eq!(r.without_markers().count("on_usr1()"), 1);
    assert_eq!(marker_lines(text.lines()), [(2, "/* signal SIGUSR1 */")]);
    assert_eq!(outline(&r.threads[1].roots), "work()\n");
    assert_eq!(outline(&r.threads[2].roots), "main()\n");

    let misplaced_marker = "            [ 1] | main() {\n            [ 1] | /* signal SIGUSR1 */\n";
    assert!(parse_replay(misplaced_marker).is_err());
    let fork_exit_inside_a_call =
        "            [ 1] | main() {\n   1.0 us [ 1] |   } /* fork */ (entry not recorded)\n";
    assert!(parse_replay(fork_exit_inside_a_call).is_err());
}

/// Beyond the indentation cap (depth 100) lines keep the cap's indentation
/// and say their depth: `(depth N) `.
#[test]
fn replay_parser_reads_depth_prefixes() {
    const CAP: usize = 100;
    const DEEPEST: usize = 103;
    let indent = |depth: usize| {
        if depth <= CAP {
            "  ".repeat(depth)
        } else {
            format!("{}(depth {depth}) ", "  ".repeat(CAP))
        }
    };
    let mut text = String::new();
    for d in 0..DEEPEST {
        text.push_str(&format!("            [ 1] | {}f() {{\n", indent(d)));
    }
    text.push_str(&format!("   1.0 us [ 1] | {}leaf();\n", indent(DEEPEST)));
    for d in (0..DEEPEST).rev() {
        text.push_str(&format!("   1.0 us [ 1] | {}}} /* f */\n", indent(d)));
    }
    let line = text.lines().nth(CAP + 1).unwrap();
    assert_eq!(
        split_replay_line(line),
        Ok(ReplayLine {
            duration: "",
            tid: 1,
            depth: CAP + 1,
            text: "f() {"
        })
    );
    let r = parse_replay(&text).unwrap();
    let mut n = &r.threads[0].roots[0];
    let mut depth = 0;
    while let [child] = n.children.as_slice() {
        assert_eq!(n.label, "f()");
        assert!(n.closed);
        n = child;
        depth += 1;
    }
    assert_eq!((depth, n.label.as_str()), (DEEPEST, "leaf()"));
    // A prefix that disagrees with the calls open is an error.
    let wrong = text.replace("(depth 102) f() {", "(depth 101) f() {");
    assert!(parse_replay(&wrong).is_err());
}

/// The kit finds what cargo built for these tests from the test binary's
/// own path: `CARGO_BIN_EXE_fctrace` and `CARGO_TARGET_TMPDIR` exist only
/// when a test binary is compiled, not when the kit is.
#[test]
fn the_kit_finds_what_cargo_built() {
    assert_eq!(
        fctrace_bin(),
        std::path::Path::new(env!("CARGO_BIN_EXE_fctrace"))
    );
    assert_eq!(
        target_tmpdir(),
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
    );
}

/// A test binary started with SIGINT and SIGQUIT ignored (as a background
/// job of a script is) starts its tests with their default actions: the
/// `.init_array` entry of its main.rs ran.
#[test]
fn the_test_binary_starts_with_default_signal_actions() {
    const VAR: &str = "FCTRACE_TEST_STARTED_IGNORING";
    if std::env::var_os(VAR).is_some() {
        for sig in [libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: a zeroed sigaction is a valid value to read into.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the action of `sig`.
            let r = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
            assert_eq!(r, 0);
            assert_ne!(old.sa_sigaction, libc::SIG_IGN, "signal {sig} is ignored");
        }
        return;
    }
    let name = "harness::the_test_binary_starts_with_default_signal_actions";
    let exe = std::env::current_exe().unwrap();
    let r = run(std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' INT QUIT && exec \"$0\" \"$1\" --exact --test-threads=1")
        .arg(&exe)
        .arg(name)
        .env(VAR, "1"));
    assert!(
        r.success() && r.stdout.contains("test result: ok. 1 passed"),
        "{}",
        r.describe()
    );
}

/// The integration tests are one binary per area: a folder
/// `tests/AREA/main.rs` declaring each file of the folder as a module (a
/// file of `tests/` would be a binary of its own, compiled and linked
/// apart; a file of an area that main.rs does not declare would never
/// run). Folders without a main.rs hold data (`programs/`, `perfetto/`).
#[test]
fn the_tests_are_one_binary_per_area() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut areas = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap().flatten() {
        let path = entry.path();
        assert!(
            path.is_dir(),
            "{}: a test binary of its own; make it a module of the area it tests (tests/AREA/main.rs)",
            path.display()
        );
        let main = path.join("main.rs");
        let Ok(text) = std::fs::read_to_string(&main) else {
            continue;
        };
        for file in std::fs::read_dir(&path).unwrap().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if let Some(module) = name.strip_suffix(".rs").filter(|&m| m != "main") {
                assert!(
                    text.lines().any(|l| l == format!("mod {module};")),
                    "{}: not a module of {}, so it never runs",
                    file.path().display(),
                    main.display()
                );
            }
        }
        areas.push(entry.file_name());
    }
    assert!(
        (2..=8).contains(&areas.len()),
        "test binaries: {areas:?} (a few, one per area)"
    );
}
