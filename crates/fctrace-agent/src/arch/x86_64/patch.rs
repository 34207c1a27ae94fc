//! Deciding how to patch one function, and building its stub.
//!
//! The entry (after a leading `endbr64`, which stays in place) is replaced
//! by a 5-byte `jmp rel32` to a per-function stub:
//!
//! ```text
//! stub:  push rax; mov eax, ID; call common.entry; pop rax
//!        jne body                ; not traced now: run the body untouched
//!        lea rsp, [rsp+8]        ; the caller's return address is saved
//!        call body               ; the body sees the same stack layout
//!        jmp common.exit         ; records the exit, returns to the caller
//! body:  <the displaced instructions, relocated>
//!        jmp function+N
//! ```
//!
//! The displaced instructions are the first ones covering 5 bytes. A
//! function shorter than that uses the alignment padding after it (only
//! when it is really padding). When a branch elsewhere in the function
//! lands inside the displaced bytes, or loops back to the entry, the whole
//! function is relocated into the stub instead (only for functions without
//! calls or indirect jumps, so that no return address or jump-table target
//! points into the moved code). A function with calls or indirect jumps
//! whose branch targets all lie after its first instructions covering 2
//! bytes gets a 2-byte `jmp rel8` entry instead, to a 5-byte `jmp rel32`
//! placed in padding within reach (after the function, before it, or dead
//! alignment padding inside it): see [`plan_short`]. A branch back to the
//! entry itself is never patched over (it would count a call that did not
//! happen). Anything else is refused with a reason.
//!
//! Most stubs come from a byte template, the moved instructions copied as
//! they are (a start-up cost of a few hundred nanoseconds per function);
//! moved branches, calls and RIP-relative operands are re-encoded one by
//! one for their new address in the same template; only what that cannot
//! place (a branch into the moved code itself, `jrcxz`/`loop`) goes
//! through iced's block encoder, which relocates the whole stub.

use super::codegen::Common;
use fctrace_symbols::Pattern;
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, Encoder, FlowControl,
    Instruction, InstructionBlock, MemoryOperand, Mnemonic, OpKind, Register,
};

const JMP_LEN: usize = 5;
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Entry and exit recorded (return captured).
    Traced,
    /// Returns twice (setjmp, vfork): an entry and an immediate exit are
    /// recorded, the return is left alone.
    EntryOnly,
}

#[cfg_attr(test, derive(PartialEq, Debug))]
pub struct Plan {
    /// Where the `jmp` goes (after endbr64).
    pub patch_at: u64,
    /// Bytes overwritten (the jmp plus int3 filler).
    pub patch_len: usize,
    /// The instructions moved into the stub: `moved_len` bytes of code at
    /// `moved_at` (decoded again from there when the stub is built, before
    /// anything is patched), `moved_count` instructions. With none (a GOT
    /// import's stub, whose body is a jump to `resume`), `moved_at` is an
    /// address no instruction uses.
    pub moved_at: u64,
    pub moved_len: usize,
    pub moved_count: usize,
    /// Every moved instruction can be copied byte for byte.
    pub verbatim: bool,
    /// Where execution continues after the moved instructions, if they can
    /// fall through.
    pub resume: Option<u64>,
    /// For a 2-byte `jmp rel8` entry: where (in padding within reach) the
    /// 5-byte `jmp rel32` to the stub goes.
    pub trampoline: Option<u64>,
    /// The trap fallback: the entry is a one-byte `int3`, which the
    /// agent's SIGTRAP handler turns into a jump to the stub (see
    /// [`plan_trap`]); the first instruction alone is moved.
    pub trap: bool,
}

impl Plan {
    /// The end of the bytes the plan writes (entry patch and trampoline):
    /// the padding after the function from there on is still free.
    pub fn writes_end(&self) -> u64 {
        let entry = self.patch_at + self.patch_len as u64;
        match self.trampoline {
            Some(t) => entry.max(t + JMP_LEN as u64),
            None => entry,
        }
    }
}

/// The padding before a function (after the previous one), which a 2-byte
/// entry jump may use for its 5-byte trampoline.
#[derive(Clone, Copy, Debug)]
pub struct Before<'a> {
    /// Where the padding starts (the previous function's end).
    pub at: u64,
    /// Its bytes (up to the function, or to the first byte that is not
    /// padding); checked again here.
    pub bytes: &'a [u8],
    /// The previous function's own patch may write up to here: the
    /// trampoline starts at or after it.
    pub free_from: u64,
}

/// Room outside the function that its patch may use, besides the padding
/// after it (the end of `code`), and whether the trap fallback may be used
/// when no jump fits.
#[derive(Clone, Copy, Debug, Default)]
pub struct Around<'a> {
    pub before: Option<Before<'a>>,
    pub trap: bool,
    /// The module's branch patterns into entries that lie in the function
    /// (see [`entry_hits`]), by address; `None`: the function's own bytes
    /// are read for them.
    pub hits: Option<&'a [Hit]>,
}

fn is_terminator(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Interrupt
    ) || i.mnemonic() == Mnemonic::Ud2
        || i.mnemonic() == Mnemonic::Hlt
}

/// Decodes `bytes` at `ip` into `v` (cleared first).
fn decode_all(bytes: &[u8], ip: u64, v: &mut Vec<Instruction>) -> Result<(), String> {
    v.clear();
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() {
            return Err(format!("undecodable bytes at +{:#x}", i.ip() - ip));
        }
        v.push(i);
    }
    Ok(())
}

/// A plan moving `moved` (the first instructions of a function).
fn moved_plan(
    patch_at: u64,
    patch_len: usize,
    moved: &[Instruction],
    resume: Option<u64>,
    trampoline: Option<u64>,
) -> Plan {
    let first = moved[0].ip();
    let last = moved.last().unwrap();
    Plan {
        patch_at,
        patch_len,
        moved_at: first,
        moved_len: (last.next_ip() - first) as usize,
        moved_count: moved.len(),
        verbatim: moved.iter().all(copies_verbatim),
        resume,
        trampoline,
        trap: false,
    }
}

fn branch_target(i: &Instruction) -> Option<u64> {
    match i.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            Some(i.near_branch_target())
        }
        _ => None,
    }
}

/// The targets of the direct jumps of `code` (at `addr`) that lie outside
/// it, appended to `out` (decoding stops at undecodable bytes): in
/// hand-written assembly a function may jump into another one's first
/// instructions (glibc's `__mempcpy_*` into `__memmove_*` after its
/// first `mov`), which a patch there would overwrite. Calls are left out
/// (they target entries).
pub fn jumps_out(addr: u64, code: &[u8], out: &mut Vec<u64>) {
    let end = addr + code.len() as u64;
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut i = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut i);
        if i.is_invalid() {
            return;
        }
        if i.flow_control() == FlowControl::Call {
            continue;
        }
        if let Some(t) = branch_target(&i) {
            if t < addr || t >= end {
                out.push(t);
            }
        }
    }
}

/// How far after a function's address a branch target can be a
/// conflict: the moved instructions cover 5 bytes after an `endbr64`, and
/// the last may be 15 bytes long (4 + 4 + 15).
pub const ENTRY_REACH: u64 = 23;

/// A direct branch, or a byte pattern that reads as one, at `at` whose
/// target lies within [`ENTRY_REACH`] bytes of a function's address (a
/// call to the address itself excepted): what decides whether an entry
/// may be patched (a loop back to it, a branch into the bytes a patch
/// overwrites), found for a whole module in one pass by [`entry_hits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hit {
    pub at: u64,
    pub target: u64,
    pub call: bool,
}

