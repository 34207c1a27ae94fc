//! Finds the loaded modules and their functions, patches them, and writes
//! the session's symbol table.

use crate::arch::x86_64::arena::Arena;
use crate::arch::x86_64::codegen::{self, Common, Params};
use crate::arch::x86_64::patch::{self, Mode, Plan};
use crate::runtime::shm::Shm;
use crate::runtime::{journal, loader};
use fctrace_format::symtab::{self, FuncKind, FuncStatus, FunctionLine, Module};
use fctrace_symbols::{ElfInfo, FuncRef};
use std::ffi::CStr;
use std::io::Write;

struct Loaded {
    path: String,
    base: u64,
    lo: u64,
    hi: u64,
    /// PT_INTERP of the main program: the dynamic linker's path.
    interp: Option<String>,
    /// The loaded segments' file contents: (runtime address, offset in
    /// the file, size in the file).
    segs: Vec<(u64, u64, u64)>,
    /// The loaded notes (PT_NOTE): (runtime address, size, alignment).
    notes: Vec<(u64, u64, u64)>,
}

/// Functions traced entry-only (their call is recorded, their return
/// address is left alone). Those that return twice: setjmp would save the
/// stub's address, a vfork child would pop the parent's shadow entry. And
/// `__libc_start_main`, which never returns: it would hold every trace
/// open to the end.
const RETURNS_TWICE: &[&str] = &[
    "__libc_start_main",
    "setjmp",
    "_setjmp",
    "__setjmp",
    "sigsetjmp",
    "__sigsetjmp",
    "savectx",
    "vfork",
    "__vfork",
    "getcontext",
    "__getcontext",
    "swapcontext",
    "__swapcontext",
    "setcontext",
    "__setcontext",
];

/// Context switches the agent interposes (`context`): the program's call
/// through its PLT or GOT reaches the agent's wrapper, which returns once
/// per call, so that call is traced with its exit (coroutines' calls nest
/// under it). Inside libc (with -l) they are left alone: the wrapper calls
/// them, and the program's call is the one recorded.
const WRAPPED_SWITCHES: &[&str] = &["swapcontext"];

/// libc's own definition of a context switch the agent wraps (or its
/// internal alias): the agent's wrapper calls it, the program's call is
/// what is recorded (`setcontext` too, entry-only at the program's call;
/// glibc's `__start_context` also calls it directly, unrecorded then).
fn is_wrapped_switch(name: &str) -> bool {
    ["swapcontext", "setcontext"].contains(&name.trim_start_matches('_'))
}

/// The mode of a call of `name` from the program (PLT or GOT import)
/// into the library at `lib`. Calls into a sanitizer runtime (its
/// interceptors, `malloc` among them, and the hooks the compiler inserts:
/// `__tsan_func_entry`, `__asan_report_load4`...) are entry-only: each
/// reads its caller's return address (`__builtin_return_address(0)`) for
/// the stacks of its reports, which must be the program's, not a stub's.
fn import_mode(name: &str, lib: &str) -> Mode {
    if (RETURNS_TWICE.contains(&name) && !WRAPPED_SWITCHES.contains(&name))
        || fctrace_symbols::sanitizer::is_runtime(lib.as_bytes())
    {
        Mode::EntryOnly
    } else {
        Mode::Traced
    }
}

/// gprof's hooks (`-pg`, `-pg -mfentry`): the compiler's call at every
/// function's entry, not the program's; the agent defines them
/// (`interpose::profiling`). The program's imports of them are not traced.
const PROFILING_HOOKS: &[&str] = &["mcount", "_mcount", "__fentry__"];

const PROFILING_HOOK: &str = "gprof's hook (-pg): the compiler's call at every entry";

/// Functions entered by something other than a call (a return, a signal
/// frame, the kernel): patching them would take over a slot that holds no
/// return address.
const NOT_CALLED: &[&str] = &[
    "__restore_rt",
    "__start_context",
    "_start",
    "_dl_start",
    "_dl_start_user",
];

/// V8's builtins (`Builtins_*`), embedded in node or any other program or
/// library that embeds V8: a module that has them is not instrumented.
/// They are generated code with V8's own calling convention, entered by
/// jumps (the interpreter's bytecode handlers dispatch to each other), and
/// V8's stack walker reads the return address of every C++ function they
/// call (runtime functions, C++ builtins, API callbacks) to find its
/// caller: with the stub's address there instead, `node -e 1` died in the
/// agent, and with the builtins left alone `JSON.parse` of bad input died
/// in V8 ("Check failed: maybe_code.has_value()").
fn is_v8_builtin(name: &str) -> bool {
    name.starts_with("Builtins_")
}

/// Why the module at `path` is not instrumented, if it embeds V8.
fn embeds_v8(path: &str, funcs: &[FuncRef]) -> Option<String> {
    funcs.iter().any(|f| is_v8_builtin(&f.name)).then(|| {
        format!(
            "{path} embeds V8, whose stack walker reads the return address of every C++ \
             function its generated code calls (fctrace's stubs would be there instead): \
             its functions and its calls into libraries are not traced"
        )
    })
}

/// The JVM (HotSpot's `libjvm.so`): its frame walker (`frame::sender`,
/// used by the garbage collector, exceptions and deoptimisation) reads the
/// return address of the VM's own C++ frames called from Java code, where
/// the entry stub puts its own; with `-l`, `java Hello` died in
/// `frame::sender` (SIGSEGV, the stubs' addresses listed as native frames
/// in its hs_err file).
fn is_jvm(path: &str) -> bool {
    path.rsplit('/').next() == Some("libjvm.so")
}

/// Why the module `m` is not instrumented at all, if it is not: it embeds
/// V8, it is the JVM, or it holds Go code whose range is not known.
fn skipped(m: &Loaded, info: &ElfInfo, funcs: &[FuncRef]) -> Option<String> {
    let path = &m.path;
    if is_jvm(path) {
        return Some(format!(
            "{path} (the JVM) is not traced: its frame walker reads the return addresses of \
             the VM's own functions called from Java code (fctrace's stubs would be there \
             instead); the other libraries are traced"
        ));
    }
    if info.go.as_ref().is_some_and(|g| go_text(m, g).is_none()) {
        return Some(format!(
            "{path} holds Go code (Go's stack copier and garbage collector read every \
             return address on a goroutine's stack) and where it lies was not found: \
             the module is not traced"
        ));
    }
    embeds_v8(path, funcs)
}

/// The runtime address range of a module's Go code, if it lies in the
/// module's loaded segments.
fn go_text(m: &Loaded, go: &fctrace_symbols::GoCode) -> Option<std::ops::Range<u64>> {
    let t = go.text.as_ref()?;
    let r = m.base + t.start..m.base + t.end;
    (r.start >= m.lo && r.end <= m.hi).then_some(r)
}

/// Why a Go function is not instrumented (and the message that says so,
/// once per module).
const GO_REASON: &str =
    "Go code: Go's stack copier and garbage collector read its return addresses";

fn go_note(path: &str, r: &std::ops::Range<u64>) -> String {
    format!(
        "{path}: its Go code ({:#x}-{:#x}) is not traced: Go's stack copier and garbage \
         collector read every return address on a goroutine's stack (fctrace's stubs would \
         be there instead); its C functions and their calls into libraries are traced",
        r.start, r.end
    )
}

/// With -l, a library's stubs before they are applied (None: the library
/// is not instrumented, said in a note).
#[allow(clippy::type_complexity)]
fn prepare_lib(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    funcs: &[FuncRef],
) -> Result<Option<(Vec<u64>, Result<Stubs, String>)>, String> {
    if let Some(why) = skipped(m, info, funcs) {
        crate::runtime::log::note(&why);
        return Ok(None);
    }
    instrument_module(s, m, info, funcs, false, true).map(Some)
}

