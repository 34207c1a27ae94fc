//! The shared-memory protocol between the agent (inside the traced
//! processes) and the recorder (the `fctrace` process).
//!
//! The recorder creates one memory file, sized [`Layout::total_size`], and
//! maps it; every traced process maps the same file. It holds, in order:
//!
//! 1. a [`ShmHeader`] (one page),
//! 2. the task table: [`TaskSlot`]s, one per thread ever traced,
//! 3. two lists of buffer indices ([`QueueCell`] arrays): the `free` stack
//!    (recorder to agents, most recently recycled first) and the `full`
//!    queue (agents to recorder, in order),
//! 4. the event buffers: `buf_count` buffers of `buf_size` bytes, each
//!    starting with a [`BufHeader`] followed by [`crate::event::RawEvent`]s.
//!
//! A thread owns one buffer at a time and appends events to it without
//! locks: it reserves 16 bytes by adding to [`BufHeader::pos`] (a plain
//! `xadd`, which signal handlers of the same thread cannot split), then
//! writes the record. When the buffer is full the thread pushes it onto the
//! `full` queue and pops a fresh one from `free`, waiting if there is none:
//! events are never dropped for lack of space. A waiting thread sleeps on
//! the futex word [`ShmHeader::free_wake`] (a shared futex: the memory is
//! `MAP_SHARED`), which the recorder bumps, and wakes, when it frees
//! buffers. After every traced process has ended, the recorder also reads
//! the buffers still marked [`BUF_OWNED`]: their `pos` says how much was
//! written, even if the process was killed.
//!
//! **The recorder may go away.** [`ShmHeader::recorder_state`] is
//! [`RECORDER_RUNNING`] while it records. It leaves that state when it stops
//! recording (an error writing the trace, the shared memory found damaged)
//! or when every traced process has ended; a recorder killed outright
//! (SIGKILL) cannot say so, but its heartbeat ([`ShmHeader::heartbeat`],
//! bumped every [`HEARTBEAT_MS`] by a thread of its own) stops, and a
//! waiting agent that sees no beat for [`HEARTBEAT_TIMEOUT_MS`] sets
//! [`RECORDER_DEAD`] itself. Both work across PID namespaces. Once the
//! recorder is not running, no agent waits for it: each thread keeps
//! reusing the buffer it holds, adding what it overwrites to
//! [`ShmHeader::lost_events`] (counted as [`count_events`] counts), so the
//! program runs on at its untraced speed and the loss is exact.
//!
//! **Nothing read here is trusted.** The traced program can write anywhere
//! in this memory. Every index, length and state read from it is checked
//! by its reader, and every loop over it is bounded ([`Queue`] and
//! [`FreeStack`] give up after [`MAX_RETRIES`] rounds).
//!
//! Everything here is plain data and atomics; mapping the memory is the
//! business of the agent and of the recorder's process-control module.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"FCTRSHM1");
pub const VERSION: u32 = 4;

/// Size of the header page.
pub const HEADER_SIZE: usize = 4096;
/// Size of a buffer header; the first event starts at this offset.
pub const BUF_HEADER_SIZE: usize = 64;

/// Buffer states ([`BufHeader::state`]).
pub const BUF_FREE: u32 = 0;
pub const BUF_OWNED: u32 = 1;
pub const BUF_FULL: u32 = 2;

/// [`BufHeader::task_slot`] of a task that got no slot (the task table was
/// full): its events are written as usual and the recorder counts them as
/// lost, exactly.
pub const NO_TASK_SLOT: u32 = u32::MAX;

/// [`ShmHeader::recorder_state`]: recording.
pub const RECORDER_RUNNING: u32 = 0;
/// Every traced process has ended; the recorder collects what is left.
pub const RECORDER_DONE: u32 = 1;
/// The recorder stopped recording (it could not write the trace, or found
/// the shared memory damaged) and waits for the program to end.
pub const RECORDER_STOPPED: u32 = 2;
/// Set by an agent: the recorder's heartbeat stopped (it was killed).
pub const RECORDER_DEAD: u32 = 3;
/// The recorder is detaching from a process it attached to (`-p`): the
/// recording ended; events written from now on are dropped, not lost
/// (they come after the end of the trace).
pub const RECORDER_DETACHING: u32 = 4;

