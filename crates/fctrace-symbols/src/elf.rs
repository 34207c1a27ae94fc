//! The ELF walk behind [`crate::analyze`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use object::elf;
use object::read::elf::{
    Dyn, FileHeader, ProgramHeader, Rela, SectionHeader, SectionTable, Sym, SymbolTable,
    VersionTable,
};
use object::{Endianness, SectionIndex, SymbolIndex};

use crate::info::{ElfInfo, ElfKind, FuncRef, GotImport, PltEntry, SymbolError};
use crate::x86;

type Result<T> = std::result::Result<T, SymbolError>;

/// What [`analyze`] finds: the file's description (without functions),
/// its functions borrowed from its bytes, and its section names (which
/// [`FuncRef::section`] indexes), and the functions' other names.
pub(crate) struct Analysis<'data> {
    pub info: ElfInfo,
    pub functions: Vec<FuncRef<'data>>,
    /// The other names of functions: (index in `functions`, name), in
    /// order of function, best first.
    pub aliases: Vec<(usize, Cow<'data, str>)>,
    pub section_names: Vec<std::sync::Arc<str>>,
}

fn malformed(e: object::read::Error) -> SymbolError {
    SymbolError(format!("malformed ELF file: {e}"))
}

/// With `full` false, only the headers are read: no functions, PLT or GOT
/// imports, markers; `has_symtab` says whether a `.symtab` section with
/// symbols exists.
pub(crate) fn analyze(data: &[u8], full: bool) -> Result<Analysis<'_>> {
    analyze_with(data, None, full)
}

/// [`analyze`] with the `.symtab` of `debug`, the file's separate debug
/// file (see [`crate::debugfile`]), when the file itself has none.
pub(crate) fn analyze_with<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
    full: bool,
) -> Result<Analysis<'data>> {
    analyze_opts(data, debug, full, true, true)
}

/// [`analyze_with`]; without `code`, no byte of the file's code is read:
/// the PLT entries and GOT imports are not looked for (no relocation is
/// read either) and each function's `pad_end` is left at its end, its
/// `pad_limit` telling where a scan for padding would stop. Without
/// `frames`, a file without `.symtab` has only its named functions (its
/// call frame information is not read).
pub(crate) fn analyze_opts<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
    full: bool,
    code: bool,
    frames: bool,
) -> Result<Analysis<'data>> {
    if data.len() < 16 || !data.starts_with(b"\x7fELF") {
        return Err(SymbolError("not an ELF file".into()));
    }
    match data[4] {
        // EI_CLASS
        1 => analyze_as::<elf::FileHeader32<Endianness>>(data, debug, full, code, frames),
        2 => analyze_as::<elf::FileHeader64<Endianness>>(data, debug, full, code, frames),
        c => Err(SymbolError(format!("unsupported ELF class {c}"))),
    }
}

/// The `.symtab` of a separate debug file, and for each of its section
/// indices the index of the section of the same name and address in the
/// stripped file (its code sections are `SHT_NOBITS` in the debug file).
/// `None` when it is not an ELF file of the same class and byte order, or
/// has no `.symtab`.
fn debug_symtab<'data, Elf: FileHeader<Endian = Endianness>>(
    debug: &'data [u8],
    endian: Endianness,
    sections: &[Section],
) -> Option<(SymbolTable<'data, Elf>, Vec<Option<usize>>)> {
    let header = Elf::parse(debug).ok()?;
    if header.endian().ok()? != endian {
        return None;
    }
    let table = header.sections(endian, debug).ok()?;
    let symtab = table.symbols(endian, debug, elf::SHT_SYMTAB).ok()?;
    if symtab.len() <= 1 {
        return None;
    }
    let map = table
        .iter()
        .map(|sh| {
            let name = table.section_name(endian, sh).ok()?;
            let addr: u64 = sh.sh_addr(endian).into();
            sections
                .iter()
                .position(|s| s.addr == addr && s.name.as_bytes() == name)
        })
        .collect();
    Some((symtab, map))
}

/// Human name of an `e_machine` value.
fn machine_name(m: u16) -> String {
    let name = match m {
        2 => "sparc",
        3 => "i386",
        8 => "mips",
        20 => "powerpc",
        21 => "powerpc64",
        22 => "s390",
        40 => "arm",
        42 => "superh",
        43 => "sparc64",
        50 => "ia64",
        62 => "x86_64",
        183 => "aarch64",
        243 => "riscv",
        247 => "bpf",
        258 => "loongarch",
        _ => return format!("machine {m}"),
    };
    name.to_string()
}

