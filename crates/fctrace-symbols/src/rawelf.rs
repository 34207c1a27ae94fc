//! An ELF file's program headers read without allocating: through a
//! `read_at(offset, buf)` callback into fixed buffers, for the readers the
//! agent uses before an `exec` (possibly in a `vfork` child), where the
//! `object` crate's allocating parser cannot run: [`crate::loader`]
//! (`PT_INTERP`) and [`crate::sanitizer`] (`DT_NEEDED`).

/// The size of a 64-bit program header.
pub(crate) const PHDR_SIZE: usize = 56;

pub(crate) fn u16_at(b: &[u8], at: usize) -> u64 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u64
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// Calls `each` with the program headers of a 64-bit little-endian ELF
/// file in order, until it returns false. False when the file is not
/// such an ELF file, its headers look wrong (more than 256, or short) or
/// one could not be read.
pub(crate) fn program_headers(
    read_at: &mut impl FnMut(u64, &mut [u8]) -> bool,
    mut each: impl FnMut(&[u8; PHDR_SIZE]) -> bool,
) -> bool {
    let mut eh = [0u8; 64];
    if !read_at(0, &mut eh) || eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return false;
    }
    let (phoff, phentsize, phnum) = (u64_at(&eh, 0x20), u16_at(&eh, 0x36), u16_at(&eh, 0x38));
    if phentsize < PHDR_SIZE as u64 || phnum > 256 {
        return false;
    }
    for i in 0..phnum {
        let mut ph = [0u8; PHDR_SIZE];
        if !read_at(phoff + i * phentsize, &mut ph) {
            return false;
        }
        if !each(&ph) {
            break;
        }
    }
    true
}
