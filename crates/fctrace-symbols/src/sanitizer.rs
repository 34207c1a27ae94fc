//! Sanitizer runtimes (AddressSanitizer, ThreadSanitizer, UBSan, LSan,
//! HWASan, clang's `libclang_rt.*`): recognising one by name, and finding
//! the one a program needs among its `DT_NEEDED` entries.
//!
//! ASan checks that its runtime is the first object after the executable
//! in the dynamic loader's list, so a program built with a sanitizer must
//! get its runtime ahead of fctrace's agent in `LD_PRELOAD`. The reader
//! here allocates nothing (the agent uses it before an `exec`, possibly in
//! a `vfork` child): the file is read through a callback into fixed
//! buffers.

/// Whether `entry` (a soname or a path, as in `DT_NEEDED` or
/// `LD_PRELOAD`) names a sanitizer runtime.
pub fn is_runtime(entry: &[u8]) -> bool {
    let base = match entry.iter().rposition(|&c| c == b'/') {
        Some(i) => &entry[i + 1..],
        None => entry,
    };
    const GCC: &[&[u8]] = &[
        b"libasan.so",
        b"libtsan.so",
        b"liblsan.so",
        b"libubsan.so",
        b"libhwasan.so",
    ];
    const CLANG: &[&[u8]] = &[
        b"asan", b"tsan", b"lsan", b"ubsan", b"hwasan", b"msan", b"memprof",
    ];
    GCC.iter().any(|p| base.starts_with(p))
        || base.strip_prefix(b"libclang_rt.").is_some_and(|r| {
            CLANG.iter().any(|p| {
                r.strip_prefix(*p)
                    .is_some_and(|t| t.first().is_some_and(|&c| c == b'-' || c == b'_'))
            })
        })
}

/// The first entry of an `LD_PRELOAD` list (entries are separated by
/// colons or spaces) and the rest after it.
pub fn split_first(list: &[u8]) -> (&[u8], &[u8]) {
    let start = list
        .iter()
        .position(|&c| c != b':' && c != b' ')
        .unwrap_or(list.len());
    let list = &list[start..];
    let end = list
        .iter()
        .position(|&c| c == b':' || c == b' ')
        .unwrap_or(list.len());
    let rest = &list[end..];
    let skip = rest
        .iter()
        .position(|&c| c != b':' && c != b' ')
        .unwrap_or(rest.len());
    (&list[..end], &rest[skip..])
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;

use crate::rawelf::{program_headers, u32_at, u64_at};

/// The sanitizer runtime an x86_64 ELF program names in its `DT_NEEDED`
/// entries, copied into `out`; its length, or None (not ELF, no such
/// entry, a name longer than `out`). `read_at(offset, buf)` fills `buf`
/// from the file and says whether it could.
pub fn needed_runtime(
    mut read_at: impl FnMut(u64, &mut [u8]) -> bool,
    out: &mut [u8],
) -> Option<usize> {
    // PT_LOAD (vaddr, offset, filesz), to find the string table in the
    // file; PT_DYNAMIC's file range.
    let mut loads = [(0u64, 0u64, 0u64); 16];
    let mut nloads = 0;
    let mut dynamic = None;
    let read = program_headers(&mut read_at, |ph| {
        match u32_at(ph, 0) {
            PT_LOAD if nloads < loads.len() => {
                loads[nloads] = (u64_at(ph, 16), u64_at(ph, 8), u64_at(ph, 32));
                nloads += 1;
            }
            PT_DYNAMIC => dynamic = Some((u64_at(ph, 8), u64_at(ph, 32))),
            _ => {}
        }
        true
    });
    if !read {
        return None;
    }
    let (dyn_off, dyn_size) = dynamic?;
    let mut needed = [0u64; 64];
    let mut nneeded = 0;
    let mut strtab = None;
    let mut chunk = [0u8; 512];
    let mut at = 0;
    'outer: while at < dyn_size {
        let len = (dyn_size - at).min(chunk.len() as u64) as usize & !15;
        if len == 0 || !read_at(dyn_off + at, &mut chunk[..len]) {
            break;
        }
        for e in chunk[..len].chunks_exact(16) {
            match u64_at(e, 0) {
                0 => break 'outer,
                DT_NEEDED if nneeded < needed.len() => {
                    needed[nneeded] = u64_at(e, 8);
                    nneeded += 1;
                }
                DT_STRTAB => strtab = Some(u64_at(e, 8)),
                _ => {}
            }
        }
        at += len as u64;
    }
    let strtab = strtab?;
    let (vaddr, off, _) = loads[..nloads]
        .iter()
        .find(|(v, _, sz)| strtab >= *v && strtab < v + sz)?;
    let str_off = strtab - vaddr + off;
    for &n in &needed[..nneeded] {
        let mut name = [0u8; 128];
        if !read_at(str_off + n, &mut name) {
            // Near the end of the file: a shorter read.
            if !read_at(str_off + n, &mut name[..32]) {
                continue;
            }
        }
        let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        if is_runtime(&name[..len]) && len <= out.len() {
            out[..len].copy_from_slice(&name[..len]);
            return Some(len);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_runtime(b"libasan.so.8"));
        assert!(is_runtime(b"/usr/lib/x86_64-linux-gnu/libtsan.so.2"));
        assert!(is_runtime(b"libclang_rt.asan-x86_64.so"));
        assert!(is_runtime(b"libclang_rt.ubsan_standalone-x86_64.so"));
        assert!(!is_runtime(b"libc.so.6"));
        assert!(!is_runtime(b"libclang_rt.builtins.a"));
        assert!(!is_runtime(b"/proc/1/fd/3"));
    }

    #[test]
    fn split() {
        assert_eq!(
            split_first(b"a.so:b.so c.so"),
            (&b"a.so"[..], &b"b.so c.so"[..])
        );
        assert_eq!(split_first(b" a.so"), (&b"a.so"[..], &b""[..]));
        assert_eq!(split_first(b""), (&b""[..], &b""[..]));
    }
}
