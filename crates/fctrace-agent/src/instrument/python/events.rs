//! Writing a Python function's entry or exit into the thread's buffer,
//! for both ways of seeing them. Where a profile function sees them and
//! the interpreter's evaluation loop is traced, the event is placed in
//! the loop, before the interpreter's own way to the profile function.

use super::super::session::PY_EVAL_ID;
use super::codes::{Obj, NO_ID};
use super::values;
use crate::interpose::unwind;
use crate::recording::args;
use crate::recording::filter;
use crate::runtime::shm::{self, Shm};
use crate::runtime::state::{ShadowEntry, ThreadState, E_HIDDEN};
use crate::runtime::{buffer, thread, tls};
use fctrace_format::event::EventKind;
use std::sync::atomic::Ordering;

/// Records a Python function's entry or exit (`id` gives its function id
/// and filter flags, asked only when it is recorded). `lift`: the event
/// may belong before the interpreter's way to the profile function
/// ([`lifted_frames`]). With record-time filters, the filters decide
/// (`recording::filter::python_entry`), and `values` gives what `-A` and
/// `-R` read: the interpreter frame of the call (an entry) or the value
/// returned (an exit). Returns whether the call is open for fctrace (its
/// exit is to be passed here): false for an exit whose entry was not.
#[inline]
pub(super) fn record(
    shm: &'static Shm,
    kind: EventKind,
    lift: bool,
    id: impl FnOnce() -> (u32, u64),
    values: impl FnOnce() -> Obj,
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
    let (id, flags) = id();
    if id == NO_ID {
        return false;
    }
    if filter::active() {
        // Where the event went when it was placed among earlier records:
        // its `-A` values follow it there, its `-R` value precedes it.
        let placed = std::cell::Cell::new(None);
        let values_at = std::cell::Cell::new(None);
        if kind == EventKind::Entry {
            let write = |st: &mut ThreadState, kind, id| placed.set(place(shm, st, kind, id, lift));
            filter::python_entry(st, id, flags, write, |st| {
                let iframe = values();
                let from = end_of_buffer(st);
                args::on_python_entry(st, id, |n, w, max| {
                    // SAFETY: in the profile function or the frame
                    // evaluation function, the GIL held, `iframe` the
                    // frame about to run.
                    unsafe { values::put_arg(iframe, n, w, max) }
                });
                if let Some(at) = placed.get() {
                    move_block(st, from, end_of_buffer(st), at + 16);
                    // (The records after the old mark moved.)
                    mark(st);
                }
            });
        } else {
            let unwound = kind == EventKind::Unwind;
            let write = |st: &mut ThreadState, kind, id| {
                let at = place(shm, st, kind, id, lift);
                if let (Some(at), Some(((i, b0), (j, b1)))) = (at, values_at.get()) {
                    // (The values moved up with the records after `at`.)
                    move_block(st, (i, b0 + 16), (j, b1 + 16), at);
                }
            };
            filter::python_exit(st, unwound, write, |st, func| {
                let result = values();
                let from = end_of_buffer(st);
                args::on_python_exit(st, func, |w, max| {
                    // SAFETY: as above, `result` the value returned (the
                    // caller holds it).
                    unsafe { values::put_object(result, w, max) }
                });
                values_at.set(Some((from, end_of_buffer(st))));
            });
        }
        return true;
    }
    place(shm, st, kind, id, lift);
    true
}

/// The thread's current buffer and the offset of its end.
fn end_of_buffer(st: &ThreadState) -> (u32, u64) {
    // SAFETY: the thread's own current buffer.
    (st.buf_index, unsafe {
        (*st.buf).pos.load(Ordering::Relaxed)
    })
}

/// Moves the records from `from` to `to` (a record and its payload, in
/// the current buffer) down to offset `at`, the records between moving up
/// after them; the moved record takes the time of the record at `at` (time
/// order stays). Nothing when the buffer changed in between.
fn move_block(st: &mut ThreadState, from: (u32, u64), to: (u32, u64), at: u64) {
    use fctrace_format::event::RawEvent;
    let ((i, b0), (j, b1)) = (from, to);
    if i != st.buf_index || j != st.buf_index || !(at <= b0 && b0 < b1) {
        return;
    }
    // SAFETY: [at, b1) lies in the thread's current buffer, below its end
    // (records this thread wrote).
    unsafe {
        let base = st.buf as *mut u8;
        if b1 > (*st.buf).pos.load(Ordering::Relaxed) {
            return;
        }
        let tsc = base.add(at as usize).cast::<RawEvent>().read().tsc;
        std::slice::from_raw_parts_mut(base.add(at as usize), (b1 - at) as usize)
            .rotate_right((b1 - b0) as usize);
        let head = base.add(at as usize).cast::<RawEvent>();
        let mut r = head.read();
        r.tsc = tsc;
        head.write(r);
    }
}