/// The recorder bumps [`ShmHeader::heartbeat`] this often.
pub const HEARTBEAT_MS: u64 = 50;
/// An agent waiting for a buffer that sees no heartbeat for this long
/// takes the recorder for dead.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 1000;
/// Rounds after which a lock-free operation on this memory gives up: only
/// damaged memory makes one take that long.
pub const MAX_RETRIES: u32 = 1 << 16;

/// Task slot states ([`TaskSlot::state`]).
pub const TASK_EMPTY: u32 = 0;
pub const TASK_LIVE: u32 = 1;
pub const TASK_EXITED: u32 = 2;

/// Option bits in [`ShmHeader::flags`].
pub const FLAG_NEST_LIBCALL: u32 = 1;
/// `record -k`: the agent marks where its own code makes system calls
/// ([`KERNEL_MARK_BEGIN`], [`KERNEL_MARK_END`]).
pub const FLAG_KERNEL: u32 = 2;

#[repr(C)]
pub struct ShmHeader {
    pub magic: u64,
    pub version: u32,
    pub buf_count: u32,
    pub buf_size: u32,
    pub task_slots: u32,
    pub flags: u32,
    pub recorder_pid: u32,
    /// Session ids are handed out from here (0 is the first program).
    pub next_session: AtomicU32,
    /// Task slots are handed out from here.
    pub next_task: AtomicU32,
    /// Events that could not be recorded, counted exactly.
    pub lost_events: AtomicU64,
    /// Head of the free-buffer stack ([`FreeStack`]).
    pub free_head: AtomicU64,
    /// Snapshots asked for by `snapshot` triggers (`record --ring`): the
    /// recorder writes one when it sees this change.
    pub snapshot_requests: AtomicU64,
    /// Positions of the full-buffer queue (a Vyukov bounded MPMC queue).
    pub full_head: AtomicU64,
    pub full_tail: AtomicU64,
    /// Incremented whenever a buffer is pushed on the full queue.
    pub full_pushes: AtomicU32,
    /// One of the `RECORDER_*` values: anything but [`RECORDER_RUNNING`]
    /// makes agents stop waiting for free buffers and count losses instead.
    pub recorder_state: AtomicU32,
    /// One more than the highest buffer index ever taken: buffers from
    /// here on were never touched (the free stack hands them out in
    /// order), so the recorder's scans stop here instead of faulting in
    /// every buffer's header page.
    pub buffers_used: AtomicU32,
    /// Bumped by the recorder's heartbeat thread every [`HEARTBEAT_MS`].
    pub heartbeat: AtomicU32,
    /// Futex word: bumped by the recorder after it freed buffers.
    pub free_wake: AtomicU32,
    /// Agent threads sleeping on `free_wake` (the recorder wakes them only
    /// then: no system call otherwise).
    pub free_waiters: AtomicU32,
    /// Threads the agent could not set up at all (no memory for their
    /// shadow stack): their calls are neither recorded nor counted.
    pub untraced_threads: AtomicU32,
    /// Inode of the recorder's PID namespace (`/proc/self/ns/pid`); 0 if
    /// unknown. Tasks in another namespace have tids that mean nothing to
    /// the recorder ([`TaskSlot::pidns`]).
    pub recorder_pidns: u64,
}

/// The high 32 bits of the `si_value` of a signal fctrace passes on to
/// the program (`rt_sigqueueinfo`, `SI_QUEUE`): the agent recognises its
/// copies by it (the low 32 bits carry the original `si_code`). One per
/// recorder (from its pid and PID namespace), never 0.
pub fn forward_tag(recorder_pid: u32, recorder_pidns: u64) -> u32 {
    let t = (MAGIC as u32) ^ recorder_pid.rotate_left(11) ^ (recorder_pidns as u32) ^ 0x5f1d_0000;
    t.max(1)
}

