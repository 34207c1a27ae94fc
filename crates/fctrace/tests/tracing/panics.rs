//! Rust panics caught with std::panic::catch_unwind, in a program built by
//! cargo during the test (tests/programs/rsunwind.rs, release profile): the
//! frames the panic leaves are unwound, a Drop guard runs on the way (under
//! the frame it belongs to), the calls after the catch nest under main
//! again, the panic message is the program's, and the counts of every
//! function of the executable (std's included) equal callgrind's.

use fctrace_testkit::*;
use std::path::PathBuf;

fn rsunwind() -> PathBuf {
    cargo_program("rsunwind", "rsunwind.rs", "debug = true")
}

/// RUST_BACKTRACE=0 in both runs, so that the message does not depend on
/// the test's own environment.
const ENV: &[(&str, &str)] = &[("RUST_BACKTRACE", "0")];

/// Rust's panic message names the thread with its id (`thread 'main'
/// (12345) panicked`), which differs from run to run with or without
/// fctrace: replaced by `(TID)`.
fn without_tids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("' (") {
        let after = &rest[i + 3..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..i + 3]);
            out.push_str("TID");
            rest = &after[digits..];
        } else {
            out.push_str(&rest[..i + 3]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The crate's own functions, closures left out (whether a closure is a
/// function of its own depends on inlining).
fn own(label: &str) -> bool {
    (label.starts_with("rsunwind::") || label.starts_with("<rsunwind::"))
        && !label.contains("{closure")
}

#[test]
fn panic_caught_by_catch_unwind_tree() {
    let exe = rsunwind();
    let native = run_env(&exe, &["tree"], ENV);
    assert!(native.success(), "{}", native.describe());
    assert_eq!(native.stdout, "guard 3 dropped\ncaught: true\nafter: 2\n");
    assert!(
        native.stderr.contains("thread 'main' (") && native.stderr.contains("boom 3\n"),
        "{}",
        native.describe()
    );
    let rec = record_env(&exe, &["tree"], ENV);
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert_eq!(rec.run.stdout, native.stdout);
    assert_eq!(without_tids(&rec.run.stderr), without_tids(&native.stderr));
    let replay = replay(&rec.dir.path);
    let main = replay
        .main_thread()
        .and_then(|t| t.find("rsunwind::main()"))
        .unwrap_or_else(|| panic!("no rsunwind::main() (trace {})", rec.dir.path.display()));
    assert_outline_eq(
        &outline(&project(std::slice::from_ref(main), &own)),
        &expected_outline(
            "
            rsunwind::main()
              rsunwind::level1() (unwound)
                rsunwind::level2() (unwound)
                  rsunwind::thrower() (unwound)
                  <rsunwind::Guard as core::ops::drop::Drop>::drop()
              rsunwind::after()
            ",
        ),
        &format!("rsunwind tree (trace {})", rec.dir.path.display()),
    );
    // The whole thread is well nested (parse_replay checked it) and every
    // call was closed: nothing is left open by the unwinding.
    let t = replay.main_thread().unwrap();
    assert_all_closed(&t.roots, "rsunwind tree");
}

#[test]
fn panics_counts_match_callgrind() {
    let exe = rsunwind();
    let args = ["loop", "1500"];
    let native = run_env(&exe, &args, ENV);
    assert!(native.success(), "{}", native.describe());
    // i % 3 == 0 does not panic (level1 gives 2): 1000 of 1500 rounds do;
    // after(i) adds i + 1.
    let sum = 500 * 2 + 1500 * 1501 / 2;
    assert!(
        native
            .stdout
            .ends_with(&format!("loop: caught=1000 sum={sum}\n")),
        "{}",
        native.stdout
    );
    let (rep, _) = assert_counts_match_callgrind(&exe, &args, &CompareOptions::default());
    let calls = |suffix: &str| -> u64 {
        rep.functions_of(&exe)
            .iter()
            .filter(|f| f.name == suffix)
            .map(|f| f.calls)
            .sum()
    };
    assert_eq!(calls("rsunwind::level1"), 1500);
    assert_eq!(calls("rsunwind::thrower"), 1500);
    assert_eq!(
        calls("<rsunwind::Guard as core::ops::drop::Drop>::drop"),
        1500
    );
    let rec = record_env(&exe, &args, ENV);
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert_same_behaviour(&native, &rec.run, "loop");
}
