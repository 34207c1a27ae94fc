//! Executable memory for stubs, placed within ±2 GiB of a module so that
//! 5-byte `jmp rel32` instructions reach it and relocated RIP-relative
//! operands still reach their targets.

pub struct Arena {
    pub base: u64,
    pub size: usize,
    pub used: usize,
}

const PAGE: u64 = 4096;
const REACH: u64 = 1 << 31;

/// Mapped ranges of this process, sorted.
fn mapped_ranges() -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = crate::runtime::maps::mappings()
        .iter()
        .map(|m| (m.start, m.end))
        .collect();
    v.sort();
    v
}

impl Arena {
    /// Maps `size` bytes (read-write for now) in a free gap such that every
    /// byte of `[lo, hi)` is within reach of every byte of the arena.
    pub fn near(lo: u64, hi: u64, size: usize) -> Option<Arena> {
        let size = (size as u64).div_ceil(PAGE) * PAGE;
        let ranges = mapped_ranges();
        // Candidate gaps: between consecutive mappings.
        let mut gaps = Vec::new();
        let mut prev_end = 0x10000u64;
        for &(s, e) in &ranges {
            if s > prev_end {
                gaps.push((prev_end, s));
            }
            prev_end = prev_end.max(e);
        }
        gaps.push((prev_end, 0x7fff_ffff_f000));
        // Closest gap to the module first.
        let mut candidates: Vec<u64> = Vec::new();
        for (gs, ge) in gaps {
            if ge - gs < size + 2 * PAGE {
                continue;
            }
            // leave a guard page on both sides
            let first = gs + PAGE;
            let last = ge - PAGE - size;
            // prefer the spot nearest the module
            let want = if first >= hi {
                first
            } else if last + size <= lo {
                last
            } else {
                continue;
            };
            let end = want + size;
            let reach_ok = end.saturating_sub(lo) < REACH && hi.saturating_sub(want) < REACH;
            if reach_ok {
                candidates.push(want);
            }
        }
        candidates.sort_by_key(|&c| if c >= hi { c - hi } else { lo - c });
        for c in candidates {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let p = unsafe {
                libc::mmap(
                    c as *mut libc::c_void,
                    size as usize,
                    libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                if p as u64 == c {
                    crate::runtime::journal::mapped(c, size as usize);
                    return Some(Arena {
                        base: c,
                        size: size as usize,
                        used: 0,
                    });
                }
                // SAFETY: unmapping what we just mapped.
                unsafe { libc::munmap(p, size as usize) };
            }
        }
        None
    }

    pub fn cursor(&self) -> u64 {
        self.base + self.used as u64
    }

    pub fn remaining(&self) -> usize {
        self.size - self.used
    }

    /// Copies code to the cursor (the arena is still writable).
    pub fn put(&mut self, code: &[u8]) -> u64 {
        let at = self.cursor();
        assert!(code.len() <= self.remaining());
        // SAFETY: the arena is mapped writable and has room (asserted).
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), at as *mut u8, code.len()) };
        self.used += code.len();
        // keep stubs 16-byte aligned
        self.used = self.used.next_multiple_of(16).min(self.size);
        at
    }

    /// Makes the arena read+execute only.
    pub fn seal(&self) {
        // SAFETY: the range is our own mapping.
        unsafe {
            libc::mprotect(
                self.base as *mut libc::c_void,
                self.size,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
    }
}