/// Applies what `prepare_lib` prepared; returns the traced entries.
#[allow(clippy::type_complexity)]
fn finish_lib(p: Option<(Vec<u64>, Result<Stubs, String>)>) -> Result<Vec<u64>, String> {
    p.map_or(Ok(Vec::new()), finish_module)
}

fn loaded_modules() -> Vec<Loaded> {
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
fn module_of(addr: u64) -> Option<String> {
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
fn forget_spans() {
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
fn agent_module() -> Option<&'static str> {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| module_of_dladdr(agent_module as *const () as u64))
        .as_deref()
}

/// Whether `addr` lies in the agent (a function it interposes).
fn in_agent(addr: u64) -> bool {
    agent_module().is_some() && module_of(addr).as_deref() == agent_module()
}

/// The functions the agent defines in place of the C library's and the
/// unwinder's (see `interpose`, `process`, `unwind`, `context`).
const INTERPOSED: &[&str] = &[
    "pthread_create",
    "pthread_exit",
    "pthread_cancel",
    "vfork",
    "execve",
    "execv",
    "execvp",
    "execvpe",
    "fexecve",
    "execveat",
    "execl",
    "execlp",
    "execle",
    "posix_spawn",
    "posix_spawnp",
    "system",
    "popen",
    "pclose",
    "swapcontext",
    "setcontext",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "_Unwind_RaiseException",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_Resume",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
    "backtrace",
    "__cxa_begin_catch",
    "mcount",
    "_mcount",
    "__fentry__",
];

/// The agent's other interposers (`interpose::signal`).
const INTERPOSED_SIGNALS: &[&str] = &[
    "signal",
    "bsd_signal",
    "ssignal",
    "sysv_signal",
    "__sysv_signal",
    "sigset",
    "sigaction",
    "__sigaction",
    "sigprocmask",
    "pthread_sigmask",
];

/// The real functions the agent's interposers forward to (sorted): with
/// -l, patched in their libraries, they are entered untraced when the
/// agent forwards a call the program made through its traced import
/// (`runtime::real::forward_to`), so that the call is recorded once.
fn forwarded_functions() -> Vec<u64> {
    let mut v: Vec<u64> = INTERPOSED
        .iter()
        .chain(INTERPOSED_SIGNALS)
        .filter(|n| agent_defines(n))
        .filter_map(|n| {
            // What the interposer's `real!` finds.
            let p = crate::runtime::real::lookup_next(&format!("{n}\0")).0 as u64;
            (p != 0 && !in_agent(p)).then_some(p)
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The program's import `id` reaches the agent's interposer for `real`:
/// if `real` is patched in its library, the agent enters it untraced on
/// behalf of this import.
fn note_forwarded_import(s: &Session, real: u64, id: u32) {
    if let Some(&(_, body)) = s.forwarded_bodies.iter().find(|(e, _)| *e == real) {
        crate::runtime::real::add_bypass(real, body, id);
    }
}

/// Attaching: the program and its libraries bound their calls of the
/// functions the agent interposes to the real ones before the agent was
/// loaded (a preloaded agent comes first in the lookup order instead), so
/// their GOT slots for those functions are pointed at the agent's. Done
/// before instrumenting, so that a call traced through a GOT slot goes on
/// to the agent's function, as when preloaded. Returns what could not be
/// bound, per module.
pub fn bind_interposers() -> Vec<String> {
    let mut failed = Vec::new();
    let Some(me) = agent_module() else {
        return vec!["the agent's own file is unknown".into()];
    };
    let Ok(me_c) = std::ffi::CString::new(me) else {
        return vec!["the agent's own file is unknown".into()];
    };
    // SAFETY: dlopen of the agent itself (already loaded: a new reference
    // only, never closed) and dlsym with NUL-terminated names.
    let ours: Vec<(&str, u64)> = unsafe {
        let h = libc::dlopen(me_c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if h.is_null() {
            return vec!["cannot look the agent's functions up".into()];
        }
        INTERPOSED
            .iter()
            .filter_map(|&n| {
                let c = std::ffi::CString::new(n).ok()?;
                let p = libc::dlsym(h, c.as_ptr()) as u64;
                (p != 0 && in_agent(p)).then_some((n, p))
            })
            .collect()
    };
    let modules = loaded_modules();
    let interp = modules.first().and_then(|m| m.interp.clone());
    for m in &modules {
        if m.path.is_empty()
            || m.path == me
            || Some(&m.path) == interp.as_ref()
            || m.path.contains("linux-vdso")
        {
            continue;
        }
        let r = with_analysis(&m.path, false, true, |info, _| {
            let slots = info
                .plt
                .iter()
                .map(|p| (p.got, p.name.as_str()))
                .chain(info.got_imports.iter().map(|g| (g.got, g.name.as_str())));
            for (got, name) in slots {
                if let Some(&(_, f)) = ours.iter().find(|(n, _)| *n == name) {
                    write_word(m.base + got, f)?;
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            failed.push(format!("{}: {e}", m.path));
        }
    }
    failed
}

/// Where `name` is defined, and whether the agent defines it itself (exec,
/// unwinder entry points, ...): then the address is that of the definition
/// the agent forwards to, so that the program's calls are attributed to the
/// library that really has them.
fn resolve(name: &str) -> Option<(u64, bool)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlsym with a valid C string.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    if !in_agent(p as u64) {
        return Some((p as u64, false));
    }
    // SAFETY: dlsym with a valid C string.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c.as_ptr()) };
    Some((if next.is_null() { p } else { next } as u64, true))
}

/// The definition of `name` that the lookup finds after the program
/// (and the agent): the library function behind the program's canonical
/// PLT entry for it.
fn defined_after_program(name: &str) -> Option<u64> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlsym with a valid C string.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, c.as_ptr()) };
    (!p.is_null() && !in_agent(p as u64)).then_some(p as u64)
}

/// Whether the agent itself defines `name` (one of its interposers): the
/// program's calls of it then reach the agent first, not the library.
fn agent_defines(name: &str) -> bool {
    static HANDLE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let h = *HANDLE.get_or_init(|| {
        let Some(path) = agent_module().and_then(|p| std::ffi::CString::new(p).ok()) else {
            return 0;
        };
        // SAFETY: dlopen of the agent itself, already loaded (a new
        // reference only, never closed).
        unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) as usize }
    });
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    if h == 0 {
        return false;
    }
    // SAFETY: dlsym on a valid handle with a valid C string.
    let p = unsafe { libc::dlsym(h as *mut libc::c_void, c.as_ptr()) };
    !p.is_null() && in_agent(p as u64)
}

/// The session's symbol table (`sessions/<id>.sym`). No descriptor is kept
/// across the program's code: the program may close it and get its number
/// back for a file of its own (a daemon closing every descriptor, ...), and
/// the next batch of lines would land there. Lines are collected in memory
/// and each batch opens the file, appends and closes it.
struct SymFile {
    path: std::ffi::CString,
    shown: String,
    pending: Vec<u8>,
}

/// A batch this large is written out at once (a program may have hundreds
/// of thousands of functions).
const SYM_BATCH: usize = 1 << 18;

impl SymFile {
    /// Creates the file, private to the user whatever the umask (it names
    /// the program's functions and modules): it must not exist yet, and a
    /// symbolic link planted in its place is refused.
    fn create(path: &str) -> Result<SymFile, String> {
        let c = std::ffi::CString::new(path).map_err(|_| format!("bad path {path}"))?;
        let err = |e: std::io::Error| format!("cannot create {path}: {e}");
        // SAFETY: open(2) with a valid C string; the descriptor is closed below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        // The mode given to open is masked by the umask only ever towards
        // fewer rights; set it exactly anyway (an ACL default may add some).
        // SAFETY: fchmod and close of the descriptor opened above.
        let r = unsafe { libc::fchmod(fd, 0o600) };
        let e = std::io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        if r != 0 {
            return Err(err(e));
        }
        Ok(SymFile {
            path: c,
            shown: path.to_string(),
            pending: Vec::with_capacity(SYM_BATCH),
        })
    }

    /// Appends the pending lines to the file: open, write, close.
    fn write_batch(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // SAFETY: open(2) with a valid C string; closed below.
        let fd = unsafe {
            libc::open(
                self.path.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}", self.shown),
            ));
        }
        let mut done = 0;
        let mut result = Ok(());
        while done < self.pending.len() {
            let rest = &self.pending[done..];
            // SAFETY: writes from a valid buffer to our own descriptor.
            let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                result = Err(e);
                break;
            }
            done += n as usize;
        }
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        self.pending.clear();
        result
    }
}

