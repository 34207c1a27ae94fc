//! Keeping unwinders working: C++ exceptions, Rust panics, forced
//! unwinding (pthread_exit, cancellation) and backtraces read return
//! addresses from the stack, and a traced frame's slot holds its stub's
//! address instead of the real one.
//!
//! The agent defines the unwinder's entry points itself (it is preloaded,
//! so the program and its libraries bind to these first); each puts the
//! real return addresses back into every traced frame of the thread, then
//! calls the real function (`dlsym(RTLD_NEXT)`). Where the frames live on
//! afterwards (a backtrace), the slots are taken over again. After an
//! exception is caught, `__cxa_begin_catch` sees which frames the unwinding
//! removed (their slots lie below the catching frame's stack pointer):
//! they get an `Unwind` exit, the survivors are taken over again.
//!
//! While the unwinder runs, the thread's busy word says so
//! (`BUSY_UNWINDING`), and traced calls take a slow path: calls made by the
//! unwinder itself (personality routines, destructors' helpers deeper than
//! the unwinder) are recorded without their return being taken over, so
//! the frames being walked stay untouched; the first traced call from a
//! frame above the unwinder (a landing pad: a catch, or a cleanup before
//! `_Unwind_Resume`, Rust's `catch_unwind`) ends the unwinding state and
//! repairs the shadow stack first.

use crate::thread::{self, ShadowEntry, ThreadState};
use crate::tls;
use fctrace_format::event::EventKind;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// For each function id, the stub address its traced frames' slots hold
/// (0 for functions without one).
static RET_SITES: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
static RET_SITES_LEN: AtomicUsize = AtomicUsize::new(0);

pub fn set_ret_sites(v: Vec<u64>) {
    let v = Box::leak(v.into_boxed_slice());
    RET_SITES_LEN.store(v.len(), Ordering::Relaxed);
    RET_SITES.store(v.as_mut_ptr(), Ordering::Release);
}

fn ret_site(func: u64) -> u64 {
    let p = RET_SITES.load(Ordering::Acquire);
    if p.is_null() || func as usize >= RET_SITES_LEN.load(Ordering::Relaxed) {
        return 0;
    }
    // SAFETY: index checked against the leaked table's length.
    unsafe { *p.add(func as usize) }
}

fn entries(st: &ThreadState) -> &mut [ShadowEntry] {
    // SAFETY: [base, top) holds this thread's pushed entries.
    unsafe {
        std::slice::from_raw_parts_mut(
            st.shadow_base,
            st.shadow_top.offset_from(st.shadow_base) as usize,
        )
    }
}

/// Puts the real return address back into every traced frame's slot.
fn restore_all(st: &ThreadState) {
    for e in entries(st).iter().rev() {
        let site = ret_site(e.func);
        let slot = e.slot as *mut u64;
        // SAFETY: slots are return-address slots on this thread's stack;
        // only one still holding our stub address is written.
        unsafe {
            if site != 0 && slot.read() == site {
                slot.write(e.ret);
            }
        }
    }
}

/// Takes over again the slots of frames still alive.
fn hijack_all(st: &ThreadState) {
    for e in entries(st).iter() {
        let site = ret_site(e.func);
        let slot = e.slot as *mut u64;
        // SAFETY: as in restore_all; only a slot holding the real address
        // of this entry is written.
        unsafe {
            if site != 0 && slot.read() == e.ret {
                slot.write(site);
            }
        }
    }
}

/// `slot` is the return slot of a call being made now: traced frames whose
/// slots lie at or below it are gone (a new call at the same depth
/// replaced them). Records their exits and pops them; the others are taken
/// over again. With `keep_top`, the top entry is the call being made (it
/// was traced before the agent saw it) and stays.
pub fn repair(st: &mut ThreadState, slot: u64, keep_top: bool) {
    let Some(shm) = crate::shm::get() else { return };
    // SAFETY: entries between base and top were written by this thread.
    unsafe {
        let mut kept = None;
        if keep_top && st.shadow_top > st.shadow_base && (*st.shadow_top.sub(1)).slot == slot {
            st.shadow_top = st.shadow_top.sub(1);
            kept = Some(*st.shadow_top);
        }
        while st.shadow_top > st.shadow_base {
            let e = *st.shadow_top.sub(1);
            if e.slot > slot {
                break;
            }
            st.shadow_top = st.shadow_top.sub(1);
            thread::append(shm, st, EventKind::Unwind, e.func as u32);
        }
        if let Some(e) = kept {
            *st.shadow_top = e;
            st.shadow_top = st.shadow_top.add(1);
        }
    }
    hijack_all(st);
}

fn with_state(f: impl FnOnce(&mut ThreadState)) {
    let p = tls::state();
    if p.is_null() {
        return;
    }
    let _busy = tls::Busy::enter();
    // SAFETY: the state belongs to this thread.
    f(unsafe { &mut *p });
}

/// Before an unwinder walks the stack: real addresses everywhere, and the
/// thread marked as unwinding. `marker` is an address in the caller's frame.
fn before_unwind(marker: u64) -> u64 {
    let prev = tls::busy();
    with_state(|st| {
        restore_all(st);
        st.unwind_sp = marker;
    });
    if !tls::state().is_null() {
        tls::set_busy(tls::BUSY_UNWINDING);
    }
    prev
}

