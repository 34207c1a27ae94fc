//! The recorder's side of the shared memory (see `fctrace_format::shm`):
//! creating the memory file, draining full buffers, and collecting what
//! the traced processes left behind. Together with `process.rs` this is
//! the only unsafe code of the CLI.

use anyhow::{bail, Context, Result};
use fctrace_format::event::RawEvent;
use fctrace_format::shm::*;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

pub struct SharedMemory {
    fd: OwnedFd,
    base: *mut u8,
    pub layout: Layout,
}

impl SharedMemory {
    pub fn create(layout: Layout, flags: u32) -> Result<SharedMemory> {
        let name = c"fctrace-shm";
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            bail!(
                "cannot create shared memory: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = layout.total_size();
        // SAFETY: plain ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            bail!(
                "cannot size shared memory: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: maps the file we just sized; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!(
                "cannot map shared memory: {}",
                std::io::Error::last_os_error()
            );
        }
        let shm = SharedMemory {
            fd,
            base: base.cast(),
            layout,
        };
        {
            // SAFETY: the header is the first page of the fresh, zeroed mapping.
            let h = unsafe { &mut *(shm.base as *mut ShmHeader) };
            h.magic = MAGIC;
            h.version = VERSION;
            h.buf_count = layout.buf_count;
            h.buf_size = layout.buf_size;
            h.task_slots = layout.task_slots;
            h.flags = flags;
            h.recorder_pid = std::process::id();
        }
        shm.free_queue().init();
        shm.full_queue().init();
        // Buffer 0 on top.
        for i in (0..layout.buf_count).rev() {
            shm.free_queue().push(i as u64);
        }
        Ok(shm)
    }

    /// Path by which the traced processes open the memory.
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    pub fn header(&self) -> &ShmHeader {
        // SAFETY: the header lies at the start of the mapping.
        unsafe { &*(self.base as *const ShmHeader) }
    }

    fn cells(&self, off: usize) -> &[QueueCell] {
        // SAFETY: the queue arrays lie within the mapping.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(off) as *const QueueCell,
                self.layout.buf_count as usize,
            )
        }
    }

    fn free_queue(&self) -> FreeStack<'_> {
        FreeStack {
            cells: self.cells(self.layout.free_queue_offset()),
            head: &self.header().free_head,
        }
    }

    fn full_queue(&self) -> Queue<'_> {
        let h = self.header();
        Queue {
            cells: self.cells(self.layout.full_queue_offset()),
            head: &h.full_head,
            tail: &h.full_tail,
        }
    }

    fn buf_header(&self, index: u32) -> &BufHeader {
        // SAFETY: index < buf_count, within the mapping.
        unsafe { &*(self.base.add(self.layout.buffer_offset(index)) as *const BufHeader) }
    }

    /// The records of buffer `index`, in place, and its task. Records
    /// reserved but never written (their process died in between) are
    /// still zero; the trace writer skips them.
    fn events(&self, index: u32) -> (TaskKey, &[RawEvent]) {
        let h = self.buf_header(index);
        let pos = (h.pos.load(Ordering::Acquire) as usize).min(self.layout.buf_size as usize);
        let n = pos.saturating_sub(BUF_HEADER_SIZE) / RawEvent::SIZE;
        // SAFETY: the n records lie inside the buffer; RawEvent is plain
        // data; the buffer is the recorder's (full, or its thread is gone)
        // until `recycle` gives it back, after the caller is done.
        let recs = unsafe {
            std::slice::from_raw_parts(
                self.base
                    .add(self.layout.buffer_offset(index) + BUF_HEADER_SIZE)
                    as *const RawEvent,
                n,
            )
        };
        let task = TaskKey {
            slot: h.task_slot,
            tid: h.tid,
        };
        (task, recs)
    }

    /// Clears a buffer and gives it back to the agents.
    fn recycle(&self, index: u32) {
        let h = self.buf_header(index);
        let pos = (h.pos.load(Ordering::Acquire) as usize).min(self.layout.buf_size as usize);
        // SAFETY: the buffer is ours (taken off the full queue or orphaned).
        unsafe {
            std::ptr::write_bytes(
                self.base
                    .add(self.layout.buffer_offset(index) + BUF_HEADER_SIZE),
                0,
                pos.saturating_sub(BUF_HEADER_SIZE),
            );
        }
        h.state.store(BUF_FREE, Ordering::Release);
        self.free_queue().push(index as u64);
    }

    /// Takes one full buffer, if any: calls `sink(task, events)` and recycles it.
    pub fn drain_one(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<bool> {
        let Some(i) = self.full_queue().pop() else {
            return Ok(false);
        };
        let (task, records) = self.events(i as u32);
        sink(task, records)?;
        self.recycle(i as u32);
        Ok(true)
    }

    /// After every traced process has ended (or been killed, even by
    /// SIGKILL): the buffers threads still owned, in per-task order. What
    /// they hold up to their `pos` was written before the end.
    pub fn drain_orphans(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<()> {
        while self.drain_one(sink)? {}
        let mut owned: Vec<(u32, u32, u32)> = (0..self.buffers_used())
            .filter_map(|i| {
                let h = self.buf_header(i);
                (h.state.load(Ordering::Acquire) == BUF_OWNED).then_some((h.task_slot, h.seq, i))
            })
            .collect();
        owned.sort();
        for (_, _, i) in owned {
            let (task, records) = self.events(i);
            sink(task, records)?;
            self.recycle(i);
        }
        Ok(())
    }

    /// Buffers still owned by threads that no longer exist (they ended, or
    /// their process did): drained and recycled, so that programs creating
    /// many threads over time never run out of buffers. Call right after
    /// draining the full queue, so that a task's earlier buffers are
    /// written first.
    pub fn reclaim_dead(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<()> {
        // A thread can leave more than one buffer behind (one held back
        // while a signal handler switched buffers): written in the
        // task's order.
        let mut dead: Vec<(u32, u32, u32)> = Vec::new();
        for i in 0..self.buffers_used() {
            let h = self.buf_header(i);
            if h.state.load(Ordering::Acquire) != BUF_OWNED {
                continue;
            }
            // SAFETY: tgkill with signal 0 only checks that the thread exists.
            let alive = unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    h.pid as libc::c_long,
                    h.tid as libc::c_long,
                    0,
                )
            } == 0
                || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
            if !alive {
                dead.push((h.task_slot, h.seq, i));
            }
        }
        dead.sort_unstable();
        for (_, _, i) in dead {
            let (task, records) = self.events(i);
            sink(task, records)?;
            self.recycle(i);
        }
        Ok(())
    }

    pub fn tasks(&self) -> Vec<TaskSlotCopy> {
        let n = self
            .header()
            .next_task
            .load(Ordering::Acquire)
            .min(self.layout.task_slots);
        (0..n)
            .filter_map(|i| {
                // SAFETY: slot i < task_slots lies within the mapping.
                let t = unsafe {
                    &*(self.base.add(self.layout.tasks_offset() + i as usize * 64)
                        as *const TaskSlot)
                };
                if t.state.load(Ordering::Acquire) == TASK_EMPTY {
                    return None;
                }
                let len = t.comm.iter().position(|&b| b == 0).unwrap_or(16);
                Some(TaskSlotCopy {
                    slot: i,
                    origin: t.origin,
                    tid: t.tid,
                    pid: t.pid,
                    ppid: t.ppid,
                    session: t.session,
                    parent_slot: t.parent_slot,
                    comm: String::from_utf8_lossy(&t.comm[..len]).into_owned(),
                })
            })
            .collect()
    }

    /// Buffers that agents ever took (the others were never touched).
    fn buffers_used(&self) -> u32 {
        self.header()
            .buffers_used
            .load(Ordering::Acquire)
            .min(self.layout.buf_count)
    }

    pub fn lost_events(&self) -> u64 {
        self.header().lost_events.load(Ordering::Acquire)
    }

    pub fn set_recorder_gone(&self) {
        self.header().recorder_gone.store(1, Ordering::Release);
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; nothing borrows it any more.
        unsafe { libc::munmap(self.base.cast(), self.layout.total_size()) };
    }
}

