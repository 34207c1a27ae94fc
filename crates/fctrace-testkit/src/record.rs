//! Running fctrace (`record`, `replay`, `info`) with a time limit in a
//! trace directory of the test's, checking it never panicked, and comparing
//! a program's behaviour natively and under `fctrace record`.

use crate::paths::{cache_subdir, fctrace_bin, unique_suffix};
use crate::process::{clip, run, run_with_timeout, Run, FCTRACE_TIMEOUT};
use crate::replay::{parse_replay, Replay};

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory for one trace, under the cache root. Removed when dropped,
/// except while the thread panics: a failing test leaves its trace for
/// inspection (its path is in the assertion messages).
pub struct TraceDir {
    pub path: PathBuf,
}

impl TraceDir {
    /// A fresh path that does not exist yet (fctrace record creates it).
    pub fn new(label: &str) -> TraceDir {
        let path = cache_subdir("traces").join(format!("{label}-{}", unique_suffix()));
        let _ = fs::remove_dir_all(&path);
        TraceDir { path }
    }
}

impl Drop for TraceDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("trace kept for inspection: {}", self.path.display());
        } else if std::env::var_os("FCTRACE_TESTS_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs fctrace with these arguments (no time limit beyond the default).
#[track_caller]
pub fn fctrace<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let r = run_with_timeout(Command::new(fctrace_bin()).args(args), FCTRACE_TIMEOUT);
    assert_no_panic(&r);
    r
}

/// fctrace must never end in a Rust panic or be killed by a signal, whatever
/// its input.
#[track_caller]
pub fn assert_no_panic(r: &Run) {
    assert_no_panic_text(r);
    assert!(
        r.signal().is_none(),
        "fctrace was killed by signal {:?}\n{}",
        r.signal(),
        r.describe()
    );
}

#[track_caller]
fn assert_no_panic_text(r: &Run) {
    assert!(
        !r.stderr.contains("panicked") && !r.stderr.contains("RUST_BACKTRACE"),
        "fctrace panicked\n{}",
        r.describe()
    );
}

