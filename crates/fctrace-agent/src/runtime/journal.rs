//! What the agent changed in a process it was loaded into while running
//! (`fctrace -p`), so that detaching puts it back: the original bytes of
//! the code and GOT words it overwrote, and the mappings it made for its
//! generated code. Nothing is noted for a preloaded agent (it never
//! detaches). Set-up and detach paths only, never the hot path.

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
/// runs anything the agent wrote or made. Returns the writes that failed.
pub fn undo() -> usize {
    let (writes, maps) = {
        let mut j = journal();
        (std::mem::take(&mut j.writes), std::mem::take(&mut j.maps))
    };
    let prots = page_protections();
    let mut failed = 0;
    for (addr, old) in writes.iter().rev() {
        let lo = addr & !4095;
        let hi = (addr + old.len() as u64).next_multiple_of(4096);
        let prot = prots
            .iter()
            .find(|&&(a, b, _)| lo >= a && lo < b)
            .map_or(libc::PROT_READ | libc::PROT_EXEC, |p| p.2);
        // SAFETY: pages of the process's own modules, made writable for
        // the copy and given back their protection; the bytes are the ones
        // that were there before the agent's write.
        unsafe {
            let len = (hi - lo) as usize;
            if libc::mprotect(lo as *mut libc::c_void, len, prot | libc::PROT_WRITE) != 0 {
                failed += 1;
                continue;
            }
            std::ptr::copy_nonoverlapping(old.as_ptr(), *addr as *mut u8, old.len());
            libc::mprotect(lo as *mut libc::c_void, len, prot);
        }
    }
    for (addr, len) in maps {
        // SAFETY: the agent's own mappings of generated code, which nothing
        // refers to any more (the caller's precondition).
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }
    failed
}

/// The protection of every mapping, from /proc/self/maps: (start, end, prot).
fn page_protections() -> Vec<(u64, u64, i32)> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?.as_bytes());
            let (a, b) = range.split_once('-')?;
            let mut prot = 0;
            if perms.first() == Some(&b'r') {
                prot |= libc::PROT_READ;
            }
            if perms.get(1) == Some(&b'w') {
                prot |= libc::PROT_WRITE;
            }
            if perms.get(2) == Some(&b'x') {
                prot |= libc::PROT_EXEC;
            }
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
                prot,
            ))
        })
        .collect()
}