/// Strip a `@VERSION` / `@@VERSION` suffix stored in a symbol name.
fn strip_version(name: &str) -> &str {
    // (a byte loop: names are short, and there are many)
    match name.bytes().position(|b| b == b'@') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

/// A symbol name from the file, without its version suffix: borrowed from
/// the file's bytes unless it is not UTF-8.
fn symbol_name(raw: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(raw) {
        Cow::Borrowed(s) => Cow::Borrowed(strip_version(s)),
        Cow::Owned(s) => Cow::Owned(strip_version(&s).to_string()),
    }
}

/// A part split off a function, entered by a jump from it, not by a call:
/// GCC's (and LLVM's) hot/cold splitting puts the cold part in `foo.cold`
/// or `foo.cold.N`; BOLT, which optimises a linked binary, splits
/// functions into hot, `foo.warm` and `foo.cold` parts (librustc_driver
/// and Rust's libLLVM have thousands of each).
fn is_cold_part(name: &str) -> bool {
    name.bytes().any(|b| b == b'.')
        && name
            .split('.')
            .skip(1)
            .any(|part| part == "cold" || part == "warm")
}

/// Preference rank of a symbol's binding: lower is better.
fn bind_rank(bind: u8, vis: u8) -> u8 {
    let exported = vis == elf::STV_DEFAULT.0 || vis == elf::STV_PROTECTED.0;
    match bind {
        b if (b == elf::STB_GLOBAL.0 || b == elf::STB_GNU_UNIQUE.0) && exported => 0,
        b if b == elf::STB_WEAK.0 && exported => 1,
        _ => 2,
    }
}

/// Sort key for choosing the preferred name among several at one address.
fn name_key(rank: u8, name: &str) -> (u8, usize, usize, &str) {
    let underscores = name.bytes().take_while(|&b| b == b'_').count();
    (rank, underscores, name.len(), name)
}

struct Section<'data> {
    /// Shared with every function of the section.
    name: std::sync::Arc<str>,
    addr: u64,
    size: u64,
    exec: bool,
    /// Loaded (`SHF_ALLOC`) with contents in the file.
    alloc: bool,
    entsize: u64,
    bytes: &'data [u8],
}

impl Section<'_> {
    fn end(&self) -> u64 {
        self.addr.saturating_add(self.size)
    }
}

/// Instrumentation hooks reported in [`ElfInfo::markers`], in this order.
const MARKERS: [&str; 3] = ["mcount", "__fentry__", "__cyg_profile_func_enter"];

fn marker_index(name: &str) -> Option<usize> {
    match name {
        "mcount" | "_mcount" => Some(0),
        "__fentry__" => Some(1),
        "__cyg_profile_func_enter" => Some(2),
        _ => None,
    }
}