impl std::io::Write for SymFile {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(data);
        if self.pending.len() >= SYM_BATCH {
            self.write_batch()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_batch()
    }
}

struct Session {
    out: SymFile,
    modules: Vec<Module>,
    params: Params,
    /// Per function id: the address its traced frames return to.
    ret_sites: Vec<u64>,
    /// Per function id: its filter flags (`crate::recording::filter`), with filters.
    flags: Vec<u64>,
    /// Modules already written to the symbol table.
    written_modules: usize,
    /// The next function id (every smaller one is in the symbol table).
    next_id: u32,
    /// Stub arenas: (module path, module base, arena base, arena size).
    arenas: Vec<(String, u64, u64, usize)>,
    /// Attaching (`fctrace -p`): the instruction pointers of the process's
    /// threads, stopped while the start-up patches are written (none at a
    /// preloaded start, nor for libraries loaded later).
    stopped: Vec<u64>,
    /// Arenas of unloaded libraries: (module path, module base, arena).
    free_arenas: Vec<(String, u64, Arena)>,
    /// With -l: the real functions behind the agent's interposers (sorted),
    /// and the untraced ways into those patched so far: (entry, stub body).
    forwarded: Vec<u64>,
    forwarded_bodies: Vec<(u64, u64)>,
}

impl Session {
    /// The index of the module `path` loaded at `base` (0: any base, for
    /// the libraries the program's imports resolve to). A library loaded
    /// again at another base after `dlclose` is a module of its own.
    fn module_index(&mut self, path: &str, base: u64) -> Result<u32, String> {
        if let Some(m) = self
            .modules
            .iter()
            .find(|m| m.path == path && (base == 0 || m.base == base))
        {
            return Ok(m.index);
        }
        let m = Module {
            index: self.modules.len() as u32,
            base,
            path: path.to_string(),
        };
        self.modules.push(m);
        Ok(self.modules.len() as u32 - 1)
    }

    /// Writes the lines of the modules not written yet.
    fn write_new_modules(&mut self) -> Result<(), String> {
        for m in &self.modules[self.written_modules..] {
            symtab::write_module(&mut self.out, m).map_err(|e| e.to_string())?;
        }
        self.written_modules = self.modules.len();
        Ok(())
    }

    /// Notes the filter flags of function `id` and returns them.
    fn note_flags(&mut self, id: u32, module_path: &str, name: &str) -> u64 {
        if !crate::recording::filter::active() {
            return 0;
        }
        let f = crate::recording::filter::flags_for(id, module_path, name);
        if f == 0 {
            return 0;
        }
        if self.flags.len() <= id as usize {
            self.flags.resize(id as usize + 1, 0);
        }
        self.flags[id as usize] = f;
        f
    }

    /// Writes one function's line.
    fn write_line(&mut self, line: &FunctionLine) -> Result<(), String> {
        symtab::write_function_line(&mut self.out, line).map_err(|e| e.to_string())
    }
}

/// Asks the CPU to bring the cache line at `p` in (a hint: any address).
#[inline]
fn prefetch(p: *const u8) {
    // SAFETY: a prefetch never faults, whatever the address; SSE is part
    // of x86_64.
    unsafe { std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0) };
}

