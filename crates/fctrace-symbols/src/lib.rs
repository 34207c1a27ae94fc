//! fctrace's view of an ELF object: which functions exist, where the PLT
//! stubs and GOT imports are, and how to print names.
//!
//! Used both by the in-process agent (built with `default-features = false`,
//! which drops demangling) and by the CLI (pre-flight checks, reports).
//! Everything here is a pure function of the file's bytes; nothing is mapped,
//! relocated or executed. Malformed input gives an error, never a panic.
//!
//! # Files
//!
//! [`analyze`] accepts any linked ELF object (`ET_EXEC`, `ET_DYN`) of any
//! machine; it rejects non-ELF data, object files and core dumps. `kind` is
//! `Executable` for `ET_EXEC`, `PieExecutable` for `ET_DYN` with `DF_1_PIE`
//! (or, from older linkers, `PT_INTERP` without `DT_SONAME`), else
//! `SharedObject` (so a runnable `libc.so.6` is a shared object). `is_static`:
//! an executable without `PT_INTERP` (static, or static-pie). Whether fctrace
//! can trace the program is [`ElfInfo::check_traceable`] (x86_64, dynamically
//! linked); stripped (`!has_symtab`) is for the caller to judge.
//!
//! # Functions
//!
//! * Candidates are `STT_FUNC` and `STT_GNU_IFUNC` symbols that are defined,
//!   have a non-zero value and lie in an allocated, executable section. They
//!   come from the union of `.symtab` and `.dynsym` (a partial `.symtab` is
//!   completed by `.dynsym`); a stored `@VERSION` / `@@VERSION` suffix is
//!   stripped from the name.
//! * Split-off parts, entered by a jump from their function (GCC's and LLVM's
//!   cold parts `foo.cold`, `foo.cold.3`, `_Z3barv.cold`; BOLT's `foo.warm`
//!   and `foo.cold`), are not functions and are dropped. Other clone
//!   suffixes (`.part.N`, `.isra.N`,
//!   `.constprop.N`, `.lto_priv.N`, `.localalias`, ...) are kept.
//! * All names at one address make one [`FuncSym`]. The preferred `name` is the
//!   one with the best binding (global with default/protected visibility, then
//!   weak, then anything else), then the fewest leading underscores, then the
//!   shortest, then alphabetical; the rest are `aliases`. The size is the
//!   largest non-zero `st_size` among them. `ifunc` is set if any of them is
//!   `STT_GNU_IFUNC` (the address is then a resolver, not the function).
//! * A file without `.symtab` (stripped, and no debug file's given) also
//!   gets the functions its call frame information describes (`.eh_frame`:
//!   see the `entries` module), unnamed (an empty name; fctrace calls them
//!   `file+0xADDR`), sized by their FDE; the FDEs that are no function entry
//!   (split parts, PLT stubs, program and thread starts) are in
//!   [`ElfInfo::left_out`] with the reason. A `.gnu_debugdata` section
//!   (MiniDebugInfo) is decompressed by [`minidebug::symbols`], to be given
//!   as the debug file.
//! * `_start`, `_init`, `_fini` etc. are reported like anything else.
//! * `pad_end`: starting at `addr + size`, the bytes that are alignment
//!   padding (`int3`, `nop`, `66 90`, `0f 1f /0` multi-byte nops with any
//!   `66`/`2e` prefixes) up to the next symbol of any kind in the section or
//!   the section end, stopping at the first byte that is not padding. Without
//!   a `.symtab` (so unnamed local functions may follow) the scan also stops
//!   at the next 16-byte boundary. Zero-size functions get `pad_end == addr`.
//!   Note: with `-fpatchable-function-entry=N,M` (M > 0) the M nops before a
//!   function belong to it but count as padding of the function before.
//!
//! # PLT and GOT imports (x86_64 only)
//!
//! PLT entries are decoded from `.plt.sec` / `.plt.bnd` if present (then the
//! `.plt` entries are only the lazy-binding push/jmp halves and are not
//! listed), else from `.plt`, plus `.plt.got`. An entry is
//! `[endbr64] [bnd] jmp *disp32(%rip)`; any other entry (the PLT0 resolver
//! stub, IBT lazy stubs) is skipped. The GOT slot is mapped to the
//! `R_X86_64_JUMP_SLOT` / `R_X86_64_GLOB_DAT` relocation at that address to
//! name the entry; `R_X86_64_IRELATIVE` slots (local ifuncs called through
//! the PLT) are named after the resolver function.
//!
//! `got_imports` are `R_X86_64_GLOB_DAT` slots of undefined `STT_FUNC`
//! symbols (and undefined `STT_NOTYPE` symbols whose slot is the operand of a
//! `call/jmp *disp32(%rip)` somewhere in the code) that no PLT entry jumps
//! through: the functions called as `call *f@GOTPCREL(%rip)` (`-fno-plt`,
//! rustc's default). Some of these slots are only loaded as function
//! pointers (crtbegin's `__cxa_finalize` check), not called.
//!
//! # Markers
//!
//! `markers` names the compiler instrumentation a binary carries: a
//! reference to (or, in an executable, a definition of) `mcount`/`_mcount`
//! (`-pg`), `__fentry__` (`-pg -mfentry`), `__cyg_profile_func_enter`
//! (`-finstrument-functions`), and a `__patchable_function_entries` section
//! (`-fpatchable-function-entry`). Detection only.

