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

use crate::x86::Pattern;
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
    let mut cies = Cies::default();
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
            let Ok(fde) =
                frame.fde_from_offset(&bases, gimli::EhFrameOffset(off as usize), |f, b, o| {
                    cies.get(f, b, o)
                })
            else {
                continue;
            };
            out.push(fde_of(&frame, &bases, &mut ctx, &mut cies, &fde));
        }
    }
    if !from_table {
        let mut entries = frame.entries(&bases);
        while let Ok(Some(e)) = entries.next() {
            if let gimli::CieOrFde::Fde(partial) = e {
                if let Ok(fde) = partial.parse(|f, b, o| cies.get(f, b, o)) {
                    out.push(fde_of(&frame, &bases, &mut ctx, &mut cies, &fde));
                }
            }
        }
    }
    out.sort_unstable_by_key(|f| f.start);
    out.dedup_by_key(|f| f.start);
    Some(out)
}

type R<'a> = gimli::EndianSlice<'a, LittleEndian>;

/// The CIEs read so far, with the first row of an FDE that changes
/// nothing before its first instruction (see [`fde_of`]): a file has few
/// CIEs and thousands of FDEs, so each CIE is parsed and evaluated once.
#[derive(Default)]
struct Cies<'a> {
    seen: Vec<(
        usize,
        gimli::CommonInformationEntry<R<'a>>,
        Option<FirstRow>,
    )>,
}

impl<'a> Cies<'a> {
    fn get(
        &mut self,
        frame: &EhFrame<R<'a>>,
        bases: &BaseAddresses,
        offset: gimli::EhFrameOffset,
    ) -> gimli::Result<gimli::CommonInformationEntry<R<'a>>> {
        if let Some((_, cie, _)) = self.seen.iter().find(|c| c.0 == offset.0) {
            return Ok(cie.clone());
        }
        let cie = frame.cie_from_offset(bases, offset)?;
        self.seen.push((offset.0, cie.clone(), None));
        Ok(cie)
    }

    fn initial_row(&mut self, cie: usize) -> Option<&mut Option<FirstRow>> {
        self.seen.iter_mut().find(|c| c.0 == cie).map(|c| &mut c.2)
    }
}

