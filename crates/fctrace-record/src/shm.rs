//! The recorder's side of the shared memory (see `fctrace_format::shm`):
//! creating the memory file, draining full buffers, and collecting what
//! the traced processes left behind. The mapping is the recorder's unsafe
//! code, as are ptrace (`attach.rs`), signals (`process.rs`) and the
//! kernel's rings (`kernel.rs`, `perf.rs`, `bpf.rs`).

use anyhow::{bail, Context, Result};
use fctrace_format::event::RawEvent;
use fctrace_format::shm::*;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

pub struct SharedMemory {
    fd: OwnedFd,
    base: *mut u8,
    pub layout: Layout,
    /// Damaged values found in the memory (indices out of range, buffers
    /// in the wrong state, a queue that cannot be read).
    damaged: std::cell::Cell<u64>,
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
        Self::create_in(fd, layout, flags)
    }

    /// The shared memory in `fd`, an empty memory file (one the traced
    /// process made, when attaching).
    pub fn create_in(fd: OwnedFd, layout: Layout, flags: u32) -> Result<SharedMemory> {
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
            damaged: std::cell::Cell::new(0),
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
            h.recorder_pidns = own_pid_namespace();
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

    /// The memory's descriptor in fctrace.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
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
        assert!(index < self.layout.buf_count);
        // SAFETY: index < buf_count, within the mapping.
        unsafe { &*(self.base.add(self.layout.buffer_offset(index)) as *const BufHeader) }
    }

    /// The records of buffer `index` (< buf_count), in place, and its
    /// task. Records reserved but never written (their process died in
    /// between) are still zero; the trace writer skips them. The header is
    /// read once, and only its position is used to find the records
    /// (clamped to the buffer).
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

    /// Clears a buffer and gives it back to the agents, waking one that
    /// waits for a buffer.
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
        if !self.free_queue().push(index as u64) {
            self.damaged.set(self.damaged.get() + 1);
            return;
        }
        let hdr = self.header();
        hdr.free_wake.fetch_add(1, Ordering::SeqCst);
        if hdr.free_waiters.load(Ordering::SeqCst) != 0 {
            futex_wake(&hdr.free_wake, 1);
        }
    }

    /// Takes one full buffer, if any: calls `sink(task, events)` and
    /// recycles it. A value that is not a buffer index (the program wrote
    /// into the queue) is counted in [`damaged`](Self::damaged); a queue
    /// that cannot be read any more stops the recording.
    pub fn drain_one(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<bool> {
        let i = match self.full_queue().pop() {
            Pop::Some(i) => i,
            Pop::Empty => return Ok(false),
            Pop::Damaged => {
                self.damaged.set(self.damaged.get() + 1);
                self.set_state(RECORDER_STOPPED);
                return Ok(false);
            }
        };
        if i >= u64::from(self.layout.buf_count)
            || self.buf_header(i as u32).state.load(Ordering::Acquire) != BUF_FULL
        {
            self.damaged.set(self.damaged.get() + 1);
            return Ok(true);
        }
        let i = i as u32;
        let (task, records) = self.events(i);
        sink(task, records)?;
        self.recycle(i);
        Ok(true)
    }

    /// Drains at most one pool's worth of full buffers (a damaged queue
    /// cannot keep the caller here); true if there was any.
    pub fn drain_some(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<bool> {
        let mut any = false;
        for _ in 0..self.layout.buf_count {
            if !self.drain_one(sink)? {
                break;
            }
            any = true;
        }
        Ok(any)
    }

    /// After every traced process has ended (or been killed, even by
    /// SIGKILL): the buffers threads still owned, in per-task order. What
    /// they hold up to their `pos` was written before the end. Buffers
    /// marked full that the queue lost (damaged) are collected too.
    pub fn drain_orphans(
        &self,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<()> {
        self.drain_some(sink)?;
        for i in self.buffers_in_task_order(&[BUF_OWNED, BUF_FULL]) {
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
    ///
    /// A thread's tid says whether it lives only in the recorder's own PID
    /// namespace: for a task of another namespace (`unshare --pid`,
    /// containers) the same number is another thread, or none, here. Such
    /// tasks are looked up by their namespace's inode and their pid and
    /// tid as that namespace sees them, through `/proc` (the `NSpid` lines);
    /// only a thread found to be gone is reclaimed (`foreign` allows this
    /// costlier search).
    pub fn reclaim_dead(
        &self,
        foreign: bool,
        sink: &mut dyn FnMut(TaskKey, &[RawEvent]) -> Result<()>,
    ) -> Result<()> {
        let own_ns = self.header().recorder_pidns;
        // A thread can leave more than one buffer behind (one held back
        // while a signal handler switched buffers): written in the
        // task's order.
        let mut dead: Vec<(u32, u32, u32)> = Vec::new();
        let mut elsewhere: Vec<(u64, u32, u32, u32)> = Vec::new();
        for i in 0..self.buffers_used() {
            let h = self.buf_header(i);
            if h.state.load(Ordering::Acquire) != BUF_OWNED {
                continue;
            }
            let (pid, tid, ns) = (h.pid, h.tid, h.pidns);
            if own_ns == 0 || ns != own_ns {
                if foreign && ns != 0 {
                    elsewhere.push((ns, pid, tid, i));
                }
                continue;
            }
            if !thread_alive(pid, tid) {
                dead.push((h.task_slot, h.seq, i));
            }
        }
        if !elsewhere.is_empty() {
            let alive = foreign_threads(&elsewhere);
            for (ns, pid, tid, i) in elsewhere {
                if !alive.contains(&(ns, pid, tid)) {
                    let h = self.buf_header(i);
                    dead.push((h.task_slot, h.seq, i));
                }
            }
        }
        // A task whose full buffers still wait in the queue (the drain
        // before this one stops after a pool's worth, and a thread may
        // hand over its last full buffers just before it ends): its
        // buffer is taken in a later round, after them, or its events
        // would be written out of order.
        let queued: std::collections::HashSet<u32> = (0..self.buffers_used())
            .map(|i| self.buf_header(i))
            .filter(|h| h.state.load(Ordering::Acquire) == BUF_FULL)
            .map(|h| h.task_slot)
            .collect();
        dead.retain(|(task, _, _)| !queued.contains(task));
        dead.sort_unstable();
        for (_, _, i) in dead {
            // Checked again: the thread may have handed it over meanwhile.
            if self.buf_header(i).state.load(Ordering::Acquire) != BUF_OWNED {
                continue;
            }
            let (task, records) = self.events(i);
            sink(task, records)?;
            self.recycle(i);
        }
        Ok(())
    }

    /// Agents waiting for a free buffer now.
    pub fn waiters(&self) -> u32 {
        self.header().free_waiters.load(Ordering::Acquire)
    }

    /// Task slots in use (at most the table's size).
    pub fn task_count(&self) -> u32 {
        self.header()
            .next_task
            .load(Ordering::Acquire)
            .min(self.layout.task_slots)
    }

    fn task_slot(&self, i: u32) -> &TaskSlot {
        assert!(i < self.layout.task_slots);
        // SAFETY: slot i < task_slots lies within the mapping.
        unsafe {
            &*(self
                .base
                .add(self.layout.tasks_offset() + i as usize * std::mem::size_of::<TaskSlot>())
                as *const TaskSlot)
        }
    }

    pub fn tasks(&self) -> Vec<TaskSlotCopy> {
        (0..self.task_count())
            .filter_map(|i| {
                let t = self.task_slot(i);
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

    /// The events threads wrote into the buffers they still own, per task
    /// (in its order), for a snapshot of a running program: each buffer's
    /// records up to the first one not complete yet (no timestamp: a
    /// record's word is written before its timestamp, and x86 keeps stores
    /// in order), copied while the threads write on. The buffers stay
    /// theirs: the same events come again when they are handed over.
    pub fn live_events(&self) -> Vec<(TaskKey, Vec<RawEvent>)> {
        let mut out: Vec<(TaskKey, Vec<RawEvent>)> = Vec::new();
        for i in self.buffers_in_task_order(&[BUF_OWNED]) {
            let h = self.buf_header(i);
            if h.task_slot >= self.task_count() {
                continue;
            }
            let pos = (h.pos.load(Ordering::Acquire) as usize).min(self.layout.buf_size as usize);
            let n = pos.saturating_sub(BUF_HEADER_SIZE) / RawEvent::SIZE;
            // SAFETY: the n records lie inside the buffer (as in `events`);
            // they are read with volatile loads, never referenced, as
            // their thread may be writing them.
            let base = unsafe {
                self.base
                    .add(self.layout.buffer_offset(i) + BUF_HEADER_SIZE)
                    as *const RawEvent
            };
            let read = |k: usize| {
                // SAFETY: k < n, within the buffer (see above).
                unsafe {
                    let r = base.add(k);
                    let tsc = std::ptr::read_volatile(std::ptr::addr_of!((*r).tsc));
                    std::sync::atomic::compiler_fence(Ordering::Acquire);
                    let word = std::ptr::read_volatile(std::ptr::addr_of!((*r).word));
                    RawEvent { word, tsc }
                }
            };
            let mut recs = Vec::new();
            let mut k = 0;
            while k < n {
                let r = read(k);
                if r.tsc == 0 {
                    break;
                }
                let extra = match r.kind() {
                    Some(
                        fctrace_format::event::EventKind::Args
                        | fctrace_format::event::EventKind::Retval,
                    ) => r.payload_records(),
                    _ => 0,
                };
                if k + 1 + extra > n {
                    break;
                }
                recs.push(r);
                for j in 0..extra {
                    recs.push(read(k + 1 + j));
                }
                k += 1 + extra;
            }
            let key = TaskKey {
                slot: h.task_slot,
                tid: h.tid,
            };
            match out.last_mut() {
                Some((last, v)) if last.slot == key.slot => v.extend(recs),
                _ => out.push((key, recs)),
            }
        }
        out
    }

    /// Buffers handed over so far (a change means more came meanwhile).
    pub fn handed_over(&self) -> u32 {
        self.header().full_pushes.load(Ordering::Acquire)
    }

    /// Snapshots asked for by `snapshot` triggers so far.
    pub fn snapshot_requests(&self) -> u64 {
        self.header().snapshot_requests.load(Ordering::Acquire)
    }

    /// Tasks not in `known` that have ended (their thread is gone, or a
    /// later task has their thread: an exec), added to `known`. Tasks of
    /// other PID namespaces are not checked.
    pub fn newly_ended_tasks(&self, known: &mut std::collections::HashSet<u32>) -> Vec<u32> {
        let own_ns = self.header().recorder_pidns;
        let mut ended = Vec::new();
        let count = self.task_count();
        let mut latest: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for i in 0..count {
            let t = self.task_slot(i);
            if t.state.load(Ordering::Acquire) != TASK_EMPTY {
                latest.insert(t.tid, i);
            }
        }
        for i in 0..count {
            if known.contains(&i) {
                continue;
            }
            let t = self.task_slot(i);
            if t.state.load(Ordering::Acquire) == TASK_EMPTY
                || (own_ns != 0 && t.pidns != own_ns && t.pidns != 0)
            {
                continue;
            }
            if latest.get(&t.tid) != Some(&i) || !thread_alive(t.pid, t.tid) {
                known.insert(i);
                ended.push(i);
            }
        }
        ended
    }

    /// The buffers in one of `states`, by task and in each task's order
    /// (its sequence numbers).
    fn buffers_in_task_order(&self, states: &[u32]) -> Vec<u32> {
        let mut found: Vec<(u32, u32, u32)> = (0..self.buffers_used())
            .filter_map(|i| {
                let h = self.buf_header(i);
                states
                    .contains(&h.state.load(Ordering::Acquire))
                    .then_some((h.task_slot, h.seq, i))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, _, i)| i).collect()
    }

    /// Buffers that agents ever took (the others were never touched).
    fn buffers_used(&self) -> u32 {
        self.header()
            .buffers_used
            .load(Ordering::Acquire)
            .min(self.layout.buf_count)
    }

    /// Events the agents could not record (they count them).
    pub fn lost_events(&self) -> u64 {
        self.header().lost_events.load(Ordering::Acquire)
    }

    /// Threads the agents could not set up at all.
    pub fn untraced_threads(&self) -> u32 {
        self.header().untraced_threads.load(Ordering::Acquire)
    }

    /// Damaged values found in the shared memory so far.
    pub fn damaged(&self) -> u64 {
        self.damaged.get()
    }

    /// The recorder's state as the agents see it (`RECORDER_*`).
    pub fn state(&self) -> u32 {
        self.header().recorder_state.load(Ordering::Acquire)
    }

    /// Whether the agents still hand buffers over (nobody said otherwise).
    pub fn recording(&self) -> bool {
        self.header().recorder_state.load(Ordering::Acquire) == RECORDER_RUNNING
    }

    /// Tells the agents the recorder's state (`RECORDER_*`) and wakes
    /// every waiting one, so that none waits any more.
    pub fn set_state(&self, state: u32) {
        let h = self.header();
        h.recorder_state.store(state, Ordering::SeqCst);
        h.free_wake.fetch_add(1, Ordering::SeqCst);
        futex_wake(&h.free_wake, i32::MAX);
    }

    /// Starts the heartbeat that tells the agents the recorder lives; it
    /// stops when the returned guard is dropped.
    pub fn start_heartbeat(&self) -> Result<Heartbeat> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let word = &self.header().heartbeat as *const std::sync::atomic::AtomicU32 as usize;
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fctrace-heartbeat".into())
            .spawn(move || {
                // SAFETY: the word lies in the mapping, which outlives this
                // thread (the guard is dropped first and joins it).
                let beat = unsafe { &*(word as *const std::sync::atomic::AtomicU32) };
                while !flag.load(Ordering::Acquire) {
                    beat.fetch_add(1, Ordering::Release);
                    std::thread::park_timeout(std::time::Duration::from_millis(HEARTBEAT_MS));
                }
            })
            .context("cannot start the heartbeat thread")?;
        Ok(Heartbeat {
            stop,
            thread: Some(thread),
        })
    }
}

/// The running heartbeat (see [`SharedMemory::start_heartbeat`]).
pub struct Heartbeat {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Wakes up to `n` agents sleeping on `word` (a shared futex).
fn futex_wake(word: &std::sync::atomic::AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE on a valid word of the shared mapping; no memory
    // is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            0usize,
            0usize,
            0usize,
        )
    };
}

/// Whether thread `tid` of process `pid` (numbers of the recorder's PID
/// namespace) exists.
fn thread_alive(pid: u32, tid: u32) -> bool {
    // SAFETY: tgkill with signal 0 only checks that the thread exists.
    let r = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            pid as libc::c_long,
            tid as libc::c_long,
            0,
        )
    };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Inode of a PID namespace link (`/proc/.../ns/pid`), 0 if unknown.
fn pidns_of(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0)
}

/// Inode of the recorder's own PID namespace.
fn own_pid_namespace() -> u64 {
    pidns_of(std::path::Path::new("/proc/self/ns/pid"))
}

/// The last number of the `NSpid:` line of a `/proc/.../status` file: the
/// id in the task's own PID namespace.
fn inner_id(status: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(status).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// Which of the `(namespace, pid, tid)` threads (ids of their own PID
/// namespace) still exist: every process of the recorder's `/proc` whose
/// namespace and inner pid match is looked into.
fn foreign_threads(wanted: &[(u64, u32, u32, u32)]) -> std::collections::HashSet<(u64, u32, u32)> {
    use std::collections::HashSet;
    let spaces: HashSet<u64> = wanted.iter().map(|w| w.0).collect();
    let pids: HashSet<(u64, u32)> = wanted.iter().map(|w| (w.0, w.1)).collect();
    let mut alive = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        // Nothing can be proven dead.
        return wanted.iter().map(|w| (w.0, w.1, w.2)).collect();
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let proc_dir = entry.path();
        let ns = pidns_of(&proc_dir.join("ns/pid"));
        if !spaces.contains(&ns) {
            continue;
        }
        let Some(pid) = inner_id(&proc_dir.join("status")) else {
            continue;
        };
        if !pids.contains(&(ns, pid)) {
            continue;
        }
        let Ok(threads) = std::fs::read_dir(proc_dir.join("task")) else {
            // Cannot look inside: take them all for alive.
            for w in wanted.iter().filter(|w| (w.0, w.1) == (ns, pid)) {
                alive.insert((w.0, w.1, w.2));
            }
            continue;
        };
        for t in threads.flatten() {
            if let Some(tid) = inner_id(&t.path().join("status")) {
                alive.insert((ns, pid, tid));
            }
        }
    }
    alive
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

/// Reads the timestamp counter and the recording's clock
/// ([`crate::clock`], CLOCK_MONOTONIC by default) together: the tightest
/// of a few tries. A read the scheduler or an interrupt cuts in two (8 ms
/// seen on a loaded machine, some 1 in 40,000 reads) would shift every
/// user event against the kernel's by half the gap, and put a system call
/// made just after a return inside the function.
pub fn clock_pair() -> (u64, u64) {
    let mut best: Option<(u64, (u64, u64))> = None;
    for _ in 0..PAIR_TRIES {
        let (gap, pair) = one_clock_pair();
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((gap, pair));
        }
        if gap <= PAIR_TIGHT_TICKS {
            break;
        }
    }
    best.map(|(_, p)| p).unwrap_or_default()
}

/// Tries of [`clock_pair`], and the gap (timestamp ticks around the
/// clock_gettime, about 50 ns uncut) below which a try is taken at once.
const PAIR_TRIES: usize = 64;
const PAIR_TIGHT_TICKS: u64 = 1_000;

/// One read: the ticks it took, and the pair (the counter's midpoint).
fn one_clock_pair() -> (u64, (u64, u64)) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: rdtsc has no memory effects; clock_gettime writes ts.
    let (t0, t1) = unsafe {
        let a = core::arch::x86_64::_rdtsc();
        libc::clock_gettime(crate::clock::id(), &mut ts);
        (a, core::arch::x86_64::_rdtsc())
    };
    (
        t1.wrapping_sub(t0),
        (
            t0 / 2 + t1 / 2,
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        ),
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
