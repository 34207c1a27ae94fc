//! The trace directory (default `fctrace.data`): the recorder writes it with
//! [`TraceWriter`], `replay`/`report`/`info` read it with [`Trace`].
//!
//! ```text
//! fctrace.data/
//!   info.json           what was run, tasks, clock, totals   (TraceWriter::finish)
//!   sessions/<id>.sym   symbol table of each session          (the agent)
//!   tasks/<tid>.dat     the events of one task, compressed    (TraceWriter::append_task)
//!   tasks/<tid>-<n>.dat  a later task with the same tid (exec, tid reuse)
//! ```
//!
//! docs/format.md describes every byte, for writing another reader.

mod codec;
mod info;
pub mod kernel;
mod reader;
mod ring;
mod writer;

pub use reader::{TaskEvents, Trace};
pub use writer::{Snapshot, TraceWriter};

use crate::event::EventKind;
use std::fmt;
use std::io;
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
/// see [`TaskInfo::file`]).
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

/// One decoded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// Function id in the task's session symbol table, or for
    /// [`EventKind::Lost`] the number of events lost.
    pub func: u32,
    /// Raw timestamp counter value, as recorded.
    pub tsc: u64,
    /// `tsc` converted to CLOCK_MONOTONIC nanoseconds ([`Trace::tsc_to_ns`]).
    pub ns: u64,
}

impl Event {
    /// For a [`EventKind::Data`] event: its bytes of the payload.
    pub fn data_bytes(&self) -> ([u8; 16], usize) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.tsc.to_le_bytes());
        b[8..].copy_from_slice(&self.ns.to_le_bytes());
        (b, (self.func as usize).min(16))
    }
}

/// How the traced program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited (`exit(code)` or returned from `main`).
    Code(i32),
    /// A signal killed it.
    Signal { signal: i32, core: bool },
}

/// How a task came to be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TaskOrigin {
    /// The program fctrace started.
    #[default]
    Start,
    /// A thread created by its parent task.
    Thread,
    /// A process forked by its parent task (fork, vfork).
    Fork,
    /// A new program image of the same process: its parent task called
    /// exec (same pid, same tid).
    Exec,
    /// A new program started by its parent task as a new process
    /// (posix_spawn, system, popen: a fork and exec the agent saw as one).
    Spawn,
    /// A thread of a running process that fctrace attached to (`-p`),
    /// there before it.
    Attach,
}

impl TaskOrigin {
    /// The info.json spelling: `start`, `thread`, `fork`, `exec`, `spawn`,
    /// `attach`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOrigin::Start => "start",
            TaskOrigin::Thread => "thread",
            TaskOrigin::Fork => "fork",
            TaskOrigin::Exec => "exec",
            TaskOrigin::Spawn => "spawn",
            TaskOrigin::Attach => "attach",
        }
    }
    pub fn parse(s: &str) -> Option<TaskOrigin> {
        Some(match s {
            "start" => TaskOrigin::Start,
            "thread" => TaskOrigin::Thread,
            "fork" => TaskOrigin::Fork,
            "exec" => TaskOrigin::Exec,
            "spawn" => TaskOrigin::Spawn,
            "attach" => TaskOrigin::Attach,
            _ => return None,
        })
    }
}

/// One traced task: a thread of one program image. A thread that calls
/// exec becomes a new task (same tid, new session); the kernel may also
/// reuse a tid. Tasks are therefore identified by [`TaskInfo::id`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskInfo {
    /// Identifies the task within the trace (the recorder uses the agent's
    /// task slot number). Unique; not necessarily dense.
    pub id: u32,
    /// How the task came to be.
    pub origin: TaskOrigin,
    /// The [`id`](TaskInfo::id) of the task that created this one (thread
    /// creation, fork, exec, spawn), if known.
    pub parent: Option<u32>,
    /// The task's event file, relative to the trace directory
    /// (`tasks/<tid>.dat`, `tasks/<tid>-2.dat`, ...). Set by the writer.
    pub file: String,
    /// Thread id (kernel tid). Not unique: an exec keeps it, and the kernel
    /// may reuse it.
    pub tid: u32,
    /// Process id (tgid); `tid == pid` for a process's main thread.
    pub pid: u32,
    /// Parent process id of the process.
    pub ppid: u32,
    /// The tid of the task that created this one (the thread that called
    /// `pthread_create`/`clone`/`fork`/exec), if known.
    pub parent_tid: Option<u32>,
    /// Session (symbol table) the task's function ids refer to.
    pub session: u32,
    /// Thread name (`/proc/<tid>/comm`), may be empty.
    pub comm: String,
    /// Event records stored for this task (set by the writer; the reader
    /// uses it to detect a task file cut at a chunk boundary).
    pub events: u64,
}