/// Analyses an ELF file of class `Elf`: its headers, and with `full` its
/// functions, their other names and padding, PLT entries, GOT imports,
/// instrumentation hooks and Go runtime tables (see [`analyze_opts`]).
fn analyze_as<'data, Elf: FileHeader<Endian = Endianness>>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
    full: bool,
    read_code: bool,
    frames: bool,
) -> Result<Analysis<'data>> {
    let header = Elf::parse(data).map_err(malformed)?;
    let endian = header.endian().map_err(malformed)?;
    let e_type = header.e_type(endian);
    let e_machine = header.e_machine(endian).0;
    check_file_type(e_type)?;
    let is_x86_64 = e_machine == elf::EM_X86_64.0 && header.is_class_64();
    let is_x86 = is_x86_64 || e_machine == elf::EM_386.0;

    let phdrs = header.program_headers(endian, data).map_err(malformed)?;
    let mut segments = read_segments::<Elf>(phdrs, endian, data);
    let kind = segments.kind(e_type);
    let is_static = kind != ElfKind::SharedObject && !segments.has_interp;

    let table = header.sections(endian, data).map_err(malformed)?;
    let (sections, has_patchable_entries) =
        read_sections(&table, endian, data, &mut segments.build_id);

    // A broken symbol table is treated as absent.
    let symtab = table
        .symbols(endian, data, elf::SHT_SYMTAB)
        .unwrap_or_default();
    let dynsym = table
        .symbols(endian, data, elf::SHT_DYNSYM)
        .unwrap_or_default();

    let mut info = ElfInfo {
        kind,
        machine: machine_name(e_machine),
        is_x86_64,
        is_static,
        interp: segments.interp,
        has_symtab: symtab.len() > 1,
        has_minidebuginfo: sections.iter().any(|s| &*s.name == ".gnu_debugdata"),
        go: None,
        entry: header.e_entry(endian).into(),
        build_id: segments.build_id,
        debuglink: debuglink(&sections, endian),
        left_out: Vec::new(),
        functions: Vec::new(),
        plt: Vec::new(),
        got_imports: Vec::new(),
        markers: Vec::new(),
    };
    if !full {
        return Ok(Analysis {
            info,
            functions: Vec::new(),
            aliases: Vec::new(),
            section_names: Vec::new(),
        });
    }

    // A stripped file's symbols come from its debug file, whose section
    // indices are mapped to the file's own.
    let from_debug = if symtab.len() <= 1 {
        debug.and_then(|d| debug_symtab::<Elf>(d, endian, &sections))
    } else {
        None
    };
    let (symtab, debug_sections) = match from_debug {
        Some((t, map)) => (t, Some(map)),
        None => (symtab, None),
    };

    let mut symbols = Symbols::new(&sections, symtab.len() + dynsym.len());
    let shared = kind == ElfKind::SharedObject;
    let tables = [
        (&symtab, true, debug_sections.as_deref()),
        (&dynsym, false, None),
    ];
    for (syms, is_symtab, map) in tables {
        symbols.add_table(syms, is_symtab, map, endian, shared, &sections);
    }
    // Without a `.symtab`, the functions no symbol names are found from
    // the call frame information.
    let from_fdes = (frames && is_x86_64 && !symbols.has_symtab).then(|| {
        let pointers = || relocated_pointers(&table, endian, data);
        let e = frame_entries(&mut symbols, &sections, e_type == elf::ET_EXEC, pointers);
        info.left_out = e.left_out;
        e.sizes
    });
    symbols.sort_boundaries();

    let mut functions = symbols.candidates;
    let aliases = group_functions(&mut functions, &sections);
    for (addr, len) in from_fdes.unwrap_or_default() {
        if let Ok(i) = functions.binary_search_by_key(&addr, |f| f.addr) {
            let f = &mut functions[i];
            if f.size == 0 {
                f.size = len;
                f.pad_end = addr + len;
            }
        }
    }
    set_pad_ends(
        &mut functions,
        &sections,
        &symbols.boundaries,
        is_x86,
        symbols.has_symtab,
        read_code,
    );

    if is_x86_64 && read_code {
        (info.plt, info.got_imports) =
            imports(data, endian, &table, &dynsym, &sections, &functions)?;
    }
    info.has_symtab = symbols.has_symtab;
    info.markers = marker_names(symbols.marker_found, has_patchable_entries);
    info.go = find_go(&sections, symbols.go_text.zip(symbols.go_etext));

    let section_names = sections.iter().map(|s| s.name.clone()).collect();
    Ok(Analysis {
        info,
        functions,
        aliases,
        section_names,
    })
}

/// The FDE entries of a file without `.symtab` (see [`crate::entries`]):
/// adds the unnamed functions to `symbols`' candidates and every FDE's
/// start to its boundaries; returns the FDEs left out and the sizes found
/// for named functions without one.
fn frame_entries(
    symbols: &mut Symbols,
    sections: &[Section],
    position_dependent: bool,
    pointers: impl FnOnce() -> Vec<u64>,
) -> crate::entries::Entries {
    let code: Vec<crate::entries::CodeSection> = sections
        .iter()
        .map(|s| crate::entries::CodeSection {
            name: &s.name,
            addr: s.addr,
            exec: s.exec,
            data: s.alloc && !s.exec,
            bytes: s.bytes,
        })
        .collect();
    let mut named: Vec<(u64, u64)> = symbols
        .candidates
        .iter()
        .map(|c| (c.addr, c.size))
        .collect();
    named.sort_unstable();
    // One per address, the largest size.
    named.reverse();
    named.dedup_by_key(|n| n.0);
    named.reverse();
    symbols.parts.sort_unstable();
    let mut e = crate::entries::find(&code, &named, &symbols.parts, position_dependent, pointers);
    for &(addr, len, sec) in &e.functions {
        symbols.boundaries[sec].push(addr);
        symbols.candidates.push(FuncRef {
            name: Cow::Borrowed(""),
            addr,
            size: len,
            pad_end: 0,
            section: sec as u32,
            global: false,
            ifunc: false,
            rank: 3,
        });
    }
    for l in &e.left_out {
        if let Some(sec) = sections
            .iter()
            .position(|s| s.exec && l.addr >= s.addr && l.addr < s.end())
        {
            symbols.boundaries[sec].push(l.addr);
        }
    }
    e.functions = Vec::new();
    e
}

