//! The filtered variant's entries of flagged functions: the flagged entry
//! (always the slow path), the generated `-F` and `-N` entries, and the
//! fast flagged entry (triggers, depth limits, arguments).

use super::builder::Gen;
use super::emit::{
    clear_reservation_then_switch, depth_of, fill_shadow_entry, slow_call, stamp, tls_words,
    usual_filtered_checks, usual_filtered_entry, ENT,
};
use crate::runtime::state::{
    B_NOFILTER, FD_ARGS_WORD, FD_COUNT, FD_DEPTH, FD_DEPTH_MASK, FD_ENTRY_WORD, FD_ID, FD_ITEMS,
    FD_PROV_WORD, FD_SHADOW_WORD, FD_TRIG_MASK, FD_TRIG_WANT, FD_WANT, FILTER_ENTRY_BITS, FI_HDR,
    FI_MASK, FI_SIZE, NOTRACE_ENTRY_BITS, OFF_BLOCK, OFF_BUF, OFF_FL, OFF_HIDDEN, OFF_LIMIT,
    OFF_MAX, OFF_SHADOW_END, OFF_SHADOW_TOP, PREV_MASK, PREV_SHIFT, SLOW_FLAGGED_ENTRY, SLOW_GROW,
    SLOW_INIT, SLOW_RESYNC, SLOW_UNWINDING,
};
use crate::runtime::tls::BUSY_UNWINDING;
use fctrace_format::event::{RawEvent, KIND_BITS};
use iced_x86::code_asm::*;
use iced_x86::IcedError;

