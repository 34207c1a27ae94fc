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
//!
//! Also here:
//! - `longjmp` and its kin: the stack pointer the jump restores is read
//!   from glibc's `jmp_buf`, and the frames below it get their exits at the
//!   jump (`before_longjmp`);
//! - forced unwinding started inside glibc (pthread_exit, cancellation),
//!   which reaches libgcc_s without going through the symbols above:
//!   libgcc_s's `_Unwind_ForcedUnwind` is redirected to the agent
//!   (`redirect_forced_unwind`), and a thread-specific-data destructor
//!   records the exits of the frames a dying thread leaves (`thread_exit`);
//! - backtraces never show the interposers' own frames (`trace_frame`,
//!   `backtrace`).

use crate::real;
use crate::recording::filter;
use crate::runtime::frames::{agent_range, hijack_all, in_agent, restore_all};
use crate::runtime::state::ThreadState;
use crate::runtime::{buffer, shm, thread, tls};
use fctrace_format::event::EventKind;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// `slot` is the return slot of a call being made now: traced frames whose
/// slots lie at or below it are gone (a new call at the same depth
/// replaced them). Records their exits and pops them; the others are taken
/// over again. With `keep_top`, the top entry is the call being made (it
/// was traced before the agent saw it) and stays.
pub fn repair(st: &mut ThreadState, slot: u64, keep_top: bool) {
    let Some(shm) = shm::get() else {
        return;
    };
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
            filter::unwound(shm, st, e.func);
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
    let Some(shm) = shm::get() else {
        tls::set_busy(tls::BUSY_UNWINDING);
        return 0;
    };
    if slot > st.unwind_sp {
        repair(st, slot, false);
        tls::set_busy(0);
        return 1;
    }
    if filter::records_plain(st) {
        buffer::append(shm, st, EventKind::Entry, func);
        buffer::append(shm, st, EventKind::Exit, func);
    }
    tls::set_busy(tls::BUSY_UNWINDING);
    0
}

fn marker() -> u64 {
    let x = 0u8;
    std::hint::black_box(&x) as *const u8 as u64
}

type UnwindFn = unsafe extern "C" fn(*mut c_void) -> i32;

// ---- The unwinder's entry points, redirected in place when attached --------
//
// Attached (`-p`), the agent points the GOT slots of the objects loaded
// then at its interposers (`instrument::imports::bind_interposers`), but a
// library loaded later binds its calls to libgcc_s's functions when the
// loader relocates it, after the loader's notification (`-l`): a C++
// library arriving that way would throw through its traced frames with the
// real unwinder, which meets the stubs' addresses and calls
// `std::terminate`. So, attached, libgcc_s's own entry points are
// redirected to the interposers' bodies (`arch::x86_64::redirect`, as
// `_Unwind_ForcedUnwind` is): every caller reaches the agent, whatever its
// GOT says, and the interposers forward to the trampolines running the
// original code. Detaching puts the bytes back (the journal) and forgets
// the trampolines.

/// Which of libgcc_s's functions: index into [`REDIRECTED`] and
/// [`TRAMPOLINES`].
const RAISE: usize = 0;
const RETHROW: usize = 1;
const RESUME: usize = 2;
const BACKTRACE: usize = 3;

/// libgcc_s's functions redirected when attached, with their hooks.
const REDIRECTED: [&std::ffi::CStr; 4] = [
    c"_Unwind_RaiseException",
    c"_Unwind_Resume_or_Rethrow",
    c"_Unwind_Resume",
    c"_Unwind_Backtrace",
];

/// The trampolines running the original code of the functions of
/// [`REDIRECTED`] (0: not redirected).
static TRAMPOLINES: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// The real function `$name` of type `$ty`: its trampoline when
/// redirected in place (its entry would come back to the agent).
macro_rules! original {
    ($which:expr, $name:expr, $ty:ty) => {{
        let t = TRAMPOLINES[$which].load(Ordering::Acquire);
        if t != 0 {
            std::mem::transmute::<u64, $ty>(t)
        } else {
            real!($name, $ty)
        }
    }};
}

