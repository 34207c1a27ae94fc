//! Command-line parsing of live mode and `record`: option values attached
//! to their option as getopt and uftrace accept them (`-D3`, `-Fmain`,
//! `-t1ms`, `-Amain@arg1`), unknown options reported as such with clap's
//! suggestion (not taken for the program's name), and everything after the
//! program's name passed to the program untouched, hyphens included.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::Path;

/// `fctrace OPTS exe ARGS` (live mode): asserts the program's output comes
/// first, unchanged, with its exit status, and returns the call tree
/// printed after it as an outline.
#[track_caller]
fn live(opts: &[&str], args: &[&str]) -> String {
    let exe = cli_args_program();
    let mut cmd: Vec<&OsStr> = opts.iter().map(OsStr::new).collect();
    cmd.push(exe.as_os_str());
    cmd.extend(args.iter().map(OsStr::new));
    let r = fctrace(&cmd);
    let native = run_env(&exe, args, &[]);
    assert_eq!(
        native.stdout,
        cli_args_output(args),
        "{}",
        native.describe()
    );
    assert_eq!(r.code(), native.code(), "exit status\n{}", r.describe());
    let tree = r
        .stdout
        .strip_prefix(native.stdout.as_str())
        .unwrap_or_else(|| panic!("not the program's output first\n{}", r.describe()));
    let parsed = parse_replay(tree).unwrap_or_else(|e| panic!("live tree: {e}\n{}", r.describe()));
    parsed.threads.iter().map(|t| outline(&t.roots)).collect()
}

/// `fctrace record -d DIR OPTS exe` then `replay`: the outline.
#[track_caller]
fn recorded(opts: &[&str]) -> String {
    let rec = record(&cli_args_program(), &[], opts);
    assert_eq!(
        rec.run.stdout,
        cli_args_output(&[]),
        "{}",
        rec.run.describe()
    );
    let tree = replay(&rec.dir.path);
    tree.threads.iter().map(|t| outline(&t.roots)).collect()
}

/// Each option with its value attached gives the tree the option asks for,
/// in live mode and with `record`, the same as with the value separate.
#[test]
fn attached_values() {
    // -F top with depth 2: top and the calls it makes, one level down.
    let top2 = expected_outline(
        "
        top()
          mid()
        ",
    );
    // -A: top's first argument is argc (1 without arguments).
    let top_arg = expected_outline(
        "
        top(1)
          mid()
            leaf()
        ",
    );
    let cases: &[(&[&str], &str)] = &[
        (&["-Ftop", "-D2"], &top2),
        (&["-F", "top", "-D", "2"], &top2),
        (&["-Ftop", "-D", "2"], &top2),
        (&["--filter=top", "--depth=2"], &top2),
        (&["-Ftop", "-Atop@arg1"], &top_arg),
        (&["-Ftop", "-Rleaf@retval", "-Nleaf", "-D2"], &top2),
    ];
    for (opts, want) in cases {
        assert_outline_eq(&live(opts, &[]), want, &format!("live {opts:?}"));
        assert_outline_eq(&recorded(opts), want, &format!("record {opts:?}"));
    }
    // -t acts on the display (live mode, replay); every call of this
    // program is far shorter than a second.
    assert_outline_eq(&live(&["-Ftop", "-t1s"], &[]), "", "live -t1s");
}

/// After the program's name, everything is the program's, even what looks
/// like fctrace's options.
#[test]
fn program_arguments_untouched() {
    let args = ["-D3", "--fitler", "-x", "--", "-Ftop", "plain"];
    let tree = live(&["-Ftop", "-D1"], &args);
    assert_outline_eq(&tree, "top()\n", "live with hyphenated program arguments");
    // `--` ends fctrace's options.
    let exe = cli_args_program();
    let r = fctrace(&[
        OsStr::new("-Fmid"),
        OsStr::new("--"),
        exe.as_os_str(),
        OsStr::new("-Fmid"),
    ]);
    assert_eq!(r.code(), Some(3), "{}", r.describe());
    assert!(
        r.stdout.starts_with(&cli_args_output(&["-Fmid"])),
        "{}",
        r.describe()
    );
}

/// `cmd` fails before running the program, naming the unknown option.
#[track_caller]
fn assert_unknown_option(cmd: &[&OsStr], option: &str, suggestion: Option<&str>) {
    let r = fctrace(cmd);
    assert_eq!(r.code(), Some(2), "usage error\n{}", r.describe());
    assert!(
        r.stderr
            .contains(&format!("unexpected argument '{option}'")),
        "must name {option} as an unknown option\n{}",
        r.describe()
    );
    if let Some(s) = suggestion {
        assert!(
            r.stderr
                .contains(&format!("a similar argument exists: '{s}'")),
            "must suggest {s}\n{}",
            r.describe()
        );
    }
    assert!(
        !r.stderr.contains("program not found"),
        "an option is not a program\n{}",
        r.describe()
    );
    assert!(
        !r.stdout.contains("top: "),
        "the program must not run\n{}",
        r.describe()
    );
}

fn os<'a>(parts: &'a [&'a str], exe: &'a Path) -> Vec<&'a OsStr> {
    let mut v: Vec<&OsStr> = parts.iter().map(OsStr::new).collect();
    v.push(exe.as_os_str());
    v
}

#[test]
fn unknown_options_are_named_with_a_suggestion() {
    let exe = cli_args_program();
    let dir = TraceDir::new("cli-typo");
    let d = dir.path.to_str().unwrap();
    assert_unknown_option(
        &os(&["--fitler", "top"], &exe),
        "--fitler",
        Some("--filter"),
    );
    assert_unknown_option(&os(&["--dept=2"], &exe), "--dept", Some("--depth"));
    assert_unknown_option(&os(&["-Ftop", "-x"], &exe), "-x", None);
    assert_unknown_option(
        &os(&["record", "-d", d, "--fitler", "top"], &exe),
        "--fitler",
        Some("--filter"),
    );
    assert!(!dir.path.exists(), "nothing recorded on a usage error");
}
