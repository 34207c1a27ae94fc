//! The program's calls into libraries (its PLT entries and GOT imports):
//! which library each reaches, their stubs, and the functions the agent
//! interposes (binding the program's GOT slots to them when attaching,
//! and the real functions they forward to).

use super::loaded::{agent_module, in_agent, loaded_modules, module_of, read_code, Loaded};
use super::module_file::with_analysis_of;
use super::session::Session;
use super::stubs::{write_word, Stubs, STUB_ESTIMATE};
use crate::arch::x86_64::patch::{self, Mode, Plan};
use fctrace_format::symtab::{FuncKind, FuncStatus, FunctionLine};
use fctrace_symbols::ElfInfo;

/// Functions traced entry-only (their call is recorded, their return
/// address is left alone). Those that return twice: setjmp would save the
/// stub's address, a vfork child would pop the parent's shadow entry. And
/// `__libc_start_main`, which never returns: it would hold every trace
/// open to the end.
pub(super) const RETURNS_TWICE: &[&str] = &[
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
pub(super) fn forwarded_functions() -> Vec<u64> {
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
        let r = with_analysis_of(&m.path, false, true, false, |info, _| {
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

/// Which of module `m`'s GOT import slots its code loads as a pointer
/// that may be kept (not only called through:
/// `arch::x86_64::escape`), looking at its executable mappings.
pub(super) fn slots_read_as_pointers(m: &Loaded, info: &ElfInfo) -> std::collections::HashSet<u64> {
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
pub(super) fn instrument_imports(
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
    let imp = import_targets(s, m, info, first)?;
    s.write_new_modules()?;
    let mut stubs = Stubs::open(s, m, 4096 + n * STUB_ESTIMATE);
    plt_imports(s, &mut stubs, m, info, &imp, lib_entries)?;
    got_imports(s, &mut stubs, m, info, &imp, lib_entries, loaded)?;
    Stubs::finish(stubs)
}

/// The program's imports, in id order (its PLT entries, then its GOT
/// imports), from `first` on: for each, the module its line names and the
/// function it reaches (`None`: one the agent interposes, or unresolved).
struct Imports {
    first: u32,
    modules: Vec<u32>,
    targets: Vec<Option<u64>>,
}

/// Resolves the imports of the program `m` (their ids from `first` on)
/// and notes their modules in the session.
fn import_targets(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    first: u32,
) -> Result<Imports, String> {
    // The modules of the imports, with their lines first. An import that
    // resolves to the program itself (`__cxa_pure_virtual` defined by
    // clang), or to nothing, is the program's: its own module, which with
    // -l is not module 0 (the libraries come first).
    let own = s.module_index(&m.path, m.base)?;
    let mut modules = Vec::with_capacity(info.plt.len() + info.got_imports.len());
    let mut targets = Vec::with_capacity(info.plt.len() + info.got_imports.len());
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
    Ok(Imports {
        first,
        modules,
        targets,
    })
}

/// The stubs and lines of the program's PLT entries.
fn plt_imports(
    s: &mut Session,
    stubs: &mut Result<Stubs, String>,
    m: &Loaded,
    info: &ElfInfo,
    imp: &Imports,
    lib_entries: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    let mut scratch = Vec::new();
    for (k, p) in info.plt.iter().enumerate() {
        let id = imp.first + k as u32;
        let addr = m.base + p.addr;
        let status = if imp.targets[k].is_some_and(|t| lib_entries.contains(&t)) {
            FuncStatus::NotTraced("traced inside its library (-l)".into())
        } else if PROFILING_HOOKS.contains(&p.name.as_str()) {
            FuncStatus::NotTraced(PROFILING_HOOK.into())
        } else if let Some(why) = crate::recording::select::too_small(p.size) {
            FuncStatus::NotTraced(why)
        } else {
            let code = read_code(addr, p.size as usize);
            let around = patch::Around::default();
            match patch::plan(addr, p.size as usize, code, around, &mut scratch) {
                Ok(plan) => {
                    let path = s.modules[imp.modules[k] as usize].path.clone();
                    let flags = s.note_flags(id, &path, &p.name, None);
                    let mode = import_mode(&p.name, &path);
                    if let (Some(t), Mode::Traced) = (imp.targets[k], mode) {
                        crate::recording::filter::note_import_range(id, t);
                    }
                    let moved = read_code(plan.moved_at, plan.moved_len);
                    Stubs::add(stubs, s, m, id, &plan, moved, mode, None, flags)
                }
                Err(reason) => FuncStatus::NotTraced(reason),
            }
        };
        s.write_line(&FunctionLine {
            id,
            module: imp.modules[k],
            addr: p.addr,
            size: p.size,
            kind: FuncKind::Plt,
            status: &status,
            name: &p.name,
        })?;
    }
    Ok(())
}

/// The stubs and lines of the program's GOT imports (calls through a GOT
/// slot without a PLT entry): each slot is pointed at a stub whose body
/// jumps to its target. `loaded`: slots read as pointers.
fn got_imports(
    s: &mut Session,
    stubs: &mut Result<Stubs, String>,
    m: &Loaded,
    info: &ElfInfo,
    imp: &Imports,
    lib_entries: &std::collections::HashSet<u64>,
    loaded: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    for (k, g) in info.got_imports.iter().enumerate() {
        let k = info.plt.len() + k;
        let id = imp.first + k as u32;
        let slot = m.base + g.got;
        let target = imp.targets[k].unwrap_or(0);
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
            let path = s.modules[imp.modules[k] as usize].path.clone();
            let flags = s.note_flags(id, &path, &g.name, None);
            let mode = import_mode(&g.name, &path);
            if matches!(mode, Mode::Traced) {
                crate::recording::filter::note_import_range(id, target);
            }
            Stubs::add(stubs, s, m, id, &plan, &[], mode, Some(slot), flags)
        };
        s.write_line(&FunctionLine {
            id,
            module: imp.modules[k],
            addr: g.got,
            size: 8,
            kind: FuncKind::Got,
            status: &status,
            name: &g.name,
        })?;
    }
    Ok(())
}