/// The addends of the file's `R_X86_64_RELATIVE`, `_64` and `IRELATIVE`
/// relocations: addresses the loader stores somewhere.
fn relocated_pointers<Elf: FileHeader<Endian = Endianness>>(
    table: &SectionTable<Elf>,
    endian: Endianness,
    data: &[u8],
) -> Vec<u64> {
    let mut out = Vec::new();
    for sh in table.iter() {
        let Ok(Some((relas, _))) = sh.rela(endian, data) else {
            continue;
        };
        for r in relas {
            let t = r.r_type(endian, false);
            if t == elf::R_X86_64_RELATIVE || t == elf::R_X86_64_64 || t == elf::R_X86_64_IRELATIVE
            {
                out.push(r.r_addend(endian).into() as u64);
            }
        }
    }
    out
}

/// The file name `.gnu_debuglink` names and its CRC.
fn debuglink(sections: &[Section], endian: Endianness) -> Option<(String, u32)> {
    let s = sections.iter().find(|s| &*s.name == ".gnu_debuglink")?;
    let b = s.bytes;
    let n = b.iter().position(|&c| c == 0)?;
    let at = (n + 1).next_multiple_of(4);
    let crc: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    let crc = match endian {
        Endianness::Little => u32::from_le_bytes(crc),
        Endianness::Big => u32::from_be_bytes(crc),
    };
    Some((String::from_utf8_lossy(&b[..n]).into_owned(), crc))
}

/// Refuses the ELF files that are not linked programs or libraries:
/// object files, core dumps and types this reader does not know.
fn check_file_type(e_type: elf::FileType) -> Result<()> {
    let kind_err = |what: &str| {
        Err(SymbolError(format!(
            "{what}, not a program or shared library"
        )))
    };
    match e_type {
        elf::ET_EXEC | elf::ET_DYN => Ok(()),
        elf::ET_REL => kind_err("relocatable object file (.o)"),
        elf::ET_CORE => kind_err("core dump"),
        t => kind_err(&format!("ELF file of unknown type {}", t.0)),
    }
}

/// What the program headers say: the interpreter (`PT_INTERP`), the
/// dynamic section's `DT_FLAGS_1` and whether it has a `DT_SONAME`, and
/// the GNU build id of a note segment.
struct Segments {
    has_interp: bool,
    interp: Option<String>,
    flags_1: u64,
    has_soname: bool,
    build_id: Option<Vec<u8>>,
}

impl Segments {
    /// The kind of a file of type `e_type` with these segments: a
    /// position-independent executable is an `ET_DYN` file flagged PIE,
    /// or one with an interpreter and no soname.
    fn kind(&self, e_type: elf::FileType) -> ElfKind {
        if e_type == elf::ET_EXEC {
            ElfKind::Executable
        } else if self.flags_1 & elf::DF_1_PIE.0 != 0 || (self.has_interp && !self.has_soname) {
            ElfKind::PieExecutable
        } else {
            ElfKind::SharedObject
        }
    }
}

/// Reads the program headers `phdrs` of the file `data` into [`Segments`].
fn read_segments<Elf: FileHeader<Endian = Endianness>>(
    phdrs: &[Elf::ProgramHeader],
    endian: Endianness,
    data: &[u8],
) -> Segments {
    let mut out = Segments {
        has_interp: false,
        interp: None,
        flags_1: 0,
        has_soname: false,
        build_id: None,
    };
    for ph in phdrs {
        let p_type = ph.p_type(endian);
        if p_type == elf::PT_INTERP {
            out.has_interp = true;
            out.interp = ph.data(endian, data).ok().map(|d| {
                let d = d.split(|&c| c == 0).next().unwrap_or(&[]);
                String::from_utf8_lossy(d).into_owned()
            });
        } else if let Ok(Some(dyns)) = ph.dynamic(endian, data) {
            for d in dyns {
                let tag = d.tag(endian);
                if tag == elf::DT_FLAGS_1 {
                    out.flags_1 |= d.val(endian);
                } else if tag == elf::DT_SONAME {
                    out.has_soname = true;
                } else if tag == elf::DT_NULL {
                    break;
                }
            }
        } else if let Ok(Some(mut notes)) = ph.notes(endian, data) {
            while let Ok(Some(note)) = notes.next() {
                if out.build_id.is_none()
                    && note.name() == elf::ELF_NOTE_GNU
                    && note.n_type(endian) == elf::NT_GNU_BUILD_ID
                {
                    out.build_id = Some(note.desc().to_vec());
                }
            }
        }
    }
    out
}

