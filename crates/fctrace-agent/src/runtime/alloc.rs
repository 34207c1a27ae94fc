//! The agent's own memory allocator.
//!
//! The agent's Rust code must never call the program's `malloc`: a program
//! may define its own allocator, which is not ready when the agent's
//! constructor runs (it may be set up by the program's own initialisers),
//! may be one the agent is patching, or may be built in a way only the
//! program's own calls survive (a `calloc` that GCC turned into a call of
//! itself at -O2, never called by the program, loops forever when the
//! agent calls it). So the agent takes its memory from the kernel.
//!
//! Small blocks (up to [`MAX_CLASS`] bytes) come in power-of-two size
//! classes carved from mapped chunks, with a free list per class; larger
//! ones are mappings of their own (grown with `mremap`). One spin lock
//! guards the classes. It is never waited for where waiting could block
//! forever: a signal handler interrupting the allocator on the same thread,
//! or a child forked while another thread held it, gets a fresh mapping
//! instead (and a block freed then is left unused), so the allocator can
//! neither deadlock nor call anything but `mmap`, `munmap`, `mremap` and
//! `sched_yield`. A fork child whose lock was held by another thread
//! starts with empty classes (what they held is leaked).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

const PAGE: usize = 4096;
const MIN_CLASS: usize = 16;
/// The largest size class; larger blocks are mappings of their own.
const MAX_CLASS: usize = 64 * 1024;
const CLASSES: usize = (MAX_CLASS.trailing_zeros() - MIN_CLASS.trailing_zeros() + 1) as usize;
/// Bytes mapped at once for the blocks of one class.
const CHUNK: usize = 256 * 1024;
/// Spins (each yielding the CPU) before giving up on the lock.
const MAX_SPINS: u32 = 100_000;

struct Class {
    /// Head of the free list (each free block's first word links the next).
    free: usize,
    /// Carving cursor and end in the current chunk.
    next: usize,
    end: usize,
}

struct Classes([Class; CLASSES]);

pub struct AgentAlloc {
    /// The thread pointer of the thread holding the lock; 0 when free.
    owner: AtomicUsize,
    classes: std::cell::UnsafeCell<Classes>,
}

// SAFETY: `classes` is only touched by the thread that holds `owner`.
unsafe impl Sync for AgentAlloc {}

#[global_allocator]
pub static ALLOC: AgentAlloc = AgentAlloc {
    owner: AtomicUsize::new(0),
    classes: std::cell::UnsafeCell::new(Classes(
        [const {
            Class {
                free: 0,
                next: 0,
                end: 0,
            }
        }; CLASSES],
    )),
};

/// The calling thread's thread pointer: its identity, read without a call.
fn thread_id() -> usize {
    let tp: usize;
    // SAFETY: fs:0 holds the thread pointer itself on x86_64 Linux.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

/// The agent's own memory calls are never the program's (with -l, libc's
/// `mmap` and `munmap` are traced): busy meanwhile, and marked for
/// `record -k` (the mark's end dropped before the busy word: with -l,
/// libc's `syscall` is traced).
fn quiet() -> (crate::runtime::tls::Marked, crate::runtime::tls::Busy) {
    let busy = crate::runtime::tls::Busy::quiet();
    (crate::runtime::tls::Marked::span(), busy)
}

/// A fresh private anonymous mapping of `len` bytes (read-write), or null.
pub(crate) fn map(len: usize) -> *mut u8 {
    let _q = quiet();
    // SAFETY: a fresh anonymous private mapping; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// The size class index of a layout, or None for a large block.
fn class_of(layout: &Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(MIN_CLASS);
    // (blocks of the classes above a page are only page-aligned)
    if size > MAX_CLASS || layout.align() > PAGE {
        return None;
    }
    let c = size.next_power_of_two();
    Some((c.trailing_zeros() - MIN_CLASS.trailing_zeros()) as usize)
}

fn class_size(i: usize) -> usize {
    MIN_CLASS << i
}

/// The length of the mapping of a large block.
fn large_len(layout: &Layout) -> usize {
    layout.size().max(1).next_multiple_of(PAGE)
}

struct Guard<'a>(&'a AgentAlloc);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.owner.store(0, Ordering::Release);
    }
}

