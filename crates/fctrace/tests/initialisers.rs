//! Libraries' initialisers run before the program's main, and before a
//! preloaded object's constructor (the loader initialises dependencies
//! first): the agent starts earlier, from the dynamic loader's auditing
//! interface (docs/engine.md, "Starting before the libraries'
//! initialisers"), so that what they call is recorded.
//!
//! libinitialisers.so's C constructor calls the library's lib_sum (which
//! calls lib_work) and the program's program_hook; its C++ static object's
//! constructor calls cxx_step. Every count is compared with callgrind's,
//! which sees the whole run.

mod common;
use common::*;
use std::path::PathBuf;

/// lib_sum(2) = 1 + 4; lib_value() = lib_sum(4) = 1 + 4 + 7 + 10 (from the
/// constructor); cxx_total() = 2 + 3 + 4 (from the static object's
/// constructor); program_hook called once (by the constructor).
const STDOUT: &str = "5 22 9 1\n";

/// The library, and the program linked with it (found through its rpath;
/// -rdynamic: the library's weak program_hook binds to the program's).
fn programs() -> (PathBuf, PathBuf) {
    let lib = Build::new(
        Lang::Cxx,
        "libinitialisers.so",
        &[program_source("initialisers_lib.cpp")],
        &["-O1", "-shared", "-fPIC"],
    )
    .build();
    let dir = lib.parent().unwrap().to_str().unwrap().to_string();
    let exe = Build::new(
        Lang::C,
        "initialisers",
        &[program_source("initialisers.c")],
        &["-O1", "-rdynamic", &format!("-Wl,-rpath,{dir}")],
    )
    .libs(&[lib.to_str().unwrap()])
    .build();
    (lib, exe)
}

/// Where the first line naming `call` is in the replay text.
fn line_of(text: &str, call: &str) -> usize {
    text.lines()
        .position(|l| l.contains(call))
        .unwrap_or_else(|| panic!("no {call} in the replay:\n{}", clip(text, 6000)))
}

/// With -l, the library's functions called by its initialisers are
/// recorded, before main, as many times as callgrind counts them; and so
/// is the program's function the constructor calls.
#[test]
fn calls_of_library_initialisers_are_recorded_with_nest_libcall() {
    let (lib, exe) = programs();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, STDOUT, "{}", native.describe());
    let rec = record(&exe, &[], &["-l"]);
    assert_same_behaviour(&native, &rec.run, "-l");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    assert_eq!(rep.tasks.len(), 1, "one task: the agent started once");
    let cg = callgrind(&exe, &[]);
    let opts = CompareOptions {
        only: None,
        record_opts: &["-l"],
    };
    // Compared: lib_work, lib_sum, lib_init, cxx_step, Registry's
    // constructor, the static objects' initialiser, lib_value, cxx_total;
    // main and program_hook.
    for (object, functions) in [(&lib, 8), (&exe, 2)] {
        match compare_with_callgrind(object, &rep, &cg, &opts) {
            Ok(c) => assert!(c.compared >= functions, "{}: {c:?}", object.display()),
            Err(msg) => panic!("{msg}\ntrace: {}", rec.dir.path.display()),
        }
    }
    // The library's functions were called from its initialisers first.
    let text = replay_text(&rec.dir.path);
    let main = line_of(&text, "main() {");
    for call in ["lib_init() {", "Registry::Registry() {", "program_hook();"] {
        assert!(
            line_of(&text, call) < main,
            "{call} is not before main:\n{}",
            clip(&text, 6000)
        );
    }
}

/// Without -l, only the program's functions are traced: the one a
/// library's initialiser calls is recorded too (before main).
#[test]
fn program_functions_called_by_library_initialisers_are_recorded() {
    let (_lib, exe) = programs();
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "no -l");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.calls("program_hook"), 1, "{:?}", rep.calls_by_name());
    let cg = callgrind(&exe, &[]);
    if let Err(msg) = compare_with_callgrind(&exe, &rep, &cg, &CompareOptions::default()) {
        panic!("{msg}\ntrace: {}", rec.dir.path.display());
    }
    let text = replay_text(&rec.dir.path);
    assert!(line_of(&text, "program_hook()") < line_of(&text, "main() {"));
}
