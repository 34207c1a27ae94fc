//! A thread's life in the agent: making its state (`runtime::state`) at
//! its first traced call, growing and releasing its shadow stack, and a
//! fork child's state. Its buffers are `runtime::buffer`'s; the slow path
//! the generated code calls is `instrument::slow_path`.

use crate::runtime::shm::{self, Shm};
use crate::runtime::state::{
    FilterState, ShadowEntry, ThreadState, EXIT_ENTRIES, NEVER, SHADOW_ENTRY_SIZE,
};
use crate::runtime::tls;

/// The first mapping of a thread's shadow stack: 2,700 nested calls. It
/// grows on demand (`grow_shadow`), doubling up to [`SHADOW_MAX`], and is
/// unmapped when the thread ends, so that a program making many threads,
/// or limiting its address space (`RLIMIT_AS`), pays only for the depth
/// its threads reach.
const SHADOW_INITIAL: usize = 64 << 10;
/// The largest shadow stack: 2.8 million nested calls.
const SHADOW_MAX: usize = 64 << 20;

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A new shadow stack mapping of `len` bytes (None if it cannot be made).
fn map_shadow(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: anonymous private mapping, checked below.
    let shadow = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (shadow != libc::MAP_FAILED).then_some(shadow)
}

/// A thread's state around the shadow stack mapping `shadow` of `len`
/// bytes (empty), writing into `buf` (index `buf_index`).
fn new_state(
    (shadow, len): (*mut libc::c_void, usize),
    buf: *mut fctrace_format::shm::BufHeader,
    buf_index: u32,
    task_slot: u32,
    tid: u32,
    pid: u32,
    session: u32,
) -> ThreadState {
    // One spare entry below the base: an exit with an empty shadow stack
    // reads it (slot 0 never matches) instead of unmapped memory; one at
    // the end.
    // SAFETY: within the mapping.
    let base = unsafe { (shadow as *mut ShadowEntry).add(1) };
    // SAFETY: within the mapping.
    let end = unsafe { base.add(len / SHADOW_ENTRY_SIZE - 2) };
    ThreadState {
        shadow_top: base,
        shadow_end: end,
        buf,
        shadow_base: base,
        buf_index,
        seq: 0,
        task_slot,
        tid,
        pid,
        session,
        unwind_sp: 0,
        contexts: std::ptr::null_mut(),
        limit: u64::MAX,
        gen: NEVER,
        block: 0,
        hidden: 0,
        max: u32::MAX,
        filt: FilterState::default(),
        shadow_map: shadow as u64,
        shadow_len: len,
        sig_frame: 0,
        exit_stack: [ShadowEntry {
            ret: 0,
            slot: 0,
            func: 0,
        }; EXIT_ENTRIES + 1],
        park: std::sync::atomic::AtomicU64::new(0),
        next: std::ptr::null_mut(),
        free: std::sync::atomic::AtomicU32::new(0),
        adopt: std::ptr::null_mut(),
        py_depth: 0,
        py_calls: std::ptr::null_mut(),
        py_visible: 0,
        py_mark: 0,
    }
}

/// Creates the calling thread's state and installs it in TLS. `origin` is
/// one of `fctrace_format::shm::ORIGIN_*`; `parent_slot` names the task
/// that created this one (u32::MAX if unknown).
/// How many threads the program has asked `pthread_create` for (counted
/// by its interposer): an embedded Python interpreter's profile function
/// checks it to cover threads made since it last looked
/// (`instrument::python`).
pub static THREADS_CREATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn init_thread(
    shm: &Shm,
    session: u32,
    parent_slot: u32,
    origin: u32,
) -> Option<*mut ThreadState> {
    let tid = gettid();
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    let shadow = map_shadow(SHADOW_INITIAL)?;
    let slot = shm.register_task(tid, pid, ppid, session, parent_slot, origin);
    let Some(buf_index) = shm.acquire(tid, pid, session, slot, 0) else {
        // SAFETY: the mapping made above, not used by anything.
        unsafe { libc::munmap(shadow, SHADOW_INITIAL) };
        return None;
    };
    let st = new_state(
        (shadow, SHADOW_INITIAL),
        shm.buffer(buf_index),
        buf_index,
        slot,
        tid,
        pid,
        session,
    );
    let st = keep_state(st);
    tls::set_state(st);
    // (The caller arms the thread-exit hook: `interpose::unwind`'s.)
    Some(st)
}

