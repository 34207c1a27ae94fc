//! ucontext coroutines: `swapcontext` (and `setcontext`) move a thread from
//! one stack to another, so the frames of several contexts interleave on
//! the thread's one shadow stack.
//!
//! The thread keeps a *chain* of switches: each `swapcontext` that leaves
//! a context C for another one pushes a link (C's `ucontext_t` address, and
//! the part of the shadow stack that holds C's frames, its *segment*). The
//! context switched to runs on top: its calls nest under C's open
//! `swapcontext` call in the tree. While C is switched out, the return
//! slots of its traced frames hold their real return addresses again (its
//! stack is live at that moment: C is the one running), so a suspended
//! context never depends on the agent's state: it can be resumed on
//! another thread, or abandoned forever, without harm.
//!
//! When C is resumed (its `swapcontext` returns, whatever switched to it:
//! a `swapcontext`, a `setcontext`, or glibc's `__start_context` going to
//! `uc_link` when a `makecontext` function returns), either
//! - C's link is on this thread's chain: every frame above C's segment
//!   belongs to contexts switched to after C and is closed in the tree
//!   (an `Unwind` exit, now); C's slots are taken over again and its
//!   `swapcontext` call records its exit normally; or
//! - C was closed that way earlier (a context lower in the chain resumed
//!   in between), or it was switched out on another thread: its frames
//!   return to their callers without recording an exit (their exit was
//!   recorded when they were closed), and its new calls nest under the
//!   `swapcontext` that resumed it.
//!
//! So each context's calls stay well nested, every call is recorded once,
//! and a frame's `(unwound)` exit marks the moment its context was left
//! for good, as far as this part of the tree is concerned.

use crate::recording::filter;
use crate::runtime::frames::ret_site;
use crate::runtime::shm;
use crate::runtime::state::{ShadowEntry, ThreadState};
use crate::runtime::tls;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// Links kept per thread; deeper chains (contexts that keep switching to
/// fresh contexts without ever coming back) stop adding links: those
/// contexts then resume as closed ones.
const MAX_LINKS: usize = 256;

#[derive(Clone, Copy, Default)]
struct Link {
    /// Address of the `ucontext_t` the context was saved into.
    key: u64,
    /// Its segment of the shadow stack: `[base, top)`, as indices.
    base: usize,
    top: usize,
}

/// A thread's chain of switched-out contexts.
pub struct Chain {
    len: usize,
    /// Index where the running context's segment begins.
    cur_base: usize,
    links: [Link; MAX_LINKS],
}

fn top_index(st: &ThreadState) -> usize {
    // SAFETY: top and base point into the same shadow stack mapping.
    unsafe { st.shadow_top.offset_from(st.shadow_base) as usize }
}

fn entry(st: &ThreadState, i: usize) -> *mut ShadowEntry {
    // SAFETY: callers pass indices below the top of the shadow stack.
    unsafe { st.shadow_base.add(i) }
}

fn chain(st: &mut ThreadState) -> &'static mut Chain {
    // The state holds the chain as an opaque pointer: its type is this
    // layer's, not the state's.
    if st.contexts.is_null() {
        // Made in place, zeroed (an empty chain): built on the stack and
        // moved (`Box::new`, as some builds compile it), its 6 KiB ran
        // past a coroutine's small stack, where the first switch after an
        // attach happens.
        let layout = std::alloc::Layout::new::<Chain>();
        // SAFETY: a non-zero-sized layout; all zero bytes are a valid
        // `Chain` (zero lengths, default links); the allocation is never
        // freed (one per thread).
        let c = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Chain>();
        if c.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        st.contexts = c.cast();
    }
    // SAFETY: allocated above and never freed (one per thread); only this
    // thread uses it, and callers hold one reference at a time.
    unsafe { &mut *st.contexts.cast::<Chain>() }
}

/// Drops what the shadow stack no longer holds: entries may have been
/// popped by unwinding (longjmp, exceptions) since the last switch.
fn prune(c: &mut Chain, top: usize) {
    while c.len > 0 && c.links[c.len - 1].top > top {
        c.len -= 1;
    }
    c.cur_base = c.cur_base.min(top);
    if c.len > 0 {
        c.cur_base = c.cur_base.max(c.links[c.len - 1].top);
    }
}

/// Marks the function id of a switched-out frame whose slot holds the real
/// return address again. With it the id indexes no return site, so the
/// unwinding code (`runtime::frames::restore_all`, `hijack_all`) leaves the frame
/// alone: a suspended context's stack may be running on another thread, or
/// be reused. Events take the id's low 32 bits, which the mark leaves as
/// they are.
const SUSPENDED: u64 = 1 << 63;