/// TSC to CLOCK_MONOTONIC calibration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Clock {
    /// TSC frequency (ticks per second), as measured or reported.
    pub tsc_hz: f64,
    /// `(tsc, monotonic_ns)` pairs read together, in time order (typically
    /// one at the start and one at the end of the recording).
    pub pairs: Vec<(u64, u64)>,
}

/// The content of info.json.
///
/// The recorder fills the descriptive fields; [`TraceWriter::finish`] sets
/// `format_version`, `fctrace_version` (if empty), `events`,
/// `invalid_events` and `bytes`. Build it with `..Default::default()`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceInfo {
    /// Major format version of the trace directory (set by the writer).
    pub format_version: u32,
    /// Version of fctrace that recorded the trace (set by the writer if empty).
    pub fctrace_version: String,
    /// Path of the program that was run.
    pub program: String,
    /// Its full argv, `args[0]` included.
    pub args: Vec<String>,
    /// Working directory it was started in.
    pub cwd: String,
    /// When the recording started, unix time in nanoseconds.
    pub start_unix_ns: u64,
    /// How the program ended; `None` if unknown (the recorder was stopped).
    pub exit: Option<ExitStatus>,
    /// Every traced thread, in order of creation.
    pub tasks: Vec<TaskInfo>,
    pub clock: Clock,
    /// Number of event records stored in the task files (set by the writer).
    pub events: u64,
    /// Total number of events that could not be recorded, whether or not a
    /// `Lost` record marks the place in a task stream (set by the recorder;
    /// the writer does not change it).
    pub lost_events: u64,
    /// Records given to [`TraceWriter::append`] that were not valid events
    /// (set by the writer).
    pub invalid_events: u64,
    /// Size of the task files written, in bytes (set by the writer).
    pub bytes: u64,
    /// Problems met while recording, one line each, for `fctrace info`.
    pub warnings: Vec<String>,
    /// The record-time filter, trigger and argument options, in the text
    /// form given to the agent (`fctrace_options::Options::to_wire`);
    /// empty when there were none.
    pub options: String,
    /// The recording ended by detaching from the process (`fctrace -p`):
    /// calls still open at the end of a task were in progress then (not
    /// ended by the process's end).
    pub detached: bool,
    /// Kernel events recorded with `record -k` (system calls' entries and
    /// returns, switches, page faults, paths), in the tasks' `.sys` files.
    pub kernel_events: u64,
    /// A flight recorder's snapshot (`record --ring`): the most recent
    /// history of each task when it was taken, not the whole run.
    pub snapshot: Option<SnapshotInfo>,
}

/// What a flight recorder snapshot is (info.json `snapshot`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// 1 for the run's first snapshot, then 2, ...
    pub number: u32,
    /// Why it was taken: `SIGSEGV` (the program died by it), `exit`,
    /// `SIGUSR2`, `trigger`, `interrupt`, `detach`...
    pub reason: String,
    /// The ring's size (`--ring`), in bytes of encoded events.
    pub ring_size: u64,
    /// Events recorded before the kept history (dropped from the ring).
    pub events_before: u64,
    /// When it was taken, CLOCK_MONOTONIC ns.
    pub taken_ns: u64,
}

/// How the trace's warnings about events that were not recorded begin
/// (the recorder writes them so, `TraceInfo::loss_reasons` reads them).
pub const LOSS_MARK: &str = "not recorded: ";

