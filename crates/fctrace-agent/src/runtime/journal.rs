//! What the agent changed in a process it was loaded into while running
//! (`fctrace -p`), so that detaching puts it back: the original bytes of
//! the code and GOT words it overwrote, and the mappings it made for its
//! generated code. Nothing is noted for a preloaded agent (it never
//! detaches). Set-up and detach paths only, never the hot path.

use crate::runtime::maps::{mappings, Mapping};
use std::sync::Mutex;

struct Journal {
    /// (address, the bytes there before the agent's first write), in
    /// the order written.
    writes: Vec<(u64, Vec<u8>)>,
    /// Mappings of generated code: (address, length).
    maps: Vec<(u64, usize)>,
}

static JOURNAL: Mutex<Journal> = Mutex::new(Journal {
    writes: Vec::new(),
    maps: Vec::new(),
});

fn journal() -> std::sync::MutexGuard<'static, Journal> {
    JOURNAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes the `len` bytes at `addr`, about to be overwritten (readable).
pub fn before_write(addr: u64, len: usize) {
    if !crate::runtime::shm::attached() {
        return;
    }
    // SAFETY: the caller is about to write these bytes, which are mapped
    // and readable (code or a GOT word).
    let old = unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec();
    journal().writes.push((addr, old));
}

/// Notes a mapping of generated code.
pub fn mapped(addr: u64, len: usize) {
    if crate::runtime::shm::attached() {
        journal().maps.push((addr, len));
    }
}

/// Whether `ip` lies in generated code, or inside bytes the agent
/// overwrote (not at their first byte: an instruction cut in two).
pub fn inside(ip: u64) -> bool {
    let j = journal();
    j.maps.iter().any(|&(a, n)| ip >= a && ip < a + n as u64)
        || j.writes
            .iter()
            .any(|(a, b)| ip > *a && ip < *a + b.len() as u64)
}

/// Puts every overwritten byte back (last write first) and unmaps the
/// generated code; the journal is empty afterwards. Only while no thread
/// runs anything the agent wrote or made. Each run of written pages is made
/// writable once (a program of 200,000 functions has as many writes);
/// code pages that hold their file's bytes again are dropped, so that they
/// are the file's shared pages again (not private copies). Returns the
/// writes that could not be undone.
pub fn undo() -> usize {
    let (writes, maps) = {
        let mut j = journal();
        (std::mem::take(&mut j.writes), std::mem::take(&mut j.maps))
    };
    let mappings = mappings();
    let pages = WritablePages::open(writes.iter().map(|(a, b)| (*a, b.len())), &mappings, false);
    let mut failed = 0;
    for (addr, old) in writes.iter().rev() {
        if !pages.covers(*addr, old.len()) {
            failed += 1;
            continue;
        }
        // SAFETY: writable pages (above); the bytes that were there before
        // the agent's write.
        unsafe { std::ptr::copy_nonoverlapping(old.as_ptr(), *addr as *mut u8, old.len()) };
    }
    for (lo, hi, m) in pages.close() {
        if let Some(m) = m.filter(|m| m.prot & libc::PROT_EXEC != 0) {
            drop_file_copies(lo, hi, m);
        }
    }
    for (addr, len) in maps {
        // SAFETY: the agent's own mappings of generated code, which nothing
        // refers to any more (the caller's precondition).
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }
    failed
}

/// The pages some writes into the process's own code touch, made writable
/// for them: in runs within one mapping, each given its mapping's
/// protection plus `PROT_WRITE` (code stays executable: the agent may be
/// running it) once, and its own protection back at [`close`]. A module
/// may have data between its code segments (a BOLT-optimised library has
/// two code segments around its data): those pages never change.
///
/// With `per_mapping`, a run spans a mapping's written pages from the
/// first to the last: one `mprotect` each way per mapping, and the mapping
/// stays one (runs of adjacent pages only split a library's code mapping
/// into thousands, each one more line of /proc/self/maps to read at every
/// later module). Without, runs are of adjacent written pages (detaching:
/// each page of a run is compared with its file's afterwards).
///
/// [`close`]: WritablePages::close
pub struct WritablePages<'m> {
    runs: Vec<(u64, u64, Option<&'m Mapping>)>,
    writable: Vec<bool>,
}

