//! A library with data between two code segments (as BOLT-optimised
//! libraries have: librustc_driver's code, data, then its optimised code).
//! With -l, patching its entries makes only the pages written writable,
//! each run with its own protection back: the data pages between stay
//! writable (they once became read-only and executable, and rustc
//! --version died of SIGSEGV on its first write to them).

use fctrace_testkit::*;
use std::path::PathBuf;

/// late_code(i) adds early_code(i) (the running sum 1, 3, 6) to 5.
const STDOUT: &str = "15\n";

/// The library (late_code at 0x400000, after its data), and the program.
fn programs() -> (PathBuf, PathBuf) {
    let lib = c_shared_lib(
        "libsplit_code.so",
        "split_code_lib.c",
        &["-O1", "-Wl,--section-start=.late_text=0x400000"],
    );
    let exe = c_program_with_lib("split_code", "split_code.c", &["-O1"], &lib);
    (lib, exe)
}

/// The flags of `lib`'s loadable segments, in order (from `readelf -l`:
/// `R E`, `RW`...).
fn load_segment_flags(lib: &std::path::Path) -> Vec<String> {
    let r = tool("readelf", &["-lW".as_ref(), lib.as_os_str()]);
    r.stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[6..f.len() - 1].concat()
        })
        .collect()
}

#[test]
fn data_between_code_segments_stays_writable_with_nest_libcall() {
    let (lib, exe) = programs();
    let flags = load_segment_flags(&lib);
    let first_code = flags.iter().position(|f| f.contains('E')).unwrap();
    let last_code = flags.iter().rposition(|f| f.contains('E')).unwrap();
    assert!(
        flags[first_code..last_code].iter().any(|f| f.contains('W')),
        "the library's data is not between its code segments: {flags:?}"
    );
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, STDOUT, "{}", native.describe());
    let rec = record(&exe, &[], &["-l"]);
    assert_same_behaviour(&native, &rec.run, "-l");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    // main's loop calls late_code 3 times, each calls early_code once
    // (callgrind does not name late_code, in a segment of its own).
    assert_eq!(rep.calls("late_code"), 3, "{:?}", rep.calls_by_name());
    assert_eq!(rep.calls("early_code"), 3, "{:?}", rep.calls_by_name());
    let text = replay_text(&rec.dir.path);
    let calls = call_lines(&text);
    assert!(
        calls
            .windows(2)
            .filter(|w| w[0].contains("late_code() {") && w[1].contains("early_code();"))
            .count()
            == 3,
        "early_code is not called by late_code:\n{text}"
    );
}
