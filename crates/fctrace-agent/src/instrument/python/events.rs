//! Writing a Python function's entry or exit into the thread's buffer,
//! for both ways of seeing them. Where a profile function sees them and
//! the interpreter's evaluation loop is traced, the event is placed in
//! the loop, before the interpreter's own way to the profile function.

use super::super::session::PY_EVAL_ID;
use super::codes::NO_ID;
use crate::interpose::unwind;
use crate::runtime::shm::{self, Shm};
use crate::runtime::state::ThreadState;
use crate::runtime::{buffer, thread, tls};
use fctrace_format::event::EventKind;
use std::sync::atomic::Ordering;

/// Records a Python function's entry or exit (`id` gives its function id,
/// asked only when it is recorded). `lift`: the event may belong before
/// the interpreter's way to the profile function ([`lifted_frames`]).
/// False when the event is not recorded (an exit whose entry was not).
#[inline]
pub(super) fn record(
    shm: &'static Shm,
    kind: EventKind,
    lift: bool,
    id: impl FnOnce() -> u32,
) -> bool {
    let mut st = tls::state();
    if st.is_null() {
        match register_thread(shm) {
            Some(s) => st = s,
            None => return false,
        }
    }
    // SAFETY: a non-null state is this thread's, used by this thread only.
    let st = unsafe { &mut *st };
    if kind == EventKind::Entry {
        st.py_depth += 1;
    } else if st.py_depth == 0 {
        // The return of a call made before the profile function was set
        // (or, in a fork child, before the fork).
        return false;
    } else {
        st.py_depth -= 1;
    }
    let id = id();
    if id == NO_ID {
        return false;
    }
    let lifted = if lift { lifted_frames(st) } else { 0 };
    if lifted == 0 || !place_before_open(st, lifted, kind, id) {
        if lifted != 0 {
            reopen_around(shm, st, lifted, kind, id);
        } else {
            buffer::append(shm, st, kind, id);
        }
    }
    true
}

/// How many of the thread's open traced calls are the interpreter's way
/// from its evaluation loop to the profile function (`call_trace` and the
/// like, above the innermost traced `_PyEval_EvalFrameDefault`): the
/// Python function's event belongs before their entries, in the loop.
/// 0 when the loop is not traced (a `libpython` without `-l`) or filters
/// are active (their hidden calls have no entry events to go by).
#[inline]
pub(super) fn lifted_frames(st: &ThreadState) -> usize {
    let eval = PY_EVAL_ID.load(Ordering::Relaxed);
    if eval == u32::MAX || crate::recording::filter::active() {
        return 0;
    }
    let mut n = 0;
    let mut e = st.shadow_top;
    while e > st.shadow_base {
        // SAFETY: entries between the base and the top are this thread's
        // open calls.
        e = unsafe { e.sub(1) };
        // SAFETY: as above.
        if unsafe { (*e).func } as u32 == eval {
            return n;
        }
        n += 1;
        if n > MAX_LIFTED {
            break;
        }
    }
    0
}

/// More open calls than this between the loop and the profile function:
/// not the interpreter's way to it (nothing is moved).
pub(super) const MAX_LIFTED: usize = 16;

/// Records scanned back from the end of the buffer for the entry of the
/// outermost lifted call.
pub(super) const MAX_SCAN: usize = 512;

/// Writes the event just before the entry event of the outermost of the
/// `lifted` open calls, in the thread's current buffer (the records after
/// it move up by one; the event takes that entry's time). False when that
/// entry is not in the current buffer or the buffer is full.
pub(super) fn place_before_open(
    st: &mut ThreadState,
    lifted: usize,
    kind: EventKind,
    id: u32,
) -> bool {
    use fctrace_format::event::RawEvent;
    use fctrace_format::shm::BUF_HEADER_SIZE;
    let Some(shm) = shm::get() else { return false };
    let buf = st.buf;
    if buf != shm.buffer(st.buf_index) {
        return false;
    }
    // SAFETY: the outermost lifted entry lies `lifted` entries below the top.
    let target = unsafe { (*st.shadow_top.sub(lifted)).func } as u32;
    let size = shm.layout.buf_size as u64;
    // SAFETY: the thread's own buffer; only this thread advances `pos`.
    let pos = unsafe { (*buf).pos.load(Ordering::Relaxed) };
    if pos + RawEvent::SIZE as u64 > size || pos < BUF_HEADER_SIZE as u64 {
        return false;
    }
    let first = BUF_HEADER_SIZE as u64;
    // SAFETY: records from the header to `pos` are this thread's, whole
    // events without payloads (no filters, so no argument records).
    let records = unsafe { (buf as *mut u8).add(first as usize) } as *mut RawEvent;
    let count = ((pos - first) / RawEvent::SIZE as u64) as usize;
    let mut depth = 0usize;
    let mut at = None;
    for i in (count.saturating_sub(MAX_SCAN)..count).rev() {
        // SAFETY: i < count: a written record.
        let r = unsafe { records.add(i).read() };
        if r.func() != target {
            continue;
        }
        match r.kind() {
            Some(EventKind::Exit | EventKind::Unwind) => depth += 1,
            Some(EventKind::Entry) if depth == 0 => {
                at = Some(i);
                break;
            }
            Some(EventKind::Entry) => depth -= 1,
            _ => {}
        }
    }
    let Some(at) = at else { return false };
    // SAFETY: room for one more record was checked; the records from `at`
    // move up by one within the buffer, and the event is written in the
    // place of the first, with its timestamp (time order stays).
    unsafe {
        (*buf)
            .pos
            .store(pos + RawEvent::SIZE as u64, Ordering::Relaxed);
        let tsc = records.add(at).read().tsc;
        std::ptr::copy(records.add(at), records.add(at + 1), count - at);
        records.add(at).write(RawEvent::new(kind, id, tsc));
    }
    true
}

/// When the outermost lifted call's entry is in a buffer already handed
/// over: the lifted calls are left (exits), the event recorded, and the
/// calls entered again, all at one time: the tree keeps its shape, and
/// those interpreter functions count one call more.
#[cold]
pub(super) fn reopen_around(
    shm: &'static Shm,
    st: &mut ThreadState,
    lifted: usize,
    kind: EventKind,
    id: u32,
) {
    // SAFETY: the `lifted` topmost shadow entries are open calls (k = 1:
    // the innermost).
    let open = |st: &ThreadState, k: usize| unsafe { (*st.shadow_top.sub(k)).func } as u32;
    for k in 1..=lifted {
        let f = open(st, k);
        buffer::append(shm, st, EventKind::Exit, f);
    }
    buffer::append(shm, st, kind, id);
    for k in (1..=lifted).rev() {
        let f = open(st, k);
        buffer::append(shm, st, EventKind::Entry, f);
    }
}

/// A thread whose first traced event is a Python one (its interpreter's
/// functions are not traced: a `libpython` without `-l`).
#[cold]
pub(super) fn register_thread(shm: &'static Shm) -> Option<*mut ThreadState> {
    let _marked = tls::Marked::span();
    let parent = tls::take_pending_parent();
    let st = thread::init_thread(
        shm,
        shm::session(),
        parent.unwrap_or(u32::MAX),
        fctrace_format::shm::ORIGIN_THREAD,
    )?;
    unwind::watch_thread_exit();
    Some(st)
}
