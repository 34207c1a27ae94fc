//! Unwinding a stack through a module's call frame information
//! (`.eh_frame`), from outside the process: for `fctrace -p`, which finds
//! the calls each stopped thread is in when it attaches.
//!
//! [`CallFrames::parse`] reads a file's `.eh_frame` once (its FDEs sorted
//! by address); [`CallFrames::step`] takes one frame's registers (DWARF
//! numbering, [`RA`] being the instruction pointer) and gives its caller's,
//! with the stack address of the frame's return address. Memory is read
//! through the caller's function (the stopped process's). Rules the
//! compilers and glibc use are followed: CFA as register + offset or an
//! expression (PLT entries, signal trampolines), registers saved at an
//! offset, in another register, or by an expression. Unknown or
//! malformed information ends the walk; it never panics.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameOffset, EvaluationResult, LittleEndian, Location,
    Register, RegisterRule, UnwindContext, UnwindSection, Value,
};
use object::{Object, ObjectSection, ObjectSegment};

/// DWARF register numbers on x86_64: rax, rdx, rcx, rbx, rsi, rdi, rbp,
/// rsp, r8..r15, then the return address (the instruction pointer).
pub const RSP: usize = 7;
pub const RA: usize = 16;
pub const NREGS: usize = 17;
/// Registers a callee keeps (rbx, rbp, r12..r15): a rule missing for one
/// of them means its value is the same in the caller.
const CALLEE_SAVED: [usize; 6] = [3, 6, 12, 13, 14, 15];

/// Register values of one frame (`None`: unknown).
pub type Regs = [Option<u64>; NREGS];

/// A module's call frame information.
pub struct CallFrames {
    /// The whole file (mapped, or the vDSO's image copied).
    file: Box<dyn AsRef<[u8]>>,
    /// Where `.eh_frame` and `.eh_frame_hdr` lie in it.
    eh_frame: std::ops::Range<usize>,
    eh_frame_hdr: Option<std::ops::Range<usize>>,
    bases: BaseAddresses,
    /// Without a usable `.eh_frame_hdr` search table: (first address, end,
    /// FDE offset), by address.
    fdes: Vec<(u64, u64, usize)>,
    /// The executable loaded segments: (file offset, file size, address).
    loads: Vec<(u64, u64, u64)>,
}

/// One frame unwound.
pub struct Step {
    /// The caller's registers (its instruction pointer in [`RA`]).
    pub caller: Regs,
    /// Where the frame's return address is stored on the stack, when it
    /// is (not for a signal frame's).
    pub ra_slot: Option<u64>,
    /// The frame is a signal trampoline: its caller was interrupted there
    /// (its instruction pointer is not a return address).
    pub signal: bool,
}

/// Working memory of [`CallFrames::step`], reused from step to step.
pub struct Context(UnwindContext<usize>);

impl Context {
    pub fn new() -> Context {
        Context(UnwindContext::new())
    }
}

impl Default for Context {
    fn default() -> Context {
        Context::new()
    }
}

/// A section's byte range in the file (uncompressed sections only).
fn file_range(sec: &object::Section) -> Option<std::ops::Range<usize>> {
    let (off, size) = sec.file_range()?;
    Some(usize::try_from(off).ok()?..usize::try_from(off + size).ok()?)
}

