//! Helpers of the unwinding tests (exceptions, panics, longjmp,
//! backtraces, thread endings):
//!
//! * Rust programs built by cargo during the test run (the harness's
//!   `rust_prog` calls rustc directly): a one-file package written into the
//!   test cache, built with `cargo build --release` and a target directory
//!   of its own, cached by the hash of its manifest, its source and the
//!   toolchain's versions;
//! * `fctrace record` with an environment, or ending by a signal (fctrace
//!   ends as the program did);
//! * the replay's call tree without its signal markers
//!   (`/* signal SIGUSR1 */` lines, which the harness's parser does not
//!   read).

#![allow(dead_code)]

use crate::common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// Builds `tests/programs/<file>` as the binary of a package named
/// `package`, with `[profile.release]` set to `profile` (TOML lines).
/// Returns the executable's path.
pub fn cargo_program(package: &str, file: &str, profile: &str) -> PathBuf {
    let source = program_source(file);
    let manifest = format!(
        "[package]\nname = \"{package}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\n\n[profile.release]\n{profile}\n\n\
         # Not part of any enclosing workspace.\n[workspace]\n"
    );
    let version = |tool: &str| {
        let r = run_with_timeout(Command::new(tool).arg("--version"), Duration::from_secs(60));
        r.expect_success();
        r.stdout
    };
    let key = Fnv::new()
        .str(&version(&cargo()))
        .str(&version("rustc"))
        .str(&manifest)
        .file(&source)
        .hex();
    let dir = cache_root().join("cargo").join(format!("{package}-{key}"));
    let out = dir.join("bin").join(package);
    if out.exists() {
        return out;
    }
    let _lock = FileLock::acquire(&format!("cargo-{package}-{key}"));
    if out.exists() {
        return out;
    }
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("Cargo.toml"), &manifest).unwrap();
    fs::copy(&source, dir.join("src").join("main.rs")).unwrap();
    let target = dir.join("target");
    let mut cmd = Command::new(cargo());
    cmd.arg("build")
        .arg("--release")
        .arg("--offline")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&dir);
    // Independent of the environment `cargo test` runs in.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let r = run_with_timeout(&mut cmd, Duration::from_secs(900));
    assert!(
        r.success(),
        "cargo build of {package} failed\n{}",
        r.describe()
    );
    let built = target.join("release").join(package);
    let tmp = dir
        .join("bin")
        .join(format!(".{package}.tmp-{}", unique_suffix()));
    fs::copy(&built, &tmp).unwrap();
    fs::rename(&tmp, &out).unwrap();
    out
}

/// `fctrace record` with extra environment variables for the program;
/// whatever its exit status.
pub fn record_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Recorded {
    let label = exe.file_name().unwrap().to_string_lossy().into_owned();
    let dir = TraceDir::new(&label);
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("record")
        .arg("-d")
        .arg(&dir.path)
        .arg(exe)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Not assert_no_panic: the program's own panic messages pass through
    // fctrace's stderr; callers compare that stderr with the program's.
    let run = run_with_timeout(&mut cmd, FCTRACE_TIMEOUT);
    assert!(
        run.signal().is_none(),
        "fctrace was killed\n{}",
        run.describe()
    );
    Recorded { dir, run }
}

/// The program alone, with extra environment variables; whatever its exit
/// status.
pub fn run_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(&mut cmd, FCTRACE_TIMEOUT)
}

/// `fctrace record -d DIR exe args`, whatever its ending (fctrace ends as
/// the program did: same exit code, or death by the same signal); checks
/// only that fctrace itself did not panic.
pub fn record_raw(exe: &Path, args: &[&str]) -> Recorded {
    let label = exe.file_name().unwrap().to_string_lossy().into_owned();
    let dir = TraceDir::new(&label);
    let run = run_with_timeout(
        Command::new(fctrace_bin())
            .arg("record")
            .arg("-d")
            .arg(&dir.path)
            .arg(exe)
            .args(args),
        FCTRACE_TIMEOUT,
    );
    assert!(
        !run.stderr.contains("panicked at"),
        "fctrace panicked\n{}",
        run.describe()
    );
    Recorded { dir, run }
}

/// Whether a replay line is a signal marker (`... | /* signal SIGUSR1 */`).
pub fn is_signal_line(line: &str) -> bool {
    line.split_once(" | ")
        .is_some_and(|(_, rest)| rest.trim_start().starts_with("/* signal "))
}

/// The replay's text, and its call tree parsed without the signal markers
/// (a handler's calls follow the marker at the interrupted call's depth).
#[track_caller]
pub fn replay_calls(dir: &Path) -> (String, Replay) {
    let text = replay_text(dir);
    let calls: String = text
        .lines()
        .filter(|l| !is_signal_line(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let tree = parse_replay(&calls).unwrap_or_else(|e| {
        panic!(
            "replay of {} is not a well-formed call tree: {e}\n--- replay ---\n{}",
            dir.display(),
            clip(&text, 8000)
        )
    });
    (text, tree)
}