/// The functions' addresses as a set of windows `[addr, addr +
/// ENTRY_REACH]`: one bit per 8 bytes answers most questions, an index
/// per 64 bytes the rest (no search: start-up asks once for every branch
/// pattern of a module).
pub struct EntryWindows<'a> {
    sorted: &'a [u64],
    lo: u64,
    bits: Vec<u64>,
    /// Per 64 bytes from `lo`: the index of the first address at or after.
    first: Vec<u32>,
}

impl<'a> EntryWindows<'a> {
    /// `sorted`: the functions' runtime addresses, ascending.
    pub fn new(sorted: &'a [u64]) -> Self {
        let lo = sorted.first().copied().unwrap_or(0) & !63;
        let hi = sorted.last().copied().unwrap_or(0) + ENTRY_REACH + 1;
        let mut bits = vec![0u64; ((hi - lo) / 8 / 64 + 1) as usize];
        for &a in sorted {
            for k in (a - lo) / 8..=(a + ENTRY_REACH - lo) / 8 {
                bits[(k / 64) as usize] |= 1 << (k % 64);
            }
        }
        let blocks = ((hi - lo) / 64 + 1) as usize;
        let mut first = Vec::with_capacity(blocks);
        let mut j = 0;
        for b in 0..blocks {
            let at = lo + 64 * b as u64;
            while j < sorted.len() && sorted[j] < at {
                j += 1;
            }
            first.push(j as u32);
        }
        EntryWindows {
            sorted,
            lo,
            bits,
            first,
        }
    }

    /// The address of the function whose window holds `t`.
    #[inline]
    pub fn entry_of(&self, t: u64) -> Option<u64> {
        let k = t.wrapping_sub(self.lo) / 8;
        if self.bits.get((k / 64) as usize).copied().unwrap_or(0) & (1 << (k % 64)) == 0 {
            return None;
        }
        self.entry_slow(t)
    }

    fn entry_slow(&self, t: u64) -> Option<u64> {
        let mut j = *self.first.get(((t - self.lo) / 64) as usize)? as usize;
        while self.sorted.get(j).is_some_and(|&a| a <= t) {
            j += 1;
        }
        let a = *self.sorted.get(j.checked_sub(1)?)?;
        (t - a <= ENTRY_REACH).then_some(a)
    }
}

/// Adds to `out` the branch patterns of `code` (at `addr`) that start
/// before offset `upto` and whose target lies in an entry window (see
/// [`Hit`]), in no particular order.
pub fn entry_hits(code: &[u8], addr: u64, upto: usize, windows: &EntryWindows, out: &mut Vec<Hit>) {
    let mut note = |o: usize, t: u64, kind: Pattern| {
        if o >= upto || kind == Pattern::RipLea {
            return;
        }
        let Some(entry) = windows.entry_of(t) else {
            return;
        };
        let call = kind == Pattern::Call;
        if !(call && t == entry) {
            out.push(Hit {
                at: addr + o as u64,
                target: t,
                call,
            });
        }
    };
    fctrace_symbols::far_patterns(code, addr, &mut note);
    fctrace_symbols::near_patterns(code, addr, 0..upto, &mut note);
}

/// A direct jump, or a byte pattern that reads as one, from the code at
/// `from` (`len` bytes) to `target` outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Exit {
    pub target: u64,
    pub from: u64,
    pub len: u64,
}

impl Exit {
    /// Whether a jump of the code it comes from (`code`, its bytes) really
    /// goes to its target: decoded as [`jumps_out`] does.
    pub fn is_real(&self, code: &[u8]) -> bool {
        let mut out = Vec::new();
        jumps_out(self.from, code, &mut out);
        out.contains(&self.target)
    }
}

/// Whether the code at the entry of a function (`code` at `addr`) reads or
/// writes its own return address (`[rsp]` as it was at the entry) before
/// any branch: hand-written assembly that moves its return address
/// elsewhere (libffi's `ffi_call_unix64` copies it into a frame of its
/// own and returns through the copy), which the entry stub's return
/// address would break. Compiled code never does (its unwinding
/// information says where the return address stays).
pub fn uses_return_address(addr: u64, code: &[u8]) -> bool {
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut i = Instruction::default();
    // Bytes pushed since the entry: the return address is at rsp + depth.
    let mut depth: i64 = 0;
    for _ in 0..16 {
        if !d.can_decode() {
            return false;
        }
        d.decode_out(&mut i);
        if i.is_invalid() || i.flow_control() != FlowControl::Next {
            return false;
        }
        let touches = (0..i.op_count()).any(|k| {
            i.op_kind(k) == OpKind::Memory
                && i.memory_base() == Register::RSP
                && i.memory_index() == Register::None
                && i.memory_displacement64() as i64 == depth
        });
        if touches {
            return true;
        }
        match i.mnemonic() {
            Mnemonic::Push => depth += 8,
            Mnemonic::Pop => depth -= 8,
            Mnemonic::Sub | Mnemonic::Add
                if i.op0_kind() == OpKind::Register
                    && i.op0_register() == Register::RSP
                    && matches!(
                        i.op1_kind(),
                        OpKind::Immediate8to64 | OpKind::Immediate32to64
                    ) =>
            {
                let n = i.immediate(1) as i64;
                depth += if i.mnemonic() == Mnemonic::Sub { n } else { -n };
            }
            _ if i.op0_kind() == OpKind::Register && i.op0_register() == Register::RSP => {
                return false;
            }
            _ => {}
        }
    }
    false
}

/// Whether `i` is an alignment-padding instruction (`nop` forms, `int3`).
fn is_padding_insn(i: &Instruction) -> bool {
    matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
}

/// Whether the bytes at the start of `b` are padding instructions covering
/// at least `n` bytes (the last one may extend past them).
fn padding_covers(b: &[u8], ip: u64, n: usize) -> bool {
    let mut d = Decoder::with_ip(64, b, ip, DecoderOptions::NONE);
    let mut covered = 0;
    while covered < n {
        if !d.can_decode() {
            return false;
        }
        let i = d.decode();
        if i.is_invalid() || !is_padding_insn(&i) {
            return false;
        }
        covered += i.len();
    }
    true
}

/// Length of the run of padding instructions at the start of `b`.
fn padding_run(b: &[u8], ip: u64) -> usize {
    let mut d = Decoder::with_ip(64, b, ip, DecoderOptions::NONE);
    let mut run = 0;
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() || !is_padding_insn(&i) {
            break;
        }
        run += i.len();
    }
    run
}

/// The extent of a function whose symbol has no size (hand-written
/// assembly, crt files): a linear sweep from its entry that stops at a
/// terminator once every forward branch seen so far has been passed, and
/// never beyond `code` (which ends at the next symbol).
pub fn infer_size(addr: u64, code: &[u8]) -> Option<usize> {
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut furthest = addr;
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() {
            return None;
        }
        if let Some(t) = branch_target(&i) {
            if i.flow_control() != FlowControl::Call && t > furthest && t < addr + code.len() as u64
            {
                furthest = t;
            }
        }
        if is_terminator(&i) && i.next_ip() > furthest {
            return Some((i.next_ip() - addr) as usize);
        }
    }
    None
}

/// `addr`: runtime address of the function; `code`: its bytes from `addr`
/// to the end of the padding after it; `size`: the function's size;
/// `around`: other padding its patch may use; `scratch`: room for the
/// decoded function (reused from one call to the next).
pub fn plan(
    addr: u64,
    size: usize,
    code: &[u8],
    around: Around,
    scratch: &mut Vec<Instruction>,
) -> Result<Plan, String> {
    plan_noted(addr, size, code, around, scratch)
}

