//! Function entries from call frame information: what a file without a
//! `.symtab` (stripped) still says about its functions. Its `.eh_frame`
//! holds one FDE per range of code the compiler emitted, local functions
//! included; [`find`] keeps those that start a function and says why it
//! leaves out the others (PLT stubs, split-off `.cold` parts, thread and
//! program starts, signal trampolines).
//!
//! The FDEs come from `.eh_frame_hdr`'s search table (sorted, one entry per
//! FDE), else from a walk of `.eh_frame`. An FDE is a function entry when:
//!
//! - it lies in an executable section other than the PLT's (`.plt`,
//!   `.plt.sec`, `.plt.got`, `.plt.bnd`: the imports name those);
//! - its first row is the state at a call's target, "the entry rule": the
//!   CFA is `rsp + 8`, the return address is saved at CFA - 8 and no other
//!   register is saved. A split part (`foo.cold`) starts with its
//!   parent's frame already set up (CFA further away, callee-saved
//!   registers stored), and there `[rsp]` is not a return address;
//!   `_start` and a new thread's first frame (glibc's `clone`) have no
//!   return address at all (undefined);
//! - no symbol names it as a split part (`foo.cold`; the caller drops
//!   those) and it does not start inside a named function (hand-written
//!   assembly's tails);
//! - it is not a frameless split part: the split part of a function that
//!   keeps no frame passes the entry rule (`digit.cold`, glibc's
//!   `round_away.cold`). Such a part is told by a cheap byte scan of the
//!   code: its start is not 16-byte aligned (functions are; `.cold` parts
//!   sit unaligned in `.text.unlikely`) and it is the target of a jump
//!   (`jmp`/`jcc`, rel8 or rel32) from outside its own range but of no
//!   `call`, no `lea` of a rip-relative address, no relocation
//!   (`R_X86_64_RELATIVE`, `_64`, `IRELATIVE` addends) and, in a
//!   position-dependent program, no 4-byte word in the code or 8-byte
//!   word in the data equal to its address. The scan looks at bytes, not
//!   at decoded instructions: a byte pattern that is not an instruction
//!   can make a part look called (kept: patching a frameless part is
//!   stack-safe, it behaves as a tail call) or a function look jumped to
//!   (only when nothing calls it or takes its address).

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, Pointer, RegisterRule,
    UnwindContext, UnwindSection,
};

/// One executable or data section as [`find`] needs it.
pub(crate) struct CodeSection<'data> {
    pub name: &'data str,
    pub addr: u64,
    pub exec: bool,
    /// Allocated (loaded) and not executable: where pointers lie.
    pub data: bool,
    pub bytes: &'data [u8],
}

/// What [`find`] gives: the entries no symbol names (start, length,
/// section index), and the FDEs left out with the reason.
#[derive(Default)]
pub(crate) struct Entries {
    pub functions: Vec<(u64, u64, usize)>,
    pub left_out: Vec<crate::info::LeftOut>,
    /// Named functions of size 0 that an FDE starts: (address, FDE length).
    pub sizes: Vec<(u64, u64)>,
}

/// The state an FDE's first row describes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FirstRow {
    /// CFA = rsp + 8, the return address at CFA - 8, nothing else saved.
    Entry,
    /// A frame already set up: CFA further away or registers saved.
    Framed,
    /// The return address is undefined.
    NoReturn,
    /// CFA given by an expression, a signal frame or unreadable rules.
    Other,
}

/// Why an FDE is left out (the fixed texts; "split part reached only by
/// jumps" adds where from).
pub const PLT_STUB: &str = "PLT stub";
pub const FRAMED: &str = "split part: its frame is already set up at its first instruction";
pub const NO_RETURN: &str = "no return address at its entry: a thread or program start";
pub const OTHER: &str =
    "not a call's target: its frame is a signal frame or given by an expression";
pub const INSIDE: &str = "starts inside a named function";
pub const JUMPS_ONLY: &str = "split part reached only by jumps";

/// One FDE: start, length, its first row.
struct Fde {
    start: u64,
    len: u64,
    row: FirstRow,
}

