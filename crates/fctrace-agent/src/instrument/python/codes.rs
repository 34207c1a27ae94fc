//! What both ways of seeing Python functions share (`frames` and
//! `profile`): the C API functions they call, found by name in the
//! process, and the code table.
//!
//! Each code object gets a function id at its first call: named
//! `module.qualname`, its line in the session's symbol table has kind `py`,
//! its source file as the module and its first line as the address. The
//! code object is kept alive (one reference more), so its address names it
//! for the rest of the run: a fixed table of (address, id) pairs, looked
//! up without lock, allocation or system call, holds them.

use crate::runtime::{log, tls};
use fctrace_format::symtab::{FuncKind, FuncStatus, FunctionLine};
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

pub(super) type Obj = *mut c_void;

/// A C-level profile function (`Py_tracefunc`).
pub(super) type TraceFn = extern "C" fn(Obj, Obj, c_int, Obj) -> c_int;

/// The C API functions the profile function and its installation use,
/// found by name in the process.
pub(super) struct Api {
    /// `_PyEval_SetProfile(tstate, func, arg)` (3.11), when
    /// `PyEval_SetProfileAllThreads` (3.12 and later) is not there.
    pub(super) set_one: Option<unsafe extern "C" fn(Obj, Option<TraceFn>, Obj) -> c_int>,
    pub(super) set_all: Option<unsafe extern "C" fn(Option<TraceFn>, Obj)>,
    pub(super) interp_get: unsafe extern "C" fn() -> Obj,
    pub(super) thread_head: unsafe extern "C" fn(Obj) -> Obj,
    pub(super) thread_next: unsafe extern "C" fn(Obj) -> Obj,
    pub(super) frame_code: unsafe extern "C" fn(Obj) -> Obj,
    pub(super) frame_globals: unsafe extern "C" fn(Obj) -> Obj,
    pub(super) incref: unsafe extern "C" fn(Obj),
    pub(super) decref: unsafe extern "C" fn(Obj),
    pub(super) getattr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    pub(super) utf8: unsafe extern "C" fn(Obj, *mut isize) -> *const c_char,
    pub(super) as_long: unsafe extern "C" fn(Obj) -> c_long,
    pub(super) dict_get: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    pub(super) err_fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
    pub(super) err_restore: unsafe extern "C" fn(Obj, Obj, Obj),
    pub(super) err_clear: unsafe extern "C" fn(),
}

pub(super) static API: OnceLock<Api> = OnceLock::new();

/// The id of a code object that has none (the table is full, or a fork
/// child met it: its symbol table is its parent's): not recorded.
pub(super) const NO_ID: u32 = u32::MAX;

/// In a code table entry, beside the id: the code is a generator's, a
/// coroutine's or an async generator's (their first run makes the
/// generator object, which [`frames`] does not record as a call).
pub(super) const GEN_BIT: u32 = 1 << 31;

/// A code table entry's id and whether it is a generator's code.
#[inline]
pub(super) fn split(entry: u32) -> (u32, bool) {
    if entry == NO_ID {
        (NO_ID, false)
    } else {
        (entry & !GEN_BIT, entry & GEN_BIT != 0)
    }
}

/// The code table: open addressing, `SLOTS` entries, at most `PROBES`
/// looked at per lookup; filled to at most three quarters.
const SLOT_BITS: u32 = 16;

const SLOTS: usize = 1 << SLOT_BITS;

const PROBES: usize = 64;

const MAX_CODES: u32 = (SLOTS as u32 / 4) * 3;

struct Slot {
    code: AtomicUsize,
    id: AtomicU32,
    flags: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        code: AtomicUsize::new(0),
        id: AtomicU32::new(0),
        flags: AtomicU64::new(0),
    }
}; SLOTS];

/// A code object's table entry: its id (with [`GEN_BIT`]) and its
/// record-time filter flags (`recording::filter::flags_for`; 0 without
/// filters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Code {
    pub(super) entry: u32,
    pub(super) flags: u64,
}

/// A code object without an id.
pub(super) const NO_CODE: Code = Code {
    entry: NO_ID,
    flags: 0,
};

/// Code objects in the table.
static CODES: AtomicU32 = AtomicU32::new(0);

