//! Programs that walk their own stack print the same frames under fctrace
//! as without it, never an address of fctrace's stubs or agent:
//! backtraces.c (glibc's backtrace(), backtrace_symbols(),
//! backtrace_symbols_fd(), _Unwind_Backtrace called directly, backtrace()
//! inside a signal handler) and the cargo-built rsunwind (Rust's
//! std::backtrace::Backtrace::force_capture(), in a plain call chain and in
//! a panic hook).
//!
//! The comparison: the program prints every frame as "module
//! symbol+offset" (dladdr), which does not depend on where things are
//! loaded; backtrace_symbols() also prints absolute addresses, which differ
//! between any two runs (ASLR, and the agent preloaded before libc moves
//! libc even without ASLR): those `[0x...]` are replaced, the module, symbol
//! and offset before them are compared. A frame in fctrace's code would be
//! an extra line or a different one (`?? 0x...` for a stub, the agent's
//! `/proc/<pid>/fd/<n>` path for the agent).

use fctrace_testkit::*;
use std::path::PathBuf;

fn backtraces(opt: &str) -> PathBuf {
    c_program("backtraces.c", opt, &[opt, "-rdynamic"])
}

/// `[0x55d0c0ffee00]` -> `[ADDR]`.
fn without_addresses(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("[0x") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 3..];
        let hex = after.chars().take_while(char::is_ascii_hexdigit).count();
        if after[hex..].starts_with(']') {
            out.push_str("[ADDR]");
            rest = &after[hex + 1..];
        } else {
            out.push_str("[0x");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The number of frames the program reported for `what` (its line
/// `what: N frames`).
fn frames(stdout: &str, what: &str) -> usize {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what}: ")))
        .and_then(|l| l.strip_suffix(" frames"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `{what}: N frames` in\n{stdout}"))
}

#[test]
fn c_backtraces_are_the_programs_own() {
    for opt in ["-O0", "-O2"] {
        let exe = backtraces(opt);
        let native = run_native(&exe, &[]);
        let stem = exe.file_name().unwrap().to_string_lossy().into_owned();
        // The walks start where the program called them, as the source says.
        for (what, first) in [
            ("backtrace", "with_glibc+"),
            ("_Unwind_Backtrace", "with_unwind+"),
            ("in a signal handler", "on_usr1+"),
        ] {
            let head = format!("{what}: ");
            let after: Vec<&str> = native
                .stdout
                .lines()
                .skip_while(|l| !l.starts_with(&head))
                .skip(1)
                .take(1)
                .collect();
            assert!(
                after.len() == 1 && after[0].starts_with(&format!("  {stem} {first}")),
                "{opt}: {what} starts with {after:?}\n{}",
                native.stdout
            );
        }
        let rec = record(&exe, &[], &[]);
        assert_eq!(
            without_addresses(&rec.run.stdout),
            without_addresses(&native.stdout),
            "{opt}: backtraces differ under fctrace (trace {})",
            rec.dir.path.display()
        );
        assert_eq!(rec.run.stderr, native.stderr);
        assert!(!rec.run.stdout.contains("/proc/"), "{}", rec.run.stdout);

        // The walks are traced like any other call: the program's own
        // functions, with the callback called by the unwinder once per
        // frame it reported, and the handler under raise.
        let n_unwind = frames(&native.stdout, "_Unwind_Backtrace");
        let keep = [
            "main",
            "level1",
            "level2",
            "level3",
            "with_glibc",
            "with_unwind",
            "with_signal",
            "backtrace",
            "backtrace_symbols",
            "backtrace_symbols_fd",
            "_Unwind_Backtrace",
            "one_frame",
            "raise",
            "on_usr1",
        ];
        let bare = |l: &str| l.split('(').next().unwrap_or(l).trim().to_string();
        let (text, replay) = replay_with_text(&rec.dir.path);
        assert_eq!(
            replay.count("/* signal SIGUSR1 */"),
            1,
            "{opt}: signal markers\n{text}"
        );
        let mut tree = project(std::slice::from_ref(replay.main()), &|l| {
            keep.contains(&bare(l).as_str())
        });
        fn rename(nodes: &mut [Node], bare: &dyn Fn(&str) -> String) {
            for n in nodes {
                n.label = format!("{}()", bare(&n.label));
                rename(&mut n.children, bare);
            }
        }
        rename(&mut tree, &bare);
        let mut want = String::new();
        for (depth, label) in [
            (0, "main()"),
            (1, "level1()"),
            (2, "level2()"),
            (3, "level3()"),
            (4, "with_glibc()"),
            (5, "backtrace()"),
            (5, "backtrace_symbols()"),
            (5, "backtrace_symbols_fd()"),
            (1, "level1()"),
            (2, "level2()"),
            (3, "level3()"),
            (4, "with_unwind()"),
            (5, "_Unwind_Backtrace()"),
        ] {
            want.push_str(&format!("{}{label}\n", "  ".repeat(depth)));
        }
        for _ in 0..n_unwind {
            want.push_str(&format!("{}one_frame()\n", "  ".repeat(6)));
        }
        for (depth, label) in [
            (1, "level1()"),
            (2, "level2()"),
            (3, "level3()"),
            (4, "with_signal()"),
            (5, "raise()"),
            (6, "on_usr1()"),
            (7, "backtrace()"),
        ] {
            want.push_str(&format!("{}{label}\n", "  ".repeat(depth)));
        }
        assert_outline_eq(
            &outline(&tree),
            &want,
            &format!("backtraces.c {opt} (trace {})", rec.dir.path.display()),
        );
    }
}

/// callgrind does not count the kernel's entry into a handler as a call:
/// on_usr1 is compared with the source instead.
#[test]
fn c_backtraces_counts_match_callgrind() {
    for opt in ["-O0", "-O2"] {
        let exe = backtraces(opt);
        let opts = CompareOptions {
            only: Some(|s| s != "on_usr1"),
            ..Default::default()
        };
        let (rep, _) = assert_counts_match_callgrind(&exe, &[], &opts);
        assert_eq!(rep.calls("on_usr1"), 1);
        assert_eq!(rep.calls("level3"), 3);
    }
}

/// Rust's std::backtrace, resolved from the executable's debug info: the
/// same frames, names and lines under fctrace.
#[test]
fn rust_backtraces_are_the_programs_own() {
    let exe = cargo_program("rsunwind", "rsunwind.rs", "debug = true");
    let env = [("RUST_BACKTRACE", "0")];
    let native = run_env(&exe, &["backtrace"], &env);
    assert!(native.success(), "{}", native.describe());
    // Names resolve, and the walk starts where the program took it.
    let lines: Vec<&str> = native.stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.trim() == "0: rsunwind::bt_leaf")
            && native.stdout.contains("rsunwind::main")
            && native.stdout.contains("hook: panicked at"),
        "{}",
        native.stdout
    );
    let rec = record_env(&exe, &["backtrace"], &env);
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert_eq!(
        rec.run.stdout,
        native.stdout,
        "Rust backtraces differ under fctrace (trace {})",
        rec.dir.path.display()
    );
    assert_eq!(rec.run.stderr, native.stderr);
}
