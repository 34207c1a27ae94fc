//! The module walk: which modules and functions are instrumented (and why
//! not, for those left alone), each function's patch planned from its
//! code and its stub built, its line written to the symbol table.

use super::imports::{instrument_imports, slots_read_as_pointers, RETURNS_TWICE};
use super::loaded::Loaded;
use super::module_file::{code_of, CodeWindow};
use super::session::{Session, PY_EVAL_FRAME, PY_EVAL_ID};
use super::startcache::{with_module_analysis, Cached, Plans};
use super::stubs::{Stubs, STUB_ESTIMATE};
use crate::arch::x86_64::patch::{self, Mode};
use fctrace_format::symtab::{unnamed_function_name, FuncKind, FuncStatus, FunctionLine};
use fctrace_symbols::{ElfInfo, FuncRef};

/// libc's own definition of a context switch the agent wraps (or its
/// internal alias): the agent's wrapper calls it, the program's call is
/// what is recorded (`setcontext` too, entry-only at the program's call;
/// glibc's `__start_context` also calls it directly, unrecorded then).
fn is_wrapped_switch(name: &str) -> bool {
    ["swapcontext", "setcontext"].contains(&name.trim_start_matches('_'))
}

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

/// With -l, instruments the library `m` (or says in a note why not);
/// returns its traced entries.
pub(super) fn instrument_library(s: &mut Session, m: &Loaded) -> Result<Vec<u64>, String> {
    with_module_analysis(m, false, false, false, |info, funcs, cached| {
        prepare_lib(s, m, info, funcs, cached)
    })
    .and_then(finish_lib)
}

/// With -l, a library's stubs before they are applied (None: the library
/// is not instrumented, said in a note).
#[allow(clippy::type_complexity)]
fn prepare_lib(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    funcs: &[FuncRef],
    cached: &mut Cached,
) -> Result<Option<(Vec<u64>, Result<Stubs, String>)>, String> {
    if let Some(why) = skipped(m, info, funcs) {
        crate::runtime::log::note(&why);
        return Ok(None);
    }
    instrument_module(s, m, info, funcs, false, true, cached).map(Some)
}

/// Applies what `prepare_lib` prepared; returns the traced entries.
#[allow(clippy::type_complexity)]
fn finish_lib(p: Option<(Vec<u64>, Result<Stubs, String>)>) -> Result<Vec<u64>, String> {
    p.map_or(Ok(Vec::new()), finish_module)
}

/// Asks the CPU to bring the cache line at `p` in (a hint: any address).
#[inline]
fn prefetch(p: *const u8) {
    // SAFETY: a prefetch never faults, whatever the address; SSE is part
    // of x86_64.
    unsafe { std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0) };
}

/// With -l, libraries are instrumented except the agent, the dynamic
/// linker, the vDSO and sanitizer runtimes (the tool the program was
/// built with: their functions run inside every interceptor and every
/// stack they collect, whose frames would hold stub addresses).
pub(super) fn is_instrumentable_lib(m: &Loaded, me: &str, interp: &Option<String>) -> bool {
    !(m.path.is_empty()
        || m.path == me
        || fctrace_symbols::sanitizer::is_runtime(m.path.as_bytes())
        || Some(&m.path) == interp.as_ref()
        || m.path.contains("linux-vdso"))
}

