//! Sanitizer runtimes (AddressSanitizer, ThreadSanitizer, UBSan, LSan)
//! collect call stacks for their reports, and a traced frame's return slot
//! holds its stub's address, not the caller's: reports would show
//! `#1 0x... (<unknown module>)`. Their stack collectors are redirected to
//! the agent (`arch::x86_64::redirect`), which makes what they record the
//! real return addresses:
//!
//! - `__sanitizer::BufferedStackTrace::Unwind(max_depth, pc, bp, context,
//!   stack_top, stack_bottom, request_fast)`, which every stack a runtime
//!   collects goes through (every runtime has its own copy, a local
//!   symbol found in the runtime's symbol table or its debug file): ASan's
//!   and LSan's stacks at each `malloc` and `free`, every report's stack
//!   (the fast frame-pointer walk, `UnwindFast`, and the slow one through
//!   `_Unwind_Backtrace`, `UnwindSlow`), UBSan's `print_stacktrace=1`. The hook
//!   puts the real return addresses back into every traced frame of the
//!   thread, translates a stub address given as the starting pc, runs the
//!   walk, and takes the slots over again (`runtime::frames`).
//! - `__tsan_func_entry(caller_pc)`: the compiler's call at the entry of
//!   every instrumented function passes the return address it reads from
//!   its own slot, which the entry stub has just taken over: the hook
//!   hands the real one on (TSan's reports print its own shadow stack).
//!
//! The calls the program makes into a sanitizer runtime (interceptors,
//! `__asan_report_*`, `__tsan_read4`...) are entry-only (`imports::import_mode`), so
//! the caller pc each reads from its return slot is already real.

use super::module_file;
use crate::arch::x86_64::redirect::redirect;
use crate::runtime::frames::{hijack_top, real_return, restore_top};
use crate::runtime::log::warn;
use crate::runtime::tls;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

const UNWIND: &str = "_ZN11__sanitizer18BufferedStackTrace6UnwindEjmmPvmmb";
const TSAN_FUNC_ENTRY: &str = "__tsan_func_entry";

/// The loaded modules that are sanitizer runtimes: (path, load bias).
fn runtimes() -> Vec<(String, u64)> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; data is the Vec below.
        unsafe {
            let v = &mut *(data as *mut Vec<(String, u64)>);
            let info = &*info;
            if info.dlpi_name.is_null() {
                return 0;
            }
            let name = CStr::from_ptr(info.dlpi_name).to_bytes();
            if fctrace_symbols::sanitizer::is_runtime(name) {
                v.push((String::from_utf8_lossy(name).into_owned(), info.dlpi_addr));
            }
        }
        0
    }
    let mut v: Vec<(String, u64)> = Vec::new();
    // SAFETY: the callback only reads what dl_iterate_phdr passes it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut v as *mut _ as *mut c_void) };
    v
}

/// Redirects the stack collectors of every sanitizer runtime loaded: at
/// start-up, before the program's code runs, or when attaching, while the
/// process's other threads are stopped at `stopped` (the journal notes
/// the bytes replaced: detaching puts them back).
pub fn install(stopped: &[u64]) {
    let _busy = tls::Busy::enter();
    for (path, base) in runtimes() {
        let found = module_file::with_analysis_of(&path, true, false, false, |_, funcs| {
            let addr = |name: &str| {
                funcs
                    .iter()
                    .find(|f| f.name == name && f.size > 0)
                    .map(|f| base + f.addr)
            };
            Ok((addr(UNWIND), addr(TSAN_FUNC_ENTRY)))
        });
        let (unwind, entry) = match found {
            Ok(v) => v,
            Err(e) => {
                warn(&format!(
                    "{path}: {e}: its reports will show fctrace's stub addresses"
                ));
                continue;
            }
        };
        let result = match unwind {
            Some(at) => next_unwind_hook()
                .ok_or_else(|| "too many sanitizer runtimes".to_string())
                .and_then(|(hook, slot)| {
                    let t = redirect(at, hook, stopped)?;
                    slot.store(t, Ordering::Release);
                    Ok(())
                }),
            None => Err(format!("no {UNWIND} in its symbols")),
        };
        if let Err(e) = result {
            warn(&format!(
                "{path}: stacks it collects will show fctrace's stub addresses ({e})"
            ));
        }
        if let Some(at) = entry {
            if let Err(e) = redirect(at, func_entry_hook as *const () as u64, stopped) {
                warn(&format!(
                    "{path}: its reports' stacks will show fctrace's stub addresses \
                     (__tsan_func_entry: {e})"
                ));
            }
        }
    }
}