#![forbid(unsafe_code)]

pub mod debugfile;
pub mod dwarf;
mod elf;
mod entries;
mod golang;
mod info;
pub mod minidebug;
pub use info::{ElfInfo, ElfKind, FuncRef, FuncSym, GotImport, LeftOut, PltEntry, SymbolError};
pub mod loader;
mod rawelf;
pub mod sanitizer;
pub mod sdt;
pub mod srcline;
pub mod startcache;
pub use golang::GoCode;
pub mod unwind;
mod x86;
pub use x86::{branch_patterns, far_patterns, near_patterns, rip_loads, words_in, Pattern};

#[cfg(feature = "demangle")]
mod demangle;
#[cfg(feature = "demangle")]
pub use demangle::{demangle, demangle_in_process, demangle_simple};

use std::path::Path;

/// Analyze the bytes of an ELF file.
///
/// Fails only if the data is not a linked ELF object (executable or shared
/// object) or is malformed. Other architectures are analyzed too (no PLT
/// decoding); check [`ElfInfo::is_x86_64`] or [`ElfInfo::check_traceable`].
pub fn analyze(data: &[u8]) -> Result<ElfInfo, SymbolError> {
    elf::analyze(data, true).map(owned)
}

/// Like [`analyze`], but the functions are returned apart, borrowing their
/// names from `data`, without their aliases ([`ElfInfo::functions`] is left
/// empty). Same order as [`ElfInfo::functions`].
pub fn analyze_borrowed(data: &[u8]) -> Result<(ElfInfo, Vec<FuncRef<'_>>), SymbolError> {
    elf::analyze(data, true).map(|a| (a.info, a.functions))
}

/// Length of the run of alignment padding (`int3`, `nop` forms) at the
/// start of `b`, as `pad_end` counts it.
pub fn padding_run(b: &[u8]) -> usize {
    x86::padding_run(b)
}

/// [`analyze_borrowed`] of a file whose separate debug file (see
/// [`debugfile`]) holds `debug`: a stripped file's functions and names are
/// those of the debug file's `.symtab` (its code, PLT and GOT are the
/// file's own). `debug` is not used when the file has a `.symtab`.
pub fn analyze_borrowed_with_debug<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
) -> Result<(ElfInfo, Vec<FuncRef<'data>>), SymbolError> {
    elf::analyze_with(data, debug, true).map(|a| (a.info, a.functions))
}