fn read_code(addr: u64, len: usize) -> &'static [u8] {
    // SAFETY: callers pass ranges inside a module's mapped, executable
    // segments (checked against the module's PT_LOAD span).
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// A module's code read from its file, a window at a time (a private
/// read-only mapping of 256 KiB of the file, unmapped when the next one is
/// made), for planning its patches: reading it through the loaded mapping
/// instead would map every code page of the module into the process for
/// the rest of the run (each read fault maps up to 16 pages around it,
/// whether the program runs that code or not), which for libLLVM is 50 MB
/// more resident memory. Only the pages the patches write to are touched
/// in the loaded mapping.
struct CodeWindow {
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
    fn open(m: &Loaded, build_id: Option<&[u8]>) -> Option<CodeWindow> {
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
fn loaded_build_id(m: &Loaded) -> Option<&'static [u8]> {
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
fn code_of(win: &mut Option<CodeWindow>, lo: u64, hi: u64) -> &[u8] {
    match win {
        Some(w) => match w.get(lo, hi) {
            Some(b) => b,
            None => read_code(lo, (hi - lo) as usize),
        },
        None => read_code(lo, (hi - lo) as usize),
    }
}

/// Instruments the process's modules. `stopped`: attaching, where its
/// stopped threads are (no patch may cut an instruction one of them is
/// about to run).
pub fn instrument_process(
    shm: &Shm,
    sid: u32,
    dir: &str,
    nest: bool,
    stopped: &[u64],
) -> Result<(), String> {
    let modules = loaded_modules();
    let main = modules.first().ok_or("no modules loaded")?;
    crate::runtime::log::set_trace_dir(dir);
    let mut out = SymFile::create(&format!("{dir}/sessions/{sid}.sym"))?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    symtab::write_header(&mut out, sid, pid, &main.path).map_err(|e| e.to_string())?;
    let interp = main.interp.clone();
    let params = Params {
        tls: crate::runtime::tls::offset(),
        buf_size: shm.layout.buf_size,
        slow_path: super::slow_path::slow_path as *const () as u64,
        lost_counter: &shm.header().lost_events as *const _ as u64,
        ext_state: codegen::ext_state(),
        filter: crate::recording::filter::active()
            .then_some(&crate::recording::filter::GLOBAL as *const _ as u64),
        finished: &crate::recording::filter::FINISHED as *const _ as u64,
    };
    let mut s = Session {
        out,
        modules: Vec::new(),
        params,
        ret_sites: Vec::new(),
        flags: Vec::new(),
        written_modules: 0,
        next_id: 0,
        arenas: Vec::new(),
        free_arenas: Vec::new(),
        stopped: stopped.to_vec(),
        forwarded: if nest {
            forwarded_functions()
        } else {
            Vec::new()
        },
        forwarded_bodies: Vec::new(),
    };
    let me = agent_module().unwrap_or_default();

    // Libraries first (with -l), so that the program's PLT entries for
    // functions traced inside a library can be left alone.
    let mut lib_entries: std::collections::HashSet<u64> = Default::default();
    let mut known = Vec::new();
    for m in modules.iter().skip(1) {
        if !nest {
            break;
        }
        if !is_instrumentable_lib(m, me, &interp) {
            continue;
        }
        match with_analysis(&m.path, false, false, |info, funcs| {
            prepare_lib(&mut s, m, info, funcs)
        })
        .and_then(finish_lib)
        {
            Ok(entries) => {
                known.push(Known::new(m, &entries));
                lib_entries.extend(entries);
            }
            Err(e) => {
                crate::runtime::log::warn(&format!("{}: {e}", m.path));
                known.push(Known::new(m, &[]));
            }
        }
    }
    instrument_main(&mut s, main, &lib_entries)?;
    publish(&mut s)?;
    // Libraries loaded later are patched while their threads run on.
    s.stopped.clear();
    if nest {
        if let Err(e) = install_load_hook(&modules, &interp) {
            crate::runtime::log::warn(&format!(
                "libraries loaded later (dlopen) will not be traced: {e}"
            ));
        }
        let mut rt = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
        *rt = Some(Runtime {
            s,
            known,
            me: me.to_string(),
            interp,
            pid,
        });
    }
    Ok(())
}

/// The ids of the program's imports (its calls into libraries through
/// its PLT and GOT), and the address range of its loaded segments.
static MAIN_IMPORTS: std::sync::Mutex<(std::ops::Range<u32>, std::ops::Range<u64>)> =
    std::sync::Mutex::new((0..0, 0..0));

/// For a frame of the library function that import `id` calls (found by
/// its code range), returning to `ret`: whether it is a call the import
/// traces (one the program made: `ret` in the program's code). `None` if
/// `id` is not an import (a function traced where it is defined).
pub fn import_call_from_program(id: u32, ret: u64) -> Option<bool> {
    let v = MAIN_IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    v.0.contains(&id).then(|| v.1.contains(&ret))
}

/// Publishes the return sites of every function id (a new table, read
/// atomically by other threads) and completes the session's symbol table
/// (the functions' lines are written as their modules are instrumented).
fn publish(s: &mut Session) -> Result<(), String> {
    let mut sites = s.ret_sites.clone();
    sites.resize(s.next_id as usize, 0);
    crate::runtime::frames::set_ret_sites(sites);
    if crate::recording::filter::active() {
        let mut flags = s.flags.clone();
        flags.resize(s.next_id as usize, 0);
        crate::recording::filter::set_flags(flags);
    }
    crate::recording::filter::publish_ranges();
    s.write_new_modules()?;
    s.out.flush().map_err(|e| e.to_string())?;
    Ok(())
}

/// With -l, libraries are instrumented except the agent, the dynamic
/// linker, the vDSO and sanitizer runtimes (the tool the program was
/// built with: their functions run inside every interceptor and every
/// stack they collect, whose frames would hold stub addresses).
fn is_instrumentable_lib(m: &Loaded, me: &str, interp: &Option<String>) -> bool {
    !(m.path.is_empty()
        || m.path == me
        || fctrace_symbols::sanitizer::is_runtime(m.path.as_bytes())
        || Some(&m.path) == interp.as_ref()
        || m.path.contains("linux-vdso"))
}

/// A file mapped read-only (a module's symbol tables are not among its
/// loaded segments); unmapped on drop.
struct MappedFile {
    at: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    fn open(path: &str) -> Result<MappedFile, String> {
        use std::os::fd::AsRawFd;
        let err = |e: std::io::Error| format!("cannot read {path}: {e}");
        let file = std::fs::File::open(path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len() as usize;
        if len == 0 {
            return Err(format!("{path}: empty file"));
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
            return Err(err(std::io::Error::last_os_error()));
        }
        Ok(MappedFile { at, len })
    }

    fn bytes(&self) -> &[u8] {
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

/// Runs `f` on the analysis of the ELF file at `path` (its functions'
/// names borrowed from the mapped file). With `use_debug_file`, a stripped
/// file's functions come from its separate debug file when one is
/// installed: for the program only (a library's debug file, libc's from
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
    let file = MappedFile::open(path)?;
    let debug = use_debug_file
        .then(|| fctrace_symbols::debugfile::find_symbols(std::path::Path::new(path), file.bytes()))
        .flatten()
        .and_then(|p| MappedFile::open(&p.to_string_lossy()).ok());
    let debug = debug.as_ref().map(|d| d.bytes());
    let (info, funcs) = if imports {
        fctrace_symbols::analyze_borrowed_with_debug(file.bytes(), debug)
    } else {
        fctrace_symbols::analyze_functions_with_debug(file.bytes(), debug)
    }
    .map_err(|e| e.to_string())?;
    f(&info, &funcs)
}

/// Builds the stub of every function of a module and writes their lines.
/// `code_free`: the analysis read no code (`with_analysis` without
/// imports), so each function's `pad_end` is where to look for its padding
/// up to. Returns the runtime entry addresses that are traced (for
/// libraries only: `is_main` gives none) and the stubs, whose patches
/// `finish_module` applies (after the caller has unmapped the module's
/// file: its pages and the code pages the patches copy are not resident
/// at the same time).
#[allow(clippy::type_complexity)]
fn instrument_module(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    funcs: &[FuncRef],
    is_main: bool,
    code_free: bool,
) -> Result<(Vec<u64>, Result<Stubs, String>), String> {
    let midx = s.module_index(&m.path, m.base)?;
    s.write_new_modules()?;
    let first = s.next_id;
    s.next_id += funcs.len() as u32;
    s.ret_sites.resize(s.next_id as usize, 0);
    let mut traced = Vec::new();
    let mut scratch = Vec::with_capacity(64);
    // Stubs are built (and lines written) function by function; the code
    // patches are applied at the end, once every stub is built from the
    // original code.
    let mut stubs = Stubs::open(s, m, 4096 + funcs.len() * STUB_ESTIMATE);
    // The padding after the previous function (runtime addresses: start,
    // end) and how far that function's patch writes into it: a 2-byte
    // entry jump may put its trampoline in the rest, so that two functions
    // never claim the same bytes. Not with -fpatchable-function-entry,
    // whose nops before a function are that function's.
    let own_prefix = info
        .markers
        .iter()
        .any(|k| k == "__patchable_function_entries");
    let mut prev_pad: Option<(u64, u64)> = None;
    let mut prev_writes_end = 0u64;
    // Go code is left alone, and Go's signal handler must see no int3 of
    // the agent's: no trap fallback in a module that holds Go code.
    let go = info.go.as_ref().and_then(|g| go_text(m, g));
    if let Some(r) = &go {
        crate::runtime::log::note(&go_note(&m.path, r));
    }
    let trap =
        info.go.is_none() && may_trap(&m.path) && !crate::interpose::signal::trap_handler_foreign();
    let mut win = CodeWindow::open(m, info.build_id.as_deref());
    let mut moved = Vec::with_capacity(64);
    for (k, f) in funcs.iter().enumerate() {
        // The names lie in the file's string table in symbol order, not
        // in address order: each is a cache miss unless asked for ahead.
        if let Some(ahead) = funcs.get(k + 8) {
            prefetch(ahead.name.as_ptr());
        }
        let name: &str = &f.name;
        let addr = m.base + f.addr;
        // A symbol without a size ends at the latest where the next begins.
        let next = funcs
            .get(k + 1)
            .map(|n| n.addr)
            .unwrap_or(f.addr + 4096)
            .min(f.addr + 4096);
        let end = f.addr + f.size;
        let (size, pad_end) = if f.size == 0 && addr >= m.lo && m.base + next <= m.hi {
            match patch::infer_size(addr, code_of(&mut win, addr, m.base + next)) {
                Some(n) => (n as u64, next),
                None => (0, f.addr),
            }
        } else if code_free && f.size != 0 {
            // The padding after the function: the analysis read no code,
            // and gives where to look up to.
            let limit = f.pad_end;
            if limit > end && addr >= m.lo && m.base + limit <= m.hi {
                let pad = code_of(&mut win, m.base + end, m.base + limit);
                (f.size, end + fctrace_symbols::padding_run(pad) as u64)
            } else {
                (f.size, end)
            }
        } else {
            (f.size, f.pad_end)
        };
        let planned = if go
            .as_ref()
            .is_some_and(|r| r.contains(&addr) || (r.end == addr && name == "runtime.etext"))
        {
            Err(GO_REASON.to_string())
        } else if f.ifunc {
            Err("IFUNC resolver, not the function".to_string())
        } else if NOT_CALLED.contains(&name) || (is_main && f.addr == info.entry) {
            Err("entered without a call".to_string())
        } else if !is_main && is_unwinder(&m.path, name) {
            Err("part of the unwinder, whose frames must stay untouched".to_string())
        } else if !is_main && is_wrapped_switch(name) {
            Err("wrapped by the agent: traced where the program calls it".to_string())
        } else if addr < m.lo || m.base + pad_end > m.hi {
            Err("outside the loaded segments".to_string())
        } else {
            let before = match prev_pad {
                Some((lo, hi)) if !own_prefix && lo >= m.lo && lo < hi && hi <= addr => {
                    Some((lo, hi))
                }
                _ => None,
            };
            // The function and its padding, and the padding before it, in
            // one read.
            let from = before.map_or(addr, |(lo, _)| lo);
            let all = code_of(&mut win, from, m.base + pad_end.max(f.addr + size));
            let code = &all[(addr - from) as usize..];
            let before = before.map(|(lo, hi)| patch::Before {
                at: lo,
                bytes: &all[(lo - from) as usize..(hi - from) as usize],
                free_from: prev_writes_end,
            });
            patch::plan(
                addr,
                size as usize,
                code,
                patch::Around { before, trap },
                &mut scratch,
            )
        };
        prev_pad = Some((addr + size, m.base + pad_end.max(f.addr + size)));
        prev_writes_end = planned.as_ref().map_or(0, |p| p.writes_end());
        let mode = if RETURNS_TWICE.contains(&name) {
            Mode::EntryOnly
        } else {
            Mode::Traced
        };
        let id = first + k as u32;
        let status = match planned {
            Ok(plan) => {
                if !is_main {
                    traced.push(addr);
                }
                let flags = s.note_flags(id, &m.path, name);
                if matches!(mode, Mode::Traced) {
                    crate::recording::filter::note_range(id, addr, size);
                }
                // The instructions the stub moves, read before the
                // module's code is written.
                moved.clear();
                if plan.moved_count != 0 {
                    let hi = plan.moved_at + plan.moved_len as u64;
                    moved.extend_from_slice(code_of(&mut win, plan.moved_at, hi));
                }
                let status = Stubs::add(&mut stubs, s, m, id, &plan, &moved, mode, None, flags);
                if let (Ok(st), FuncStatus::Traced | FuncStatus::TracedTrap) = (&stubs, &status) {
                    if !is_main && s.forwarded.binary_search(&addr).is_ok() {
                        s.forwarded_bodies.push((addr, st.last_body));
                    }
                }
                status
            }
            Err(reason) => FuncStatus::NotTraced(reason),
        };
        s.write_line(&FunctionLine {
            id,
            module: midx,
            addr: f.addr,
            size,
            kind: FuncKind::Function,
            status: &status,
            name,
        })?;
    }
    Ok((traced, stubs))
}

/// Applies the patches of a module that `instrument_module` prepared;
/// returns its traced entries.
fn finish_module((traced, stubs): (Vec<u64>, Result<Stubs, String>)) -> Result<Vec<u64>, String> {
    Stubs::finish(stubs)?;
    Ok(traced)
}

fn instrument_main(
    s: &mut Session,
    m: &Loaded,
    lib_entries: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    with_analysis(&m.path, true, true, |info, funcs| {
        // Attached, a GOT slot whose value the program also reads as a
        // pointer (a function's address taken) keeps it: a pointer to a
        // stub would outlive the detach, which unmaps the stubs. Read
        // before the entries are patched (a load can be among the
        // instructions a patch moves).
        let loaded = if crate::runtime::shm::attached() && !info.got_imports.is_empty() {
            slots_read_as_pointers(m, info)
        } else {
            Default::default()
        };
        // (The process runs on, and with -l its libraries are traced.)
        if let Some(why) = skipped(m, info, funcs) {
            crate::runtime::log::note(&why);
            return Ok(());
        }
        // The program's own functions.
        instrument_module(s, m, info, funcs, true, false).and_then(finish_module)?;
        instrument_imports(s, m, info, lib_entries, &loaded)
    })
}

/// Which of module `m`'s GOT import slots its code loads as a pointer
/// that may be kept (not only called through:
/// `arch::x86_64::escape`), looking at its executable mappings.
fn slots_read_as_pointers(m: &Loaded, info: &ElfInfo) -> std::collections::HashSet<u64> {
    let slots: std::collections::HashSet<u64> =
        info.got_imports.iter().map(|g| m.base + g.got).collect();
    let mut found = std::collections::HashSet::new();
    for map in crate::runtime::maps::mappings() {
        let rx = libc::PROT_EXEC | libc::PROT_READ;
        if map.prot & rx != rx || map.path.as_deref() != Some(m.path.as_str()) {
            continue;
        }
        // SAFETY: a readable, executable mapping of the module, read while
        // the process's other threads are stopped (nothing unmaps it
        // meanwhile).
        let code = unsafe {
            std::slice::from_raw_parts(map.start as *const u8, (map.end - map.start) as usize)
        };
        fctrace_symbols::rip_loads(code, map.start, |at, slot| {
            if slots.contains(&slot)
                && !found.contains(&slot)
                && crate::arch::x86_64::escape::pointer_may_be_kept(code, map.start, at)
            {
                found.insert(slot);
            }
        });
    }
    found
}

/// The program's calls into libraries, through the PLT and through the GOT.
/// `loaded`: GOT slots the program reads as pointers (left alone when
/// attached).
fn instrument_imports(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    lib_entries: &std::collections::HashSet<u64>,
    loaded: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    let n = info.plt.len() + info.got_imports.len();
    if n == 0 {
        return Ok(());
    }
    let first = s.next_id;
    s.next_id += n as u32;
    s.ret_sites.resize(s.next_id as usize, 0);
    if let Ok(mut v) = MAIN_IMPORTS.lock() {
        *v = (first..s.next_id, m.lo..m.hi);
    }
    // The modules of the imports, with their lines first. An import that
    // resolves to the program itself (`__cxa_pure_virtual` defined by
    // clang), or to nothing, is the program's: its own module, which with
    // -l is not module 0 (the libraries come first).
    let own = s.module_index(&m.path, m.base)?;
    let mut modules = Vec::with_capacity(n);
    let mut targets = Vec::with_capacity(n);
    for p in &info.plt {
        let resolved = resolve(&p.name).map(|(t, interposed)| {
            if !interposed && t >= m.lo && t < m.hi {
                // The program's own PLT entry: a position-dependent
                // program that takes the address of a library function
                // makes its PLT entry that function's address for
                // everyone (its dynamic symbol's value), which is what
                // the lookup finds. The function is the next definition,
                // unless the agent interposes it (its GOT slot is bound to
                // the agent, which comes before the libraries).
                (
                    defined_after_program(&p.name).unwrap_or(t),
                    agent_defines(&p.name),
                )
            } else {
                (t, interposed)
            }
        });
        // A call the agent interposes reaches the library's entry only
        // through the agent: the PLT entry stays traced even with -l, and
        // the agent's forwarding enters the library's untraced.
        if let Some((t, true)) = resolved {
            note_forwarded_import(s, t, first + targets.len() as u32);
        }
        targets.push(resolved.and_then(|(t, interposed)| (!interposed).then_some(t)));
        let lib = resolved.and_then(|(t, _)| module_of(t));
        modules.push(match &lib {
            Some(path) if *path != m.path => s.module_index(path, 0)?,
            _ => own,
        });
    }
    for g in &info.got_imports {
        let slot = m.base + g.got;
        // SAFETY: the GOT slot lies in the module's mapped data (relocated
        // before constructors run).
        let target = unsafe { (slot as *const u64).read() };
        targets.push(Some(target));
        // A slot bound to the agent's interposer: named after the library
        // the agent forwards to.
        let lib = if in_agent(target) {
            let real = resolve(&g.name);
            if let Some((t, _)) = real {
                // (Its target was pushed above.)
                note_forwarded_import(s, t, first + targets.len() as u32 - 1);
            }
            real.and_then(|(real, _)| module_of(real))
        } else {
            module_of(target)
        };
        modules.push(match &lib {
            Some(path) if *path != m.path => s.module_index(path, 0)?,
            _ => own,
        });
    }
    s.write_new_modules()?;
    let mut stubs = Stubs::open(s, m, 4096 + n * STUB_ESTIMATE);
    let mut scratch = Vec::new();
    for (k, p) in info.plt.iter().enumerate() {
        let id = first + k as u32;
        let addr = m.base + p.addr;
        let status = if targets[k].is_some_and(|t| lib_entries.contains(&t)) {
            FuncStatus::NotTraced("traced inside its library (-l)".into())
        } else if PROFILING_HOOKS.contains(&p.name.as_str()) {
            FuncStatus::NotTraced(PROFILING_HOOK.into())
        } else {
            let code = read_code(addr, p.size as usize);
            let around = patch::Around::default();
            match patch::plan(addr, p.size as usize, code, around, &mut scratch) {
                Ok(plan) => {
                    let path = s.modules[modules[k] as usize].path.clone();
                    let flags = s.note_flags(id, &path, &p.name);
                    let mode = import_mode(&p.name, &path);
                    if let (Some(t), Mode::Traced) = (targets[k], mode) {
                        crate::recording::filter::note_import_range(id, t);
                    }
                    let moved = read_code(plan.moved_at, plan.moved_len);
                    Stubs::add(&mut stubs, s, m, id, &plan, moved, mode, None, flags)
                }
                Err(reason) => FuncStatus::NotTraced(reason),
            }
        };
        s.write_line(&FunctionLine {
            id,
            module: modules[k],
            addr: p.addr,
            size: p.size,
            kind: FuncKind::Plt,
            status: &status,
            name: &p.name,
        })?;
    }
    for (k, g) in info.got_imports.iter().enumerate() {
        let k = info.plt.len() + k;
        let id = first + k as u32;
        let slot = m.base + g.got;
        let target = targets[k].unwrap_or(0);
        let status = if target == 0 {
            FuncStatus::NotTraced("unresolved (weak) import".into())
        } else if PROFILING_HOOKS.contains(&g.name.as_str()) {
            FuncStatus::NotTraced(PROFILING_HOOK.into())
        } else if loaded.contains(&slot) {
            FuncStatus::NotTraced(
                "its address is read from its GOT slot: not redirected while attached (a \
                 pointer to a stub would outlive the detach)"
                    .into(),
            )
        } else if lib_entries.contains(&target) {
            FuncStatus::NotTraced("traced inside its library (-l)".into())
        } else {
            // The stub's body is a jump to the real target.
            let plan = Plan {
                patch_at: 0,
                patch_len: 0,
                moved_at: slot, // any address that no instruction uses
                moved_len: 0,
                moved_count: 0,
                verbatim: true,
                resume: Some(target),
                trampoline: None,
                trap: false,
            };
            let path = s.modules[modules[k] as usize].path.clone();
            let flags = s.note_flags(id, &path, &g.name);
            let mode = import_mode(&g.name, &path);
            if matches!(mode, Mode::Traced) {
                crate::recording::filter::note_import_range(id, target);
            }
            Stubs::add(&mut stubs, s, m, id, &plan, &[], mode, Some(slot), flags)
        };
        s.write_line(&FunctionLine {
            id,
            module: modules[k],
            addr: g.got,
            size: 8,
            kind: FuncKind::Got,
            status: &status,
            name: &g.name,
        })?;
    }
    Stubs::finish(stubs)
}

/// A `stopped` thread's instruction pointer strictly inside one of the
/// writes of `plan`'s patch (to a stub at `stub`): the thread would resume
/// mid-instruction. Nothing to look at but when attaching.
fn stopped_inside(stopped: &[u64], plan: &Plan, stub: u64) -> Option<u64> {
    if stopped.is_empty() {
        return None;
    }
    let mut found = None;
    patch::patch_bytes(plan, stub, |a, b| {
        let end = a + b.len() as u64;
        found = found.or(stopped.iter().copied().find(|&r| r > a && r < end));
    });
    found
}

/// Arena bytes reserved per function for its stub (a typical stub takes
/// 48; an arena that fills up is followed by another).
const STUB_ESTIMATE: usize = 128;

/// The stubs of one module being built, in arenas near it, and the code
/// patches that divert its functions to them (applied by `finish`, once
/// every stub is built from the original code).
struct Stubs {
    arena: Arena,
    common: Common,
    /// Code patches, one record each: address (8 bytes, little-endian),
    /// length (1 byte), the bytes.
    writes: Vec<u8>,
    /// The range the patches cover.
    lo: u64,
    hi: u64,
    /// GOT slots to redirect: (slot, stub).
    got_writes: Vec<(u64, u64)>,
    /// The stub being built.
    stub: Vec<u8>,
    /// The functions that take the trap fallback.
    traps: Vec<crate::interpose::signal::Trap>,
    /// The body of the last stub built (its untraced way in).
    last_body: u64,
}

impl Stubs {
    /// An arena of `size` bytes for the stubs of `m`, or why there is none
    /// (then no function of the module gets one).
    fn open(s: &mut Session, m: &Loaded, size: usize) -> Result<Stubs, String> {
        let (arena, common) = open_arena(s, m, size, true)?;
        Ok(Stubs {
            arena,
            common,
            writes: Vec::new(),
            lo: u64::MAX,
            hi: 0,
            got_writes: Vec::new(),
            stub: Vec::with_capacity(256),
            traps: Vec::new(),
            last_body: 0,
        })
    }

    /// Builds the stub of function `id` and notes its patch; returns the
    /// function's status. `moved`: the bytes of the instructions the stub
    /// moves (`plan.moved_len` bytes at `plan.moved_at`). `flags`: its filter flags (`crate::recording::filter`).
    #[allow(clippy::too_many_arguments)]
    fn add(
        stubs: &mut Result<Stubs, String>,
        s: &mut Session,
        m: &Loaded,
        id: u32,
        plan: &Plan,
        moved: &[u8],
        mode: Mode,
        got_slot: Option<u64>,
        flags: u64,
    ) -> FuncStatus {
        let st = match stubs {
            Ok(st) => st,
            Err(e) => return FuncStatus::NotTraced(e.clone()),
        };
        let mut new_arena = false;
        // (An entry-only stub's common entry takes the id.)
        let fast = match flags {
            _ if !matches!(mode, Mode::Traced) => None,
            0 | crate::recording::filter::F_NOTRACE | crate::recording::filter::F_FILTER => None,
            _ => crate::recording::filter::fast_desc(id, flags),
        };
        let site = loop {
            let at = st.arena.cursor();
            st.stub.clear();
            // A function with filter flags enters through the flagged
            // entry (the slow path), a -N or -F function alone through
            // the generated -N or -F entry, one whose values and
            // triggers the generated code can handle through the fast
            // flagged entry.
            let (entry, arg) = match flags {
                0 => (st.common.entry, patch::StubArg::Id(id)),
                crate::recording::filter::F_NOTRACE => {
                    (st.common.entry_notrace, patch::StubArg::Id(id))
                }
                crate::recording::filter::F_FILTER => {
                    (st.common.entry_filter, patch::StubArg::Id(id))
                }
                _ => match fast {
                    Some(d) => (
                        st.common.entry_fast,
                        patch::StubArg::Desc(d as *const _ as u64),
                    ),
                    None => (st.common.entry_flagged, patch::StubArg::Id(id)),
                },
            };
            let common = Common { entry, ..st.common };
            let built =
                patch::build_stub_with(plan, |_, _| moved, at, &common, arg, mode, &mut st.stub);
            match built {
                Err(e) => return FuncStatus::NotTraced(e),
                Ok(b) if st.stub.len() <= st.arena.remaining() => break b,
                Ok(_) if new_arena => return FuncStatus::NotTraced("stub arena full".into()),
                Ok(_) => {}
            }
            // This arena is full: another one.
            match open_arena(s, m, (1 << 20).max(2 * st.stub.len()), false) {
                Ok((arena, common)) => {
                    st.arena.seal();
                    st.arena = arena;
                    st.common = common;
                    new_arena = true;
                }
                Err(_) => return FuncStatus::NotTraced("stub arena full".into()),
            }
        };
        match got_slot {
            Some(slot) => {
                let at = st.arena.put(&st.stub);
                st.got_writes.push((slot, at));
            }
            None => {
                if !patch::reachable(plan, st.arena.cursor()) {
                    return FuncStatus::NotTraced("stub out of jump range".into());
                }
                // Attaching: a thread stopped inside the bytes a patch
                // replaces would resume in the middle of the new code.
                if let Some(r) = stopped_inside(&s.stopped, plan, st.arena.cursor()) {
                    return FuncStatus::NotTraced(format!(
                        "a thread was stopped inside its first bytes (at {r:#x}) when fctrace attached"
                    ));
                }
                let at = st.arena.put(&st.stub);
                if plan.trap {
                    st.traps.push(crate::interpose::signal::Trap {
                        at: plan.patch_at,
                        stub: at,
                        body: site.body,
                        ret_site: site.ret_site.unwrap_or(0),
                        module: m.base,
                    });
                }
                patch::patch_bytes(plan, at, |a, b| {
                    st.writes.extend_from_slice(&a.to_le_bytes());
                    st.writes.push(b.len() as u8);
                    st.writes.extend_from_slice(b);
                    st.lo = st.lo.min(a);
                    st.hi = st.hi.max(a + b.len() as u64);
                });
            }
        }
        if let Some(r) = site.ret_site {
            s.ret_sites[id as usize] = r;
        }
        st.last_body = site.body;
        match mode {
            Mode::EntryOnly => FuncStatus::EntryOnly,
            Mode::Traced if plan.trap => FuncStatus::TracedTrap,
            Mode::Traced => FuncStatus::Traced,
        }
    }

    /// Seals the arena and applies the patches.
    fn finish(stubs: Result<Stubs, String>) -> Result<(), String> {
        let st = stubs?;
        st.arena.seal();
        // The handler knows every trap before the first int3 is written.
        crate::interpose::signal::add_traps(&st.traps);
        if st.lo < st.hi {
            // Only the pages written, each run with its own protection
            // plus write (a module may have data between two code
            // segments; code stays executable: the agent itself may be
            // running library code on it).
            let writes = || {
                let mut w = &st.writes[..];
                std::iter::from_fn(move || {
                    (w.len() > 9).then(|| {
                        let at = u64::from_le_bytes(w[..8].try_into().unwrap());
                        let len = w[8] as usize;
                        let bytes = &w[9..9 + len];
                        w = &w[9 + len..];
                        (at, bytes)
                    })
                })
            };
            let mappings = crate::runtime::maps::mappings();
            let pages =
                journal::WritablePages::open(writes().map(|(a, b)| (a, b.len())), &mappings, true);
            // All or nothing, as the symbol table says of every entry.
            if let Some((at, _)) = writes().find(|(at, b)| !pages.covers(*at, b.len())) {
                pages.close();
                return Err(format!(
                    "mprotect: the code at {at:#x} cannot be made writable"
                ));
            }
            for (at, bytes) in writes() {
                journal::before_write(at, bytes.len());
                // SAFETY: the pages were made writable above; no other
                // thread runs code of the module yet.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len())
                };
            }
            pages.close();
        }
        for (slot, stub) in st.got_writes {
            write_word(slot, stub)?;
        }
        Ok(())
    }
}

/// An arena of at least `size` bytes near `m`, with its common block.
/// `reuse`: the arena of an earlier load of the same library at the same
/// address may be taken back (nothing can run the stubs of an unloaded
/// library), so that load/unload loops do not pile up arenas.
fn open_arena(
    s: &mut Session,
    m: &Loaded,
    size: usize,
    reuse: bool,
) -> Result<(Arena, Common), String> {
    // The common block comes first in the arena, and `size` is what the
    // stubs need after it: the block's length (the filtered variant is
    // several KiB, more than a module with few functions asks for, e.g. a
    // stripped program traced through its few dynamic symbols) is known by
    // assembling it once; it does not depend on where it is placed (every
    // absolute address in it is a 64-bit immediate).
    let common_len = codegen::assemble_common(0, &s.params)
        .map_err(|e| format!("code generation: {e}"))?
        .0
        .len();
    let size = size + common_len.next_multiple_of(16);
    let reused = s
        .free_arenas
        .iter()
        .position(|(p, b, a)| reuse && *p == m.path && *b == m.base && a.size >= size)
        .map(|i| s.free_arenas.swap_remove(i).2)
        .filter(|a| {
            // SAFETY: the arena is the agent's own mapping.
            unsafe {
                libc::mprotect(
                    a.base as *mut libc::c_void,
                    a.size,
                    libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                ) == 0
            }
        });
    let is_reused = reused.is_some();
    let mut arena = match reused {
        Some(a) => Arena {
            base: a.base,
            size: a.size,
            used: 0,
        },
        None => Arena::near(m.lo, m.hi, size)
            .ok_or("no free address space near the module for stubs")?,
    };
    s.arenas
        .push((m.path.clone(), m.base, arena.base, arena.size));
    let (code, common): (Vec<u8>, Common) = codegen::assemble_common(arena.cursor(), &s.params)
        .map_err(|e| format!("code generation: {e}"))?;
    if code.len() > arena.remaining() {
        return Err("the stub arena cannot hold the common code".into());
    }
    if !is_reused {
        // (a reused arena's common block was noted at the same place)
        crate::interpose::signal::note_hot_code(arena.cursor(), &code);
        crate::interpose::signal::note_region_windows(arena.cursor(), &common.region_windows);
    }
    arena.put(&code);
    Ok((arena, common))
}

const PAGE: u64 = 4096;

fn protect(lo: u64, hi: u64, prot: i32) -> Result<(), String> {
    let a = lo & !(PAGE - 1);
    let b = hi.div_ceil(PAGE) * PAGE;
    // SAFETY: changes protection of pages of a loaded module only.
    let r = unsafe { libc::mprotect(a as *mut libc::c_void, (b - a) as usize, prot) };
    if r != 0 {
        return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Redirects a GOT slot (which may lie in a read-only RELRO page).
fn write_word(slot: u64, value: u64) -> Result<(), String> {
    let prot = crate::runtime::maps::prot_of(slot).unwrap_or(libc::PROT_READ);
    protect(slot, slot + 8, libc::PROT_READ | libc::PROT_WRITE)?;
    journal::before_write(slot, 8);
    // SAFETY: the slot is an aligned GOT entry, writable now.
    unsafe { (slot as *mut u64).write(value) };
    protect(slot, slot + 8, prot)?;
    Ok(())
}

/// Whether functions of the module at `path` may take the trap fallback
/// (an `int3` entry handled by the agent's SIGTRAP handler). Not in libc:
/// glibc runs some of its own code with every signal blocked (a new
/// thread before its mask is restored, `posix_spawn`'s child, ...), where
/// an int3 would kill the process.
fn may_trap(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    !file.starts_with("libc.so") && !file.starts_with("libc-")
}

/// The unwinder walks its own frames: with `-l`, none of its functions may
/// have their returns taken over (nor glibc's `backtrace`, which drives it).
fn is_unwinder(module: &str, name: &str) -> bool {
    module.contains("libgcc_s")
        || name.starts_with("_Unwind_")
        || name == "backtrace"
        || name == "__backtrace"
}

// ---------------------------------------------------------------------------
// Libraries loaded at run time (dlopen), with -l
// ---------------------------------------------------------------------------

/// A library that was instrumented (or found not instrumentable).
struct Known {
    base: u64,
    /// Its loaded segments' range.
    lo: u64,
    hi: u64,
    path: String,
    /// The first bytes of one patched entry, as patched: a library unloaded
    /// and loaded again at the same address has them unpatched.
    probe: Option<(u64, [u8; 8])>,
}

impl Known {
    fn new(m: &Loaded, entries: &[u64]) -> Known {
        let probe = entries
            .iter()
            .find(|&&a| a >= m.lo && a + 8 <= m.hi)
            .map(|&a| (a, read_probe(a)));
        Known {
            base: m.base,
            lo: m.lo,
            hi: m.hi,
            path: m.path.clone(),
            probe,
        }
    }

    /// Whether `m` (a module loaded now) is still the object this was made
    /// from.
    fn is(&self, m: &Loaded) -> bool {
        if self.base != m.base || self.path != m.path {
            return false;
        }
        match self.probe {
            Some((a, bytes)) => a >= m.lo && a + 8 <= m.hi && safe_read8(a) == Some(bytes),
            None => true,
        }
    }
}

/// Reads 8 bytes that may be unmapped or inaccessible (another file
/// loaded at the same address may have a gap there) without faulting.
fn safe_read8(a: u64) -> Option<[u8; 8]> {
    let mut b = [0u8; 8];
    let local = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: a as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads this process's memory through the kernel, which checks
    // the source range; the destination is our own buffer.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(b)
}

fn read_probe(a: u64) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(read_code(a, 8));
    b
}

/// What instrumenting libraries later needs from the start-up.
struct Runtime {
    s: Session,
    known: Vec<Known>,
    me: String,
    interp: Option<String>,
    /// The process whose session this is: a fork child shares the parent's
    /// symbol table file but not its id counter, so it adds nothing to it.
    pid: u32,
}

static RUNTIME: std::sync::Mutex<Option<Runtime>> = std::sync::Mutex::new(None);

/// Detaching (`fctrace -p`): the instrumentation's state is dropped (its
/// code is gone: `runtime::journal::undo`); no function has a return site.
pub fn detach() {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner()).take();
    crate::runtime::frames::set_ret_sites(Vec::new());
}

/// Makes the dynamic linker's notification function (`_r_debug.r_brk`,
/// `_dl_debug_state`, where debuggers put a breakpoint) jump to
/// [`on_link_map_change`]. It is called once the objects of a `dlopen`
/// are mapped, before they are relocated and their constructors run, and
/// once the objects of a `dlclose` are unmapped.
fn install_load_hook(modules: &[Loaded], interp: &Option<String>) -> Result<(), String> {
    // SAFETY: _r_debug is the dynamic linker's initialised structure.
    let brk = unsafe { (*loader::r_debug()).r_brk };
    let ld = modules
        .iter()
        .find(|m| Some(&m.path) == interp.as_ref() && (m.lo..m.hi).contains(&brk))
        .or_else(|| modules.iter().find(|m| (m.lo..m.hi).contains(&brk)))
        .ok_or("the dynamic linker's notification function is in no module")?;
    if brk + 32 > ld.hi {
        return Err("unexpected notification function".into());
    }
    let code = read_code(brk, 32);
    // [endbr64] ret, then at least 4 bytes of padding to hold a jmp rel32.
    let at = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        4
    } else {
        0
    };
    if code[at] != 0xc3 {
        return Err("the notification function is not a bare return".into());
    }
    let mut dec = iced_x86::Decoder::with_ip(64, &code[at + 1..], brk + at as u64 + 1, 0);
    let mut covered = 0usize;
    while covered < 4 {
        let i = dec.decode();
        if i.is_invalid()
            || !matches!(
                i.mnemonic(),
                iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Int3
            )
        {
            return Err("no padding after the notification function".into());
        }
        covered += i.len();
    }
    let mut arena = Arena::near(ld.lo, ld.hi, 4096).ok_or("no free address space near ld.so")?;
    let mut tramp = vec![0xff, 0x25, 0, 0, 0, 0];
    tramp.extend_from_slice(&(on_link_map_change as *const () as u64).to_le_bytes());
    let t = arena.put(&tramp);
    arena.seal();
    let from = brk + at as u64;
    let rel = t as i64 - (from as i64 + 5);
    let rel = i32::try_from(rel).map_err(|_| "trampoline out of reach")?;
    let mut jmp = [0xe9, 0, 0, 0, 0];
    jmp[1..].copy_from_slice(&rel.to_le_bytes());
    let end = from + jmp.len() as u64;
    protect(
        from,
        end,
        libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
    )?;
    journal::before_write(from, jmp.len());
    // SAFETY: the bytes were made writable above; they are padding after
    // the notification function, which nothing runs.
    unsafe { std::ptr::copy_nonoverlapping(jmp.as_ptr(), from as *mut u8, jmp.len()) };
    protect(from, end, libc::PROT_READ | libc::PROT_EXEC)
}

/// The dynamic linker changed its list of objects (it holds its load lock:
/// calls are serialised). Instruments the libraries new to the base
/// namespace and forgets those that are gone.
extern "C" fn on_link_map_change() {
    let _busy = crate::runtime::tls::Busy::enter();
    // SAFETY: reading the state field of the dynamic linker's structure.
    if unsafe { (*loader::r_debug()).r_state } != loader::RT_CONSISTENT {
        return;
    }
    forget_spans();
    let _ = std::panic::catch_unwind(|| {
        let mut guard = match RUNTIME.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(rt) = guard.as_mut() {
            sync_modules(rt);
        }
    });
}

fn sync_modules(rt: &mut Runtime) {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } as u32 != rt.pid {
        return;
    }
    let modules = loaded_modules();
    let (kept, gone): (Vec<Known>, Vec<Known>) = std::mem::take(&mut rt.known)
        .into_iter()
        .partition(|k| modules.iter().any(|m| k.is(m)));
    rt.known = kept;
    for k in gone {
        // Its int3s are gone with it (another object may be loaded there),
        // and the ways into its functions.
        crate::interpose::signal::drop_traps(k.base);
        crate::runtime::real::clear_bypasses(k.lo, k.hi);
        let s = &mut rt.s;
        let mut i = 0;
        while i < s.arenas.len() {
            if s.arenas[i].0 == k.path && s.arenas[i].1 == k.base {
                let (path, base, at, size) = s.arenas.swap_remove(i);
                let arena = Arena {
                    base: at,
                    size,
                    used: 0,
                };
                s.free_arenas.push((path, base, arena));
            } else {
                i += 1;
            }
        }
    }
    let mut changed = false;
    for m in modules.iter().skip(1) {
        if !is_instrumentable_lib(m, &rt.me, &rt.interp)
            || rt
                .known
                .iter()
                .any(|k| k.base == m.base && k.path == m.path)
        {
            continue;
        }
        let entries = match with_analysis(&m.path, false, false, |info, funcs| {
            prepare_lib(&mut rt.s, m, info, funcs)
        })
        .and_then(finish_lib)
        {
            Ok(e) => e,
            Err(e) => {
                crate::runtime::log::warn(&format!("{}: {e}", m.path));
                Vec::new()
            }
        };
        rt.known.push(Known::new(m, &entries));
        changed = true;
    }
    if changed {
        if let Err(e) = publish(&mut rt.s) {
            crate::runtime::log::warn(&format!("cannot write the symbol table: {e}"));
        }
    }
}
