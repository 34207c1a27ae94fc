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
//! events are never dropped for lack of space. After every traced process
//! has ended, the recorder also reads the buffers still marked
//! [`BUF_OWNED`]: their `pos` says how much was written, even if the process
//! was killed.
//!
//! Everything here is plain data and atomics; mapping the memory is the
//! business of the agent and of the recorder's process-control module.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"FCTRSHM1");
pub const VERSION: u32 = 3;

/// Size of the header page.
pub const HEADER_SIZE: usize = 4096;
/// Size of a buffer header; the first event starts at this offset.
pub const BUF_HEADER_SIZE: usize = 64;

/// Buffer states ([`BufHeader::state`]).
pub const BUF_FREE: u32 = 0;
pub const BUF_OWNED: u32 = 1;
pub const BUF_FULL: u32 = 2;

/// Task slot states ([`TaskSlot::state`]).
pub const TASK_EMPTY: u32 = 0;
pub const TASK_LIVE: u32 = 1;
pub const TASK_EXITED: u32 = 2;

/// Option bits in [`ShmHeader::flags`].
pub const FLAG_NEST_LIBCALL: u32 = 1;

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
    /// Unused (kept for the layout).
    pub free_tail: AtomicU64,
    /// Positions of the full-buffer queue (a Vyukov bounded MPMC queue).
    pub full_head: AtomicU64,
    pub full_tail: AtomicU64,
    /// Incremented whenever a buffer is pushed on the full queue.
    pub full_pushes: AtomicU32,
    /// Set by the recorder when it stops draining (it is shutting down):
    /// agents then stop waiting for free buffers and count losses instead.
    pub recorder_gone: AtomicU32,
    /// One more than the highest buffer index ever taken: buffers from
    /// here on were never touched (the free stack hands them out in
    /// order), so the recorder's scans stop here instead of faulting in
    /// every buffer's header page.
    pub buffers_used: AtomicU32,
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
    pub _pad: [u8; 20],
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
    pub _pad: [u8; 32],
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
        task_slots: 32768,
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

    /// Pushes buffer `index` (< number of cells). Always succeeds: each
    /// buffer is on the stack at most once.
    pub fn push(&self, index: u64) -> bool {
        let Some(cell) = self.cells.get(index as usize) else {
            return false;
        };
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
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
    }

    /// Takes the most recently pushed index, if any.
    pub fn pop(&self) -> Option<u64> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let top = head & 0xFFFF_FFFF;
            if top == 0 {
                return None;
            }
            // If another thread takes `top` meanwhile, the count in the
            // head changes and the exchange below fails: `next` is only
            // used when it was read from the top it belongs to.
            let next = self
                .cells
                .get(top as usize - 1)?
                .value
                .load(Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | (next & 0xFFFF_FFFF);
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Some(top - 1),
                Err(h) => head = h,
            }
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

    /// Appends `value`; false if the queue is full.
    pub fn push(&self, value: u64) -> bool {
        let mask = self.cells.len() as u64 - 1;
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
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
    }

    /// Takes the oldest value, if any.
    pub fn pop(&self) -> Option<u64> {
        let mask = self.cells.len() as u64 - 1;
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
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
                        return Some(v);
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
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
        assert_eq!(st.pop(), None);
        for i in 0..4 {
            assert!(st.push(i));
        }
        assert!(!st.push(4), "index out of range");
        assert_eq!(st.pop(), Some(3));
        assert!(st.push(3));
        assert_eq!(st.pop(), Some(3), "the last pushed comes back first");
        for i in (0..3).rev() {
            assert_eq!(st.pop(), Some(i));
        }
        assert_eq!(st.pop(), None);
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
                            if let Some(i) = st.pop() {
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
        while let Some(i) = st.pop() {
            all.push(i);
        }
        all.sort();
        assert_eq!(all, (0..n as u64).collect::<Vec<_>>());
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
        assert_eq!(q.pop(), None);
        for v in 10..14 {
            assert!(q.push(v));
        }
        assert!(!q.push(99));
        for v in 10..14 {
            assert_eq!(q.pop(), Some(v));
        }
        assert_eq!(q.pop(), None);
        // wraps around
        for round in 0..10u64 {
            assert!(q.push(round));
            assert_eq!(q.pop(), Some(round));
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
                        if let Some(v) = q.pop() {
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
