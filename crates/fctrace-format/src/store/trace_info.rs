//! What a trace is, as info.json describes it (its JSON form is
//! `info.rs`): what was run and how it ended ([`TraceInfo`]), its tasks
//! ([`TaskInfo`]), and a flight recorder's snapshot ([`SnapshotInfo`]).

use super::clock::Clock;

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

/// The content of info.json.
///
/// The recorder fills the descriptive fields; [`TraceWriter::finish`](super::TraceWriter::finish) sets
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
    /// Records given to [`TraceWriter::append`](super::TraceWriter::append) that were not valid events
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
    /// What the recorder saw of the system and the run, as uftrace's info
    /// shows it: (label, value) pairs in order (`hostname`, `kernel
    /// version`, `cpu info`, ..., and for a program fctrace started `max
    /// rss`, `page fault`, `context switch`, `cpu time`).
    pub facts: Vec<(String, String)>,
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
