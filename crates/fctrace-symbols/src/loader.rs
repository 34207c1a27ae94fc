//! The program interpreter (`PT_INTERP`) an ELF program names: which C
//! library's dynamic loader will start it. fctrace's agent is built
//! against glibc; musl's loader (`/lib/ld-musl-x86_64.so.1`) cannot load
//! it and ends the program with status 127 before its code runs, so a
//! musl program is left alone. The reader allocates nothing (the agent
//! uses it before an `exec`, possibly in a `vfork` child): the file is
//! read through a callback into fixed buffers.

use crate::rawelf::{program_headers, u32_at, u64_at};

const PT_INTERP: u32 = 3;

/// Whether `interp` (a path, as `PT_INTERP` holds it) is musl's dynamic
/// loader (`ld-musl-<arch>.so.1`).
pub fn is_musl(interp: &[u8]) -> bool {
    let base = match interp.iter().rposition(|&c| c == b'/') {
        Some(i) => &interp[i + 1..],
        None => interp,
    };
    base.starts_with(b"ld-musl-")
}

/// The `PT_INTERP` path of a 64-bit little-endian ELF file, copied into
/// `out` (without its NUL); its length, or None (not such an ELF, no
/// `PT_INTERP`, a path longer than `out`). `read_at(offset, buf)` fills
/// `buf` from the file and says whether it could.
pub fn interpreter(
    mut read_at: impl FnMut(u64, &mut [u8]) -> bool,
    out: &mut [u8],
) -> Option<usize> {
    let mut found = None;
    let read = program_headers(&mut read_at, |ph| {
        if u32_at(ph, 0) != PT_INTERP {
            return true;
        }
        found = Some((u64_at(ph, 8), u64_at(ph, 32)));
        false
    });
    let (off, size) = found.filter(|_| read)?;
    let len = (size as usize).saturating_sub(1);
    if size == 0 || len > out.len() || !read_at(off, &mut out[..len]) {
        return None;
    }
    Some(out[..len].iter().position(|&c| c == 0).unwrap_or(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn musl_names() {
        assert!(is_musl(b"/lib/ld-musl-x86_64.so.1"));
        assert!(is_musl(b"ld-musl-aarch64.so.1"));
        assert!(!is_musl(b"/lib64/ld-linux-x86-64.so.2"));
        assert!(!is_musl(b""));
    }

    #[test]
    fn reads_this_test_programs_interpreter() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let read = |at: u64, buf: &mut [u8]| {
            let at = at as usize;
            data.get(at..at + buf.len())
                .map(|s| buf.copy_from_slice(s))
                .is_some()
        };
        let mut out = [0u8; 256];
        let n = interpreter(read, &mut out).expect("a dynamically linked test program");
        let path = std::str::from_utf8(&out[..n]).unwrap();
        assert!(path.contains("ld-linux-x86-64.so"), "{path}");
        assert!(!is_musl(&out[..n]));
    }
}