/// Attaching (every other thread stopped at `rips`): redirects libgcc_s's
/// unwinder entry points to the agent.
pub fn redirect_unwinder(rips: &[u64]) {
    let hooks: [u64; 4] = [
        raise_exception as *const () as u64,
        resume_or_rethrow as *const () as u64,
        resume as *const () as u64,
        unwind_backtrace as *const () as u64,
    ];
    let _busy = tls::Busy::enter();
    for (i, name) in REDIRECTED.iter().enumerate() {
        let t = super::redirect_in_place(
            c"libgcc_s.so.1",
            name,
            hooks[i],
            rips,
            "see through traced frames",
        );
        TRAMPOLINES[i].store(t, Ordering::Release);
    }
    if !rips
        .iter()
        .any(|&ip| forced_target().is_some_and(|t| ip > t && ip < t + 64))
    {
        redirect_forced_unwind();
    }
}

/// Detaching, after the journal put the code back and unmapped the
/// trampolines: none of them is used again (a later attach redirects
/// anew).
pub fn detach() {
    for t in &TRAMPOLINES {
        t.store(0, Ordering::Release);
    }
    FORCED_TRAMPOLINE.store(0, Ordering::Release);
    *FORCED_DONE.lock().unwrap_or_else(|e| e.into_inner()) = false;
}

unsafe extern "C" fn raise_exception(exc: *mut c_void) -> i32 {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { original!(RAISE, "_Unwind_RaiseException", UnwindFn)(exc) };
    after_unwind(prev);
    r
}

unsafe extern "C" fn resume_or_rethrow(exc: *mut c_void) -> i32 {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    let r = unsafe { original!(RETHROW, "_Unwind_Resume_or_Rethrow", UnwindFn)(exc) };
    after_unwind(prev);
    r
}

unsafe extern "C" fn resume(exc: *mut c_void) {
    let prev = before_unwind(marker());
    // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
    unsafe { original!(RESUME, "_Unwind_Resume", UnwindFn)(exc) };
    after_unwind(prev);
}

/// # Safety
/// Called by the C++/Rust runtime with an exception object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_RaiseException(exc: *mut c_void) -> i32 {
    // SAFETY: the caller's arguments.
    unsafe { raise_exception(exc) }
}

/// # Safety
/// As `_Unwind_RaiseException`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume_or_Rethrow(exc: *mut c_void) -> i32 {
    // SAFETY: the caller's arguments.
    unsafe { resume_or_rethrow(exc) }
}

/// # Safety
/// As `_Unwind_RaiseException`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Resume(exc: *mut c_void) {
    // SAFETY: the caller's arguments.
    unsafe { resume(exc) }
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
    let r = unsafe { forced_original()(exc, stop, arg) };
    after_unwind(prev);
    r
}

// ---- Forced unwinding started inside glibc --------------------------------
//
// pthread_exit and cancellation unwind the thread with libgcc_s's
// `_Unwind_ForcedUnwind`, which glibc calls through a pointer it got from
// its own `dlopen` handle of libgcc_s: the interposer above never sees
// those calls, and an unwinder that meets a stub address where a return
// address should be stops there (destructors and `-fexceptions` cleanup
// handlers of the frames above would not run). So libgcc_s's function
// itself is redirected (`arch::x86_64::redirect`): its first instructions
// (at least 14 bytes) are moved into a trampoline that jumps back after
// them, and are replaced by an absolute jump to `forced_hook`, which puts the
// real return addresses back (as `before_unwind` does) and jumps on to the
// trampoline. This is done the first time the program calls
// `pthread_exit` or `pthread_cancel` (which load libgcc_s themselves, so it
// is loaded no earlier than without fctrace), before any thread can be
// unwound that way.

/// The trampoline running libgcc_s's original `_Unwind_ForcedUnwind`
/// (0: not redirected).
static FORCED_TRAMPOLINE: AtomicU64 = AtomicU64::new(0);

/// The real `_Unwind_ForcedUnwind`, not through the redirection.
fn forced_original() -> ForcedFn {
    let t = FORCED_TRAMPOLINE.load(Ordering::Acquire);
    if t != 0 {
        // SAFETY: the trampoline has the function's signature.
        return unsafe { std::mem::transmute::<u64, ForcedFn>(t) };
    }
    // SAFETY: the real function of this signature.
    unsafe { real!("_Unwind_ForcedUnwind", ForcedFn) }
}

/// Whether the redirection was attempted (again after a detach).
static FORCED_DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Redirects libgcc_s's `_Unwind_ForcedUnwind` to `forced_hook`, once.
fn redirect_forced_unwind() {
    let _busy = tls::Busy::enter();
    let mut done = FORCED_DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return;
    }
    *done = true;
    if let Err(e) = try_redirect() {
        crate::runtime::log::warn(&format!(
            "forced unwinding (pthread_exit, cancellation) will not see through traced frames: {e}"
        ));
    }
}

