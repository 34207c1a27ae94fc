//! Python functions in the tree: when the process has CPython's C API
//! (3.11 to 3.13, exported by the interpreter program itself, as Debian's
//! `python3.11` does, or by its `libpython3.X.so`), each call and return of
//! a Python function becomes an entry and exit event in the thread's
//! buffer, among the native events. Two ways, chosen by version:
//!
//! - **Frame evaluation** ([`frames`], PEP 523), where every Python frame
//!   the interpreter runs goes through the interpreter's frame evaluation
//!   function: 3.11.4 and later 3.11, and 3.12. The agent's evaluation
//!   function records the entry, runs the frame with CPython's own and
//!   records the exit. The interpreter runs at full speed otherwise.
//! - **A C-level profile function** elsewhere: 3.11.0 to 3.11.3 (Debian
//!   12's 3.11.2: `x[i]` on a class with a Python `__getitem__` runs it
//!   without the frame evaluation function, CPython gh-104405) and 3.13
//!   (a class's Python `__init__` is run so too), or when another frame
//!   evaluation function is installed already (a debugger, a JIT). With a
//!   profile function set, CPython runs every instruction unspecialised
//!   and makes a frame object per call: this costs about 0.5 to 0.6 of
//!   cProfile's time by itself.
//!
//! Both are installed by a runtime audit hook
//! (`PySys_AddAuditHook`, which may be called before the interpreter
//! starts: the agent's constructor does) at the interpreter's first
//! `cpython.run_*` event (the script, `-c`, `-m`, standard input, about to
//! run on the main thread, the interpreter initialised, the GIL held).
//!
//! Files, bottom first: `codes` (the C API functions used, the code
//! table naming code objects), `events` (an entry or exit written to the
//! thread's buffer), `frames` and `profile` (the two ways), this file
//! (which way, installed when).

mod codes;
mod events;
mod frames;
mod profile;
mod values;

use crate::runtime::log;
use codes::{function, load_api, symbol, Obj, API};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

type AuditFn = extern "C" fn(*const c_char, Obj, *mut c_void) -> c_int;

/// Set once the profile function is installed (the audit hook then does
/// nothing more).
static INSTALLED: AtomicBool = AtomicBool::new(false);

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

/// At start-up (preloaded): if the process has CPython's API, registers
/// the audit hook that installs the profile function once the interpreter
/// runs the program. An interpreter of another version, or without a
/// function this needs, is left alone, and the trace says why once. (Not
/// called when the environment has `FCTRACE_NO_PYTHON`: the constructor
/// reads it with the agent's own variables, taken out of the program's
/// environment.) `profile_only` (`FCTRACE_PYTHON_PROFILE`): the profile
/// function, whatever the version.
pub fn prepare(profile_only: bool) {
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
    profile::prepare(&version);
    set_layout(&version);
    if !profile_only {
        if let Err(why) = frames::prepare(&version, false) {
            log::note(&format!(
                "Python {short}: {why}: its functions are traced through a profile function \
                 (slower)"
            ));
        }
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

/// Attaching (`-p`, every other thread stopped): the frame evaluation
/// function installed (a profile function must be set by each thread,
/// holding the GIL: not from outside), on 3.11 and 3.12; on 3.11.0 to
/// 3.11.3 the trace says which Python calls it does not see.
pub fn attach() {
    let Some(version) = version() else { return };
    let short = version.split(' ').next().unwrap_or(&version).to_string();
    if let Err(why) = supported(&version) {
        log::note(&why);
        return;
    }
    let why = (|| {
        if API.get().is_none() {
            let api = load_api().map_err(|missing| format!("the process lacks {missing}"))?;
            let _ = API.set(api);
        }
        set_layout(&version);
        if !frames::prepare(&version, true)? {
            return Err(
                "attached, fctrace sees them through the frame evaluation function, \
                 which it can install from outside on 3.11 and 3.12 only"
                    .to_string(),
            );
        }
        frames::install_attached()
    })();
    if let Err(why) = why {
        log::note(&format!(
            "Python {short}: its functions are not traced ({why}); the interpreter's C \
             functions are"
        ));
    }
}

/// Where an interpreter frame holds its code object, for `values`.
fn set_layout(version: &str) {
    let at = if version.starts_with("3.11.") { 32 } else { 0 };
    values::IFRAME_CODE_AT.store(at, std::sync::atomic::Ordering::Relaxed);
}

/// Detaching: the interpreter's own frame evaluation function back.
pub fn detach() {
    frames::remove();
}

/// The runtime audit hook: at the first `cpython.run_*` event, installs
/// the frame evaluation function, or else the profile function on every
/// thread of the interpreter.
extern "C" fn audit(event: *const c_char, _args: Obj, _data: *mut c_void) -> c_int {
    if INSTALLED.load(Ordering::Relaxed) || event.is_null() {
        return 0;
    }
    // SAFETY: CPython passes the event's NUL-terminated name.
    let name = unsafe { CStr::from_ptr(event) }.to_bytes();
    if !name.starts_with(b"cpython.run_") || INSTALLED.swap(true, Ordering::AcqRel) {
        return 0;
    }
    if !frames::install() {
        profile::cover_threads();
    }
    0
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
}
