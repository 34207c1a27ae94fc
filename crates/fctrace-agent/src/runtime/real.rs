//! Interposition: the agent is preloaded, so the program and its libraries
//! bind to functions the agent defines before the real ones. `real!` finds
//! the real function (the next definition after the agent's).

use crate::runtime::frames::in_agent;
use crate::runtime::tls;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The next definition of `name` (NUL-terminated) after the agent's (the
/// real function), or null; and whether it may go away (found in a
/// library loaded later, which `dlclose` can unload).
pub fn lookup_next(name: &str) -> (*mut c_void, bool) {
    debug_assert!(name.ends_with('\0'));
    let _busy = tls::Busy::enter();
    // The program's pending dlerror() message is its own.
    let _kept = crate::runtime::dlerror::Kept::new();
    // SAFETY: dlsym with a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if !p.is_null() {
        return (p, false);
    }
    // Loaded into a running process (`-p`), the agent is not in the global
    // scope: the objects after it in its own scope are its dependencies
    // only, and a function of another library (libstdc++'s) is found in
    // the global scope, which does not hold the agent's definition.
    // SAFETY: as above.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
    if !p.is_null() && !in_agent(p as u64) {
        return (p, false);
    }
    // Neither scope has it but the agent's own (preloaded, the agent comes
    // first in the global scope): the library arrived later through
    // `dlopen` with `RTLD_LOCAL` (a C++ plugin and its libstdc++, a Python
    // extension), in a scope of its own.
    (lookup_local(name), true)
}

/// `name` (NUL-terminated) as the objects loaded with `RTLD_LOCAL` see it:
/// each loaded object's own scope (itself and its dependencies), in load
/// order, the first definition outside the agent; or null.
fn lookup_local(name: &str) -> *mut c_void {
    let mut names: Vec<std::ffi::CString> = Vec::new();
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; data is the `names` vector below.
        unsafe {
            let names = &mut *(data as *mut Vec<std::ffi::CString>);
            let n = (*info).dlpi_name;
            if !n.is_null() && *n != 0 && !in_agent((*info).dlpi_addr.max(1)) {
                names.push(std::ffi::CStr::from_ptr(n).to_owned());
            }
        }
        0
    }
    // SAFETY: the callback only reads the info it is given. dlopen is
    // called after the walk (the walk holds the loader's list lock).
    unsafe { libc::dl_iterate_phdr(Some(each), &mut names as *mut _ as *mut c_void) };
    for n in &names {
        // SAFETY: a new reference to an object already loaded (RTLD_NOLOAD:
        // nothing is loaded, no scope changes), dropped right after the
        // lookup in its own scope.
        let p = unsafe {
            let h = libc::dlopen(n.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                continue;
            }
            let p = libc::dlsym(h, name.as_ptr().cast());
            libc::dlclose(h);
            p
        };
        if !p.is_null() && !in_agent(p as u64) {
            return p;
        }
    }
    std::ptr::null_mut()
}

/// How many objects the dynamic linker has unloaded so far.
fn unloads() -> u64 {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: as in `lookup_local`; data is the u64 below.
        unsafe { *(data as *mut u64) = (*info).dlpi_subs };
        1
    }
    // (With -l, libc's dl_iterate_phdr is traced: not the program's call.)
    let _busy = tls::Busy::quiet();
    let mut n = 0u64;
    // SAFETY: the callback writes the counter only.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut n as *mut u64 as *mut c_void) };
    n
}

/// A real function looked up once: the address (null: not yet), and
/// whether it lives in a library loaded later (`u64::MAX`: no; otherwise
/// the unload count when it was found: once another object is unloaded,
/// it is looked up again).
pub struct Real {
    pub ptr: AtomicPtr<c_void>,
    pub unloads: AtomicU64,
}

impl Real {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Real {
        Real {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            unloads: AtomicU64::new(u64::MAX),
        }
    }
}

/// The next definition of `name` after the agent's (the real function),
/// looked up once (again after an unload, if it lived in a library loaded
/// later).
pub fn resolve_next(cache: &Real, name: &'static str) -> *mut c_void {
    let p = cache.ptr.load(Ordering::Acquire);
    if !p.is_null() {
        let gen = cache.unloads.load(Ordering::Relaxed);
        if gen == u64::MAX || gen == unloads() {
            return p;
        }
    }
    let gen = unloads();
    let (p, late) = lookup_next(name);
    if p.is_null() {
        crate::runtime::log::fatal(&format!(
            "cannot find the real {}",
            name.trim_end_matches('\0')
        ));
    }
    cache
        .unloads
        .store(if late { gen } else { u64::MAX }, Ordering::Relaxed);
    cache.ptr.store(p, Ordering::Release);
    p
}