/// Puts the real return address back into the slots of entries `[lo, hi)`
/// whose frames are live above `sp`, and marks those entries suspended.
/// Innermost first: a tail call shares its caller's slot, and the slot
/// goes back through each entry's saved value in turn.
fn restore_range(st: &ThreadState, lo: usize, hi: usize, sp: u64) {
    for i in (lo..hi).rev() {
        let p = entry(st, i);
        // SAFETY: i < top; the entry was written by this thread.
        let e = unsafe { *p };
        if e.func & SUSPENDED != 0 {
            continue;
        }
        let site = ret_site(e.func);
        let slot = e.slot as *mut u64;
        // SAFETY: a slot above sp is a return-address slot of a live frame
        // of the running stack; only one still holding our stub is written.
        unsafe {
            if site != 0 && e.slot > sp && slot.read() == site {
                slot.write(e.ret);
                (*p).func = e.func | SUSPENDED;
            }
        }
    }
}

/// Takes over again the slots of the suspended entries `[lo, hi)` (frames
/// live above `sp` on the running stack), outermost first.
fn hijack_range(st: &ThreadState, lo: usize, hi: usize, sp: u64) {
    for i in lo..hi {
        let p = entry(st, i);
        // SAFETY: as in restore_range.
        let e = unsafe { *p };
        if e.func & SUSPENDED == 0 {
            continue;
        }
        let func = e.func & !SUSPENDED;
        let site = ret_site(func);
        let slot = e.slot as *mut u64;
        // SAFETY: as in restore_range; only a slot holding this entry's
        // real return address is written.
        unsafe {
            (*p).func = func;
            if e.slot > sp && slot.read() == e.ret {
                slot.write(site);
            }
        }
    }
}

/// The thread's state, if it is traced and not inside the agent.
fn traced_state() -> Option<&'static mut ThreadState> {
    let p = tls::state();
    if p.is_null() || tls::busy() != 0 {
        return None;
    }
    // SAFETY: the state belongs to this thread.
    Some(unsafe { &mut *p })
}

/// Before the real `swapcontext(oucp, ...)`: the running context becomes
/// a link of the chain, its frames' slots get their real return addresses.
/// Returns whether the thread is traced.
fn switch_out(oucp: u64, sp: u64) -> bool {
    let Some(st) = traced_state() else {
        return false;
    };
    let _busy = tls::Busy::enter();
    let top = top_index(st);
    let c = chain(st);
    prune(c, top);
    let base = c.cur_base;
    if c.len < MAX_LINKS {
        c.links[c.len] = Link {
            key: oucp,
            base,
            top,
        };
        c.len += 1;
    }
    c.cur_base = top;
    restore_range(st, base, top, sp);
    true
}

/// After the real `swapcontext(oucp, ...)` returned: the context saved in
/// `oucp` runs again (see the module documentation).
fn resumed(oucp: u64, sp: u64) {
    let p = tls::state();
    if p.is_null() {
        return;
    }
    // A setcontext to this context put the thread in the unwinding state;
    // the chain says exactly which frames were left.
    let was_unwinding = tls::busy() == tls::BUSY_UNWINDING;
    if was_unwinding {
        tls::set_busy(0);
    }
    if tls::busy() != 0 {
        return;
    }
    let _busy = tls::Busy::enter();
    // SAFETY: the state belongs to this thread.
    let st = unsafe { &mut *p };
    let Some(shm) = shm::get() else {
        return;
    };
    let top = top_index(st);
    let c = chain(st);
    prune(c, top);
    let found = (0..c.len).rev().find(|&j| c.links[j].key == oucp);
    let Some(j) = found.filter(|&j| {
        // The segment must be frames of the stack running now.
        let l = c.links[j];
        // SAFETY: the indices are below the top (pruned above).
        (l.base..l.top).all(|i| unsafe { (*entry(st, i)).slot } > sp)
    }) else {
        if was_unwinding {
            tls::set_busy(tls::BUSY_UNWINDING);
            std::mem::forget(_busy);
        }
        return;
    };
    let link = c.links[j];
    c.len = j;
    c.cur_base = link.base;
    // Frames of the contexts switched to since: closed now.
    while top_index(st) > link.top {
        // SAFETY: the shadow stack is not empty above link.top.
        unsafe {
            st.shadow_top = st.shadow_top.sub(1);
            let func = (*st.shadow_top).func;
            filter::unwound(shm, st, func);
        }
    }
    hijack_range(st, link.base, link.top, sp);
}

fn marker() -> u64 {
    let x = 0u8;
    std::hint::black_box(&x) as *const u8 as u64
}