/// Detaching: the redirections are undone (the journal) and their
/// trampolines unmapped; their hooks are free for a later attach.
pub fn detach() {
    for t in &UNWIND_TRAMPOLINES {
        t.store(0, Ordering::Release);
    }
}

// ---- BufferedStackTrace::Unwind -------------------------------------------

/// `BufferedStackTrace::Unwind(this, max_depth, pc, bp, context,
/// stack_top, stack_bottom, request_fast)`: the last two on the stack.
type UnwindFn = unsafe extern "C" fn(*mut c_void, u64, u64, u64, *mut c_void, u64, u64, u64);

/// One hook per redirected runtime (ASan and UBSan are often loaded
/// together), each with its trampoline: ordinary functions, so that the
/// slow walk (`_Unwind_Backtrace`, from inside the original) passes
/// through their frames by their unwind information.
static UNWIND_TRAMPOLINES: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

macro_rules! unwind_hook {
    ($name:ident, $k:literal) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $name(
            this: *mut c_void,
            max: u64,
            pc: u64,
            bp: u64,
            ctx: *mut c_void,
            top: u64,
            bottom: u64,
            fast: u64,
        ) {
            let t = UNWIND_TRAMPOLINES[$k].load(Ordering::Acquire);
            // SAFETY: the trampoline runs the original function, which
            // has this signature; the arguments are the caller's.
            unsafe {
                around_walk(pc, max as u32, |pc| {
                    std::mem::transmute::<u64, UnwindFn>(t)(
                        this, max, pc, bp, ctx, top, bottom, fast,
                    )
                })
            }
        }
    };
}
unwind_hook!(unwind_hook_0, 0);
unwind_hook!(unwind_hook_1, 1);
unwind_hook!(unwind_hook_2, 2);
unwind_hook!(unwind_hook_3, 3);

fn next_unwind_hook() -> Option<(u64, &'static AtomicU64)> {
    let hooks: [UnwindFn; 4] = [unwind_hook_0, unwind_hook_1, unwind_hook_2, unwind_hook_3];
    let k = UNWIND_TRAMPOLINES
        .iter()
        .position(|t| t.load(Ordering::Relaxed) == 0)?;
    Some((hooks[k] as *const () as u64, &UNWIND_TRAMPOLINES[k]))
}

/// Runs a stack walk starting at `pc` that records at most `max_depth`
/// frames, with the real return addresses in the slots of the innermost
/// traced frames it can reach (`max_depth` of them and two more: a walk
/// reads the slot of a frame it skips as the starting pc's, and one past
/// the last frame it keeps; ASan walks 30 frames at every `malloc` and
/// `free`, and a deep program's whole shadow stack would cost more), and
/// the thread busy (calls the walk makes are the sanitizer's: not
/// recorded, their slots left alone).
fn around_walk(pc: u64, max_depth: u32, walk: impl FnOnce(u64)) {
    let p = tls::state();
    if p.is_null() {
        return walk(pc);
    }
    let _busy = tls::Busy::quiet();
    // SAFETY: the state belongs to this thread.
    let st = unsafe { &*p };
    let n = max_depth as usize + 2;
    let pc = real_return(st, pc);
    restore_top(st, n);
    walk(pc);
    hijack_top(st, n);
}

// ---- __tsan_func_entry ---------------------------------------------------

/// Where TSan's `__tsan_func_entry` now goes: its argument translated
/// (`func_entry_pc`), then on to the original (the trampoline in `r11`) by
/// a tail jump.
#[unsafe(naked)]
extern "C" fn func_entry_hook() {
    core::arch::naked_asm!(
        "push r11",
        "call {translate}",
        "pop r11",
        "mov rdi, rax",
        "jmp r11",
        translate = sym func_entry_pc,
    );
}

/// The real return address for a caller pc read from a traced frame's
/// slot (the stub's address); any other pc as it is.
extern "C" fn func_entry_pc(pc: u64) -> u64 {
    let p = tls::state();
    if p.is_null() {
        return pc;
    }
    // SAFETY: the state belongs to this thread; only read.
    real_return(unsafe { &*p }, pc)
}
