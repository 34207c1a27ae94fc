//! Per-thread state and the slow paths that the generated hot path calls:
//! first traced call of a thread, full buffer, and a return that does not
//! match the top of the shadow stack (frames that vanished).

use crate::runtime::shm::{self, Shm};
use crate::runtime::tls;
use fctrace_format::event::EventKind;
use fctrace_format::shm::BufHeader;

/// One saved return: pushed at entry, popped at exit.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ShadowEntry {
    /// The caller's real return address.
    pub ret: u64,
    /// Stack address of the return-address slot (rsp at entry).
    pub slot: u64,
    /// Function id.
    pub func: u64,
}

pub const SHADOW_ENTRY_SIZE: usize = std::mem::size_of::<ShadowEntry>();

/// The first mapping of a thread's shadow stack: 2,700 nested calls. It
/// grows on demand (`grow_shadow`), doubling up to [`SHADOW_MAX`], and is
/// unmapped when the thread ends, so that a program making many threads,
/// or limiting its address space (`RLIMIT_AS`), pays only for the depth
/// its threads reach.
const SHADOW_INITIAL: usize = 64 << 10;
/// The largest shadow stack: 2.8 million nested calls.
const SHADOW_MAX: usize = 64 << 20;
/// Entries of the shadow stack a thread uses after its thread-exit hook
/// (the thread library's last calls), kept in its state.
const EXIT_ENTRIES: usize = 15;

/// Offsets used by the generated assembly: keep in sync with
/// `x86_64::codegen`.
pub const OFF_SHADOW_TOP: i32 = 0;
pub const OFF_SHADOW_END: i32 = 8;
pub const OFF_BUF: i32 = 16;

#[repr(C)]
pub struct ThreadState {
    pub shadow_top: *mut ShadowEntry,
    pub shadow_end: *mut ShadowEntry,
    pub buf: *mut BufHeader,
    pub shadow_base: *mut ShadowEntry,
    pub buf_index: u32,
    pub seq: u32,
    pub task_slot: u32,
    pub tid: u32,
    pub pid: u32,
    pub session: u32,
    /// While an unwinder runs (the thread's busy word is `BUSY_UNWINDING`):
    /// a stack address inside the agent's unwinder entry point. Calls whose
    /// slot lies above it come from frames the unwinder handed control
    /// back to (see `unwind`).
    pub unwind_sp: u64,
    /// The thread's chain of ucontext switches (`context`), allocated at
    /// its first `swapcontext`; null before.
    pub contexts: *mut crate::interpose::context::Chain,
    /// With filters (`crate::recording::filter`): calls that are not flagged are
    /// recorded only while `shadow_top` is below this (0: none are).
    pub limit: u64,
    /// With filters: the global switch word this thread last applied.
    pub gen: u32,
    /// With filters: non-zero while nothing may be recorded: open `-N`
    /// regions (bits 0..24) and `crate::recording::filter::B_*` bits.
    pub block: u32,
    /// With filters: shadow entries of calls that were not recorded
    /// (region owners).
    pub hidden: u64,
    /// With filters: the depth limit in recorded levels (`u32::MAX`: none).
    pub max: u32,
    /// With filters: the thread's filter state.
    pub filt: crate::recording::filter::FilterState,
    /// The shadow stack's mapping and its length (0: the thread ended and
    /// uses `exit_stack`).
    pub shadow_map: u64,
    pub shadow_len: usize,
    /// The signal frame (its ucontext's address) of the last signal that
    /// interrupted this thread in generated code, while its handler may
    /// still run (0: none). Interrupted generated code may hold shadow
    /// stack addresses in registers: the shadow stack does not move then.
    pub sig_frame: u64,
    /// The shadow stack after the thread-exit hook; entry 0 is the spare
    /// entry below the base.
    pub exit_stack: [ShadowEntry; EXIT_ENTRIES + 1],
    /// The buffer a signal handler made this thread leave while an
    /// interrupted write into it was pending (`signal::release_buffer`):
    /// bit 63 = the next buffer switch must park the old buffer; low 32
    /// bits = index + 1 of the parked buffer (0: none).
    pub park: std::sync::atomic::AtomicU64,
}