/// Builds the stub of every function of a module and writes their lines.
/// `code_free`: the analysis read no code (`with_analysis` without
/// imports), so each function's `pad_end` is where to look for its padding
/// up to. Returns the runtime entry addresses that are traced (for
/// libraries only: `is_main` gives none) and the stubs, whose patches
/// `finish_module` applies (after the caller has unmapped the module's
/// file: its pages and the code pages the patches copy are not resident
/// at the same time). `cached`: the plans the start-up cache has for the
/// module, or the entry to complete with those made here.
#[allow(clippy::type_complexity)]
fn instrument_module(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    funcs: &[FuncRef],
    is_main: bool,
    code_free: bool,
    cached: &mut Cached,
) -> Result<(Vec<u64>, Result<Stubs, String>), String> {
    let midx = s.module_index(&m.path, m.base)?;
    s.set_debug_ids(midx, info);
    s.write_new_modules()?;
    let first = s.next_id;
    s.next_id += (funcs.len() + info.left_out.len()) as u32;
    s.ret_sites.resize(s.next_id as usize, 0);
    let mut traced = Vec::new();
    // Every patch is planned first (from the original code), then stubs
    // are built (and lines written) function by function; the code
    // patches are applied at the end, once every stub is built from the
    // original code.
    let mut stubs = Stubs::open(s, m, 4096 + funcs.len() * STUB_ESTIMATE);
    let own_prefix = info
        .markers
        .iter()
        .any(|k| k == "__patchable_function_entries");
    // Go code is left alone, and Go's signal handler must see no int3 of
    // the agent's: no trap fallback in a module that holds Go code.
    let go = info.go.as_ref().and_then(|g| go_text(m, g));
    if let Some(r) = &go {
        crate::runtime::log::note(&go_note(&m.path, r));
    }
    let plans = match cached {
        Cached::Hit(plans) => {
            if crate::recording::args::names::wanted() {
                for f in funcs {
                    crate::recording::args::names::note(m.base + f.addr, &f.name);
                }
            }
            std::mem::take(plans)
        }
        Cached::Miss(pending) => {
            let trap = info.go.is_none()
                && may_trap(&m.path)
                && !crate::interpose::signal::trap_handler_foreign();
            let ctx = PlanContext {
                m,
                info,
                funcs,
                is_main,
                code_free,
                trap,
                own_prefix,
                go: &go,
            };
            let plans = final_plans(&ctx);
            if let Some(p) = pending.take() {
                p.finish(&plans, m.base);
            }
            plans
        }
    };
    let Plans {
        list,
        moved: all_moved,
    } = plans;
    for (k, (f, (size, planned, at))) in funcs.iter().zip(list).enumerate() {
        let unnamed;
        let name: &str = if f.is_unnamed() {
            unnamed = unnamed_function_name(&m.path, f.addr);
            &unnamed
        } else {
            &f.name
        };
        let addr = m.base + f.addr;
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
                let flags = s.note_flags(id, &m.path, name, Some(f.addr));
                if matches!(mode, Mode::Traced) {
                    crate::recording::filter::note_range(id, addr, size);
                }
                // The instructions the stub moves, read before the
                // module's code is written.
                let moved = if plan.moved_count != 0 {
                    &all_moved[at..at + plan.moved_len]
                } else {
                    &[]
                };
                let status = Stubs::add(&mut stubs, s, m, id, &plan, moved, mode, None, flags);
                if let (Ok(st), FuncStatus::Traced | FuncStatus::TracedTrap) = (&stubs, &status) {
                    if !is_main && s.forwarded.binary_search(&addr).is_ok() {
                        s.forwarded_bodies.push((addr, st.last_body));
                    }
                }
                status
            }
            Err(reason) => FuncStatus::NotTraced(reason),
        };
        if name == PY_EVAL_FRAME && status.is_traced() {
            PY_EVAL_ID.store(id, std::sync::atomic::Ordering::Relaxed);
        }
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
    write_left_out(s, m, info, midx, first + funcs.len() as u32)?;
    Ok((traced, stubs))
}

/// Each function's size and plan (or why it has none), with the
/// instructions the plan moves: as planned from the module's original
/// code, less the plans that another function's jump into their first
/// bytes forbids.
fn final_plans(c: &PlanContext) -> Plans {
    let m = c.m;
    let mut win = CodeWindow::open(m, c.info.build_id.as_deref());
    let (plans, jumped_into) = plan_functions(c, &mut win);
    let mut out = Plans {
        list: Vec::with_capacity(plans.len()),
        moved: Vec::with_capacity(plans.len() * 8),
    };
    for (f, (size, planned)) in c.funcs.iter().zip(plans) {
        let addr = m.base + f.addr;
        let own = (addr, addr + size);
        let planned = planned
            .and_then(|p| overwrites_target(&p, &jumped_into, own, &mut win).map_or(Ok(p), Err));
        let at = out.moved.len();
        if let Ok(plan) = &planned {
            if plan.moved_count != 0 {
                let hi = plan.moved_at + plan.moved_len as u64;
                out.moved
                    .extend_from_slice(code_of(&mut win, plan.moved_at, hi));
            }
        }
        out.list.push((size, planned, at));
    }
    out
}