fn plan_noted(
    addr: u64,
    size: usize,
    code: &[u8],
    around: Around,
    scratch: &mut Vec<Instruction>,
) -> Result<Plan, String> {
    match plan_jump(addr, size, code, around, scratch) {
        Err(why) if around.trap && size != 0 => {
            plan_trap(addr, size, code, scratch).map_err(|e| format!("{why}; no trap either: {e}"))
        }
        r => r,
    }
}

/// The trap fallback, for an entry no jump fits (shorter than 5 bytes
/// without padding, a loop back to the entry in a function that makes
/// calls, a branch into its first bytes with no padding in reach...): a
/// one-byte `int3` replaces the first byte of the first instruction (after
/// `endbr64`). The agent's SIGTRAP handler (`signal::agent_trap`) sets the
/// interrupted context's instruction pointer to the function's stub, a
/// normal one whose body is that first instruction, relocated, then a jump
/// to the second. Nothing else of the function changes, so any branch may
/// land anywhere after its first instruction; a branch back to the entry
/// traps again, and the handler tells it from a call by the stack: the
/// slot at the stack pointer then holds the stub's own return site.
fn plan_trap(
    addr: u64,
    size: usize,
    code: &[u8],
    scratch: &mut Vec<Instruction>,
) -> Result<Plan, String> {
    let size = size.min(code.len());
    let off = if code[..size].starts_with(&ENDBR64) {
        ENDBR64.len()
    } else {
        0
    };
    let start = addr + off as u64;
    decode_all(&code[off..size], start, scratch)?;
    let body: &[Instruction] = scratch;
    let Some(first) = body.first() else {
        return Err("no instructions after endbr64".into());
    };
    check_movable(first, true)?;
    let end = first.next_ip();
    for i in body {
        if let Some(t) = branch_target(i) {
            if t > start && t < end {
                return Err("a branch lands inside its first instruction".into());
            }
        }
    }
    let resume = (!is_terminator(first)).then_some(end);
    Ok(Plan {
        trap: true,
        ..moved_plan(start, 1, &body[..1], resume, None)
    })
}

/// [`plan`] with a jump at the entry.
fn plan_jump(
    addr: u64,
    size: usize,
    code: &[u8],
    around: Around,
    scratch: &mut Vec<Instruction>,
) -> Result<Plan, String> {
    if size == 0 {
        return Err("symbol has no size".into());
    }
    let size = size.min(code.len());
    let off = if code[..size].starts_with(&ENDBR64) {
        ENDBR64.len()
    } else {
        0
    };
    let start = addr + off as u64;
    let room = code.len() - off; // function rest plus padding
    if room < JMP_LEN {
        return Err(format!("only {size} bytes long with no padding after it"));
    }
    if let Some(plan) = plan_jump_common(addr, size, code, off, scratch, around.hits) {
        return Ok(plan);
    }
    decode_all(&code[off..size], start, scratch)?;
    let body: &[Instruction] = scratch;
    if body.is_empty() {
        return Err("no instructions after endbr64".into());
    }
    // Displace the first instructions covering 5 bytes.
    let mut n_moved = 0;
    let mut len = 0usize;
    for i in body {
        n_moved += 1;
        len += i.len();
        if len >= JMP_LEN {
            break;
        }
    }
    let moved = &body[..n_moved];
    let end_of_fn = off + len == size;
    let mut patch_len = len;
    if len < JMP_LEN {
        // The whole function is shorter than a jmp: it must end in a
        // terminator, and the padding after it takes the rest of the jmp.
        if !is_terminator(moved.last().unwrap()) {
            return Err(format!("only {size} bytes long and falls through its end"));
        }
        if !padding_covers(&code[size..], addr + size as u64, off + JMP_LEN - size) {
            return Err(format!("only {size} bytes long with no padding after it"));
        }
        patch_len = JMP_LEN;
    }
    let range = start..start + patch_len as u64;
    let moved_end = start + len as u64;
    let mut conflict = false;
    let mut has_call = false;
    let mut has_indirect = false;
    for i in body {
        match i.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => has_call = true,
            FlowControl::IndirectBranch => has_indirect = true,
            _ => {}
        }
        if let Some(t) = branch_target(i) {
            let is_call = i.flow_control() == FlowControl::Call;
            let from_moved = i.ip() < moved_end;
            // A jump back to the entry would run the patched jmp again and
            // count a call that did not happen.
            if !is_call && (addr..=start).contains(&t) {
                conflict = true;
            }
            if !from_moved && t > start && range.contains(&t) {
                conflict = true;
            }
        }
    }
    if conflict {
        if has_call || has_indirect {
            // Moving the whole function would leave return addresses (or
            // jump-table targets) pointing into moved code: a 2-byte entry
            // jump moves fewer bytes, if every branch lands after them.
            let what = if has_call {
                "it makes calls"
            } else {
                "it has an indirect jump"
            };
            return plan_short(addr, size, code, off, body, around).map_err(|why| match why {
                Short::LoopsToEntry => format!("a branch loops back to its entry, and {what}"),
                Short::Conflict => format!("a branch targets its first bytes, and {what}"),
                Short::NoPadding => format!(
                    "a branch targets its first 5 bytes, {what}, and no padding is within reach of a 2-byte jump"
                ),
                Short::Unmovable(e) => e,
            });
        }
        let last = body.last().unwrap();
        let resume = if is_terminator(last) {
            None
        } else {
            Some(addr + size as u64)
        };
        return Ok(moved_plan(start, JMP_LEN, body, resume, None));
    }
    for (k, i) in moved.iter().enumerate() {
        if let Err(e) = check_movable(i, k + 1 == moved.len()) {
            return plan_short(addr, size, code, off, body, around).map_err(|_| e);
        }
    }
    let last = moved.last().unwrap();
    let resume = if is_terminator(last) && (end_of_fn || len < JMP_LEN) {
        None
    } else {
        Some(start + len as u64)
    };
    Ok(moved_plan(start, patch_len, moved, resume, None))
}

/// [`plan_jump`]'s common case, which keeps only the moved instructions
/// (in `scratch`): the first instructions cover 5 bytes of the function,
/// no branch lands inside them or loops back to the entry, and they can
/// be moved. `None` for anything else (undecodable bytes among the
/// instructions decoded included), which the full analysis then decides.
///
/// Only the moved instructions are decoded up front. The rest of the
/// function is read as bytes ([`fctrace_symbols::branch_patterns`]): a
/// pattern whose target would be a conflict may be an instruction or lie
/// inside one, so the instructions are decoded from the moved ones up to
/// it and checked exactly. Start-up runs this on every function of every
/// traced module, and decoding every instruction was most of its time.
fn plan_jump_common(
    addr: u64,
    size: usize,
    code: &[u8],
    off: usize,
    scratch: &mut Vec<Instruction>,
    hits: Option<&[Hit]>,
) -> Option<Plan> {
    let start = addr + off as u64;
    let body = &code[off..size];
    let mut d = Decoder::with_ip(64, body, start, DecoderOptions::NONE);
    let mut i = Instruction::default();
    scratch.clear();
    let mut len = 0usize;
    while len < JMP_LEN {
        if !d.can_decode() {
            return None;
        }
        d.decode_out(&mut i);
        if i.is_invalid() {
            return None;
        }
        len += i.len();
        scratch.push(i);
    }
    let moved_end = start + len as u64;
    // As in plan_jump: a jump back to the entry, or a branch from after
    // the moved instructions into them.
    let conflicts = |i: &Instruction| match branch_target(i) {
        Some(t) => {
            (i.flow_control() != FlowControl::Call && (addr..=start).contains(&t))
                || (i.ip() >= moved_end && t > start && t < moved_end)
        }
        None => false,
    };
    if scratch.iter().any(conflicts) {
        return None;
    }
    // Every instruction starting before `checked` has been checked.
    let mut checked = moved_end;
    let mut clear = true;
    let mut check = |at: u64, t: u64, kind: Pattern| {
        let suspect = match kind {
            Pattern::RipLea => false,
            Pattern::Call => t > start && t < moved_end,
            Pattern::Jump | Pattern::Loop => (addr..moved_end).contains(&t),
        };
        while clear && suspect && at >= moved_end && checked <= at {
            if !d.can_decode() {
                clear = false;
                break;
            }
            d.decode_out(&mut i);
            clear = !i.is_invalid() && !conflicts(&i);
            checked = i.next_ip();
        }
    };
    match hits {
        Some(hits) => {
            for h in hits {
                let kind = if h.call { Pattern::Call } else { Pattern::Jump };
                check(h.at, h.target, kind);
            }
        }
        None => {
            let rest = &body[len..];
            let mut each = |o: usize, t: u64, kind: Pattern| check(moved_end + o as u64, t, kind);
            fctrace_symbols::far_patterns(rest, moved_end, &mut each);
            // A rel8 jump lands at most 126 bytes before it: from 126 bytes
            // after the moved instructions on, none reaches them.
            fctrace_symbols::near_patterns(rest, moved_end, 0..rest.len().min(126), &mut each);
        }
    }
    if !clear {
        return None;
    }
    let n = scratch.len();
    if scratch
        .iter()
        .enumerate()
        .any(|(k, m)| check_movable(m, k + 1 == n).is_err())
    {
        return None;
    }
    let end_of_fn = off + len == size;
    let resume = if is_terminator(&scratch[n - 1]) && end_of_fn {
        None
    } else {
        Some(moved_end)
    };
    Some(moved_plan(start, len, scratch, resume, None))
}