/// libgcc_s's `_Unwind_ForcedUnwind` (loading libgcc_s), if found.
fn forced_target() -> Option<u64> {
    let _kept = crate::runtime::dlerror::Kept::new();
    // SAFETY: dlopen/dlsym with NUL-terminated names; libgcc_s stays loaded
    // (the handle is never closed).
    let target = unsafe {
        let h = libc::dlopen(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            return None;
        }
        libc::dlsym(h, c"_Unwind_ForcedUnwind".as_ptr()) as u64
    };
    (target != 0).then_some(target)
}

fn try_redirect() -> Result<(), String> {
    let target = forced_target().ok_or("libgcc_s.so.1 or its _Unwind_ForcedUnwind is missing")?;
    let tramp =
        crate::arch::x86_64::redirect::redirect(target, forced_hook as *const () as u64, &[])?;
    FORCED_TRAMPOLINE.store(tramp, Ordering::Release);
    Ok(())
}

/// Where libgcc_s's `_Unwind_ForcedUnwind` now goes: real return addresses
/// back and the thread in the unwinding state (`forced_prepare`), then on
/// to the original (its trampoline is in `r11`, `arch::x86_64::redirect`)
/// with the arguments untouched. A tail jump: the unwinder starts from the
/// same frames as without fctrace.
#[unsafe(naked)]
extern "C" fn forced_hook() {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        "push r11",
        "sub rsp, 8",
        "call {prepare}",
        "add rsp, 8",
        "pop r11",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "jmp r11",
        prepare = sym forced_prepare,
    );
}

extern "C" fn forced_prepare() {
    before_unwind(marker());
}

type PthreadExitFn = unsafe extern "C" fn(*mut c_void) -> !;

/// `pthread_exit`: makes sure forced unwinding sees through traced frames,
/// then jumps to the real one (no frame of the agent is left on the stack
/// for the unwinder to walk).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn pthread_exit() {
    core::arch::naked_asm!(
        "push rdi",
        "call {prepare}",
        "pop rdi",
        "jmp rax",
        prepare = sym pthread_exit_prepare,
    );
}

extern "C" fn pthread_exit_prepare() -> u64 {
    redirect_forced_unwind();
    // SAFETY: only the address of the real function is taken.
    unsafe { real!("pthread_exit", PthreadExitFn) as usize as u64 }
}

type PthreadCancelFn = unsafe extern "C" fn(libc::pthread_t) -> i32;

/// # Safety
/// As the real `pthread_cancel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cancel(t: libc::pthread_t) -> i32 {
    redirect_forced_unwind();
    // SAFETY: forwarding the caller's argument to the real function of the same C signature.
    unsafe { real!("pthread_cancel", PthreadCancelFn)(t) }
}

// ---- Thread exit ------------------------------------------------------------
//
// A thread ended by forced unwinding leaves through glibc's internal
// longjmp back into start_thread: the last traced frames it leaves get no
// landing pad and no return. A thread-specific-data destructor (run by
// glibc when a thread ends, after its start routine is gone, never at
// exit()) records their exits.

static EXIT_KEY: AtomicU64 = AtomicU64::new(u64::MAX);

/// Arms the thread-exit hook for the calling thread (called once per
/// thread when its state is created).
pub fn watch_thread_exit() {
    static CREATE: std::sync::Once = std::sync::Once::new();
    CREATE.call_once(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: plain key creation with an extern "C" destructor.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
            EXIT_KEY.store(u64::from(key), Ordering::Release);
        }
    });
    let key = EXIT_KEY.load(Ordering::Acquire);
    if key != u64::MAX {
        // SAFETY: a key created above; the value only needs to be non-null.
        unsafe {
            libc::pthread_setspecific(key as libc::pthread_key_t, std::ptr::dangling::<c_void>())
        };
    }
}

