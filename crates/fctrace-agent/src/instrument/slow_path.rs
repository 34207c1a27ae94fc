//! The slow path the generated hot path calls (`arch::x86_64::codegen`):
//! first traced call of a thread, full buffer, a return that does not
//! match the top of the shadow stack (frames that vanished), a full shadow
//! stack, calls while unwinding, and the filters' flagged entries and
//! exits. It dispatches to every layer below, so it lives above them.

use crate::interpose::{signal, unwind};
use crate::recording::filter;
use crate::runtime::shm::{self, Shm};
use crate::runtime::state::{
    ThreadState, SLOW_FLAGGED_ENTRY, SLOW_FLAGGED_EXIT, SLOW_FULL, SLOW_GROW, SLOW_INIT,
    SLOW_MISMATCH, SLOW_RESYNC, SLOW_UNWINDING,
};
use crate::runtime::{buffer, thread, tls};

/// Called by the generated code with every register saved: `xsave` is
/// the saved extended state (xsave's or fxsave's area, `codegen::ExtState`:
/// FXSAVE's legacy layout either way), `gprs` the saved general registers (rbx,
/// r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax in that order).
///
/// # Safety
/// Only the generated hot path calls this, on the thread whose state it is.
pub unsafe extern "C" fn slow_path(
    reason: u64,
    arg: u64,
    func: u64,
    xsave: *const u8,
    gprs: *const u64,
) -> u64 {
    if reason == SLOW_UNWINDING {
        return unwind::call_while_unwinding(arg, func as u32);
    }
    let _defer = signal::DeferSignals::new();
    let was_busy = tls::busy();
    // (Its system calls are marked where it makes them: `tls::Marked`.)
    let _busy = tls::Busy::quiet();
    let Some(shm) = shm::get() else { return 0 };
    match reason {
        SLOW_INIT => {
            let _marked = tls::Marked::span();
            let parent = tls::take_pending_parent();
            // A thread nobody made while traced: one that was there when
            // fctrace attached.
            let origin = if parent.is_none() && shm::attached() {
                fctrace_format::shm::ORIGIN_ATTACH
            } else {
                fctrace_format::shm::ORIGIN_THREAD
            };
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            if origin == fctrace_format::shm::ORIGIN_ATTACH && !shm::attach_traces(tid) {
                // Not one of `--tid`'s: untraced, and not missed.
                std::mem::forget(_busy);
                tls::set_busy(tls::BUSY_UNTRACED);
                return 0;
            }
            let made = thread::init_thread(shm, shm::session(), parent.unwrap_or(u32::MAX), origin);
            if made.is_some() {
                // Armed by the caller: the thread-exit hook is unwinding's.
                unwind::watch_thread_exit();
            } else {
                // Leave the thread untraced for good rather than retry on
                // every call; the recorder says how many were.
                std::mem::forget(_busy);
                tls::set_busy(tls::BUSY_UNTRACED);
                // (After the end of a recording that detaches, it is not
                // a thread the trace misses.)
                if !shm.detaching() {
                    shm.note_untraced_thread();
                }
            }
            0
        }
        SLOW_FULL => {
            // SAFETY: state is set for a thread that reached SLOW_FULL.
            let st = unsafe { &mut *tls::state() };
            buffer::switch_buffer(shm, st);
            if was_busy == 0 && shm.recorder_dead() {
                // Nobody will read anything any more: the thread's calls
                // pass through untraced from now on, at nearly their
                // native cost (as for a thread that could not be set up);
                // frames entered before still return through the agent.
                std::mem::forget(_busy);
            }
            0
        }
        SLOW_MISMATCH => {
            // SAFETY: as above.
            let st = unsafe { &mut *tls::state() };
            unwind_to(shm, st, arg);
            0
        }
        SLOW_GROW => {
            let _marked = tls::Marked::span();
            // SAFETY: as above.
            u64::from(thread::grow_shadow(unsafe { &mut *tls::state() }))
        }
        SLOW_RESYNC => {
            // SAFETY: as above.
            let st = unsafe { &mut *tls::state() };
            filter::resync(st);
            0
        }
        SLOW_FLAGGED_ENTRY => {
            // SAFETY: as above; the generated code passes its saved registers.
            unsafe { filter::flagged_entry(shm, &mut *tls::state(), func as u32, arg, xsave, gprs) }
        }
        SLOW_FLAGGED_EXIT => {
            // SAFETY: as above.
            unsafe { filter::flagged_exit(shm, &mut *tls::state(), arg, xsave) };
            0
        }
        _ => 0,
    }
}

/// Pops the shadow entries above the one whose slot is `slot`: their frames
/// vanished without returning (longjmp, exceptions, ...). Each gets an
/// `Unwind` event.
fn unwind_to(shm: &Shm, st: &mut ThreadState, slot: u64) {
    // SAFETY: entries between base and top were written by this thread.
    unsafe {
        let mut p = st.shadow_top;
        while p > st.shadow_base {
            let e = p.sub(1);
            if (*e).slot == slot {
                break;
            }
            p = e;
        }
        if p == st.shadow_base {
            crate::runtime::log::fatal(
                "a traced function returned through a stack slot the agent does not know",
            );
        }
        while st.shadow_top > p {
            let e = st.shadow_top.sub(1);
            let func = (*e).func;
            st.shadow_top = e;
            filter::unwound(shm, st, func);
        }
    }
}