const SHORT_JMP_LEN: usize = 2;
/// How far a `jmp rel8` reaches, from the end of the jump.
const REL8_BACK: u64 = 128;
const REL8_FORWARD: u64 = 127;

/// Why a 2-byte entry jump cannot be used.
#[derive(Debug)]
enum Short {
    /// A branch goes to the entry itself.
    LoopsToEntry,
    /// A branch lands inside the instructions the jump displaces.
    Conflict,
    /// No 5 bytes of padding within reach.
    NoPadding,
    /// An instruction among the first 2 bytes cannot be moved.
    Unmovable(String),
}

/// The entry takes a 2-byte `jmp rel8` to a 5-byte `jmp rel32` placed in
/// padding within reach of it. Only the first instructions covering 2
/// bytes move, so:
///
/// - for tiny functions such as `push rax; call rdi; pop rax; ret`, where a
///   5-byte patch would cover the return address of a call, a call among
///   them ends the moved block and returns into intact code;
/// - for functions with calls or jump tables whose loop (or other branch)
///   lands inside their first 5 bytes but after the first instructions
///   covering 2 (`push rbx; mov rbx, rsi; loop: ...`, Lua's
///   `reallymarkobject`), the branch lands in intact code, and no return
///   address or jump-table target points into moved code.
///
/// A branch to the entry itself (or into the moved bytes) refuses it.
///
/// The 5-byte jump goes, first that fits and is in reach, into: the
/// padding after the function (if the function ends with a terminator or a
/// call, so that nothing falls through into it); the padding before it
/// (the previous function's, from where that one's patch stops); or dead
/// alignment padding inside it: a run of `nop`/`int3` right after a
/// terminator (`ret`, `jmp`, ...), ending at an 8-byte boundary (an
/// aligned label: gcc's `.p2align`), that no direct branch of the function
/// lands in.
fn plan_short(
    addr: u64,
    size: usize,
    code: &[u8],
    off: usize,
    body: &[Instruction],
    around: Around,
) -> Result<Plan, Short> {
    let start = addr + off as u64;
    let mut n_moved = 0;
    let mut len = 0;
    for i in body {
        n_moved += 1;
        len += i.len();
        if len >= SHORT_JMP_LEN {
            break;
        }
    }
    if len < SHORT_JMP_LEN {
        return Err(Short::NoPadding);
    }
    let moved = &body[..n_moved];
    for (k, i) in moved.iter().enumerate() {
        check_movable(i, k + 1 == moved.len()).map_err(Short::Unmovable)?;
    }
    let range = start..start + len as u64;
    let mut targets = Vec::new();
    for i in body {
        if let Some(t) = branch_target(i) {
            let is_call = i.flow_control() == FlowControl::Call;
            if !is_call && (addr..=start).contains(&t) {
                return Err(Short::LoopsToEntry);
            }
            if i.ip() >= range.end && t > start && range.contains(&t) {
                return Err(Short::Conflict);
            }
            targets.push(t);
        }
    }
    let from = start + SHORT_JMP_LEN as u64;
    let in_reach = |t: u64| t + REL8_BACK >= from && t <= from + REL8_FORWARD;
    let fn_end = addr + size as u64;
    let last = body.last().unwrap();
    // After the function.
    let after = (is_terminator(last) || last.flow_control() == FlowControl::Call)
        && in_reach(fn_end)
        && padding_covers(&code[size..], fn_end, JMP_LEN);
    let mut trampoline = after.then_some(fn_end);
    // Before it.
    if trampoline.is_none() {
        if let Some(b) = around.before {
            let run = padding_run(b.bytes, b.at) as u64;
            let end = b.at + run; // the padding's end (at most `addr`)
            if end <= addr && end >= b.at.max(b.free_from) + JMP_LEN as u64 {
                // As close to the function as possible.
                let t = end - JMP_LEN as u64;
                if in_reach(t) {
                    trampoline = Some(t);
                }
            }
        }
    }
    // Dead alignment padding inside it.
    if trampoline.is_none() {
        let mut k = 0;
        while k < body.len() {
            if !is_terminator(&body[k]) || is_padding_insn(&body[k]) {
                k += 1;
                continue;
            }
            let run_start = body[k].next_ip();
            let mut run_end = run_start;
            let mut j = k + 1;
            while j < body.len() && is_padding_insn(&body[j]) {
                run_end = body[j].next_ip();
                j += 1;
            }
            let dead = run_end - run_start >= JMP_LEN as u64
                && run_end.is_multiple_of(8)
                && run_start >= range.end
                && !targets.iter().any(|&t| (run_start..run_end).contains(&t));
            if dead && in_reach(run_start) {
                trampoline = Some(run_start);
                break;
            }
            k = j.max(k + 1);
        }
    }
    let Some(trampoline) = trampoline else {
        return Err(Short::NoPadding);
    };
    let last = moved.last().unwrap();
    let resume = if is_terminator(last) {
        None
    } else {
        Some(start + len as u64)
    };
    Ok(moved_plan(start, len, moved, resume, Some(trampoline)))
}

fn check_movable(i: &Instruction, is_last: bool) -> Result<(), String> {
    match i.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => {
            if !is_last {
                return Err("a call inside its first 5 bytes".into());
            }
            for k in 0..i.op_count() {
                if i.op_kind(k) == OpKind::Register && i.op_register(k) == Register::RSP {
                    return Err("calls through rsp in its first bytes".into());
                }
            }
            Ok(())
        }
        FlowControl::XbeginXabortXend => Err("transactional instruction in its first bytes".into()),
        _ => {
            if matches!(
                i.mnemonic(),
                Mnemonic::Jrcxz
                    | Mnemonic::Jecxz
                    | Mnemonic::Loop
                    | Mnemonic::Loope
                    | Mnemonic::Loopne
            ) {
                return Err(format!("{:?} in its first bytes", i.mnemonic()));
            }
            Ok(())
        }
    }
}