/// Which task a buffer belongs to: its task slot (the identity of the
/// task: an exec keeps the tid but takes a new slot) and its tid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskKey {
    pub slot: u32,
    pub tid: u32,
}

pub struct TaskSlotCopy {
    /// Index of the slot: the task's id in the trace.
    pub slot: u32,
    /// One of the `ORIGIN_*` values.
    pub origin: u32,
    pub tid: u32,
    pub pid: u32,
    pub ppid: u32,
    pub session: u32,
    pub parent_slot: u32,
    pub comm: String,
}

/// Reads the timestamp counter and CLOCK_MONOTONIC together.
pub fn clock_pair() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: rdtsc has no memory effects; clock_gettime writes ts.
    let (t0, t1) = unsafe {
        let a = core::arch::x86_64::_rdtsc();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        (a, core::arch::x86_64::_rdtsc())
    };
    (
        t0 / 2 + t1 / 2,
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
    )
}

/// Writes the embedded agent into a memory file; returns it and its path.
pub fn agent_file(bytes: &[u8]) -> Result<(OwnedFd, String)> {
    if bytes.is_empty() {
        bail!("this fctrace was built without its agent (FCTRACE_AGENT_STUB): it cannot trace");
    }
    // SAFETY: memfd_create with a valid C string; checked.
    let fd = unsafe { libc::memfd_create(c"fctrace-agent.so".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        bail!(
            "cannot create the agent file: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd.try_clone().context("dup")?);
    std::io::Write::write_all(&mut f, bytes).context("cannot write the agent file")?;
    let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    Ok((fd, path))
}
