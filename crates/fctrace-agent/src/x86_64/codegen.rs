//! Machine code that the agent generates at start-up, into an arena placed
//! within ±2 GiB of the module it instruments:
//!
//! - the *common block*: `entry` (record an entry, push a shadow entry),
//!   `entry_only` (record a call of a function whose return cannot be
//!   captured), `exit` (pop the shadow entry, record the exit, return to
//!   the real caller), and their slow paths into Rust;
//! - one *stub* per function (see `patch.rs`).
//!
//! The hot path touches only rax, rcx, rdx and r11, which it saves: every
//! other register (and all vector state) is left alone, because GCC's
//! inter-procedural register allocation lets callers keep values in
//! registers that a known callee does not clobber. It allocates nothing,
//! takes no lock and makes no system call. Per-thread data is reached with
//! one `fs:`-relative load at the agent's initial-exec TLS offset.

use crate::thread::{
    OFF_BUF, OFF_SHADOW_END, OFF_SHADOW_TOP, SHADOW_ENTRY_SIZE, SLOW_FULL, SLOW_INIT,
    SLOW_MISMATCH, SLOW_UNWINDING,
};
use crate::tls::BUSY_UNWINDING;
use fctrace_format::event::{EventKind, RawEvent, KIND_BITS};
use iced_x86::code_asm::*;
use iced_x86::{BlockEncoderOptions, IcedError};

/// What the common block needs to know about its environment.
pub struct Params {
    /// TLS block offset from the thread pointer.
    pub tls: i64,
    /// Size of each shared-memory buffer.
    pub buf_size: u32,
    /// Address of `thread::slow_path`.
    pub slow_path: u64,
    /// Address of the shared lost-events counter.
    pub lost_counter: u64,
    /// Bytes needed by `xsave` for the enabled state components.
    pub xsave_size: u32,
}

/// Entry points of an assembled common block.
#[derive(Clone, Copy, Debug)]
pub struct Common {
    pub entry: u64,
    pub entry_only: u64,
    pub exit: u64,
}

/// Saves every caller-saved register and the whole extended state, calls
/// `slow_path(reason, arg)`, restores; ZF is clear when it returned non-zero. `arg_slot` (if any) passes the
/// stack address `rsp_at_call_site + arg_slot` as the argument.
fn slow_call(
    a: &mut CodeAssembler,
    p: &Params,
    reason: u64,
    arg_slot: Option<i32>,
) -> Result<(), IcedError> {
    for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rbx] {
        a.push(r)?;
    }
    a.mov(rbx, rsp)?;
    a.and(rsp, -64)?;
    let area = (p.xsave_size as i32 + 63) & !63;
    a.sub(rsp, area)?;
    // The xsave header (bytes 512..576) must be clean for xrstor.
    for i in 0..8 {
        a.mov(qword_ptr(rsp + (512 + i * 8)), 0)?;
    }
    a.mov(eax, -1)?;
    a.mov(edx, -1)?;
    a.xsave64(ptr(rsp))?;
    a.mov(rdi, reason)?;
    match arg_slot {
        Some(off) => a.lea(rsi, qword_ptr(rbx + (80 + off)))?,
        None => a.xor(esi, esi)?,
    }
    a.mov(rdx, qword_ptr(rbx + 72))?; // the saved rax: the function id on entry paths
    a.mov(rax, p.slow_path)?;
    a.call(rax)?;
    // The result is passed back in ZF (nothing below changes the flags).
    a.test(rax, rax)?;
    a.mov(eax, -1)?;
    a.mov(edx, -1)?;
    a.xrstor64(ptr(rsp))?;
    a.mov(rsp, rbx)?;
    for r in [rbx, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
        a.pop(r)?;
    }
    Ok(())
}

/// Appends the event word in rax to the current buffer of the thread whose
/// state is in r11; clobbers rax, rcx, rdx. Jumps to `full` when the buffer
/// has no room (rax still holds the word).
fn record(a: &mut CodeAssembler, p: &Params, full: CodeLabel) -> Result<(), IcedError> {
    a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
    a.mov(edx, RawEvent::SIZE as u32)?;
    a.xadd(qword_ptr(rcx), rdx)?; // reserve: signal-safe, single instruction
    a.cmp(rdx, (p.buf_size as usize - RawEvent::SIZE) as i32)?;
    a.ja(full)?;
    a.add(rcx, rdx)?;
    a.mov(qword_ptr(rcx), rax)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rcx + 8), rax)?;
    Ok(())
}