impl AgentAlloc {
    /// Takes the lock, unless this thread holds it already (a signal
    /// handler interrupted the allocator) or it stays taken too long.
    fn lock(&self) -> Option<Guard<'_>> {
        let me = thread_id();
        let mut spins = 0;
        loop {
            match self
                .owner
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(Guard(self)),
                Err(o) if o == me => return None,
                Err(_) => {}
            }
            spins += 1;
            if spins > MAX_SPINS {
                return None;
            }
            if spins % 64 == 0 {
                let _q = quiet();
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// In the child of `fork`: the thread that held the lock does not
    /// exist there. Only the forking thread runs.
    /// If another thread held the lock, its critical section may be half
    /// done (a chunk's end stored, not yet its cursor): the child forgets
    /// every class's blocks (leaking them) rather than trust them.
    pub fn after_fork_child(&self) {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != 0 && owner != thread_id() {
            // SAFETY: only the forking thread exists in the child, and it
            // does not hold the lock: nobody else touches the classes.
            let classes = unsafe { &mut (*self.classes.get()).0 };
            for c in classes.iter_mut() {
                *c = Class {
                    free: 0,
                    next: 0,
                    end: 0,
                };
            }
            self.owner.store(0, Ordering::Release);
        }
    }

    /// A block of class `i`; null if the memory is exhausted.
    fn alloc_class(&self, i: usize) -> *mut u8 {
        let size = class_size(i);
        let Some(_g) = self.lock() else {
            // A mapping of its own, which may join the class's free list
            // when it is freed.
            return map(size.next_multiple_of(PAGE));
        };
        // SAFETY: the lock is ours: the classes are this thread's alone.
        let c = unsafe { &mut (*self.classes.get()).0[i] };
        if c.free != 0 {
            let b = c.free;
            // SAFETY: a free block's first word links the next one.
            c.free = unsafe { *(b as *const usize) };
            return b as *mut u8;
        }
        if c.next + size > c.end || c.next == 0 {
            let len = CHUNK.max(size);
            let p = map(len);
            if p.is_null() {
                return p;
            }
            c.end = p as usize + len;
            c.next = p as usize;
        }
        let b = c.next;
        c.next += size;
        b as *mut u8
    }

    fn free_class(&self, p: *mut u8, i: usize) {
        let Some(_g) = self.lock() else {
            // Left unused: a signal handler freed while this thread was in
            // the allocator, or the lock is stuck.
            return;
        };
        // SAFETY: the lock is ours; the block is at least a word long and
        // no longer in use.
        unsafe {
            let c = &mut (*self.classes.get()).0[i];
            *(p as *mut usize) = c.free;
            c.free = p as usize;
        }
    }
}

// SAFETY: blocks are distinct memory of at least the layout's size,
// aligned to at least its alignment (class blocks are aligned to their
// power-of-two size up to a page, large blocks to a page; larger
// alignments are served by trimming a bigger mapping).
unsafe impl GlobalAlloc for AgentAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(&layout) {
            Some(i) => self.alloc_class(i),
            None if layout.align() <= PAGE => map(large_len(&layout)),
            None => {
                // Over-map and trim to the alignment.
                let len = large_len(&layout);
                let p = map(len + layout.align());
                if p.is_null() {
                    return p;
                }
                let start = (p as usize).next_multiple_of(layout.align());
                let _q = quiet();
                // SAFETY: unmapping the unused head and tail of our mapping.
                unsafe {
                    if start > p as usize {
                        libc::munmap(p.cast(), start - p as usize);
                    }
                    let tail = p as usize + len + layout.align() - (start + len);
                    if tail > 0 {
                        libc::munmap((start + len) as *mut libc::c_void, tail);
                    }
                }
                start as *mut u8
            }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match class_of(&layout) {
            Some(i) => self.free_class(p, i),
            None => {
                let _q = quiet();
                // SAFETY: a large block is a mapping of exactly this length.
                unsafe { libc::munmap(p.cast(), large_len(&layout)) };
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: p was allocated with layout, and
        // new_size with layout's alignment is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(&layout), class_of(&new)) {
            (Some(a), Some(b)) if a == b => p,
            (None, None) if layout.align() <= PAGE => {
                let (old_len, new_len) = (large_len(&layout), large_len(&new));
                if old_len == new_len {
                    return p;
                }
                let _q = quiet();
                // SAFETY: p is a mapping of old_len bytes; the kernel moves it
                // if it cannot grow in place.
                let q = unsafe { libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
                if q == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    q.cast()
                }
            }
            _ => {
                // SAFETY: as GlobalAlloc's default: a new block, the common
                // bytes copied, the old block freed.
                unsafe {
                    let q = self.alloc(new);
                    if !q.is_null() {
                        std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                        self.dealloc(p, layout);
                    }
                    q
                }
            }
        }
    }
}
