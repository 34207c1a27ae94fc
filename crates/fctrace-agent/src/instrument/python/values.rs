//! Python values as `-A`/`-R` show them: a short form written without
//! running any Python code (no `repr`: a class's `__repr__` could do
//! anything): `int` (within 64 bits), `float`, `bool`, `None`, `str` and
//! `bytes` (cut at `--max-string`) as they are, anything else as
//! `<TYPE object>`. An argument is read from the interpreter's frame, its
//! N-th local (CPython puts the arguments first).

use super::codes::{attr_long, function, Obj, API};
use std::ffi::{c_char, c_int, c_long, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use fctrace_format::argval::{IntFmt, Writer};

/// Where the code object is in an interpreter frame (3.11: its 5th word;
/// 3.12 and 3.13: its first), set with the version.
pub(super) static IFRAME_CODE_AT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Where the frame's locals start (`localsplus`: after 7 pointers, an
/// `int` and 4 bytes more on 3.11 to 3.13).
const LOCALS_AT: usize = 72;

/// `CO_VARARGS` and `CO_VARKEYWORDS`: each adds a local after the named
/// arguments.
const CO_VARARGS: c_long = 0x4;
const CO_VARKEYWORDS: c_long = 0x8;

/// What reading values takes, found at the first use.
struct ValueApi {
    long_type: usize,
    float_type: usize,
    bool_type: usize,
    str_type: usize,
    bytes_type: usize,
    none: usize,
    as_long: unsafe extern "C" fn(Obj, *mut c_int) -> i64,
    as_double: unsafe extern "C" fn(Obj) -> f64,
    bytes_size: unsafe extern "C" fn(Obj) -> isize,
    bytes_data: unsafe extern "C" fn(Obj) -> *const c_char,
}

static VALUE_API: OnceLock<Option<ValueApi>> = OnceLock::new();

fn value_api() -> Option<&'static ValueApi> {
    VALUE_API
        .get_or_init(|| {
            let object = |n: &CStr| crate::runtime::dlerror::global_object(n).map(|a| a as usize);
            let m = &mut Vec::new();
            Some(ValueApi {
                long_type: object(c"PyLong_Type")?,
                float_type: object(c"PyFloat_Type")?,
                bool_type: object(c"PyBool_Type")?,
                str_type: object(c"PyUnicode_Type")?,
                bytes_type: object(c"PyBytes_Type")?,
                none: object(c"_Py_NoneStruct")?,
                as_long: function(c"PyLong_AsLongLongAndOverflow", m)?,
                as_double: function(c"PyFloat_AsDouble", m)?,
                bytes_size: function(c"PyBytes_Size", m)?,
                bytes_data: function(c"PyBytes_AsString", m)?,
            })
        })
        .as_ref()
}

/// Writes argument `n` (1-based) of the function whose interpreter frame
/// is `iframe`: missing when it has fewer.
///
/// # Safety
/// The GIL is held; `iframe` is a live interpreter frame of this
/// interpreter, about to run or running its first instruction.
pub(super) unsafe fn put_arg(iframe: Obj, n: u8, w: &mut Writer, max: usize) -> bool {
    let at = IFRAME_CODE_AT.load(Ordering::Relaxed);
    let Some(api) = API.get() else {
        return w.missing();
    };
    if iframe.is_null() || at == usize::MAX || n == 0 {
        return w.missing();
    }
    // SAFETY: as the caller promises: the frame's code object, and its
    // argument counts read through the C API.
    unsafe {
        let code = *(iframe as *const u8).add(at).cast::<Obj>();
        let long = |name: &CStr| attr_long(api, code, name).max(0);
        let flags = long(c"co_flags");
        let count = long(c"co_argcount")
            + long(c"co_kwonlyargcount")
            + c_long::from(flags & CO_VARARGS != 0)
            + c_long::from(flags & CO_VARKEYWORDS != 0);
        if c_long::from(n) > count {
            return w.missing();
        }
        let obj = *(iframe as *const u8)
            .add(LOCALS_AT + 8 * (n as usize - 1))
            .cast::<Obj>();
        put_object(obj, w, max)
    }
}

/// Writes the short form of `obj` (null: missing).
///
/// # Safety
/// The GIL is held; `obj` is null or a live object.
pub(super) unsafe fn put_object(obj: Obj, w: &mut Writer, max: usize) -> bool {
    let (Some(api), Some(v)) = (API.get(), value_api()) else {
        return w.missing();
    };
    if obj.is_null() {
        return w.missing();
    }
    if obj as usize == v.none {
        return w.enumerator(0, "None");
    }
    let (mut t, mut val, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: an object's type is its second word; each C API call is made
    // on an object of the exact type it takes, the GIL held; the thread's
    // error state is set aside first and put back last.
    unsafe {
        let ty = *(obj as *const usize).add(1);
        (api.err_fetch)(&mut t, &mut val, &mut tb);
        let ok = if ty == v.bool_type {
            let mut over = 0;
            let b = (v.as_long)(obj, &mut over) != 0;
            w.enumerator(u64::from(b), if b { "True" } else { "False" })
        } else if ty == v.long_type {
            let mut over = 0;
            let x = (v.as_long)(obj, &mut over);
            if over == 0 {
                w.int(IntFmt::Signed, 8, x as u64)
            } else {
                w.enumerator(0, "<int beyond 64 bits>")
            }
        } else if ty == v.float_type {
            w.float(8, (v.as_double)(obj).to_bits())
        } else if ty == v.str_type {
            let mut len: isize = 0;
            let p = (api.utf8)(obj, &mut len);
            if p.is_null() || len < 0 {
                w.enumerator(0, "<str>")
            } else {
                let b = std::slice::from_raw_parts(p.cast::<u8>(), len as usize);
                cut_string(w, b, max)
            }
        } else if ty == v.bytes_type {
            let len = (v.bytes_size)(obj);
            let p = (v.bytes_data)(obj);
            if p.is_null() || len < 0 {
                w.enumerator(0, "<bytes>")
            } else {
                let b = std::slice::from_raw_parts(p.cast::<u8>(), len as usize);
                cut_string(w, b, max)
            }
        } else {
            // tp_name: the type object's 4th word (after the refcount, the
            // type and the size).
            let name = *(ty as *const *const c_char).add(3);
            let name = if name.is_null() {
                "?".into()
            } else {
                CStr::from_ptr(name).to_string_lossy()
            };
            let short = name.rsplit('.').next().unwrap_or(&name);
            w.enumerator(0, &format!("<{short} object>"))
        };
        (api.err_clear)();
        (api.err_restore)(t, val, tb);
        ok
    }
}

/// `b`, cut to `max` bytes (on a character boundary when it is text).
fn cut_string(w: &mut Writer, b: &[u8], max: usize) -> bool {
    if b.len() <= max {
        return w.string(b, false);
    }
    let mut end = max;
    while end > 0 && (b[end] & 0xc0) == 0x80 {
        end -= 1;
    }
    w.string(&b[..end], true)
}
