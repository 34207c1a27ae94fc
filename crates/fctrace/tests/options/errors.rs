//! Errors and edge cases of the command line: every error is a non-zero
//! exit with a clear message on stderr, never a Rust panic, never a death
//! by signal (except the death by the program's own signal, below). Also:
//! record ends as the program did (by the same signal when a signal N
//! killed it), the program's arguments reach it untouched, and a
//! stripped executable is traced through its dynamic symbols, with a warning.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn exits(opt: &str) -> PathBuf {
    c_program("exits.c", opt, &[opt])
}

fn copy_exe(from: &Path, to: &Path, mode: u32) {
    fs::copy(from, to).unwrap();
    fs::set_permissions(to, fs::Permissions::from_mode(mode)).unwrap();
}

/// `fctrace record` of `program` must fail: non-zero, a message naming
/// the problem (one of `keywords`, case-insensitive) on stderr.
#[track_caller]
fn assert_record_fails(program: &Path, keywords: &[&str]) -> Run {
    let dir = TraceDir::new("error");
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
        program.as_os_str(),
    ]);
    assert_fails_with(&r, keywords);
    // Live mode too.
    let live = fctrace(&[program.as_os_str()]);
    assert_fails_with(&live, keywords);
    r
}

#[track_caller]
fn assert_fails_with(r: &Run, keywords: &[&str]) {
    assert!(!r.success(), "expected an error\n{}", r.describe());
    let err = r.stderr.to_lowercase();
    assert!(
        !err.trim().is_empty(),
        "an error without a message\n{}",
        r.describe()
    );
    assert!(
        keywords.iter().any(|k| err.contains(&k.to_lowercase())),
        "the message should say one of {keywords:?}\n{}",
        r.describe()
    );
}

#[test]
fn program_not_found() {
    let missing = Path::new("/nonexistent/fctrace-test/no-such-program");
    let r = assert_record_fails(missing, &["not found", "no such file"]);
    assert!(
        r.stderr.contains("no-such-program"),
        "the message should name the program\n{}",
        r.describe()
    );
    // A bare name is looked up in PATH.
    let bare = Path::new("fctrace-no-such-program-in-path");
    let r = assert_record_fails(bare, &["not found", "no such file"]);
    assert!(
        r.stderr.contains("fctrace-no-such-program-in-path"),
        "{}",
        r.describe()
    );
}

#[test]
fn program_found_in_path() {
    let exe = exits("-O0");
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let bare = Path::new(exe.file_name().unwrap());
    let r = record_env(bare, &["args", "x"], &[("PATH", &path)]).run;
    assert_no_panic(&r);
    assert!(r.success(), "{}", r.describe());
    assert_eq!(r.stdout, "[x]\n");
}

#[test]
fn program_not_executable() {
    let d = scratch("noexec");
    let p = d.path.join("exits-noexec");
    copy_exe(&exits("-O0"), &p, 0o644);
    assert_record_fails(&p, &["not executable", "permission denied"]);
}

#[test]
fn program_is_a_directory() {
    let d = scratch("isdir");
    assert_record_fails(
        &d.path,
        &[
            "directory",
            "not executable",
            "not an elf",
            "permission denied",
        ],
    );
}

