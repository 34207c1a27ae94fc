//! A thread's event buffers: reserving records in the current one,
//! switching to a fresh one when it is full, handing buffers to the
//! recorder (parking one a signal handler may still write into, see
//! `interpose::signal`).

use crate::runtime::shm::{self, Shm};
use crate::runtime::state::ThreadState;
use fctrace_format::argval::Writer;
use fctrace_format::event::{EventKind, RawEvent, MAX_PAYLOAD};
use std::sync::atomic::Ordering;

/// Hands the thread's buffer to the recorder now (before an exec); the
/// thread writes into the scratch buffer until `take_next_buffer`. Only while
/// the thread is busy.
pub fn flush_buffer(shm: &Shm, st: &mut ThreadState) {
    release_parked(shm, st);
    shm.release(st.buf_index);
    st.buf = shm::scratch_buffer();
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
pub fn switch_buffer(shm: &Shm, st: &mut ThreadState) {
    if st.buf == shm::pending_buffer() {
        adopted(shm, st);
        return;
    }
    if st.buf != shm.buffer(st.buf_index) {
        // The scratch buffer.
        shm.recycle_own(st.buf);
        if shm.recording() {
            take_next_buffer(shm, st);
        }
        return;
    }
    if !shm.recording() {
        release_parked(shm, st);
        shm.recycle_own(st.buf);
        return;
    }
    release_buffer(shm, st);
    if !take_next_buffer(shm, st) {
        st.buf = shm::scratch_buffer();
    }
}

/// What a thread adopted when fctrace attached does at its first event
/// (`runtime::thread::adopt_state`): set by the layers above (arming the
/// thread-exit hook, which must run on the thread itself).
static ON_ADOPTED: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

pub fn set_on_adopted(f: fn()) {
    let _ = ON_ADOPTED.set(f);
}

/// The first event of a thread adopted when fctrace attached, on the
/// thread itself: its task is registered (with its own thread id, as its
/// PID namespace numbers it), it takes its first buffer and records the
/// calls that were open when fctrace attached.
#[cold]
fn adopted(shm: &Shm, st: &mut ThreadState) {
    let _marked = crate::runtime::tls::Marked::span();
    st.buf = shm::scratch_buffer();
    if let Some(f) = ON_ADOPTED.get() {
        f();
    }
    if !shm.recording() {
        return;
    }
    // SAFETY: gettid, getpid and getppid have no preconditions.
    let (tid, pid, ppid) = unsafe {
        (
            libc::gettid() as u32,
            libc::getpid() as u32,
            libc::getppid() as u32,
        )
    };
    let slot = shm.register_task(
        tid,
        pid,
        ppid,
        st.session,
        u32::MAX,
        fctrace_format::shm::ORIGIN_ATTACH,
    );
    st.tid = tid;
    st.pid = pid;
    st.task_slot = slot;
    st.seq = 0;
    if let Some(i) = shm.acquire(tid, pid, st.session, slot, 0) {
        st.buf_index = i;
        st.buf = shm.buffer(i);
        record_attach_chain(st);
    }
}

/// Records the calls open when fctrace attached that the thread's state
/// still holds to record (one or more attach chains, outermost first),
/// and forgets them.
pub fn record_attach_chain(st: &mut ThreadState) {
    if st.adopt.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `adopt_state`, owned by the state.
    let chain = unsafe { Box::from_raw(st.adopt) };
    st.adopt = std::ptr::null_mut();
    // (The event's function: the outermost, which display filters never
    // hide, unlike the C runtime's.)
    let outermost = chain.first().copied().unwrap_or(0);
    for part in chain.chunks(fctrace_format::argval::MAX_ATTACH_CHAIN) {
        emit(st, EventKind::Args, outermost, 4 + 4 * part.len(), |w| {
            w.attach_chain(part);
        });
    }
}

/// Appends an event from Rust, switching buffers as needed.
pub fn append(shm: &Shm, st: &mut ThreadState, kind: EventKind, func: u32) {
    let rec = reserve(shm, st, 1);
    if !rec.is_null() {
        let e = fctrace_format::event::RawEvent::new(kind, func, shm::rdtsc());
        // SAFETY: a record of this thread's buffer, reserved for it. The
        // timestamp last, as the generated code writes it (a record with a
        // timestamp is whole for a reader of the live buffer).
        unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*rec).word), e.word);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*rec).tsc), e.tsc);
        }
    }
}

