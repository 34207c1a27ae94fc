//! dense.c: about 2.4 million calls (deep recursion, tiny leaves, calls
//! through function pointers, qsort's comparator called from libc, calls
//! into libc). Counts equal callgrind's for every function of the
//! executable, at -O0 and -O2, with no event lost; at -O0 also the counts
//! the program's semantics give.

use fctrace_testkit::*;

fn fib_calls(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 1u64); // F(0), F(1)
    for _ in 0..n + 1 {
        (a, b) = (b, a + b);
    }
    2 * a - 1 // 2 * F(n + 1) - 1
}

const STDOUT: &str = "dense: fib(26) ok, acc=1086254007\n";

#[test]
fn dense_o0_counts_match_callgrind_and_semantics() {
    let exe = c_program("dense.c", "-O0", &["-O0"]);
    assert_eq!(run_native(&exe, &[]).stdout, STDOUT);
    let (rep, cmp) = assert_counts_match_callgrind(&exe, &[], &CompareOptions::default());
    assert!(
        cmp.total_calls > 2_000_000,
        "only {} calls compared",
        cmp.total_calls
    );
    let want: &[(&str, u64)] = &[
        ("main", 1),
        ("fib", fib_calls(26)),
        ("add1", 200_000),
        ("mul3", 200_000),
        ("xor5", 200_000),
        ("square", 600_000),
        ("apply", 600_000),
        ("mix", 640_002),
        ("lcg", 40_000),
        ("strings", 1),
        ("qsort", 1),
        ("snprintf", 20_000),
        ("strlen", 20_000),
        ("strtoul", 20_000),
    ];
    for (name, n) in want {
        assert_eq!(rep.calls(name), *n, "calls of {name}");
    }
    assert!(rep.calls("cmp_int") >= 39_999);
}

#[test]
fn dense_o2_counts_match_callgrind() {
    let exe = c_program("dense.c", "-O2", &["-O2"]);
    assert_eq!(run_native(&exe, &[]).stdout, STDOUT);
    let (rep, cmp) = assert_counts_match_callgrind(&exe, &[], &CompareOptions::default());
    assert!(
        cmp.total_calls > 1_000_000,
        "only {} calls compared",
        cmp.total_calls
    );
    // noipa functions keep every call at -O2 too.
    for (name, n) in [("add1", 200_000), ("apply", 600_000), ("square", 600_000)] {
        assert_eq!(rep.calls(name), n, "calls of {name}");
    }
}
