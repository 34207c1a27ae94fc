//! A name two modules have (issue 10, "What is shown is right" 5): with
//! -l, samename.c's helper() calls libsamename.so's helper() (through
//! lib_entry); the tree and the text report show each with its module
//! (`helper@libsamename.so`), the JSON report keeps the plain name and
//! the module in its own field. Names only one module has stay plain.

use fctrace_testkit::*;
use std::path::PathBuf;

/// The library, and the program linked with it (found through its rpath).
fn programs() -> (PathBuf, PathBuf) {
    let lib = c_shared_lib("libsamenameO1.so", "samename_lib.c", &["-O1"]);
    let exe = c_program_with_lib("samenameO1", "samename.c", &["-O1"], &lib);
    (lib, exe)
}

#[test]
fn same_name_in_two_modules_shows_the_module() {
    let (lib, exe) = programs();
    let lib_file = lib.file_name().unwrap().to_str().unwrap();
    let exe_file = exe.file_name().unwrap().to_str().unwrap();
    // helper(1) = lib_entry(1) + 100 = (1 + 10) + 100.
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "111\n", "{}", native.describe());
    let rec = record(&exe, &[], &["-l"]);
    assert_same_behaviour(&native, &rec.run, "record -l");

    // From the source: main > the program's helper > lib_entry > the
    // library's helper (printf's calls in libc left out).
    let text = fctrace_on("replay", &rec.dir.path, &["-F", "main", "-N", "printf"]);
    let expected = format!(
        "main() {{
  helper@{exe_file}() {{
    lib_entry() {{
      helper@{lib_file}();
    }} /* lib_entry */
  }} /* helper@{exe_file} */
}} /* main */
"
    );
    let calls: String = call_lines(&text).iter().map(|l| format!("{l}\n")).collect();
    assert_outline_eq(&calls, &expected, "replay -l -F main");

    let text_report = fctrace_on("report", &rec.dir.path, &["-F", "main", "-N", "printf"]);
    let rows: Vec<(&str, &str)> = text_report
        .lines()
        .skip(2)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // Total, self, calls, min, avg, max (each time is 2 words).
            (cols[4], *cols.last().unwrap())
        })
        .collect();
    let mut names: Vec<(&str, &str)> = rows.clone();
    names.sort();
    let helper_exe = format!("helper@{exe_file}");
    let helper_lib = format!("helper@{lib_file}");
    let mut want = vec![
        ("1", "lib_entry"),
        ("1", "main"),
        ("1", helper_exe.as_str()),
        ("1", helper_lib.as_str()),
    ];
    want.sort();
    assert_eq!(names, want, "{text_report}");

    let json = report(&rec.dir.path);
    let mut helpers: Vec<(String, String, u64)> = json
        .functions
        .iter()
        .filter(|f| f.name == "helper")
        .map(|f| {
            (
                f.module.rsplit('/').next().unwrap().to_string(),
                f.symbol.clone(),
                f.calls,
            )
        })
        .collect();
    helpers.sort();
    let mut want = vec![
        (exe_file.to_string(), "helper".to_string(), 1),
        (lib_file.to_string(), "helper".to_string(), 1),
    ];
    want.sort();
    assert_eq!(helpers, want);
}