/// The real unwinder returned (it failed to find a handler, or a forced
/// unwind stopped): back to normal.
fn after_unwind(prev: u64) {
    tls::set_busy(prev);
    with_state(|st| hijack_all(st));
}

/// Slow path of a traced call while the thread is unwinding; returns
/// non-zero when the unwinding is over and the call must be retried.
pub fn call_while_unwinding(slot: u64, func: u32) -> u64 {
    let p = tls::state();
    if p.is_null() {
        return 0;
    }
    // SAFETY: the state belongs to this thread.
    let st = unsafe { &mut *p };
    tls::set_busy(1);
    let Some(shm) = crate::shm::get() else {
        return 0;
    };
    if slot > st.unwind_sp {
        repair(st, slot, false);
        tls::set_busy(0);
        return 1;
    }
    thread::append(shm, st, EventKind::Entry, func);
    thread::append(shm, st, EventKind::Exit, func);
    tls::set_busy(tls::BUSY_UNWINDING);
    0
}

fn marker() -> u64 {
    let x = 0u8;
    std::hint::black_box(&x) as *const u8 as u64
}

/// The next definition of `name` after the agent's (the real unwinder
/// function), looked up once.
fn resolve_next(cache: &AtomicPtr<c_void>, name: &'static str) -> *mut c_void {
    let mut p = cache.load(Ordering::Relaxed);
    if p.is_null() {
        let _busy = tls::Busy::enter();
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
        if p.is_null() {
            crate::fatal(&format!(
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
macro_rules! real {
    ($name:expr, $ty:ty) => {{
        static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        std::mem::transmute::<*mut c_void, $ty>(resolve_next(&REAL, concat!($name, "\0")))
    }};
}

type UnwindFn = unsafe extern "C" fn(*mut c_void) -> i32;

/// # Safety
/// Called by the C++/Rust runtime with an exception object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_RaiseException(exc: *mut c_void) -> i32 {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { real!("_Unwind_RaiseException", UnwindFn)(exc) };
    after_unwind(prev);
    r
}

/// # Safety
/// As `_Unwind_RaiseException`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume_or_Rethrow(exc: *mut c_void) -> i32 {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { real!("_Unwind_Resume_or_Rethrow", UnwindFn)(exc) };
    after_unwind(prev);
    r
}

/// # Safety
/// As `_Unwind_RaiseException`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume(exc: *mut c_void) {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    unsafe { real!("_Unwind_Resume", UnwindFn)(exc) };
    after_unwind(prev);
}

type ForcedFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> i32;

/// # Safety
/// As `_Unwind_RaiseException`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_ForcedUnwind(
    exc: *mut c_void,
    stop: *mut c_void,
    arg: *mut c_void,
) -> i32 {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { real!("_Unwind_ForcedUnwind", ForcedFn)(exc, stop, arg) };
    after_unwind(prev);
    r
}

type BacktraceFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;

/// # Safety
/// Called with a trace callback and its argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Backtrace(f: *mut c_void, arg: *mut c_void) -> i32 {
    with_state(|st| restore_all(st));
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { real!("_Unwind_Backtrace", BacktraceFn)(f, arg) };
    with_state(|st| hijack_all(st));
    r
}

type GlibcBacktraceFn = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;

/// glibc's `backtrace()` reaches libgcc_s through its own handle, not
/// through the symbol above.
///
/// # Safety
/// `buf` holds `size` pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn backtrace(buf: *mut *mut c_void, size: i32) -> i32 {
    with_state(|st| restore_all(st));
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { real!("backtrace", GlibcBacktraceFn)(buf, size) };
    with_state(|st| hijack_all(st));
    r
}

type BeginCatchFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// Receives the address of its own return slot from the naked entry
/// below: every traced frame below it is gone.
unsafe extern "C" fn begin_catch(exc: *mut c_void, sp: u64) -> *mut c_void {
    if tls::busy() == tls::BUSY_UNWINDING {
        tls::set_busy(0);
    }
    with_state(|st| repair(st, sp, true));
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    unsafe { real!("__cxa_begin_catch", BeginCatchFn)(exc) }
}

/// `__cxa_begin_catch`, called by the landing pad of the frame that
/// catches: passes its stack pointer on.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn __cxa_begin_catch() {
    core::arch::naked_asm!("mov rsi, rsp", "jmp {}", sym begin_catch);
}

/// `longjmp` and its kin leave traced frames without returning: the thread
/// is put in the unwinding state, so that its next traced call (from the
/// frame that called setjmp, above this one) first records the exits of
/// the frames left behind.
fn before_longjmp() {
    with_state(|st| st.unwind_sp = marker());
    if !tls::state().is_null() {
        tls::set_busy(tls::BUSY_UNWINDING);
    }
}

type LongjmpFn = unsafe extern "C" fn(*mut c_void, i32) -> !;

macro_rules! longjmp_interposer {
    ($($name:ident),*) => {$(
        /// # Safety
        /// Called with a buffer filled by the matching setjmp.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(env: *mut c_void, val: i32) -> ! {
            before_longjmp();
            // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
            unsafe { real!(stringify!($name), LongjmpFn)(env, val) }
        }
    )*};
}

longjmp_interposer!(longjmp, _longjmp, siglongjmp, __longjmp_chk);