/// What planning the patches of a module's functions needs.
struct PlanContext<'a, 'f> {
    m: &'a Loaded,
    info: &'a ElfInfo,
    funcs: &'a [FuncRef<'f>],
    is_main: bool,
    /// The analysis read no code (see `instrument_module`).
    code_free: bool,
    /// The trap fallback may be used.
    trap: bool,
    /// `-fpatchable-function-entry`: the nops before a function are its.
    own_prefix: bool,
    /// The module's Go code.
    go: &'a Option<std::ops::Range<u64>>,
}

/// Each function's size and the plan of its patch (or why it has none),
/// planned from the module's original code; and, for a module whose
/// functions are found from its FDEs, the jumps from one function (or
/// split part) into another's first bytes (see [`overwrites_target`]).
#[allow(clippy::type_complexity)]
fn plan_functions(
    c: &PlanContext,
    win: &mut Option<CodeWindow>,
) -> (Vec<(u64, Result<patch::Plan, String>)>, Jumps) {
    let (m, funcs) = (c.m, c.funcs);
    let unnamed = funcs.iter().any(|f| f.is_unnamed());
    let mut starts: Vec<u64> = funcs.iter().map(|f| m.base + f.addr).collect();
    starts.sort_unstable();
    let windows = patch::EntryWindows::new(&starts);
    let hits = module_hits(m, &starts, &windows, win);
    let mut scratch = Vec::with_capacity(64);
    // The padding after the previous function (runtime addresses: start,
    // end) and how far that function's patch writes into it: a 2-byte
    // entry jump may put its trampoline in the rest, so that two functions
    // never claim the same bytes. Not with -fpatchable-function-entry,
    // whose nops before a function are that function's.
    let mut prev_pad: Option<(u64, u64)> = None;
    let mut prev_writes_end = 0u64;
    let mut plans = Vec::with_capacity(funcs.len());
    let names_wanted = crate::recording::args::names::wanted();
    for (k, f) in funcs.iter().enumerate() {
        // The names lie in the file's string table in symbol order, not
        // in address order: each is a cache miss unless asked for ahead.
        if let Some(ahead) = funcs.get(k + 8) {
            prefetch(ahead.name.as_ptr());
        }
        let addr = m.base + f.addr;
        if names_wanted {
            crate::recording::args::names::note(addr, &f.name);
        }
        // A symbol without a size ends at the latest where the next begins.
        let next = funcs
            .get(k + 1)
            .map(|n| n.addr)
            .unwrap_or(f.addr + 4096)
            .min(f.addr + 4096);
        let (size, pad_end) = size_and_padding(m, f, next, c.code_free, win);
        let why = left_alone(m, c.info, f, pad_end, c.is_main, c.go)
            .or_else(|| crate::recording::select::left_out(&m.path, &f.name, f.addr, size));
        let planned = if let Some(why) = why {
            Err(why)
        } else {
            let before = match prev_pad {
                Some((lo, hi)) if !c.own_prefix && lo >= m.lo && lo < hi && hi <= addr => {
                    Some((lo, hi))
                }
                _ => None,
            };
            // The function and its padding, and the padding before it, in
            // one read.
            let from = before.map_or(addr, |(lo, _)| lo);
            let all = code_of(win, from, m.base + pad_end.max(f.addr + size));
            let code = &all[(addr - from) as usize..];
            let before = before.map(|(lo, hi)| patch::Before {
                at: lo,
                bytes: &all[(lo - from) as usize..(hi - from) as usize],
                free_from: prev_writes_end,
            });
            let around = patch::Around {
                before,
                trap: c.trap,
                hits: Some(hits_in(&hits, addr, addr + size)),
            };
            let body = &code[..(size as usize).min(code.len())];
            if f.is_unnamed() && patch::uses_return_address(addr, body) {
                Err(RA_REASON.to_string())
            } else {
                patch::plan(addr, size as usize, code, around, &mut scratch)
            }
        };
        prev_pad = Some((addr + size, m.base + pad_end.max(f.addr + size)));
        prev_writes_end = planned.as_ref().map_or(0, |p| p.writes_end());
        plans.push((size, planned));
    }
    let jumps = if unnamed {
        Jumps::new(hits, m, funcs, &plans, &c.info.left_out)
    } else {
        Jumps::default()
    };
    (plans, jumps)
}

/// Bytes of code read at a time by [`module_hits`].
const HIT_CHUNK: u64 = 1 << 17;

