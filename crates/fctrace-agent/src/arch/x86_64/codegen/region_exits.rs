//! The filtered variant's exits of frames that ask for more than a
//! record: `-N` and `-F` regions, and the `-R` and depth frames of the fast
//! flagged entry; any other goes to the slow path.

use super::builder::Gen;
use super::emit::{clear_reservation_then_switch, depth_of, slow_call, stamp, ENT};
use crate::runtime::state::{
    B_NOFILTER, DEPTH_BITS, E_FASTRET, FASTRET_BITS, FASTRET_SHIFT, FILTER_ENTRY_BITS,
    NOTRACE_ENTRY_BITS, OFF_BLOCK, OFF_BUF, OFF_FL, OFF_HIDDEN, OFF_LIMIT, OFF_MAX, OFF_SHADOW_TOP,
    PREV_MASK, PREV_SHIFT, SLOW_FLAGGED_EXIT, SLOW_RESYNC,
};
use fctrace_format::event::{EventKind, RawEvent, KIND_BITS, PAYLOAD_LEN_SHIFT, WITH_CALL_STEP};
use iced_x86::code_asm::*;
use iced_x86::IcedError;

impl Gen<'_> {
    /// The filtered exit of a frame whose shadow entry asks for more than
    /// a record (rcx = that entry, the slot at rsp+32): a `-N` region's
    /// exit, a `-F` region's, a `-R` or depth frame's made by the fast
    /// flagged entry, each generated; any other goes to the slow path.
    pub(super) fn slow_exits(&mut self) -> Result<(), IcedError> {
        let mut not_notrace = self.a.create_label();
        let mut not_filter = self.a.create_label();
        let mut real_slow = self.a.create_label();
        self.notrace_exit(not_notrace)?;
        self.a.set_label(&mut not_notrace)?;
        self.filter_exit(not_filter)?;
        self.a.set_label(&mut not_filter)?;
        self.fast_exit(real_slow)?;
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.set_label(&mut real_slow)?;
        slow_call(a, p, SLOW_FLAGGED_EXIT, Some(32))?;
        a.jmp(l.xtail)
    }

    /// The exit of a -N region made by the generated -N entry
    /// ([`Gen::notrace_entry`]), else a jump to `other`: pop, count the
    /// region closed, and if nothing else blocks recording and there is
    /// no depth limit, open again.
    fn notrace_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.set_label(&mut l.slow_exit)?;
        let mut reopen_slow = a.create_label();
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.shr(rax, 32)?;
        a.cmp(eax, (NOTRACE_ENTRY_BITS >> 32) as i32)?;
        a.jne(other)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut l.npop)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut l.npop_next)?;
        a.sub(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        a.sub(dword_ptr(r11 + OFF_BLOCK), 1)?;
        // From here to the limit's store, a signal handler that changes
        // the state (a `--signal` trace_off) would have its limit
        // overwritten: `signal::fix_interrupted` completes the closing
        // from the state instead.
        a.set_label(&mut l.nclose_lo)?;
        a.jnz(l.xtail)?;
        a.cmp(dword_ptr(r11 + OFF_MAX), -1)?;
        a.jne(reopen_slow)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), -1)?;
        a.set_label(&mut l.nclose_hi)?;
        a.jmp(l.xtail)?;
        a.set_label(&mut reopen_slow)?;
        slow_call(a, p, SLOW_RESYNC, None)?;
        a.jmp(l.xtail)
    }

    /// The exit of a -F region made by the generated -F entry
    /// ([`Gen::filter_entry`], or by the slow path, the same entry), else
    /// a jump to `other`: pop, count the region closed, close recording
    /// if it was the last one, record the exit. A signal from the slot's
    /// store up to the closed region completes the pop and the closing
    /// first (`signal::fix_interrupted`).
    fn filter_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.cmp(eax, (FILTER_ENTRY_BITS >> 32) as i32)?;
        a.jne(other)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut l.fpop_lo)?;
        a.mov(eax, dword_ptr(rcx + 16))?;
        a.set_label(&mut l.fpop)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut l.fpop_next)?;
        a.sub(dword_ptr(r11 + OFF_FL), 1)?;
        a.set_label(&mut l.funcounted)?;
        a.jnz(l.fclose_hi)?;
        a.or(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), 0)?;
        a.set_label(&mut l.fclose_hi)?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.jmp(l.xrec)
    }

    /// The exit of a frame the fast flagged entry made ([`Gen::fast_entry`]),
    /// else a jump to `other`: pop, then the `-R` return value
    /// ([`Gen::retval_exit`]) or the depth region's closing
    /// ([`Gen::depth_exit`]). A signal between the slot's store and the
    /// pop completes the pop (`signal::fix_interrupted`, as for `exit`).
    fn fast_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let a = &mut self.a;
        let mut fast_pop = a.create_label();
        let mut fast_ret = a.create_label();
        a.cmp(al, FASTRET_BITS as i8 as i32)?;
        a.je(fast_pop)?;
        a.cmp(al, DEPTH_BITS as i8 as i32)?;
        a.jne(other)?;
        a.set_label(&mut fast_pop)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut self.l.rpop_lo)?;
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.set_label(&mut self.l.rpop_store)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut self.l.rpop_next)?;
        a.bt(rax, E_FASTRET.trailing_zeros() as i32)?;
        a.jc(fast_ret)?;
        self.depth_exit()?;
        self.a.set_label(&mut fast_ret)?;
        self.retval_exit()
    }

    /// The exit of a depth=N region made by the fast flagged entry (what
    /// `filter::release` does), after the pop: the depth limit from
    /// before the call put back, `limit` made from the state as
    /// `filter::recompute` makes it; then the exit recorded. A signal
    /// from here to the limit's store makes them from the state instead
    /// (`signal::fix_interrupted`). rcx = the top.
    fn depth_exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut c1 = a.create_label();
        let mut c_zero = a.create_label();
        let mut c_inf = a.create_label();
        let mut c_store = a.create_label();
        a.mov(rdx, rax)?;
        a.shr(rdx, PREV_SHIFT)?;
        a.and(edx, PREV_MASK as u32)?;
        a.cmp(edx, PREV_MASK as u32)?;
        a.jne(c1)?;
        a.mov(edx, u32::MAX)?;
        a.set_label(&mut c1)?;
        a.mov(dword_ptr(r11 + OFF_MAX), edx)?;
        a.cmp(dword_ptr(r11 + OFF_BLOCK), 0)?;
        a.jne(c_zero)?;
        a.cmp(edx, -1)?;
        a.je(c_inf)?;
        a.mov(qword_ptr(rsp - 8), rdx)?;
        depth_of(a, rcx, l.inv3)?;
        a.neg(rdx)?;
        a.add(rdx, qword_ptr(rsp - 8))?;
        a.imul_3(rdx, rdx, ENT)?;
        a.add(rdx, rcx)?;
        a.test(rdx, rdx)?;
        a.jns(c_store)?;
        a.set_label(&mut c_zero)?;
        a.xor(edx, edx)?;
        a.jmp(c_store)?;
        a.set_label(&mut c_inf)?;
        a.mov(rdx, -1i64)?;
        a.set_label(&mut c_store)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), rdx)?;
        a.set_label(&mut l.dclose_hi)?;
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.mov(eax, eax)?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.jmp(l.xrec)
    }

    /// The exit of a -R frame whose return value the generated code
    /// records (`E_FASTRET`, made by the fast flagged entry), after the
    /// pop: the `Retval` record, its payload and the `Exit` record in one
    /// reservation, as `filter::flagged_exit` writes them.
    fn retval_exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        // After `finish`, nothing more (as the plain exit).
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.push(rsi)?;
        a.push(rdi)?;
        // rsi: the return value (the saved rax) cut to its size; rdi:
        // the value's header (tag, format, size).
        a.mov(rsi, qword_ptr(rsp + 40))?;
        a.mov(rcx, rax)?;
        a.shr(rcx, 56)?;
        a.neg(ecx)?;
        a.lea(ecx, dword_ptr(rcx * 8 + 64))?;
        a.shl(rsi, cl)?;
        a.shr(rsi, cl)?;
        a.mov(rdi, rax)?;
        a.shr(rdi, FASTRET_SHIFT)?;
        let mut r_rec = a.create_label();
        let mut r_full = a.create_label();
        let want = 2 * RawEvent::SIZE as i32;
        a.set_label(&mut r_rec)?;
        a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
        a.mov(edx, want as u32)?;
        a.xadd(qword_ptr(rcx), rdx)?;
        a.cmp(rdx, p.buf_size as i32 - want)?;
        a.ja(r_full)?;
        a.add(rcx, rdx)?;
        a.mov(edx, eax)?;
        a.shl(rdx, KIND_BITS)?;
        a.or(rdx, EventKind::Retval as i32)?;
        a.bts(rdx, WITH_CALL_STEP.trailing_zeros() as i32)?;
        // One Retval record that is also the exit (`WITH_CALL_STEP`). It
        // first says "never completed" with the whole reservation as
        // payload (as `buffer::emit`), then the payload, then its word,
        // then the timestamp.
        a.mov(r11, (RawEvent::SIZE as u64) << PAYLOAD_LEN_SHIFT)?;
        a.or(r11, rdx)?;
        a.mov(qword_ptr(rcx), r11)?;
        a.mov(qword_ptr(rcx + 8), 0)?;
        a.mov(qword_ptr(rcx + 16), 0)?;
        a.mov(qword_ptr(rcx + 24), 0)?;
        a.mov(dword_ptr(rcx + 16), edi)?;
        a.mov(qword_ptr(rcx + 19), rsi)?;
        a.mov(r11, 11u64 << PAYLOAD_LEN_SHIFT)?;
        a.or(r11, rdx)?;
        a.mov(qword_ptr(rcx), r11)?;
        stamp(a)?;
        a.pop(rdi)?;
        a.pop(rsi)?;
        a.jmp(l.xtail)?;
        clear_reservation_then_switch(a, p, &mut r_full)?;
        a.jmp(r_rec)
    }
}