/// The file's sections, in index order, and whether one is
/// `__patchable_function_entries`; `build_id`, when still unknown, is
/// taken from a GNU build-id note section.
fn read_sections<'data, Elf: FileHeader<Endian = Endianness>>(
    table: &SectionTable<'data, Elf>,
    endian: Endianness,
    data: &'data [u8],
    build_id: &mut Option<Vec<u8>>,
) -> (Vec<Section<'data>>, bool) {
    let mut sections = Vec::with_capacity(table.len());
    let mut has_patchable_entries = false;
    for sh in table.iter() {
        let name = table
            .section_name(endian, sh)
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        if name == "__patchable_function_entries" {
            has_patchable_entries = true;
        }
        let flags = sh.sh_flags(endian).0;
        let nobits = sh.sh_type(endian) == elf::SHT_NOBITS;
        let exec = flags & elf::SHF_EXECINSTR.0 != 0 && flags & elf::SHF_ALLOC.0 != 0 && !nobits;
        let bytes = if nobits {
            &[][..]
        } else {
            sh.data(endian, data).unwrap_or(&[])
        };
        if build_id.is_none() && sh.sh_type(endian) == elf::SHT_NOTE {
            if let Ok(Some(mut notes)) = sh.notes(endian, data) {
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == elf::ELF_NOTE_GNU
                        && note.n_type(endian) == elf::NT_GNU_BUILD_ID
                    {
                        *build_id = Some(note.desc().to_vec());
                        break;
                    }
                }
            }
        }
        sections.push(Section {
            name: name.into(),
            addr: sh.sh_addr(endian).into(),
            size: sh.sh_size(endian).into(),
            exec,
            alloc: flags & elf::SHF_ALLOC.0 != 0 && !nobits,
            entsize: sh.sh_entsize(endian).into(),
            // Section data can be shorter than sh_size only for bad files.
            bytes,
        });
    }
    (sections, has_patchable_entries)
}

/// What the symbol tables give: one candidate per function symbol, every
/// code symbol's address per section (where padding after a function
/// stops), the hooks referenced or defined, whether `.symtab` names a
/// function, and Go's `runtime.text` and `runtime.etext`.
struct Symbols<'data> {
    candidates: Vec<FuncRef<'data>>,
    boundaries: Vec<Vec<u64>>,
    marker_found: [bool; MARKERS.len()],
    has_symtab: bool,
    go_text: Option<u64>,
    go_etext: Option<u64>,
    /// Where the symbols naming split parts (`foo.cold`) start.
    parts: Vec<u64>,
}

impl<'data> Symbols<'data> {
    /// Nothing found yet in a file of `sections`, room for `capacity`
    /// symbols.
    fn new(sections: &[Section], capacity: usize) -> Self {
        Symbols {
            candidates: Vec::with_capacity(capacity),
            boundaries: vec![Vec::new(); sections.len()],
            marker_found: [false; MARKERS.len()],
            has_symtab: false,
            go_text: None,
            go_etext: None,
            parts: Vec::new(),
        }
    }

    /// Adds the symbols of `syms` (`.symtab` when `is_symtab`, else
    /// `.dynsym`), whose section indices `map` turns into the file's own
    /// when they come from a debug file; `shared` says the file is a
    /// shared library (whose definitions of hooks do not count).
    fn add_table<Elf: FileHeader<Endian = Endianness>>(
        &mut self,
        syms: &SymbolTable<'data, Elf>,
        is_symtab: bool,
        map: Option<&[Option<usize>]>,
        endian: Endianness,
        shared: bool,
        sections: &[Section],
    ) {
        for (index, sym) in syms.enumerate().skip(1) {
            let st_type = sym.st_type();
            if st_type == elf::STT_SECTION || st_type == elf::STT_FILE {
                continue;
            }
            let raw = syms.symbol_name(endian, sym).unwrap_or_default();
            let name = symbol_name(raw);
            let section = syms.symbol_section(endian, sym, index).ok().flatten();
            // A reference to a hook, or a hook defined by a program (libc
            // defines mcount for everyone).
            if let Some(m) = marker_index(&name) {
                if section.is_none() || !shared {
                    self.marker_found[m] = true;
                }
            }
            let Some(SectionIndex(sec)) = section else {
                continue;
            };
            let sec = match map {
                Some(map) => match map.get(sec).copied().flatten() {
                    Some(sec) => sec,
                    None => continue,
                },
                None => sec,
            };
            let Some(section) = sections.get(sec) else {
                continue;
            };
            let addr: u64 = sym.st_value(endian).into();
            if addr == 0 || !section.exec || st_type == elf::STT_TLS {
                continue;
            }
            self.boundaries[sec].push(addr);
            match &*name {
                "runtime.text" => self.go_text = Some(addr),
                "runtime.etext" => self.go_etext = Some(addr),
                _ => {}
            }
            let is_func = st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC;
            if !is_func || name.is_empty() {
                continue;
            }
            if is_symtab {
                self.has_symtab = true;
            }
            if is_cold_part(&name) {
                self.parts.push(addr);
                continue;
            }
            let bind = sym.st_bind().0;
            self.candidates.push(FuncRef {
                name,
                addr,
                size: sym.st_size(endian).into(),
                pad_end: 0,
                section: sec as u32,
                global: bind != elf::STB_LOCAL.0,
                ifunc: st_type == elf::STT_GNU_IFUNC,
                rank: bind_rank(bind, sym.st_visibility().0),
            });
        }
    }