/// Replaces a moved `call` by pushing the original return address (which
/// lies after the patched bytes, so it is intact) and jumping: the callee
/// returns into the original function, and unwinders see real addresses.
fn rewrite_call(i: &Instruction, out: &mut Vec<Instruction>) -> Result<(), String> {
    let err = |e: iced_x86::IcedError| e.to_string();
    let ret = i.next_ip();
    let mut lea = Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        MemoryOperand::with_base_displ(Register::RSP, -8),
    )
    .map_err(err)?;
    lea.set_ip(i.ip());
    out.push(lea);
    out.push(
        Instruction::with2(
            Code::Mov_rm32_imm32,
            MemoryOperand::with_base(Register::RSP),
            ret as u32,
        )
        .map_err(err)?,
    );
    out.push(
        Instruction::with2(
            Code::Mov_rm32_imm32,
            MemoryOperand::with_base_displ(Register::RSP, 4),
            (ret >> 32) as u32,
        )
        .map_err(err)?,
    );
    match i.op0_kind() {
        OpKind::NearBranch64 | OpKind::NearBranch32 | OpKind::NearBranch16 => {
            out.push(
                Instruction::with_branch(Code::Jmp_rel32_64, i.near_branch_target())
                    .map_err(err)?,
            );
        }
        OpKind::Register => {
            out.push(Instruction::with1(Code::Jmp_rm64, i.op0_register()).map_err(err)?);
        }
        OpKind::Memory => {
            let base = i.memory_base();
            let mut displ = i.memory_displacement64() as i64;
            if base == Register::RSP {
                displ += 8;
            }
            if i.memory_index() == Register::RSP {
                return Err("call through an rsp-indexed operand".into());
            }
            let m = MemoryOperand::new(
                base,
                i.memory_index(),
                i.memory_index_scale(),
                displ,
                if base == Register::RIP {
                    8
                } else {
                    i.memory_displ_size()
                },
                false,
                i.segment_prefix(),
            );
            out.push(Instruction::with1(Code::Jmp_rm64, m).map_err(err)?);
        }
        _ => return Err("unusual call form in its first bytes".into()),
    }
    Ok(())
}

/// Whether `i` can be copied byte for byte to another address: no operand
/// depends on where it is.
fn copies_verbatim(i: &Instruction) -> bool {
    !i.is_ip_rel_memory_operand()
        && matches!(i.flow_control(), FlowControl::Next | FlowControl::Return)
}

fn rel32(from_end: u64, to: u64) -> Option<[u8; 4]> {
    let d = to as i64 - from_end as i64;
    i32::try_from(d).ok().map(i32::to_le_bytes)
}

/// Addresses in a stub that was built.
#[derive(Clone, Copy, Debug)]
pub struct Built {
    /// The return site: where the stub's `call body` returns (what
    /// unwinders see in the caller's return slot while the function runs);
    /// `None` for an entry-only stub.
    pub ret_site: Option<u64>,
    /// The body: the moved instructions, relocated.
    pub body: u64,
}

/// What a stub hands its common entry in rax: the function id, or (for
/// the fast flagged entry) the address of its `runtime::state::FastDesc`.
#[derive(Clone, Copy, Debug)]
pub enum StubArg {
    Id(u32),
    Desc(u64),
}

/// The common case of `build_stub`, without an assembler: a fixed template
/// with the moved instructions copied verbatim, appended to `v`. `None` if
/// a displacement to the common block does not fit (then `v` is left with
/// partial code).
fn build_stub_fast(
    plan: &Plan,
    code: &[u8],
    at: u64,
    common: &Common,
    id: StubArg,
    mode: Mode,
    v: &mut Vec<u8>,
) -> Option<Built> {
    build_from_template(plan, at, common, id, mode, v, |v, _| {
        v.extend_from_slice(code);
        Some(())
    })
}

/// The next case: the same template, each moved instruction re-encoded at
/// its new address on its own (iced's single-instruction encoder), which
/// keeps the targets of RIP-relative operands and of branches leaving the
/// moved code. The block encoder this avoids searches a layout for the
/// whole stub, some microseconds per stub: most of the start-up of a large
/// program once every function of its libraries is patched. `None` (with
/// partial code in `v`) where the block encoder is needed: a branch into
/// the moved code itself, a branch with no 32-bit form (`jrcxz`, `loop`),
/// a target out of reach.
fn build_stub_direct(
    plan: &Plan,
    (moved, code): (&[Instruction], &[u8]),
    at: u64,
    common: &Common,
    id: StubArg,
    mode: Mode,
    v: &mut Vec<u8>,
) -> Option<Built> {
    build_from_template(plan, at, common, id, mode, v, |v, at| {
        relocate_each(moved, code, plan.moved_at, v, at)
    })
}

/// The stub's fixed template around its body, appended to `v` (whose
/// first byte will be at `at`); `body(v, at)` appends the moved
/// instructions.
fn build_from_template(
    plan: &Plan,
    at: u64,
    common: &Common,
    id: StubArg,
    mode: Mode,
    v: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>, u64) -> Option<()>,
) -> Option<Built> {
    let at = at.wrapping_sub(v.len() as u64); // the address of v[0]
    v.push(0x50); // push rax
    match id {
        StubArg::Id(id) => {
            v.push(0xB8); // mov eax, id
            v.extend_from_slice(&id.to_le_bytes());
        }
        StubArg::Desc(d) => {
            v.extend_from_slice(&[0x48, 0xB8]); // mov rax, desc
            v.extend_from_slice(&d.to_le_bytes());
        }
    }
    let ret_site;
    match mode {
        Mode::Traced => {
            v.push(0xE8); // call common.entry
            v.extend_from_slice(&rel32(at + v.len() as u64 + 4, common.entry)?);
            v.push(0x58); // pop rax
                          // jne body (rel8: the body follows the next 15 bytes)
            v.extend_from_slice(&[0x75, 15]);
            v.extend_from_slice(&[0x48, 0x8D, 0x64, 0x24, 0x08]); // lea rsp, [rsp+8]
            v.push(0xE8); // call body
            let body = at + v.len() as u64 + 4 + 5;
            v.extend_from_slice(&rel32(at + v.len() as u64 + 4, body)?);
            ret_site = Some(at + v.len() as u64);
            v.push(0xE9); // jmp common.exit
            v.extend_from_slice(&rel32(at + v.len() as u64 + 4, common.exit)?);
            debug_assert_eq!(at + v.len() as u64, body);
        }
        Mode::EntryOnly => {
            v.push(0xE8); // call common.entry_only
            v.extend_from_slice(&rel32(at + v.len() as u64 + 4, common.entry_only)?);
            v.push(0x58); // pop rax
            ret_site = None;
        }
    }
    let body_at = at + v.len() as u64;
    body(v, at)?;
    if let Some(r) = plan.resume {
        match rel32(at + v.len() as u64 + 5, r) {
            Some(d) => {
                v.push(0xE9); // jmp rel32
                v.extend_from_slice(&d);
            }
            None => {
                // Out of reach (a library's function, for a GOT import):
                // jmp [rip+0] with the address after it.
                v.extend_from_slice(&[0xFF, 0x25, 0, 0, 0, 0]);
                v.extend_from_slice(&r.to_le_bytes());
            }
        }
    }
    Some(Built {
        ret_site,
        body: body_at,
    })
}

