//! Python functions in the tree: when the process has CPython's C API
//! (3.11 to 3.13, exported by the interpreter program itself, as Debian's
//! `python3.11` does, or by its `libpython3.X.so`), a C-level profile
//! function records each call and return of a Python function as an entry
//! and exit event in the thread's buffer, among the native events.
//!
//! The profile function is installed by a runtime audit hook
//! (`PySys_AddAuditHook`, which may be called before the interpreter
//! starts: the agent's constructor does) at the interpreter's first
//! `cpython.run_*` event (the script, `-c`, `-m`, standard input, about to
//! run on the main thread, the interpreter initialised, the GIL held). It
//! is set on every thread state of the interpreter then, and again
//! whenever the program asked `pthread_create` for a thread since the last
//! look (the profile function checks a counter at each event: CPython
//! makes a thread's state before it starts the thread, and the creating
//! thread's next event comes before the new thread can run Python code).
//!
//! Each code object gets a function id at its first call: named
//! `module.qualname`, its line in the session's symbol table has kind `py`,
//! its source file as the module and its first line as the address. The
//! code object is kept alive (one reference more), so its address names it
//! for the rest of the run: a fixed table of (address, id) pairs, looked
//! up without lock, allocation or system call, holds them.

use super::session::PY_EVAL_ID;
use crate::interpose::unwind;
use crate::runtime::log;
use crate::runtime::shm::{self, Shm};
use crate::runtime::state::ThreadState;
use crate::runtime::{buffer, thread, tls};
use fctrace_format::event::EventKind;
use fctrace_format::symtab::{FuncKind, FuncStatus, FunctionLine};
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

type Obj = *mut c_void;
type TraceFn = extern "C" fn(Obj, Obj, c_int, Obj) -> c_int;
type AuditFn = extern "C" fn(*const c_char, Obj, *mut c_void) -> c_int;

/// `PyTrace_CALL` and `PyTrace_RETURN` (the others, `C_CALL` and the
/// lines, are not recorded: native calls are traced by the patches).
const PY_TRACE_CALL: c_int = 0;
const PY_TRACE_RETURN: c_int = 3;

/// The C API functions the profile function and its installation use,
/// found by name in the process.
struct Api {
    /// `_PyEval_SetProfile(tstate, func, arg)` (3.11), when
    /// `PyEval_SetProfileAllThreads` (3.12 and later) is not there.
    set_one: Option<unsafe extern "C" fn(Obj, Option<TraceFn>, Obj) -> c_int>,
    set_all: Option<unsafe extern "C" fn(Option<TraceFn>, Obj)>,
    interp_get: unsafe extern "C" fn() -> Obj,
    thread_head: unsafe extern "C" fn(Obj) -> Obj,
    thread_next: unsafe extern "C" fn(Obj) -> Obj,
    frame_code: unsafe extern "C" fn(Obj) -> Obj,
    frame_globals: unsafe extern "C" fn(Obj) -> Obj,
    incref: unsafe extern "C" fn(Obj),
    decref: unsafe extern "C" fn(Obj),
    getattr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    utf8: unsafe extern "C" fn(Obj, *mut isize) -> *const c_char,
    as_long: unsafe extern "C" fn(Obj) -> c_long,
    dict_get: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    err_fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
    err_restore: unsafe extern "C" fn(Obj, Obj, Obj),
    err_clear: unsafe extern "C" fn(),
}

static API: OnceLock<Api> = OnceLock::new();

/// Set once the profile function is installed (the audit hook then does
/// nothing more).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// `thread::THREADS_CREATED` when the thread states were last covered.
static SEEN: AtomicU32 = AtomicU32::new(0);

/// The id of a code object that has none (the table is full, or a fork
/// child met it: its symbol table is its parent's): not recorded.
const NO_ID: u32 = u32::MAX;

/// The code table: open addressing, `SLOTS` entries, at most `PROBES`
/// looked at per lookup; filled to at most three quarters.
const SLOT_BITS: u32 = 16;
const SLOTS: usize = 1 << SLOT_BITS;
const PROBES: usize = 64;
const MAX_CODES: u32 = (SLOTS as u32 / 4) * 3;