/// Reserves `n` contiguous records in the thread's current buffer (for an
/// event followed by its payload records), switching to a fresh buffer
/// first if they do not fit. The records are this thread's to write; null
/// if there is no buffer to write into (the event is counted as lost).
pub fn reserve(shm: &Shm, st: &mut ThreadState, n: usize) -> *mut fctrace_format::event::RawEvent {
    use fctrace_format::event::RawEvent;
    let size = shm.layout.buf_size as u64;
    let want = (n * RawEvent::SIZE) as u64;
    for _ in 0..2 {
        let buf = st.buf;
        let mut pos = want;
        // SAFETY: st.buf is this thread's current buffer; pos is only
        // advanced by this thread, so one `xadd` without `lock` reserves
        // (as the generated code does): a signal handler interrupting this
        // thread sees the position before or after, never a torn one, and
        // the bus lock a `lock` prefix takes (about 20 cycles per event)
        // guards against no one.
        unsafe {
            std::arch::asm!(
                "xadd qword ptr [{p}], {v}",
                p = in(reg) (*buf).pos.as_ptr(),
                v = inout(reg) pos,
                options(nostack),
            );
        }
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

/// In `ThreadState::park`: the next buffer switch must park the old buffer.
pub const PENDING: u64 = 1 << 63;

/// Hands the thread's current buffer to the recorder (it is full), or
/// parks it when a signal handler may have interrupted a write into it;
/// a buffer parked earlier is handed over first, so the recorder gets a
/// thread's buffers in order. Called by [`switch_buffer`].
pub fn release_buffer(shm: &Shm, st: &ThreadState) {
    let idx = st.buf_index;
    let cell = &st.park;
    let v = cell.swap(0, Ordering::AcqRel);
    let parked = (v & 0xffff_ffff) as u32;
    if parked != 0 {
        shm.release(parked - 1);
    }
    if v & PENDING != 0 {
        cell.store(idx as u64 + 1, Ordering::Release);
    } else {
        shm.release(idx);
    }
}

/// Hands over a buffer parked by [`release_buffer`], if any (before the
/// thread's current buffer is handed over outside a switch: exec).
pub fn release_parked(shm: &Shm, st: &ThreadState) {
    let parked = (st.park.swap(0, Ordering::AcqRel) & 0xffff_ffff) as u32;
    if parked != 0 {
        shm.release(parked - 1);
    }
}

/// Writes an `Args`/`Retval` record of `func` and its payload (at most
/// `bound` bytes, written by `fill`) into the thread's buffer, in one
/// reservation.
pub(crate) fn emit(
    st: &mut ThreadState,
    kind: EventKind,
    func: u32,
    bound: usize,
    fill: impl FnOnce(&mut Writer),
) {
    let Some(shm) = shm::get() else { return };
    let bound = bound.min(MAX_PAYLOAD);
    let n = bound.div_ceil(RawEvent::SIZE);
    let rec = reserve(shm, st, 1 + n);
    if rec.is_null() {
        return;
    }
    // SAFETY: `reserve` gave this thread 1 + n records at `rec`, which only
    // it writes. The header first says "never completed" (no timestamp)
    // with the whole reservation as payload, so that a process dying
    // before the end leaves records the writer skips.
    unsafe {
        rec.write(RawEvent::with_payload(
            kind,
            func,
            (n * RawEvent::SIZE) as u16,
            0,
        ));
        let body = std::slice::from_raw_parts_mut(rec.add(1).cast::<u8>(), n * RawEvent::SIZE);
        body.fill(0);
        let mut w = Writer::new(body);
        fill(&mut w);
        let len = w.len();
        // Records past the payload stay zero: skipped as never written.
        // The payload before the word and timestamp (a flight recorder's
        // snapshot reads a live buffer up to its first record without a
        // timestamp; x86 keeps stores in order, the compiler must too).
        std::sync::atomic::compiler_fence(Ordering::Release);
        let word = RawEvent::with_payload(kind, func, len as u16, 0).word;
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*rec).word), word);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*rec).tsc), shm::rdtsc().max(1));
    }
}
