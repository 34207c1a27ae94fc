//! Telling a debug file by its identity: the build-id (`NT_GNU_BUILD_ID`)
//! of a file or of bytes a server sent, and the CRC-32 a debug link
//! records.

use fctrace_format::symtab::Module;
use std::path::Path;

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build-id of the regular ELF file at `path`, as hex.
pub fn build_id_of_file(path: &Path) -> Option<String> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    fctrace_symbols::read_headers(path)
        .ok()?
        .build_id
        .as_deref()
        .map(hex)
}

/// The build-id of an ELF file's bytes, as hex.
pub fn build_id_of_bytes(data: &[u8]) -> Option<String> {
    use object::Object;
    object::File::parse(data)
        .ok()?
        .build_id()
        .ok()
        .flatten()
        .map(hex)
}

/// Whether the file at `path` is `module`'s debug file: the same build-id
/// (when the module has one), else the CRC-32 of its debug link.
pub fn is_debug_file_of(path: &Path, module: &Module) -> bool {
    if !module.build_id.is_empty() {
        return build_id_of_file(path).as_deref() == Some(module.build_id.as_str());
    }
    !module.debuglink.is_empty()
        && fctrace_symbols::debugfile::crc32_of(path) == Some(module.debuglink_crc)
}