fn first_slot(code: usize) -> usize {
    ((code as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

/// The entry of the code object at `code`, if it has been seen.
#[inline]
pub(super) fn lookup(code: usize) -> Option<Code> {
    let mut i = first_slot(code);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        let c = slot.code.load(Ordering::Acquire);
        if c == code {
            return Some(Code {
                entry: slot.id.load(Ordering::Relaxed),
                flags: slot.flags.load(Ordering::Relaxed),
            });
        }
        if c == 0 {
            return None;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

/// Enters the code object at `code` (the GIL serialises the callers; the
/// entry is written before the address publishes it). False when no slot
/// in reach is free.
pub(super) fn insert(code: usize, c: Code) -> bool {
    let mut i = first_slot(code);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        if slot.code.load(Ordering::Relaxed) == 0 {
            slot.id.store(c.entry, Ordering::Relaxed);
            slot.flags.store(c.flags, Ordering::Relaxed);
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
pub(super) fn symbol(name: &CStr) -> *mut c_void {
    crate::runtime::dlerror::global_function(name)
        .map_or(std::ptr::null_mut(), |a| a as *mut c_void)
}

/// Looks `name` up as a function of type `T` (a function pointer type).
pub(super) fn function<T: Copy>(name: &CStr, missing: &mut Vec<String>) -> Option<T> {
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

pub(super) fn load_api() -> Result<Api, String> {
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

/// The module a function's globals name (`__name__`; empty if none).
///
/// # Safety
/// The GIL is held; `globals` is null or a live dict.
pub(super) unsafe fn module_name(api: &Api, globals: Obj) -> String {
    if globals.is_null() {
        return String::new();
    }
    // SAFETY: as the caller promises (a borrowed reference comes back).
    unsafe { text(api, (api.dict_get)(globals, c"__name__".as_ptr())) }
}

/// A code object met for the first time: its name and place written to
/// the symbol table under a new function id, kept in the code table.
/// `module_of` names its module (called with the GIL held, the thread's
/// error state set aside). Returns its code table entry (with [`GEN_BIT`]
/// for a generator's code, and its filter flags).
#[cold]
pub(super) fn first_sight(api: &Api, code: Obj, module_of: impl FnOnce(&Api) -> String) -> Code {
    if CODES.load(Ordering::Relaxed) >= MAX_CODES {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            log::note(&format!(
                "more than {MAX_CODES} Python functions: those met later are not traced"
            ));
        }
        return NO_CODE;
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
    let (qualname, file, line, flags, module) = unsafe {
        (api.err_fetch)(&mut t, &mut v, &mut tb);
        let qualname = attr_text(api, code, c"co_qualname");
        let file = attr_text(api, code, c"co_filename");
        let line = attr_long(api, code, c"co_firstlineno").max(0) as u64;
        let flags = attr_long(api, code, c"co_flags");
        let module = module_of(api);
        (api.err_clear)();
        (api.err_restore)(t, v, tb);
        (qualname, file, line, flags, module)
    };
    let name = if module.is_empty() {
        qualname
    } else {
        format!("{module}.{qualname}")
    };
    let id = super::super::dlopen::with_session(|s| {
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
    let entry = if id != NO_ID && flags & CO_GENERATORS != 0 {
        id | GEN_BIT
    } else {
        id
    };
    let filters = if id == NO_ID {
        0
    } else {
        // (Python names match as they are: no mangling, no address form.)
        crate::recording::filter::flags_for(id, &file, &name, "")
    };
    let c = Code {
        entry,
        flags: filters,
    };
    if !insert(code as usize, c) {
        return NO_CODE;
    }
    c
}

/// `CO_GENERATOR`, `CO_COROUTINE` and `CO_ASYNC_GENERATOR` in `co_flags`.
pub(super) const CO_GENERATORS: c_long = 0x20 | 0x80 | 0x200;

/// The integer attribute `name` of `obj` (0 if it has none: the error
/// cleared).
///
/// # Safety
/// The GIL is held; `obj` is a live object.
pub(super) unsafe fn attr_long(api: &Api, obj: Obj, name: &CStr) -> c_long {
    // SAFETY: as the caller promises.
    unsafe {
        let n = (api.getattr)(obj, name.as_ptr());
        if n.is_null() {
            (api.err_clear)();
            return 0;
        }
        let l = (api.as_long)(n);
        (api.decref)(n);
        l
    }
}

/// The text of attribute `name` of `obj` (empty if it has none or it is
/// not a string).
///
/// # Safety
/// The GIL is held; `obj` is a live object.
pub(super) unsafe fn attr_text(api: &Api, obj: Obj, name: &CStr) -> String {
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
pub(super) unsafe fn text(api: &Api, s: Obj) -> String {
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
    fn code_table_finds_what_it_holds() {
        let codes: Vec<usize> = (1..200).map(|i| 0x7f00_0000_0000 + i * 0x1d0).collect();
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(lookup(c), None);
            let entry = Code {
                entry: i as u32,
                flags: i as u64 * 3,
            };
            assert!(insert(c, entry));
        }
        for (i, &c) in codes.iter().enumerate() {
            let entry = lookup(c).map(|e| (e.entry, e.flags));
            assert_eq!(entry, Some((i as u32, i as u64 * 3)));
        }
    }
}