/// Appends `moved` (whose bytes are `code`, at `moved_at`) to `v`, whose
/// first byte will be at `at`: position-independent instructions as they
/// are, RIP-relative operands and branches leaving the moved code
/// re-encoded for their new address (a short branch in its 32-bit form),
/// calls as the block path rewrites them ([`rewrite_call`]). `None` where
/// only the block encoder can place them.
fn relocate_each(
    moved: &[Instruction],
    code: &[u8],
    moved_at: u64,
    v: &mut Vec<u8>,
    at: u64,
) -> Option<()> {
    let range = moved_at..moved.last().map_or(moved_at, |l| l.next_ip());
    let mut enc = Encoder::new(64);
    let mut calls = Vec::new();
    for i in moved {
        match i.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => {
                calls.clear();
                rewrite_call(i, &mut calls).ok()?;
                for c in &calls {
                    encode_at(&mut enc, c, v, at)?;
                }
                continue;
            }
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                if i.op0_kind() != OpKind::NearBranch64 || range.contains(&i.near_branch_target()) {
                    return None;
                }
                let mut near = *i;
                near.as_near_branch();
                encode_at(&mut enc, &near, v, at)?;
                continue;
            }
            FlowControl::XbeginXabortXend => return None,
            _ => {}
        }
        if i.is_ip_rel_memory_operand() {
            if range.contains(&i.ip_rel_memory_address()) {
                encode_at(&mut enc, &own_code_address(i).ok()?, v, at)?;
            } else {
                encode_at(&mut enc, i, v, at)?;
            }
        } else {
            let from = (i.ip() - moved_at) as usize;
            v.extend_from_slice(code.get(from..from + i.len())?);
        }
    }
    Some(())
}

/// Encodes `i` at the end of `v` (whose first byte will be at `at`),
/// without a copy of its bytes.
fn encode_at(enc: &mut Encoder, i: &Instruction, v: &mut Vec<u8>, at: u64) -> Option<()> {
    let here = at + v.len() as u64;
    enc.set_buffer(std::mem::take(v));
    let done = enc.encode(i, here);
    *v = enc.take_buffer();
    done.ok().map(|_| ())
}

/// Appends to `out` the stub for `plan`, to be placed at `at`, and returns
/// its addresses. `read(addr, len)` gives the current bytes at an address of the function
/// (not patched yet).
pub fn build_stub_with<'a>(
    plan: &Plan,
    read: impl FnOnce(u64, usize) -> &'a [u8],
    at: u64,
    common: &Common,
    id: StubArg,
    mode: Mode,
    out: &mut Vec<u8>,
) -> Result<Built, String> {
    let code = if plan.moved_count == 0 {
        &[][..]
    } else {
        read(plan.moved_at, plan.moved_len)
    };
    let mark = out.len();
    if plan.verbatim {
        if let Some(site) = build_stub_fast(plan, code, at, common, id, mode, out) {
            return Ok(site);
        }
        out.truncate(mark);
    }
    let mut moved = Vec::with_capacity(plan.moved_count);
    decode_all(code, plan.moved_at, &mut moved)?;
    if let Some(site) = build_stub_direct(plan, (&moved, code), at, common, id, mode, out) {
        return Ok(site);
    }
    out.truncate(mark);
    build_stub(plan, &moved, at, common, id, mode, out)
}

/// Appends to `out` the stub for `plan` (whose moved instructions are
/// `moved`), to be placed at `at`, relocating the moved instructions with
/// iced's block encoder; returns its addresses.
fn build_stub(
    plan: &Plan,
    moved: &[Instruction],
    at: u64,
    common: &Common,
    id: StubArg,
    mode: Mode,
    out: &mut Vec<u8>,
) -> Result<Built, String> {
    let err = |e: iced_x86::IcedError| e.to_string();
    let body_ip = plan.moved_at;
    let mut v: Vec<Instruction> = Vec::with_capacity(moved.len() + 12);
    v.push(Instruction::with1(Code::Push_r64, Register::RAX).map_err(err)?);
    v.push(
        match id {
            StubArg::Id(id) => Instruction::with2(Code::Mov_r32_imm32, Register::EAX, id),
            StubArg::Desc(d) => Instruction::with2(Code::Mov_r64_imm64, Register::RAX, d),
        }
        .map_err(err)?,
    );
    let ret_index;
    match mode {
        Mode::Traced => {
            v.push(Instruction::with_branch(Code::Call_rel32_64, common.entry).map_err(err)?);
            v.push(Instruction::with1(Code::Pop_r64, Register::RAX).map_err(err)?);
            v.push(Instruction::with_branch(Code::Jne_rel32_64, body_ip).map_err(err)?);
            v.push(
                Instruction::with2(
                    Code::Lea_r64_m,
                    Register::RSP,
                    MemoryOperand::with_base_displ(Register::RSP, 8),
                )
                .map_err(err)?,
            );
            v.push(Instruction::with_branch(Code::Call_rel32_64, body_ip).map_err(err)?);
            ret_index = Some(v.len());
            v.push(Instruction::with_branch(Code::Jmp_rel32_64, common.exit).map_err(err)?);
        }
        Mode::EntryOnly => {
            v.push(Instruction::with_branch(Code::Call_rel32_64, common.entry_only).map_err(err)?);
            v.push(Instruction::with1(Code::Pop_r64, Register::RAX).map_err(err)?);
            ret_index = None;
        }
    }
    let body_start = v.len();
    let moved_range = body_ip..moved.last().map_or(body_ip, |l| l.next_ip());
    for i in moved {
        if matches!(
            i.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) {
            rewrite_call(i, &mut v)?;
        } else if i.is_ip_rel_memory_operand() && moved_range.contains(&i.ip_rel_memory_address()) {
            v.push(own_code_address(i)?);
        } else {
            v.push(*i);
        }
    }
    if let Some(r) = plan.resume {
        v.push(Instruction::with_branch(Code::Jmp_rel32_64, r).map_err(err)?);
    }
    if moved.is_empty() {
        // The body is the jump alone: it takes the body's address, the
        // target of the branches above.
        v[body_start].set_ip(body_ip);
    }
    let block = InstructionBlock::new(&v, at);
    let res = BlockEncoder::encode(
        64,
        block,
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )
    .map_err(|e| format!("cannot relocate its first instructions: {e}"))?;
    out.extend_from_slice(&res.code_buffer);
    Ok(Built {
        ret_site: ret_index.map(|k| at + res.new_instruction_offsets[k] as u64),
        body: at + res.new_instruction_offsets[body_start] as u64,
    })
}

/// A moved instruction whose RIP-relative operand points into the moved
/// code itself (`lea rdi, [rip-9]`: the function taking its own address).
/// The block encoder would point it at the moved copy; the program must
/// see the original address (function pointers compare equal, code bytes
/// read are its own), so a `lea` becomes a `mov` of that address, and any
/// other access refuses the function.
fn own_code_address(i: &Instruction) -> Result<Instruction, String> {
    let addr = i.ip_rel_memory_address();
    match i.code() {
        Code::Lea_r64_m => {
            let mut m = Instruction::with2(Code::Mov_r64_imm64, i.op0_register(), addr)
                .map_err(|e| e.to_string())?;
            // Keeps its place as a branch target (the stub's `call body`).
            m.set_ip(i.ip());
            Ok(m)
        }
        _ => Err("reads its own first bytes".into()),
    }
}

fn jmp_rel32(at: u64, to: u64) -> [u8; JMP_LEN] {
    let rel = to as i64 - (at as i64 + JMP_LEN as i64);
    let mut b = [0xE9, 0, 0, 0, 0];
    b[1..].copy_from_slice(&(rel as i32).to_le_bytes());
    b
}

