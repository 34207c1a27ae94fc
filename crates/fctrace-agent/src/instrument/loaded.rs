//! The objects the dynamic linker has loaded into the process (the
//! program's namespace only): their spans and segments, the module an
//! address lies in, the agent's own file, and their code read in place.

use crate::runtime::loader;
use std::ffi::CStr;

pub(super) struct Loaded {
    pub(super) path: String,
    pub(super) base: u64,
    pub(super) lo: u64,
    pub(super) hi: u64,
    /// PT_INTERP of the main program: the dynamic linker's path.
    pub(super) interp: Option<String>,
    /// The loaded segments' file contents: (runtime address, offset in
    /// the file, size in the file).
    pub(super) segs: Vec<(u64, u64, u64)>,
    /// The loaded notes (PT_NOTE): (runtime address, size, alignment).
    pub(super) notes: Vec<(u64, u64, u64)>,
}

pub(super) fn loaded_modules() -> Vec<Loaded> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the dynamic linker passes a valid info; data is our Vec.
        unsafe {
            let v = &mut *(data as *mut Vec<Loaded>);
            let info = &*info;
            let name = if info.dlpi_name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(info.dlpi_name)
                    .to_string_lossy()
                    .into_owned()
            };
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            let mut interp = None;
            let mut segs = Vec::new();
            let mut notes = Vec::new();
            for ph in phdrs {
                if ph.p_type == libc::PT_NOTE {
                    notes.push((info.dlpi_addr + ph.p_vaddr, ph.p_memsz, ph.p_align));
                }
                if ph.p_type == libc::PT_LOAD {
                    lo = lo.min(info.dlpi_addr + ph.p_vaddr);
                    hi = hi.max(info.dlpi_addr + ph.p_vaddr + ph.p_memsz);
                    segs.push((info.dlpi_addr + ph.p_vaddr, ph.p_offset, ph.p_filesz));
                }
                if ph.p_type == libc::PT_INTERP {
                    let p = (info.dlpi_addr + ph.p_vaddr) as *const libc::c_char;
                    interp = Some(CStr::from_ptr(p).to_string_lossy().into_owned());
                }
            }
            // Another namespace's objects (`dlmopen` loads its own copies
            // of libc and of the unwinder, which the agent does not
            // interpose) are not the program's: they stay untraced.
            if !loader::on_program_list(info.dlpi_addr) {
                return 0;
            }
            v.push(Loaded {
                path: name,
                base: info.dlpi_addr,
                lo,
                hi,
                interp,
                segs,
                notes,
            });
        }
        0
    }
    let mut v: Vec<Loaded> = Vec::new();
    // SAFETY: the callback only reads the info it is given.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut v as *mut Vec<Loaded> as *mut libc::c_void) };
    if let Some(m) = v.first_mut() {
        if m.path.is_empty() {
            m.path = std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
    }
    v
}

/// The path of the module that contains `addr`: the loaded module whose
/// segments span it (as `dladdr` finds it, without `dladdr`'s scan of the
/// module's whole symbol table, which on a library of 45,000 symbols costs
/// hundreds of microseconds per call). The spans are read once and again
/// only when an address lies in none of them (a library loaded since).
pub(super) fn module_of(addr: u64) -> Option<String> {
    let find = |v: &[(u64, u64, String)]| {
        v.iter()
            .find(|(lo, hi, _)| addr >= *lo && addr < *hi)
            .map(|(_, _, p)| p.clone())
    };
    let mut spans = SPANS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = find(&spans) {
        return Some(p);
    }
    *spans = loaded_modules()
        .into_iter()
        .filter(|m| m.lo < m.hi)
        .map(|m| (m.lo, m.hi, m.path))
        .collect();
    find(&spans)
}

/// The loaded modules' spans and paths, as `module_of` last read them.
static SPANS: std::sync::Mutex<Vec<(u64, u64, String)>> = std::sync::Mutex::new(Vec::new());

/// Forgets the spans (a library was loaded or unloaded: another may now
/// be where one was).
pub(super) fn forget_spans() {
    SPANS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The path of the module that contains `addr`, by `dladdr`.
fn module_of_dladdr(addr: u64) -> Option<String> {
    // SAFETY: dladdr only reads loader data; info is a valid out-parameter.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        Some(
            CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The path of the agent itself, looked up once.
pub(super) fn agent_module() -> Option<&'static str> {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| module_of_dladdr(agent_module as *const () as u64))
        .as_deref()
}

/// Whether `addr` lies in the agent (a function it interposes).
pub(super) fn in_agent(addr: u64) -> bool {
    agent_module().is_some() && module_of(addr).as_deref() == agent_module()
}

pub(super) fn read_code(addr: u64, len: usize) -> &'static [u8] {
    // SAFETY: callers pass ranges inside a module's mapped, executable
    // segments (checked against the module's PT_LOAD span).
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

pub(super) const PAGE: u64 = 4096;