/// The thread is ending: its start routine is gone, returned or unwound
/// (`pthread_exit`, cancellation). glibc runs this destructor from the
/// thread's first frame (`start_thread`, or `__libc_start_call_main` for a
/// main thread that called `pthread_exit`), whose callers are never traced:
/// every shadow entry left belongs to a frame that no longer exists and
/// gets its `Unwind` exit. (Their stack slots cannot tell: the forced
/// unwinding put the real return addresses back, and the destructor's own
/// frames need not overwrite them.)
extern "C" fn thread_exit(_: *mut c_void) {
    let p = tls::state();
    if p.is_null() {
        return;
    }
    let prev = tls::busy();
    if prev != 0 && prev != tls::BUSY_UNWINDING {
        return;
    }
    // SAFETY: the state belongs to this thread.
    let st = unsafe { &mut *p };
    if st.shadow_top == st.shadow_base {
        // The usual ending: everything returned.
        let _busy = (prev == 0).then(tls::Busy::enter);
        thread::release_shadow(st);
        return;
    }
    tls::set_busy(1);
    if let Some(shm) = shm::get() {
        // SAFETY: entries between base and top were written by this thread.
        unsafe {
            while st.shadow_top > st.shadow_base {
                let e = *st.shadow_top.sub(1);
                st.shadow_top = st.shadow_top.sub(1);
                filter::unwound(shm, st, e.func);
            }
        }
    }
    if prev == tls::BUSY_UNWINDING {
        hijack_all(st);
    }
    thread::release_shadow(st);
    tls::set_busy(0);
}

type BacktraceFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;
type GetIpFn = unsafe extern "C" fn(*mut c_void) -> u64;

/// The program's callback and argument, and whether the walk is still in
/// the agent's own frames (the interposer that called the real function).
struct TraceArg {
    f: unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32,
    arg: *mut c_void,
    leading: bool,
}

/// Passes every frame to the program's callback except the leading ones
/// whose code is the agent's.
unsafe extern "C" fn trace_frame(ctx: *mut c_void, data: *mut c_void) -> i32 {
    // SAFETY: data is the TraceArg of the _Unwind_Backtrace call below,
    // alive for the whole walk.
    let t = unsafe { &mut *(data as *mut TraceArg) };
    if t.leading {
        // SAFETY: ctx is the unwinder's context for this frame.
        let ip = unsafe { real!("_Unwind_GetIP", GetIpFn)(ctx) };
        if in_agent(ip) {
            return 0; // _URC_NO_REASON: go on
        }
        t.leading = false;
    }
    // SAFETY: the program's own callback with its own argument.
    unsafe { (t.f)(ctx, t.arg) }
}

/// # Safety
/// Called with a trace callback and its argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_Backtrace(f: *mut c_void, arg: *mut c_void) -> i32 {
    // SAFETY: the caller's arguments.
    unsafe { unwind_backtrace(f, arg) }
}

unsafe extern "C" fn unwind_backtrace(f: *mut c_void, arg: *mut c_void) -> i32 {
    with_state(|st| restore_all(st));
    agent_range();
    let r = if f.is_null() {
        // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
        unsafe { original!(BACKTRACE, "_Unwind_Backtrace", BacktraceFn)(f, arg) }
    } else {
        let mut t = TraceArg {
            // SAFETY: a non-null _Unwind_Trace_Fn.
            f: unsafe {
                std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32,
                >(f)
            },
            arg,
            leading: true,
        };
        // SAFETY: the real function with our callback, whose argument
        // outlives the walk.
        unsafe {
            original!(BACKTRACE, "_Unwind_Backtrace", BacktraceFn)(
                trace_frame as *mut c_void,
                &mut t as *mut TraceArg as *mut c_void,
            )
        }
    };
    with_state(|st| hijack_all(st));
    r
}

type GlibcBacktraceFn = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;

/// Entries of a backtrace taken on the stack; larger requests use the heap.
const BT_STACK: usize = 256;

/// glibc's `backtrace()` reaches libgcc_s through its own handle, not
/// through the symbol above. Its first frame would be this interposer's:
/// the real function fills a buffer one entry larger, and the leading
/// entries inside the agent are dropped, so the program gets the frames
/// (and the count) it gets without fctrace.
///
/// # Safety
/// `buf` holds `size` pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn backtrace(buf: *mut *mut c_void, size: i32) -> i32 {
    with_state(|st| restore_all(st));
    agent_range();
    let r = if size <= 0 || buf.is_null() {
        // SAFETY: forwarding the caller's arguments to the real function of the same C signature.
        unsafe { real!("backtrace", GlibcBacktraceFn)(buf, size) }
    } else {
        let want = size as usize + 1;
        let mut on_stack = [std::ptr::null_mut::<c_void>(); BT_STACK + 1];
        let mut on_heap = Vec::new();
        let tmp: &mut [*mut c_void] = if want <= on_stack.len() {
            &mut on_stack[..want]
        } else {
            let _busy = tls::Busy::enter();
            on_heap.resize(want, std::ptr::null_mut());
            &mut on_heap[..]
        };
        // SAFETY: tmp holds `want` pointers.
        let n = unsafe { real!("backtrace", GlibcBacktraceFn)(tmp.as_mut_ptr(), want as i32) };
        let n = n.clamp(0, want as i32) as usize;
        let skip = tmp[..n]
            .iter()
            .take_while(|&&ip| in_agent(ip as u64))
            .count();
        let keep = (n - skip).min(size as usize);
        // SAFETY: buf holds `size` pointers and keep <= size.
        unsafe { std::ptr::copy_nonoverlapping(tmp[skip..].as_ptr(), buf, keep) };
        if !on_heap.is_empty() {
            let _busy = tls::Busy::enter();
            drop(on_heap);
        }
        keep as i32
    };
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

