//! Source locations of functions (`--srcline`, `-L`/`--loc-filter`): the
//! file and line where each function is defined (`DW_AT_decl_file`,
//! `DW_AT_decl_line` of its `DW_TAG_subprogram`), by the function's
//! address in the file (`DW_AT_low_pc`), from the DWARF of an ELF file or
//! of its separate debug file ([`crate::debugfile`]).

use gimli::{AttributeValue, EndianSlice, RunTimeEndian};
use object::Object;
use std::collections::HashMap;
use std::path::Path;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// Where a function is defined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrcLine {
    /// The source file as the compiler was given it (`tests/s-abc.c`), or
    /// joined with its directory when that is not the compilation's.
    pub file: String,
    pub line: u64,
}

/// Source locations by function address (an address in the file).
pub type SrcLines = HashMap<u64, SrcLine>;

/// The source locations of the functions of the ELF file at `path` (its
/// own DWARF, else its separate debug file under `debug_root`); empty
/// without debug information.
pub fn srclines_of_file_in(path: &Path, debug_root: &Path) -> Result<SrcLines, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.section_by_name(".debug_info").is_some() {
        return srclines(&file);
    }
    let Some(debug) = crate::debugfile::find_in(path, &data, debug_root) else {
        return Ok(SrcLines::new());
    };
    let data = std::fs::read(&debug).map_err(|e| format!("{}: {e}", debug.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", debug.display()))?;
    srclines(&file)
}

/// The source locations of the functions an ELF file's DWARF describes.
pub fn srclines(file: &object::File) -> Result<SrcLines, String> {
    let sections = crate::dwarf::sections(file)?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, RunTimeEndian::Little));
    let mut out = SrcLines::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let mut cursor = unit.entries();
        while let Some((_, entry)) = cursor.next_dfs().map_err(|e| e.to_string())? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Ok(Some(AttributeValue::Addr(low))) = entry.attr_value(gimli::DW_AT_low_pc) else {
                continue;
            };
            let Some((file_index, line)) = decl(&unit, entry) else {
                continue;
            };
            if let Some(file) = file_name(&dwarf, &unit, file_index) {
                out.entry(low).or_insert(SrcLine { file, line });
            }
        }
    }
    Ok(out)
}

/// The `DW_AT_decl_file` and `DW_AT_decl_line` of a subprogram, or of the
/// declaration it completes (`DW_AT_specification`) or the abstract
/// instance it is a concrete copy of (`DW_AT_abstract_origin`).
fn decl(unit: &gimli::Unit<R>, entry: &gimli::DebuggingInformationEntry<R>) -> Option<(u64, u64)> {
    let own = |e: &gimli::DebuggingInformationEntry<R>| {
        let file = match e.attr_value(gimli::DW_AT_decl_file).ok()?? {
            AttributeValue::FileIndex(i) => i,
            v => v.udata_value()?,
        };
        let line = e.attr_value(gimli::DW_AT_decl_line).ok()??.udata_value()?;
        Some((file, line))
    };
    if let Some(d) = own(entry) {
        return Some(d);
    }
    let mut e = entry.clone();
    for _ in 0..4 {
        let next = [gimli::DW_AT_specification, gimli::DW_AT_abstract_origin]
            .into_iter()
            .find_map(|at| match e.attr_value(at).ok()? {
                Some(AttributeValue::UnitRef(off)) => Some(off),
                _ => None,
            })?;
        e = unit.entry(next).ok()?;
        if let Some(d) = own(&e) {
            return Some(d);
        }
    }
    None
}

/// The name of file `index` of the unit's line program: as given to the
/// compiler, joined with its directory unless that is the compilation
/// directory.
fn file_name(dwarf: &gimli::Dwarf<R>, unit: &gimli::Unit<R>, index: u64) -> Option<String> {
    let program = unit.line_program.as_ref()?;
    let header = program.header();
    let file = header.file(index)?;
    let text = |v: AttributeValue<R>| -> Option<String> {
        let s = dwarf.attr_string(unit, v).ok()?;
        Some(String::from_utf8_lossy(s.slice()).into_owned())
    };
    let name = text(file.path_name())?;
    if name.starts_with('/') {
        return Some(name);
    }
    let comp_dir = unit
        .comp_dir
        .map(|d| String::from_utf8_lossy(d.slice()).into_owned());
    match file.directory(header).and_then(text) {
        Some(dir) if !dir.is_empty() && Some(&dir) != comp_dir.as_ref() => {
            Some(format!("{}/{name}", dir.trim_end_matches('/')))
        }
        _ => Some(name),
    }
}