/// Writes the event where it belongs: with `lift`, before the
/// interpreter's way to the profile function ([`lifted_frames`]), else
/// at the end of the thread's buffer. With filters, the offset it was
/// placed at among earlier records, if it was.
fn place(
    shm: &'static Shm,
    st: &mut ThreadState,
    kind: EventKind,
    id: u32,
    lift: bool,
) -> Option<u64> {
    if lift && filter::active() {
        let at = place_filtered(shm, st, kind, id);
        mark(st);
        return at;
    }
    let lifted = if lift { lifted_frames(st) } else { 0 };
    if lifted == 0 || !place_before_open(st, lifted, kind, id) {
        if lifted != 0 {
            reopen_around(shm, st, lifted, kind, id);
        } else {
            buffer::append(shm, st, kind, id);
        }
    }
    if lift {
        mark(st);
    }
    None
}

/// Notes where the thread's buffer ends now: after a Python event.
fn mark(st: &mut ThreadState) {
    // SAFETY: the thread's own current buffer.
    let pos = unsafe { (*st.buf).pos.load(Ordering::Relaxed) };
    st.py_mark = (u64::from(st.buf_index) + 1) << 32 | pos;
}

/// How many of the thread's open traced calls are the interpreter's way
/// from its evaluation loop to the profile function (`call_trace` and the
/// like, above the innermost traced `_PyEval_EvalFrameDefault`): the
/// Python function's event belongs before their entries, in the loop.
/// 0 when the loop is not traced (a `libpython` without `-l`) or, with
/// filters, a call between is not recorded (a region owner with no entry
/// record to go by).
#[inline]
pub(super) fn lifted_frames(st: &ThreadState) -> usize {
    above_loop(st).unwrap_or(0)
}

/// The open calls above the innermost recorded evaluation loop, all
/// recorded ([`lifted_frames`]); `None` when there is no such loop (or a
/// call between is hidden).
fn above_loop(st: &ThreadState) -> Option<usize> {
    let eval = PY_EVAL_ID.load(Ordering::Relaxed);
    if eval == u32::MAX {
        return None;
    }
    let mut n = 0;
    let mut e = st.shadow_top;
    while e > st.shadow_base {
        // SAFETY: entries between the base and the top are this thread's
        // open calls.
        e = unsafe { e.sub(1) };
        // SAFETY: as above.
        let word = unsafe { (*e).func };
        if word as u32 == eval {
            return Some(n);
        }
        if word & E_HIDDEN != 0 {
            return None;
        }
        n += 1;
        if n > MAX_LIFTED {
            break;
        }
    }
    None
}

/// With filters (a profile function: the interpreter's way to it is
/// traced): the event placed before the entries of the calls on that way,
/// found from the records (which may carry payloads: `-A`, `-R`): those
/// entered since the thread's last Python event and still open (the
/// evaluation loop's own calls between two Python events have returned),
/// or, without a mark in this buffer, those above the innermost recorded
/// evaluation loop ([`lifted_frames`]). This works whether the loop itself
/// is recorded or not (entered outside the filters' region: a function
/// called inline by the one whose call opened the region). Their entries
/// in a buffer already handed over: left and entered again around it
/// ([`reopen_around`]). The offset it was placed at, if among earlier
/// records.
fn place_filtered(
    shm: &'static Shm,
    st: &mut ThreadState,
    kind: EventKind,
    id: u32,
) -> Option<u64> {
    use fctrace_format::shm::BUF_HEADER_SIZE;
    let mark = st.py_mark;
    let marked = mark >> 32 == u64::from(st.buf_index) + 1;
    let from = if marked {
        mark & 0xffff_ffff
    } else {
        BUF_HEADER_SIZE as u64
    };
    let mut open = [(0u32, 0u64); MAX_OPEN];
    let n = open_since(st, from, &mut open);
    // Above the innermost recorded loop (a Python function called back
    // from C, `__build_class__` running a class body, has C calls entered
    // since the last Python event below its loop), and entered since
    // that event (the loop may be an outer one, this one unrecorded).
    let k = match (above_loop(st), n.filter(|_| marked)) {
        (Some(e), Some(n)) => e.min(n),
        (Some(e), None) => e,
        (None, Some(n)) => n,
        (None, None) => 0,
    };
    if k == 0 {
        buffer::append(shm, st, kind, id);
        return None;
    }
    // The k calls must be the top of the shadow stack, all recorded.
    let depth =
        (st.shadow_top as usize - st.shadow_base as usize) / std::mem::size_of::<ShadowEntry>();
    let visible = k <= depth
        && (1..=k).all(|i| {
            // SAFETY: i <= k <= depth: an entry of the shadow stack.
            (unsafe { (*st.shadow_top.sub(i)).func }) & E_HIDDEN == 0
        });
    if !visible {
        buffer::append(shm, st, kind, id);
        return None;
    }
    let found = n.filter(|&n| n >= k).filter(|&n| {
        (1..=k).all(|i| {
            // SAFETY: as above.
            (unsafe { (*st.shadow_top.sub(i)).func }) as u32 == open[n - i].0
        })
    });
    if let Some(n) = found {
        let at = open[n - k].1;
        if insert_record(st, at, kind, id) {
            return Some(at);
        }
    }
    reopen_around(shm, st, k, kind, id);
    None
}