/// The FDEs of `.eh_frame` (`None` when there is none), by start.
fn read_fdes(sections: &[CodeSection]) -> Option<Vec<Fde>> {
    let by_name = |n: &str| sections.iter().find(|s| s.name == n);
    let eh = by_name(".eh_frame")?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh.addr);
    if let Some(t) = by_name(".text") {
        bases = bases.set_text(t.addr);
    }
    if let Some(g) = by_name(".got") {
        bases = bases.set_got(g.addr);
    }
    let hdr = by_name(".eh_frame_hdr");
    if let Some(h) = hdr {
        bases = bases.set_eh_frame_hdr(h.addr);
    }
    let frame = EhFrame::new(eh.bytes, LittleEndian);
    let mut ctx = Box::new(UnwindContext::<usize>::new());
    let mut out = Vec::new();
    let table = hdr.and_then(|h| EhFrameHdr::new(h.bytes, LittleEndian).parse(&bases, 8).ok());
    let mut from_table = false;
    if let Some(table) = table.as_ref().and_then(|t| t.table()) {
        from_table = true;
        let mut it = table.iter(&bases);
        while let Ok(Some((_, ptr))) = it.next() {
            let Pointer::Direct(at) = ptr else { continue };
            let Some(off) = at.checked_sub(eh.addr) else {
                continue;
            };
            let Ok(fde) = frame.fde_from_offset(
                &bases,
                gimli::EhFrameOffset(off as usize),
                EhFrame::cie_from_offset,
            ) else {
                continue;
            };
            out.push(fde_of(&frame, &bases, &mut ctx, &fde));
        }
    }
    if !from_table {
        let mut entries = frame.entries(&bases);
        while let Ok(Some(e)) = entries.next() {
            if let gimli::CieOrFde::Fde(partial) = e {
                if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                    out.push(fde_of(&frame, &bases, &mut ctx, &fde));
                }
            }
        }
    }
    out.sort_unstable_by_key(|f| f.start);
    out.dedup_by_key(|f| f.start);
    Some(out)
}

type R<'a> = gimli::EndianSlice<'a, LittleEndian>;

/// An FDE's start, length and first row.
fn fde_of<'a>(
    frame: &EhFrame<R<'a>>,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    fde: &gimli::FrameDescriptionEntry<R<'a>>,
) -> Fde {
    let row = if fde.is_signal_trampoline() {
        FirstRow::Other
    } else {
        first_row(frame, bases, ctx, fde)
    };
    Fde {
        start: fde.initial_address(),
        len: fde.len(),
        row,
    }
}

fn first_row<'a>(
    frame: &EhFrame<R<'a>>,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    fde: &gimli::FrameDescriptionEntry<R<'a>>,
) -> FirstRow {
    let Ok(mut rows) = fde.rows(frame, bases, ctx) else {
        return FirstRow::Other;
    };
    let Ok(Some(row)) = rows.next_row() else {
        return FirstRow::Other;
    };
    const RSP: u16 = 7;
    const RA: u16 = 16;
    let cfa_at_entry = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => register.0 == RSP && *offset == 8,
        CfaRule::Expression(_) => return FirstRow::Other,
    };
    // A register without a rule is undefined (gimli drops the rule of a
    // register made undefined, as `_start`'s CIE does for the return
    // address).
    match row.register(gimli::Register(RA)) {
        RegisterRule::Offset(-8) => {}
        RegisterRule::Undefined => return FirstRow::NoReturn,
        _ => return FirstRow::Framed,
    }
    let others = row.registers().any(|(reg, rule)| {
        reg.0 != RA && !matches!(rule, RegisterRule::Undefined | RegisterRule::SameValue)
    });
    if cfa_at_entry && !others {
        FirstRow::Entry
    } else {
        FirstRow::Framed
    }
}

fn is_plt(name: &str) -> bool {
    matches!(name, ".plt" | ".plt.sec" | ".plt.got" | ".plt.bnd")
}

