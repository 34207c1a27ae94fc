//! The program's functions the agent defines itself (it is preloaded):
//! processes and threads, signals, unwinders and longjmp, ucontext
//! switches. Uses `runtime`, `recording` and `arch`.
pub mod context;
pub mod forwarded;
pub mod process;
pub mod profiling;
pub mod signal;
pub mod unwind;

use std::ffi::CStr;

/// Attaching (every other thread stopped at `rips`): redirects `name` of
/// the loaded library `lib` in place to `hook` (`arch::x86_64::redirect`),
/// so that every caller reaches the agent, whatever its GOT says (a
/// library loaded later binds its calls when the loader relocates it,
/// after the agent's notification). Returns the trampoline running the
/// original code, or 0 (said, with `what` the function is needed for)
/// when it is missing or a thread was stopped in its first bytes.
pub fn redirect_in_place(lib: &CStr, name: &CStr, hook: u64, rips: &[u64], what: &str) -> u64 {
    let _kept = crate::runtime::dlerror::Kept::new();
    // SAFETY: dlopen of a loaded library by its soname (a new reference,
    // never closed; RTLD_NOLOAD: nothing is loaded) and dlsym with
    // NUL-terminated names.
    let target = unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if h.is_null() {
            0
        } else {
            libc::dlsym(h, name.as_ptr()) as u64
        }
    };
    let r = if target == 0 {
        Err(format!("not found in {}", lib.to_string_lossy()))
    } else {
        crate::arch::x86_64::redirect::redirect(target, hook, rips)
    };
    r.unwrap_or_else(|e| {
        crate::runtime::log::warn(&format!(
            "attaching: {} called by libraries loaded later will not {what}: {e}",
            name.to_string_lossy()
        ));
        0
    })
}