impl Gen<'_> {
    /// The entry of flagged functions (filtered variant): always the slow
    /// path, which does what the flags ask in Rust; its checks (`fretry`)
    /// are where the generated flagged entries go with anything unusual.
    pub(super) fn flagged_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut fbusy = a.create_label();
        let mut finit = a.create_label();
        a.set_label(&mut l.flagged)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.fretry)?;
        a.cmp(tls_busy, 0)?;
        a.jne(fbusy)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(finit)?;
        slow_call(a, p, SLOW_FLAGGED_ENTRY, Some(40))?;
        // ZF=1 (the slow path returned 0): traced.
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.ret()?;
        a.set_label(&mut fbusy)?;
        a.cmp(tls_busy, BUSY_UNWINDING as i32)?;
        a.jne(l.pass)?;
        slow_call(a, p, SLOW_UNWINDING, Some(40))?;
        a.jnz(l.fretry)?;
        a.jmp(l.pass)?;
        a.set_label(&mut finit)?;
        slow_call(a, p, SLOW_INIT, None)?;
        a.jmp(l.fretry)
    }

    /// The entry of a function whose only flag is -F. Inside a -F region
    /// already (a recursive or repeated -F function), it is a plain call:
    /// another -F frame changes nothing that a plain one does not. The
    /// outermost one opens the region here when nothing else blocks
    /// recording and there is no depth limit (what `filter::flagged_entry`
    /// does then): its shadow entry is pushed whole first
    /// (`FILTER_ENTRY_BITS`, so that its exit is generated too), then the
    /// region is counted and opened, then the entry is recorded. Anything
    /// else goes to the slow path. A signal from the first check up to
    /// the open region undoes what was done and restarts at the checks
    /// (`signal::fix_interrupted`): a handler sees the state from before
    /// the call, and the region is never opened over a change the
    /// handler made.
    pub(super) fn filter_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut fplain = a.create_label();
        let mut ffull = a.create_label();
        a.set_label(&mut l.filter)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.fcheck)?;
        usual_filtered_checks(a, p, l.fretry)?;
        a.test(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.jz(fplain)?;
        a.cmp(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.jne(l.fretry)?;
        a.cmp(dword_ptr(r11 + OFF_MAX), -1)?;
        a.jne(l.fretry)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.fpush_lo)?;
        fill_shadow_entry(a, FILTER_ENTRY_BITS, ffull)?;
        a.add(dword_ptr(r11 + OFF_FL), 1)?;
        a.set_label(&mut l.fcounted)?;
        a.and(dword_ptr(r11 + OFF_BLOCK), !B_NOFILTER as i32)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), -1)?;
        a.set_label(&mut l.fopen_hi)?;
        a.shl(rax, KIND_BITS)?; // EventKind::Entry == 0
        a.jmp(l.rec)?;
        a.set_label(&mut fplain)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.jmp(l.entry)?;
        a.set_label(&mut ffull)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.jmp(l.fretry)
    }

    /// The entry of a function whose only flag is -N: a hidden region
    /// entry, without the slow path. Anything unusual (busy, first call,
    /// global switch, full shadow stack) goes to the flagged entry's slow
    /// path, which does the same in Rust.
    pub(super) fn notrace_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut nfull = a.create_label();
        a.set_label(&mut l.notrace)?;
        usual_filtered_entry(a, p, l.fretry)?;
        // Closed first, so that a signal handler running from here on
        // records nothing either.
        a.add(dword_ptr(r11 + OFF_BLOCK), 1)?;
        a.add(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), 0)?;
        a.set_label(&mut l.nrestart)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.npush_lo)?;
        fill_shadow_entry(a, NOTRACE_ENTRY_BITS, nfull)?;
        a.set_label(&mut l.npush_hi)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: its return is taken over
        a.ret()?;
        a.set_label(&mut nfull)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.sub(dword_ptr(r11 + OFF_BLOCK), 1)?;
        a.sub(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        slow_call(a, p, SLOW_RESYNC, None)?;
        // Grown: the entry starts over (its checks see the state again).
        slow_call(a, p, SLOW_GROW, None)?;
        a.jnz(l.fretry)?;
        a.jmp(l.pass)
    }

    /// The fast flagged entry: rax = the function's `FastDesc`
    /// (`recording::filter::fast_desc`). When nothing unusual is going
    /// on and its trigger condition holds, it does what
    /// `filter::flagged_entry` would: the limit decides as for an
    /// unflagged call; a recorded call pushes its shadow entry (with the
    /// `-R` bits), applies a depth trigger, then records its entry
    /// ([`Gen::fast_entry_args`] with arguments). Anything else goes to
    /// the flagged entry's slow path with the id in eax. A signal between
    /// the shadow entry's reservation and its last store undoes it and
    /// restarts at the checks (`signal::fix_interrupted`, as for `entry`).
    pub(super) fn fast_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut f = FastSlow {
            slow: a.create_label(),
            overflow: a.create_label(),
            args: a.create_label(),
        };
        a.set_label(&mut l.fast)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.aretry)?;
        usual_filtered_checks(a, p, f.slow)?;
        a.mov(ecx, dword_ptr(r11 + OFF_BLOCK))?;
        a.and(ecx, dword_ptr(rax + FD_TRIG_MASK))?;
        a.cmp(ecx, dword_ptr(rax + FD_TRIG_WANT))?;
        a.jne(f.slow)?;
        a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
        a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
        a.jae(l.pass)?;
        // The shadow entry's word: with a depth trigger, the depth limit
        // from before the call above the bits (`E_DEPTH`, as
        // `filter::flagged_entry` writes it); kept in the red zone
        // (signal frames are put below it).
        let mut prev_ok = a.create_label();
        a.mov(edx, dword_ptr(r11 + OFF_MAX))?;
        a.cmp(rdx, PREV_MASK as i32)?;
        a.jbe(prev_ok)?;
        a.mov(edx, PREV_MASK as u32)?;
        a.set_label(&mut prev_ok)?;
        a.shl(rdx, PREV_SHIFT)?;
        a.and(rdx, qword_ptr(rax + FD_DEPTH_MASK))?;
        a.or(rdx, qword_ptr(rax + FD_SHADOW_WORD))?;
        a.mov(qword_ptr(rsp - 8), rdx)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.apush_lo)?;
        a.cmp(rcx, qword_ptr(r11 + OFF_SHADOW_END))?;
        a.jae(f.overflow)?;
        a.mov(rdx, qword_ptr(rsp + 40))?;
        a.mov(qword_ptr(rcx), rdx)?;
        a.lea(rdx, qword_ptr(rsp + 40))?;
        a.mov(qword_ptr(rcx + 8), rdx)?;
        a.mov(rdx, qword_ptr(rsp - 8))?;
        a.mov(qword_ptr(rcx + 16), rdx)?;
        a.set_label(&mut l.apush_hi)?;
        self.fast_entry_depth()?;
        let a = &mut self.a;
        a.cmp(dword_ptr(rax + FD_COUNT), 0)?;
        a.jne(f.args)?;
        // No arguments: the entry's own record, as `entry` writes it.
        a.mov(rax, qword_ptr(rax + FD_ENTRY_WORD))?;
        a.jmp(self.l.rec)?;
        self.fast_entry_args(&mut f)
    }

    /// The fast flagged entry's depth trigger, if its `FastDesc` has one,
    /// after its shadow entry is pushed (rcx): the limit becomes N levels
    /// from the call (`st.max = min(max, v + N)`, v the recorded calls
    /// open before it), and `limit` the top at which it is reached. A
    /// signal from here to the limit's store puts the old limit back,
    /// takes the shadow entry back and restarts at the checks
    /// (`signal::fix_interrupted`).
    fn fast_entry_depth(&mut self) -> Result<(), IcedError> {
        let (a, l) = (&mut self.a, &mut self.l);
        let mut a_nodepth = a.create_label();
        let mut d1 = a.create_label();
        let mut d2 = a.create_label();
        a.cmp(qword_ptr(rax + FD_DEPTH_MASK), 0)?;
        a.je(a_nodepth)?;
        depth_of(a, rcx, l.inv3)?;
        a.mov(qword_ptr(rsp - 16), rdx)?;
        a.add(rdx, qword_ptr(rax + FD_DEPTH))?;
        a.cmp(rdx, (PREV_MASK - 1) as i32)?;
        a.jbe(d1)?;
        a.mov(edx, (PREV_MASK - 1) as u32)?;
        a.set_label(&mut d1)?;
        a.cmp(edx, dword_ptr(r11 + OFF_MAX))?;
        a.jbe(d2)?;
        a.mov(edx, dword_ptr(r11 + OFF_MAX))?;
        a.set_label(&mut d2)?;
        a.mov(dword_ptr(r11 + OFF_MAX), edx)?;
        a.sub(rdx, qword_ptr(rsp - 16))?;
        a.imul_3(rdx, rdx, ENT)?;
        a.add(rdx, rcx)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), rdx)?;
        a.set_label(&mut l.dhi)?;
        a.nop()?;
        a.set_label(&mut a_nodepth)
    }

    /// The fast flagged entry of a function with arguments to record: the
    /// `Args` record that is also the entry and its payload, reserved at
    /// once and written (payload, words, then the timestamp); then the
    /// fast entry's own slow paths.
    fn fast_entry_args(&mut self, f: &mut FastSlow) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut a_rec = a.create_label();
        let mut a_zero = a.create_label();
        let mut a_item = a.create_label();
        let mut a_full = a.create_label();
        a.set_label(&mut f.args)?;
        // The argument registers in order on the stack: rdi at [rsp],
        // rsi, rdx, rcx (saved above), r8, r9.
        a.push(r9)?;
        a.push(r8)?;
        a.push(qword_ptr(rsp + 32))?; // the saved rcx
        a.push(qword_ptr(rsp + 32))?; // the saved rdx
        a.push(rsi)?;
        a.push(rdi)?;
        a.mov(edx, dword_ptr(rax + FD_WANT))?;
        a.set_label(&mut a_rec)?;
        a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
        a.mov(rsi, rdx)?;
        a.xadd(qword_ptr(rcx), rdx)?;
        a.lea(rdi, qword_ptr(rdx + rsi))?;
        a.cmp(rdi, p.buf_size as i32)?;
        a.ja(a_full)?;
        // The Args record that is also the entry (`WITH_CALL_STEP`), its
        // payload at +16.
        a.add(rcx, rdx)?;
        a.mov(rdx, qword_ptr(rax + FD_PROV_WORD))?;
        a.mov(qword_ptr(rcx), rdx)?;
        a.mov(qword_ptr(rcx + 8), 0)?;
        a.lea(rdi, qword_ptr(rcx + 16))?;
        a.add(rsi, rcx)?;
        a.set_label(&mut a_zero)?;
        a.mov(qword_ptr(rdi), 0)?;
        a.mov(qword_ptr(rdi + 8), 0)?;
        a.add(rdi, RawEvent::SIZE as i32)?;
        a.cmp(rdi, rsi)?;
        a.jb(a_zero)?;
        // Each value: INT fmt size (the item's header), then its bits.
        a.lea(rdi, qword_ptr(rcx + 16))?;
        a.lea(rsi, qword_ptr(rax + FD_ITEMS))?;
        a.mov(r11d, dword_ptr(rax + FD_COUNT))?;
        a.imul_3(r11, r11, FI_SIZE)?;
        a.add(r11, rsi)?;
        a.set_label(&mut a_item)?;
        a.mov(edx, dword_ptr(rsi + FI_HDR))?;
        a.mov(dword_ptr(rdi), edx)?;
        a.movzx(edx, byte_ptr(rsi))?;
        a.mov(rdx, qword_ptr(rsp + rdx * 8))?;
        a.and(rdx, qword_ptr(rsi + FI_MASK))?;
        a.mov(qword_ptr(rdi + 3), rdx)?;
        a.add(rdi, 11)?;
        a.add(rsi, FI_SIZE)?;
        a.cmp(rsi, r11)?;
        a.jb(a_item)?;
        a.mov(rdx, qword_ptr(rax + FD_ARGS_WORD))?;
        a.mov(qword_ptr(rcx), rdx)?;
        stamp(a)?;
        a.pop(rdi)?;
        a.pop(rsi)?;
        a.add(rsp, 32)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: traced
        a.ret()?;
        clear_reservation_then_switch(a, p, &mut a_full)?;
        a.mov(edx, dword_ptr(rax + FD_WANT))?;
        a.jmp(a_rec)?;
        a.set_label(&mut f.overflow)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.set_label(&mut f.slow)?;
        a.mov(eax, dword_ptr(rax + FD_ID))?;
        a.jmp(l.fretry)
    }
}

/// The local labels of the fast flagged entry that its parts share.
pub(super) struct FastSlow {
    /// To the flagged entry's slow path (rax still the `FastDesc`).
    slow: CodeLabel,
    /// The shadow stack is full.
    overflow: CodeLabel,
    /// The function has arguments to record.
    args: CodeLabel,
}