/// [`analyze_borrowed_with_debug`] without reading any of the file's
/// code: `plt` and `got_imports` are left empty (no relocation is read
/// either) and each function's `pad_end` is where its padding would be
/// looked for up to (see [`FuncRef::pad_end`]). For a library of 100 MB whose imports are not
/// wanted and whose code the caller reads its own way (the agent
/// instrumenting it with `-l`).
pub fn analyze_functions_with_debug<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
) -> Result<(ElfInfo, Vec<FuncRef<'data>>), SymbolError> {
    elf::analyze_opts(data, debug, true, false, true).map(|a| (a.info, a.functions))
}

/// [`analyze_borrowed_with_debug`] without the functions no symbol names
/// (a stripped file's call frame information is not read): for callers
/// that need its imports or named functions only.
pub fn analyze_borrowed_named_with_debug<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
) -> Result<(ElfInfo, Vec<FuncRef<'data>>), SymbolError> {
    elf::analyze_opts(data, debug, true, true, false).map(|a| (a.info, a.functions))
}

/// [`analyze_functions_with_debug`] without the functions no symbol
/// names: a stripped file's call frame information is not read (for
/// glibc's libc, whose internal functions the agent recognises by name
/// only).
pub fn analyze_named_functions_with_debug<'data>(
    data: &'data [u8],
    debug: Option<&'data [u8]>,
) -> Result<(ElfInfo, Vec<FuncRef<'data>>), SymbolError> {
    elf::analyze_opts(data, debug, true, false, false).map(|a| (a.info, a.functions))
}

/// The owned form of an analysis: functions in [`ElfInfo::functions`].
fn owned(a: elf::Analysis) -> ElfInfo {
    let mut info = a.info;
    let mut aliases = a.aliases.into_iter().peekable();
    info.functions = a
        .functions
        .into_iter()
        .enumerate()
        .map(|(k, f)| {
            let mut names = Vec::new();
            while let Some((_, name)) = aliases.next_if(|(i, _)| *i == k) {
                names.push(name.into_owned());
            }
            FuncSym {
                name: f.name.into_owned(),
                aliases: names,
                addr: f.addr,
                size: f.size,
                pad_end: f.pad_end,
                global: f.global,
                ifunc: f.ifunc,
                section: a
                    .section_names
                    .get(f.section as usize)
                    .cloned()
                    .unwrap_or_else(|| std::sync::Arc::from("")),
            }
        })
        .collect();
    info
}

/// Read and analyze an ELF file, with user-facing errors that name the
/// path. The file alone: a stripped file's debug file is for
/// [`analyze_borrowed_with_debug`].
pub fn read_file(path: &Path) -> Result<ElfInfo, SymbolError> {
    read(path, true)
}

/// Like [`read_file`], reading only the headers (cheap on huge programs):
/// [`ElfInfo::functions`], `plt`, `got_imports` and `markers` are empty;
/// enough for [`ElfInfo::check_traceable`] and [`ElfInfo::has_symtab`].
pub fn read_headers(path: &Path) -> Result<ElfInfo, SymbolError> {
    read(path, false)
}

/// The bytes of the file at `path`: all of them, or with `full` false
/// only what a headers-only analysis reads (see [`read_headers_sparse`]).
/// Errors name the path.
fn read_bytes(path: &Path, full: bool) -> Result<Vec<u8>, SymbolError> {
    let shown = path.display();
    // Don't read from a FIFO or device.
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.is_dir() {
            return Err(SymbolError(format!("{shown} is a directory")));
        }
        if !meta.is_file() {
            return Err(SymbolError(format!("{shown} is not a regular file")));
        }
    }
    let read_err = |e: std::io::Error| {
        SymbolError(match e.kind() {
            std::io::ErrorKind::NotFound => format!("program not found: {shown}"),
            std::io::ErrorKind::PermissionDenied => {
                format!("cannot read {shown}: permission denied")
            }
            _ => format!("cannot read {shown}: {e}"),
        })
    };
    // The headers of a big file are read alone (what they point to stays
    // zero, never touched): a program may be hundreds of megabytes.
    let sparse = if full {
        None
    } else {
        let file = std::fs::File::open(path).map_err(read_err)?;
        let len = file.metadata().map_err(read_err)?.len();
        read_headers_sparse(&file, len, SPARSE_MIN).map_err(read_err)?
    };
    match sparse {
        Some(data) => Ok(data),
        None => std::fs::read(path).map_err(read_err),
    }
}

