//! Finds the loaded modules and their functions, patches them, and writes
//! the session's symbol table.

use crate::shm::Shm;
use crate::x86_64::arena::Arena;
use crate::x86_64::codegen::{self, Common, Params};
use crate::x86_64::patch::{self, Mode, Plan};
use fctrace_format::symtab::{self, FuncKind, FuncStatus, Function, Module};
use std::ffi::CStr;
use std::io::Write;

struct Loaded {
    path: String,
    base: u64,
    lo: u64,
    hi: u64,
    /// PT_INTERP of the main program: the dynamic linker's path.
    interp: Option<String>,
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
];

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
            for ph in phdrs {
                if ph.p_type == libc::PT_LOAD {
                    lo = lo.min(info.dlpi_addr + ph.p_vaddr);
                    hi = hi.max(info.dlpi_addr + ph.p_vaddr + ph.p_memsz);
                }
                if ph.p_type == libc::PT_INTERP {
                    let p = (info.dlpi_addr + ph.p_vaddr) as *const libc::c_char;
                    interp = Some(CStr::from_ptr(p).to_string_lossy().into_owned());
                }
            }
            v.push(Loaded {
                path: name,
                base: info.dlpi_addr,
                lo,
                hi,
                interp,
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

/// The path of the module that contains `addr`.
fn module_of(addr: u64) -> Option<String> {
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

fn resolve(name: &str) -> Option<u64> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlsym with a valid C string.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    (!p.is_null()).then_some(p as u64)
}

/// One function to patch.
struct Job {
    id: u32,
    plan: Plan,
    mode: Mode,
    /// For GOT imports: the GOT slot to redirect (no code is patched).
    got_slot: Option<u64>,
}

struct Session {
    out: std::io::BufWriter<std::fs::File>,
    functions: Vec<Function>,
    modules: Vec<Module>,
    params: Params,
    /// Per function id: the address its traced frames return to.
    ret_sites: Vec<u64>,
}

impl Session {
    fn module_index(&mut self, path: &str, base: u64) -> Result<u32, String> {
        if let Some(m) = self.modules.iter().find(|m| m.path == path) {
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

    fn add(&mut self, f: Function) -> u32 {
        let id = self.functions.len() as u32;
        self.functions.push(Function { id, ..f });
        id
    }
}

fn read_code(addr: u64, len: usize) -> &'static [u8] {
    // SAFETY: callers pass ranges inside a module's mapped, executable
    // segments (checked against the module's PT_LOAD span).
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

pub fn instrument_process(shm: &Shm, sid: u32, dir: &str, nest: bool) -> Result<(), String> {
    let modules = loaded_modules();
    let main = modules.first().ok_or("no modules loaded")?;
    let sym_path = format!("{dir}/sessions/{sid}.sym");
    let file =
        std::fs::File::create(&sym_path).map_err(|e| format!("cannot write {sym_path}: {e}"))?;
    let mut out = std::io::BufWriter::new(file);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    symtab::write_header(&mut out, sid, pid, &main.path).map_err(|e| e.to_string())?;
    let interp = main.interp.clone();
    let params = Params {
        tls: crate::tls::offset(),
        buf_size: shm.layout.buf_size,
        slow_path: crate::thread::slow_path as *const () as u64,
        lost_counter: &shm.header().lost_events as *const _ as u64,
        xsave_size: codegen::xsave_size(),
    };
    let mut s = Session {
        out,
        functions: Vec::new(),
        modules: Vec::new(),
        params,
        ret_sites: Vec::new(),
    };
    let me = module_of(instrument_process as *const () as u64).unwrap_or_default();

    // Libraries first (with -l), so that the program's PLT entries for
    // functions traced inside a library can be left alone.
    let mut lib_entries: std::collections::HashSet<u64> = Default::default();
    for m in modules.iter().skip(1) {
        if !nest {
            break;
        }
        if m.path.is_empty()
            || m.path == me
            || Some(&m.path) == interp.as_ref()
            || m.path.contains("linux-vdso")
        {
            continue;
        }
        match analyze(&m.path).and_then(|info| instrument_module(&mut s, m, &info, false)) {
            Ok(entries) => lib_entries.extend(entries),
            Err(e) => crate::warn(&format!("{}: {e}", m.path)),
        }
    }
    instrument_main(&mut s, main, &lib_entries)?;
    let mut sites = std::mem::take(&mut s.ret_sites);
    sites.resize(s.functions.len(), 0);
    crate::unwind::set_ret_sites(sites);
    for m in &s.modules {
        symtab::write_module(&mut s.out, m).map_err(|e| e.to_string())?;
    }
    for f in &s.functions {
        symtab::write_function(&mut s.out, f).map_err(|e| e.to_string())?;
    }
    s.out.flush().map_err(|e| e.to_string())?;
    Ok(())
}

/// Patches every function of a module. Returns the runtime entry addresses
/// that are traced.
fn analyze(path: &str) -> Result<fctrace_symbols::ElfInfo, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    fctrace_symbols::analyze(&data).map_err(|e| e.to_string())
}

fn instrument_module(
    s: &mut Session,
    m: &Loaded,
    info: &fctrace_symbols::ElfInfo,
    is_main: bool,
) -> Result<Vec<u64>, String> {
    let midx = s.module_index(&m.path, m.base)?;
    let mut jobs = Vec::new();
    let mut traced = Vec::new();
    for (k, f) in info.functions.iter().enumerate() {
        let addr = m.base + f.addr;
        // A symbol without a size ends at the latest where the next begins.
        let next = info
            .functions
            .get(k + 1)
            .map(|n| n.addr)
            .unwrap_or(f.addr + 4096)
            .min(f.addr + 4096);
        let (size, pad_end) = if f.size == 0 && addr >= m.lo && m.base + next <= m.hi {
            match patch::infer_size(addr, read_code(addr, (next - f.addr) as usize)) {
                Some(n) => (n as u64, next),
                None => (0, f.addr),
            }
        } else {
            (f.size, f.pad_end)
        };
        let status = if f.ifunc {
            Err("IFUNC resolver, not the function".to_string())
        } else if NOT_CALLED.contains(&f.name.as_str()) || (is_main && f.addr == info.entry) {
            Err("entered without a call".to_string())
        } else if !is_main && is_unwinder(&m.path, &f.name) {
            Err("part of the unwinder, whose frames must stay untouched".to_string())
        } else if addr < m.lo || m.base + pad_end > m.hi {
            Err("outside the loaded segments".to_string())
        } else {
            let code = read_code(addr, (pad_end.max(f.addr + size) - f.addr) as usize);
            patch::plan(addr, size as usize, code)
        };
        let mode = if RETURNS_TWICE.contains(&f.name.as_str()) {
            Mode::EntryOnly
        } else {
            Mode::Traced
        };
        let func = Function {
            id: 0,
            module: midx,
            addr: f.addr,
            size,
            kind: FuncKind::Function,
            status: FuncStatus::Traced,
            name: f.name.clone(),
        };
        let id = s.add(func);
        match status {
            Ok(plan) => {
                traced.push(addr);
                jobs.push(Job {
                    id,
                    plan,
                    mode,
                    got_slot: None,
                });
            }
            Err(reason) => s.functions[id as usize].status = FuncStatus::NotTraced(reason),
        }
    }
    apply(s, m, jobs)?;
    Ok(traced)
}

fn instrument_main(
    s: &mut Session,
    m: &Loaded,
    lib_entries: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    let info = analyze(&m.path)?;
    // The program's own functions.
    instrument_module(s, m, &info, true)?;
    // Its calls into libraries, through the PLT and through the GOT.
    let mut jobs = Vec::new();
    for p in &info.plt {
        let target = resolve(&p.name);
        let lib = target.and_then(module_of);
        let midx = match &lib {
            Some(path) if *path != m.path => s.module_index(path, 0)?,
            _ => 0,
        };
        let addr = m.base + p.addr;
        let func = Function {
            id: 0,
            module: midx,
            addr: p.addr,
            size: p.size,
            kind: FuncKind::Plt,
            status: FuncStatus::Traced,
            name: p.name.clone(),
        };
        let id = s.add(func);
        if target.is_some_and(|t| lib_entries.contains(&t)) {
            s.functions[id as usize].status =
                FuncStatus::NotTraced("traced inside its library (-l)".into());
            continue;
        }
        let mode = if RETURNS_TWICE.contains(&p.name.as_str()) {
            Mode::EntryOnly
        } else {
            Mode::Traced
        };
        match patch::plan(addr, p.size as usize, read_code(addr, p.size as usize)) {
            Ok(plan) => jobs.push(Job {
                id,
                plan,
                mode,
                got_slot: None,
            }),
            Err(reason) => s.functions[id as usize].status = FuncStatus::NotTraced(reason),
        }
    }
    for g in &info.got_imports {
        let slot = m.base + g.got;
        // SAFETY: the GOT slot lies in the module's mapped data (relocated
        // before constructors run).
        let target = unsafe { (slot as *const u64).read() };
        let lib = module_of(target);
        let midx = match &lib {
            Some(path) if *path != m.path => s.module_index(path, 0)?,
            _ => 0,
        };
        let func = Function {
            id: 0,
            module: midx,
            addr: g.got,
            size: 8,
            kind: FuncKind::Got,
            status: FuncStatus::Traced,
            name: g.name.clone(),
        };
        let id = s.add(func);
        if target == 0 {
            s.functions[id as usize].status =
                FuncStatus::NotTraced("unresolved (weak) import".into());
            continue;
        }
        if lib_entries.contains(&target) {
            s.functions[id as usize].status =
                FuncStatus::NotTraced("traced inside its library (-l)".into());
            continue;
        }
        let mode = if RETURNS_TWICE.contains(&g.name.as_str()) {
            Mode::EntryOnly
        } else {
            Mode::Traced
        };
        // The stub's body is a jump to the real target.
        let jmp = iced_x86::Instruction::with_branch(iced_x86::Code::Jmp_rel32_64, target)
            .map_err(|e| e.to_string())?;
        let mut jmp = jmp;
        jmp.set_ip(slot); // any address that no other instruction uses
        let plan = Plan {
            patch_at: 0,
            patch_len: 0,
            moved: vec![jmp],
            resume: None,
            trampoline: None,
        };
        jobs.push(Job {
            id,
            plan,
            mode,
            got_slot: Some(slot),
        });
    }
    apply(s, m, jobs)?;
    Ok(())
}

/// Builds the stubs of `jobs` in an arena near the module, then patches.
fn apply(s: &mut Session, m: &Loaded, jobs: Vec<Job>) -> Result<(), String> {
    // Write the symbol table lines first: ids are known, statuses final
    // except for jobs that fail below (rewritten then).
    if jobs.is_empty() {
        return Ok(());
    }
    let size = 4096
        + jobs
            .iter()
            .map(|j| 96 + j.plan.moved.iter().map(|i| i.len() + 16).sum::<usize>())
            .sum::<usize>();
    let mut arena =
        Arena::near(m.lo, m.hi, size).ok_or("no free address space near the module for stubs")?;
    let (code, common): (Vec<u8>, Common) = codegen::assemble_common(arena.cursor(), &s.params)
        .map_err(|e| format!("code generation: {e}"))?;
    arena.put(&code);
    let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut got_writes: Vec<(u64, u64)> = Vec::new();
    for j in jobs {
        let at = arena.cursor();
        let built = patch::build_stub(&j.plan, at, &common, j.id, j.mode);
        let stub = match built {
            Ok(st) if st.code.len() <= arena.remaining() => st,
            Ok(_) => {
                s.functions[j.id as usize].status = FuncStatus::NotTraced("stub arena full".into());
                continue;
            }
            Err(e) => {
                s.functions[j.id as usize].status = FuncStatus::NotTraced(e);
                continue;
            }
        };
        if let Some(slot) = j.got_slot {
            let at = arena.put(&stub.code);
            got_writes.push((slot, at));
        } else {
            if !patch::reachable(&j.plan, at) {
                s.functions[j.id as usize].status =
                    FuncStatus::NotTraced("stub out of jump range".into());
                continue;
            }
            let at = arena.put(&stub.code);
            writes.extend(patch::patch_bytes(&j.plan, at));
        }
        if let Some(site) = stub.ret_site {
            if s.ret_sites.len() <= j.id as usize {
                s.ret_sites.resize(j.id as usize + 1, 0);
            }
            s.ret_sites[j.id as usize] = site;
        }
        if j.mode == Mode::EntryOnly {
            s.functions[j.id as usize].status = FuncStatus::EntryOnly;
        }
    }
    arena.seal();
    write_code(&writes)?;
    for (slot, stub) in got_writes {
        write_word(slot, stub)?;
    }
    Ok(())
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

/// Applies code patches, page range by page range. Pages stay executable
/// throughout (the agent itself may be running library code on them).
fn write_code(writes: &[(u64, Vec<u8>)]) -> Result<(), String> {
    if writes.is_empty() {
        return Ok(());
    }
    let lo = writes.iter().map(|w| w.0).min().unwrap();
    let hi = writes.iter().map(|w| w.0 + w.1.len() as u64).max().unwrap();
    protect(lo, hi, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC)?;
    for (at, bytes) in writes {
        // SAFETY: the range was made writable above; no other thread runs yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *at as *mut u8, bytes.len()) };
    }
    protect(lo, hi, libc::PROT_READ | libc::PROT_EXEC)?;
    Ok(())
}

/// Redirects a GOT slot (which may lie in a read-only RELRO page).
fn write_word(slot: u64, value: u64) -> Result<(), String> {
    let prot = page_prot(slot).unwrap_or(libc::PROT_READ);
    protect(slot, slot + 8, libc::PROT_READ | libc::PROT_WRITE)?;
    // SAFETY: the slot is an aligned GOT entry, writable now.
    unsafe { (slot as *mut u64).write(value) };
    protect(slot, slot + 8, prot)?;
    Ok(())
}

fn page_prot(addr: u64) -> Option<i32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for l in maps.lines() {
        let mut it = l.split_whitespace();
        let (range, perms) = (it.next()?, it.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        if (a..b).contains(&addr) {
            let p = perms.as_bytes();
            let mut prot = 0;
            if p[0] == b'r' {
                prot |= libc::PROT_READ;
            }
            if p[1] == b'w' {
                prot |= libc::PROT_WRITE;
            }
            if p[2] == b'x' {
                prot |= libc::PROT_EXEC;
            }
            return Some(prot);
        }
    }
    None
}

/// The unwinder walks its own frames: with `-l`, none of its functions may
/// have their returns taken over (nor glibc's `backtrace`, which drives it).
fn is_unwinder(module: &str, name: &str) -> bool {
    module.contains("libgcc_s")
        || name.starts_with("_Unwind_")
        || name == "backtrace"
        || name == "__backtrace"
}