/// The function entries of a file's FDEs that no symbol names, and the
/// FDEs left out. `named`: the named functions (start, size), by start;
/// `parts`: the starts of the symbols naming split parts, sorted;
/// `position_dependent`: an `ET_EXEC` file (its code and data hold
/// absolute addresses); `pointers`: the relocations' addends, asked for
/// only when the scan is needed.
pub(crate) fn find(
    sections: &[CodeSection],
    named: &[(u64, u64)],
    parts: &[u64],
    position_dependent: bool,
    pointers: impl FnOnce() -> Vec<u64>,
) -> Entries {
    let Some(fdes) = read_fdes(sections) else {
        return Entries::default();
    };
    let mut out = Entries::default();
    let left = |out: &mut Entries, f: &Fde, reason: String| {
        out.left_out.push(crate::info::LeftOut {
            addr: f.start,
            size: f.len,
            reason,
        })
    };
    // FDEs kept so far, and those to be checked by the scan (unaligned).
    let mut kept: Vec<(u64, u64, usize)> = Vec::new();
    let mut named_i = 0;
    for f in &fdes {
        let Some(sec) = sections
            .iter()
            .position(|s| s.exec && f.start >= s.addr && f.start < s.addr + s.bytes.len() as u64)
        else {
            continue;
        };
        // The named function starting at or before the FDE.
        while named_i < named.len() && named[named_i].0 < f.start {
            named_i += 1;
        }
        if let Some(&(_, size)) = named.get(named_i).filter(|n| n.0 == f.start) {
            if size == 0 && f.row == FirstRow::Entry {
                out.sizes.push((f.start, f.len));
            }
            continue;
        }
        if parts.binary_search(&f.start).is_ok() {
            continue;
        }
        if is_plt(sections[sec].name) {
            left(&mut out, f, PLT_STUB.into());
            continue;
        }
        let inside = named_i
            .checked_sub(1)
            .and_then(|k| named.get(k))
            .is_some_and(|&(a, n)| f.start < a + n);
        let why = match f.row {
            FirstRow::Entry if inside => INSIDE,
            FirstRow::Entry => {
                kept.push((f.start, f.len, sec));
                continue;
            }
            FirstRow::Framed => FRAMED,
            FirstRow::NoReturn => NO_RETURN,
            FirstRow::Other => OTHER,
        };
        left(&mut out, f, why.into());
    }
    let candidates: Vec<u64> = kept.iter().filter(|k| k.0 % 16 != 0).map(|k| k.0).collect();
    let jumped = if candidates.is_empty() {
        Vec::new()
    } else {
        scan(sections, &candidates, &kept, position_dependent, pointers())
    };
    for (start, len, sec) in kept {
        match candidates
            .binary_search(&start)
            .ok()
            .and_then(|i| jumped[i])
        {
            Some(from) => out.left_out.push(crate::info::LeftOut {
                addr: start,
                size: len,
                reason: format!("{JUMPS_ONLY} (from {from:#x})"),
            }),
            None => out.functions.push((start, len, sec)),
        }
    }
    out.left_out.sort_unstable_by_key(|l| l.addr);
    out
}

/// How the code reaches a candidate.
#[derive(Clone, Copy, Default)]
struct Reached {
    /// By a call, an address computed or stored somewhere.
    taken: bool,
    /// The start of the FDE a jump to it comes from (its own excluded).
    jumped_from: Option<u64>,
}

