//! The flags of a session's functions: one byte per function id (and
//! per system call number), resolved once from the patterns; the C
//! runtime's functions; the switches of global triggers.

use fctrace_format::symtab::SymTab;
use fctrace_options::pattern::name_forms_at;
use fctrace_options::{FuncPattern, Options};
use std::collections::HashMap;

/// Flag bits of a function.
pub(super) const FILTER: u8 = 1;
pub(super) const NOTRACE: u8 = 2;
pub(super) const CALLER: u8 = 4;
pub(super) const TRIGGER: u8 = 8;
/// A `trace_on` trigger of the recording: the agent records the calls
/// open where tracing resumed at its entry ([`Visibility::pull`]).
pub(super) const RESUMES: u8 = 16;
/// Hidden without its subtree (the C runtime's own calls, calls into
/// shared libraries with `--no-libcall`): the calls it makes are shown in
/// its place, at its depth.
pub(super) const HIDE: u8 = 32;
/// A `-F` function of the recording (the agent recorded only what is
/// inside one): the tree opens no call of a chain outside it.
pub(super) const REC_FILTER: u8 = 64;
/// A `-N` function of the recording.
pub(super) const REC_NOTRACE: u8 = 128;

/// The C runtime's own functions, which run around `main` (crt1.o, crti.o,
/// crtbegin.o and the C library's start and exit paths) and Rust's
/// standard library initialisation run from `.init_array`: hidden unless
/// `--show-runtime` (symbol names; `::`-qualified ones are Rust paths,
/// matched in the demangled name).
pub const RUNTIME_FUNCTIONS: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "__do_global_ctors_aux",
    "__libc_start_main",
    "__libc_start_call_main",
    "__libc_csu_init",
    "__libc_csu_fini",
    "__libc_init_first",
    "__cxa_finalize",
    "_dl_relocate_static_pie",
    "__gmon_start__",
    "_dl_start",
    "_dl_init",
    "_dl_fini",
    "call_init",
    "_IO_cleanup",
];

/// Whether a function (raw symbol name, demangled name) is part of the
/// runtime ([`RUNTIME_FUNCTIONS`]).
pub fn is_runtime(raw: &str, demangled: &str) -> bool {
    RUNTIME_FUNCTIONS.contains(&raw)
        // Rust's std (ARGV_INIT_ARRAY::init_wrapper, ::really_init).
        || demangled.contains("::ARGV_INIT_ARRAY::")
}

/// Per session: flags by function id, and the triggers of each triggered
/// function (indices in `Options::triggers`).
pub(super) struct SessionFlags {
    pub(super) flags: Vec<u8>,
    pub(super) triggers: HashMap<u32, Vec<usize>>,
    /// `-F`/`-N` bits by system call number (`NAME@[syscall]`).
    pub(super) syscalls: Vec<u8>,
    /// uftrace's `time=T` and `trace` actions by function: the time
    /// filter while it runs (the innermost one's), and whether its calls
    /// are shown whatever the time filter.
    pub(super) times: HashMap<u32, (Option<u64>, bool)>,
}

/// A switch of tracing by a global trigger, at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Switch {
    On,
    Off,
    Finish,
}

/// Calls `f` with the id, module path and name forms ([`name_forms_at`]) of
/// each function of `table`, until it returns false.
pub(super) fn each_function(table: &SymTab, mut f: impl FnMut(u32, &str, [&str; 4]) -> bool) {
    for func in &table.functions {
        let module = table.module(func.module).map_or("", |m| m.path.as_str());
        let display = fctrace_symbols::demangle(&func.name);
        let at = fctrace_format::symtab::unnamed_function_name(module, func.addr);
        if !f(func.id, module, name_forms_at(&func.name, &display, &at)) {
            return;
        }
    }
}

/// The index of the module of `table`'s executable.
pub(super) fn exe_module(table: &SymTab) -> u32 {
    table
        .modules
        .iter()
        .find(|m| m.path == table.exe)
        .map_or(0, |m| m.index)
}

/// Whether `func` is hidden without its subtree ([`HIDE`]): the C
/// runtime's (unless `--show-runtime`), a shared library's with
/// `--no-libcall` (`exe`: [`exe_module`]).
pub(super) fn hidden(o: &Options, func: &fctrace_format::symtab::Function, exe: u32) -> bool {
    let runtime = !o.show_runtime
        && (RUNTIME_FUNCTIONS.contains(&func.name.as_str())
            || (func.name.contains("ARGV_INIT_ARRAY")
                && is_runtime(&func.name, &fctrace_symbols::demangle(&func.name))));
    runtime || (o.no_libcall && func.module != exe)
}

/// `-F`/`-N` bits of each system call number, from the patterns whose
/// module is `[syscall]` (`read@[syscall]`; a pattern without a module
/// names functions only).
pub(super) fn syscall_flags(o: &Options) -> Vec<u8> {
    let syscall = |ps: &[FuncPattern], name: &str| {
        ps.iter()
            .any(|p| p.module() == Some(crate::syscalls::SYSCALL_MODULE) && p.matches_name(name))
    };
    (0..512u32)
        .map(|nr| {
            let n = crate::syscalls::name(nr);
            let mut bits = 0;
            if syscall(&o.filters, &n) {
                bits |= FILTER;
            }
            if syscall(&o.notrace, &n) {
                bits |= NOTRACE;
            }
            bits
        })
        .collect()
}