/// glibc's x86_64 `__jmp_buf` (sysdeps/x86_64/jmpbuf-offsets.h): rbx,
/// rbp, r12, r13, r14, r15, rsp, pc; rbp, rsp and pc are stored mangled
/// with the thread's pointer guard. `sigjmp_buf` starts with the same
/// array, and so do the buffers of `_longjmp`, `siglongjmp` and
/// `__longjmp_chk`.
const JB_RSP: usize = 6;

/// Offset of `pointer_guard` in glibc's x86_64 TCB (`tcbhead_t`).
const POINTER_GUARD: u64 = 0x30;

/// Undoes glibc's `PTR_MANGLE` (`xor` with the pointer guard, then
/// `rol 0x11`).
fn demangle(v: u64) -> u64 {
    let guard: u64;
    // SAFETY: reads the pointer guard from this thread's TCB (fs:0x30); no
    // memory is written.
    unsafe {
        core::arch::asm!(
            "mov {}, qword ptr fs:[{off}]",
            out(reg) guard,
            off = const POINTER_GUARD,
            options(nostack, readonly, preserves_flags)
        );
    }
    v.rotate_right(0x11) ^ guard
}

/// The farthest a `longjmp` is believed to go up the stack; a demangled
/// stack pointer farther than that means the buffer is not laid out as
/// expected.
const MAX_JUMP: u64 = 1 << 32;

/// `longjmp` and its kin leave traced frames without returning. The stack
/// pointer the jump restores is read from the buffer: every shadow entry
/// whose slot lies below it belongs to a frame the jump leaves (the
/// longjmp call's own among them), and gets its `Unwind` exit now, before
/// the jump. If the buffer does not give a stack pointer above the current
/// one (not glibc's layout, or a jump to another stack), the thread is put
/// in the unwinding state instead, so that its next traced call (from the
/// frame that called setjmp, above this one) records the exits of the
/// frames left behind (`call_while_unwinding`).
fn before_longjmp(env: *const u64) {
    let p = tls::state();
    if p.is_null() || env.is_null() {
        return;
    }
    let busy = tls::busy();
    if busy != 0 && busy != tls::BUSY_UNWINDING {
        return; // the agent's own code, or fork in progress: not ours to record
    }
    let here = marker();
    // SAFETY: the buffer was filled by setjmp (the real longjmp is about
    // to read the same word).
    let target = demangle(unsafe { env.add(JB_RSP).read() });
    // SAFETY: the state belongs to this thread.
    let st = unsafe { &mut *p };
    if target > here && target - here < MAX_JUMP {
        tls::set_busy(1);
        if let Some(shm) = shm::get() {
            // SAFETY: entries between base and top were written by this thread.
            unsafe {
                while st.shadow_top > st.shadow_base {
                    let e = *st.shadow_top.sub(1);
                    if e.slot >= target {
                        break;
                    }
                    st.shadow_top = st.shadow_top.sub(1);
                    filter::unwound(shm, st, e.func);
                }
            }
        }
        if busy == tls::BUSY_UNWINDING {
            // An unwinder had put the real return addresses back; it is
            // abandoned: the surviving frames are taken over again.
            hijack_all(st);
        }
        tls::set_busy(0);
    } else {
        st.unwind_sp = here;
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
            // The real function first, while the program's call of it is
            // the innermost (with -l it is then entered untraced: that
            // call is recorded once).
            // SAFETY: the real function of the same C signature.
            let real = unsafe { real!(stringify!($name), LongjmpFn) };
            before_longjmp(env as *const u64);
            // SAFETY: forwarding the caller's arguments.
            unsafe { real(env, val) }
        }
    )*};
}

longjmp_interposer!(longjmp, _longjmp, siglongjmp, __longjmp_chk);
