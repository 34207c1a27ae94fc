//! longjmp.c: an interpreter's error handling. setjmp/longjmp and
//! sigsetjmp/siglongjmp leave traced frames thousands of times; each frame
//! left gets its exit (` (unwound)`) and the calls made after the jump nest
//! where they belong. Built at -O0, -O2 and -O2 with _FORTIFY_SOURCE (where
//! both longjmp and siglongjmp become `__longjmp_chk`).

use fctrace_testkit::*;
use std::path::PathBuf;

fn builds() -> Vec<(&'static str, PathBuf)> {
    vec![
        ("-O0", c_program("longjmp.c", "-O0", &["-O0"])),
        ("-O2", c_program("longjmp.c", "-O2", &["-O2"])),
        (
            "-O2-fortify",
            c_program("longjmp.c", "-O2-fortify", &["-O2", "-D_FORTIFY_SOURCE=2"]),
        ),
    ]
}

/// The names of a build's longjmp, siglongjmp and printf calls: with
/// _FORTIFY_SOURCE, `__longjmp_chk` for both jumps and `__printf_chk`.
fn call_names(opt: &str) -> (&'static str, &'static str, &'static str) {
    if opt.contains("fortify") {
        ("__longjmp_chk", "__longjmp_chk", "__printf_chk")
    } else {
        ("longjmp", "siglongjmp", "printf")
    }
}

/// The tree of `./longjmp tree`, from the source; `lj`, `slj` and `pf`
/// are the names of the longjmp, siglongjmp and printf calls.
fn expected_tree(lj: &str, slj: &str, pf: &str) -> String {
    expected_outline(&format!(
        "
        main()
          pcall()
            _setjmp()
            eval()
              eval()
          pcall()
            _setjmp()
            eval() (unwound)
              eval() (unwound)
                eval() (unwound)
                  throw_error() (unwound)
                    {lj}() (unwound)
          pcall()
            _setjmp()
            eval()
              pcall()
                _setjmp()
                eval() (unwound)
                  eval() (unwound)
                    eval() (unwound)
                      throw_error() (unwound)
                        {lj}() (unwound)
              eval()
          sig_pcall()
            __sigsetjmp()
            sig_eval() (unwound)
              sig_eval() (unwound)
                sig_throw() (unwound)
                  {slj}() (unwound)
          {pf}()
        "
    ))
}

