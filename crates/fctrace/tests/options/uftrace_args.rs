//! uftrace's argument specs (its doc/uftrace-record.md, ARGUMENTS):
//! explicit locations (`%rsi`, `%stack+1`, `%xmm3`), floats by size
//! (`fparg1/32`, `/64`, `/80`), `/o`, `/S` (std::string), `/p` shown as
//! `&name` when it points to a function, `-A FUNC` and `-R FUNC` without
//! a spec (types from the debug information), patterns (`-A '^str_'`),
//! the `auto-args` trigger action, and the bounds on argument numbers.
//! The expected values are the ones uftrace_args.cpp passes.

use fctrace_testkit::*;
use std::path::PathBuf;

fn program() -> PathBuf {
    cxx_program("uftrace_args.cpp", "-O0", &["-O0", "-g"])
}

/// `slen(const std::string &)` as c++filt demangles it, with `;`.
const SLEN: &str =
    "slen(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&);";

/// Records main's calls (without the C++ library's) with `opts`, the
/// program behaving as natively; returns the replay's call lines.
#[track_caller]
fn recorded(opts: &[&str]) -> Vec<String> {
    let native = run_native(&program(), &[]);
    let mut all = vec!["-F", "main", "-N", "^std::"];
    all.extend_from_slice(opts);
    let rec = record(&program(), &[], &all);
    assert_same_behaviour(&native, &rec.run, &format!("record {opts:?}"));
    call_lines(&replay_text(&rec.dir.path))
}

/// main's lines with `calls` (each as it is shown at depth 1, `apply`'s
/// call to perm given whole) between main's first and last line.
fn main_with(calls: &[&str]) -> Vec<String> {
    let mut v = vec!["main() {".to_string()];
    v.extend(calls.iter().map(|c| format!("  {c}")));
    v.push("  printf();".to_string());
    v.push("} /* main */".to_string());
    v
}

#[test]
fn locations_float_sizes_octal_and_function_pointers() {
    let lines = recorded(&[
        "-A",
        "many@arg7%stack+1,arg8/x%stack+2,arg2%rsi",
        "-A",
        "mix@fparg2%xmm1,fparg1/32",
        "-A",
        "twice@fparg1/80%stack+1",
        "-A",
        "perm@arg1/o",
        "-R",
        "perm@retval/o",
        "-A",
        "apply@arg1/p,arg2/i32",
    ]);
    assert_eq!(
        lines,
        main_with(&[
            "many(7, 0x8, 2);",
            // (fparg2 first: the order of the spec.)
            "mix(2.25, 1.5);",
            "twice(3.5);",
            "perm(0755) = 0755;",
            "typed();",
            // (Without values, the name as c++filt writes it.)
            SLEN,
            SLEN,
            "str_first();",
            "str_second();",
            "apply(&perm, 8) {",
            "  perm(010) = 010;",
            "} /* apply */",
        ])
    );
}

#[test]
fn std_string_and_types_from_debug_information() {
    let x40 = format!("\"{}\"", "x".repeat(40));
    let lines = recorded(&[
        "-A",
        "slen@arg1/S",
        "-A",
        "typed",
        "-R",
        "typed",
        "-A",
        "^str_",
        "-T",
        "perm@auto-args",
    ]);
    assert_eq!(
        lines,
        main_with(&[
            "many();",
            "mix();",
            "twice();",
            "perm(493) = 493;",
            "typed(3, \"abc\") = 4;",
            "slen(\"hello world\");",
            &format!("slen({x40});"),
            "str_first(\"xy\");",
            "str_second(\"xy\");",
            "apply() {",
            "  perm(8) = 8;",
            "} /* apply */",
        ])
    );
    // A std::string longer than --max-string is cut.
    let lines = recorded(&["-A", "slen@arg1/S", "--max-string", "8"]);
    assert!(
        lines.contains(&"  slen(\"hello wo\"...);".to_string())
            && lines.contains(&"  slen(\"xxxxxxxx\"...);".to_string()),
        "{lines:#?}"
    );
}

#[test]
fn bad_specs_are_refused() {
    for (spec, says) in [
        ("twice@fparg1/80", "passed on the stack"),
        ("many@arg17", "arg1 to arg16"),
        ("many@arg1%stack+11", "%stack+1 to %stack+10"),
        ("many@arg1%rbx", "unknown location %rbx"),
        ("mix@fparg1%rdi", "integer argument"),
        ("many@arg1/S8", "not a format"),
    ] {
        let r = fctrace(&["record", "-A", spec, "true"]);
        assert_no_panic(&r);
        assert!(
            !r.success() && r.stderr.contains(says),
            "{spec}: {}",
            r.describe()
        );
    }
}