/// Calls entered open at the end of the thread's current buffer, read from
/// offset `from` (a record's start) on, outermost first: (function id,
/// offset of the entry record) into `open`; their count. Payloads are
/// passed over; exits of calls entered before `from` are too. `None`
/// when the records do not nest or too many are open.
fn open_since(st: &ThreadState, from: u64, open: &mut [(u32, u64); MAX_OPEN]) -> Option<usize> {
    use fctrace_format::event::RawEvent;
    use fctrace_format::shm::BUF_HEADER_SIZE;
    // SAFETY: the thread's own current buffer; only this thread advances
    // `pos`.
    let pos = unsafe { (*st.buf).pos.load(Ordering::Relaxed) };
    let size = RawEvent::SIZE as u64;
    if from < BUF_HEADER_SIZE as u64 || from > pos {
        return None;
    }
    let mut n = 0;
    let mut at = from;
    while at + size <= pos {
        // SAFETY: records between `from` and `pos` are this thread's,
        // written whole (a record with its payload after it).
        let r = unsafe {
            (st.buf as *const u8)
                .add(at as usize)
                .cast::<RawEvent>()
                .read()
        };
        let entry = match r.kind() {
            _ if r.tsc == 0 && r.word == 0 => false,
            Some(EventKind::Entry) => true,
            Some(EventKind::Args) => r.with_call_step(),
            Some(EventKind::Exit | EventKind::Unwind) => {
                if n > 0 && open[n - 1].0 == r.func() {
                    n -= 1;
                } else if n > 0 {
                    return None;
                }
                // (n == 0: a call entered before `from` returning.)
                false
            }
            _ => false,
        };
        if entry {
            if n == MAX_OPEN {
                return None;
            }
            open[n] = (r.func(), at);
            n += 1;
        }
        at += size * (1 + r.payload_records() as u64);
    }
    Some(n)
}

/// Calls [`open_since`] follows at most.
const MAX_OPEN: usize = 64;

/// Writes the event at offset `at` of the thread's current buffer, the
/// records from there moving up by one (the event takes the time of the
/// record it displaces: time order stays). False when the buffer has no
/// room.
fn insert_record(st: &mut ThreadState, at: u64, kind: EventKind, id: u32) -> bool {
    use fctrace_format::event::RawEvent;
    let Some(shm) = shm::get() else { return false };
    let buf = st.buf;
    let size = RawEvent::SIZE as u64;
    // SAFETY: the thread's own buffer; only this thread advances `pos`.
    let pos = unsafe { (*buf).pos.load(Ordering::Relaxed) };
    if buf != shm.buffer(st.buf_index) || pos + size > shm.layout.buf_size as u64 || at >= pos {
        return false;
    }
    // SAFETY: room for one more record was checked; [at, pos) holds this
    // thread's records, moved up by one within the buffer.
    unsafe {
        (*buf).pos.store(pos + size, Ordering::Relaxed);
        let base = buf as *mut u8;
        let tsc = base.add(at as usize).cast::<RawEvent>().read().tsc;
        std::ptr::copy(
            base.add(at as usize),
            base.add((at + size) as usize),
            (pos - at) as usize,
        );
        base.add(at as usize)
            .cast::<RawEvent>()
            .write(RawEvent::new(kind, id, tsc));
    }
    true
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