pub const OFF_LIMIT: i32 = std::mem::offset_of!(ThreadState, limit) as i32;
pub const OFF_GEN: i32 = std::mem::offset_of!(ThreadState, gen) as i32;
pub const OFF_BLOCK: i32 = std::mem::offset_of!(ThreadState, block) as i32;
pub const OFF_HIDDEN: i32 = std::mem::offset_of!(ThreadState, hidden) as i32;
pub const OFF_MAX: i32 = std::mem::offset_of!(ThreadState, max) as i32;
/// The count of open `-F` regions (`crate::recording::filter::FilterState`), which
/// the generated `-F` entry and exit update.
pub const OFF_FL: i32 =
    (std::mem::offset_of!(ThreadState, filt) + crate::recording::filter::FL_OFFSET) as i32;

pub const SLOW_INIT: u64 = 1;
pub const SLOW_FULL: u64 = 2;
pub const SLOW_MISMATCH: u64 = 3;
pub const SLOW_UNWINDING: u64 = 4;
/// With filters: the global switch word changed; apply it.
pub const SLOW_RESYNC: u64 = 5;
/// With filters: the entry of a flagged function.
pub const SLOW_FLAGGED_ENTRY: u64 = 6;
/// With filters: the exit of a frame whose shadow entry asks for one.
pub const SLOW_FLAGGED_EXIT: u64 = 7;
/// The shadow stack is full: grow it (non-zero if it grew).
pub const SLOW_GROW: u64 = 8;

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Creates the calling thread's state and installs it in TLS. `origin` is
/// one of `fctrace_format::shm::ORIGIN_*`; `parent_slot` names the task
/// that created this one (u32::MAX if unknown).
pub fn init_thread(
    shm: &Shm,
    session: u32,
    parent_slot: u32,
    origin: u32,
) -> Option<*mut ThreadState> {
    let tid = gettid();
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    // SAFETY: anonymous private mapping, checked below.
    let shadow = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SHADOW_INITIAL,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if shadow == libc::MAP_FAILED {
        return None;
    }
    let slot = shm.register_task(tid, pid, ppid, session, parent_slot, origin);
    let Some(buf_index) = shm.acquire(tid, pid, session, slot, 0) else {
        // SAFETY: the mapping made above, not used by anything.
        unsafe { libc::munmap(shadow, SHADOW_INITIAL) };
        return None;
    };
    // One spare entry below the base: an exit with an empty shadow stack
    // reads it (slot 0 never matches) instead of unmapped memory.
    // SAFETY: within the mapping.
    let base = unsafe { (shadow as *mut ShadowEntry).add(1) };
    // SAFETY: within the mapping.
    let end = unsafe { base.add(SHADOW_INITIAL / SHADOW_ENTRY_SIZE - 2) };
    let st = Box::leak(Box::new(ThreadState {
        shadow_top: base,
        shadow_end: end,
        buf: shm.buffer(buf_index),
        shadow_base: base,
        buf_index,
        seq: 0,
        task_slot: slot,
        tid,
        pid,
        session,
        unwind_sp: 0,
        contexts: std::ptr::null_mut(),
        limit: u64::MAX,
        gen: crate::recording::filter::NEVER,
        block: 0,
        hidden: 0,
        max: u32::MAX,
        filt: crate::recording::filter::FilterState::default(),
        shadow_map: shadow as u64,
        shadow_len: SHADOW_INITIAL,
        sig_frame: 0,
        exit_stack: [ShadowEntry {
            ret: 0,
            slot: 0,
            func: 0,
        }; EXIT_ENTRIES + 1],
        park: std::sync::atomic::AtomicU64::new(0),
    }));
    tls::set_state(st);
    crate::interpose::unwind::watch_thread_exit();
    Some(st)
}

/// Whether the shadow stack may move now: no handler of a signal that
/// interrupted generated code on this thread is still running. Such a
/// handler's frames lie below its signal frame, on whatever stack it runs:
/// once the stack pointer is above that frame, the handler has returned.
fn may_move(st: &mut ThreadState) -> bool {
    if st.sig_frame == 0 {
        return true;
    }
    let here = std::ptr::addr_of!(*st) as u64;
    let sp = &here as *const u64 as u64;
    if sp > st.sig_frame {
        st.sig_frame = 0;
        return true;
    }
    false
}