    /// Sorts each section's boundaries and drops repeats, once every
    /// table is added.
    fn sort_boundaries(&mut self) {
        for b in &mut self.boundaries {
            b.sort_unstable();
            b.dedup();
        }
    }
}

/// Sets each function's `pad_end`: its address when it has no size, else
/// the end of the padding after it (scanned in the code with `read_code`,
/// else the limit where a scan would stop; see [`pad_limit`]).
fn set_pad_ends(
    functions: &mut [FuncRef],
    sections: &[Section],
    boundaries: &[Vec<u64>],
    is_x86: bool,
    has_symtab: bool,
    read_code: bool,
) {
    // Per section: where the last lookup of the next boundary ended (the
    // functions come in address order).
    let mut cursors = vec![0usize; sections.len()];
    for f in functions {
        let limit = pad_limit(f, sections, boundaries, &mut cursors, is_x86, has_symtab);
        f.pad_end = if f.size == 0 {
            f.addr
        } else if read_code {
            pad_end(f, limit, sections)
        } else {
            limit
        };
    }
}

/// The names of the hooks found (in [`MARKERS`] order), then
/// `__patchable_function_entries` when that section exists.
fn marker_names(found: [bool; MARKERS.len()], has_patchable_entries: bool) -> Vec<String> {
    let mut markers: Vec<String> = MARKERS
        .iter()
        .zip(found)
        .filter(|(_, found)| *found)
        .map(|(n, _)| n.to_string())
        .collect();
    if has_patchable_entries {
        markers.push("__patchable_function_entries".into());
    }
    markers
}

/// The Go runtime's tables, looked for in `sections` with the code range
/// from `runtime.text` to `runtime.etext` when both are known.
fn find_go(sections: &[Section], text: Option<(u64, u64)>) -> Option<crate::golang::GoCode> {
    let go_sections: Vec<crate::golang::GoSection> = sections
        .iter()
        .map(|s| crate::golang::GoSection {
            name: &s.name,
            addr: s.addr,
            exec: s.exec,
            bytes: s.bytes,
        })
        .collect();
    crate::golang::find(&go_sections, text.map(|(a, b)| a..b))
}

/// Makes `candidates` (one per symbol) one [`FuncRef`] per address, in
/// place, and returns the other names; `pad_end` is left at `addr + size`.
fn group_functions<'data>(
    candidates: &mut Vec<FuncRef<'data>>,
    sections: &[Section],
) -> Vec<(usize, Cow<'data, str>)> {
    // By address first (an integer key); only the rare groups of several
    // names at one address are then ordered by preference. Unstable: equal
    // keys are the same name at the same address (a symbol listed in both
    // tables), interchangeable.
    candidates.sort_unstable_by_key(|c| c.addr);
    let mut aliases = Vec::new();
    let mut out = 0;
    let mut i = 0;
    while i < candidates.len() {
        let addr = candidates[i].addr;
        let mut group_end = i + 1;
        while group_end < candidates.len() && candidates[group_end].addr == addr {
            group_end += 1;
        }
        let group = &mut candidates[i..group_end];
        let mut size = group[0].size;
        let mut ifunc = group[0].ifunc;
        if group.len() > 1 {
            group
                .sort_unstable_by(|a, b| name_key(a.rank, &a.name).cmp(&name_key(b.rank, &b.name)));
            let first_alias = aliases.len();
            for k in 1..group.len() {
                size = size.max(group[k].size);
                ifunc |= group[k].ifunc;
                let dup = group[k].name == group[0].name
                    || aliases[first_alias..]
                        .iter()
                        .any(|(_, a): &(usize, Cow<str>)| *a == group[k].name);
                if !dup {
                    aliases.push((out, std::mem::take(&mut group[k].name)));
                }
            }
        }
        // A bogus size running past the section end is not trusted.
        let size = match sections.get(group[0].section as usize) {
            Some(s) if addr.saturating_add(size) <= s.end() => size,
            _ => 0,
        };
        candidates.swap(out, i);
        let f = &mut candidates[out];
        f.size = size;
        f.ifunc = ifunc;
        f.pad_end = addr + size;
        out += 1;
        i = group_end;
    }
    candidates.truncate(out);
    aliases
}