fn read(path: &Path, full: bool) -> Result<ElfInfo, SymbolError> {
    let shown = path.display();
    let data = read_bytes(path, full)?;
    if data.starts_with(b"#!") {
        return Err(SymbolError(format!(
            "{shown}: not an ELF file (a #! script)"
        )));
    }
    let analysis = elf::analyze(&data, full).map(owned);
    if analysis.is_err() && !full && data.len() >= SPARSE_MIN as usize {
        // Whatever the headers-only read missed, the error is the one a
        // full read gives.
        let data = read_bytes(path, true)?;
        return elf::analyze(&data, full)
            .map(owned)
            .map_err(|e| SymbolError(format!("{shown}: {e}")));
    }
    analysis.map_err(|e| SymbolError(format!("{shown}: {e}")))
}

/// Files from this size on are read headers-only by [`read_headers`].
const SPARSE_MIN: u64 = 1 << 20;

/// The file's bytes as a buffer of its length where only what a
/// headers-only analysis looks at is read: the ELF header, the program
/// headers and the interpreter, dynamic and note segments they point to,
/// the section headers, the section name table and note sections. The rest
/// stays zero (allocated, never touched). `None` when the file is smaller
/// than `min`, or is not an ELF file whose headers can be found this way:
/// then it is read whole.
fn read_headers_sparse(
    file: &std::fs::File,
    len: u64,
    min: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    if len < min || len > usize::MAX as u64 {
        return Ok(None);
    }
    let mut data = vec![0u8; len as usize];
    // Reads [off, off + n) if it lies in the file.
    let fill = |data: &mut Vec<u8>, off: u64, n: u64| -> std::io::Result<bool> {
        let Some(end) = off.checked_add(n).filter(|&e| e <= len) else {
            return Ok(false);
        };
        file.read_exact_at(&mut data[off as usize..end as usize], off)?;
        Ok(true)
    };
    if !fill(&mut data, 0, 64)? || !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let is64 = match data[4] {
        1 => false,
        2 => true,
        _ => return Ok(None),
    };
    let le = match data[5] {
        1 => true,
        2 => false,
        _ => return Ok(None),
    };
    let int = |d: &[u8], off: usize, size: usize| -> u64 {
        let b = &d[off..off + size];
        let mut v = 0u64;
        for k in 0..size {
            let byte = if le { b[size - 1 - k] } else { b[k] };
            v = (v << 8) | u64::from(byte);
        }
        v
    };
    // (offset, size) of the header fields, by class.
    let w = if is64 { 8 } else { 4 };
    let (phoff, shoff) = if is64 {
        (int(&data, 32, 8), int(&data, 40, 8))
    } else {
        (int(&data, 28, 4), int(&data, 32, 4))
    };
    let base = if is64 { 54 } else { 42 };
    let phentsize = int(&data, base, 2);
    let phnum = int(&data, base + 2, 2);
    let shentsize = int(&data, base + 4, 2);
    let shnum = int(&data, base + 6, 2);
    let shstrndx = int(&data, base + 8, 2);
    // Extended numbering (counts in the first section header): read whole.
    if shnum == 0 || shstrndx == 0xffff || phnum == 0xffff {
        return Ok(None);
    }
    if !fill(&mut data, phoff, phentsize * phnum)? || !fill(&mut data, shoff, shentsize * shnum)? {
        return Ok(None);
    }
    const MAX_PART: u64 = 1 << 20;
    for k in 0..phnum {
        let ph = (phoff + k * phentsize) as usize;
        let p_type = int(&data, ph, 4);
        let (off, size) = if is64 {
            (int(&data, ph + 8, 8), int(&data, ph + 32, 8))
        } else {
            (int(&data, ph + 4, 4), int(&data, ph + 16, 4))
        };
        // PT_DYNAMIC, PT_INTERP, PT_NOTE
        if matches!(p_type, 2..=4) && size <= MAX_PART && !fill(&mut data, off, size)? {
            return Ok(None);
        }
    }
    for k in 0..shnum {
        let sh = (shoff + k * shentsize) as usize;
        let sh_type = int(&data, sh + 4, 4);
        let (off, size) = (int(&data, sh + 8 + 2 * w, w), int(&data, sh + 8 + 3 * w, w));
        // The section names, SHT_DYNAMIC, SHT_NOTE (SHT_NOBITS has none).
        let wanted = k == shstrndx || sh_type == 6 || sh_type == 7;
        if wanted && sh_type != 8 && size <= MAX_PART && !fill(&mut data, off, size)? {
            return Ok(None);
        }
    }
    // The `.gnu_debuglink` section (a file name and a CRC), found by name
    // once the section name table is read.
    let names = (shstrndx < shnum).then(|| {
        let sh = (shoff + shstrndx * shentsize) as usize;
        (int(&data, sh + 8 + 2 * w, w), int(&data, sh + 8 + 3 * w, w))
    });
    if let Some((names_off, names_size)) = names.filter(|&(_, n)| n <= MAX_PART) {
        const LINK: &[u8] = b".gnu_debuglink\0";
        for k in 0..shnum {
            let sh = (shoff + k * shentsize) as usize;
            let name = int(&data, sh, 4);
            let (off, size) = (int(&data, sh + 8 + 2 * w, w), int(&data, sh + 8 + 3 * w, w));
            let at = names_off.saturating_add(name);
            let is_link = at.saturating_add(LINK.len() as u64) <= names_off + names_size
                && at.saturating_add(LINK.len() as u64) <= len
                && &data[at as usize..at as usize + LINK.len()] == LINK;
            if is_link && size <= 4096 && !fill(&mut data, off, size)? {
                return Ok(None);
            }
        }
    }
    Ok(Some(data))
}

