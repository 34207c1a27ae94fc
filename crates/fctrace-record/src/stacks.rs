//! The call stacks of a process's stopped threads, unwound from outside
//! (`fctrace -p`): for each frame, an address in its function's code and
//! the stack slot holding its return address. The agent turns the frames
//! of traced functions into the thread's first traced calls
//! (`fctrace-agent`'s `instrument::adopt`), so that their returns are
//! recorded.
//!
//! Each module's `.eh_frame` is read from its file (through
//! `/proc/PID/map_files`, which works whatever mount namespace the process
//! is in) or, for the vDSO, from the process's memory, once, when a stack
//! first reaches it; [`fctrace_symbols::unwind`] follows its rules. A
//! frame without call frame information (code generated at run time, a
//! module without `.eh_frame`) ends the walk: the calls outside it are
//! not known, and are recorded as any untraced call is (not at all).

use fctrace_symbols::unwind::{CallFrames, Context, Regs, NREGS, RA, RSP};
use std::collections::HashMap;
use std::rc::Rc;

/// Frames walked per thread at most (deeper frames stay unknown).
pub const MAX_FRAMES: usize = 1 << 16;

/// One executable mapping of the process.
struct Code {
    start: u64,
    end: u64,
    /// Its offset in the file.
    offset: u64,
    /// Run-time address minus file address (known once its file is read).
    bias: u64,
    /// Index into `Stacks::files`.
    file: usize,
}

/// The process's code, and the call frame information read so far.
pub struct Stacks<'a> {
    code: Vec<Code>,
    /// Per file: where to read it, and its information once read (None
    /// inside: it has none, or could not be read).
    files: Vec<(Source, Option<Option<Rc<CallFrames>>>)>,
    read_word: &'a mut dyn FnMut(u64) -> Option<u64>,
    read_bytes: &'a mut dyn FnMut(u64, usize) -> Option<Vec<u8>>,
    ctx: Context,
}

enum Source {
    /// A file: the paths to try, in order.
    Path(Vec<String>),
    /// The vDSO: its image in the process's memory.
    Memory(u64, u64),
}

impl<'a> Stacks<'a> {
    /// The executable mappings of process `pid` (from its maps text);
    /// memory is read with `read_word` and `read_bytes`.
    pub fn new(
        pid: i32,
        maps: &str,
        read_word: &'a mut dyn FnMut(u64) -> Option<u64>,
        read_bytes: &'a mut dyn FnMut(u64, usize) -> Option<Vec<u8>>,
    ) -> Stacks<'a> {
        let mut code = Vec::new();
        let mut files: Vec<(Source, Option<Option<Rc<CallFrames>>>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for line in maps.lines() {
            let mut f = line.splitn(6, ' ');
            let (Some(range), Some(perms), Some(offset)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let _dev = f.next();
            let _inode = f.next();
            let path = f.next().unwrap_or("").trim_start();
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(offset)) = (
                u64::from_str_radix(a, 16),
                u64::from_str_radix(b, 16),
                u64::from_str_radix(offset, 16),
            ) else {
                continue;
            };
            if !perms.contains('x') {
                continue;
            }
            let source = if path == "[vdso]" {
                Source::Memory(start, end)
            } else if path.starts_with('/') {
                // map_files may need more privilege than ptrace; the
                // process's root serves another mount namespace.
                Source::Path(vec![
                    format!("/proc/{pid}/map_files/{a}-{b}"),
                    format!("/proc/{pid}/root{path}"),
                    path.to_string(),
                ])
            } else {
                continue;
            };
            let file = *index.entry(path.to_string()).or_insert_with(|| {
                files.push((source, None));
                files.len() - 1
            });
            code.push(Code {
                start,
                end,
                offset,
                bias: 0,
                file,
            });
        }
        code.sort_by_key(|c| c.start);
        Stacks {
            code,
            files,
            read_word,
            read_bytes,
            ctx: Context::new(),
        }
    }