/// The writes that divert the function to its stub, each passed to
/// `write(address, bytes)`.
pub fn patch_bytes(plan: &Plan, stub: u64, mut write: impl FnMut(u64, &[u8])) {
    // The entry patch, int3-filled: at most the moved instructions
    // covering 5 bytes (each at most 15 bytes long).
    let mut b = [0xCCu8; JMP_LEN + 15];
    let n = plan.patch_len.min(b.len());
    if plan.trap {
        write(plan.patch_at, &b[..1]);
        return;
    }
    match plan.trampoline {
        None => {
            b[..JMP_LEN].copy_from_slice(&jmp_rel32(plan.patch_at, stub));
            write(plan.patch_at, &b[..n.max(JMP_LEN)]);
        }
        Some(t) => {
            let rel = t as i64 - (plan.patch_at as i64 + SHORT_JMP_LEN as i64);
            b[0] = 0xEB;
            b[1] = rel as i8 as u8;
            write(t, &jmp_rel32(t, stub));
            write(plan.patch_at, &b[..n.max(SHORT_JMP_LEN)]);
        }
    }
}

/// Whether the 5-byte jump of `plan` reaches `stub`.
pub fn reachable(plan: &Plan, stub: u64) -> bool {
    if plan.trap {
        // The handler sets the instruction pointer: any address.
        return true;
    }
    let from = plan.trampoline.unwrap_or(plan.patch_at);
    let d = stub as i64 - (from as i64 + JMP_LEN as i64);
    d >= i32::MIN as i64 && d <= i32::MAX as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::codegen::RegionWindows;

    const FUNC: u64 = 0x5555_0000_1000;
    const STUB: u64 = 0x5555_4000_0000;

    /// The common case as it was decided by decoding every instruction of
    /// the function: the reference for [`plan_jump_common`]'s byte scan.
    fn common_by_decoding(
        addr: u64,
        size: usize,
        code: &[u8],
        off: usize,
        scratch: &mut Vec<Instruction>,
    ) -> Option<Plan> {
        let start = addr + off as u64;
        decode_all(&code[off..size], start, scratch).ok()?;
        let mut len = 0;
        let n = scratch.iter().take_while(|i| {
            let before = len;
            len += i.len();
            before < JMP_LEN
        });
        let n = n.count();
        if len < JMP_LEN
            && n == scratch.len()
            && scratch.iter().map(|i| i.len()).sum::<usize>() < JMP_LEN
        {
            return None;
        }
        let moved_end = scratch[n - 1].next_ip();
        let conflict = scratch.iter().any(|i| match branch_target(i) {
            Some(t) => {
                (i.flow_control() != FlowControl::Call && (addr..=start).contains(&t))
                    || (i.ip() >= moved_end && t > start && t < moved_end)
            }
            None => false,
        });
        if conflict || (0..n).any(|k| check_movable(&scratch[k], k + 1 == n).is_err()) {
            return None;
        }
        let len = (moved_end - start) as usize;
        let resume = if is_terminator(&scratch[n - 1]) && off + len == size {
            None
        } else {
            Some(moved_end)
        };
        Some(moved_plan(start, len, &scratch[..n], resume, None))
    }

    /// The file bytes of `[addr, addr + len)` (ELF addresses) of `data`,
    /// through its PT_LOAD program headers.
    fn file_bytes(data: &[u8], addr: u64, len: u64) -> Option<&[u8]> {
        let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap());
        let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
        (0..phnum).find_map(|k| {
            let ph = phoff + k * phentsize;
            let kind = u32::from_le_bytes(data[ph..ph + 4].try_into().unwrap());
            let (offset, vaddr, filesz) = (u64_at(ph + 8), u64_at(ph + 16), u64_at(ph + 32));
            (kind == 1 && addr >= vaddr && addr + len <= vaddr + filesz).then(|| {
                let at = (offset + addr - vaddr) as usize;
                &data[at..at + len as usize]
            })
        })
    }

    #[test]
    fn every_short_jump_into_the_moved_bytes_is_seen() {
        // Five one-byte nops are moved; a `jmp rel8` at each offset after
        // them that can reach back into them, then `ret`.
        let addr = FUNC;
        let mut scratch = Vec::new();
        for o in 0..126usize {
            let mut code = vec![0x90; 5 + o];
            let from_end = addr + code.len() as u64 + 2;
            let rel = (addr + 4) as i64 - from_end as i64;
            code.extend_from_slice(&[0xeb, rel as i8 as u8, 0xc3]);
            assert!(rel >= -128, "offset {o}");
            let size = code.len();
            assert_eq!(
                plan_jump_common(addr, size, &code, 0, &mut scratch, None),
                None,
                "offset {o}"
            );
            assert_eq!(
                common_by_decoding(addr, size, &code, 0, &mut scratch),
                None,
                "offset {o}"
            );
            // The same bytes inside an instruction (a `mov eax, imm32`
            // holding them) are no jump.
            if o < 125 {
                let mut code = vec![0x90; 5 + o];
                let rel = rel - 1;
                code.extend_from_slice(&[0xb8, 0xeb, rel as i8 as u8, 0x90, 0x90, 0xc3]);
                let size = code.len();
                let plan = plan_jump_common(addr, size, &code, 0, &mut scratch, None);
                assert!(plan.is_some(), "offset {o}");
            }
        }
    }

    #[test]
    fn entry_windows_answer_as_a_search() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut starts = vec![0x40_1000u64];
        for _ in 0..500 {
            let gap = [1, 3, 16, 23, 24, 40, 64, 65, 200, 1000][(next() % 10) as usize];
            starts.push(starts.last().unwrap() + gap);
        }
        let windows = EntryWindows::new(&starts);
        let end = starts.last().unwrap() + 100;
        for t in 0x40_0f00..end {
            let want = starts
                .iter()
                .rev()
                .find(|&&a| a <= t)
                .filter(|&&a| t - a <= ENTRY_REACH)
                .copied();
            assert_eq!(windows.entry_of(t), want, "{t:#x}");
        }
    }

    #[test]
    fn jumps_read_as_bytes_are_told_from_real_jumps() {
        let at = 0x40_0000u64;
        // movabs rax, imm64 whose bytes read as `jmp +0x100`; a real
        // `jmp` to 0x40_2000; ret.
        let mut code = vec![0x48, 0xb8, 0xe9, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00];
        let from_end = at + code.len() as u64 + 5;
        code.push(0xe9);
        code.extend_from_slice(&((0x40_2000 - from_end) as i32).to_le_bytes());
        code.push(0xc3);
        let fake = at + 2 + 5 + 0x100;
        // Functions whose first bytes the two targets are.
        let starts = [fake - 2, 0x40_2000 - 1, 0x40_3000];
        let windows = EntryWindows::new(&starts);
        let mut hits = Vec::new();
        entry_hits(&code, at, code.len(), &windows, &mut hits);
        hits.sort_unstable();
        let targets: Vec<u64> = hits.iter().map(|h| h.target).collect();
        assert_eq!(targets, [fake, 0x40_2000]);
        let real: Vec<bool> = hits
            .iter()
            .map(|h| {
                let e = Exit {
                    target: h.target,
                    from: at,
                    len: code.len() as u64,
                };
                e.is_real(&code)
            })
            .collect();
        assert_eq!(real, [false, true]);
        // A target far from every function's first bytes is no hit.
        let windows = EntryWindows::new(&starts[2..]);
        hits.clear();
        entry_hits(&code, at, code.len(), &windows, &mut hits);
        assert_eq!(hits, []);
    }

    /// The hits of every function of a file (ELF addresses), by address,
    /// from one pass over the code between its first and last function.
    fn module_hits(data: &[u8], info: &fctrace_symbols::ElfInfo) -> Vec<Hit> {
        let mut starts: Vec<u64> = info.functions.iter().map(|f| f.addr).collect();
        starts.sort_unstable();
        let windows = EntryWindows::new(&starts);
        let mut hits = Vec::new();
        let (lo, hi) = (
            starts[0],
            info.functions
                .iter()
                .map(|f| f.addr + f.size)
                .max()
                .unwrap(),
        );
        // In pieces, as the agent reads them (a pattern may straddle two).
        let mut at = lo;
        while at < hi {
            let end = (at + 4099).min(hi);
            if let Some(code) = file_bytes(data, at, (end + 8).min(hi) - at) {
                entry_hits(code, at, (end - at) as usize, &windows, &mut hits);
            }
            at = end;
        }
        hits.sort_unstable();
        hits
    }

    fn hits_of(hits: &[Hit], lo: u64, hi: u64) -> &[Hit] {
        let a = hits.partition_point(|h| h.at < lo);
        let b = hits.partition_point(|h| h.at < hi);
        &hits[a..b]
    }

    #[test]
    fn the_byte_scan_plans_as_decoding_every_instruction() {
        let python = "/usr/bin/python3.11";
        assert!(
            std::path::Path::new(python).exists(),
            "{python} missing: apt-get install python3.11-minimal"
        );
        let me = std::env::current_exe().unwrap();
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let (mut same, mut undecodable) = (0, 0);
        for path in [
            std::path::Path::new(python),
            std::path::Path::new(libc),
            &me,
        ] {
            let data = std::fs::read(path).unwrap();
            let info = fctrace_symbols::read_file(path).unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let hits = module_hits(&data, &info);
            for f in info.functions.iter().filter(|f| f.size > 0 && !f.ifunc) {
                let Some(code) = file_bytes(&data, f.addr, f.size) else {
                    continue;
                };
                let size = code.len();
                let off = if code.starts_with(&ENDBR64) { 4 } else { 0 };
                if size < off + JMP_LEN {
                    continue;
                }
                let fast = plan_jump_common(f.addr, size, code, off, &mut a, None);
                let full = common_by_decoding(f.addr, size, code, off, &mut b);
                // The same from the module's hits.
                let mine = hits_of(&hits, f.addr, f.addr + f.size);
                let from_hits = plan_jump_common(f.addr, size, code, off, &mut a, Some(mine));
                assert_eq!(
                    fast,
                    from_hits,
                    "{}: {} at {:#x}",
                    path.display(),
                    f.name,
                    f.addr
                );
                match (&full, &fast) {
                    (None, Some(_)) => {
                        // Bytes that do not decode after the moved
                        // instructions: the sweep refused, the scan may
                        // not (no branch pattern lands in the first bytes).
                        assert!(
                            decode_all(&code[off..], f.addr + off as u64, &mut b).is_err(),
                            "{}: {} at {:#x}: scan planned {fast:?}, sweep refused",
                            path.display(),
                            f.name,
                            f.addr
                        );
                        undecodable += 1;
                    }
                    _ => {
                        assert_eq!(
                            full,
                            fast,
                            "{}: {} at {:#x}",
                            path.display(),
                            f.name,
                            f.addr
                        );
                        same += 1;
                    }
                }
            }
        }
        assert!(same > 10_000, "only {same} functions compared");
        assert!(
            undecodable < same / 100,
            "{undecodable} undecodable of {same}"
        );
    }

    fn common() -> Common {
        Common {
            entry: STUB - 0x1000,
            entry_flagged: STUB - 0x1000,
            entry_notrace: STUB - 0x1000,
            entry_filter: STUB - 0x1000,
            entry_fast: STUB - 0x1000,
            region_windows: RegionWindows::default(),
            entry_only: STUB - 0x2000,
            exit: STUB - 0x3000,
        }
    }

    /// What a stub does, independent of the encoding chosen: each
    /// instruction's mnemonic with its branch target or RIP-relative
    /// address (targets inside the stub given relative to the body).
    type Meaning = Vec<(Mnemonic, i128)>;

    fn meaning(code: &[u8], at: u64, body: u64) -> Meaning {
        let mut out = Vec::new();
        let mut d = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
        while d.can_decode() {
            let i = d.decode();
            assert!(!i.is_invalid(), "undecodable stub {code:02x?}");
            let target = if i.is_ip_rel_memory_operand() {
                i.ip_rel_memory_address()
            } else if matches!(i.op0_kind(), OpKind::NearBranch64) {
                i.near_branch_target()
            } else {
                i.immediate64()
            };
            let stub = at..at + code.len() as u64;
            let t = if stub.contains(&target) {
                target as i128 - body as i128 - (1 << 100)
            } else {
                target as i128
            };
            out.push((i.mnemonic(), t));
        }
        out
    }

    /// Builds the stub of `bytes` (a function's first instructions, at
    /// FUNC) both ways; returns (direct, block) meanings and whether the
    /// direct path took it.
    fn both(bytes: &[u8], mode: Mode) -> (Meaning, Meaning, bool) {
        let mut moved = Vec::new();
        decode_all(bytes, FUNC, &mut moved).unwrap();
        let plan = moved_plan(FUNC, JMP_LEN, &moved, Some(FUNC + bytes.len() as u64), None);
        let c = common();
        let mut direct = Vec::new();
        let built = build_stub_direct(
            &plan,
            (&moved, bytes),
            STUB,
            &c,
            StubArg::Id(7),
            mode,
            &mut direct,
        );
        let mut block = Vec::new();
        let b = build_stub(&plan, &moved, STUB, &c, StubArg::Id(7), mode, &mut block).unwrap();
        let took = built.is_some();
        let d = built.map_or(Vec::new(), |d| meaning(&direct, STUB, d.body));
        (d, meaning(&block, STUB, b.body), took)
    }

    #[test]
    fn moved_instructions_keep_their_meaning_one_by_one() {
        let cases: &[(&str, &[u8])] = &[
            (
                "rip-relative load",
                &[0x48, 0x8b, 0x05, 0x00, 0x10, 0x00, 0x00],
            ),
            (
                "rip-relative compare",
                &[0x80, 0x3d, 0x40, 0x00, 0x00, 0x00, 0x00],
            ),
            ("jmp rel32 (a tail call)", &[0xe9, 0x10, 0x20, 0x30, 0x00]),
            (
                "short jcc leaving the moved code",
                &[0x74, 0x40, 0x48, 0x89, 0xe5, 0x90],
            ),
            ("call rel32", &[0xe8, 0x00, 0x01, 0x00, 0x00]),
            ("call [rip+x]", &[0xff, 0x15, 0x00, 0x02, 0x00, 0x00]),
            (
                "lea of its own address",
                &[0x48, 0x8d, 0x3d, 0xf9, 0xff, 0xff, 0xff],
            ),
            (
                "push; mov (verbatim)",
                &[0x55, 0x48, 0x89, 0xe5, 0x41, 0x57],
            ),
        ];
        for (what, bytes) in cases {
            for mode in [Mode::Traced, Mode::EntryOnly] {
                let (direct, block, took) = both(bytes, mode);
                assert!(took, "{what}: the direct path refused it");
                assert_eq!(direct, block, "{what} ({mode:?})");
            }
        }
    }

    #[test]
    fn what_only_the_block_encoder_places_is_left_to_it() {
        // A short jcc into the moved code itself; jrcxz (no 32-bit form)
        // to a target out of its reach.
        let cases: &[(&str, &[u8])] = &[
            (
                "jcc into the moved code",
                &[0x74, 0x01, 0x90, 0x48, 0x89, 0xe5],
            ),
            ("jrcxz out of reach", &[0xe3, 0x40, 0x48, 0x89, 0xe5]),
        ];
        for (what, bytes) in cases {
            let (_, _, took) = both(bytes, Mode::Traced);
            assert!(!took, "{what}: the direct path should leave it");
        }
    }
}