/// The branch patterns of the code of `m` that land in the first bytes of
/// a function (`starts`, sorted; see [`patch::Hit`]), by address: one
/// pass over the code from the first function to the last, a segment at
/// a time, instead of one per function.
fn module_hits(
    m: &Loaded,
    starts: &[u64],
    windows: &patch::EntryWindows,
    win: &mut Option<CodeWindow>,
) -> Vec<patch::Hit> {
    let mut out = Vec::new();
    for &(seg, _, len) in &m.segs {
        let seg_end = (seg + len).min(m.hi);
        let k = starts.partition_point(|&a| a < seg);
        let n = starts.partition_point(|&a| a < seg_end);
        let (Some(&first), Some(&last)) = (starts.get(k), starts[..n].last()) else {
            continue;
        };
        if k >= n || first < m.lo {
            continue;
        }
        // The last function's code: at most 4096 bytes (see plan_functions).
        let end = (last + 4096).min(seg_end);
        let mut lo = first;
        while lo < end {
            let hi = (lo + HIT_CHUNK).min(end);
            // A pattern starting before `hi` reads up to 6 bytes past it.
            let code = code_of(win, lo, (hi + 8).min(seg_end));
            patch::entry_hits(code, lo, (hi - lo) as usize, windows, &mut out);
            lo = hi;
        }
    }
    out.sort_unstable();
    out
}

/// The hits (sorted by address) in `[lo, hi)`.
fn hits_in(hits: &[patch::Hit], lo: u64, hi: u64) -> &[patch::Hit] {
    let a = hits.partition_point(|h| h.at < lo);
    let b = hits.partition_point(|h| h.at < hi);
    &hits[a..b.max(a)]
}

/// The jumps (byte patterns) of a module whose functions are found from
/// its FDEs into the first bytes of its functions, by target, and the
/// code they may come from (functions and FDEs left out, runtime ranges,
/// sorted).
#[derive(Default)]
struct Jumps {
    by_target: Vec<patch::Hit>,
    ranges: Vec<(u64, u64)>,
}

impl Jumps {
    fn new(
        hits: Vec<patch::Hit>,
        m: &Loaded,
        funcs: &[FuncRef],
        plans: &[(u64, Result<patch::Plan, String>)],
        left_out: &[fctrace_symbols::LeftOut],
    ) -> Jumps {
        let mut by_target: Vec<patch::Hit> = hits.into_iter().filter(|h| !h.call).collect();
        by_target.sort_unstable_by_key(|h| (h.target, h.at));
        let mut ranges: Vec<(u64, u64)> = funcs
            .iter()
            .zip(plans)
            .map(|(f, (size, _))| (m.base + f.addr, m.base + f.addr + size))
            .chain(
                left_out
                    .iter()
                    .map(|l| (m.base + l.addr, m.base + l.addr + l.size)),
            )
            .filter(|&(lo, hi)| hi > lo && lo >= m.lo && hi <= m.hi)
            .collect();
        ranges.sort_unstable();
        Jumps { by_target, ranges }
    }

    /// The code (function or FDE left out) holding `at`, other than
    /// `own`.
    fn source_of(&self, at: u64, own: (u64, u64)) -> Option<(u64, u64)> {
        let n = self.ranges.partition_point(|r| r.0 <= at);
        let r = *self.ranges.get(n.checked_sub(1)?)?;
        (at < r.1 && r != own).then_some(r)
    }
}

/// Why a function found from its FDE that moves its return address is
/// not patched (see `patch::uses_return_address`).
const RA_REASON: &str =
    "hand-written assembly that reads its own return address (the stub's would be there)";

/// Why `plan` cannot be applied, if a jump from other code (`jumps`)
/// lands in the bytes it overwrites after their first. `own`: the
/// function's code, whose own jumps the planner has checked. The jumps are
/// byte patterns: one that lands there is decoded with the code it comes
/// from, to tell a jump from bytes inside other instructions.
fn overwrites_target(
    plan: &patch::Plan,
    jumps: &Jumps,
    own: (u64, u64),
    win: &mut Option<CodeWindow>,
) -> Option<String> {
    let (lo, hi) = (plan.patch_at + 1, plan.patch_at + plan.patch_len as u64);
    let k = jumps.by_target.partition_point(|h| h.target < lo);
    let h = jumps.by_target[k..]
        .iter()
        .take_while(|h| h.target < hi)
        .find(|h| {
            jumps.source_of(h.at, own).is_some_and(|(from, end)| {
                let e = patch::Exit {
                    target: h.target,
                    from,
                    len: end - from,
                };
                e.is_real(code_of(win, from, end))
            })
        })?;
    Some(format!(
        "another function jumps into its first instructions (+{:#x})",
        h.target - plan.patch_at
    ))
}

