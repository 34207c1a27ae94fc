//! The blocks of every common block, filtered or not: `entry` (with its
//! slow paths), `entry_only` and `exit`.

use super::builder::Gen;
use super::emit::{fill_shadow_entry, record, slow_call, tls_words, ENT};
use crate::runtime::state::{
    OFF_GEN, OFF_LIMIT, OFF_SHADOW_TOP, SLOW_FULL, SLOW_GROW, SLOW_INIT, SLOW_MISMATCH,
    SLOW_RESYNC, SLOW_UNWINDING,
};
use crate::runtime::tls::BUSY_UNWINDING;
use fctrace_format::event::{EventKind, KIND_BITS};
use iced_x86::code_asm::*;
use iced_x86::IcedError;

/// The local labels of `entry`'s slow paths.
pub(super) struct EntrySlow {
    busy: CodeLabel,
    overflow: CodeLabel,
    init: CodeLabel,
    full: CodeLabel,
    resync: CodeLabel,
}

impl Gen<'_> {
    /// `entry`, the entry of unflagged functions: eax = function id;
    /// [rsp] = return into the stub, [rsp+8] = the stub's saved rax,
    /// [rsp+16] = the caller's return address. Pushes the shadow entry
    /// and records the entry. Returns ZF=1 when the call is traced (the
    /// stub then takes over the return), ZF=0 to pass straight through.
    /// Filtered, the global switch is applied first and one comparison
    /// with the thread's limit decides (hidden: no record, no shadow
    /// entry).
    pub(super) fn entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut s = EntrySlow {
            busy: a.create_label(),
            overflow: a.create_label(),
            init: a.create_label(),
            full: a.create_label(),
            resync: a.create_label(),
        };
        a.set_label(&mut l.entry)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?; // the caller's return slot is now at rsp+40
        a.set_label(&mut l.retry)?;
        a.cmp(tls_busy, 0)?;
        a.jne(s.busy)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(s.init)?;
        if let Some(g) = p.filter {
            a.mov(rcx, g)?;
            a.mov(ecx, dword_ptr(rcx))?;
            a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
            a.jne(s.resync)?;
            a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
            a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
            a.jae(l.pass)?;
        }
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve the shadow entry first
        fill_shadow_entry(a, 0, s.overflow)?;
        a.shl(rax, KIND_BITS)?; // EventKind::Entry == 0
        a.set_label(&mut l.rec)?;
        record(a, p, s.full)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: traced
        a.ret()?;
        a.set_label(&mut l.pass)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.test(rsp, rsp)?; // ZF=0: pass through
        a.ret()?;
        self.entry_slow_paths(&mut s)
    }

    /// `entry`'s slow paths: an unwinder running, the shadow stack full,
    /// the thread's first call, the buffer full, the global switch
    /// changed (filtered).
    fn entry_slow_paths(&mut self, s: &mut EntrySlow) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (_, tls_busy) = tls_words(p);
        a.set_label(&mut s.busy)?;
        // An unwinder is running: the slow path records the call without
        // taking over its return (ZF=1), or sees that the unwinding is over,
        // repairs the shadow stack and asks for a retry (ZF=0).
        a.cmp(tls_busy, BUSY_UNWINDING as i32)?;
        a.jne(l.pass)?;
        slow_call(a, p, SLOW_UNWINDING, Some(40))?;
        a.jnz(l.retry)?;
        a.jmp(l.pass)?;
        a.set_label(&mut s.overflow)?;
        // The shadow stack is full: grown, the call starts over; else it is
        // not traced and counted as lost.
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        slow_call(a, p, SLOW_GROW, None)?;
        a.jnz(l.retry)?;
        a.mov(rcx, p.lost_counter)?;
        a.lock().add(qword_ptr(rcx), 2)?; // this call's entry and exit
        a.jmp(l.pass)?;
        a.set_label(&mut s.init)?;
        slow_call(a, p, SLOW_INIT, None)?;
        a.jmp(l.retry)?;
        a.set_label(&mut s.full)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(l.rec)?;
        if p.filter.is_some() {
            a.set_label(&mut s.resync)?;
            slow_call(a, p, SLOW_RESYNC, None)?;
            a.jmp(l.retry)?;
        }
        Ok(())
    }

    /// `entry_only`: eax = function id; records an entry and an exit at
    /// the same time, never touches the return address (a function whose
    /// return cannot be captured). Filtered, the global switch is applied
    /// and the thread's limit decides, as in `entry`.
    pub(super) fn entry_only(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut eo_rec = a.create_label();
        let mut eo_rec2 = a.create_label();
        let mut eo_done = a.create_label();
        let mut eo_full = a.create_label();
        let mut eo_full2 = a.create_label();
        a.set_label(&mut l.entry_only)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.push(rax)?;
        a.cmp(tls_busy, 0)?;
        a.jne(eo_done)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(eo_done)?;
        if let Some(g) = p.filter {
            let mut synced = a.create_label();
            a.mov(rcx, g)?;
            a.mov(ecx, dword_ptr(rcx))?;
            a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
            a.je(synced)?;
            slow_call(a, p, SLOW_RESYNC, None)?;
            a.set_label(&mut synced)?;
            a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
            a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
            a.jae(eo_done)?;
        }
        a.shl(rax, KIND_BITS)?;
        a.set_label(&mut eo_rec)?;
        record(a, p, eo_full)?;
        a.mov(rax, qword_ptr(rsp))?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.set_label(&mut eo_rec2)?;
        record(a, p, eo_full2)?;
        a.set_label(&mut eo_done)?;
        a.pop(rax)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.ret()?;
        a.set_label(&mut eo_full)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(eo_rec)?;
        a.set_label(&mut eo_full2)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(eo_rec2)
    }

    /// `exit`: reached by a jmp from the stub after the function body
    /// returned; rsp = the caller's return slot + 8. Pops the shadow
    /// entry, puts the real return address back into the slot, records
    /// the exit and returns through the slot, so the CPU's return-stack
    /// predictions stay paired. Filtered, frames that ask for more go to
    /// [`Gen::slow_exits`], and nothing is recorded after `finish`.
    pub(super) fn exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, _) = tls_words(p);
        let mut again = a.create_label();
        let mut mismatch = a.create_label();
        let mut xfull = a.create_label();
        a.set_label(&mut l.exit)?;
        a.lea(rsp, qword_ptr(rsp - 8))?;
        a.push(rax)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?; // slot at rsp+32
        a.mov(r11, tls_state)?;
        a.set_label(&mut again)?;
        a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
        a.sub(rcx, ENT)?;
        a.lea(rdx, qword_ptr(rsp + 32))?;
        a.cmp(qword_ptr(rcx + 8), rdx)?;
        a.jne(mismatch)?;
        if p.filter.is_some() {
            // A region owner or a -R function (crate::recording::filter::E_SLOW_EXIT).
            a.test(byte_ptr(rcx + 20), 1)?;
            a.jnz(l.slow_exit)?;
        }
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // pop after reading it all
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        if p.filter.is_some() {
            // After `finish`, not even the exits of open calls are recorded.
            a.mov(rcx, p.finished)?;
            a.cmp(byte_ptr(rcx), 0)?;
            a.jne(l.xtail)?;
        }
        a.set_label(&mut l.xrec)?;
        record(a, p, xfull)?;
        a.set_label(&mut l.xtail)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.pop(rax)?;
        a.ret()?;
        a.set_label(&mut mismatch)?;
        slow_call(a, p, SLOW_MISMATCH, Some(32))?;
        a.jmp(again)?;
        a.set_label(&mut xfull)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(l.xrec)
    }
}