/// Moves every pointer into the shadow stack by `delta` bytes (it was
/// remapped elsewhere).
fn rebase(st: &mut ThreadState, from: u64, len: usize, to: u64) {
    let moved = |p: u64| -> u64 {
        if p >= from && p <= from + len as u64 {
            p - from + to
        } else {
            p
        }
    };
    st.shadow_top = moved(st.shadow_top as u64) as *mut ShadowEntry;
    st.shadow_base = moved(st.shadow_base as u64) as *mut ShadowEntry;
    st.shadow_end = moved(st.shadow_end as u64) as *mut ShadowEntry;
    // The filters' limit is linear in the top (or 0 / u64::MAX).
    if st.limit != 0 && st.limit != u64::MAX {
        st.limit = st.limit.wrapping_sub(from).wrapping_add(to);
    }
}

/// The shadow stack is full: doubles it (in place when the address space
/// after it is free, else elsewhere when nothing holds its addresses),
/// up to [`SHADOW_MAX`]. False if it cannot grow: the call is then not
/// traced, and counted as lost.
pub fn grow_shadow(st: &mut ThreadState) -> bool {
    let (old, len) = (st.shadow_map, st.shadow_len);
    if len == 0 || len >= SHADOW_MAX {
        return false;
    }
    let new_len = (len * 2).min(SHADOW_MAX);
    // SAFETY: remapping the thread's own shadow stack mapping; in place
    // first (no pointer changes), checked for failure.
    let mut at = unsafe { libc::mremap(old as *mut libc::c_void, len, new_len, 0) };
    if at == libc::MAP_FAILED {
        if !may_move(st) {
            return false;
        }
        // SAFETY: as above; every pointer into it is rebased below before
        // anything reads it (signals are deferred in the slow path).
        at = unsafe { libc::mremap(old as *mut libc::c_void, len, new_len, libc::MREMAP_MAYMOVE) };
        if at == libc::MAP_FAILED {
            return false;
        }
        rebase(st, old, len, at as u64);
    }
    st.shadow_map = at as u64;
    st.shadow_len = new_len;
    // SAFETY: within the new mapping (one spare entry at each end).
    st.shadow_end = unsafe { (at as *mut ShadowEntry).add(new_len / SHADOW_ENTRY_SIZE - 1) };
    true
}

/// The thread's exit hook ran: its shadow stack is unmapped, and the few
/// calls the thread library still makes use a small one in the state.
/// Kept if its live entries do not fit there, or if a signal handler
/// interrupted generated code and may still run.
pub fn release_shadow(st: &mut ThreadState) {
    if st.shadow_len == 0 || !may_move(st) {
        return;
    }
    // SAFETY: base <= top within the mapping.
    let n = unsafe { st.shadow_top.offset_from(st.shadow_base) } as usize;
    if n > EXIT_ENTRIES {
        return;
    }
    let (old, len) = (st.shadow_map, st.shadow_len);
    let dst = st.exit_stack.as_mut_ptr();
    // SAFETY: n live entries copied into the exit stack after its spare
    // entry; the pointers are rebased before the mapping goes.
    unsafe {
        std::ptr::copy_nonoverlapping(st.shadow_base, dst.add(1), n);
        *dst = ShadowEntry {
            ret: 0,
            slot: 0,
            func: 0,
        };
        let from = st.shadow_base as u64;
        rebase(st, from, len - (from - old) as usize, dst.add(1) as u64);
        st.shadow_end = dst.add(EXIT_ENTRIES);
        libc::munmap(old as *mut libc::c_void, len);
    }
    st.shadow_map = 0;
    st.shadow_len = 0;
}