struct Slot {
    code: AtomicUsize,
    id: AtomicU32,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        code: AtomicUsize::new(0),
        id: AtomicU32::new(0),
    }
}; SLOTS];

/// Code objects in the table.
static CODES: AtomicU32 = AtomicU32::new(0);

fn first_slot(code: usize) -> usize {
    ((code as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

/// The id of the code object at `code`, if it has been seen.
#[inline]
fn lookup(code: usize) -> Option<u32> {
    let mut i = first_slot(code);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        let c = slot.code.load(Ordering::Acquire);
        if c == code {
            return Some(slot.id.load(Ordering::Relaxed));
        }
        if c == 0 {
            return None;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

/// Enters the code object at `code` with `id` (the GIL serialises the
/// callers; the id is written before the address publishes it). False
/// when no slot in reach is free.
fn insert(code: usize, id: u32) -> bool {
    let mut i = first_slot(code);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        if slot.code.load(Ordering::Relaxed) == 0 {
            slot.id.store(id, Ordering::Relaxed);
            slot.code.store(code, Ordering::Release);
            CODES.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    false
}

/// The address of the function `name` in the process (the program's
/// exported symbols and its libraries'), or null; found without `dlsym`.
fn symbol(name: &CStr) -> *mut c_void {
    crate::runtime::dlerror::global_function(name)
        .map_or(std::ptr::null_mut(), |a| a as *mut c_void)
}

/// Looks `name` up as a function of type `T` (a function pointer type).
fn function<T: Copy>(name: &CStr, missing: &mut Vec<String>) -> Option<T> {
    let p = symbol(name);
    if p.is_null() {
        missing.push(name.to_string_lossy().into_owned());
        return None;
    }
    debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is the C function pointer type of the named CPython API
    // function (the caller names each with its documented signature).
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The interpreter's version (`3.11.2 (main, ...)`), when the process has
/// CPython's API.
fn version() -> Option<String> {
    let p = symbol(c"Py_GetVersion");
    if p.is_null() {
        return None;
    }
    // SAFETY: Py_GetVersion takes nothing and returns a static string; it
    // may be called before the interpreter is initialised.
    let text = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(p);
        f()
    };
    if text.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated static string.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Whether this CPython's profile events are the ones this file follows.
fn supported(version: &str) -> Result<(), String> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let short = version.split(' ').next().unwrap_or(version);
    if major != 3 || !(11..=13).contains(&minor) {
        return Err(format!(
            "Python {short}: its functions are not traced (fctrace follows CPython 3.11 to 3.13); \
             the interpreter's C functions are"
        ));
    }
    if version.contains("free-threading") {
        return Err(format!(
            "Python {short} (free-threading build): its functions are not traced; \
             the interpreter's C functions are"
        ));
    }
    Ok(())
}

fn load_api() -> Result<Api, String> {
    let mut missing = Vec::new();
    let m = &mut missing;
    let set_all = function(c"PyEval_SetProfileAllThreads", &mut Vec::new());
    let set_one = if set_all.is_none() {
        function(c"_PyEval_SetProfile", m)
    } else {
        None
    };
    let api = (|| {
        Some(Api {
            set_one,
            set_all,
            interp_get: function(c"PyInterpreterState_Get", m)?,
            thread_head: function(c"PyInterpreterState_ThreadHead", m)?,
            thread_next: function(c"PyThreadState_Next", m)?,
            frame_code: function(c"PyFrame_GetCode", m)?,
            frame_globals: function(c"PyFrame_GetGlobals", m)?,
            incref: function(c"Py_IncRef", m)?,
            decref: function(c"Py_DecRef", m)?,
            getattr: function(c"PyObject_GetAttrString", m)?,
            utf8: function(c"PyUnicode_AsUTF8AndSize", m)?,
            as_long: function(c"PyLong_AsLong", m)?,
            dict_get: function(c"PyDict_GetItemString", m)?,
            err_fetch: function(c"PyErr_Fetch", m)?,
            err_restore: function(c"PyErr_Restore", m)?,
            err_clear: function(c"PyErr_Clear", m)?,
        })
    })();
    match api {
        Some(api) if api.set_one.is_some() || api.set_all.is_some() => Ok(api),
        _ => Err(missing.join(", ")),
    }
}

/// At start-up (preloaded): if the process has CPython's API, registers
/// the audit hook that installs the profile function once the interpreter
/// runs the program. An interpreter of another version, or without a
/// function this needs, is left alone, and the trace says why once. (Not
/// called when the environment has `FCTRACE_NO_PYTHON`: the constructor
/// reads it with the agent's own variables, taken out of the program's
/// environment.)
pub fn prepare() {
    let Some(version) = version() else { return };
    if let Err(why) = supported(&version) {
        log::note(&why);
        return;
    }
    let short = version.split(' ').next().unwrap_or(&version).to_string();
    let api = match load_api() {
        Ok(api) => api,
        Err(missing) => {
            log::note(&format!(
                "Python {short}: its functions are not traced (the process lacks {missing})"
            ));
            return;
        }
    };
    let Some(add_hook) = function::<unsafe extern "C" fn(AuditFn, *mut c_void) -> c_int>(
        c"PySys_AddAuditHook",
        &mut Vec::new(),
    ) else {
        log::note(&format!(
            "Python {short}: its functions are not traced (the process lacks PySys_AddAuditHook)"
        ));
        return;
    };
    if API.set(api).is_err() {
        return;
    }
    CODE_IN_FRAME.store(
        if version.starts_with("3.11.") { 32 } else { 0 },
        Ordering::Relaxed,
    );
    if version.starts_with("3.12.") {
        let none = crate::runtime::dlerror::global_object(c"_Py_NoneStruct").unwrap_or(0);
        NONE_RETURNS.store(none as usize, Ordering::Relaxed);
    }
    // SAFETY: PySys_AddAuditHook may be called before the interpreter is
    // initialised (it is made for embedders); the hook is a plain
    // function that lives as long as the process.
    if unsafe { add_hook(audit, std::ptr::null_mut()) } != 0 {
        log::note(&format!(
            "Python {short}: its functions are not traced (its audit hook was refused)"
        ));
    }
}

/// The runtime audit hook: at the first `cpython.run_*` event, installs
/// the profile function on every thread of the interpreter.
extern "C" fn audit(event: *const c_char, _args: Obj, _data: *mut c_void) -> c_int {
    if INSTALLED.load(Ordering::Relaxed) || event.is_null() {
        return 0;
    }
    // SAFETY: CPython passes the event's NUL-terminated name.
    let name = unsafe { CStr::from_ptr(event) }.to_bytes();
    if !name.starts_with(b"cpython.run_") || INSTALLED.swap(true, Ordering::AcqRel) {
        return 0;
    }
    cover_threads();
    0
}

/// Sets the profile function on every thread state of the interpreter
/// (the GIL held), leaving the thread's error state as it was.
#[cold]
fn cover_threads() {
    let Some(api) = API.get() else { return };
    SEEN.store(
        thread::THREADS_CREATED.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    let _busy = tls::Busy::quiet();
    let (mut t, mut v, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: CPython API calls made with the GIL held (the audit hook and
    // the profile function are called so), each with its documented
    // arguments; the error state taken first is put back last.
    unsafe {
        (api.err_fetch)(&mut t, &mut v, &mut tb);
        if let Some(set_all) = api.set_all {
            set_all(Some(profile), std::ptr::null_mut());
        } else if let Some(set_one) = api.set_one {
            let mut ts = (api.thread_head)((api.interp_get)());
            while !ts.is_null() {
                set_one(ts, Some(profile), std::ptr::null_mut());
                ts = (api.thread_next)(ts);
            }
        }
        (api.err_clear)();
        (api.err_restore)(t, v, tb);
    }
}

/// The profile function: a Python function's call or return becomes an
/// entry or exit event of its function id (an exception leaving it, an
/// `Unwind` exit).
extern "C" fn profile(_obj: Obj, frame: Obj, what: c_int, arg: Obj) -> c_int {
    if thread::THREADS_CREATED.load(Ordering::Relaxed) != SEEN.load(Ordering::Relaxed) {
        cover_threads();
    }
    let kind = match what {
        PY_TRACE_CALL => EventKind::Entry,
        PY_TRACE_RETURN if arg.is_null() || unwinding_312(frame, arg) => EventKind::Unwind,
        PY_TRACE_RETURN => EventKind::Exit,
        _ => return 0,
    };
    if tls::busy() != 0 || frame.is_null() {
        return 0;
    }
    let Some(shm) = shm::get() else { return 0 };
    let _busy = tls::Busy::quiet();
    record(shm, frame, kind);
    0
}

#[inline]
fn record(shm: &'static Shm, frame: Obj, kind: EventKind) {
    let mut st = tls::state();
    if st.is_null() {
        match register_thread(shm) {
            Some(s) => st = s,
            None => return,
        }
    }
    // SAFETY: a non-null state is this thread's, used by this thread only.
    let st = unsafe { &mut *st };
    if kind == EventKind::Entry {
        st.py_depth += 1;
    } else if st.py_depth == 0 {
        // The return of a call made before the profile function was set.
        return;
    } else {
        st.py_depth -= 1;
    }
    let id = function_id(frame);
    if id == NO_ID {
        return;
    }
    let lifted = lifted_frames(st);
    if lifted == 0 || !place_before_open(st, lifted, kind, id) {
        if lifted != 0 {
            reopen_around(shm, st, lifted, kind, id);
        } else {
            buffer::append(shm, st, kind, id);
        }
    }
}

/// How many of the thread's open traced calls are the interpreter's way
/// from its evaluation loop to the profile function (`call_trace` and the
/// like, above the innermost traced `_PyEval_EvalFrameDefault`): the
/// Python function's event belongs before their entries, in the loop.
/// 0 when the loop is not traced (a `libpython` without `-l`) or filters
/// are active (their hidden calls have no entry events to go by).
#[inline]
fn lifted_frames(st: &ThreadState) -> usize {
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
const MAX_LIFTED: usize = 16;

/// Records scanned back from the end of the buffer for the entry of the
/// outermost lifted call.
const MAX_SCAN: usize = 512;

/// Writes the event just before the entry event of the outermost of the
/// `lifted` open calls, in the thread's current buffer (the records after
/// it move up by one; the event takes that entry's time). False when that
/// entry is not in the current buffer or the buffer is full.
fn place_before_open(st: &mut ThreadState, lifted: usize, kind: EventKind, id: u32) -> bool {
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
fn reopen_around(shm: &'static Shm, st: &mut ThreadState, lifted: usize, kind: EventKind, id: u32) {
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
fn register_thread(shm: &'static Shm) -> Option<*mut ThreadState> {
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

/// Where the code object of a frame object is, read without a call: the
/// frame object's `f_frame` (the interpreter's frame) and the code object
/// in it (3.11: after `f_func`, `f_globals`, `f_builtins`, `f_locals`;
/// 3.12 and 3.13: first). Used once `PyFrame_GetCode` gave the same
/// object at a first sight ([`DIRECT`]).
const F_FRAME: usize = 24;
static CODE_IN_FRAME: AtomicUsize = AtomicUsize::new(usize::MAX);

/// 0: the direct read is not checked yet; 1: it reads what
/// `PyFrame_GetCode` gives; 2: it did not once, the API is used.
static DIRECT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The code object of `frame`, read directly (null: unknown layout).
///
/// # Safety
/// `frame` is a live frame object of this interpreter.
#[inline]
unsafe fn code_read(frame: Obj) -> Obj {
    let at = CODE_IN_FRAME.load(Ordering::Relaxed);
    if at == usize::MAX {
        return std::ptr::null_mut();
    }
    // SAFETY: as the caller promises; the offsets are the version's layout.
    unsafe {
        let f = *(frame as *const u8).add(F_FRAME).cast::<*const u8>();
        if f.is_null() {
            return std::ptr::null_mut();
        }
        *f.add(at).cast::<Obj>()
    }
}

/// CPython 3.12 hands a profile function an exception leaving a function
/// as a `PyTrace_RETURN` of `None` (3.11 and 3.13: of NULL), the
/// exception put aside. Such a return is told apart by the instruction
/// its frame stopped at (`prev_instr`, after 7 pointers in the
/// interpreter's frame): a return or a yield for a return, the raising
/// instruction for an exception. Py_None's address on 3.12 (0: not 3.12,
/// or the layout failed its check).
static NONE_RETURNS: AtomicUsize = AtomicUsize::new(0);
const PREV_INSTR_312: usize = 56;
/// 3.12's RETURN_VALUE, RETURN_CONST, YIELD_VALUE, RETURN_GENERATOR and
/// their instrumented forms (a profile function instruments them).
const RETURN_OPS_312: [u8; 7] = [83, 121, 150, 75, 242, 247, 243];

/// Whether a `PyTrace_RETURN` of `arg` from `frame` is, on 3.12, an
/// exception leaving it. Every return of another value checks the
/// layout: it must have stopped at a return or yield (else this is
/// turned off, said once).
#[inline]
fn unwinding_312(frame: Obj, arg: Obj) -> bool {
    let none = NONE_RETURNS.load(Ordering::Relaxed);
    // (Only once the frame's layout was checked: `DIRECT`.)
    if none == 0 || frame.is_null() || DIRECT.load(Ordering::Relaxed) != 1 {
        return false;
    }
    // SAFETY: a live frame object of this interpreter (the profile
    // function's), whose `f_frame` offset `DIRECT` checked; 3.12's
    // interpreter frame holds the instruction it stopped at, inside its
    // code object's bytecode, which the frame keeps alive.
    let op = unsafe {
        let f = *(frame as *const u8).add(F_FRAME).cast::<*const u8>();
        if f.is_null() {
            return false;
        }
        let instr = *f.add(PREV_INSTR_312).cast::<*const u8>();
        if instr.is_null() {
            return false;
        }
        *instr
    };
    let at_return = RETURN_OPS_312.contains(&op);
    if arg as usize != none {
        if !at_return {
            NONE_RETURNS.store(0, Ordering::Relaxed);
            log::note(&format!(
                "Python 3.12: a return stopped at opcode {op}, not a return: exceptions \
                 leaving Python functions are shown as returns"
            ));
        }
        return false;
    }
    !at_return
}

/// The code object of `frame` through the C API.
///
/// # Safety
/// The GIL is held; `frame` is a live frame object.
unsafe fn code_api(api: &Api, frame: Obj) -> Obj {
    // SAFETY: PyFrame_GetCode returns a new reference, given back at once
    // (the frame keeps the code object alive).
    unsafe {
        let code = (api.frame_code)(frame);
        (api.decref)(code);
        code
    }
}

/// The function id of the frame's code object, given at its first sight.
#[inline]
fn function_id(frame: Obj) -> u32 {
    let Some(api) = API.get() else { return NO_ID };
    // SAFETY: `frame` is the frame CPython passed to the profile function,
    // the GIL held.
    let code = unsafe {
        if DIRECT.load(Ordering::Relaxed) == 1 {
            code_read(frame)
        } else {
            code_api(api, frame)
        }
    };
    match lookup(code as usize) {
        Some(id) => id,
        None => {
            // Each first sight checks the direct read against the API.
            // SAFETY: as above.
            let (by_api, read) = unsafe { (code_api(api, frame), code_read(frame)) };
            let agree = !read.is_null() && read == by_api;
            if !agree {
                DIRECT.store(2, Ordering::Relaxed);
            } else if DIRECT.load(Ordering::Relaxed) == 0 {
                DIRECT.store(1, Ordering::Relaxed);
            }
            match lookup(by_api as usize) {
                Some(id) => id,
                None => first_sight(api, by_api, frame),
            }
        }
    }
}

/// A code object met for the first time: its name and place written to
/// the symbol table under a new function id, kept in the code table.
#[cold]
fn first_sight(api: &Api, code: Obj, frame: Obj) -> u32 {
    if CODES.load(Ordering::Relaxed) >= MAX_CODES {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            log::note(&format!(
                "more than {MAX_CODES} Python functions: those met later are not traced"
            ));
        }
        return NO_ID;
    }
    let _marked = tls::Marked::span();
    let (mut t, mut v, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: CPython API calls with the GIL held (in the profile
    // function), each with its documented arguments; the thread's error
    // state (an exception in flight at an unwinding return) is set aside
    // first and put back last.
    let (qualname, file, line, module) = unsafe {
        (api.err_fetch)(&mut t, &mut v, &mut tb);
        let qualname = attr_text(api, code, c"co_qualname");
        let file = attr_text(api, code, c"co_filename");
        let line = {
            let n = (api.getattr)(code, c"co_firstlineno".as_ptr());
            if n.is_null() {
                0
            } else {
                let l = (api.as_long)(n);
                (api.decref)(n);
                l.max(0) as u64
            }
        };
        let globals = (api.frame_globals)(frame);
        let module = if globals.is_null() {
            String::new()
        } else {
            let m = text(api, (api.dict_get)(globals, c"__name__".as_ptr()));
            (api.decref)(globals);
            m
        };
        (api.err_clear)();
        (api.err_restore)(t, v, tb);
        (qualname, file, line, module)
    };
    let name = if module.is_empty() {
        qualname
    } else {
        format!("{module}.{qualname}")
    };
    let id = super::dlopen::with_session(|s| {
        let module = s.module_index(&file, 0).ok()?;
        let id = s.next_id;
        s.next_id += 1;
        s.write_line(&FunctionLine {
            id,
            module,
            addr: line,
            size: 0,
            kind: FuncKind::Python,
            status: &FuncStatus::Traced,
            name: &name,
        })
        .ok()?;
        s.flush().ok()?;
        Some(id)
    })
    .flatten()
    .unwrap_or(NO_ID);
    // The code object lives as long as the process: its address keeps
    // naming it.
    // SAFETY: a code object the running frame holds, the GIL held.
    unsafe { (api.incref)(code) };
    if !insert(code as usize, id) {
        return NO_ID;
    }
    id
}

/// The text of attribute `name` of `obj` (empty if it has none or it is
/// not a string).
///
/// # Safety
/// The GIL is held; `obj` is a live object.
unsafe fn attr_text(api: &Api, obj: Obj, name: &CStr) -> String {
    // SAFETY: as the caller promises.
    unsafe {
        let a = (api.getattr)(obj, name.as_ptr());
        if a.is_null() {
            return String::new();
        }
        let s = text(api, a);
        (api.decref)(a);
        s
    }
}

/// The text of a `str` object (borrowed; null or another type: empty).
///
/// # Safety
/// The GIL is held; `s` is null or a live object.
unsafe fn text(api: &Api, s: Obj) -> String {
    if s.is_null() {
        return String::new();
    }
    let mut len: isize = 0;
    // SAFETY: as the caller promises; the bytes stay valid while `s` lives.
    unsafe {
        let p = (api.utf8)(s, &mut len);
        if p.is_null() || len < 0 {
            return String::new();
        }
        let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len as usize);
        String::from_utf8_lossy(bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_followed() {
        assert!(supported("3.11.2 (main, Apr 28 2025, 14:11:48) [GCC 12.2.0]").is_ok());
        assert!(supported("3.12.1 (main) [GCC]").is_ok());
        assert!(supported("3.13.0 (main) [GCC]").is_ok());
        let e = supported("3.10.13 (main) [GCC]").unwrap_err();
        assert!(e.starts_with("Python 3.10.13: "), "{e}");
        assert!(supported("2.7.18 (default) [GCC]").is_err());
        assert!(supported("3.13.0 experimental free-threading build (main)").is_err());
    }

    #[test]
    fn code_table_finds_what_it_holds() {
        let codes: Vec<usize> = (1..200).map(|i| 0x7f00_0000_0000 + i * 0x1d0).collect();
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(lookup(c), None);
            assert!(insert(c, i as u32));
        }
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(lookup(c), Some(i as u32));
        }
    }
}