/// For each candidate (sorted), the FDE a jump to it comes from when it
/// is reached only by jumps; `None` when something else reaches it (or
/// nothing does).
fn scan(
    sections: &[CodeSection],
    candidates: &[u64],
    fdes: &[(u64, u64, usize)],
    position_dependent: bool,
    pointers: Vec<u64>,
) -> Vec<Option<u64>> {
    let lo = candidates[0];
    let hi = *candidates.last().unwrap_or(&lo);
    // One bit per byte of [lo, hi]: a candidate starts there.
    let mut bits = vec![0u64; ((hi - lo) / 64 + 1) as usize];
    for &c in candidates {
        let k = c - lo;
        bits[(k / 64) as usize] |= 1 << (k % 64);
    }
    let is_candidate = |t: u64| {
        t >= lo && t <= hi && {
            let k = t - lo;
            bits[(k / 64) as usize] & (1 << (k % 64)) != 0
        }
    };
    let mut reached = vec![Reached::default(); candidates.len()];
    let index = |t: u64| candidates.binary_search(&t).ok();
    let take = |reached: &mut Vec<Reached>, t: u64| {
        if is_candidate(t) {
            if let Some(i) = index(t) {
                reached[i].taken = true;
            }
        }
    };
    for &p in &pointers {
        take(&mut reached, p);
    }
    for s in sections.iter().filter(|s| s.data && position_dependent) {
        for w in s.bytes.chunks_exact(8) {
            take(
                &mut reached,
                u64::from_le_bytes(w.try_into().unwrap_or([0; 8])),
            );
        }
    }
    for s in sections.iter().filter(|s| s.exec) {
        scan_code(s, position_dependent, &mut |at, target, kind| {
            if !is_candidate(target) {
                return;
            }
            let Some(i) = index(target) else { return };
            match kind {
                Ref::Taken => reached[i].taken = true,
                Ref::Taken32 => reached[i].taken = true,
                Ref::Jump => {
                    // The FDE holding the jump.
                    let k = fdes.partition_point(|f| f.0 <= at);
                    let from = k.checked_sub(1).map(|k| fdes[k]);
                    let own = from.is_some_and(|f| f.0 == target);
                    if !own && reached[i].jumped_from.is_none() {
                        reached[i].jumped_from = Some(from.map_or(at, |f| f.0));
                    }
                }
            }
        });
    }
    reached
        .iter()
        .map(|r| if r.taken { None } else { r.jumped_from })
        .collect()
}

/// What a byte pattern does with an address.
#[derive(Clone, Copy)]
enum Ref {
    /// `call rel32`, `lea disp32(%rip)`.
    Taken,
    /// A 4-byte little-endian word (an absolute address in a
    /// position-dependent program's code).
    Taken32,
    /// `jmp`/`jcc` rel8 or rel32.
    Jump,
}

/// Every byte position of `s` read as the start of a direct branch, a
/// rip-relative `lea` or a 4-byte word: `f(address, target, kind)`.
fn scan_code(s: &CodeSection, words: bool, f: &mut impl FnMut(u64, u64, Ref)) {
    let b = s.bytes;
    let word = |k: usize| -> i32 {
        match b.get(k..k + 4) {
            Some(w) => i32::from_le_bytes([w[0], w[1], w[2], w[3]]),
            None => 0,
        }
    };
    // Every pattern takes at most 6 bytes (a jcc rel32): the section's
    // last 5 bytes start none that reaches past it.
    let n = b.len().saturating_sub(5);
    for i in 0..n {
        let at = s.addr + i as u64;
        if words {
            f(at, word(i) as u32 as u64, Ref::Taken32);
        }
        let first = OPCODES[b[i] as usize];
        if first == 0 {
            continue;
        }
        let target = |end: u64, rel: i32| at.wrapping_add(end).wrapping_add(rel as i64 as u64);
        match first {
            CALL => f(at, target(5, word(i + 1)), Ref::Taken),
            JMP32 => f(at, target(5, word(i + 1)), Ref::Jump),
            JCC32 if (0x80..=0x8f).contains(&b[i + 1]) => f(at, target(6, word(i + 2)), Ref::Jump),
            JMP8 => f(at, target(2, b[i + 1] as i8 as i32), Ref::Jump),
            // lea disp32(%rip), with or without a REX prefix before it.
            LEA if b[i + 1] & 0xc7 == 0x05 => f(at, target(6, word(i + 2)), Ref::Taken),
            _ => {}
        }
    }
}

/// The first bytes [`scan_code`] looks at, by kind (0: none).
const CALL: u8 = 1;
const JMP32: u8 = 2;
const JCC32: u8 = 3;
const JMP8: u8 = 4;
const LEA: u8 = 5;
const OPCODES: [u8; 256] = {
    let mut t = [0u8; 256];
    t[0xe8] = CALL;
    t[0xe9] = JMP32;
    t[0x0f] = JCC32;
    t[0xeb] = JMP8;
    let mut k = 0x70;
    while k <= 0x7f {
        t[k] = JMP8;
        k += 1;
    }
    t[0x8d] = LEA;
    t
};
