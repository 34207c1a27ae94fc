//! What the trace says about the run, shared by the trace written at the
//! end and the flight recorder's snapshots: the program, its command
//! line, the clock, each task's description.

use crate::shm;
use fctrace_format::shm::{ORIGIN_ATTACH, ORIGIN_EXEC, ORIGIN_FORK, ORIGIN_THREAD};
use fctrace_format::store::{Clock, TaskInfo, TaskOrigin, TraceInfo};
use std::ffi::OsString;
use std::path::Path;

/// What every snapshot and the trace say about the run.
pub(crate) struct RunFacts<'a> {
    pub(crate) program: &'a Path,
    pub(crate) command: &'a [OsString],
    pub(crate) start_unix_ns: u64,
    /// The clock pair taken when the recording started.
    pub(crate) first: (u64, u64),
    pub(crate) wire: &'a str,
}

impl RunFacts<'_> {
    /// The trace's description of the run, without its tasks and totals.
    pub(crate) fn base_info(&self) -> TraceInfo {
        TraceInfo {
            program: std::fs::canonicalize(self.program)
                .unwrap_or_else(|_| self.program.to_path_buf())
                .to_string_lossy()
                .into_owned(),
            args: self
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            cwd: std::env::current_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            start_unix_ns: self.start_unix_ns,
            options: self.wire.to_string(),
            ..Default::default()
        }
    }
}

/// The clock of a trace whose recording started at `first` (a TSC and
/// CLOCK_MONOTONIC pair) and is described at `last`.
pub(crate) fn clock_of(first: (u64, u64), last: (u64, u64)) -> Clock {
    let ((t0, n0), (t1, n1)) = (first, last);
    let tsc_hz = if t1 > t0 && n1 > n0 {
        (t1 - t0) as f64 * 1e9 / (n1 - n0) as f64
    } else {
        0.0
    };
    Clock {
        tsc_hz,
        pairs: vec![first, last],
    }
}

/// The trace's description of a task slot: its id is the slot number, its
/// parent the slot that created it.
pub(crate) fn task_info(t: &shm::TaskSlotCopy, slots: &[shm::TaskSlotCopy]) -> TaskInfo {
    let parent = slots
        .iter()
        .find(|p| p.slot == t.parent_slot && p.slot != t.slot);
    let origin = match (t.origin, parent) {
        // What the agent says, even when the parent is unknown (a thread
        // whose creator made no traced call before exec'ing, ...).
        (ORIGIN_THREAD, _) => TaskOrigin::Thread,
        (ORIGIN_FORK, _) => TaskOrigin::Fork,
        (ORIGIN_EXEC, Some(p)) if p.pid == t.pid => TaskOrigin::Exec,
        (ORIGIN_EXEC, Some(_)) => TaskOrigin::Spawn,
        (ORIGIN_EXEC, None) => TaskOrigin::Exec,
        (ORIGIN_ATTACH, _) => TaskOrigin::Attach,
        // The agent registers only the program it starts as ORIGIN_START
        // (the agent and this recorder come from the same binary).
        _ => TaskOrigin::Start,
    };
    TaskInfo {
        id: t.slot,
        origin,
        parent: parent.map(|p| p.slot),
        file: String::new(),
        tid: t.tid,
        pid: t.pid,
        ppid: t.ppid,
        parent_tid: parent.map(|p| p.tid),
        session: t.session,
        comm: t.comm.clone(),
        events: 0,
    }
}
