//! The agent's side of the shared memory: mapping it, taking and handing
//! back buffers, registering tasks. Layout and protocol: `fctrace_format::shm`.

use fctrace_format::shm::*;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

pub struct Shm {
    base: *mut u8,
    pub layout: Layout,
}

// SAFETY: the mapping is shared memory used only through atomics and
// per-thread-owned buffers.
unsafe impl Sync for Shm {}
// SAFETY: as for Sync: the mapping belongs to no thread, so moving it
// between threads is sound.
unsafe impl Send for Shm {}

static SHM: AtomicPtr<Shm> = AtomicPtr::new(std::ptr::null_mut());

pub fn get() -> Option<&'static Shm> {
    let p = SHM.load(Ordering::Acquire);
    // SAFETY: set once to a leaked Box, never freed.
    unsafe { p.as_ref() }
}

/// This process's session id, taken from the shared memory at start-up.
static SESSION: AtomicU32 = AtomicU32::new(0);

pub(crate) fn session() -> u32 {
    SESSION.load(Ordering::Relaxed)
}

pub(crate) fn set_session(sid: u32) {
    SESSION.store(sid, Ordering::Relaxed);
}

/// A buffer of `bytes` (zeroed, 8-aligned, its write position `pos`)
/// made once for `slot` and kept for good: other threads may still write
/// into it.
fn kept_buffer(
    slot: &AtomicPtr<u8>,
    bytes: usize,
    pos: u64,
) -> *mut fctrace_format::shm::BufHeader {
    let mut p = slot.load(Ordering::Acquire);
    if p.is_null() {
        let made =
            Box::leak(vec![0u64; bytes.div_ceil(8)].into_boxed_slice()).as_mut_ptr() as *mut u8;
        // SAFETY: the header just made, 8-aligned, not shared yet.
        unsafe {
            (*(made as *mut fctrace_format::shm::BufHeader))
                .pos
                .store(pos, Ordering::Relaxed)
        };
        p = match slot.compare_exchange(
            std::ptr::null_mut(),
            made,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => made,
            Err(first) => first,
        };
    }
    p as *mut fctrace_format::shm::BufHeader
}

/// A buffer to write into once the recorder is gone, so that the program
/// can finish: its contents are discarded.
pub(crate) fn scratch_buffer() -> *mut fctrace_format::shm::BufHeader {
    static SCRATCH: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
    let size = get().map(|s| s.layout.buf_size as usize).unwrap_or(65536);
    let h = kept_buffer(&SCRATCH, size, 0);
    // SAFETY: the scratch buffer is at least a header long; pos is atomic.
    unsafe {
        (*h).pos.store(
            fctrace_format::shm::BUF_HEADER_SIZE as u64,
            Ordering::Relaxed,
        )
    };
    h
}

/// The buffer of a thread whose task is not registered yet (an adopted
/// one, `runtime::thread::adopt_state`): it never has room, so that its
/// first event goes to the slow path, which registers it
/// (`runtime::buffer::switch_buffer`). Nothing is ever written into it.
pub(crate) fn pending_buffer() -> *mut fctrace_format::shm::BufHeader {
    static PENDING: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
    // Its position far beyond any buffer's size: every reservation fails,
    // and adding to it never wraps.
    kept_buffer(&PENDING, fctrace_format::shm::BUF_HEADER_SIZE, 1 << 62)
}