    /// The mapping holding `pc`, its file's information read if needed.
    fn lookup(&mut self, pc: u64) -> Option<(u64, Rc<CallFrames>)> {
        let i = self
            .code
            .partition_point(|c| c.start <= pc)
            .checked_sub(1)?;
        if pc >= self.code[i].end {
            return None;
        }
        let fi = self.code[i].file;
        if self.files[fi].1.is_none() {
            let info = match &self.files[fi].0 {
                Source::Path(p) => p.iter().find_map(|p| {
                    let f = std::fs::File::open(p).ok()?;
                    // SAFETY: a read-only private mapping of a module the
                    // process has mapped (a file replaced meanwhile is a
                    // new inode; one truncated in place would fault, as
                    // it does for the process itself).
                    let map = unsafe { memmap2::Mmap::map(&f) }.ok()?;
                    CallFrames::parse(Box::new(map)).ok()
                }),
                Source::Memory(a, b) => (self.read_bytes)(*a, (*b - *a) as usize)
                    .and_then(|b| CallFrames::parse(Box::new(b)).ok()),
            }
            .flatten();
            // Each mapping's bias: its address minus the file address of
            // its first byte (the vDSO's image is mapped from offset 0).
            for c in self.code.iter_mut().filter(|c| c.file == fi) {
                c.bias = match info.as_ref().and_then(|i| i.file_address(c.offset)) {
                    Some(vaddr) => c.start.wrapping_sub(vaddr),
                    None => c.start.wrapping_sub(c.offset),
                };
            }
            let info = info.map(Rc::new);
            self.files[fi].1 = Some(info);
        }
        let info = self.files[fi].1.clone().flatten()?;
        Some((self.code[i].bias, info))
    }

    /// The frames of a thread stopped with registers `r`, innermost first:
    /// per frame an address in its function's code (the instruction
    /// pointer where it is exact, else the return address minus one) and
    /// the stack address of its return address (0 if unknown).
    pub fn walk(&mut self, r: &libc::user_regs_struct) -> Vec<[u64; 2]> {
        let mut regs: Regs = [None; NREGS];
        for (n, v) in [
            r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11,
            r.r12, r.r13, r.r14, r.r15, r.rip,
        ]
        .into_iter()
        .enumerate()
        {
            regs[n] = Some(v);
        }
        let mut frames = Vec::new();
        let mut exact = true;
        while frames.len() < MAX_FRAMES {
            let (Some(pc), Some(sp)) = (regs[RA], regs[RSP]) else {
                break;
            };
            let at = if exact { pc } else { pc.wrapping_sub(1) };
            let Some((bias, info)) = self.lookup(at) else {
                break;
            };
            let word = &mut *self.read_word;
            let Some(step) = info.step(&mut self.ctx, at.wrapping_sub(bias), &regs, word) else {
                frames.push([at, 0]);
                break;
            };
            frames.push([at, step.ra_slot.unwrap_or(0)]);
            let Some(up) = step.caller[RSP] else {
                break;
            };
            // Stacks grow down: a caller's frame lies above (a signal
            // frame's interrupted code may be on another stack).
            if up <= sp && !step.signal {
                break;
            }
            exact = step.signal;
            regs = step.caller;
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fctrace's own main thread, walked from a function of this test:
    /// the walk goes through the test harness's frames up to the
    /// thread's start, each return slot holding the next frame's address.
    #[test]
    fn walks_a_live_stack_of_this_process() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mut word = |a: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            let f = std::fs::File::open("/proc/self/mem").ok()?;
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, a).ok()?;
            Some(u64::from_le_bytes(b))
        };
        let mut bytes = |a: u64, n: usize| -> Option<Vec<u8>> {
            let mut b = vec![0u8; n];
            let f = std::fs::File::open("/proc/self/mem").ok()?;
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, a).ok()?;
            Some(b)
        };
        let frames = inner(&maps, &mut word, &mut bytes);
        assert!(frames.len() >= 4, "{frames:?}");
        // Slots go up, and each holds the next frame's return address
        // (checked from this function's frame on: `inner`'s is gone).
        for w in frames[1..].windows(2) {
            let [_, slot] = w[0];
            assert!(slot != 0, "{frames:?}");
            assert_eq!(word(slot).unwrap(), w[1][0] + 1, "{frames:?}");
        }
        assert!(frames.windows(2).all(|w| w[1][1] == 0 || w[0][1] < w[1][1]));
    }

    #[inline(never)]
    fn inner(
        maps: &str,
        word: &mut dyn FnMut(u64) -> Option<u64>,
        bytes: &mut dyn FnMut(u64, usize) -> Option<Vec<u8>>,
    ) -> Vec<[u64; 2]> {
        let (rip, rsp, rbp, rbx): (u64, u64, u64, u64);
        // SAFETY: reads the instruction pointer and registers; no memory.
        unsafe {
            std::arch::asm!(
                "lea {0}, [rip]",
                "mov {1}, rsp",
                "mov {2}, rbp",
                "mov {3}, rbx",
                out(reg) rip, out(reg) rsp, out(reg) rbp, out(reg) rbx,
            );
        }
        // SAFETY: a zeroed user_regs_struct is a valid value.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        (r.rip, r.rsp, r.rbp, r.rbx) = (rip, rsp, rbp, rbx);
        let mut s = Stacks::new(std::process::id() as i32, maps, word, bytes);
        let frames = s.walk(&r);
        std::hint::black_box(&frames);
        frames
    }
}
