//! A module's file, read without touching its loaded code: its analysis
//! (functions, PLT entries, GOT imports) from a read-only mapping, and its
//! code for planning patches, a window at a time.

use super::loaded::{read_code, Loaded, PAGE};
use fctrace_symbols::{ElfInfo, FuncRef};

/// A module's code read from its file, a window at a time (a private
/// read-only mapping of 256 KiB of the file, unmapped when the next one is
/// made), for planning its patches: reading it through the loaded mapping
/// instead would map every code page of the module into the process for
/// the rest of the run (each read fault maps up to 16 pages around it,
/// whether the program runs that code or not), which for libLLVM is 50 MB
/// more resident memory. Only the pages the patches write to are touched
/// in the loaded mapping.
pub(super) struct CodeWindow {
    file: std::fs::File,
    /// The module's loaded segments: (runtime address, file offset, size).
    segs: Vec<(u64, u64, u64)>,
    /// The current window's mapping (null: none yet) and its length.
    map: *mut libc::c_void,
    len: usize,
    /// The runtime address of the window's first byte.
    at: u64,
}

/// Bytes mapped in a window at a time.
const WINDOW: u64 = 1 << 18;

impl CodeWindow {
    /// The window onto the file of `m`, if that file is the one mapped:
    /// the same device and inode, else (overlayfs shows the layer's file
    /// in /proc/self/maps, not the one a path opens) the same build-id in
    /// the file (`build_id`, from its analysis) and in the loaded notes. A
    /// library replaced on disk since it was loaded is read through its
    /// mapping instead.
    pub(super) fn open(m: &Loaded, build_id: Option<&[u8]>) -> Option<CodeWindow> {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::File::open(&m.path).ok()?;
        let meta = file.metadata().ok()?;
        let same_file = crate::runtime::maps::mappings()
            .into_iter()
            .find(|x| x.start >= m.lo && x.start < m.hi && x.path.is_some())
            .is_some_and(|x| x.dev == meta.dev() && x.inode == meta.ino());
        if !same_file && (build_id.is_none() || loaded_build_id(m) != build_id) {
            return None;
        }
        Some(CodeWindow {
            file,
            segs: m.segs.clone(),
            map: std::ptr::null_mut(),
            len: 0,
            at: 0,
        })
    }

    /// The bytes of `[lo, hi)` (runtime addresses), or `None` if they do
    /// not lie in one segment's file contents or cannot be mapped.
    fn get(&mut self, lo: u64, hi: u64) -> Option<&[u8]> {
        use std::os::fd::AsRawFd;
        if self.map.is_null() || lo < self.at || hi > self.at + self.len as u64 {
            let &(seg, off, size) = self
                .segs
                .iter()
                .find(|&&(a, _, n)| lo >= a && hi <= a + n)?;
            self.unmap();
            // A segment's address and file offset are equal modulo the
            // page size: the window starts on a page in both.
            let start = lo & !(PAGE - 1);
            let end = (start + WINDOW).max(hi).min(seg + size);
            let len = (end - start) as usize;
            // SAFETY: a new private read-only mapping of a file we opened,
            // at a page-aligned offset (start - seg + off >= 0: off is at
            // least seg's offset within its page).
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_POPULATE,
                    self.file.as_raw_fd(),
                    (off + start - seg) as libc::off_t,
                )
            };
            if map == libc::MAP_FAILED {
                return None;
            }
            self.map = map;
            self.len = len;
            self.at = start;
        }
        let k = (lo - self.at) as usize;
        // SAFETY: [lo, hi) lies in the window's mapping, which lives until
        // the next call (which needs `&mut self`, so this borrow has ended).
        Some(unsafe {
            std::slice::from_raw_parts((self.map as *const u8).add(k), (hi - lo) as usize)
        })
    }

    fn unmap(&mut self) {
        if !self.map.is_null() {
            // SAFETY: our own mapping, no longer borrowed (`&mut self`).
            unsafe { libc::munmap(self.map, self.len) };
            self.map = std::ptr::null_mut();
        }
    }
}

impl Drop for CodeWindow {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// The build-id in the loaded notes of `m` (`NT_GNU_BUILD_ID`).
pub(super) fn loaded_build_id(m: &Loaded) -> Option<&'static [u8]> {
    for &(at, size, align) in &m.notes {
        if at < m.lo || at + size > m.hi {
            continue;
        }
        let align = if align == 8 { 8 } else { 4 };
        let b = read_code(at, size as usize);
        let mut k = 0usize;
        while k + 12 <= b.len() {
            let word = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap()) as usize;
            let (namesz, descsz, kind) = (word(k), word(k + 4), word(k + 8));
            let name = k + 12;
            let desc = name + namesz.next_multiple_of(align);
            let next = desc + descsz.next_multiple_of(align);
            if next > b.len() || desc + descsz > b.len() {
                break;
            }
            if kind == 3 && b[name..name + namesz].starts_with(b"GNU\0") {
                return Some(&b[desc..desc + descsz]);
            }
            k = next;
        }
    }
    None
}