impl Shm {
    /// Opens and maps the recorder's memory file.
    pub fn open(path: &str) -> Result<&'static Shm, String> {
        let cpath = std::ffi::CString::new(path).map_err(|_| "bad shm path".to_string())?;
        // SAFETY: plain libc calls with a valid C string; the fd is closed below.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "cannot open {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut hdr = [0u8; 32];
        // SAFETY: reading into a local buffer of the given size.
        let n = unsafe { libc::pread(fd, hdr.as_mut_ptr().cast(), hdr.len(), 0) };
        if n != hdr.len() as isize || u64::from_le_bytes(hdr[0..8].try_into().unwrap()) != MAGIC {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err("shared memory is not fctrace's".into());
        }
        let word = |o: usize| u32::from_le_bytes(hdr[o..o + 4].try_into().unwrap());
        if word(8) != VERSION {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err("agent and recorder versions differ".into());
        }
        let layout = Layout {
            buf_count: word(12),
            buf_size: word(16),
            task_slots: word(20),
        };
        // The header is the program's to scribble on too: map only a
        // layout that makes sense and that the file really holds (touching
        // a page past its end would be a SIGBUS in the program).
        // SAFETY: fstat into a local struct.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of our own fd into a valid struct.
        let file_size = if unsafe { libc::fstat(fd, &mut stat) } == 0 {
            stat.st_size as u64
        } else {
            0
        };
        let sane = layout.buf_count.is_power_of_two()
            && layout.buf_count <= 1 << 20
            && (4096..=1 << 24).contains(&layout.buf_size)
            && layout.buf_size.is_multiple_of(4096)
            && layout.task_slots <= 1 << 24
            && layout.total_size() as u64 <= file_size;
        if !sane {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err("the shared memory's header is damaged".into());
        }
        // SAFETY: maps the whole file shared; checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.total_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        // SAFETY: closing our own fd; the mapping stays.
        unsafe { libc::close(fd) };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map shared memory: {}",
                std::io::Error::last_os_error()
            ));
        }
        let shm = Box::leak(Box::new(Shm {
            base: base.cast(),
            layout,
        }));
        SHM.store(shm, Ordering::Release);
        Ok(shm)
    }

    pub fn header(&self) -> &ShmHeader {
        // SAFETY: the header is at offset 0 of a mapping at least HEADER_SIZE long.
        unsafe { &*(self.base as *const ShmHeader) }
    }

    fn cells(&self, off: usize) -> &[QueueCell] {
        // SAFETY: the queue arrays lie within the mapping (Layout).
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

    pub fn buffer(&self, index: u32) -> *mut BufHeader {
        // SAFETY: index < buf_count, so the buffer lies within the mapping.
        unsafe { self.base.add(self.layout.buffer_offset(index)) as *mut BufHeader }
    }

    pub fn task(&self, slot: u32) -> &TaskSlot {
        // SAFETY: slot < task_slots (checked by the caller's allocation).
        unsafe {
            &*(self
                .base
                .add(self.layout.tasks_offset() + slot as usize * 64)
                as *const TaskSlot)
        }
    }

    /// Whether the recorder still takes buffers.
    /// Whether the recorder is detaching from this process (`fctrace -p`):
    /// the recording has ended.
    pub fn detaching(&self) -> bool {
        self.header().recorder_state.load(Ordering::Acquire) == RECORDER_DETACHING
    }

    pub fn recording(&self) -> bool {
        self.header().recorder_state.load(Ordering::Acquire) == RECORDER_RUNNING
    }

    /// Whether the recorder was found dead (killed: no heartbeat).
    pub fn recorder_dead(&self) -> bool {
        self.header().recorder_state.load(Ordering::Acquire) == RECORDER_DEAD
    }

    /// Says that the recorder cannot be relied on any more (`state` is
    /// [`RECORDER_DEAD`] or [`RECORDER_STOPPED`]), unless it said so first.
    fn give_up(&self, state: u32) {
        let _ = self.header().recorder_state.compare_exchange(
            RECORDER_RUNNING,
            state,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Takes a free buffer for a task, waiting for the recorder if none is
    /// free. None if the recorder is not recording any more (it stopped,
    /// or died: its heartbeat stopped for [`HEARTBEAT_TIMEOUT_MS`]).
    ///
    /// Waiting sleeps on the futex word `free_wake` with a timeout: a
    /// futex is what every threaded program already uses, so a seccomp
    /// filter that lets threads work lets this work too.
    pub fn acquire(&self, tid: u32, pid: u32, session: u32, slot: u32, seq: u32) -> Option<u32> {
        let h = self.header();
        let mut spins = 0u32;
        let mut beat = h.heartbeat.load(Ordering::Acquire);
        let mut silent_ms = 0u64;
        let mut stopped_ms = 0u64;
        loop {
            // A recorder that stopped recording still recycles buffers
            // (and counts what they hold): a thread takes one if there is
            // one, so that it has a buffer of its own to write again.
            let state = h.recorder_state.load(Ordering::Acquire);
            if state != RECORDER_RUNNING && state != RECORDER_STOPPED {
                return None;
            }
            match self.free_queue().pop() {
                Pop::Some(i)
                    if i < u64::from(self.layout.buf_count)
                        // (a buffer handed out twice: the stack is damaged)
                        // SAFETY: i < buf_count: the header lies in the mapping.
                        && unsafe { (*self.buffer(i as u32)).state.load(Ordering::Acquire) }
                            == BUF_FREE =>
                {
                    let i = i as u32;
                    h.buffers_used.fetch_max(i + 1, Ordering::AcqRel);
                    let b = self.buffer(i);
                    // SAFETY: the buffer was free: nobody else touches it now.
                    unsafe {
                        (*b).tid = tid;
                        (*b).pid = pid;
                        (*b).session = session;
                        (*b).seq = seq;
                        (*b).task_slot = slot;
                        (*b).pidns = pid_namespace(pid);
                        (*b).pos.store(BUF_HEADER_SIZE as u64, Ordering::Relaxed);
                        (*b).state.store(BUF_OWNED, Ordering::Release);
                    }
                    return Some(i);
                }
                Pop::Some(_) | Pop::Damaged => {
                    // Someone wrote into the free stack: nothing taken from
                    // it can be trusted any more.
                    self.give_up(RECORDER_STOPPED);
                    return None;
                }
                Pop::Empty => {}
            }
            spins += 1;
            if spins < 16 {
                std::hint::spin_loop();
                continue;
            }
            // The recorder is behind: sleep until it frees a buffer (or
            // for a while, to look at its heartbeat). Registered as a
            // waiter before looking at the stack again, so that a buffer
            // freed in between bumps `free_wake` and the wait returns at
            // once.
            let seen = h.free_wake.load(Ordering::Acquire);
            h.free_waiters.fetch_add(1, Ordering::AcqRel);
            let empty = self.free_queue().pop_would_be_empty();
            let timed_out = empty && {
                let _marked = crate::runtime::tls::Marked::span();
                futex_wait(&h.free_wake, seen, WAIT_MS)
            };
            h.free_waiters.fetch_sub(1, Ordering::AcqRel);
            if timed_out && state == RECORDER_STOPPED {
                // It should have recycled something by now: its queue of
                // full buffers may be damaged. Do not wait for it.
                stopped_ms += WAIT_MS;
                if stopped_ms >= HEARTBEAT_TIMEOUT_MS {
                    return None;
                }
            }
            let now = h.heartbeat.load(Ordering::Acquire);
            if now != beat {
                beat = now;
                silent_ms = 0;
            } else if timed_out {
                silent_ms += WAIT_MS;
                if silent_ms >= HEARTBEAT_TIMEOUT_MS {
                    self.give_up(RECORDER_DEAD);
                    return None;
                }
            }
        }
    }

    /// Hands a buffer over to the recorder; false if the full queue is
    /// damaged (the buffer's events are then counted as lost).
    pub fn release(&self, index: u32) -> bool {
        let b = self.buffer(index);
        // SAFETY: this thread owns the buffer until it is pushed.
        unsafe { (*b).state.store(BUF_FULL, Ordering::Release) };
        // The queue has one cell per buffer, so it is never full: a push
        // that fails found the queue damaged.
        if !self.full_queue().push(index as u64) {
            self.add_lost(self.buffer_events(index));
            self.give_up(RECORDER_STOPPED);
            return false;
        }
        self.header().full_pushes.fetch_add(1, Ordering::Release);
        true
    }

    /// The events buffer `index` holds (as the recorder would store them).
    pub fn buffer_events(&self, index: u32) -> u64 {
        events_in(self.buffer(index), self.layout.buf_size)
    }

    /// Counts the events of a buffer this thread owns as lost and empties
    /// it, to be written again: what a thread does once the recorder does
    /// not record any more.
    pub fn recycle_own(&self, buf: *mut BufHeader) {
        // Detaching, the trace has ended: what comes after is not in it.
        if !self.detaching() {
            self.add_lost(events_in(buf, self.layout.buf_size));
        }
        // SAFETY: the calling thread owns the buffer; pos is atomic.
        unsafe { (*buf).pos.store(BUF_HEADER_SIZE as u64, Ordering::Relaxed) };
    }

    /// A thread that could not be set up at all runs untraced.
    pub fn note_untraced_thread(&self) {
        self.header()
            .untraced_threads
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A `snapshot` trigger fired: the recorder writes a snapshot
    /// (`record --ring`; ignored otherwise).
    pub fn request_snapshot(&self) {
        self.header()
            .snapshot_requests
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    pub fn add_lost(&self, n: u64) {
        self.header().lost_events.fetch_add(n, Ordering::Relaxed);
    }

    /// Names the creator of a task registered before it was known.
    pub fn set_parent(&self, slot: u32, parent_slot: u32) {
        if slot >= self.layout.task_slots {
            return;
        }
        let t = self.task(slot) as *const TaskSlot as *mut TaskSlot;
        // SAFETY: the slot belongs to the calling thread's task; the
        // recorder reads the table only after every task has ended.
        unsafe { (*t).parent_slot = parent_slot };
    }

    /// Moves the tasks of process `pid` registered at slot `from` or later
    /// (a fork child's: its first task's slot) to session `session`.
    pub fn retag_tasks(&self, from: u32, pid: u32, session: u32) {
        let ns = pid_namespace(pid);
        let end = self
            .header()
            .next_task
            .load(Ordering::Acquire)
            .min(self.layout.task_slots);
        for slot in from..end {
            let t = self.task(slot);
            if t.state.load(Ordering::Acquire) == TASK_EMPTY || t.pid != pid || t.pidns != ns {
                continue;
            }
            let at = &t.session as *const u32 as *mut u32;
            // SAFETY: a slot of this process's, filled in before its state
            // was published (the load above); its task's thread never
            // writes it again, and the recorder reads it with an aligned
            // load of its own.
            unsafe { at.write_volatile(session) };
        }
    }

    /// Claims a task slot and fills it in; [`NO_TASK_SLOT`] if the table
    /// is full (the task is traced all the same, and the recorder counts
    /// its events as lost).
    pub fn register_task(
        &self,
        tid: u32,
        pid: u32,
        ppid: u32,
        session: u32,
        parent_slot: u32,
        origin: u32,
    ) -> u32 {
        let h = self.header();
        // Never past the end, even after billions of tasks.
        let Ok(slot) = h
            .next_task
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.layout.task_slots).then_some(n + 1)
            })
        else {
            return NO_TASK_SLOT;
        };
        let t = self.task(slot) as *const TaskSlot as *mut TaskSlot;
        let mut comm = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes.
        unsafe { libc::prctl(libc::PR_GET_NAME, comm.as_mut_ptr()) };
        // SAFETY: the slot was just claimed by this thread alone.
        unsafe {
            (*t).tid = tid;
            (*t).pid = pid;
            (*t).ppid = ppid;
            (*t).session = session;
            (*t).parent_slot = parent_slot;
            (*t).origin = origin;
            (*t).comm = comm;
            (*t).pidns = pid_namespace(pid);
            (*t).state.store(TASK_LIVE, Ordering::Release);
        }
        slot
    }
}

/// How long a waiting thread sleeps before it looks at the heartbeat.
const WAIT_MS: u64 = 100;

/// The events in a buffer (see `fctrace_format::shm::count_events`).
fn events_in(buf: *mut BufHeader, buf_size: u32) -> u64 {
    // SAFETY: `buf` is a buffer of `buf_size` bytes; pos is atomic.
    let pos = unsafe { (*buf).pos.load(Ordering::Acquire) }.min(u64::from(buf_size)) as usize;
    let n = pos.saturating_sub(BUF_HEADER_SIZE) / fctrace_format::event::RawEvent::SIZE;
    // SAFETY: the n records lie inside the buffer; RawEvent is plain data.
    let recs = unsafe {
        std::slice::from_raw_parts(
            (buf as *const u8).add(BUF_HEADER_SIZE) as *const fctrace_format::event::RawEvent,
            n,
        )
    };
    count_events(recs)
}

/// Sleeps while `*word == seen`, for at most `ms` milliseconds; true if
/// the time ran out. A shared futex (not FUTEX_PRIVATE): the recorder,
/// another process, wakes it. The system call itself: libc's `syscall` is
/// traced with -l, and nothing here may be a cancellation point.
fn futex_wait(word: &AtomicU32, seen: u32, ms: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    let ret: isize;
    // SAFETY: FUTEX_WAIT on a valid, aligned word with a valid relative
    // timeout; the kernel clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_futex as isize => ret,
            in("rdi") word.as_ptr(),
            in("rsi") libc::FUTEX_WAIT as usize,
            in("rdx") seen as usize,
            in("r10") &ts as *const libc::timespec,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == -(libc::ETIMEDOUT as isize)
}

/// Inode of the PID namespace of the calling process (0 if unknown: no
/// /proc). Looked up once per process.
fn pid_namespace(pid: u32) -> u64 {
    // (pid << 32 | 1) of the process the cached value belongs to, and it.
    static CACHE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
    if CACHE[0].load(Ordering::Acquire) == (u64::from(pid) << 32 | 1) {
        return CACHE[1].load(Ordering::Relaxed);
    }
    // SAFETY: stat of a constant path into a local struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ino = if unsafe { libc::stat(c"/proc/self/ns/pid".as_ptr(), &mut st) } == 0 {
        st.st_ino
    } else {
        0
    };
    CACHE[1].store(ino, Ordering::Relaxed);
    CACHE[0].store(u64::from(pid) << 32 | 1, Ordering::Release);
    ino
}

pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// Set when the agent was loaded into a running process (`fctrace -p`):
/// the threads that existed then register at their first traced call as
/// [`fctrace_format::shm::ORIGIN_ATTACH`].
static ATTACHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn attached() -> bool {
    ATTACHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Marks the agent attached; whether it already was.
pub fn set_attached() -> bool {
    ATTACHED.swap(true, std::sync::atomic::Ordering::Relaxed)
}

/// Detaching (`fctrace -p`): the shared memory is unmapped and the
/// session ends; `get` gives None from now on. Only while no thread runs
/// the agent's code (the caller's precondition).
pub fn close() {
    let p = SHM.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: the Box `open` leaked, no longer referred to.
        let shm = unsafe { Box::from_raw(p) };
        // SAFETY: the mapping `open` made, of this size.
        unsafe { libc::munmap(shm.base.cast(), shm.layout.total_size()) };
    }
    SESSION.store(0, Ordering::Relaxed);
    ATTACHED.store(false, Ordering::Relaxed);
    set_attach_tids(Vec::new());
}

/// Attaching with `--tid`: the threads to trace (those there before
/// fctrace; threads they create are traced too). Null: every thread.
static ATTACH_TIDS: AtomicPtr<Vec<u32>> = AtomicPtr::new(std::ptr::null_mut());

/// Sets the threads to trace (empty: all); the previous list is freed.
/// Only while no other thread runs the agent's code (attach, detach).
pub fn set_attach_tids(tids: Vec<u32>) {
    let new = if tids.is_empty() {
        std::ptr::null_mut()
    } else {
        Box::into_raw(Box::new(tids))
    };
    let old = ATTACH_TIDS.swap(new, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the Box a previous call leaked; nobody reads it now (the
        // caller's precondition).
        drop(unsafe { Box::from_raw(old) });
    }
}

/// Whether a thread that was there when fctrace attached is to be traced.
pub fn attach_traces(tid: u32) -> bool {
    // SAFETY: a published list is freed only by `set_attach_tids`, while
    // no thread runs the agent's code.
    match unsafe { ATTACH_TIDS.load(Ordering::Acquire).as_ref() } {
        Some(v) => v.contains(&tid),
        None => true,
    }
}