/// The libraries an ELF file names as needed (its `DT_NEEDED`, in order);
/// none for a file that is not a dynamically linked ELF file.
pub fn needed_libraries(data: &[u8]) -> Vec<String> {
    use object::read::elf::ElfFile64;
    let Ok(f) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(table) = f.elf_section_table().dynamic_table(f.endian(), data) else {
        return Vec::new();
    };
    table
        .iter()
        .filter(|d| d.tag == object::elf::DT_NEEDED)
        .filter_map(|d| table.string(d).ok())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A headers-only read of a file gives what a full read does.
    #[test]
    fn sparse_headers_match_full_read() {
        let exe = std::env::current_exe().unwrap();
        let mut paths = vec![exe];
        for lib in ["/lib/x86_64-linux-gnu/libc.so.6", "/bin/sh", "/usr/bin/env"] {
            paths.push(lib.into());
        }
        let mut checked = 0;
        for path in paths {
            let Ok(data) = std::fs::read(&path) else {
                continue;
            };
            let file = std::fs::File::open(&path).unwrap();
            let sparse = read_headers_sparse(&file, data.len() as u64, 0)
                .unwrap()
                .expect("an ELF file");
            assert_eq!(sparse.len(), data.len());
            let a = elf::analyze(&sparse, false).map(owned).unwrap();
            let b = elf::analyze(&data, false).map(owned).unwrap();
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{}", path.display());
            checked += 1;
        }
        assert!(checked >= 2);
    }
}