/// Makes the state of another thread of this process, stopped while
/// `fctrace -p` attaches, with room for `calls` shadow entries: the
/// caller pushes the traced calls that were open on it (`instrument::adopt`)
/// and installs the state in the thread's TLS words. Its task is
/// registered and its buffer taken at its first event, on the thread
/// itself (`runtime::buffer`).
pub fn adopt_state(session: u32, pid: u32, calls: usize) -> Option<&'static mut ThreadState> {
    // Room for the calls, two spare entries and as many calls again as a
    // new thread gets.
    let need = (calls + 2) * SHADOW_ENTRY_SIZE + SHADOW_INITIAL;
    let len = need.next_power_of_two().max(SHADOW_INITIAL);
    if len > SHADOW_MAX {
        return None;
    }
    let shadow = map_shadow(len)?;
    let st = new_state(
        (shadow, len),
        shm::pending_buffer(),
        0,
        u32::MAX,
        0,
        pid,
        session,
    );
    // SAFETY: states are never freed; this one is not the thread's yet.
    Some(unsafe { &mut *keep_state(st) })
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
    // The process's session (the thread's may predate its move to one of
    // its own: `move_process_to_session`).
    st.session = shm::session();
    let slot = shm.register_task(
        tid,
        pid,
        ppid,
        st.session,
        parent_slot,
        fctrace_format::shm::ORIGIN_FORK,
    );
    FIRST_SLOT.store(slot, std::sync::atomic::Ordering::Relaxed);
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
        None => st.buf = shm::scratch_buffer(),
    }
    // A thread fctrace attached to that forked before its first event:
    // the child starts with the calls open when fctrace attached (the
    // parent's tree has none of them yet).
    crate::runtime::buffer::record_attach_chain(st);
}

/// The first task slot of this process when it is a fork child (its
/// threads' slots come after it); 0 otherwise.
static FIRST_SLOT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A fork child moved to session `sid` (`instrument::dlopen`): its tasks
/// (those registered since the fork) are the new session's, and so are
/// the threads it makes from now on.
pub fn move_process_to_session(shm: &Shm, sid: u32) {
    shm::set_session(sid);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    shm.retag_tasks(
        FIRST_SLOT.load(std::sync::atomic::Ordering::Relaxed),
        pid,
        sid,
    );
    let p = tls::state();
    if !p.is_null() {
        // SAFETY: the calling thread's own state.
        unsafe { (*p).session = sid };
    }
}

/// The first of every state made (linked by `next`); states are never
/// freed, only reused once free.
static STATES: std::sync::atomic::AtomicPtr<ThreadState> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// A place for a new thread's state: a free one taken back, or a new one
/// added to the list.
fn keep_state(mut st: ThreadState) -> *mut ThreadState {
    use std::sync::atomic::Ordering;
    let mut p = STATES.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: states in the list are never freed.
        let old = unsafe { &*p };
        if old
            .free
            .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            st.next = old.next;
            // (The Python calls' words of a state, allocated once, are
            // kept, emptied.)
            st.py_calls = old.py_calls;
            // SAFETY: a non-null `py_calls` is the free state's own,
            // which this thread took.
            if let Some(calls) = unsafe { st.py_calls.as_mut() } {
                calls.len = 0;
                calls.over = 0;
            }
            // SAFETY: this thread took the free state for itself (the
            // exchange above); no one else reads it but through `next`,
            // which is kept.
            unsafe { std::ptr::write(p, st) };
            return p;
        }
        p = old.next;
    }
    let p = Box::leak(Box::new(st)) as *mut ThreadState;
    let mut head = STATES.load(Ordering::Acquire);
    loop {
        // SAFETY: the new state is this thread's own until published.
        unsafe { (*p).next = head };
        match STATES.compare_exchange_weak(head, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return p,
            Err(h) => head = h,
        }
    }
}

/// Every state in use (not free).
pub fn each_state(mut f: impl FnMut(&mut ThreadState)) {
    use std::sync::atomic::Ordering;
    let mut p = STATES.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: states in the list are never freed; the caller (detach)
        // runs while every other thread is stopped.
        let st = unsafe { &mut *p };
        let next = st.next;
        if st.free.load(Ordering::Acquire) == 0 {
            f(st);
        }
        p = next;
    }
}
