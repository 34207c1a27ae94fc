//! `info` on damaged event files (issue 10, "Nothing lost" 5): it says
//! which tasks' events are damaged and why, and exits with status 1, as
//! `replay` does on the same trace; an intact trace is checked silently.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

/// A recording of options.c and its main task's event file (the biggest:
/// it holds main's calls).
fn recorded() -> (Recorded, PathBuf) {
    let exe = c_program("options.c", "O1", &["-O1"]);
    let rec = record(&exe, &[], &[]);
    let info = info_json(&rec.dir.path);
    let file = info["tasks"][0]["file"].as_str().unwrap().to_string();
    let path = rec.dir.path.join(file);
    (rec, path)
}

fn on(cmd: &str, dir: &Path) -> Run {
    fctrace(&[OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()])
}

/// `info` and `replay` both fail on the damage, `info` after printing the
/// whole description with a "Damaged events" section naming `why`.
#[track_caller]
fn damaged(dir: &Path, why: &str) {
    let info = on("info", dir);
    assert_eq!(info.code(), Some(1), "{}", info.describe());
    assert!(info.stdout.contains("Tasks: "), "{}", info.describe());
    assert!(
        info.stdout.contains("Damaged events (1 task):\n  task 0: ") && info.stdout.contains(why),
        "{}",
        info.describe()
    );
    assert!(
        info.stderr.contains("fctrace: the events of 1 task of ")
            && info.stderr.contains("are damaged"),
        "{}",
        info.describe()
    );
    let replay = on("replay", dir);
    assert_eq!(replay.code(), Some(1), "{}", replay.describe());
    assert!(replay.stderr.contains(why), "{}", replay.describe());
}

#[test]
fn intact_trace_is_checked_silently() {
    let (rec, _) = recorded();
    let info = on("info", &rec.dir.path);
    assert_eq!(info.code(), Some(0), "{}", info.describe());
    assert!(!info.stdout.contains("Damaged"), "{}", info.describe());
    assert!(info.stderr.is_empty(), "{}", info.describe());
}

#[test]
fn flipped_byte_is_a_checksum_mismatch() {
    let (rec, file) = recorded();
    let mut bytes = fs::read(&file).unwrap();
    // File header (16 bytes), chunk header (40), then compressed data.
    assert!(bytes.len() > 60, "{} bytes", bytes.len());
    bytes[60] ^= 0xff;
    fs::write(&file, bytes).unwrap();
    damaged(
        &rec.dir.path,
        "corrupt chunk at offset 16: checksum mismatch",
    );
}

#[test]
fn cut_file_is_truncated() {
    let (rec, file) = recorded();
    let len = fs::metadata(&file).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    damaged(&rec.dir.path, "truncated");
}

#[test]
fn bytes_after_the_last_chunk_are_corrupt() {
    let (rec, file) = recorded();
    let mut bytes = fs::read(&file).unwrap();
    bytes.extend_from_slice(&[0x55; 64]);
    fs::write(&file, bytes).unwrap();
    damaged(&rec.dir.path, "bad magic number");
}

#[test]
fn missing_file_is_reported() {
    let (rec, file) = recorded();
    fs::remove_file(&file).unwrap();
    damaged(&rec.dir.path, "cannot open");
}
