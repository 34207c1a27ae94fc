//! Where things are in a trace directory: its format versions, the names
//! of its files and folders, and the paths of a session's symbol table and
//! a task's events.

use std::path::{Path, PathBuf};

/// Major version of the trace directory format (`format_version` in
/// info.json). Additions that old readers can ignore do not change it.
/// Version 2: a task is identified by its `id` (no longer by its tid, which
/// an exec keeps and the kernel may reuse) and names its event `file`.
pub const FORMAT_VERSION: u32 = 2;
/// Oldest `format_version` readers accept (version 1 traces are read with
/// task ids equal to tids and files `tasks/<tid>.dat`).
pub const FORMAT_OLDEST: u32 = 1;

/// Name of the directory of symbol tables inside a trace directory.
pub const SESSIONS_DIR: &str = "sessions";
/// Name of the directory of task event files inside a trace directory.
pub const TASKS_DIR: &str = "tasks";
/// In a flight recorder's trace directory while it records (`record
/// --ring`): its process id, for `fctrace snapshot`.
pub const RECORDER_PID_FILE: &str = "recorder.pid";
/// Name of the metadata file inside a trace directory.
pub const INFO_FILE: &str = "info.json";

/// Path of the symbol table of `session` inside the trace directory `dir`.
pub fn session_path(dir: &Path, session: u32) -> PathBuf {
    dir.join(SESSIONS_DIR).join(format!("{session}.sym"))
}

/// Path of the event file of the first task with tid `tid` inside the trace
/// directory `dir` (later tasks with the same tid have `<tid>-<n>.dat`:
/// see [`TaskInfo::file`](super::TaskInfo::file)).
pub fn task_path(dir: &Path, tid: u32) -> PathBuf {
    dir.join(task_file_name(tid, 1))
}

/// `tasks/<tid>.dat` for the first task with tid `tid` (`n` = 1), then
/// `tasks/<tid>-<n>.dat`: the name of a task's file relative to the trace
/// directory.
pub fn task_file_name(tid: u32, n: u32) -> String {
    if n <= 1 {
        format!("{TASKS_DIR}/{tid}.dat")
    } else {
        format!("{TASKS_DIR}/{tid}-{n}.dat")
    }
}
