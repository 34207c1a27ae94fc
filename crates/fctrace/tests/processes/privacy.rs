//! Traces are private (issue 10, "Traces are private" 1 and 2, the
//! writer's side): what fctrace creates is 0700/0600 whatever the umask,
//! it never writes into a directory another user owns or every user may
//! write to, and live mode records into a fresh mkdtemp directory.
//! The tests run as root: another user is simulated with `nobody`.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

const NOBODY: u32 = 65534;

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Every directory and file under `dir` with its mode, but the agent's
/// symbol files (sessions/*.sym, written by the agent, not the writer).
fn modes(dir: &Path) -> Vec<(String, bool, u32)> {
    let mut out = vec![(".".to_string(), true, mode(dir))];
    for sub in ["", "sessions", "tasks"] {
        for e in fs::read_dir(dir.join(sub)).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let name = p.strip_prefix(dir).unwrap().display().to_string();
            let is_dir = e.file_type().unwrap().is_dir();
            if sub.is_empty() && is_dir || name.ends_with(".sym") {
                if sub.is_empty() && is_dir {
                    out.push((name, true, mode(&p)));
                }
                continue;
            }
            out.push((name, is_dir, mode(&p)));
        }
    }
    out
}

#[test]
fn created_private_whatever_the_umask() {
    let exe = c_program("forks.c", "O1", &["-O1"]);
    let dir = TraceDir::new("umask0");
    let r = run(Command::new("sh")
        .arg("-c")
        .arg("umask 0 && exec \"$@\"")
        .arg("sh")
        .arg(fctrace_bin())
        .arg("record")
        .arg("-d")
        .arg(&dir.path)
        .arg(&exe));
    assert!(r.success(), "{}", r.describe());
    let all = modes(&dir.path);
    assert!(all.iter().any(|(n, _, _)| n == "info.json"), "{all:?}");
    assert!(
        all.iter().any(|(n, _, _)| n.starts_with("tasks/")),
        "{all:?}"
    );
    for (name, is_dir, m) in &all {
        let want = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*m, want, "{name}: mode {m:o}, expected {want:o} ({all:?})");
    }
    // Still readable.
    assert!(replay_text(&dir.path).contains("with_fork()"));
}

/// `fctrace record -d DIR exe` must fail with `message`, without running
/// the program nor writing anything into DIR.
#[track_caller]
fn refused(dir: &Path, message: &str) {
    let exe = c_program("forks.c", "O1", &["-O1"]);
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        dir.as_os_str(),
        exe.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains(message), "{}", r.describe());
    assert!(
        r.stdout.is_empty(),
        "the program must not run\n{}",
        r.describe()
    );
}

#[test]
fn directories_others_control_are_refused() {
    let base = scratch("planted");
    fs::set_permissions(&base.path, fs::Permissions::from_mode(0o755)).unwrap();

    // An empty directory another user made (and could plant a link in).
    let foreign = base.path.join("foreign");
    fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(NOBODY), None).unwrap();
    refused(&foreign, "it belongs to another user (uid 65534)");
    assert_eq!(fs::read_dir(&foreign).unwrap().count(), 0);

    // Writable by everyone, with and without the sticky bit (/tmp).
    for m in [0o777, 0o1777] {
        let open = base.path.join(format!("open{m:o}"));
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(m)).unwrap();
        refused(&open, "it is writable by every user");
        assert_eq!(fs::read_dir(&open).unwrap().count(), 0);
    }

    // A symbolic link another user planted, to a directory of ours.
    let mine = base.path.join("mine");
    fs::create_dir(&mine).unwrap();
    let link = base.path.join("link");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), None).unwrap();
    refused(&link, "it is a symbolic link of another user");
    assert_eq!(fs::read_dir(&mine).unwrap().count(), 0);

    // An existing trace of another user is not moved aside either.
    let theirs = base.path.join("theirs");
    let rec = record(&c_program("forks.c", "O1", &["-O1"]), &[], &[]);
    fs::rename(&rec.dir.path, &theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), None).unwrap();
    refused(&theirs, "it belongs to another user");
    assert!(theirs.join("info.json").is_file());
    assert!(!base.path.join("theirs.old").exists());
}

#[test]
fn live_mode_uses_a_fresh_private_directory() {
    let exe = c_program("privacy.c", "O1", &["-O1"]);
    let tmp = scratch("tmpdir");
    let tmpdir = tmp.path.to_str().unwrap();
    let native = run_env(&exe, &[], &[("TMPDIR", tmpdir)]);
    assert_eq!(
        native.stdout,
        "0 live directories\n",
        "{}",
        native.describe()
    );
    let live = run(Command::new(fctrace_bin()).env("TMPDIR", tmpdir).arg(&exe));
    assert_eq!(live.code(), Some(0), "{}", live.describe());
    let program_out = &live.stdout[..live.stdout.find("# DURATION").unwrap()];
    assert_eq!(
        program_out,
        "live directory: mode 700\n1 live directories\n",
        "{}",
        live.describe()
    );
    // Removed afterwards.
    assert_eq!(fs::read_dir(&tmp.path).unwrap().count(), 0);
}