/// An FDE's start, length and first row. An FDE whose instructions
/// start by advancing the location (or has none) begins in its CIE's
/// initial state, evaluated once per CIE.
fn fde_of<'a>(
    frame: &EhFrame<R<'a>>,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    cies: &mut Cies<'a>,
    fde: &gimli::FrameDescriptionEntry<R<'a>>,
) -> Fde {
    let row = if fde.is_signal_trampoline() {
        FirstRow::Other
    } else {
        let starts_at_cie = matches!(
            fde.instructions(frame, bases).next(),
            Ok(None | Some(gimli::CallFrameInstruction::AdvanceLoc { delta: 1.. }))
        );
        let cached = starts_at_cie
            .then(|| cies.initial_row(fde.cie().offset()))
            .flatten();
        match cached {
            Some(Some(row)) => *row,
            Some(slot) => *slot.insert(first_row(frame, bases, ctx, fde)),
            None => first_row(frame, bases, ctx, fde),
        }
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

/// The candidates of [`scan`] as a set that answers "no" to most
/// addresses from one cached word: a 65,536-bit filter on the low bits of
/// the address before the sorted list.
struct CandidateSet<'a> {
    sorted: &'a [u64],
    lo: u64,
    hi: u64,
    filter: Vec<u64>,
}

impl<'a> CandidateSet<'a> {
    fn new(sorted: &'a [u64]) -> Self {
        let mut filter = vec![0u64; 1024];
        for &c in sorted {
            let k = c as u16 as usize;
            filter[k / 64] |= 1 << (k % 64);
        }
        CandidateSet {
            sorted,
            lo: sorted.first().copied().unwrap_or(1),
            hi: sorted.last().copied().unwrap_or(0),
            filter,
        }
    }

    /// The candidate's index.
    fn find(&self, t: u64) -> Option<usize> {
        let k = t as u16 as usize;
        if t < self.lo || t > self.hi || self.filter[k / 64] & (1 << (k % 64)) == 0 {
            return None;
        }
        self.sorted.binary_search(&t).ok()
    }
}

/// For each candidate (sorted), the FDE a jump to it comes from when it
/// is reached only by jumps; `None` when something else reaches it (or
/// nothing does). The code is scanned for branches and `lea`s first;
/// a position-dependent program's words are then read only for the
/// candidates a jump reaches.
fn scan(
    sections: &[CodeSection],
    candidates: &[u64],
    fdes: &[(u64, u64, usize)],
    position_dependent: bool,
    pointers: Vec<u64>,
) -> Vec<Option<u64>> {
    let set = CandidateSet::new(candidates);
    let mut reached = vec![Reached::default(); candidates.len()];
    for &p in &pointers {
        if let Some(i) = set.find(p) {
            reached[i].taken = true;
        }
    }
    for s in sections.iter().filter(|s| s.exec) {
        let mut each = |off: usize, target: u64, kind: Pattern| {
            if kind == Pattern::Loop {
                return;
            }
            let Some(i) = set.find(target) else { return };
            if kind != Pattern::Jump {
                reached[i].taken = true;
                return;
            }
            // The FDE holding the jump.
            let at = s.addr + off as u64;
            let k = fdes.partition_point(|f| f.0 <= at);
            let from = k.checked_sub(1).map(|k| fdes[k]);
            let own = from.is_some_and(|f| f.0 == target);
            if !own {
                // The first in address order (the patterns come in none).
                let from = from.map_or(at, |f| f.0);
                let first = reached[i].jumped_from.map_or(from, |j| j.min(from));
                reached[i].jumped_from = Some(first);
            }
        };
        crate::x86::far_patterns(s.bytes, s.addr, &mut each);
        // A rel8 jump lands at most 129 bytes before or 126 after it.
        for w in near_windows(candidates, s.addr, s.bytes.len()) {
            crate::x86::near_patterns(s.bytes, s.addr, w, &mut each);
        }
    }
    if position_dependent {
        taken_by_words(sections, candidates, &mut reached);
    }
    reached
        .iter()
        .map(|r| if r.taken { None } else { r.jumped_from })
        .collect()
}

/// The offsets of a section (at `addr`, `len` bytes) from which a rel8
/// jump can reach a candidate: merged windows around each.
fn near_windows(candidates: &[u64], addr: u64, len: usize) -> Vec<std::ops::Range<usize>> {
    let end = addr + len as u64;
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for &c in candidates
        .iter()
        .filter(|&&c| c + 127 > addr && c < end + 129)
    {
        let lo = (c.saturating_sub(129).max(addr) - addr) as usize;
        let hi = ((c + 127).min(end) - addr) as usize;
        match out.last_mut() {
            Some(last) if lo <= last.end => last.end = last.end.max(hi),
            _ => out.push(lo..hi),
        }
    }
    out
}

/// In a position-dependent program, marks taken the candidates reached
/// only by jumps so far whose address a 4-byte word of the code or an
/// 8-byte word of the data holds.
fn taken_by_words(sections: &[CodeSection], candidates: &[u64], reached: &mut [Reached]) {
    let open: Vec<u64> = candidates
        .iter()
        .zip(reached.iter())
        .filter(|(_, r)| !r.taken && r.jumped_from.is_some())
        .map(|(&c, _)| c)
        .collect();
    let (Some(&lo), Some(&hi)) = (open.first(), open.last()) else {
        return;
    };
    let set = CandidateSet::new(&open);
    let mut take = |t: u64| {
        if let Some(k) = set.find(t) {
            if let Ok(i) = candidates.binary_search(&open[k]) {
                reached[i].taken = true;
            }
        }
    };
    for s in sections {
        if s.exec && hi <= u32::MAX as u64 {
            crate::x86::words_in(s.bytes, lo as u32, hi as u32, |_, w| take(w as u64));
        } else if s.data {
            for w in s.bytes.chunks_exact(8) {
                take(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
            }
        }
    }
}