#[test]
fn program_not_elf() {
    let d = scratch("notelf");
    let p = d.path.join("plain-text");
    fs::write(&p, "this is not a program\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    assert_record_fails(&p, &["not an elf"]);
    let e = d.path.join("empty");
    fs::write(&e, "").unwrap();
    fs::set_permissions(&e, fs::Permissions::from_mode(0o755)).unwrap();
    assert_record_fails(&e, &["not an elf"]);
}

/// A `#!` script runs as the kernel runs it (tests/runtimes/scripts.rs); one whose
/// interpreter is not an ELF program (a text file) is refused, and not run.
#[test]
fn program_is_a_shell_script() {
    let d = scratch("script");
    let marker = d.path.join("script-ran");
    let interp = d.path.join("not-a-program");
    fs::write(&interp, "this is not a program\n").unwrap();
    fs::set_permissions(&interp, fs::Permissions::from_mode(0o755)).unwrap();
    let p = d.path.join("script.sh");
    fs::write(
        &p,
        format!(
            "#!{}\necho script output\ntouch '{}'\n",
            interp.display(),
            marker.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    let r = assert_record_fails(&p, &["not an elf"]);
    assert!(
        !r.stdout.contains("script output") && !marker.exists(),
        "the script ran\n{}",
        r.describe()
    );
}

/// An ELF for another machine (x86_64 executable with e_machine set to
/// AArch64).
#[test]
fn program_not_x86_64() {
    let d = scratch("aarch64");
    let p = d.path.join("exits-aarch64");
    copy_exe(&exits("-O0"), &p, 0o755);
    let mut bytes = fs::read(&p).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    bytes[18] = 183; // EM_AARCH64
    bytes[19] = 0;
    fs::write(&p, bytes).unwrap();
    assert_record_fails(&p, &["x86_64", "x86-64", "architecture", "machine"]);
}

#[test]
fn program_statically_linked() {
    let exe = Build::new(
        Lang::C,
        "exits-static",
        &[program_source("exits.c")],
        &["-O0", "-static"],
    )
    .build();
    // Statically linked: no program interpreter, no dynamic section.
    let headers = tool("readelf", &[OsStr::new("-lW"), exe.as_os_str()]).stdout;
    assert!(
        !headers.contains("INTERP") && !headers.contains("DYNAMIC"),
        "{headers}"
    );
    assert_record_fails(&exe, &["static"]);
}

/// `strip`ped: no .symtab. fctrace still traces through the dynamic
/// symbols, warns, and the program runs normally.
#[test]
fn program_fully_stripped() {
    let d = scratch("stripped");
    let p = d.path.join("exits-stripped");
    copy_exe(&exits("-O0"), &p, 0o755);
    tool("strip", &[p.as_os_str()]);
    let trace = TraceDir::new("stripped-trace");
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        trace.path.as_os_str(),
        p.as_os_str(),
        OsStr::new("args"),
        OsStr::new("a"),
    ]);
    assert!(
        r.success(),
        "a stripped program is traced, exit 0\n{}",
        r.describe()
    );
    assert_eq!(r.stdout, "[a]\n");
    let err = r.stderr.to_lowercase();
    assert!(
        err.contains("warning") || err.contains("strip") || err.contains("symbol"),
        "a warning is expected\n{}",
        r.describe()
    );
    // The trace is readable.
    replay_text(&trace.path);
    report(&trace.path);
}

/// tree.c built with -rdynamic, then stripped: its global functions are
/// in .dynsym, so the tree is the same, with `scale` (static: no dynamic
/// symbol) found from its FDE and named by its address.
#[test]
fn stripped_with_dynamic_symbols_still_shows_the_tree() {
    let built = Build::new(
        Lang::C,
        "tree-rdynamic",
        &[program_source("tree.c")],
        &["-O0", "-rdynamic"],
    )
    .build();
    let d = scratch("rdynamic");
    let p = d.path.join("tree-stripped");
    copy_exe(&built, &p, 0o755);
    tool("strip", &[p.as_os_str()]);
    let rec = record_any(&p, &[], &[]);
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert!(
        !rec.run.stderr.trim().is_empty(),
        "a warning is expected for a stripped program\n{}",
        rec.run.describe()
    );
    let replay = replay(&rec.dir.path);
    let expected = expected_outline(
        "
        main()
          puts()
          leaf()
          nest1()
            nest2()
              leaf()
              inc()
            leaf()
          rec()
            rec()
              rec()
                inc()
          g()
            h()
          spin_entry()
          sum_to()
          SCALE
          SCALE
          checked()
          checked()
            rare()
              printf()
          strlen()
          printf()
        ",
    );
    let expected = if SELF_ENTRY_JUMP_IS_CALL {
        expected.replace(
            "  spin_entry()\n",
            "  spin_entry()\n    spin_entry()\n      spin_entry()\n",
        )
    } else {
        expected
    };
    // The unstripped build's address of scale (the same code).
    let scale = function_symbols(&built)
        .into_iter()
        .find(|f| f.name == "scale")
        .expect("scale in tree.c's symbols")
        .addr;
    let expected = expected.replace("SCALE", &format!("tree-stripped+{scale:#x}()"));
    assert_outline_eq(
        &outline(std::slice::from_ref(replay.main())),
        &expected,
        "stripped tree.c -O0 -rdynamic",
    );
}

#[test]
fn trace_directory_missing() {
    let missing = Path::new("/nonexistent/fctrace-test/no-such-trace");
    for cmd in ["replay", "report", "info"] {
        let r = fctrace(&[OsStr::new(cmd), OsStr::new("-d"), missing.as_os_str()]);
        assert_fails_with(&r, &["no-such-trace"]);
    }
    let r = fctrace(&[
        OsStr::new("report"),
        OsStr::new("-d"),
        missing.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("json"),
    ]);
    assert_fails_with(&r, &["no-such-trace"]);
}

#[test]
fn trace_directory_empty_or_a_file() {
    let d = scratch("empty-trace");
    let file = d.path.join("a-file");
    fs::write(&file, "not a trace\n").unwrap();
    for dir in [d.path.join("empty"), file.clone()] {
        if !dir.exists() {
            fs::create_dir_all(&dir).unwrap();
        }
        for cmd in ["replay", "report", "info"] {
            let r = fctrace(&[OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()]);
            assert!(
                !r.success() && !r.stderr.trim().is_empty(),
                "{cmd} of {}: expected an error\n{}",
                dir.display(),
                r.describe()
            );
        }
    }
}

/// Every regular file of a trace directory, relative to it.
fn files_of(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for f in files_of(from) {
        let dst = to.join(&f);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(from.join(&f), dst).unwrap();
    }
}

/// Deterministic garbage.
fn garbage(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// Each file of a real trace truncated to nothing, cut in half, or
/// overwritten with garbage (same length, and all 0xff): replay, report and
/// info must neither panic nor die by a signal nor hang; replay and report
/// must not pass the damage over in silence: an error (non-zero, message),
/// or at least a warning on stderr.
#[test]
fn corrupt_and_truncated_trace_files() {
    let rec = record(&c_program("tree.c", "-O0", &["-O0"]), &[], &[]);
    let files = files_of(&rec.dir.path);
    assert!(
        !files.is_empty(),
        "record wrote no file in {}",
        rec.dir.path.display()
    );
    let mut failures = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let len = fs::metadata(rec.dir.path.join(f)).unwrap().len() as usize;
        let variants: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            (
                "half",
                fs::read(rec.dir.path.join(f)).unwrap()[..len / 2].to_vec(),
            ),
            ("garbage", garbage(len.max(64), i as u64)),
            ("0xff", vec![0xff; len.max(64)]),
        ];
        for (what, content) in variants {
            let damaged = TraceDir::new("damaged");
            copy_dir(&rec.dir.path, &damaged.path);
            fs::write(damaged.path.join(f), &content).unwrap();
            for cmd in [
                &["replay"][..],
                &["report", "--format", "json"][..],
                &["info"][..],
            ] {
                let mut args: Vec<&OsStr> = vec![
                    OsStr::new(cmd[0]),
                    OsStr::new("-d"),
                    damaged.path.as_os_str(),
                ];
                args.extend(cmd[1..].iter().map(OsStr::new));
                let r = run_with_timeout(
                    std::process::Command::new(fctrace_bin()).args(&args),
                    std::time::Duration::from_secs(60),
                );
                assert_no_panic(&r);
                // info may not read every file (it need not read the
                // events to describe a trace): only robustness is asked of
                // it. replay and report read everything.
                if cmd[0] != "info" && r.stderr.trim().is_empty() {
                    failures.push(format!(
                        "{} {what}: `{}` exited {} with nothing on stderr",
                        f.display(),
                        cmd.join(" "),
                        r.status
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "damage passed over in silence:\n{}",
        failures.join("\n")
    );
}

#[test]
fn record_exit_status_is_the_programs() {
    let exe = exits("-O0");
    for code in [0, 3, 42] {
        let rec = record_any(&exe, &["code", &code.to_string()], &[]);
        assert_eq!(rec.run.code(), Some(code), "{}", rec.run.describe());
        // The trace of a failing program is a trace like any other.
        let replay = replay(&rec.dir.path);
        assert_eq!(
            replay
                .main()
                .children
                .iter()
                .filter(|c| c.label == "work()")
                .count(),
            1
        );
    }
}

#[test]
fn record_exit_status_of_a_killed_program() {
    let exe = exits("-O0");
    for (sig, name) in [
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGKILL, "SIGKILL"),
    ] {
        // fctrace writes the trace, then dies by the same signal as the
        // program (so a shell sees the same status).
        let rec = record_any(&exe, &["signal", &sig.to_string()], &[]);
        assert_eq!(
            rec.run.signal(),
            Some(sig),
            "{name}: fctrace dies by signal {sig} as the program did\n{}",
            rec.run.describe()
        );
        // What was recorded before the signal is readable: main() never
        // returned, work() did.
        let replay = replay(&rec.dir.path);
        let main = replay
            .main_thread()
            .and_then(|t| t.find("main()"))
            .unwrap_or_else(|| panic!("{name}: no main()"));
        assert!(
            main.children.iter().any(|c| c.label == "work()"),
            "{name}: {}",
            outline(std::slice::from_ref(main))
        );
    }
}

/// Everything after PROGRAM is the program's, options included.
#[test]
fn program_arguments_pass_through() {
    let exe = exits("-O2");
    let args = ["args", "-l", "--help", "-d", "x y", "", "--", "-"];
    let rec = record(&exe, &args, &[]);
    assert_eq!(
        rec.run.stdout,
        "[-l]\n[--help]\n[-d]\n[x y]\n[]\n[--]\n[-]\n",
        "{}",
        rec.run.describe()
    );
    // Live mode too: the program's output comes first.
    let mut live: Vec<&OsStr> = vec![exe.as_os_str()];
    live.extend(args.iter().map(OsStr::new));
    let r = fctrace(&live);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stdout
            .starts_with("[-l]\n[--help]\n[-d]\n[x y]\n[]\n[--]\n[-]\n"),
        "{}",
        r.describe()
    );
}

#[test]
fn no_program_is_a_usage_error() {
    for args in [&[][..], &["record"][..], &["record", "-d", "/tmp/x"][..]] {
        let r = fctrace(args);
        assert!(!r.success(), "{}", r.describe());
        assert!(!r.stderr.trim().is_empty(), "{}", r.describe());
    }
}

/// `start_unix_ns` of the trace in `dir`: which recording it is.
fn started(dir: &Path) -> u64 {
    let text = fs::read_to_string(dir.join("info.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["start_unix_ns"]
        .as_u64()
        .unwrap()
}

#[test]
fn recording_again_keeps_the_earlier_trace_and_never_takes_a_users_directory() {
    let exe = exits("-O0");
    let d = scratch("again");
    let dir = d.path.join("t");
    let old = d.path.join("t.old");
    let rec = |dir: &Path, opts: &[&str]| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("record"), OsStr::new("-d"), dir.as_os_str()];
        args.extend(opts.iter().map(OsStr::new));
        args.extend([exe.as_os_str(), OsStr::new("code"), OsStr::new("0")]);
        fctrace(&args)
    };
    let first = rec(&dir, &[]);
    first.expect_success();
    assert!(!first.stderr.contains(".old"), "{}", first.describe());
    let one = started(&dir);
    // Again: the earlier trace is kept as t.old, and fctrace says so.
    let second = rec(&dir, &[]);
    second.expect_success();
    let kept = format!("fctrace: kept the earlier trace as {}\n", old.display());
    assert!(second.stderr.contains(&kept), "{}", second.describe());
    assert_eq!(started(&old), one);
    let two = started(&dir);
    assert_ne!(two, one);
    // A flight recorder's directory, with its snapshots, is a trace too;
    // it replaces the older t.old, and so is said.
    let ring = rec(&dir, &["--ring", "1M", "--snapshot-at-exit"]);
    ring.expect_success();
    let replacing = format!(
        "fctrace: kept the earlier trace as {} (replacing the older one there)\n",
        old.display()
    );
    assert!(ring.stderr.contains(&replacing), "{}", ring.describe());
    assert_eq!(started(&old), two);
    let third = rec(&dir, &[]);
    third.expect_success();
    assert!(third.stderr.contains(&replacing), "{}", third.describe());
    assert!(old.join("info.json").exists() && started(&old) != two);

    // A directory of the user's that has what a trace has (tasks/,
    // sessions/) and more: refused, untouched, and nothing moved.
    let mine = d.path.join("mine");
    fs::create_dir_all(mine.join("tasks")).unwrap();
    fs::create_dir_all(mine.join("sessions")).unwrap();
    fs::write(mine.join("tasks/main.yml"), "- name: x\n").unwrap();
    fs::write(mine.join("notes.txt"), "mine\n").unwrap();
    let r = rec(&mine, &[]);
    assert_fails_with(&r, &["not an fctrace trace"]);
    assert!(r.stderr.contains("notes.txt"), "{}", r.describe());
    assert_eq!(
        fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(mine.join("tasks/main.yml").exists());
    assert!(!d.path.join("mine.old").exists());
    // And a t.old that is not a trace (though it has a tasks/) is never
    // replaced: recording into t is refused.
    fs::remove_dir_all(&old).unwrap();
    fs::create_dir_all(old.join("tasks")).unwrap();
    fs::write(old.join("precious"), "x").unwrap();
    let r = rec(&dir, &[]);
    assert_fails_with(&r, &["t.old"]);
    assert!(old.join("precious").exists());
    assert!(dir.join("info.json").exists());
}
