//! Where the recorder puts what it drains from the shared memory: the
//! trace writer until writing fails, then nowhere, with each kind of
//! event that could not be written counted.

use crate::{kernel, shm};
use anyhow::Result;
use fctrace_format::event::RawEvent;
use fctrace_format::shm::{count_events, NO_TASK_SLOT, RECORDER_STOPPED};
use fctrace_format::store::TraceWriter;

/// Where the recorder puts what it drains: the trace writer until writing
/// fails, then nowhere (counted).
pub(crate) struct Sink<'a> {
    pub(crate) writer: &'a mut TraceWriter,
    /// What stopped the writing, said as the user should read it.
    pub(crate) failure: Option<String>,
    /// Events dropped after the failure.
    pub(crate) dropped: u64,
    /// Events of tasks that got no task slot.
    pub(crate) untabled: u64,
    /// Events of buffers naming a task that does not exist.
    pub(crate) damaged: u64,
    /// Records given to the writer (for the flight recorder: a snapshot
    /// with no record since the last one would hold the same events).
    pub(crate) records: u64,
}

impl Sink<'_> {
    pub(crate) fn take(
        &mut self,
        mem: &shm::SharedMemory,
        task: shm::TaskKey,
        ev: &[RawEvent],
    ) -> Result<()> {
        if task.slot == NO_TASK_SLOT {
            self.untabled += count_events(ev);
            return Ok(());
        }
        if task.slot >= mem.task_count() {
            self.damaged += count_events(ev);
            return Ok(());
        }
        if self.failure.is_some() {
            self.dropped += count_events(ev);
            return Ok(());
        }
        self.records += ev.len() as u64;
        if let Err(e) = self.writer.append_task(task.slot, task.tid, ev) {
            self.fail(&e);
            mem.set_state(RECORDER_STOPPED);
        }
        Ok(())
    }

    /// A kernel event of thread `tid`: written with its task's events;
    /// false if no task has that thread (yet).
    pub(crate) fn take_kernel(
        &mut self,
        mem: &shm::SharedMemory,
        routes: &mut kernel::Routes,
        tid: u32,
        e: &fctrace_format::store::kernel::KernelEvent,
    ) -> bool {
        let Some((id, tid)) = routes.task_of(tid, &mut || {
            mem.tasks().iter().map(|t| (t.slot, t.tid)).collect()
        }) else {
            return false;
        };
        if self.failure.is_none() {
            if let Err(e) = self.writer.append_kernel(id, tid, e) {
                self.fail(&e);
                mem.set_state(RECORDER_STOPPED);
            }
        }
        true
    }

    /// Writing failed: nothing more is written (the writer dropped what it
    /// could not write, and counts it).
    pub(crate) fn fail(&mut self, e: &fctrace_format::store::StoreError) {
        let full = matches!(e, fctrace_format::store::StoreError::Io { error, .. }
            if error.raw_os_error() == Some(libc::ENOSPC));
        self.failure = Some(if full {
            "disk full".to_string()
        } else {
            e.to_string()
        });
    }
}
