//! Instruction sequences that several blocks of the common block share:
//! the call into the slow path with every register and the extended state
//! saved, a record appended to the thread's buffer, the checks of the
//! generated flagged entries, a shadow entry filled, the depth of the
//! recorded calls.

use super::interface::{ExtState, Params};
use crate::runtime::state::{
    OFF_BUF, OFF_GEN, OFF_HIDDEN, OFF_SHADOW_BASE, OFF_SHADOW_END, SHADOW_ENTRY_SIZE, SLOW_FULL,
};
use fctrace_format::event::RawEvent;
use iced_x86::code_asm::*;
use iced_x86::IcedError;

/// Saves every caller-saved register and the whole extended state, calls
/// `slow_path(reason, arg)`, restores; ZF is clear when it returned non-zero. `arg_slot` (if any) passes the
/// stack address `rsp_at_call_site + arg_slot` as the argument.
pub(super) fn slow_call(
    a: &mut CodeAssembler,
    p: &Params,
    reason: u64,
    arg_slot: Option<i32>,
) -> Result<(), IcedError> {
    for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rbx] {
        a.push(r)?;
    }
    a.mov(rbx, rsp)?;
    save_ext_state(a, p.ext_state)?;
    a.mov(rdi, reason)?;
    match arg_slot {
        Some(off) => a.lea(rsi, qword_ptr(rbx + (80 + off)))?,
        None => a.xor(esi, esi)?,
    }
    a.mov(rdx, qword_ptr(rbx + 72))?; // the saved rax: the function id on entry paths
    a.mov(rcx, rsp)?; // the extended state's area
    a.mov(r8, rbx)?; // the saved general registers
    a.mov(rax, p.slow_path)?;
    a.call(rax)?;
    // The result is passed back in ZF (nothing below changes the flags).
    a.test(rax, rax)?;
    restore_ext_state(a, p.ext_state)?;
    a.mov(rsp, rbx)?;
    for r in [rbx, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
        a.pop(r)?;
    }
    Ok(())
}

/// Reserves a 64-byte aligned area below rsp and saves the extended state
/// into it (rsp then points at it); clobbers rax and rdx.
pub(super) fn save_ext_state(a: &mut CodeAssembler, ext: ExtState) -> Result<(), IcedError> {
    a.and(rsp, -64)?;
    match ext {
        ExtState::Xsave { size, mask } => {
            a.sub(rsp, (size as i32 + 63) & !63)?;
            // The xsave header (bytes 512..576) must be clean for xrstor.
            for i in 0..8 {
                a.mov(qword_ptr(rsp + (512 + i * 8)), 0)?;
            }
            a.mov(eax, mask as u32)?;
            a.mov(edx, (mask >> 32) as u32)?;
            a.xsave64(ptr(rsp))
        }
        ExtState::Fxsave => {
            a.sub(rsp, 512)?;
            a.fxsave64(ptr(rsp))
        }
    }
}

/// Restores the extended state saved by [`save_ext_state`] at rsp; leaves
/// the flags alone (the slow path's result is in ZF), clobbers rax and rdx.
pub(super) fn restore_ext_state(a: &mut CodeAssembler, ext: ExtState) -> Result<(), IcedError> {
    match ext {
        ExtState::Xsave { mask, .. } => {
            a.mov(eax, mask as u32)?;
            a.mov(edx, (mask >> 32) as u32)?;
            a.xrstor64(ptr(rsp))
        }
        ExtState::Fxsave => a.fxrstor64(ptr(rsp)),
    }
}

/// Appends the event word in rax to the current buffer of the thread whose
/// state is in r11; clobbers rax, rcx, rdx. Jumps to `full` when the buffer
/// has no room (rax still holds the word).
pub(super) fn record(a: &mut CodeAssembler, p: &Params, full: CodeLabel) -> Result<(), IcedError> {
    a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
    a.mov(edx, RawEvent::SIZE as u32)?;
    a.xadd(qword_ptr(rcx), rdx)?; // reserve: signal-safe, single instruction
    a.cmp(rdx, (p.buf_size as usize - RawEvent::SIZE) as i32)?;
    a.ja(full)?;
    a.add(rcx, rdx)?;
    a.mov(qword_ptr(rcx), rax)?;
    stamp(a)
}