/// After `fctrace record`: fctrace may end by a signal only when the
/// program did (it then dies the same way, after writing the trace).
#[track_caller]
pub fn assert_recorder_ending(r: &Run, dir: &Path) {
    assert_no_panic_text(r);
    let Some(sig) = r.signal() else { return };
    let info = fs::read_to_string(dir.join("info.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&info).unwrap_or_default();
    assert_eq!(
        v["exit"]["signal"].as_i64(),
        Some(sig as i64),
        "fctrace was killed by signal {sig}, but the program did not end by it\n{}",
        r.describe()
    );
}

/// A finished `fctrace record`.
pub struct Recorded {
    pub dir: TraceDir,
    pub run: Run,
}

/// `fctrace record -d DIR [opts] exe args`; asserts fctrace exited with
/// status 0 (the program's own status must be 0 for that).
#[track_caller]
pub fn record(exe: &Path, args: &[&str], opts: &[&str]) -> Recorded {
    let rec = record_any(exe, args, opts);
    assert!(
        rec.run.success(),
        "fctrace record failed\n{}",
        rec.run.describe()
    );
    rec
}

/// `fctrace record`, whatever its exit status.
#[track_caller]
pub fn record_any(exe: &Path, args: &[&str], opts: &[&str]) -> Recorded {
    let (dir, mut cmd) = record_command(exe, args, opts);
    let run = run_with_timeout(&mut cmd, FCTRACE_TIMEOUT);
    assert_recorder_ending(&run, &dir.path);
    Recorded { dir, run }
}

/// `fctrace record -d DIR exe args` with extra environment variables (for
/// fctrace and the program), whatever its exit status. Checks only that
/// fctrace was not killed: not [`assert_no_panic`], since the program's own
/// panic messages pass through fctrace's stderr (callers compare that
/// stderr with the program's).
#[track_caller]
pub fn record_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Recorded {
    record_env_with(exe, args, &[], env)
}

/// [`record_env`] with record options `opts`.
#[track_caller]
pub fn record_env_with(exe: &Path, args: &[&str], opts: &[&str], env: &[(&str, &str)]) -> Recorded {
    let (dir, mut cmd) = record_command(exe, args, opts);
    let run = run_with_timeout(cmd.envs(env.iter().copied()), FCTRACE_TIMEOUT);
    assert!(
        run.signal().is_none(),
        "fctrace was killed\n{}",
        run.describe()
    );
    Recorded { dir, run }
}

/// `fctrace record -d DIR [opts] exe args`, in a fresh trace directory.
fn record_command(exe: &Path, args: &[&str], opts: &[&str]) -> (TraceDir, Command) {
    let label = exe
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = TraceDir::new(&label);
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("record")
        .arg("-d")
        .arg(&dir.path)
        .args(opts)
        .arg(exe)
        .args(args);
    (dir, cmd)
}

/// The program behaves the same natively and under fctrace: the same exit
/// status (or death by the same signal), stdout and stderr.
#[track_caller]
pub fn assert_same_behaviour(native: &Run, traced: &Run, ctx: &str) {
    assert_same_behaviour_with(native, traced, ctx, |s| s.to_string());
}

/// [`assert_same_behaviour`], the two stderr compared through `stderr`
/// (a sanitizer report's addresses and pids normalised).
#[track_caller]
pub fn assert_same_behaviour_with(
    native: &Run,
    traced: &Run,
    ctx: &str,
    stderr: impl Fn(&str) -> String,
) {
    assert_eq!(
        (native.code(), native.signal()),
        (traced.code(), traced.signal()),
        "{ctx}: exit status\n--- native ---\n{}\n--- fctrace ---\n{}",
        native.describe(),
        traced.describe()
    );
    assert_eq!(
        native.stdout,
        traced.stdout,
        "{ctx}: stdout\n{}",
        traced.describe()
    );
    assert_eq!(
        stderr(&native.stderr),
        stderr(&traced.stderr),
        "{ctx}: stderr\n--- native ---\n{}\n--- fctrace ---\n{}",
        native.stderr,
        traced.stderr
    );
}

/// Runs `exe args` natively and under `fctrace record`, whatever their
/// ending, and asserts they behave the same ([`assert_same_behaviour`]).
/// Returns the recording.
#[track_caller]
pub fn record_same(exe: &Path, args: &[&str]) -> Recorded {
    let native = run(Command::new(exe).args(args));
    let rec = record_any(exe, args, &[]);
    assert_same_behaviour(
        &native,
        &rec.run,
        &format!("{} (trace {})", native.cmdline, rec.dir.path.display()),
    );
    rec
}

/// `fctrace replay -d DIR`: its stdout; asserts success.
#[track_caller]
pub fn replay_text(dir: &Path) -> String {
    let r = fctrace(&[OsStr::new("replay"), OsStr::new("-d"), dir.as_os_str()]);
    assert!(r.success(), "fctrace replay failed\n{}", r.describe());
    r.stdout
}

/// `fctrace replay -d DIR`, parsed and checked for nesting; signal markers
/// are leaves of the tree (see [`is_marker`]).
#[track_caller]
pub fn replay(dir: &Path) -> Replay {
    replay_with_text(dir).1
}

/// `fctrace replay -d DIR`: its text, and its tree as [`replay`] gives it.
#[track_caller]
pub fn replay_with_text(dir: &Path) -> (String, Replay) {
    let text = replay_text(dir);
    let tree = parse_replay(&text).unwrap_or_else(|e| {
        panic!(
            "replay of {} is not a well-formed call tree: {e}\n--- replay ---\n{}",
            dir.display(),
            clip(&text, 8000)
        )
    });
    (text, tree)
}

/// `fctrace replay -d DIR`: its text, and its tree of calls only, without
/// the signal markers (a handler's calls follow the marker at the
/// interrupted call's depth, so they stay where they are).
#[track_caller]
pub fn replay_calls(dir: &Path) -> (String, Replay) {
    let (text, tree) = replay_with_text(dir);
    (text, tree.without_markers())
}

/// `fctrace CMD -d DIR OPTS...` (e.g. `replay` with display filters): its
/// stdout; asserts success.
#[track_caller]
pub fn fctrace_on(cmd: &str, dir: &Path, opts: &[&str]) -> String {
    let mut args: Vec<&OsStr> = vec![OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(
        r.success(),
        "fctrace {cmd} {opts:?} failed\n{}",
        r.describe()
    );
    r.stdout
}

/// [`fctrace_on`], also asserting that fctrace warned about nothing.
pub fn fctrace_on_quietly(cmd: &str, dir: &Path, opts: &[&str]) -> String {
    let mut args: Vec<&OsStr> = vec![OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(
        r.success() && !r.stderr.contains("warning"),
        "fctrace {cmd} {opts:?} failed or warned\n{}",
        r.describe()
    );
    r.stdout
}

/// The text of each call line of a replay: what follows `] | `, with its
/// indent (headers and other lines left out).
pub fn call_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("] | ").map(|(_, t)| t.to_string()))
        .collect()
}

/// Every line of `text` with `prefix` before it (an indent, a thread tag),
/// each ended by a newline.
pub fn prefix_lines(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// `fctrace info -d DIR`: its stdout; asserts success.
#[track_caller]
pub fn info_text(dir: &Path) -> String {
    let r = fctrace(&[OsStr::new("info"), OsStr::new("-d"), dir.as_os_str()]);
    assert!(r.success(), "fctrace info failed\n{}", r.describe());
    r.stdout
}
