//! Interposition: the agent is preloaded, so the program and its libraries
//! bind to functions the agent defines before the real ones. `real!` finds
//! the real function (the next definition after the agent's).

use crate::runtime::tls;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The next definition of `name` after the agent's (the real function),
/// looked up once.
pub fn resolve_next(cache: &AtomicPtr<c_void>, name: &'static str) -> *mut c_void {
    let mut p = cache.load(Ordering::Relaxed);
    if p.is_null() {
        let _busy = tls::Busy::enter();
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
        if p.is_null() {
            // Loaded into a running process (`-p`), the agent is not in
            // the global scope: the objects after it in its own scope are
            // its dependencies only, and a function of another library
            // (libstdc++'s) is found in the global scope, which does not
            // hold the agent's definition.
            // SAFETY: as above.
            p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
        }
        if p.is_null() {
            crate::runtime::log::fatal(&format!(
                "cannot find the real {}",
                name.trim_end_matches('\0')
            ));
        }
        cache.store(p, Ordering::Relaxed);
    }
    p
}

/// The real function, as a function pointer of type `$ty`; used inside an
/// `unsafe` block whose SAFETY note names the signature.
#[macro_export]
macro_rules! real {
    ($name:expr, $ty:ty) => {{
        static REAL: std::sync::atomic::AtomicPtr<std::ffi::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        std::mem::transmute::<*mut std::ffi::c_void, $ty>($crate::runtime::real::resolve_next(
            &REAL,
            concat!($name, "\0"),
        ))
    }};
}