/// In the child of `fork`: the calling thread's state is a private copy of
/// the parent's (the shadow stack too, which is right: the child returns
/// through the same frames), but its buffer is the parent's. Register the
/// child as a task of its own with a buffer of its own.
pub fn after_fork_child(shm: &Shm) {
    let p = tls::state();
    if p.is_null() {
        return;
    }
    // SAFETY: the state belongs to this (only) thread of the child.
    let st = unsafe { &mut *p };
    let parent_slot = st.task_slot;
    let tid = gettid();
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    let slot = shm.register_task(
        tid,
        pid,
        ppid,
        st.session,
        parent_slot,
        fctrace_format::shm::ORIGIN_FORK,
    );
    st.tid = tid;
    st.pid = pid;
    st.task_slot = slot;
    st.seq = 0;
    // A buffer the parent parked stays the parent's to hand over.
    st.park.store(0, std::sync::atomic::Ordering::Relaxed);
    match shm.acquire(tid, pid, st.session, slot, 0) {
        Some(i) => {
            st.buf_index = i;
            st.buf = shm.buffer(i);
        }
        None => st.buf = crate::scratch_buffer(),
    }
}

/// Hands the thread's buffer to the recorder now (before an exec); the
/// thread writes into the scratch buffer until `take_next_buffer`. Only while
/// the thread is busy.
pub fn flush_buffer(shm: &Shm, st: &mut ThreadState) {
    crate::interpose::signal::release_parked(shm, st);
    shm.release(st.buf_index);
    st.buf = crate::scratch_buffer();
}

/// Gives the thread its next buffer (after its last one was handed over);
/// false if the recorder is gone (the thread's buffer is then unchanged).
pub fn take_next_buffer(shm: &Shm, st: &mut ThreadState) -> bool {
    st.seq += 1;
    match shm.acquire(st.tid, st.pid, st.session, st.task_slot, st.seq) {
        Some(i) => {
            st.buf_index = i;
            st.buf = shm.buffer(i);
            true
        }
        None => false,
    }
}

/// Replaces the thread's full buffer with a fresh one; afterwards the
/// thread's buffer always has room.
///
/// Once the recorder does not record any more (it stopped, or died), the
/// thread keeps the buffer it has and writes it again from the start: what
/// it held is counted as lost, exactly, and the program runs on without
/// waiting for anyone. A thread without a buffer of its own (its last one
/// was handed over just before the recorder went away) writes into the
/// process's scratch buffer, counted the same way.
fn switch_buffer(shm: &Shm, st: &mut ThreadState) {
    if st.buf != shm.buffer(st.buf_index) {
        // The scratch buffer.
        shm.recycle_own(st.buf);
        if shm.recording() {
            take_next_buffer(shm, st);
        }
        return;
    }
    if !shm.recording() {
        crate::interpose::signal::release_parked(shm, st);
        shm.recycle_own(st.buf);
        return;
    }
    crate::interpose::signal::release_buffer(shm, st);
    if !take_next_buffer(shm, st) {
        st.buf = crate::scratch_buffer();
    }
}

/// Appends an event from Rust, switching buffers as needed.
pub fn append(shm: &Shm, st: &mut ThreadState, kind: EventKind, func: u32) {
    let rec = reserve(shm, st, 1);
    if !rec.is_null() {
        // SAFETY: a record of this thread's buffer, reserved for it.
        unsafe {
            rec.write(fctrace_format::event::RawEvent::new(
                kind,
                func,
                shm::rdtsc(),
            ))
        };
    }
}