/// Where the scan for padding after `f` stops: the next symbol of any
/// kind in its section or the section's end (without a `.symtab`, the
/// next 16-byte boundary at the latest); `addr + size` when there is
/// nothing to scan.
fn pad_limit(
    f: &FuncRef,
    sections: &[Section],
    boundaries: &[Vec<u64>],
    cursors: &mut [usize],
    is_x86: bool,
    has_symtab: bool,
) -> u64 {
    let end = f.addr + f.size;
    if f.size == 0 || !is_x86 {
        return end;
    }
    let sec = f.section as usize;
    let Some(section) = sections.get(sec) else {
        return end;
    };
    let section_end = section.end();
    if end >= section_end || end < section.addr {
        return end;
    }
    let b = &boundaries[sec];
    // The first boundary at or after `end`: forward from the last one
    // (ends mostly grow), else a binary search.
    let mut i = cursors[sec];
    if i > 0 && b[i - 1] >= end {
        i = b[..i].partition_point(|&a| a < end);
    } else {
        let mut steps = 0;
        while i < b.len() && b[i] < end {
            i += 1;
            steps += 1;
            if steps == 16 {
                i += b[i..].partition_point(|&a| a < end);
                break;
            }
        }
    }
    cursors[sec] = i;
    let mut limit = b.get(i).copied().unwrap_or(section_end).min(section_end);
    if !has_symtab {
        limit = limit.min(end.saturating_add(15) & !15);
    }
    // Section data can be shorter than sh_size only for bad files.
    limit
        .min(section.addr + section.bytes.len() as u64)
        .max(end)
}

/// The end of the padding after `f`, scanned up to `limit` in the file's
/// bytes.
fn pad_end(f: &FuncRef, limit: u64, sections: &[Section]) -> u64 {
    let end = f.addr + f.size;
    if f.size == 0 {
        return f.addr;
    }
    let Some(section) = sections.get(f.section as usize) else {
        return end;
    };
    if limit <= end || end < section.addr {
        return end;
    }
    let start = (end - section.addr) as usize;
    let stop = (limit - section.addr) as usize;
    end + x86::padding_run(&section.bytes[start..stop]) as u64
}

struct Reloc {
    r_type: u32,
    sym: u32,
    addend: i64,
}

/// Name and version of dynamic symbol `index`.
fn dyn_name<'data, Elf: FileHeader<Endian = Endianness>>(
    endian: Endianness,
    dynsym: &SymbolTable<'data, Elf>,
    versions: Option<&VersionTable<'data, Elf>>,
    index: u32,
) -> Option<(String, Option<String>, &'data Elf::Sym)> {
    let sym = dynsym.symbol(SymbolIndex(index as usize)).ok()?;
    let raw = dynsym.symbol_name(endian, sym).ok()?;
    let name = strip_version(&String::from_utf8_lossy(raw)).to_string();
    if name.is_empty() {
        return None;
    }
    let version = versions.and_then(|v| {
        let vi = v.version_index(endian, SymbolIndex(index as usize));
        v.version(vi.index())
            .ok()
            .flatten()
            .map(|ver| String::from_utf8_lossy(ver.name()).into_owned())
    });
    Some((name, version, sym))
}

type Imports = (Vec<PltEntry>, Vec<GotImport>);