/// The code of `[lo, hi)` (runtime addresses): from the window when it
/// has it, else from the loaded mapping.
pub(super) fn code_of(win: &mut Option<CodeWindow>, lo: u64, hi: u64) -> &[u8] {
    match win {
        Some(w) => match w.get(lo, hi) {
            Some(b) => b,
            None => read_code(lo, (hi - lo) as usize),
        },
        None => read_code(lo, (hi - lo) as usize),
    }
}

/// A file mapped read-only (a module's symbol tables are not among its
/// loaded segments); unmapped on drop.
pub(super) struct MappedFile {
    at: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    pub(super) fn open(path: &str) -> Result<MappedFile, String> {
        MappedFile::map(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => format!("{path}: empty file"),
            _ => format!("cannot read {path}: {e}"),
        })
    }

    /// [`MappedFile::open`] without a message: formatting an error
    /// (`strerror`, gettext) calls the program's `free`, which a caller
    /// expecting a failure (the start-up cache's lookups) must not do.
    pub(super) fn map(path: &str) -> std::io::Result<MappedFile> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        // SAFETY: a new private read-only mapping of a file we opened.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedFile { at, len })
    }

    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer borrowed.
        unsafe { libc::munmap(self.at, self.len) };
    }
}

/// Whether the module at `path` is glibc's libc. Its functions are those
/// its symbols name, not those its call frame information adds when it
/// is stripped: the agent tells its special functions (`setjmp` and
/// `longjmp`, context switches, the unwinder's helpers, `clone`'s child,
/// program start) by name, and a stripped libc's internal ones have
/// none (with them, `-l` aborted programs: "a traced function returned
/// through a stack slot the agent does not know").
fn is_libc(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.starts_with("libc.so") || file.starts_with("libc-")
}

/// Runs `f` on the analysis of the ELF file at `path` (its functions'
/// names borrowed from the mapped file). A stripped file's functions are
/// named by its MiniDebugInfo (`.gnu_debugdata`) when it has one. With
/// `use_debug_file`, a stripped file's functions come from its separate
/// debug file when one is installed: for the program only (a library's debug file, libc's from
/// libc6-dbg, lists internal functions the engine cannot patch yet; see
/// docs/engine.md, "Known limits"). Without `imports`, the file's PLT
/// entries and GOT imports are not looked for (a library instrumented with
/// -l needs only its functions; finding its imports reads all of its
/// relocations and may scan all of its code).
pub(crate) fn with_analysis<R>(
    path: &str,
    use_debug_file: bool,
    imports: bool,
    f: impl FnOnce(&ElfInfo, &[FuncRef]) -> Result<R, String>,
) -> Result<R, String> {
    with_analysis_of(path, use_debug_file, imports, true, f)
}

/// [`with_analysis`]; without `unnamed`, a stripped file's functions no
/// symbol names are not looked for (its call frame information is not
/// read): for callers that want its imports or named functions only.
pub(crate) fn with_analysis_of<R>(
    path: &str,
    use_debug_file: bool,
    imports: bool,
    unnamed: bool,
    f: impl FnOnce(&ElfInfo, &[FuncRef]) -> Result<R, String>,
) -> Result<R, String> {
    let file = MappedFile::open(path)?;
    let debug = use_debug_file
        .then(|| fctrace_symbols::debugfile::find_symbols(std::path::Path::new(path), file.bytes()))
        .flatten()
        .and_then(|p| MappedFile::open(&p.to_string_lossy()).ok());
    // Else Fedora's MiniDebugInfo, when the file has one.
    let mini = debug
        .is_none()
        .then(|| fctrace_symbols::minidebug::symbols(file.bytes()))
        .flatten();
    let debug = debug.as_ref().map(|d| d.bytes()).or(mini.as_deref());
    let unnamed = unnamed && !is_libc(path);
    let (info, funcs) = if imports && unnamed {
        fctrace_symbols::analyze_borrowed_with_debug(file.bytes(), debug)
    } else if imports {
        fctrace_symbols::analyze_borrowed_named_with_debug(file.bytes(), debug)
    } else if !unnamed {
        fctrace_symbols::analyze_named_functions_with_debug(file.bytes(), debug)
    } else {
        fctrace_symbols::analyze_functions_with_debug(file.bytes(), debug)
    }
    .map_err(|e| e.to_string())?;
    f(&info, &funcs)
}
