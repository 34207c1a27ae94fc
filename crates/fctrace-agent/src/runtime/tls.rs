//! The agent's per-thread block: five words of initial-exec TLS.
//!
//! Rust's `thread_local!` in a cdylib goes through `__tls_get_addr`; the hot
//! path instead reads `fs:[offset]` with the offset fixed at load time (the
//! agent is preloaded, so its TLS is in the static TLS block). The variable
//! is defined in assembly because stable Rust cannot ask for the
//! initial-exec model.
//!
//! Word 0: pointer to this thread's [`crate::runtime::state::ThreadState`] (null
//! until the thread's first traced call). Word 1: "busy" — non-zero while
//! the agent's own code runs on this thread; traced functions entered then
//! pass straight through. Word 2: the task slot (plus one) of the thread
//! that created this one, until its state is made (see `interpose::process`). Word 3:
//! the return address of a `vfork` in progress, word 4: the busy word
//! before it (see `interpose::process`). Word 5: how many of the agent's
//! marked spans are open on this thread ([`mark_begin`], `record -k`).

use std::arch::asm;

core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".hidden fctrace_tls",
    ".globl fctrace_tls",
    ".type fctrace_tls, @object",
    ".size fctrace_tls, 48",
    "fctrace_tls:",
    ".zero 48",
    ".popsection",
);

/// Offset of the block from the thread pointer (`fs:0`); negative.
pub fn offset() -> i64 {
    let off: i64;
    // SAFETY: reads the GOT entry the linker made for the TLS offset; no memory is written.
    unsafe {
        asm!("mov {}, qword ptr [rip + fctrace_tls@GOTTPOFF]", out(reg) off, options(nostack, readonly, preserves_flags));
    }
    off
}

fn word_addr(i: i64) -> *mut u64 {
    let tp: u64;
    // SAFETY: fs:0 holds the thread pointer itself on x86_64 Linux (TCB self-pointer).
    unsafe {
        asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    (tp as i64 + offset() + i * 8) as *mut u64
}

/// This thread's thread pointer (its `fs` base).
pub fn thread_pointer() -> u64 {
    let tp: u64;
    // SAFETY: as in `word_addr`.
    unsafe {
        asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

pub fn state() -> *mut crate::runtime::state::ThreadState {
    // SAFETY: the word belongs to this thread's static TLS block.
    unsafe { word_addr(0).read() as *mut crate::runtime::state::ThreadState }
}

pub fn set_state(p: *mut crate::runtime::state::ThreadState) {
    // SAFETY: as above; only this thread writes its own block.
    unsafe { word_addr(0).write(p as u64) }
}

pub fn busy() -> u64 {
    // SAFETY: as above.
    unsafe { word_addr(1).read() }
}

pub fn set_busy(v: u64) {
    // SAFETY: as above.
    unsafe { word_addr(1).write(v) }
}

/// Notes the creator's task slot for this thread's state, made at its
/// first traced call.
pub fn set_pending_parent(slot: u32) {
    // SAFETY: as above.
    unsafe { word_addr(2).write(slot as u64 + 1) }
}

/// The creator's slot noted by `set_pending_parent`, if any; clears it.
pub fn take_pending_parent() -> Option<u32> {
    // SAFETY: as above.
    let v = unsafe { word_addr(2).read() };
    if v == 0 {
        return None;
    }
    // SAFETY: as above.
    unsafe { word_addr(2).write(0) };
    Some((v - 1) as u32)
}

/// Busy word value while an unwinder walks this thread's stack.
pub const BUSY_UNWINDING: u64 = 2;

/// Busy word value of a thread left untraced for good (no state could be
/// made for it): none of the agent's code runs on it, which detaching
/// (`fctrace -p`) needs to know; it may be traced at a later attach.
pub const BUSY_UNTRACED: u64 = 3;

/// Marks the agent busy on this thread for the guard's lifetime (nesting
/// keeps the outer value). With `record -k` the outermost guard also marks
/// its span for the kernel events ([`kernel_mark`]): the system calls the
/// agent makes are not the program's. [`Busy::quiet`] does not: for the
/// slow path, entered at every buffer switch and flagged call, which marks
/// only its parts that make system calls ([`Marked`]).
pub struct Busy(u64, bool);

impl Busy {
    pub fn enter() -> Busy {
        let prev = busy();
        // Busy first: with -l, libc's `syscall` (the mark) is traced.
        set_busy(1);
        let marked = prev == 0 && mark_begin();
        Busy(prev, marked)
    }

    pub fn quiet() -> Busy {
        let prev = busy();
        set_busy(1);
        Busy(prev, false)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The mark while still busy (with -l, libc's `syscall` is traced).
        if self.1 {
            mark_end();
        }
        set_busy(self.0);
    }
}

/// With `record -k`: marks its lifetime as the agent's system calls
/// (inside a [`Busy::quiet`] span).
pub struct Marked(bool);

impl Marked {
    pub fn span() -> Marked {
        Marked(mark_begin())
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        if self.0 {
            mark_end();
        }
    }
}

/// The open marked spans on this thread (word 5).
pub fn mark_depth() -> u64 {
    // SAFETY: as above.
    unsafe { word_addr(5).read() }
}

pub fn set_mark_depth(v: u64) {
    // SAFETY: as above.
    unsafe { word_addr(5).write(v) }
}

/// With `record -k`, opens a marked span (true; [`mark_end`] closes it).
/// Spans nest: only the outermost makes the marks, so that an inner span's
/// end does not end the outer one's (the recorder keeps one state per
/// thread).
pub fn mark_begin() -> bool {
    if !KERNEL_MARKS.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    let d = mark_depth();
    set_mark_depth(d + 1);
    if d == 0 {
        kernel_mark(fctrace_format::shm::KERNEL_MARK_BEGIN);
    }
    true
}

/// Closes a span [`mark_begin`] opened.
pub fn mark_end() {
    let d = mark_depth();
    if d == 0 {
        return;
    }
    set_mark_depth(d - 1);
    if d == 1 {
        kernel_mark(fctrace_format::shm::KERNEL_MARK_END);
    }
}

/// Set when the recorder records system calls (`record -k`).
pub static KERNEL_MARKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A `close` of a descriptor no process can have (EBADF, errno kept):
/// where the agent's own system calls begin or end, for `record -k`
/// (`fctrace_format::shm::KERNEL_MARK_BEGIN`).
pub fn kernel_mark(fd: u64) {
    // SAFETY: close(2) of an impossible descriptor changes nothing but
    // errno, which is put back.
    unsafe {
        let errno = *libc::__errno_location();
        libc::syscall(libc::SYS_close, fd);
        *libc::__errno_location() = errno;
    }
}