/// Called by the generated code with every register saved: `xsave` is
/// the saved extended state, `gprs` the saved general registers (rbx,
/// r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax in that order).
///
/// # Safety
/// Only the generated hot path calls this, on the thread whose state it is.
pub unsafe extern "C" fn slow_path(
    reason: u64,
    arg: u64,
    func: u64,
    xsave: *const u8,
    gprs: *const u64,
) -> u64 {
    if reason == SLOW_UNWINDING {
        return crate::interpose::unwind::call_while_unwinding(arg, func as u32);
    }
    let _defer = crate::interpose::signal::DeferSignals::new();
    let was_busy = tls::busy();
    let _busy = tls::Busy::enter();
    let Some(shm) = shm::get() else { return 0 };
    match reason {
        SLOW_INIT => {
            let parent = tls::take_pending_parent();
            let made = init_thread(
                shm,
                crate::session(),
                parent.unwrap_or(u32::MAX),
                fctrace_format::shm::ORIGIN_THREAD,
            );
            if made.is_none() {
                // Leave the thread untraced for good rather than retry on
                // every call; the recorder says how many were.
                std::mem::forget(_busy);
                tls::set_busy(1);
                shm.note_untraced_thread();
            }
            0
        }
        SLOW_FULL => {
            // SAFETY: state is set for a thread that reached SLOW_FULL.
            let st = unsafe { &mut *tls::state() };
            switch_buffer(shm, st);
            if was_busy == 0 && shm.recorder_dead() {
                // Nobody will read anything any more: the thread's calls
                // pass through untraced from now on, at nearly their
                // native cost (as for a thread that could not be set up);
                // frames entered before still return through the agent.
                std::mem::forget(_busy);
            }
            0
        }
        SLOW_MISMATCH => {
            // SAFETY: as above.
            let st = unsafe { &mut *tls::state() };
            unwind_to(shm, st, arg);
            0
        }
        SLOW_GROW => {
            // SAFETY: as above.
            u64::from(grow_shadow(unsafe { &mut *tls::state() }))
        }
        SLOW_RESYNC => {
            // SAFETY: as above.
            let st = unsafe { &mut *tls::state() };
            crate::recording::filter::resync(st);
            0
        }
        SLOW_FLAGGED_ENTRY => {
            // SAFETY: as above; the generated code passes its saved registers.
            unsafe {
                crate::recording::filter::flagged_entry(
                    shm,
                    &mut *tls::state(),
                    func as u32,
                    arg,
                    xsave,
                    gprs,
                )
            }
        }
        SLOW_FLAGGED_EXIT => {
            // SAFETY: as above.
            unsafe { crate::recording::filter::flagged_exit(shm, &mut *tls::state(), arg, xsave) };
            0
        }
        _ => 0,
    }
}

/// Pops the shadow entries above the one whose slot is `slot`: their frames
/// vanished without returning (longjmp, exceptions, ...). Each gets an
/// `Unwind` event.
fn unwind_to(shm: &Shm, st: &mut ThreadState, slot: u64) {
    // SAFETY: entries between base and top were written by this thread.
    unsafe {
        let mut p = st.shadow_top;
        while p > st.shadow_base {
            let e = p.sub(1);
            if (*e).slot == slot {
                break;
            }
            p = e;
        }
        if p == st.shadow_base {
            crate::fatal("a traced function returned through a stack slot the agent does not know");
        }
        while st.shadow_top > p {
            let e = st.shadow_top.sub(1);
            let func = (*e).func;
            st.shadow_top = e;
            crate::recording::filter::unwound(shm, st, func);
        }
    }
}

/// Reserves `n` contiguous records in the thread's current buffer (for an
/// event followed by its payload records), switching to a fresh buffer
/// first if they do not fit. The records are this thread's to write; null
/// if there is no buffer to write into (the event is counted as lost).
pub fn reserve(shm: &Shm, st: &mut ThreadState, n: usize) -> *mut fctrace_format::event::RawEvent {
    use fctrace_format::event::RawEvent;
    use std::sync::atomic::Ordering;
    let size = shm.layout.buf_size as u64;
    let want = (n * RawEvent::SIZE) as u64;
    for _ in 0..2 {
        let buf = st.buf;
        // SAFETY: st.buf is this thread's current buffer; pos is only
        // advanced by this thread.
        let pos = unsafe { (*buf).pos.fetch_add(want, Ordering::Relaxed) };
        if pos + want <= size {
            // SAFETY: within the buffer.
            return unsafe { (buf as *mut u8).add(pos as usize) as *mut RawEvent };
        }
        if pos < size {
            // The records that did fit count as written: zero timestamps
            // make the writer skip them.
            // SAFETY: within the buffer, reserved by this thread.
            unsafe {
                std::ptr::write_bytes((buf as *mut u8).add(pos as usize), 0, (size - pos) as usize)
            };
        }
        switch_buffer(shm, st);
    }
    shm.add_lost(1);
    std::ptr::null_mut()
}
