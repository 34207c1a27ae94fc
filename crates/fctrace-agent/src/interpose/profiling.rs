//! gprof's hooks in programs built with `-pg`: every function calls
//! `mcount` (`_mcount`; `__fentry__` with `-mfentry`) at its entry, and
//! glibc's records the arc from the caller's return address (frompc, read
//! at `8(%rbp)` by `mcount`, at the function's own return slot by
//! `__fentry__`) to the function (selfpc, the hook's return address). In a
//! traced frame that slot holds the entry stub's return site, outside the
//! program's text: glibc dropped every arc (`gprof: gmon.out file is
//! missing call-graph data`).
//!
//! The agent defines the three hooks (preloaded, it comes first in the
//! lookup of the program's `call *mcount@GOTPCREL`; attaching, the GOT
//! slots are bound to them). Each saves the registers glibc's hook saves
//! (and the vector argument registers, for the agent's own code), passes
//! the addresses of both slots (the function's return slot and the hook's
//! own) to [`record_arc`], which reads them, puts the real return address
//! (the shadow entry of that slot) in place of a return site and calls
//! glibc's `__mcount_internal(frompc, selfpc)`, the function both of
//! glibc's hooks call (not exported: found as the first direct call in
//! glibc's `mcount`). A hook call moved into a stub pushes its original
//! return address (`arch::x86_64::patch`), so selfpc needs translating
//! only when the call to the hook was traced as an import (it is not:
//! `instrument::imports`, `PROFILING_HOOKS`).

use crate::real;
use crate::runtime::frames::ret_site;
use crate::runtime::tls;
use std::sync::atomic::{AtomicU64, Ordering};

/// glibc's `__mcount_internal`; 0: not looked for yet, 1: not found.
static INTERNAL: AtomicU64 = AtomicU64::new(0);

type InternalFn = unsafe extern "C" fn(u64, u64);

/// The target of the first direct call in glibc's `mcount`.
fn find_internal() -> u64 {
    // SAFETY: only the address of the real function is taken.
    let at = unsafe { real!("mcount", unsafe extern "C" fn()) } as usize as u64;
    // SAFETY: glibc's mcount is 43 bytes of mapped code; 64 more bytes of
    // its text follow it.
    let code = unsafe { std::slice::from_raw_parts(at as *const u8, 64) };
    let mut dec = iced_x86::Decoder::with_ip(64, code, at, 0);
    for _ in 0..16 {
        let i = dec.decode();
        if i.is_invalid() || i.flow_control() == iced_x86::FlowControl::Return {
            break;
        }
        if i.flow_control() == iced_x86::FlowControl::Call
            && i.op0_kind() == iced_x86::OpKind::NearBranch64
        {
            return i.near_branch_target();
        }
    }
    crate::runtime::log::warn("gprof's mcount has an unexpected form: gmon.out gets no call arcs");
    1
}

/// The real return address of the frame whose return slot is `slot`, if
/// it holds a traced frame's return site; else `frompc` itself.
fn real_return(frompc: u64, slot: u64) -> u64 {
    let p = tls::state();
    if p.is_null() {
        return frompc;
    }
    // SAFETY: the state belongs to this thread; [base, top) holds its
    // pushed entries.
    unsafe {
        let st = &*p;
        let mut e = st.shadow_top;
        while e > st.shadow_base {
            e = e.sub(1);
            if (*e).slot == slot {
                return if ret_site((*e).func) == frompc {
                    (*e).ret
                } else {
                    frompc
                };
            }
            if (*e).slot > slot {
                break;
            }
        }
    }
    frompc
}

/// Records the arc frompc → selfpc with glibc's `__mcount_internal`,
/// both read from their stack slots (the function's return slot, the
/// hook's own) and translated: the hook's return address is an import
/// stub's return site if the call to it was traced.
extern "C" fn record_arc(from_slot: u64, self_slot: u64) {
    let _busy = tls::Busy::quiet();
    let mut f = INTERNAL.load(Ordering::Relaxed);
    if f == 0 {
        f = find_internal();
        INTERNAL.store(f, Ordering::Relaxed);
    }
    if f == 1 {
        return;
    }
    // SAFETY: both are return-address slots on this thread's stack, below
    // the hook's caller.
    let (frompc, selfpc) = unsafe {
        (
            (from_slot as *const u64).read(),
            (self_slot as *const u64).read(),
        )
    };
    let from = real_return(frompc, from_slot);
    let selfpc = real_return(selfpc, self_slot);
    // SAFETY: glibc's __mcount_internal(frompc, selfpc), as its hooks call it.
    unsafe { std::mem::transmute::<u64, InternalFn>(f)(from, selfpc) };
}

/// Saves rax, rcx, rdx, rsi, rdi, r8, r9 and xmm0-7 on a 16-byte aligned
/// area (the hook is called before or after the function's prologue, at
/// any alignment; rbx, saved first, keeps the hook's entry stack pointer
/// plus 8), calls `record_arc` with rdi = the address of the function's
/// return slot (set up by `$args`), rsi = that of the hook's own, restores
/// and returns.
macro_rules! hook {
    ($name:ident, $args:literal) => {
        /// gprof's hook (see the module's documentation).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rbx",
                "mov rbx, rsp",
                "and rsp, -16",
                "sub rsp, 192",
                "mov [rsp], rax",
                "mov [rsp + 8], rcx",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rsi",
                "mov [rsp + 32], rdi",
                "mov [rsp + 40], r8",
                "mov [rsp + 48], r9",
                "movdqa [rsp + 64], xmm0",
                "movdqa [rsp + 80], xmm1",
                "movdqa [rsp + 96], xmm2",
                "movdqa [rsp + 112], xmm3",
                "movdqa [rsp + 128], xmm4",
                "movdqa [rsp + 144], xmm5",
                "movdqa [rsp + 160], xmm6",
                "movdqa [rsp + 176], xmm7",
                "lea rsi, [rbx + 8]",
                $args,
                "call {arc}",
                "movdqa xmm7, [rsp + 176]",
                "movdqa xmm6, [rsp + 160]",
                "movdqa xmm5, [rsp + 144]",
                "movdqa xmm4, [rsp + 128]",
                "movdqa xmm3, [rsp + 112]",
                "movdqa xmm2, [rsp + 96]",
                "movdqa xmm1, [rsp + 80]",
                "movdqa xmm0, [rsp + 64]",
                "mov r9, [rsp + 48]",
                "mov r8, [rsp + 40]",
                "mov rdi, [rsp + 32]",
                "mov rsi, [rsp + 24]",
                "mov rdx, [rsp + 16]",
                "mov rcx, [rsp + 8]",
                "mov rax, [rsp]",
                "mov rsp, rbx",
                "pop rbx",
                "ret",
                arc = sym record_arc,
            );
        }
    };
}

// mcount: the function's frame pointer is set up; its return slot is
// 8(%rbp).
hook!(mcount, "lea rdi, [rbp + 8]");
hook!(_mcount, "lea rdi, [rbp + 8]");
// __fentry__: called first thing; the function's return slot is right
// above the hook's own return address.
hook!(__fentry__, "lea rdi, [rbx + 16]");
