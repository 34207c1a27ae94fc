//! tests/programs/prog.rs, built with rustc at opt-level 0 and 2, with the
//! default (legacy) symbol mangling and with v0: functions reported
//! demangled without hash (`prog::compute`, `<prog::Square as
//! prog::Shape>::area`), counts as the program's semantics say at
//! opt-level 0, the tree of the program's own functions, and counts equal to
//! callgrind's (the crate's own functions; and every function of the
//! executable, std's included, which Rust links statically).

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

const STDOUT: &str = "rust: compute=3471970684701693800 fib=55 area=25\n";
const LEN: usize = 50; // prog.rs LEN
const FIB_N: u64 = 10; // prog.rs FIB_N

fn prog(opt: u32, v0: bool) -> PathBuf {
    rust_prog(opt, v0)
}

/// The name without hash, as rustc-demangle's alternate form prints it.
fn demangled(symbol: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(symbol))
}

/// A function of the program's own crate (not std's generic code
/// instantiated in it, not its closures).
fn own_symbol(symbol: &str) -> bool {
    let d = demangled(symbol);
    (d.starts_with("prog::") || d.starts_with("<prog::")) && !d.contains("{closure")
}

fn fib_calls(n: u64) -> u64 {
    if n < 2 {
        1
    } else {
        1 + fib_calls(n - 1) + fib_calls(n - 2)
    }
}

fn variants() -> Vec<(u32, bool)> {
    vec![(0, false), (2, false), (0, true), (2, true)]
}

#[test]
fn rust_program_builds_and_runs() {
    for (opt, v0) in variants() {
        let exe = prog(opt, v0);
        assert_eq!(run_native(&exe, &[]).stdout, STDOUT);
        let syms = function_symbols(&exe);
        for f in [
            "prog::compute",
            "prog::fib",
            "prog::leaf",
            "prog::main",
            "<prog::Square as prog::Shape>::area",
        ] {
            assert!(
                syms.iter().any(|s| demangled(&s.name) == f),
                "{}: no {f}",
                exe.display()
            );
        }
    }
}

#[test]
fn rust_names_are_demangled_without_hash() {
    for (opt, v0) in variants() {
        let exe = prog(opt, v0);
        let rec = record(&exe, &[], &[]);
        assert_eq!(rec.run.stdout, STDOUT);
        let rep = report(&rec.dir.path);
        let ctx = format!("{} (trace {})", exe.display(), rec.dir.path.display());
        let mut bad = Vec::new();
        for f in rep.functions_of(&exe) {
            let want = demangled(&f.symbol);
            if f.name != want {
                bad.push(format!(
                    "{}: name {:?}, expected {:?}",
                    f.symbol, f.name, want
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{ctx}: names differ from rustc-demangle's (without hash):\n{}",
            bad.join("\n")
        );
        for f in &rep.functions {
            let hash = f.name.rsplit("::").next().unwrap_or("");
            let looks_hashed = hash.len() == 17
                && hash.starts_with('h')
                && hash[1..].bytes().all(|b| b.is_ascii_hexdigit());
            assert!(
                !looks_hashed && !f.name.starts_with("_ZN") && !f.name.starts_with("_R"),
                "{ctx}: mangled or hashed name {f:?}"
            );
        }
        let wanted: &[(&str, u64)] = &[
            ("prog::main", 1),
            ("prog::compute", 1),
            ("prog::total_area", 1),
            ("<prog::Square as prog::Shape>::area", 2),
            ("prog::leaf", LEN as u64),
        ];
        for (name, calls) in wanted {
            let f = rep
                .function(name)
                .unwrap_or_else(|| panic!("{ctx}: no {name} in the report"));
            assert_eq!(
                canonical(Path::new(&f.module)),
                canonical(&exe),
                "{ctx}: module of {name}"
            );
            if opt == 0 {
                assert_eq!(f.calls, *calls, "{ctx}: calls of {name}");
            }
        }
        if opt == 0 {
            assert_eq!(
                rep.calls("prog::fib"),
                fib_calls(FIB_N),
                "{ctx}: calls of prog::fib"
            );
        }
    }
}

/// fib(n)'s call tree, by construction.
fn fib_outline(n: u64, depth: usize, out: &mut String) {
    out.push_str(&"  ".repeat(depth));
    out.push_str("prog::fib()\n");
    if n >= 2 {
        fib_outline(n - 1, depth + 1, out);
        fib_outline(n - 2, depth + 1, out);
    }
}

#[test]
fn rust_o0_tree_of_own_functions() {
    for v0 in [false, true] {
        let exe = prog(0, v0);
        let rec = record(&exe, &[], &[]);
        let replay = replay(&rec.dir.path);
        let main_thread = replay.main_thread().expect("a thread with main()");
        let pm = main_thread
            .find("prog::main()")
            .expect("prog::main() in the tree");
        let own = |l: &str| {
            (l.starts_with("prog::") || l.starts_with("<prog::")) && !l.contains("{closure")
        };
        let actual = outline(&project(std::slice::from_ref(pm), &own));
        let mut expected = String::from("prog::main()\n  prog::compute()\n");
        for _ in 0..LEN {
            expected.push_str("    prog::leaf()\n");
        }
        fib_outline(FIB_N, 1, &mut expected);
        expected.push_str("  prog::total_area()\n");
        expected.push_str(
            "    <prog::Square as prog::Shape>::area()\n"
                .repeat(2)
                .as_str(),
        );
        assert_outline_eq(
            &actual,
            &expected,
            &format!("{} (trace {})", exe.display(), rec.dir.path.display()),
        );
    }
}

#[test]
fn rust_own_counts_match_callgrind() {
    for (opt, v0) in variants() {
        let opts = CompareOptions {
            only: Some(own_symbol),
            ..Default::default()
        };
        let (_, cmp) = assert_counts_match_callgrind(&prog(opt, v0), &[], &opts);
        assert!(
            cmp.compared >= 5,
            "only {} of the crate's functions compared",
            cmp.compared
        );
    }
}

/// Every function of the executable, std's runtime included.
#[test]
fn rust_all_counts_match_callgrind() {
    for (opt, v0) in variants() {
        assert_counts_match_callgrind(&prog(opt, v0), &[], &CompareOptions::default());
    }
}