#[test]
fn longjmp_tree() {
    for (opt, exe) in builds() {
        let native = run_native(&exe, &["tree"]);
        assert_eq!(native.stdout, "tree: a=2 b=-7 c=-4 d=-9\n");
        let rec = record(&exe, &["tree"], &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let (lj, slj, pf) = call_names(opt);
        let replay = replay(&rec.dir.path);
        assert_outline_eq(
            &outline(std::slice::from_ref(replay.main())),
            &expected_tree(lj, slj, pf),
            &format!("longjmp.c {opt} (trace {})", rec.dir.path.display()),
        );
    }
}

/// Thousands of jumps: counts equal callgrind's, setjmp's included (it is
/// called again right after each jump), nothing lost, and every call of
/// the loop nests directly under main.
#[test]
fn longjmp_loop_counts_match_callgrind() {
    const N: u64 = 3000;
    let n = N.to_string();
    for (opt, exe) in builds() {
        let args = ["loop", n.as_str()];
        let native = run_native(&exe, &args);
        let (rep, _) = assert_counts_match_callgrind(&exe, &args, &CompareOptions::default());
        // From the source: each round makes three protected calls, one of
        // them with a nested one.
        assert_eq!(rep.calls("pcall"), 3 * N, "{opt}");
        assert_eq!(rep.calls("sig_pcall"), N, "{opt}");
        assert_eq!(rep.calls("_setjmp"), 3 * N, "{opt}");
        assert_eq!(rep.calls("__sigsetjmp"), N, "{opt}");
        let rec = record(&exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let replay = replay(&rec.dir.path);
        let main = replay.main();
        let mut top: std::collections::BTreeMap<&str, u64> = Default::default();
        for c in &main.children {
            assert!(c.closed && !c.unwound, "{opt}: {c:?}");
            *top.entry(c.label.as_str()).or_default() += 1;
        }
        let pf = format!("{}()", call_names(opt).2);
        let want: std::collections::BTreeMap<&str, u64> = [
            ("strcmp()", 4), // main compares argv[1] with "flat", "late", "signal", "loop"
            // glibc's headers turn atoi into strtol when optimising
            (if opt == "-O0" { "atoi()" } else { "strtol()" }, 1),
            ("pcall()", 2 * N),
            ("sig_pcall()", N),
            (pf.as_str(), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(top, want, "{opt}: calls directly under main");
    }
}

/// siglongjmp out of a SIGUSR1 handler (raise()d deep down), thousands of
/// times: the signal mask is restored as without fctrace, the counts are
/// callgrind's, and everything after each jump nests under main again.
/// callgrind does not count the kernel's entry into a handler as a call:
/// on_usr1 is compared with the source instead (one call per raise).
#[test]
fn siglongjmp_out_of_signal_handler() {
    const N: u64 = 2000;
    let n = N.to_string();
    for (opt, exe) in builds() {
        let (_, slj, _) = call_names(opt);
        let args = ["signal", n.as_str()];
        let native = run_native(&exe, &args);
        assert_eq!(
            native.stdout,
            format!("signal: sum=-{} usr1-blocked=0\n", 10 * N)
        );
        let opts = CompareOptions {
            only: Some(|s| s != "on_usr1"),
            ..Default::default()
        };
        let (rep, _) = assert_counts_match_callgrind(&exe, &args, &opts);
        assert_eq!(rep.calls("on_usr1"), N, "{opt}");
        assert_eq!(rep.calls("raise"), N, "{opt}");
        assert_eq!(rep.calls("sig_handler_pcall"), N, "{opt}");
        let rec = record(&exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let replay = replay(&rec.dir.path);
        let signals = replay.count("/* signal SIGUSR1 */") as u64;
        assert_eq!(signals, N, "{opt}: signal markers");
        let main = replay.main();
        // Each handler's calls (on_usr1, siglongjmp) follow its marker
        // inside raise(), and are left by the jump like the frames below.
        let first = main
            .children
            .iter()
            .find(|c| c.label == "sig_handler_pcall()")
            .unwrap();
        assert_outline_eq(
            &outline(std::slice::from_ref(first)),
            &expected_outline(&format!(
                "
                sig_handler_pcall()
                  __sigsetjmp()
                  signal_depth() (unwound)
                    raise() (unwound)
                      /* signal SIGUSR1 */
                      on_usr1() (unwound)
                        {slj}() (unwound)
                "
            )),
            &format!("{opt} (trace {})", rec.dir.path.display()),
        );
        let under_main = main
            .children
            .iter()
            .filter(|c| c.label == "sig_handler_pcall()")
            .count() as u64;
        assert_eq!(under_main, N, "{opt}");
    }
}

/// main calls setjmp again right after each jump, with no other call in
/// between: every one of those calls is recorded (the frames the jump left
/// were closed at the jump, so nothing is pending when setjmp is called).
#[test]
fn setjmp_called_again_right_after_the_jump() {
    const N: u64 = 5000;
    let n = N.to_string();
    for (opt, exe) in builds() {
        let args = ["flat", n.as_str()];
        let native = run_native(&exe, &args);
        assert_eq!(native.stdout, format!("flat: jumps={N}\n"));
        let (rep, _) = assert_counts_match_callgrind(&exe, &args, &CompareOptions::default());
        assert_eq!(rep.calls("_setjmp"), N, "{opt}");
        assert_eq!(rep.calls("flat_deep"), N, "{opt}");
        let (lj, _, _) = call_names(opt);
        assert_eq!(rep.calls(lj), N, "{opt}");
        let rec = record(&exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let replay = replay(&rec.dir.path);
        let main = replay.main();
        let deep: Vec<&Node> = main
            .children
            .iter()
            .filter(|c| c.label == "flat_deep()")
            .collect();
        assert_eq!(deep.len() as u64, N, "{opt}");
        for d in deep {
            assert_eq!(
                outline(std::slice::from_ref(d)),
                expected_outline(&format!(
                    "
                    flat_deep() (unwound)
                      flat_fail() (unwound)
                        {lj}() (unwound)
                    "
                )),
                "{opt}"
            );
        }
    }
}

/// One jump, then a long busy loop before the next call: the frames the
/// jump left end at the jump, so their durations are a small part of
/// main's (recorded later, they would last as long as the loop).
#[test]
fn longjmp_exits_are_recorded_at_the_jump() {
    for (opt, exe) in builds() {
        let args = ["late", "30000000"];
        let native = run_native(&exe, &args);
        assert_eq!(native.stdout, "late: 2\n");
        let rec = record(&exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let replay = replay(&rec.dir.path);
        let (lj, _, pf) = call_names(opt);
        let tree = outline(&project(std::slice::from_ref(replay.main()), &|l| {
            !["strcmp()", "atol()", "strtol()"].contains(&l)
        }));
        assert_eq!(
            tree,
            expected_outline(&format!(
                "
                main()
                  _setjmp()
                  flat_deep() (unwound)
                    flat_fail() (unwound)
                      {lj}() (unwound)
                  after()
                  {pf}()
                "
            )),
            "{opt}"
        );
        let rep = report(&rec.dir.path);
        let main_ns = rep.function("main").and_then(|f| f.max_ns).unwrap();
        let deep_ns = rep.function("flat_deep").and_then(|f| f.max_ns).unwrap();
        assert!(
            deep_ns * 4 < main_ns,
            "{opt}: flat_deep lasted {deep_ns} ns of main's {main_ns} ns (trace {})",
            rec.dir.path.display()
        );
    }
}

/// A million jumps out of traced frames: each leaves three shadow entries
/// behind unless they are popped at the jump; a million times three is more
/// than the shadow stack holds, so a leak would show as lost events.
#[test]
fn a_million_jumps_leave_nothing_behind() {
    let exe = c_program("longjmp.c", "-O2", &["-O2"]);
    let rec = record(&exe, &["flat", "1000000"], &[]);
    assert_eq!(rec.run.stdout, "flat: jumps=1000000\n");
    assert_eq!(rec.run.stderr, "");
    let info = info_text(&rec.dir.path);
    assert!(
        info.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Lost", "events:", "0"]),
        "{info}"
    );
    // Per jump: _setjmp (entry and exit), flat_deep, flat_fail and longjmp
    // (entry and unwind each).
    let events: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("Events:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no event count in\n{info}"));
    assert!(
        (8_000_000..8_000_100).contains(&events),
        "{events} events\n{info}"
    );
}