type SwapFn = unsafe extern "C" fn(*mut c_void, *const c_void) -> i32;
type SetFn = unsafe extern "C" fn(*const c_void) -> i32;

/// The trampolines running libc's own `swapcontext` and `setcontext`
/// when they are redirected in place to the agent (attached: a library
/// loaded later binds its calls to libc's; see `super::redirect_in_place`);
/// 0: not redirected.
static SWAP_TRAMPOLINE: AtomicU64 = AtomicU64::new(0);
static SET_TRAMPOLINE: AtomicU64 = AtomicU64::new(0);

/// Attaching (every other thread stopped at `rips`): libc's `swapcontext`
/// and `setcontext` go to the agent, whoever calls them.
pub fn redirect_switches(rips: &[u64]) {
    let _busy = tls::Busy::enter();
    let what = "keep the shadow stacks of their contexts apart";
    let t = super::redirect_in_place(
        c"libc.so.6",
        c"swapcontext",
        swap_context as *const () as u64,
        rips,
        what,
    );
    SWAP_TRAMPOLINE.store(t, Ordering::Release);
    let t = super::redirect_in_place(
        c"libc.so.6",
        c"setcontext",
        set_context as *const () as u64,
        rips,
        what,
    );
    SET_TRAMPOLINE.store(t, Ordering::Release);
}

/// Detaching, after the journal put libc's code back and unmapped the
/// trampolines.
pub fn detach() {
    SWAP_TRAMPOLINE.store(0, Ordering::Release);
    SET_TRAMPOLINE.store(0, Ordering::Release);
}

/// # Safety
/// Called by the program with two valid `ucontext_t` pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn swapcontext(oucp: *mut c_void, ucp: *const c_void) -> i32 {
    // SAFETY: the caller's arguments.
    unsafe { swap_context(oucp, ucp) }
}

unsafe extern "C" fn swap_context(oucp: *mut c_void, ucp: *const c_void) -> i32 {
    let sp = marker();
    let traced = switch_out(oucp as u64, sp);
    let t = SWAP_TRAMPOLINE.load(Ordering::Acquire);
    // SAFETY: forwarding the caller's arguments to the real function of
    // the same C signature (its trampoline when redirected in place).
    let r = unsafe {
        if t != 0 {
            std::mem::transmute::<u64, SwapFn>(t)(oucp, ucp)
        } else {
            crate::real!("swapcontext", SwapFn)(oucp, ucp)
        }
    };
    if traced {
        resumed(oucp as u64, marker());
    }
    r
}

/// `setcontext` never returns: the frames of the running context that lie
/// below the stack pointer it restores are left (getcontext + setcontext
/// used like setjmp + longjmp; or every frame of this context when the
/// target's stack lies above this one). They get their `Unwind` exit now,
/// and their slots their real return addresses back (this stack is the
/// running one), in case a state saved in them by `getcontext` is resumed
/// later. Frames of other contexts (the chain's links) are not touched:
/// when the target is a context saved by `swapcontext`, its resumption
/// settles the chain.
fn leave_frames(target_sp: u64, sp: u64) {
    let Some(st) = traced_state() else { return };
    let _busy = tls::Busy::enter();
    let Some(shm) = shm::get() else {
        return;
    };
    let top = top_index(st);
    let c = chain(st);
    prune(c, top);
    let base = c.cur_base;
    while top_index(st) > base {
        // SAFETY: the shadow stack holds entries above base.
        unsafe {
            let e = *st.shadow_top.sub(1);
            if e.slot >= target_sp {
                break;
            }
            restore_range(st, top_index(st) - 1, top_index(st), sp);
            st.shadow_top = st.shadow_top.sub(1);
            filter::unwound(shm, st, e.func);
        }
    }
}

/// # Safety
/// Called by the program with a valid `ucontext_t` pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcontext(ucp: *const c_void) -> i32 {
    // SAFETY: the caller's argument.
    unsafe { set_context(ucp) }
}

unsafe extern "C" fn set_context(ucp: *const c_void) -> i32 {
    // SAFETY: ucp points to a ucontext_t filled by getcontext/swapcontext/
    // makecontext; only its saved stack pointer is read.
    let target_sp =
        unsafe { (*(ucp as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RSP as usize] }
            as u64;
    leave_frames(target_sp, marker());
    let t = SET_TRAMPOLINE.load(Ordering::Acquire);
    // SAFETY: forwarding the caller's argument to the real function of the
    // same C signature (its trampoline when redirected in place).
    unsafe {
        if t != 0 {
            std::mem::transmute::<u64, SetFn>(t)(ucp)
        } else {
            crate::real!("setcontext", SetFn)(ucp)
        }
    }
}