#[repr(C)]
pub struct TaskSlot {
    pub state: AtomicU32,
    pub tid: u32,
    pub pid: u32,
    pub ppid: u32,
    pub session: u32,
    /// Task slot of the thread that created this one (or u32::MAX).
    pub parent_slot: u32,
    pub comm: [u8; 16],
    /// How the task came to be: one of the `ORIGIN_*` values.
    pub origin: u32,
    /// Inode of the task's PID namespace (0: unknown). When it is not the
    /// recorder's, `tid` and `pid` are numbers of that namespace.
    pub pidns: u64,
    pub _pad: [u8; 8],
}

/// [`TaskSlot::origin`]: the program fctrace started.
pub const ORIGIN_START: u32 = 0;
/// A thread created by `parent_slot`.
pub const ORIGIN_THREAD: u32 = 1;
/// A process forked by `parent_slot` (fork, or vfork before its exec).
pub const ORIGIN_FORK: u32 = 2;
/// A new program image: `parent_slot` called exec (same pid), or spawned
/// it (posix_spawn, system, popen: a new pid whose parent is the spawner).
pub const ORIGIN_EXEC: u32 = 3;
/// A thread of a process fctrace attached to (`-p`), there before it.
pub const ORIGIN_ATTACH: u32 = 4;

/// `close(2)` of these descriptors (beyond any a process can have: the
/// kernel answers EBADF) marks where the agent's set-up in a new program
/// begins and ends, for `record -k`: the system calls between them on
/// that thread are the agent's, not the program's, and are not recorded.
pub const KERNEL_MARK_BEGIN: u64 = 0x7fac_e0b1;
pub const KERNEL_MARK_END: u64 = 0x7fac_e0e1;

/// The agent's system calls made on paths too frequent for marks (the
/// slow path's `rt_sigprocmask` around a buffer switch) and the
/// `rt_sigreturn` that ends a signal frame that was the agent's alone (an
/// int3 of the trap fallback, the crash marker) carry these values in the
/// two argument registers the call does not use (r8, r9): the
/// `raw_syscalls:sys_enter` tracepoint records all six, so the call is
/// known as the agent's without a system call more (`record -k`).
pub const KERNEL_TAG: [u64; 2] = [0x6663_7472_6163_6521, 0x7fac_e0b1_7fac_e0e1];

/// Whether a system call's six argument registers carry [`KERNEL_TAG`].
pub fn kernel_tagged(args: &[u64; 6]) -> bool {
    args[4] == KERNEL_TAG[0] && args[5] == KERNEL_TAG[1]
}

#[repr(C)]
pub struct QueueCell {
    pub seq: AtomicU64,
    pub value: AtomicU64,
}

#[repr(C)]
pub struct BufHeader {
    /// Byte offset of the next record from the start of the buffer. May
    /// exceed `buf_size` after a failed reservation: only whole records
    /// below `buf_size` count.
    pub pos: AtomicU64,
    pub state: AtomicU32,
    pub tid: u32,
    pub pid: u32,
    pub session: u32,
    /// Per-task sequence number of this buffer.
    pub seq: u32,
    pub task_slot: u32,
    /// Inode of the owner's PID namespace (0: unknown): `tid` and `pid`
    /// are numbers of that namespace.
    pub pidns: u64,
    pub _pad: [u8; 24],
}

const _: () = assert!(std::mem::size_of::<ShmHeader>() <= HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<TaskSlot>() == 64);
const _: () = assert!(std::mem::size_of::<BufHeader>() == BUF_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<QueueCell>() == 16);

/// Where everything is, given the three sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub buf_count: u32,
    pub buf_size: u32,
    pub task_slots: u32,
}

impl Layout {
    pub const DEFAULT: Layout = Layout {
        buf_count: 4096,
        buf_size: 64 * 1024,
        // 64 MiB of the memory file, touched only as tasks come: enough
        // for a million threads over a program's life. Tasks beyond it are
        // not in the table; their events are counted as lost.
        task_slots: 1 << 20,
    };