/// Writes the time stamp counter into the record at rcx (its timestamp,
/// written last: a record without one was never completed); clobbers rax
/// and rdx.
pub(super) fn stamp(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rcx + 8), rax)
}

/// At `full`, with rcx = the buffer and rdx = a reservation's start that
/// did not fit: clears the reservation's records that lie in the buffer
/// (skipped as never written, as `buffer::reserve` does), then has the
/// slow path switch buffers and falls through after the call.
pub(super) fn clear_reservation_then_switch(
    a: &mut CodeAssembler,
    p: &Params,
    full: &mut CodeLabel,
) -> Result<(), IcedError> {
    let mut cleared = a.create_label();
    a.set_label(full)?;
    a.cmp(rdx, p.buf_size as i32)?;
    a.jae(cleared)?;
    a.mov(qword_ptr(rcx + rdx), 0)?;
    a.mov(qword_ptr(rcx + rdx + 8), 0)?;
    a.add(rdx, RawEvent::SIZE as i32)?;
    a.jmp(*full)?;
    a.set_label(&mut cleared)?;
    slow_call(a, p, SLOW_FULL, None)
}

/// The start of the generated -F and -N entries: saves rcx, rdx and r11,
/// loads the thread's state into r11, and jumps to `slow` (the flagged
/// entry's retry, which expects those three saved) unless the call is a
/// usual one: the agent not busy, the thread's state made, the global
/// switch already applied.
pub(super) fn usual_filtered_entry(
    a: &mut CodeAssembler,
    p: &Params,
    slow: CodeLabel,
) -> Result<(), IcedError> {
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(r11)?;
    usual_filtered_checks(a, p, slow)
}

/// The checks of [`usual_filtered_entry`] after its three pushes.
pub(super) fn usual_filtered_checks(
    a: &mut CodeAssembler,
    p: &Params,
    slow: CodeLabel,
) -> Result<(), IcedError> {
    a.cmp(qword_ptr(p.tls + 8).fs(), 0)?;
    a.jne(slow)?;
    a.mov(r11, qword_ptr(p.tls).fs())?;
    a.test(r11, r11)?;
    a.jz(slow)?;
    a.mov(rcx, p.filter.unwrap_or(0))?;
    a.mov(ecx, dword_ptr(rcx))?;
    a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
    a.jne(slow)?;
    Ok(())
}

/// Fills the shadow entry that an `xadd` on the shadow-stack top just
/// reserved at rcx, or jumps to `full` when it lies past the end of the
/// shadow stack: the caller's return address (at rsp+40), its slot, and
/// the function id in rax with `bits` above it. Clobbers rdx only.
pub(super) fn fill_shadow_entry(
    a: &mut CodeAssembler,
    bits: u64,
    full: CodeLabel,
) -> Result<(), IcedError> {
    a.cmp(rcx, qword_ptr(r11 + OFF_SHADOW_END))?;
    a.jae(full)?;
    a.mov(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx), rdx)?;
    a.lea(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx + 8), rdx)?;
    if bits == 0 {
        a.mov(qword_ptr(rcx + 16), rax)?;
    } else {
        a.mov(rdx, bits)?;
        a.or(rdx, rax)?;
        a.mov(qword_ptr(rcx + 16), rdx)?;
    }
    Ok(())
}

/// rdx = the recorded calls open on the thread (in r11) below the
/// shadow-stack address `top`: its entries minus the hidden ones
/// (`filter::vdepth`); `inv3` labels the inverse of 3 modulo 2^64.
pub(super) fn depth_of(
    a: &mut CodeAssembler,
    top: AsmRegister64,
    inv3: CodeLabel,
) -> Result<(), IcedError> {
    a.mov(rdx, top)?;
    a.sub(rdx, qword_ptr(r11 + OFF_SHADOW_BASE))?;
    a.shr(rdx, 3)?;
    a.imul_2(rdx, qword_ptr(inv3))?;
    a.sub(rdx, qword_ptr(r11 + OFF_HIDDEN))?;
    Ok(())
}

/// The thread's state pointer (`tls::State`'s first word) and its busy word.
pub(super) fn tls_words(p: &Params) -> (AsmMemoryOperand, AsmMemoryOperand) {
    (qword_ptr(p.tls).fs(), qword_ptr(p.tls + 8).fs())
}

pub(super) const ENT: i32 = SHADOW_ENTRY_SIZE as i32;
