//! uftrace's `--srcline`, `-L`/`--loc-filter` and `--libname` on the
//! readers, on srcline_main.c linked with srcline_lib.c's library, both
//! built with -g: each function's expected `FILE:LINE` is the source file
//! the compiler was given and the line of the function's definition in
//! it (found by its text, as `grep -n` would), the calls are the
//! program's (main -> a -> b -> lib_a -> lib_b), the module names its
//! files'.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

struct Built {
    exe: PathBuf,
    lib: PathBuf,
}

fn built() -> Built {
    let lib = c_shared_lib("libsrcline.so", "srcline_lib.c", &["-g", "-O0"]);
    let exe = c_program_with_lib("srcline_main", "srcline_main.c", &["-g", "-O0"], &lib);
    Built { exe, lib }
}

/// `FILE:LINE` of the definition of the function whose definition line
/// starts with `head` in `tests/programs/FILE`.
fn at(file: &str, head: &str) -> String {
    let path = program_source(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with(head))
        .unwrap_or_else(|| panic!("no `{head}` in {file}"))
        + 1;
    format!("{}:{line}", path.display())
}

/// The definitions: name, FILE:LINE.
fn definitions() -> Vec<(&'static str, String)> {
    vec![
        ("main", at("srcline_main.c", "int main(void)")),
        (
            "a",
            at("srcline_main.c", "static int __attribute__((noinline)) a("),
        ),
        (
            "b",
            at("srcline_main.c", "static int __attribute__((noinline)) b("),
        ),
        ("lib_a", at("srcline_lib.c", "int lib_a(")),
        ("lib_b", at("srcline_lib.c", "int lib_b(")),
    ]
}

fn recorded(b: &Built, opts: &[&str]) -> Recorded {
    // -l: the library's own functions traced (lib_b called from lib_a).
    let mut all = vec!["-l"];
    all.extend(opts);
    let rec = record(&b.exe, &[], &all);
    let native = std::process::Command::new(&b.exe).output().unwrap();
    assert_eq!(rec.run.stdout, String::from_utf8_lossy(&native.stdout));
    assert_eq!(rec.run.stdout, "8\n", "the program's output: lib_a(2) + 1");
    rec
}

fn dir(rec: &Recorded) -> &Path {
    &rec.dir.path
}

/// The call lines of the program's own functions (libc's left out).
fn own_lines(text: &str) -> Vec<String> {
    let ours = ["main", "a", "b", "lib_a", "lib_b"];
    call_lines(text)
        .into_iter()
        .filter(|l| {
            let t = l.trim_start();
            let name = t
                .strip_prefix("} /* ")
                .unwrap_or(t)
                .split(['(', '@', ' ', ';'])
                .next()
                .unwrap_or(t);
            ours.contains(&name)
        })
        .collect()
}

#[test]
fn srcline_shows_each_functions_definition_in_the_tree() {
    let b = built();
    // uftrace's command lines: `record --srcline`, `replay --srcline`.
    let rec = recorded(&b, &["--srcline"]);
    let d = definitions();
    let loc = |n: &str| d.iter().find(|(f, _)| *f == n).unwrap().1.clone();
    let text = fctrace_on_quietly("replay", dir(&rec), &["--srcline"]);
    let want = vec![
        format!("main() {{ /* {} */", loc("main")),
        format!("  a() {{ /* {} */", loc("a")),
        format!("    b() {{ /* {} */", loc("b")),
        format!("      lib_a() {{ /* {} */", loc("lib_a")),
        format!("        lib_b(); /* {} */", loc("lib_b")),
        "      } /* lib_a */".to_string(),
        "    } /* b */".to_string(),
        "  } /* a */".to_string(),
        "} /* main */".to_string(),
    ];
    assert_eq!(own_lines(&text), want, "{text}");
    // uftrace's header.
    assert_eq!(
        text.lines().next(),
        Some("# DURATION     TID     FUNCTION [SOURCE]")
    );
    // Without --srcline, no comment.
    let plain = fctrace_on_quietly("replay", dir(&rec), &[]);
    assert!(own_lines(&plain)[0] == "main() {", "{plain}");
}