    pub fn tasks_offset(&self) -> usize {
        HEADER_SIZE
    }
    pub fn free_queue_offset(&self) -> usize {
        self.tasks_offset() + self.task_slots as usize * std::mem::size_of::<TaskSlot>()
    }
    pub fn full_queue_offset(&self) -> usize {
        self.free_queue_offset() + self.buf_count as usize * std::mem::size_of::<QueueCell>()
    }
    pub fn buffers_offset(&self) -> usize {
        let end =
            self.full_queue_offset() + self.buf_count as usize * std::mem::size_of::<QueueCell>();
        end.next_multiple_of(4096)
    }
    pub fn buffer_offset(&self, index: u32) -> usize {
        self.buffers_offset() + index as usize * self.buf_size as usize
    }
    pub fn total_size(&self) -> usize {
        self.buffer_offset(self.buf_count)
    }
    /// Number of whole events a buffer holds.
    pub fn events_per_buffer(&self) -> usize {
        (self.buf_size as usize - BUF_HEADER_SIZE) / crate::event::RawEvent::SIZE
    }
}

/// The events among `records` as the trace writer stores them: records
/// with a timestamp (a record reserved but never written has none) and a
/// valid kind; an `Args`/`Retval` record with its payload records counts
/// once. What a thread overwrites or the recorder drops is counted with
/// this, so lost counts and stored counts are in the same unit.
pub fn count_events(records: &[crate::event::RawEvent]) -> u64 {
    use crate::event::{EventKind, MAX_PAYLOAD};
    let mut n = 0u64;
    let mut i = 0usize;
    while i < records.len() {
        let r = &records[i];
        i += 1;
        let kind = r.kind();
        if let Some(EventKind::Args | EventKind::Retval) = kind {
            let end = i + r.payload_records();
            if end > records.len() || r.payload_len() > MAX_PAYLOAD {
                break;
            }
            i = end;
        } else if kind.is_none() || kind == Some(EventKind::Data) {
            continue;
        }
        if r.tsc != 0 {
            n += 1;
        }
    }
    n
}

/// The free buffers: a lock-free LIFO stack of buffer indices (a Treiber
/// stack whose head carries a modification count against ABA). The most
/// recently recycled buffer is taken first, so a thread keeps writing into
/// memory that is mapped and cached already; a FIFO would cycle through the
/// whole pool and take a page fault on every page of it.
pub struct FreeStack<'a> {
    /// `cells[i].value`: the index below buffer `i` on the stack, plus one
    /// (0: none).
    pub cells: &'a [QueueCell],
    /// `(count << 32) | (top index + 1)`; the low half is 0 when empty.
    pub head: &'a AtomicU64,
}

impl FreeStack<'_> {
    /// Empties the stack; only the creator calls this.
    pub fn init(&self) {
        self.head.store(0, Ordering::Release);
    }

    /// Pushes buffer `index` (< number of cells). Succeeds unless the
    /// index is out of range or the memory is damaged: each buffer is on
    /// the stack at most once.
    pub fn push(&self, index: u64) -> bool {
        let Some(cell) = self.cells.get(index as usize) else {
            return false;
        };
        let mut head = self.head.load(Ordering::Relaxed);
        for _ in 0..MAX_RETRIES {
            cell.value.store(head & 0xFFFF_FFFF, Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | (index + 1);
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(h) => head = h,
            }
        }
        false
    }

    /// Whether the stack is empty now.
    pub fn pop_would_be_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) & 0xFFFF_FFFF == 0
    }

    /// Takes the most recently pushed index, if any. An index out of range
    /// (damaged memory) is returned too: callers check it.
    pub fn pop(&self) -> Pop {
        let mut head = self.head.load(Ordering::Acquire);
        for _ in 0..MAX_RETRIES {
            let top = head & 0xFFFF_FFFF;
            if top == 0 {
                return Pop::Empty;
            }
            // If another thread takes `top` meanwhile, the count in the
            // head changes and the exchange below fails: `next` is only
            // used when it was read from the top it belongs to.
            let Some(cell) = self.cells.get(top as usize - 1) else {
                return Pop::Damaged;
            };
            let next = cell.value.load(Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | (next & 0xFFFF_FFFF);
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Pop::Some(top - 1),
                Err(h) => head = h,
            }
        }
        Pop::Damaged
    }
}

