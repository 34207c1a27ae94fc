//! Python functions through a C-level profile function (`PyEval_SetProfile`'s
//! kind): the way for the versions whose frames do not all go through the
//! frame evaluation function (`frames`), or when another one is installed.
//! The profile function is set on every thread state of the interpreter,
//! and again whenever the program asked `pthread_create` for a thread
//! since the last look (it checks a counter at each event: CPython makes a
//! thread's state before it starts the thread, and the creating thread's
//! next event comes before the new thread can run Python code).

use super::codes::{first_sight, lookup, module_name, split, Api, Obj, API, NO_ID};
use super::events::record;
use crate::runtime::log;
use crate::runtime::{shm, thread, tls};
use fctrace_format::event::EventKind;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Sets the version's frame layout and return conventions (at start-up).
pub(super) fn prepare(version: &str) {
    CODE_IN_FRAME.store(
        if version.starts_with("3.11.") { 32 } else { 0 },
        Ordering::Relaxed,
    );
    if version.starts_with("3.12.") {
        let none = crate::runtime::dlerror::global_object(c"_Py_NoneStruct").unwrap_or(0);
        NONE_RETURNS.store(none as usize, Ordering::Relaxed);
    }
}

/// `PyTrace_CALL` and `PyTrace_RETURN` (the others, `C_CALL` and the
/// lines, are not recorded: native calls are traced by the patches).
pub(super) const PY_TRACE_CALL: c_int = 0;

pub(super) const PY_TRACE_RETURN: c_int = 3;

/// `thread::THREADS_CREATED` when the thread states were last covered.
pub(super) static SEEN: AtomicU32 = AtomicU32::new(0);

/// Sets the profile function on every thread state of the interpreter
/// (the GIL held), leaving the thread's error state as it was.
#[cold]
pub(super) fn cover_threads() {
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
pub(super) extern "C" fn profile(_obj: Obj, frame: Obj, what: c_int, arg: Obj) -> c_int {
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
    record(
        shm,
        kind,
        true,
        || function_id(frame),
        || {
            if kind == EventKind::Entry {
                // SAFETY: the live frame object CPython passed; its
                // interpreter frame at `F_FRAME` (the layout `DIRECT`
                // checks for the code object).
                unsafe { *(frame as *const u8).add(F_FRAME).cast::<Obj>() }
            } else {
                arg
            }
        },
    );
    0
}

/// Where the code object of a frame object is, read without a call: the
/// frame object's `f_frame` (the interpreter's frame) and the code object
/// in it (3.11: after `f_func`, `f_globals`, `f_builtins`, `f_locals`;
/// 3.12 and 3.13: first). Used once `PyFrame_GetCode` gave the same
/// object at a first sight ([`DIRECT`]).
pub(super) const F_FRAME: usize = 24;

pub(super) static CODE_IN_FRAME: AtomicUsize = AtomicUsize::new(usize::MAX);

/// 0: the direct read is not checked yet; 1: it reads what
/// `PyFrame_GetCode` gives; 2: it did not once, the API is used.
pub(super) static DIRECT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The code object of `frame`, read directly (null: unknown layout).
///
/// # Safety
/// `frame` is a live frame object of this interpreter.
#[inline]
pub(super) unsafe fn code_read(frame: Obj) -> Obj {
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
pub(super) static NONE_RETURNS: AtomicUsize = AtomicUsize::new(0);

pub(super) const PREV_INSTR_312: usize = 56;

/// 3.12's RETURN_VALUE, RETURN_CONST, YIELD_VALUE, RETURN_GENERATOR and
/// their instrumented forms (a profile function instruments them).
pub(super) const RETURN_OPS_312: [u8; 7] = [83, 121, 150, 75, 242, 247, 243];

/// Whether a `PyTrace_RETURN` of `arg` from `frame` is, on 3.12, an
/// exception leaving it. Every return of another value checks the
/// layout: it must have stopped at a return or yield (else this is
/// turned off, said once).
#[inline]
pub(super) fn unwinding_312(frame: Obj, arg: Obj) -> bool {
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
pub(super) unsafe fn code_api(api: &Api, frame: Obj) -> Obj {
    // SAFETY: PyFrame_GetCode returns a new reference, given back at once
    // (the frame keeps the code object alive).
    unsafe {
        let code = (api.frame_code)(frame);
        (api.decref)(code);
        code
    }
}

/// The function id of the frame's code object, given at its first sight,
/// and its filter flags.
#[inline]
pub(super) fn function_id(frame: Obj) -> (u32, u64) {
    let Some(api) = API.get() else {
        return (NO_ID, 0);
    };
    // SAFETY: `frame` is the frame CPython passed to the profile function,
    // the GIL held.
    let code = unsafe {
        if DIRECT.load(Ordering::Relaxed) == 1 {
            code_read(frame)
        } else {
            code_api(api, frame)
        }
    };
    let entry = match lookup(code as usize) {
        Some(entry) => entry,
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
                Some(entry) => entry,
                // SAFETY: as above (PyFrame_GetGlobals: a new reference).
                None => first_sight(api, by_api, |api| unsafe {
                    let globals = (api.frame_globals)(frame);
                    let module = module_name(api, globals);
                    if !globals.is_null() {
                        (api.decref)(globals);
                    }
                    module
                }),
            }
        }
    };
    (split(entry.entry).0, entry.flags)
}
