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
//! `fctrace archive` packs it into one file ([`pack`]), which
//! [`Trace::open`] reads as well ([`archive`]).
//!
//! docs/format.md describes every byte, for writing another reader.

pub mod archive;
mod clock;
mod codec;
mod decoded;
mod error;
mod info;
pub mod kernel;
mod layout;
pub mod pack;
mod reader;
mod ring;
mod trace_info;
mod writer;

pub use clock::Clock;
pub use decoded::Event;
pub use error::StoreError;
pub use layout::{
    session_path, task_file_name, task_path, FORMAT_OLDEST, FORMAT_VERSION, INFO_FILE,
    RECORDER_PID_FILE, SESSIONS_DIR, TASKS_DIR,
};
pub use reader::{TaskEvents, Trace};
pub use trace_info::{ExitStatus, SnapshotInfo, TaskInfo, TaskOrigin, TraceInfo, LOSS_MARK};
pub use writer::{Snapshot, TraceWriter};

#[cfg(test)]
mod tests;