/// What taking a value from a [`FreeStack`] or a [`Queue`] gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pop {
    Some(u64),
    Empty,
    /// The shared memory holds values no correct user writes (or a
    /// lock-free loop found no end): the structure is damaged.
    Damaged,
}

impl Pop {
    pub fn some(self) -> Option<u64> {
        match self {
            Pop::Some(v) => Some(v),
            _ => None,
        }
    }
}

/// A bounded multi-producer multi-consumer queue of `u64` values over a
/// slice of cells in shared memory (Dmitry Vyukov's algorithm). The
/// capacity (number of cells) must be a power of two. Works across
/// processes: it uses nothing but atomics in the shared cells.
pub struct Queue<'a> {
    pub cells: &'a [QueueCell],
    pub head: &'a AtomicU64,
    pub tail: &'a AtomicU64,
}

impl Queue<'_> {
    /// Prepares the cells; only the creator calls this, before anyone else
    /// sees the memory.
    pub fn init(&self) {
        for (i, c) in self.cells.iter().enumerate() {
            c.seq.store(i as u64, Ordering::Relaxed);
            c.value.store(0, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Release);
    }

    /// Appends `value`; false if the queue is full (or damaged).
    pub fn push(&self, value: u64) -> bool {
        let mask = self.cells.len() as u64 - 1;
        let mut pos = self.tail.load(Ordering::Relaxed);
        for _ in 0..MAX_RETRIES {
            let cell = &self.cells[(pos & mask) as usize];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as i64 - pos as i64;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.value.store(value, Ordering::Relaxed);
                        cell.seq.store(pos + 1, Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return false;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
        false
    }

    /// Takes the oldest value, if any.
    pub fn pop(&self) -> Pop {
        let mask = self.cells.len() as u64 - 1;
        let mut pos = self.head.load(Ordering::Relaxed);
        for _ in 0..MAX_RETRIES {
            let cell = &self.cells[(pos & mask) as usize];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as i64 - (pos + 1) as i64;
            if diff == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let v = cell.value.load(Ordering::Relaxed);
                        cell.seq.store(pos + mask + 1, Ordering::Release);
                        return Pop::Some(v);
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return Pop::Empty;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
        Pop::Damaged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(n: usize) -> Vec<QueueCell> {
        (0..n)
            .map(|_| QueueCell {
                seq: AtomicU64::new(0),
                value: AtomicU64::new(0),
            })
            .collect()
    }

    #[test]
    fn stack_lifo() {
        let c = cells(4);
        let h = AtomicU64::new(0);
        let st = FreeStack {
            cells: &c,
            head: &h,
        };
        st.init();
        assert_eq!(st.pop().some(), None);
        for i in 0..4 {
            assert!(st.push(i));
        }
        assert!(!st.push(4), "index out of range");
        assert_eq!(st.pop().some(), Some(3));
        assert!(st.push(3));
        assert_eq!(st.pop().some(), Some(3), "the last pushed comes back first");
        for i in (0..3).rev() {
            assert_eq!(st.pop().some(), Some(i));
        }
        assert_eq!(st.pop().some(), None);
    }

    #[test]
    fn stack_concurrent_no_loss_no_duplicate() {
        // Threads take buffers and give them back, as agents and the
        // recorder do; every index must stay on the stack exactly once.
        let n = 64usize;
        let c = cells(n);
        let h = AtomicU64::new(0);
        let st = FreeStack {
            cells: &c,
            head: &h,
        };
        st.init();
        for i in 0..n as u64 {
            st.push(i);
        }
        let owned: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (st, owned) = (&st, &owned);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for round in 0..20_000u64 {
                        if round % 3 != 2 {
                            if let Some(i) = st.pop().some() {
                                let was = owned[i as usize].fetch_add(1, Ordering::SeqCst);
                                assert_eq!(was, 0, "buffer {i} handed out twice");
                                mine.push(i);
                            }
                        } else if let Some(i) = mine.pop() {
                            owned[i as usize].fetch_sub(1, Ordering::SeqCst);
                            st.push(i);
                        }
                    }
                    for i in mine {
                        owned[i as usize].fetch_sub(1, Ordering::SeqCst);
                        st.push(i);
                    }
                });
            }
        });
        let mut all = Vec::new();
        while let Some(i) = st.pop().some() {
            all.push(i);
        }
        all.sort();
        assert_eq!(all, (0..n as u64).collect::<Vec<_>>());
    }

    #[test]
    fn damaged_structures_end_in_bounded_time() {
        // A queue whose cells hold garbage: pop and push give up.
        let c = cells(4);
        let (h, t) = (AtomicU64::new(0), AtomicU64::new(0));
        let q = Queue {
            cells: &c,
            head: &h,
            tail: &t,
        };
        q.init();
        for cell in &c {
            cell.seq.store(u64::MAX / 3, Ordering::Relaxed);
        }
        assert_eq!(q.pop(), Pop::Damaged);
        assert!(!q.push(1));
        // A stack whose head names a cell that does not exist.
        let sh = AtomicU64::new(0x1234_5678_9abc);
        let st = FreeStack {
            cells: &c,
            head: &sh,
        };
        assert_eq!(st.pop(), Pop::Damaged);
    }

    #[test]
    fn events_are_counted_as_the_writer_stores_them() {
        use crate::event::{EventKind, RawEvent};
        let mut recs = vec![
            RawEvent::new(EventKind::Entry, 1, 10),
            RawEvent::new(EventKind::Exit, 1, 0), // reserved, never written
            RawEvent::with_payload(EventKind::Args, 1, 20, 11),
            RawEvent { word: 7, tsc: 8 }, // payload: not an event
            RawEvent { word: 9, tsc: 0 }, // payload
            RawEvent::new(EventKind::Exit, 1, 12),
        ];
        assert_eq!(count_events(&recs), 3);
        recs.push(RawEvent {
            word: 0xff,
            tsc: 13,
        }); // no such kind
        assert_eq!(count_events(&recs), 3);
    }

    #[test]
    fn queue_fifo_and_bounds() {
        let c = cells(4);
        let (h, t) = (AtomicU64::new(0), AtomicU64::new(0));
        let q = Queue {
            cells: &c,
            head: &h,
            tail: &t,
        };
        q.init();
        assert_eq!(q.pop().some(), None);
        for v in 10..14 {
            assert!(q.push(v));
        }
        assert!(!q.push(99));
        for v in 10..14 {
            assert_eq!(q.pop().some(), Some(v));
        }
        assert_eq!(q.pop().some(), None);
        // wraps around
        for round in 0..10u64 {
            assert!(q.push(round));
            assert_eq!(q.pop().some(), Some(round));
        }
    }

    #[test]
    fn queue_concurrent_no_loss() {
        let c = cells(1024);
        let (h, t) = (AtomicU64::new(0), AtomicU64::new(0));
        let q = Queue {
            cells: &c,
            head: &h,
            tail: &t,
        };
        q.init();
        let got = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for p in 0..4u64 {
                let q = &q;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        while !q.push(p * 1_000_000 + i) {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (q, got) = (&q, &got);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while mine.len() < 20_000 {
                        if let Some(v) = q.pop().some() {
                            mine.push(v);
                        }
                    }
                    got.lock().unwrap().extend(mine);
                });
            }
        });
        let mut all = got.into_inner().unwrap();
        all.sort();
        let mut want: Vec<u64> = (0..4u64)
            .flat_map(|p| (0..10_000).map(move |i| p * 1_000_000 + i))
            .collect();
        want.sort();
        assert_eq!(all, want);
    }
}
