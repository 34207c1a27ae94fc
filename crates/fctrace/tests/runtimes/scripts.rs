//! `#!` scripts run as the kernel runs them: `fctrace ./script.sh` and
//! `fctrace python3` where `python3` is a `#!` shim found in PATH (pyenv)
//! follow the `#!` lines (a script may name another script as its
//! interpreter, as far as the kernel allows), check that the last
//! interpreter is a traceable ELF program, and run the script itself: the
//! interpreter is traced, and the programs it executes. Scripts the kernel
//! would refuse are refused with the kernel's reason.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn write_script(path: &Path, text: &str) -> PathBuf {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// The C program's calls in a recording: replay's tree under `top`.
#[track_caller]
fn assert_c_calls_traced(dir: &Path, ctx: &str) {
    let text = fctrace_on("replay", dir, &["-F", "top"]);
    let tree = parse_replay(&text).unwrap_or_else(|e| panic!("{ctx}: {e}\n{text}"));
    let got: String = tree.threads.iter().map(|t| outline(&t.roots)).collect();
    assert_outline_eq(
        &got,
        &expected_outline(
            "
            top()
              mid()
                leaf()
            ",
        ),
        ctx,
    );
}

/// A shell script that runs the C program and exits with a status of its
/// own: the same output and status natively and under fctrace (record and
/// live), and the C program's calls in the trace.
#[test]
fn shell_script_running_a_program() {
    let dir = scratch("sh");
    let prog = cli_args_program();
    let script = write_script(
        &dir.path.join("run.sh"),
        &format!(
            "#!/bin/sh\n\
             echo \"script: $1\"\n\
             '{}' \"$@\"\n\
             status=$?\n\
             echo \"script: program exited $status\"\n\
             exit $((status + 4))\n",
            prog.display()
        ),
    );
    let args = ["one", "two"];
    let native = run(Command::new(&script).args(args));
    let want = format!(
        "script: one\n{}script: program exited 3\n",
        cli_args_output(&args)
    );
    assert_eq!(native.stdout, want, "{}", native.describe());
    assert_eq!(native.code(), Some(7));

    let rec = record_any(&script, &args, &[]);
    assert_same_behaviour(&native, &rec.run, "record run.sh");
    assert_c_calls_traced(&rec.dir.path, "record run.sh");

    // Live mode, with the script found relative to the current directory.
    let r = run_with_timeout(
        Command::new(fctrace_bin())
            .arg("./run.sh")
            .args(args)
            .current_dir(&dir.path),
        FCTRACE_TIMEOUT,
    );
    assert_no_panic(&r);
    assert_eq!(r.code(), Some(7), "{}", r.describe());
    assert!(r.stdout.starts_with(&want), "{}", r.describe());
    assert!(
        r.stdout[want.len()..].contains("top() {"),
        "the C program's calls in the live tree\n{}",
        r.describe()
    );
}

/// pyenv's case: `python3` in PATH is a `#!/usr/bin/env bash` shim that
/// executes the real program; and a script whose `#!` interpreter is that
/// shim (with an argument), a chain of two scripts before the ELF file.
#[test]
fn shim_chain() {
    let dir = scratch("shim");
    let prog = cli_args_program();
    let bin = dir.path.join("bin");
    let shim = write_script(
        &bin.join("python3"),
        &format!("#!/usr/bin/env bash\nexec '{}' \"$@\"\n", prog.display()),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // `fctrace python3 a b`, python3 found in PATH.
    let native = run(Command::new("python3").args(["a", "b"]).env("PATH", &path));
    assert_eq!(
        native.stdout,
        cli_args_output(&["a", "b"]),
        "{}",
        native.describe()
    );
    assert_eq!(native.code(), Some(3));
    let trace = TraceDir::new("shim");
    let r = run_with_timeout(
        Command::new(fctrace_bin())
            .arg("record")
            .arg("-d")
            .arg(&trace.path)
            .args(["python3", "a", "b"])
            .env("PATH", &path),
        FCTRACE_TIMEOUT,
    );
    assert_recorder_ending(&r, &trace.path);
    assert_same_behaviour(&native, &r, "fctrace record python3 a b");
    assert_c_calls_traced(&trace.path, "python3 shim");

    // A script whose interpreter is the shim, with an argument: the kernel
    // runs `python3 opt chain x`, the shim runs the program with those.
    let chain = write_script(
        &dir.path.join("chain"),
        &format!("#!{} opt\nthis line is never read\n", shim.display()),
    );
    let native = run(Command::new(&chain).arg("x"));
    let chain_s = chain.to_string_lossy().into_owned();
    assert_eq!(
        native.stdout,
        cli_args_output(&["opt", &chain_s, "x"]),
        "{}",
        native.describe()
    );
    let rec = record_any(&chain, &["x"], &[]);
    assert_same_behaviour(&native, &rec.run, "record chain");
    assert_c_calls_traced(&rec.dir.path, "script with a script as interpreter");
}

/// What the kernel refuses, fctrace refuses before running anything, with
/// the kernel's reason: a missing interpreter, a chain of more scripts
/// than the kernel follows (5), a `#!` line without an interpreter.
#[test]
fn refused_scripts() {
    let dir = scratch("bad");
    let missing = write_script(
        &dir.path.join("missing"),
        "#!/no/such/interpreter -x\necho never\n",
    );
    // Scripts s1..s6, s1 run by /bin/sh, each next one by the one before.
    let mut prev = PathBuf::from("/bin/sh");
    let mut levels = Vec::new();
    for k in 1..=6 {
        let s = write_script(
            &dir.path.join(format!("s{k}")),
            &format!("#!{}\necho level {k}\n", prev.display()),
        );
        prev = s.clone();
        levels.push(s);
    }
    let empty = write_script(&dir.path.join("empty"), "#!   \necho never\n");

    let cases: [(&Path, &str); 3] = [
        (&missing, "bad interpreter: /no/such/interpreter"),
        (&levels[5], "too many levels of #! interpreters"),
        (&empty, "names no interpreter"),
    ];
    for (script, message) in cases {
        // The kernel refuses it too (ENOENT, ELOOP, ENOEXEC).
        assert!(!kernel_runs(script), "the kernel runs {}", script.display());
        let trace = TraceDir::new("refused");
        let r = fctrace(&[
            OsStr::new("record"),
            OsStr::new("-d"),
            trace.path.as_os_str(),
            script.as_os_str(),
        ]);
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(r.stderr.contains(message), "{}", r.describe());
        assert!(!r.stdout.contains("never"), "{}", r.describe());
        assert!(!trace.path.exists(), "nothing recorded\n{}", r.describe());
    }

    // Five levels are what the kernel follows: traced.
    assert!(kernel_runs(&levels[4]));
    let native = run(&mut Command::new(&levels[4]));
    assert!(native.success(), "{}", native.describe());
    let rec = record_any(&levels[4], &[], &[]);
    assert_same_behaviour(&native, &rec.run, "five levels of scripts");
}

/// Whether `script` runs when executed directly (std's spawn execs the path
/// itself and reports the exec's error, ENOENT, ELOOP, ENOEXEC, without
/// the fallback to /bin/sh that execvp and shells add for ENOEXEC).
fn kernel_runs(script: &Path) -> bool {
    match Command::new(script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => child.wait().unwrap().success(),
        Err(_) => false,
    }
}