impl CallFrames {
    /// The call frame information of an ELF file (`None` if it has no
    /// `.eh_frame`). Addresses are the file's (before relocation). The
    /// file's bytes are kept, and only the parts a lookup needs are read
    /// (`.eh_frame_hdr`'s search table, the FDEs found).
    pub fn parse(file: Box<dyn AsRef<[u8]>>) -> Result<Option<CallFrames>, String> {
        let bytes = (*file).as_ref();
        let obj = object::File::parse(bytes).map_err(|e| e.to_string())?;
        let Some(sec) = obj.section_by_name(".eh_frame") else {
            return Ok(None);
        };
        let eh_frame = file_range(&sec).ok_or(".eh_frame is not in the file")?;
        let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
        if let Some(t) = obj.section_by_name(".text") {
            bases = bases.set_text(t.address());
        }
        let mut eh_frame_hdr = None;
        if let Some(h) = obj.section_by_name(".eh_frame_hdr") {
            bases = bases.set_eh_frame_hdr(h.address());
            eh_frame_hdr = file_range(&h);
        }
        if let Some(g) = obj.section_by_name(".got") {
            bases = bases.set_got(g.address());
        }
        let loads = obj
            .segments()
            .filter(|s| {
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0)
            })
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        let data = bytes
            .get(eh_frame.clone())
            .ok_or(".eh_frame beyond the file")?;
        let has_table = eh_frame_hdr
            .as_ref()
            .and_then(|r| bytes.get(r.clone()))
            .and_then(|h| {
                let hdr = gimli::EhFrameHdr::new(h, LittleEndian)
                    .parse(&bases, 8)
                    .ok()?;
                hdr.table().map(|_| ())
            })
            .is_some();
        let mut fdes = Vec::new();
        if !has_table {
            let eh = EhFrame::new(data, LittleEndian);
            let mut entries = eh.entries(&bases);
            // A malformed entry ends the list (what was read stays).
            while let Ok(Some(entry)) = entries.next() {
                if let gimli::CieOrFde::Fde(partial) = entry {
                    if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                        let lo = fde.initial_address();
                        fdes.push((lo, lo.saturating_add(fde.len()), fde.offset()));
                    }
                }
            }
            fdes.sort_unstable();
            eh_frame_hdr = None;
        }
        Ok(Some(CallFrames {
            file,
            eh_frame,
            eh_frame_hdr,
            bases,
            fdes,
            loads,
        }))
    }

    /// The file address of the byte at file offset `offset` of an
    /// executable mapping (a page boundary, which may lie before its
    /// segment's first byte), for the mapping's load bias.
    pub fn file_address(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(o, s, _)| offset >= o & !0xfff && offset < o.saturating_add(s))
            .map(|&(o, _, vaddr)| (vaddr.wrapping_sub(o)).wrapping_add(offset))
    }

    /// The FDE covering file address `lookup`.
    fn fde_for<'a>(
        &'a self,
        eh: &EhFrame<gimli::EndianSlice<'a, LittleEndian>>,
        lookup: u64,
    ) -> Option<gimli::FrameDescriptionEntry<gimli::EndianSlice<'a, LittleEndian>>> {
        let bytes = (*self.file).as_ref();
        if let Some(r) = &self.eh_frame_hdr {
            let hdr = gimli::EhFrameHdr::new(bytes.get(r.clone())?, LittleEndian)
                .parse(&self.bases, 8)
                .ok()?;
            let fde = hdr
                .table()?
                .fde_for_address(eh, &self.bases, lookup, EhFrame::cie_from_offset)
                .ok()?;
            return fde.contains(lookup).then_some(fde);
        }
        let i = self.fdes.partition_point(|f| f.0 <= lookup);
        let &(lo, hi, off) = self.fdes.get(i.checked_sub(1)?)?;
        if !(lo..hi).contains(&lookup) {
            return None;
        }
        eh.fde_from_offset(&self.bases, EhFrameOffset(off), EhFrame::cie_from_offset)
            .ok()
    }

    /// Unwinds one frame: `regs` are its registers, `lookup` the file
    /// address of an instruction in it (its instruction pointer minus the
    /// load bias; minus one more for a return address, which may follow a
    /// call that ends its function), `mem` reads a word of the process. `None` if the frame's information is missing,
    /// says the stack ends here, or cannot be followed.
    pub fn step(
        &self,
        ctx: &mut Context,
        lookup: u64,
        regs: &Regs,
        mem: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Step> {
        let bytes = (*self.file).as_ref();
        let eh = EhFrame::new(bytes.get(self.eh_frame.clone())?, LittleEndian);
        let fde = self.fde_for(&eh, lookup)?;
        let encoding = fde.cie().encoding();
        let row = fde
            .unwind_info_for_address(&eh, &self.bases, &mut ctx.0, lookup)
            .ok()?;
        // Expressions see run-time addresses: the instruction pointer and
        // the registers are the process's.
        let eval = |expr: &gimli::UnwindExpression<usize>,
                    initial: Option<u64>,
                    mem: &mut dyn FnMut(u64) -> Option<u64>|
         -> Option<u64> {
            let e = expr.get(&eh).ok()?;
            let mut ev = e.evaluation(encoding);
            if let Some(v) = initial {
                ev.set_initial_value(v);
            }
            let mut r = ev.evaluate().ok()?;
            for _ in 0..64 {
                r = match r {
                    EvaluationResult::Complete => break,
                    EvaluationResult::RequiresMemory { address, size, .. } => {
                        let w = mem(address)?;
                        let v = if size >= 8 {
                            w
                        } else {
                            w & ((1u64 << (8 * u32::from(size))) - 1)
                        };
                        ev.resume_with_memory(Value::Generic(v)).ok()?
                    }
                    EvaluationResult::RequiresRegister { register, .. } => {
                        let v = regs.get(register.0 as usize).copied().flatten()?;
                        ev.resume_with_register(Value::Generic(v)).ok()?
                    }
                    _ => return None,
                };
            }
            if !matches!(r, EvaluationResult::Complete) {
                return None;
            }
            let pieces = ev.result();
            match pieces.first()?.location {
                Location::Address { address } => Some(address),
                Location::Value {
                    value: Value::Generic(v),
                } => Some(v),
                _ => None,
            }
        };
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                let base = regs.get(register.0 as usize).copied().flatten()?;
                base.checked_add_signed(*offset)?
            }
            CfaRule::Expression(e) => eval(e, None, mem)?,
        };
        let mut caller: Regs = [None; NREGS];
        let mut ra_slot = None;
        for (n, slot) in caller.iter_mut().enumerate() {
            if n == RSP {
                continue;
            }
            let rule = row.register(Register(n as u16));
            *slot = match rule {
                RegisterRule::Undefined if CALLEE_SAVED.contains(&n) => regs[n],
                RegisterRule::Undefined => None,
                RegisterRule::SameValue => regs[n],
                RegisterRule::Offset(o) => {
                    let at = cfa.checked_add_signed(o)?;
                    if n == RA {
                        ra_slot = Some(at);
                    }
                    Some(mem(at)?)
                }
                RegisterRule::ValOffset(o) => Some(cfa.checked_add_signed(o)?),
                RegisterRule::Register(r) => regs.get(r.0 as usize).copied().flatten(),
                RegisterRule::Expression(e) => {
                    let at = eval(&e, Some(cfa), mem)?;
                    Some(mem(at)?)
                }
                RegisterRule::ValExpression(e) => Some(eval(&e, Some(cfa), mem)?),
                RegisterRule::Constant(c) => Some(c),
                _ => None,
            };
        }
        caller[RSP] = Some(cfa);
        // No return address: the outermost frame.
        let ra = caller[RA]?;
        if ra == 0 {
            return None;
        }
        Some(Step {
            caller,
            ra_slot,
            signal: fde.is_signal_trampoline(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_elf_is_an_error_and_no_eh_frame_is_none() {
        assert!(CallFrames::parse(Box::new(b"not an elf".to_vec())).is_err());
    }

    /// This test binary's own frames: unwinding from a known function
    /// through its caller finds the caller's code.
    #[test]
    fn the_test_binary_has_call_frames() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let cf = CallFrames::parse(Box::new(exe))
            .unwrap()
            .expect(".eh_frame");
        // Looked up through .eh_frame_hdr: this function has an FDE.
        let me = the_test_binary_has_call_frames as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_path = std::fs::read_link("/proc/self/exe").unwrap();
        let (start, offset) = maps
            .lines()
            .filter(|l| l.ends_with(exe_path.to_str().unwrap()) && l.contains(" r-xp "))
            .find_map(|l| {
                let (range, rest) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                let (a, b) = (
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                );
                let off = u64::from_str_radix(rest.split_whitespace().nth(1)?, 16).ok()?;
                (a..b).contains(&me).then_some((a, off))
            })
            .unwrap();
        let bias = start - cf.file_address(offset).unwrap();
        let eh = EhFrame::new(&(*cf.file).as_ref()[cf.eh_frame.clone()], LittleEndian);
        let fde = cf.fde_for(&eh, me - bias).expect("an FDE");
        assert!(fde.contains(me - bias));
    }
}