/// Writes the lines of the module's FDEs that are not function entries
/// (a stripped file's split parts, PLT stubs, ...: see
/// `fctrace_symbols::LeftOut`), not traced with their reason, ids from
/// `first` on.
fn write_left_out(
    s: &mut Session,
    m: &Loaded,
    info: &ElfInfo,
    midx: u32,
    first: u32,
) -> Result<(), String> {
    for (k, l) in info.left_out.iter().enumerate() {
        s.write_line(&FunctionLine {
            id: first + k as u32,
            module: midx,
            addr: l.addr,
            size: l.size,
            kind: FuncKind::Function,
            status: &FuncStatus::NotTraced(l.reason.clone()),
            name: &unnamed_function_name(&m.path, l.addr),
        })?;
    }
    Ok(())
}

/// The size of function `f` of `m` (inferred from its code when its
/// symbol has none: `next` is where the next symbol starts, at most 4 KiB
/// on) and the end of the padding after it, module-relative: where to
/// look for its padding up to (`code_free`: the analysis read no code, so
/// `f.pad_end` is where to look up to).
fn size_and_padding(
    m: &Loaded,
    f: &FuncRef,
    next: u64,
    code_free: bool,
    win: &mut Option<CodeWindow>,
) -> (u64, u64) {
    let addr = m.base + f.addr;
    let end = f.addr + f.size;
    if f.size == 0 && addr >= m.lo && m.base + next <= m.hi {
        match patch::infer_size(addr, code_of(win, addr, m.base + next)) {
            Some(n) => (n as u64, next),
            None => (0, f.addr),
        }
    } else if code_free && f.size != 0 {
        // The padding after the function: the analysis read no code,
        // and gives where to look up to.
        let limit = f.pad_end;
        if limit > end && addr >= m.lo && m.base + limit <= m.hi {
            let pad = code_of(win, m.base + end, m.base + limit);
            (f.size, end + fctrace_symbols::padding_run(pad) as u64)
        } else {
            (f.size, end)
        }
    } else {
        (f.size, f.pad_end)
    }
}

/// Why function `f` of `m` (its padding up to `pad_end`) is left alone,
/// if it is: Go code (`go`: the module's Go code), an IFUNC resolver,
/// entered without a call, part of the unwinder or a context switch the
/// agent wraps (in a library), outside the loaded segments.
fn left_alone(
    m: &Loaded,
    info: &ElfInfo,
    f: &FuncRef,
    pad_end: u64,
    is_main: bool,
    go: &Option<std::ops::Range<u64>>,
) -> Option<String> {
    let name: &str = &f.name;
    let addr = m.base + f.addr;
    let why = if go
        .as_ref()
        .is_some_and(|r| r.contains(&addr) || (r.end == addr && name == "runtime.etext"))
    {
        GO_REASON
    } else if f.ifunc {
        "IFUNC resolver, not the function"
    } else if NOT_CALLED.contains(&name) || (is_main && f.addr == info.entry) {
        "entered without a call"
    } else if !is_main && is_unwinder(&m.path, name) {
        "part of the unwinder, whose frames must stay untouched"
    } else if !is_main && is_wrapped_switch(name) {
        "wrapped by the agent: traced where the program calls it"
    } else if addr < m.lo || m.base + pad_end > m.hi {
        "outside the loaded segments"
    } else {
        return None;
    };
    Some(why.to_string())
}

/// Applies the patches of a module that `instrument_module` prepared;
/// returns its traced entries.
fn finish_module((traced, stubs): (Vec<u64>, Result<Stubs, String>)) -> Result<Vec<u64>, String> {
    Stubs::finish(stubs)?;
    Ok(traced)
}

pub(super) fn instrument_main(
    s: &mut Session,
    m: &Loaded,
    lib_entries: &std::collections::HashSet<u64>,
) -> Result<(), String> {
    with_module_analysis(m, true, true, true, |info, funcs, cached| {
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
        instrument_module(s, m, info, funcs, true, false, cached).and_then(finish_module)?;
        instrument_imports(s, m, info, lib_entries, &loaded)
    })
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
