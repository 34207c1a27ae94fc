//! MiniDebugInfo: the `.gnu_debugdata` section Fedora, RHEL and SUSE put
//! in their stripped programs and libraries, an xz-compressed ELF file
//! whose `.symtab` names the local functions (those `.dynsym` does not
//! have, `.cold` parts included). [`symbols`] decompresses it; the result
//! is used as a separate debug file's symbols are (its sections have the
//! file's names and addresses).

use object::{Object, ObjectSection};

/// Decompressed `.gnu_debugdata` grows to at most this (the symbols of
/// the largest libraries take a few megabytes).
const MAX_SIZE: u64 = 256 << 20;

/// The ELF file in the `.gnu_debugdata` section of `data`, decompressed;
/// `None` when the file has no such section or a `.symtab` of its own,
/// or the section is not an xz stream of an ELF file.
pub fn symbols(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    if file.section_by_name(".symtab").is_some() {
        return None;
    }
    let section = file.section_by_name(".gnu_debugdata")?;
    // Not loaded (its address is 0): read at its file offset.
    let packed = section.data().ok()?;
    let mut out = Limited(Vec::new());
    lzma_rs::xz_decompress(&mut &packed[..], &mut out).ok()?;
    out.0.starts_with(b"\x7fELF").then_some(out.0)
}

/// A buffer that refuses to grow past [`MAX_SIZE`].
struct Limited(Vec<u8>);

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.0.len() + buf.len()) as u64 > MAX_SIZE {
            return Err(std::io::Error::other(".gnu_debugdata too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
