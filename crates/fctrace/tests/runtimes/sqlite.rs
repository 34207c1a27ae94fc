//! A real-world C code base we did not write: the SQLite amalgamation
//! (sqlite3.c, ~1,600 functions left after -O2's inlining, ~2,700 at -O0),
//! driven by tests/programs/sqlite_driver.c. fctrace's call count of every
//! function of the executable must equal callgrind's.
//!
//! The source comes from the libsqlite3-sys crate, a dev-dependency in a
//! `cfg(any())` target table: cargo never builds it, `cargo metadata`
//! downloads and unpacks it and gives its directory (`sqlite3/sqlite3.c`).
//! sqlite3.c is compiled once into an object file (cached; about 45 s of CPU
//! at -O2 on this project's machines, 15 s at -O0), then linked with the
//! driver.

use fctrace_testkit::*;

const ROWS: u64 = SQLITE_ROWS;

/// Needs no engine: the source is found, the build works, the program's
/// output is its own, and callgrind's counts of functions called only from
/// the driver are what the driver does.
#[test]
fn sqlite_builds_and_callgrind_sees_the_driver() {
    for opt in ["-O2", "-O0"] {
        let exe = sqlite_driver(opt);
        let out = run_native(&exe, &[]);
        assert!(
            out.stdout.starts_with("-- per city\n"),
            "{}",
            out.describe()
        );
        let syms = function_symbols(&exe);
        assert!(
            syms.len() > 1500,
            "{} has only {} function symbols",
            exe.display(),
            syms.len()
        );
        let c = callgrind(&exe, &[]).of_object(&exe);
        let get = |n: &str| c.get(n).copied().unwrap_or(0);
        assert_eq!(get("main"), 1);
        assert_eq!(get("sqlite3_open"), 1);
        assert_eq!(get("sqlite3_close"), 1);
        assert_eq!(get("sqlite3_bind_double"), ROWS);
        assert!(
            c.len() > 400,
            "callgrind saw only {} functions called",
            c.len()
        );
        assert_oracle_resolves(&exe, &[]);
        let funcs = disassemble(&exe);
        let self_entry: Vec<&str> = funcs
            .iter()
            .filter(|f| !f.self_entry_jumps().is_empty())
            .map(|f| f.name.as_str())
            .collect();
        eprintln!(
            "{}: {} function symbols, {} called under callgrind, {} jump to their own entry: {:?}",
            exe.display(),
            syms.len(),
            c.len(),
            self_entry.len(),
            self_entry
        );
    }
}

#[test]
fn sqlite_o2_counts_match_callgrind() {
    let exe = sqlite_driver("-O2");
    let (rep, cmp) = assert_counts_match_callgrind(&exe, &[], &CompareOptions::default());
    assert!(
        cmp.compared > 400,
        "only {} functions compared",
        cmp.compared
    );
    assert_eq!(rep.calls("sqlite3_bind_double"), ROWS);
}

#[test]
fn sqlite_o0_counts_match_callgrind() {
    let exe = sqlite_driver("-O0");
    let (_, cmp) = assert_counts_match_callgrind(&exe, &[], &CompareOptions::default());
    assert!(
        cmp.compared > 600,
        "only {} functions compared",
        cmp.compared
    );
}

/// The program's own output passes through `record` unchanged.
#[test]
fn sqlite_output_passes_through_record() {
    let exe = sqlite_driver("-O2");
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &[]);
    assert_eq!(
        rec.run.stdout, native.stdout,
        "program output changed under fctrace record"
    );
}