impl<'m> WritablePages<'m> {
    /// `spans`: (address, length) of each write; `mappings`: the process's
    /// mappings, read before.
    pub fn open(
        spans: impl Iterator<Item = (u64, usize)>,
        mappings: &'m [Mapping],
        per_mapping: bool,
    ) -> Self {
        let mut pages: Vec<u64> = spans
            .flat_map(|(a, len)| {
                let first = a & !(PAGE - 1);
                let last = (a + len.max(1) as u64 - 1) & !(PAGE - 1);
                (first..=last).step_by(PAGE as usize)
            })
            .collect();
        pages.sort_unstable();
        pages.dedup();
        let mut runs: Vec<(u64, u64, Option<&Mapping>)> = Vec::new();
        for p in pages {
            let m = mappings.iter().find(|m| p >= m.start && p < m.end);
            match runs.last_mut() {
                Some(r) if (r.1 == p || per_mapping && m.is_some()) && same(r.2, m) => {
                    r.1 = p + PAGE
                }
                _ => runs.push((p, p + PAGE, m)),
            }
        }
        let writable = runs
            .iter()
            .map(|&(lo, hi, m)| {
                // SAFETY: pages of the process's own modules, made writable
                // for the caller's writes and given back their protection
                // at `close`.
                unsafe {
                    libc::mprotect(
                        lo as *mut libc::c_void,
                        (hi - lo) as usize,
                        prot_of(m) | libc::PROT_WRITE,
                    ) == 0
                }
            })
            .collect();
        WritablePages { runs, writable }
    }

    /// Whether the `len` bytes at `addr` were made writable.
    pub fn covers(&self, addr: u64, len: usize) -> bool {
        // The runs are in address order and do not overlap: the one that
        // may hold `a` is the last starting at or below it (a module of
        // 55,000 patched entries has thousands of runs).
        let ok = |a: u64| {
            let i = self.runs.partition_point(|r| r.0 <= a);
            i > 0 && a < self.runs[i - 1].1 && self.writable[i - 1]
        };
        ok(addr) && ok(addr + len.max(1) as u64 - 1)
    }

    /// Gives every run its own protection back; the runs.
    pub fn close(self) -> Vec<(u64, u64, Option<&'m Mapping>)> {
        for (i, &(lo, hi, m)) in self.runs.iter().enumerate() {
            if self.writable[i] {
                // SAFETY: as in `open`: the mapping's own protection again.
                unsafe { libc::mprotect(lo as *mut libc::c_void, (hi - lo) as usize, prot_of(m)) };
            }
        }
        self.runs
    }
}

/// A mapping's protection (code's, if the page is in none).
fn prot_of(m: Option<&Mapping>) -> i32 {
    m.map_or(libc::PROT_READ | libc::PROT_EXEC, |m| m.prot)
}

const PAGE: u64 = 4096;

fn same(a: Option<&Mapping>, b: Option<&Mapping>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.start == b.start,
        (None, None) => true,
        _ => false,
    }
}

/// The code pages in [lo, hi) of file mapping `m` that hold exactly their
/// file's bytes again are dropped (the kernel maps the file's page back on
/// the next access): the private copies the writes made are freed. A page
/// that differs (the program changed its own code) stays as it is.
fn drop_file_copies(lo: u64, hi: u64, m: &Mapping) {
    use std::os::unix::fs::FileExt;
    let Some(path) = &m.path else { return };
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let mut buf = [0u8; PAGE as usize];
    for p in (lo..hi).step_by(PAGE as usize) {
        let at = m.offset + (p - m.start);
        let Ok(n) = file.read_at(&mut buf, at) else {
            return;
        };
        // SAFETY: a readable page of the mapping.
        let live = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
        if n == PAGE as usize && live == &buf[..] {
            // SAFETY: a private file mapping's page equal to its file's:
            // dropping the private copy changes no byte the process reads.
            unsafe { libc::madvise(p as *mut libc::c_void, PAGE as usize, libc::MADV_DONTNEED) };
        }
    }
}