fn imports<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    endian: Endianness,
    table: &SectionTable<Elf>,
    dynsym: &SymbolTable<Elf>,
    sections: &[Section],
    functions: &[FuncRef],
) -> Result<Imports> {
    const R_JUMP_SLOT: u32 = elf::R_X86_64_JUMP_SLOT.0;
    const R_GLOB_DAT: u32 = elf::R_X86_64_GLOB_DAT.0;
    const R_IRELATIVE: u32 = elf::R_X86_64_IRELATIVE.0;

    // GOT slot -> relocation.
    let mut relocs: HashMap<u64, Reloc> = HashMap::new();
    for sh in table.iter() {
        let Ok(Some((relas, _link))) = sh.rela(endian, data) else {
            continue;
        };
        for r in relas {
            let r_type = r.r_type(endian, false).0;
            if r_type == R_JUMP_SLOT || r_type == R_GLOB_DAT || r_type == R_IRELATIVE {
                relocs.insert(
                    r.r_offset(endian).into(),
                    Reloc {
                        r_type,
                        sym: r.r_sym(endian, false),
                        addend: r.r_addend(endian).into(),
                    },
                );
            }
        }
    }
    if relocs.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let versions = table.versions(endian, data).ok().flatten();

    let name_slot = |got: u64| -> Option<(String, Option<String>)> {
        let r = relocs.get(&got)?;
        if r.r_type == R_IRELATIVE || r.sym == 0 {
            // A local ifunc: name it after its resolver.
            let resolver = r.addend as u64;
            let i = functions.partition_point(|f| f.addr < resolver);
            let f = functions.get(i).filter(|f| f.addr == resolver)?;
            return Some((f.name.to_string(), None));
        }
        dyn_name(endian, dynsym, versions.as_ref(), r.sym).map(|(n, v, _)| (n, v))
    };

    // PLT stubs.
    let by_name = |n: &str| sections.iter().find(|s| &*s.name == n && s.exec);
    let has_sec = by_name(".plt.sec").or(by_name(".plt.bnd")).is_some();
    let plt_sections: &[&str] = if has_sec {
        &[".plt.sec", ".plt.bnd", ".plt.got"]
    } else {
        &[".plt", ".plt.got"]
    };
    let mut plt = Vec::new();
    for s in sections
        .iter()
        .filter(|s| s.exec && plt_sections.contains(&&*s.name))
    {
        let stride = match s.entsize {
            8 | 16 => s.entsize,
            _ if &*s.name == ".plt.got" && !s.bytes.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) => 8,
            _ if &*s.name == ".plt.bnd" => 8,
            _ => 16,
        };
        for (k, entry) in s.bytes.chunks(stride as usize).enumerate() {
            let addr = s.addr.wrapping_add(k as u64 * stride);
            let Some(got) = x86::plt_jump_slot(entry, addr) else {
                continue;
            };
            let Some((name, version)) = name_slot(got) else {
                continue;
            };
            plt.push(PltEntry {
                addr,
                size: stride,
                got,
                name,
                version,
            });
        }
    }
    plt.sort_by_key(|p| p.addr);

    // GOT imports.
    let plt_slots: HashSet<u64> = plt.iter().map(|p| p.got).collect();
    let mut got_imports = Vec::new();
    let mut notype = Vec::new();
    for (&got, r) in &relocs {
        if r.r_type != R_GLOB_DAT || r.sym == 0 || plt_slots.contains(&got) {
            continue;
        }
        let Some((name, version, sym)) = dyn_name(endian, dynsym, versions.as_ref(), r.sym) else {
            continue;
        };
        if !sym.is_undefined(endian) {
            continue;
        }
        let st_type = sym.st_type();
        let import = GotImport { got, name, version };
        if st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC {
            got_imports.push(import);
        } else if st_type == elf::STT_NOTYPE {
            notype.push(import);
        }
    }
    if !notype.is_empty() {
        let wanted: HashSet<u64> = notype.iter().map(|g| g.got).collect();
        let mut called = HashSet::new();
        for s in sections.iter().filter(|s| s.exec) {
            x86::indirect_rip_targets(s.bytes, s.addr, |t| {
                if wanted.contains(&t) {
                    called.insert(t);
                }
            });
        }
        got_imports.extend(notype.into_iter().filter(|g| called.contains(&g.got)));
    }
    got_imports.sort_by_key(|g| g.got);
    Ok((plt, got_imports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(strip_version("memcpy@@GLIBC_2.14"), "memcpy");
        assert_eq!(strip_version("memcpy@GLIBC_2.2.5"), "memcpy");
        assert_eq!(strip_version("memcpy"), "memcpy");
        assert!(is_cold_part("foo.cold"));
        assert!(is_cold_part("foo.cold.3"));
        assert!(is_cold_part("_Z3barv.cold"));
        assert!(is_cold_part("foo.part.0.cold"));
        assert!(!is_cold_part("foo.part.0"));
        assert!(!is_cold_part("cold"));
        assert!(!is_cold_part("foo.coldish"));
        assert!(!is_cold_part("foo.isra.0"));
        assert!(is_cold_part(
            "_ZN8jobserver6Client12from_env_ext17h0123456789abcdefE.warm"
        ));
        assert!(!is_cold_part("foo.warmup"));
    }

    #[test]
    fn preference() {
        let mut v = [
            name_key(2, "__GI_strlen"),
            name_key(0, "__strlen"),
            name_key(0, "strlen"),
            name_key(1, "strlen_weak"),
            name_key(0, "strlen_long_name"),
        ];
        v.sort();
        assert_eq!(v[0].3, "strlen");
        assert_eq!(v[1].3, "strlen_long_name");
        assert_eq!(v[2].3, "__strlen");
        assert_eq!(v[3].3, "strlen_weak");
        assert_eq!(v[4].3, "__GI_strlen");
    }
}