impl TraceInfo {
    /// Why events are missing from the trace, as the recorder wrote it in
    /// the trace's warnings (for replay and report).
    pub fn loss_reasons(&self) -> String {
        self.warnings
            .iter()
            .filter_map(|w| w.strip_prefix(LOSS_MARK))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The first task with this tid (several tasks may have it: see
    /// [`TaskInfo`]).
    pub fn task(&self, tid: u32) -> Option<&TaskInfo> {
        self.tasks.iter().find(|t| t.tid == tid)
    }
    /// The task with this [`id`](TaskInfo::id).
    pub fn task_by_id(&self, id: u32) -> Option<&TaskInfo> {
        self.tasks.iter().find(|t| t.id == id)
    }
}

/// What went wrong reading or writing a trace directory. The `Display` of
/// every variant is a complete, user-facing message.
#[derive(Debug)]
pub enum StoreError {
    /// `Trace::open` of a directory that does not exist.
    NoTrace { dir: PathBuf },
    /// The directory exists but is not (or not yet) a trace directory.
    NotATrace { dir: PathBuf, reason: String },
    /// `TraceWriter::create` refuses to touch an existing directory.
    WontOverwrite { dir: PathBuf, reason: String },
    /// A file of a newer format than this fctrace reads.
    NewerVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// A system call failed; `action` says what fctrace was doing
    /// ("cannot read", "cannot create", ...).
    Io {
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// info.json is not valid.
    BadInfo { path: PathBuf, reason: String },
    /// A task file ends in the middle of a chunk.
    Truncated { path: PathBuf, events: u64 },
    /// A task file holds bytes that are not what the format says.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// `Trace::events` for a tid the trace does not have.
    NoSuchTask { dir: PathBuf, tid: u32 },
}

impl StoreError {
    pub(crate) fn io(action: &'static str, path: &Path, error: io::Error) -> StoreError {
        StoreError::Io {
            action,
            path: path.to_path_buf(),
            error,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NoTrace { dir } => write!(
                f,
                "no trace at {}: run `fctrace record` first",
                dir.display()
            ),
            StoreError::NotATrace { dir, reason } => {
                write!(f, "{} is not an fctrace trace: {reason}", dir.display())
            }
            StoreError::WontOverwrite { dir, reason } => {
                write!(f, "will not write a trace to {}: {reason}", dir.display())
            }
            StoreError::NewerVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}, newer than this fctrace reads \
                 (version {supported}): use a newer fctrace",
                path.display()
            ),
            StoreError::Io {
                action,
                path,
                error,
            } => write!(f, "{action} {}: {error}", path.display()),
            StoreError::BadInfo { path, reason } => {
                write!(f, "corrupt trace metadata {}: {reason}", path.display())
            }
            StoreError::Truncated { path, events } => write!(
                f,
                "trace file {} is truncated after {events} events",
                path.display()
            ),
            StoreError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "trace file {}: corrupt chunk at offset {offset}: {reason}",
                path.display()
            ),
            StoreError::NoSuchTask { dir, tid } => {
                write!(f, "the trace at {} has no task {tid}", dir.display())
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// Converts TSC values to CLOCK_MONOTONIC nanoseconds (see [`Clock`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClockMap {
    /// Through two pairs: exact integer interpolation / extrapolation.
    Linear {
        tsc0: u64,
        ns0: u64,
        tsc1: u64,
        ns1: u64,
    },
    /// From one pair and the frequency.
    Rate {
        tsc0: u64,
        ns0: u64,
        ns_per_tick: f64,
    },
}

impl ClockMap {
    pub(crate) fn new(clock: &Clock) -> ClockMap {
        let first = clock.pairs.iter().min_by_key(|p| p.0).copied();
        let last = clock.pairs.iter().max_by_key(|p| p.0).copied();
        let ns_per_tick = if clock.tsc_hz.is_finite() && clock.tsc_hz > 0.0 {
            1e9 / clock.tsc_hz
        } else {
            1.0
        };
        match (first, last) {
            (Some((tsc0, ns0)), Some((tsc1, ns1))) if tsc1 > tsc0 && ns1 >= ns0 => {
                ClockMap::Linear {
                    tsc0,
                    ns0,
                    tsc1,
                    ns1,
                }
            }
            (Some((tsc0, ns0)), _) => ClockMap::Rate {
                tsc0,
                ns0,
                ns_per_tick,
            },
            (None, _) => ClockMap::Rate {
                tsc0: 0,
                ns0: 0,
                ns_per_tick,
            },
        }
    }

    pub(crate) fn to_ns(self, tsc: u64) -> u64 {
        let ns: i128 = match self {
            ClockMap::Linear {
                tsc0,
                ns0,
                tsc1,
                ns1,
            } => {
                let dt = i128::from(tsc) - i128::from(tsc0);
                let span_ns = i128::from(ns1) - i128::from(ns0);
                let span_tsc = i128::from(tsc1) - i128::from(tsc0);
                let scaled = match dt.checked_mul(span_ns) {
                    Some(product) => product.div_euclid(span_tsc),
                    // Only for absurd values (a corrupt calibration).
                    None => (dt as f64 * (span_ns as f64 / span_tsc as f64)) as i128,
                };
                i128::from(ns0) + scaled
            }
            ClockMap::Rate {
                tsc0,
                ns0,
                ns_per_tick,
            } => {
                let dt = i128::from(tsc) - i128::from(tsc0);
                // f64 -> i128 casts saturate; NaN becomes 0.
                i128::from(ns0) + ((dt as f64) * ns_per_tick).round() as i128
            }
        };
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests;