/// A real function patched in its library (`-l`) that the program calls
/// through an import the agent interposes: its entry, the untraced way in
/// (its stub's body: the moved instructions, then the rest of the
/// function), and the ids of the program's imports of it (two, packed;
/// 0: none). Its entry 0: a free or cleared slot.
struct Bypass {
    entry: AtomicU64,
    body: AtomicU64,
    ids: AtomicU64,
}

const MAX_BYPASS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const NO_BYPASS: Bypass = Bypass {
    entry: AtomicU64::new(0),
    body: AtomicU64::new(0),
    ids: AtomicU64::new(0),
};
static BYPASS: [Bypass; MAX_BYPASS] = [NO_BYPASS; MAX_BYPASS];
static BYPASS_LEN: AtomicUsize = AtomicUsize::new(0);

/// Notes that import `id` of the program reaches the agent's interposer,
/// which forwards to `entry`, a function patched in its library whose
/// untraced way in is `body`. Called while instrumenting (one thread).
pub fn add_bypass(entry: u64, body: u64, id: u32) {
    let n = BYPASS_LEN.load(Ordering::Acquire);
    let id = u64::from(id) + 1;
    if let Some(b) = BYPASS[..n]
        .iter()
        .find(|b| b.entry.load(Ordering::Relaxed) == entry)
    {
        let ids = b.ids.load(Ordering::Relaxed);
        if ids >> 32 == 0 && ids != id {
            b.ids.store(ids | id << 32, Ordering::Release);
        }
        return;
    }
    let Some(b) = BYPASS.get(n) else {
        return;
    };
    b.body.store(body, Ordering::Relaxed);
    b.ids.store(id, Ordering::Relaxed);
    b.entry.store(entry, Ordering::Release);
    BYPASS_LEN.store(n + 1, Ordering::Release);
}

/// Forgets the bypasses into `lo..hi` (a library unloaded), or all of them
/// (detaching: the stubs go).
pub fn clear_bypasses(lo: u64, hi: u64) {
    let n = BYPASS_LEN.load(Ordering::Acquire);
    for b in &BYPASS[..n] {
        let e = b.entry.load(Ordering::Relaxed);
        if e >= lo && e < hi {
            b.entry.store(0, Ordering::Release);
        }
    }
}

/// `real`, or its untraced way in when the agent forwards a call the
/// program made through its import (the innermost call the thread
/// recorded): that import's record is the call's, the library's entry
/// would record it a second time, nested (with `-l`). The calls the real
/// function makes are traced as usual.
pub fn forward_to(real: *mut c_void) -> *mut c_void {
    let n = BYPASS_LEN.load(Ordering::Acquire);
    if n == 0 {
        return real;
    }
    let Some(b) = BYPASS[..n]
        .iter()
        .find(|b| b.entry.load(Ordering::Acquire) == real as u64)
    else {
        return real;
    };
    let ids = b.ids.load(Ordering::Acquire);
    let st = tls::state();
    if st.is_null() {
        return real;
    }
    // SAFETY: a non-null state word is this thread's own state; its shadow
    // stack holds the entries below `shadow_top` down to `shadow_base`.
    let top = unsafe {
        let st = &*st;
        if st.shadow_top <= st.shadow_base {
            return real;
        }
        (*st.shadow_top.sub(1)).func as u32
    };
    let top = u64::from(top) + 1;
    if top == ids & 0xffff_ffff || top == ids >> 32 {
        let body = b.body.load(Ordering::Acquire);
        // (Cleared meanwhile: the entry.)
        if b.entry.load(Ordering::Acquire) == real as u64 {
            return body as *mut c_void;
        }
    }
    real
}

/// The real function, as a function pointer of type `$ty`; used inside an
/// `unsafe` block whose SAFETY note names the signature. Called on behalf
/// of the program's traced import of it, the real function's untraced
/// way in ([`forward_to`]).
#[macro_export]
macro_rules! real {
    ($name:expr, $ty:ty) => {{
        static REAL: $crate::runtime::real::Real = $crate::runtime::real::Real::new();
        std::mem::transmute::<*mut std::ffi::c_void, $ty>($crate::runtime::real::forward_to(
            $crate::runtime::real::resolve_next(&REAL, concat!($name, "\0")),
        ))
    }};
}
