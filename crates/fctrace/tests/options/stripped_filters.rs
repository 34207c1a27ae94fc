//! A stripped program traced with a record-time filter (`-N`, `-F`, `-D`):
//! the agent used to panic while placing its common code (the filtered
//! variant is larger than the arena sized for a module with few
//! functions) and ran the program untraced. Each filter gives the exact
//! tree: the program's part written from the source, the whole tree equal
//! to the unfiltered recording filtered at replay.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

/// Built stripped; with `-rdynamic` its functions are in `.dynsym`.
fn program(exported: bool) -> PathBuf {
    let mut flags = vec!["-O0", "-fno-builtin", "-s"];
    if exported {
        flags.push("-rdynamic");
    }
    let suffix = if exported { "-s-rdynamic" } else { "-s" };
    c_program("stripped_filters.c", suffix, &flags)
}

const ARGS: &[&str] = &["2"];

/// The call lines of `replay -d DIR opts`.
fn tree(dir: &Path, opts: &[&str]) -> Vec<String> {
    call_lines(&fctrace_on("replay", dir, opts))
}

/// Records with `opts`, checks the program behaves as natively and that
/// fctrace says nothing of an internal error; returns the tree.
#[track_caller]
fn record_tree(exe: &Path, opts: &[&str]) -> (Recorded, Vec<String>) {
    let native = run_native(exe, ARGS);
    let rec = record(exe, ARGS, opts);
    assert_eq!(native.code(), Some(0), "{}", native.describe());
    assert_eq!(native.stdout, rec.run.stdout, "{}", rec.run.describe());
    assert!(
        !rec.run.stderr.contains("internal error") && !rec.run.stderr.contains("panicked"),
        "{opts:?}\n{}",
        rec.run.describe()
    );
    let t = tree(&rec.dir.path, &[]);
    (rec, t)
}

/// The lines of `lines` from the one equal to `first` to the one equal to
/// `last`, both included.
fn span(lines: &[String], first: &str, last: &str) -> Vec<String> {
    let a = lines
        .iter()
        .position(|l| l == first)
        .unwrap_or_else(|| panic!("no {first:?} in\n{}", lines.join("\n")));
    let b = a + lines[a..]
        .iter()
        .position(|l| l == last)
        .unwrap_or_else(|| panic!("no {last:?} in\n{}", lines.join("\n")));
    lines[a..=b].to_vec()
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

/// One `work(i)` of stripped_filters.c at the given indent, with or
/// without its memcpy.
fn work(indent: &str, memcpy: bool) -> String {
    let fill = if memcpy {
        format!("{indent}  fill() {{\n{indent}    memcpy();\n{indent}  }} /* fill */\n")
    } else {
        format!("{indent}  fill();\n")
    };
    format!("{indent}work() {{\n{indent}  memset();\n{fill}{indent}}} /* work */\n")
}

/// main() as the source makes it with ARGS (two work() calls).
fn main_tree(memcpy: bool) -> Vec<String> {
    let w = work("  ", memcpy);
    lines(&format!(
        "main() {{\n  atoi();\n{w}{w}  printf();\n}} /* main */\n"
    ))
}

#[test]
fn stripped_exported_with_each_filter() {
    let exe = program(true);
    let (full, all) = record_tree(&exe, &[]);
    assert_eq!(
        span(&all, "main() {", "} /* main */"),
        main_tree(true),
        "unfiltered"
    );

    // -N memcpy: no memcpy, fill() a leaf.
    let (_, t) = record_tree(&exe, &["-N", "memcpy"]);
    assert_eq!(span(&t, "main() {", "} /* main */"), main_tree(false));
    assert_eq!(t, tree(&full.dir.path, &["-N", "memcpy"]), "-N memcpy");

    // -F main: main's call only.
    let (_, t) = record_tree(&exe, &["-F", "main"]);
    assert_eq!(t, main_tree(true), "-F main");
    assert_eq!(t, tree(&full.dir.path, &["-F", "main"]), "-F main");

    // -D 2: main and its direct callees.
    let (_, t) = record_tree(&exe, &["-D", "2"]);
    assert_eq!(
        span(&t, "main() {", "} /* main */"),
        lines("main() {\n  atoi();\n  work();\n  work();\n  printf();\n} /* main */\n"),
        "-D 2"
    );
    assert_eq!(t, tree(&full.dir.path, &["-D", "2"]), "-D 2");
}

#[test]
fn stripped_local_functions_with_each_filter() {
    // Without -rdynamic its functions are found from their FDEs and named
    // by address: the same build unstripped (the same code at the same
    // addresses) names them here, and main is selected by its address.
    let exe = program(false);
    let unstripped = c_program(
        "stripped_filters.c",
        "-unstripped",
        &["-O0", "-fno-builtin"],
    );
    let file = exe.file_name().unwrap().to_string_lossy().into_owned();
    let syms = function_symbols(&unstripped);
    let name_of = |a: u64| {
        syms.iter()
            .find(|s| s.addr == a)
            .map_or(format!("{a:#x}?"), |s| s.name.clone())
    };
    let named = |t: &[String]| -> Vec<String> {
        t.iter()
            .map(|l| {
                let prefix = format!("{file}+0x");
                let Some(k) = l.find(&prefix) else {
                    return l.clone();
                };
                let rest = &l[k + prefix.len()..];
                let n = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
                let a = u64::from_str_radix(&rest[..n], 16).unwrap();
                format!("{}{}{}", &l[..k], name_of(a), &rest[n..])
            })
            .collect()
    };
    let (full, all) = record_tree(&exe, &[]);
    assert_eq!(
        span(&named(&all), "main() {", "} /* main */"),
        main_tree(true),
        "unfiltered"
    );

    let (_, t) = record_tree(&exe, &["-N", "memcpy"]);
    assert_eq!(
        span(&named(&t), "main() {", "} /* main */"),
        main_tree(false)
    );
    assert_eq!(t, tree(&full.dir.path, &["-N", "memcpy"]), "-N memcpy");

    let main_at = syms.iter().find(|s| s.name == "main").unwrap().addr;
    let main = format!("{file}+{main_at:#x}");
    let (_, t) = record_tree(&exe, &["-F", &main]);
    assert_eq!(named(&t), main_tree(true), "-F {main}");
    assert_eq!(t, tree(&full.dir.path, &["-F", &main]), "-F {main}");

    let (_, t) = record_tree(&exe, &["-D", "2"]);
    assert_eq!(
        span(&named(&t), "main() {", "} /* main */"),
        lines("main() {\n  atoi();\n  work();\n  work();\n  printf();\n} /* main */\n"),
        "-D 2"
    );
    assert_eq!(t, tree(&full.dir.path, &["-D", "2"]), "-D 2");
}