pub fn assemble_common(at: u64, p: &Params) -> Result<(Vec<u8>, Common), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let tls_state = qword_ptr(p.tls).fs();
    let tls_busy = qword_ptr(p.tls + 8).fs();
    let ent = SHADOW_ENTRY_SIZE as i32;

    // ---- entry: eax = function id; [rsp] = return into the stub,
    // [rsp+8] = the stub's saved rax, [rsp+16] = the caller's return address.
    // Returns ZF=1 when the call is traced (the stub then takes over the
    // return), ZF=0 to pass straight through.
    let mut entry = a.create_label();
    let mut retry = a.create_label();
    let mut rec = a.create_label();
    let mut pass = a.create_label();
    let mut overflow = a.create_label();
    let mut busy = a.create_label();
    let mut init = a.create_label();
    let mut full = a.create_label();
    a.set_label(&mut entry)?;
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(r11)?; // the caller's return slot is now at rsp+40
    a.set_label(&mut retry)?;
    a.cmp(tls_busy, 0)?;
    a.jne(busy)?;
    a.mov(r11, tls_state)?;
    a.test(r11, r11)?;
    a.jz(init)?;
    a.mov(ecx, ent as u32)?;
    a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve the shadow entry first
    a.cmp(rcx, qword_ptr(r11 + OFF_SHADOW_END))?;
    a.jae(overflow)?;
    a.mov(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx), rdx)?;
    a.lea(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx + 8), rdx)?;
    a.mov(qword_ptr(rcx + 16), rax)?;
    a.shl(rax, KIND_BITS)?; // EventKind::Entry == 0
    a.set_label(&mut rec)?;
    record(&mut a, p, full)?;
    a.pop(r11)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.cmp(eax, eax)?; // ZF=1: traced
    a.ret()?;
    a.set_label(&mut pass)?;
    a.pop(r11)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.test(rsp, rsp)?; // ZF=0: pass through
    a.ret()?;
    a.set_label(&mut busy)?;
    // An unwinder is running: the slow path records the call without
    // taking over its return (ZF=1), or sees that the unwinding is over,
    // repairs the shadow stack and asks for a retry (ZF=0).
    a.cmp(tls_busy, BUSY_UNWINDING as i32)?;
    a.jne(pass)?;
    slow_call(&mut a, p, SLOW_UNWINDING, Some(40))?;
    a.jnz(retry)?;
    a.jmp(pass)?;
    a.set_label(&mut overflow)?;
    a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ent)?;
    a.mov(rcx, p.lost_counter)?;
    a.lock().add(qword_ptr(rcx), 2)?; // this call's entry and exit
    a.jmp(pass)?;
    a.set_label(&mut init)?;
    slow_call(&mut a, p, SLOW_INIT, None)?;
    a.jmp(retry)?;
    a.set_label(&mut full)?;
    slow_call(&mut a, p, SLOW_FULL, None)?;
    a.jmp(rec)?;

    // ---- entry_only: eax = function id; records an entry and an exit at
    // the same time, never touches the return address.
    let mut eo = a.create_label();
    let mut eo_rec = a.create_label();
    let mut eo_rec2 = a.create_label();
    let mut eo_done = a.create_label();
    let mut eo_full = a.create_label();
    let mut eo_full2 = a.create_label();
    a.set_label(&mut eo)?;
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(r11)?;
    a.push(rax)?;
    a.cmp(tls_busy, 0)?;
    a.jne(eo_done)?;
    a.mov(r11, tls_state)?;
    a.test(r11, r11)?;
    a.jz(eo_done)?;
    a.shl(rax, KIND_BITS)?;
    a.set_label(&mut eo_rec)?;
    record(&mut a, p, eo_full)?;
    a.mov(rax, qword_ptr(rsp))?;
    a.shl(rax, KIND_BITS)?;
    a.or(rax, EventKind::Exit as i32)?;
    a.set_label(&mut eo_rec2)?;
    record(&mut a, p, eo_full2)?;
    a.set_label(&mut eo_done)?;
    a.pop(rax)?;
    a.pop(r11)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.ret()?;
    a.set_label(&mut eo_full)?;
    slow_call(&mut a, p, SLOW_FULL, None)?;
    a.jmp(eo_rec)?;
    a.set_label(&mut eo_full2)?;
    slow_call(&mut a, p, SLOW_FULL, None)?;
    a.jmp(eo_rec2)?;

    // ---- exit: reached by a jmp from the stub after the function body
    // returned; rsp = the caller's return slot + 8. Puts the real return
    // address back into the slot and returns through it, so the CPU's
    // return-stack predictions stay paired.
    let mut exit = a.create_label();
    let mut again = a.create_label();
    let mut xrec = a.create_label();
    let mut mismatch = a.create_label();
    let mut xfull = a.create_label();
    a.set_label(&mut exit)?;
    a.lea(rsp, qword_ptr(rsp - 8))?;
    a.push(rax)?;
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(r11)?; // slot at rsp+32
    a.mov(r11, tls_state)?;
    a.set_label(&mut again)?;
    a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
    a.sub(rcx, ent)?;
    a.lea(rdx, qword_ptr(rsp + 32))?;
    a.cmp(qword_ptr(rcx + 8), rdx)?;
    a.jne(mismatch)?;
    a.mov(rax, qword_ptr(rcx))?;
    a.mov(qword_ptr(rsp + 32), rax)?;
    a.mov(rax, qword_ptr(rcx + 16))?;
    a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // pop after reading it all
    a.shl(rax, KIND_BITS)?;
    a.or(rax, EventKind::Exit as i32)?;
    a.set_label(&mut xrec)?;
    record(&mut a, p, xfull)?;
    a.pop(r11)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.pop(rax)?;
    a.ret()?;
    a.set_label(&mut mismatch)?;
    slow_call(&mut a, p, SLOW_MISMATCH, Some(32))?;
    a.jmp(again)?;
    a.set_label(&mut xfull)?;
    slow_call(&mut a, p, SLOW_FULL, None)?;
    a.jmp(xrec)?;

    let res = a.assemble_options(at, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let common = Common {
        entry: res.label_ip(&entry)?,
        entry_only: res.label_ip(&eo)?,
        exit: res.label_ip(&exit)?,
    };
    Ok((res.inner.code_buffer, common))
}

/// Bytes `xsave` needs for the state components enabled in XCR0.
pub fn xsave_size() -> u32 {
    // cpuid leaf 0xD exists on every CPU with xsave (checked by the caller).
    let r = std::arch::x86_64::__cpuid_count(0xD, 0);
    r.ebx.max(576)
}

pub fn has_xsave() -> bool {
    let r = std::arch::x86_64::__cpuid(1);
    r.ecx & (1 << 27) != 0 // OSXSAVE
}