#[test]
fn srcline_in_report_and_graph_follows_the_name() {
    let b = built();
    let rec = recorded(&b, &[]);
    let report = fctrace_on_quietly("report", dir(&rec), &["--srcline"]);
    for (name, loc) in definitions() {
        let want = format!("  {name} [{loc}]");
        assert_eq!(
            report.lines().filter(|l| l.ends_with(&want)).count(),
            1,
            "`{want}` in\n{report}"
        );
    }
    let graph = fctrace_on_quietly("graph", dir(&rec), &["--srcline", "b"]);
    for (name, loc) in definitions().into_iter().skip(2) {
        let want = format!("{name} [{loc}]");
        assert!(
            graph.lines().any(|l| l.ends_with(&want)),
            "`{want}` in\n{graph}"
        );
    }
}

#[test]
fn loc_filter_shows_only_the_functions_of_matching_files() {
    let b = built();
    let rec = recorded(&b, &[]);
    // The program's file: main, a, b; the library's calls are hidden
    // (uftrace: the functions of other files are not shown).
    let text = fctrace_on_quietly("replay", dir(&rec), &["-L", "srcline_main.c$"]);
    assert_eq!(
        call_lines(&text),
        [
            "main() {",
            "  a() {",
            "    b();",
            "  } /* a */",
            "} /* main */"
        ],
        "{text}"
    );
    // The library's file: lib_a and lib_b, at the top.
    let text = fctrace_on_quietly("replay", dir(&rec), &["--loc-filter", "srcline_lib"]);
    assert_eq!(
        call_lines(&text),
        ["lib_a() {", "  lib_b();", "} /* lib_a */"],
        "{text}"
    );
    // `!LOC`: all but those (libc's calls, without a file, stay).
    let text = fctrace_on_quietly("replay", dir(&rec), &["-L", "!srcline_lib"]);
    let own = own_lines(&text);
    assert_eq!(
        own,
        [
            "main() {",
            "  a() {",
            "    b();",
            "  } /* a */",
            "} /* main */"
        ],
        "{text}"
    );
    assert!(
        call_lines(&text).iter().any(|l| l.contains("printf")),
        "{text}"
    );
    // A bad expression is an error.
    let r = fctrace(&[
        "replay".as_ref(),
        "-d".as_ref(),
        dir(&rec).as_os_str(),
        "-L".as_ref(),
        "(".as_ref(),
    ]);
    assert!(!r.success(), "{}", r.describe());
    assert!(r.stderr.contains("-L/--loc-filter"), "{}", r.describe());
}

#[test]
fn libname_names_every_function_with_its_module() {
    let b = built();
    let rec = recorded(&b, &[]);
    let exe = b.exe.file_name().unwrap().to_str().unwrap().to_string();
    let lib = b.lib.file_name().unwrap().to_str().unwrap().to_string();
    let text = fctrace_on_quietly("replay", dir(&rec), &["--libname"]);
    let want = vec![
        format!("main@{exe}() {{"),
        format!("  a@{exe}() {{"),
        format!("    b@{exe}() {{"),
        format!("      lib_a@{lib}() {{"),
        format!("        lib_b@{lib}();"),
        format!("      }} /* lib_a@{lib} */"),
        format!("    }} /* b@{exe} */"),
        format!("  }} /* a@{exe} */"),
        format!("}} /* main@{exe} */"),
    ];
    assert_eq!(own_lines(&text), want, "{text}");
    assert!(
        call_lines(&text)
            .iter()
            .any(|l| l.contains("printf@libc.so.6()")),
        "{text}"
    );
    let report = fctrace_on_quietly("report", dir(&rec), &["--libname"]);
    for want in [
        format!("  lib_b@{lib}"),
        format!("  main@{exe}"),
        "  printf@libc.so.6".to_string(),
    ] {
        assert!(
            report.lines().any(|l| l.ends_with(&want)),
            "`{want}` in\n{report}"
        );
    }
}
