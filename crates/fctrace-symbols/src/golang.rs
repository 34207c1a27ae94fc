//! Go code inside an ELF file: a program built with cgo (Go and C in one
//! executable) or a library built with `-buildmode=c-shared`. Go's stack
//! copier and garbage collector read every return address on a goroutine's
//! stack through Go's own tables, so a tracer must leave Go's functions
//! alone; this finds where they are.
//!
//! The Go linker puts all Go code between its `runtime.text` and
//! `runtime.etext` symbols; with `-ldflags=-s` (no `.symtab`) the same range
//! comes from the function table of the pc-line table (`.gopclntab` in an
//! executable, inside `.data.rel.ro` in a shared library): its header
//! (Go 1.18 and later) holds the text's start, and the table's last entry
//! its end.

use std::ops::Range;

/// What is known of the Go code in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoCode {
    /// The link-time address range of the Go functions, when found.
    pub text: Option<Range<u64>>,
}

/// A section as this module needs it.
pub(crate) struct GoSection<'a> {
    pub name: &'a str,
    pub addr: u64,
    pub exec: bool,
    pub bytes: &'a [u8],
}

/// Sections that only the Go linker writes.
pub(crate) const GO_SECTIONS: &[&str] = &[".gopclntab", ".go.buildinfo", ".note.go.buildid"];

/// The Go code of a file: `symbols` is the range between `runtime.text`
/// and `runtime.etext` when the symbol table has both. None if the file
/// holds no Go code.
pub(crate) fn find(sections: &[GoSection], symbols: Option<Range<u64>>) -> Option<GoCode> {
    let marked = sections.iter().any(|s| GO_SECTIONS.contains(&s.name));
    if !marked && symbols.is_none() {
        return None;
    }
    let text = symbols
        .filter(|r| r.start < r.end && in_exec(sections, r))
        .or_else(|| from_pclntab(sections));
    Some(GoCode { text })
}

fn in_exec(sections: &[GoSection], r: &Range<u64>) -> bool {
    sections.iter().any(|s| {
        s.exec && s.addr <= r.start && r.end <= s.addr.saturating_add(s.bytes.len() as u64)
    })
}

/// The pc-line table header's first 8 bytes: magic (Go 1.18-1.19, Go
/// 1.20 and later), two zero bytes, instruction size 1, pointer size 8.
const HEADERS: [[u8; 8]; 2] = [
    [0xf0, 0xff, 0xff, 0xff, 0, 0, 1, 8],
    [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8],
];

/// The Go text's range from the pc-line table's header, looked for in
/// `.gopclntab`, else in the read-only data of a shared library.
fn from_pclntab(sections: &[GoSection]) -> Option<Range<u64>> {
    for name in [".gopclntab", ".data.rel.ro", ".rodata"] {
        for s in sections.iter().filter(|s| s.name == name) {
            let b = s.bytes;
            let mut at = 0;
            while at + 72 <= b.len() {
                if HEADERS.iter().any(|h| b[at..at + 8] == h[..]) {
                    if let Some(r) = text_of(&b[at..]).filter(|r| in_exec(sections, r)) {
                        return Some(r);
                    }
                }
                at += 4;
            }
        }
    }
    None
}

/// `pcHeader` at the start of `b`: nfunc at 8, textStart at 24,
/// pclnOffset at 64; the function table at pclnOffset has nfunc + 1
/// (entry offset, data offset) pairs of u32, the last entry offset being
/// the text's end.
fn text_of(b: &[u8]) -> Option<Range<u64>> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let nfunc = word(8)?;
    let start = word(24)?;
    let ftab = word(64)?;
    if nfunc == 0 || nfunc > 1 << 24 || start == 0 {
        return None;
    }
    let last = usize::try_from(ftab.checked_add(nfunc * 8)?).ok()?;
    let end_off = u32::from_le_bytes(b.get(last..last + 4)?.try_into().ok()?);
    (end_off != 0).then(|| start..start + u64::from(end_off))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(nfunc: u64, start: u64, end_off: u32) -> Vec<u8> {
        let mut b = vec![0u8; 72];
        b[..8].copy_from_slice(&HEADERS[0]);
        b[8..16].copy_from_slice(&nfunc.to_le_bytes());
        b[24..32].copy_from_slice(&start.to_le_bytes());
        b[64..72].copy_from_slice(&72u64.to_le_bytes());
        for k in 0..=nfunc {
            let off = if k == nfunc { end_off } else { k as u32 * 16 };
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn the_range_comes_from_symbols_else_from_the_table() {
        let code = vec![0u8; 0x1000];
        let table = header(3, 0x1100, 0x300);
        let secs = [
            GoSection {
                name: ".text",
                addr: 0x1000,
                exec: true,
                bytes: &code,
            },
            GoSection {
                name: ".gopclntab",
                addr: 0x4000,
                exec: false,
                bytes: &table,
            },
        ];
        assert_eq!(
            find(&secs, Some(0x1010..0x1020)).unwrap().text,
            Some(0x1010..0x1020)
        );
        assert_eq!(find(&secs, None).unwrap().text, Some(0x1100..0x1400));
        // Outside the code: not believed.
        let table = header(3, 0x1100, 0x3000);
        let secs = [
            GoSection {
                name: ".text",
                addr: 0x1000,
                exec: true,
                bytes: &code,
            },
            GoSection {
                name: ".data.rel.ro",
                addr: 0x4000,
                exec: false,
                bytes: &table,
            },
            GoSection {
                name: ".go.buildinfo",
                addr: 0x8000,
                exec: false,
                bytes: &[],
            },
        ];
        assert_eq!(find(&secs, None).unwrap().text, None);
        // No Go.
        assert_eq!(find(&secs[..2], None), None);
    }
}
