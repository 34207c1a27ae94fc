//! Arguments and return values (`-A`, `-R`, `-a`).
//!
//! At start-up [`Specs::from_options`] turns the options into specs; while
//! functions are instrumented [`Specs::bind`] gives each function id the
//! values to record (and says whether it has any). The filtered entry and
//! exit slow paths then call [`on_entry`] right after a flagged function's
//! `Entry` record and [`on_exit`] right before its `Exit` record: they
//! encode the values ([`fctrace_format::argval`]) into an `Args`/`Retval`
//! record followed by its payload records, in one reservation of the
//! thread's buffer.
//!
//! Memory behind pointers (strings) is read with `process_vm_readv` on the
//! process itself: an unreadable address fails with EFAULT instead of a
//! SIGSEGV, and the value is recorded as unreadable. Functions without
//! specs pay nothing: they never reach this module.

use crate::runtime::buffer::emit;
use crate::runtime::state::{FastItem, ThreadState, FAST_ITEMS};
use fctrace_format::argval::{IntFmt, Writer};
use fctrace_format::event::{EventKind, MAX_PAYLOAD};
use fctrace_options::{ArgSpec, Format, Item, Options, Source};
use fctrace_symbols::dwarf::{self, Loc, Piece, Signatures, Ty};
use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// The argument registers at a function's entry.
#[repr(C)]
pub struct EntryRegs {
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub r8: u64,
    pub r9: u64,
    /// At function entry: points at the return address.
    pub rsp: u64,
    pub xmm: [[u8; 16]; 8],
}

/// The return-value registers at a function's exit.
#[repr(C)]
pub struct ExitRegs {
    pub rax: u64,
    pub rdx: u64,
    pub xmm0: [u8; 16],
    pub xmm1: [u8; 16],
}

/// One value to record: as an `-A`/`-R` item says, or by its type (`-a`).
enum Val {
    Item(Item),
    Typed(Ty, Loc),
}

/// What one function records.
struct FuncSpec {
    args: Vec<Val>,
    retval: Option<Val>,
    /// Most payload bytes the arguments / the return value can take.
    args_bound: usize,
    retval_bound: usize,
}

/// Functions ids per page of the binding table.
const PAGE: usize = 4096;
/// Pages: up to 16 million function ids.
const PAGES: usize = 4096;

type Page = [AtomicPtr<FuncSpec>; PAGE];

/// Which functions have argument or return-value specs.
pub struct Specs {
    specs: Vec<ArgSpec>,
    string_max: usize,
    /// `-a`: from debug information and the libc prototypes.
    auto: bool,
    /// `-a`: the signatures of each module (by path), read once.
    modules: Mutex<HashMap<String, Arc<Signatures>>>,
    /// `func id -> FuncSpec`, written by [`bind`](Self::bind) (at
    /// instrumentation), read without locks by [`on_entry`]/[`on_exit`].
    table: Box<[AtomicPtr<Page>]>,
}

/// Longest string read (bytes, with the byte that tells it was cut): the
/// read goes through a buffer on the program's stack.
const STRING_MAX: usize = 1024;

static SPECS: AtomicPtr<Specs> = AtomicPtr::new(std::ptr::null_mut());

impl Specs {
    pub fn from_options(opts: &Options) -> Specs {
        let ptrs = opts
            .args
            .iter()
            .any(|a| a.items.iter().any(|i| i.format == Format::Ptr));
        names::want(ptrs);
        Specs {
            specs: opts.args.clone(),
            auto: opts.auto_args,
            modules: Mutex::new(HashMap::new()),
            string_max: (opts.string_max as usize).clamp(1, STRING_MAX - 1),
            table: (0..PAGES)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// Whether no function can have a spec.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty() && !self.auto
    }

    /// Makes these the specs [`on_entry`]/[`on_exit`] use (for the whole
    /// process); returns them.
    pub fn install(self) -> &'static Specs {
        let p = Box::into_raw(Box::new(self));
        let old = SPECS.swap(p, Ordering::AcqRel);
        // The old specs may still be read by another thread: leaked.
        let _ = old;
        // SAFETY: just leaked, never freed.
        unsafe { &*p }
    }

    /// (args, retval) for function `func`, remembered for [`on_entry`] and
    /// [`on_exit`], which from then on use these specs: call it before the
    /// function can run, on specs that live for the rest of the process
    /// (a static, or [`install`](Self::install)ed).
    pub fn bind(
        &'static self,
        func: u32,
        module_path: &str,
        raw_name: &str,
        display_name: &str,
        at: &str,
    ) -> (bool, bool) {
        let f = self.spec_for(module_path, raw_name, display_name, at);
        let flags = (!f.args.is_empty(), f.retval.is_some());
        if flags == (false, false) {
            return flags;
        }
        let me = self as *const Specs as *mut Specs;
        if SPECS.load(Ordering::Acquire) != me {
            SPECS.store(me, Ordering::Release);
        }
        let (page, idx) = (func as usize / PAGE, func as usize % PAGE);
        let Some(slot) = self.table.get(page) else {
            return (false, false);
        };
        let mut p = slot.load(Ordering::Acquire);
        if p.is_null() {
            // Made in place, zeroed (null pointers): 32 KiB, not through
            // the stack of the thread binding (a Python function's first
            // call may come on a small one).
            let layout = std::alloc::Layout::new::<Page>();
            // SAFETY: a non-zero-sized layout; all zero bytes are a page
            // of null pointers; freed below (as a Box, the same layout)
            // or never.
            let fresh = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Page>();
            if fresh.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            match slot.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => p = fresh,
                Err(other) => {
                    // SAFETY: ours, never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    p = other;
                }
            }
        }
        // SAFETY: pages are never freed.
        let page = unsafe { &*p };
        // Leaked: a thread may be reading the previous one.
        page[idx].store(Box::into_raw(Box::new(f)), Ordering::Release);
        flags
    }

    /// The arguments of `func` as the generated fast entry records them
    /// (`runtime::state::FastDesc`): empty without `-A`; `None` if one of
    /// them needs the slow path (a string, a float, a stack argument, a
    /// type from `-a`, or too many).
    pub fn fast_args(&self, func: u32) -> Option<Vec<FastItem>> {
        let f = self.lookup(func)?;
        if f.args.len() > FAST_ITEMS {
            return None;
        }
        f.args
            .iter()
            .map(|v| match v {
                Val::Item(Item {
                    source: Source::Int(n @ 1..=6),
                    format,
                }) => {
                    let (hdr, size) = fast_int(*format)?;
                    Some(FastItem {
                        reg: n - 1,
                        _pad: [0; 3],
                        hdr,
                        mask: mask(u64::MAX, size),
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// The header of `func`'s return value (`-R`) if the generated exit
    /// can record it (an integer format: `runtime::state::E_FASTRET`).
    pub fn fast_retval(&self, func: u32) -> Option<u32> {
        match &self.lookup(func)?.retval {
            Some(Val::Item(item)) => fast_int(item.format).map(|(hdr, _)| hdr),
            _ => None,
        }
    }

    fn lookup(&self, func: u32) -> Option<&FuncSpec> {
        let page = self
            .table
            .get(func as usize / PAGE)?
            .load(Ordering::Acquire);
        if page.is_null() {
            return None;
        }
        // SAFETY: pages and specs are never freed.
        let f = unsafe { &*page }[func as usize % PAGE].load(Ordering::Acquire);
        // SAFETY: as above.
        (!f.is_null()).then(|| unsafe { &*f })
    }

    fn spec_for(&self, module_path: &str, raw: &str, display: &str, at: &str) -> FuncSpec {
        let mut f = FuncSpec {
            args: Vec::new(),
            retval: None,
            args_bound: 0,
            retval_bound: 0,
        };
        let names = fctrace_options::pattern::name_forms_at(raw, display, at);
        let mut matched = false;
        let (mut auto_args, mut auto_ret) = (false, false);
        for s in &self.specs {
            if !s.pattern.matches(module_path, names) {
                continue;
            }
            matched = true;
            for item in &s.items {
                match item.source {
                    Source::Retval => f.retval = Some(Val::Item(*item)),
                    Source::AutoArgs => auto_args = true,
                    Source::AutoRetval => auto_ret = true,
                    _ => f.args.push(Val::Item(*item)),
                }
            }
        }
        // `-A FUNC`, `-R FUNC` without a spec: typed values where no
        // spec of the user's says otherwise (as uftrace: a spec wins).
        let auto_args = auto_args && f.args.is_empty();
        let auto_ret = auto_ret && f.retval.is_none();
        if auto_args || auto_ret {
            if let Some(sig) = self.signature(module_path, raw) {
                if auto_args {
                    let locs = dwarf::arg_locations(&sig.params, &sig.ret);
                    f.args = sig
                        .params
                        .iter()
                        .cloned()
                        .zip(locs)
                        .map(|(t, l)| Val::Typed(t, l))
                        .collect();
                }
                let ret = dwarf::ret_location(&sig.ret);
                if auto_ret && ret != Loc::None {
                    f.retval = Some(Val::Typed(sig.ret, ret));
                }
            }
        }
        if !matched && self.auto {
            if let Some(sig) = self.signature(module_path, raw) {
                let locs = dwarf::arg_locations(&sig.params, &sig.ret);
                f.args = sig
                    .params
                    .into_iter()
                    .zip(locs)
                    .map(|(t, l)| Val::Typed(t, l))
                    .collect();
                let ret = dwarf::ret_location(&sig.ret);
                if ret != Loc::None {
                    f.retval = Some(Val::Typed(sig.ret, ret));
                }
            }
        }
        f.args_bound = f.args.iter().map(|v| self.bound(v)).sum();
        f.retval_bound = f.retval.as_ref().map_or(0, |v| self.bound(v));
        f
    }

    /// `-a`: the signature of `raw` in the module at `module_path`, from
    /// its debug information, else from the libc prototypes.
    fn signature(&self, module_path: &str, raw: &str) -> Option<dwarf::Signature> {
        let sigs = {
            let mut m = self.modules.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(module_path.to_string())
                .or_insert_with(|| {
                    Arc::new(
                        dwarf::signatures_of_file(std::path::Path::new(module_path))
                            .unwrap_or_default(),
                    )
                })
                .clone()
        };
        // A C++ constructor's or destructor's complete-object symbol (C1,
        // D1) is often an alias of the base-object one (C2, D2) that the
        // debug information names.
        let alias = || {
            ["C1E", "D1E"].iter().find_map(|k| {
                let i = raw.rfind(k)?;
                let mut a = raw.to_string();
                a.replace_range(i + 1..i + 2, "2");
                sigs.get(&a).cloned()
            })
        };
        sigs.get(raw)
            .cloned()
            .or_else(alias)
            .or_else(|| dwarf::libc_prototype(raw))
            .or_else(|| {
                // libc's own aliases: __close, __libc_malloc, ...
                let base = raw.strip_prefix("__libc_").unwrap_or(raw);
                let base = base.trim_start_matches('_');
                (base != raw && !base.is_empty())
                    .then(|| dwarf::libc_prototype(base))
                    .flatten()
            })
    }

    /// Most payload bytes a value takes.
    fn bound(&self, v: &Val) -> usize {
        match v {
            Val::Item(item) => match item.format {
                Format::Str | Format::StdString => 3 + self.string_max.max(9),
                _ => 11,
            },
            Val::Typed(ty, _) => self.ty_bound(ty, 0),
        }
        .min(MAX_PAYLOAD)
    }

    fn ty_bound(&self, ty: &Ty, depth: u32) -> usize {
        match ty {
            Ty::Str => 3 + self.string_max.max(9),
            Ty::Float { .. } => 10,
            Ty::Enum { values, .. } => {
                10 + values
                    .iter()
                    .map(|(_, n)| n.len().min(255))
                    .max()
                    .unwrap_or(0)
            }
            Ty::Struct {
                fields,
                union: false,
                ..
            } if shown_struct(fields, depth) => {
                2 + fields
                    .iter()
                    .map(|f| 1 + f.name.len().min(255) + self.ty_bound(&f.ty, depth + 1))
                    .sum::<usize>()
            }
            Ty::Struct { .. } | Ty::Array { .. } | Ty::Other { .. } | Ty::Void => 1,
            _ => 11,
        }
    }
}

/// Most fields of a struct shown, and deepest nesting: beyond, `{...}`.
const MAX_FIELDS: usize = 16;
const MAX_NESTING: u32 = 2;

fn shown_struct(fields: &[dwarf::Field], depth: u32) -> bool {
    fields.len() <= MAX_FIELDS && depth < MAX_NESTING
}

/// Largest value gathered into bytes (a struct passed in memory).
const VALUE_MAX: usize = 256;

/// No specs in use (a later attach's options have none; the old ones
/// are leaked, as by [`Specs::install`]).
pub fn uninstall() {
    SPECS.store(std::ptr::null_mut(), Ordering::Release);
}

fn installed() -> Option<&'static Specs> {
    let p = SPECS.load(Ordering::Acquire);
    // SAFETY: installed specs are never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Right after the Entry record of `func`.
pub fn on_entry(st: *mut ThreadState, func: u32, regs: &EntryRegs) {
    let Some(specs) = installed() else { return };
    let Some(f) = specs.lookup(func) else { return };
    if f.args.is_empty() || st.is_null() {
        return;
    }
    // SAFETY: the caller's thread state.
    let st = unsafe { &mut *st };
    let pid = st.pid;
    emit(st, EventKind::Args, func, f.args_bound, |w| {
        for v in &f.args {
            let item = match v {
                Val::Item(item) => item,
                Val::Typed(ty, loc) => {
                    let mut b = [0u8; VALUE_MAX];
                    let ok = match gather_entry(pid, regs, loc, &mut b) {
                        Some(n) => put_typed(w, pid, specs.string_max, ty, &b[..n], 0),
                        None => w.missing(),
                    };
                    if !ok {
                        break;
                    }
                    continue;
                }
            };
            let ok = match item.source {
                Source::Int(n) => {
                    let v = int_arg(pid, regs, n);
                    match v {
                        Some(v) => put_int(w, pid, specs.string_max, item.format, v),
                        None => w.missing(),
                    }
                }
                Source::Float(n) => {
                    let x = &regs.xmm[(n as usize - 1).min(7)];
                    put_float(w, item.format, x)
                }
                Source::Stack(n) => {
                    let mut x = [0u8; 16];
                    let want = if item.format == Format::Float(10) {
                        10
                    } else {
                        8
                    };
                    let at = regs.rsp.checked_add(8 * u64::from(n));
                    match at.map(|a| read_mem(pid, a, &mut x[..want])) {
                        Some(r) if r == want && want == 10 => w.float(8, f80_to_f64(&x)),
                        Some(r) if r == want => put_float(w, item.format, &x),
                        _ => w.missing(),
                    }
                }
                Source::Retval | Source::AutoArgs | Source::AutoRetval => true,
            };
            if !ok {
                break;
            }
        }
    });
}

/// Right after the Entry record of a Python function `func`
/// (`instrument::python`): its `-A` items, each `argN` written by
/// `put(n, writer, string_max)` (the Python value's short form), any
/// other source shown missing.
pub fn on_python_entry(
    st: &mut ThreadState,
    func: u32,
    put: impl Fn(u8, &mut Writer, usize) -> bool,
) {
    let Some(specs) = installed() else { return };
    let Some(f) = specs.lookup(func) else { return };
    if f.args.is_empty() {
        return;
    }
    let bound = 8 + f.args.len() * (specs.string_max + 8);
    emit(st, EventKind::Args, func, bound, |w| {
        for v in &f.args {
            let ok = match v {
                Val::Item(Item {
                    source: Source::Int(n),
                    ..
                }) => put(*n, w, specs.string_max),
                _ => w.missing(),
            };
            if !ok {
                break;
            }
        }
    });
}

/// Right before the Exit record of a Python function `func` that has
/// `-R`: its return value, written by `put(writer, string_max)`.
pub fn on_python_exit(
    st: &mut ThreadState,
    func: u32,
    put: impl FnOnce(&mut Writer, usize) -> bool,
) {
    let Some(specs) = installed() else { return };
    let Some(f) = specs.lookup(func) else { return };
    if f.retval.is_none() {
        return;
    }
    emit(st, EventKind::Retval, func, 16 + specs.string_max, |w| {
        put(w, specs.string_max);
    });
}

/// Right before the Exit record of `func`.
pub fn on_exit(st: *mut ThreadState, func: u32, regs: &ExitRegs) {
    let Some(specs) = installed() else { return };
    let Some(f) = specs.lookup(func) else { return };
    let Some(v) = &f.retval else { return };
    if st.is_null() {
        return;
    }
    // SAFETY: the caller's thread state.
    let st = unsafe { &mut *st };
    let pid = st.pid;
    emit(st, EventKind::Retval, func, f.retval_bound, |w| {
        match v {
            Val::Item(item) => match item.format {
                Format::Float(_) => put_float(w, item.format, &regs.xmm0),
                fmt => put_int(w, pid, specs.string_max, fmt, regs.rax),
            },
            Val::Typed(ty, loc) => {
                let mut b = [0u8; VALUE_MAX];
                match gather_exit(pid, regs, loc, &mut b) {
                    Some(n) => put_typed(w, pid, specs.string_max, ty, &b[..n], 0),
                    None => w.missing(),
                }
            }
        };
    });
}

/// The bytes of a value at a function's entry: its length in `out`.
fn gather_entry(pid: u32, regs: &EntryRegs, loc: &Loc, out: &mut [u8; VALUE_MAX]) -> Option<usize> {
    match loc {
        Loc::Pieces(pieces) => {
            let mut n = 0;
            for p in pieces.iter().take(2) {
                let bytes = match *p {
                    Piece::Gpr(i) => [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9]
                        .get(i as usize)?
                        .to_le_bytes(),
                    Piece::Xmm(i) => {
                        let x = regs.xmm.get(i as usize)?;
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&x[..8]);
                        b
                    }
                    Piece::Stack(off) => {
                        let mut b = [0u8; 8];
                        if read_mem(pid, regs.rsp.checked_add(u64::from(off))?, &mut b) != 8 {
                            return None;
                        }
                        b
                    }
                };
                out[n..n + 8].copy_from_slice(&bytes);
                n += 8;
            }
            Some(n)
        }
        Loc::Stack { offset, size } => {
            let n = (*size as usize).min(VALUE_MAX);
            let at = regs.rsp.checked_add(u64::from(*offset))?;
            (read_mem(pid, at, &mut out[..n]) == n).then_some(n)
        }
        Loc::AtRax { .. } | Loc::None => None,
    }
}

/// The bytes of a return value at a function's exit.
fn gather_exit(pid: u32, regs: &ExitRegs, loc: &Loc, out: &mut [u8; VALUE_MAX]) -> Option<usize> {
    match loc {
        Loc::Pieces(pieces) => {
            let mut n = 0;
            for p in pieces.iter().take(2) {
                let bytes = match *p {
                    Piece::Gpr(0) => regs.rax.to_le_bytes(),
                    Piece::Gpr(1) => regs.rdx.to_le_bytes(),
                    Piece::Xmm(i @ (0 | 1)) => {
                        let x = if i == 0 { &regs.xmm0 } else { &regs.xmm1 };
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&x[..8]);
                        b
                    }
                    _ => return None,
                };
                out[n..n + 8].copy_from_slice(&bytes);
                n += 8;
            }
            Some(n)
        }
        Loc::AtRax { size } => {
            let n = (*size as usize).min(VALUE_MAX);
            (read_mem(pid, regs.rax, &mut out[..n]) == n).then_some(n)
        }
        Loc::Stack { .. } | Loc::None => None,
    }
}

/// The little-endian integer of the first `size` bytes of `b`.
fn le(b: &[u8], size: usize) -> Option<u64> {
    let b = b.get(..size)?;
    let mut a = [0u8; 8];
    a[..size].copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// A value of type `ty` whose bytes are `b`.
fn put_typed(w: &mut Writer, pid: u32, string_max: usize, ty: &Ty, b: &[u8], depth: u32) -> bool {
    let size = ty.size() as usize;
    let Some(bits) = le(b, size.min(8)) else {
        return w.missing();
    };
    match ty {
        Ty::Int { size, signed } => {
            let fmt = if *signed {
                IntFmt::Signed
            } else {
                IntFmt::Unsigned
            };
            w.int(fmt, *size, bits)
        }
        Ty::Bool { size } => w.int(IntFmt::Bool, *size, bits),
        Ty::Char => w.int(IntFmt::Char, 1, bits),
        Ty::Ptr => w.int(IntFmt::Ptr, 8, bits),
        Ty::Str => put_string(w, pid, string_max, bits),
        Ty::Float { size } => w.float(*size, bits),
        Ty::Enum {
            size,
            signed,
            values,
        } => {
            // The enum's own bytes, sign- or zero-extended as the
            // enumerators' values are (fctrace_symbols::dwarf): the rest
            // of the register is not part of the value.
            let v = if *size < 8 {
                let shift = 64 - u32::from(*size) * 8;
                if *signed {
                    ((bits << shift) as i64) >> shift
                } else {
                    ((bits << shift) >> shift) as i64
                }
            } else {
                bits as i64
            };
            let name = values
                .iter()
                .find(|(x, _)| *x == v)
                .map_or("", |(_, n)| n.as_str());
            w.enumerator(v as u64, name)
        }
        Ty::Struct {
            fields,
            union: false,
            ..
        } if shown_struct(fields, depth) => {
            if !w.struct_begin(fields.len() as u8) {
                return false;
            }
            for f in fields {
                if !w.field(&f.name) {
                    return false;
                }
                let at = f.offset as usize;
                let ok = match b.get(at..) {
                    Some(rest) => put_typed(w, pid, string_max, &f.ty, rest, depth + 1),
                    None => w.missing(),
                };
                if !ok {
                    return false;
                }
            }
            true
        }
        Ty::Struct { .. } | Ty::Array { .. } | Ty::Other { .. } | Ty::Void => w.opaque(),
    }
}

/// The `n`-th (1-based) integer argument: a register, or the stack above
/// the return address.
/// Integer argument `n` (1-based: the registers, then the stack).
pub fn int_arg(pid: u32, regs: &EntryRegs, n: u8) -> Option<u64> {
    Some(match n {
        1 => regs.rdi,
        2 => regs.rsi,
        3 => regs.rdx,
        4 => regs.rcx,
        5 => regs.r8,
        6 => regs.r9,
        _ => {
            let addr = regs.rsp.checked_add(8 * (u64::from(n) - 6))?;
            let mut b = [0u8; 8];
            if read_mem(pid, addr, &mut b) != 8 {
                return None;
            }
            u64::from_le_bytes(b)
        }
    })
}

/// The argval header (`TAG_INT`, format, size) of an integer format, and
/// the bytes of the value kept, as [`put_int`] writes it; `None` for a
/// string or a float.
fn fast_int(fmt: Format) -> Option<(u32, u8)> {
    // (The size shown is the size kept for every one of them.)
    let (f, size) = match fmt {
        Format::Auto => (IntFmt::Auto, 8),
        Format::Signed(s) => (IntFmt::Signed, s),
        Format::Unsigned(s) => (IntFmt::Unsigned, s),
        Format::Hex(s) => (IntFmt::Hex, s),
        Format::Char => (IntFmt::Char, 1),
        // (A function's name is looked up in the slow path.)
        Format::Ptr if names::wanted() => return None,
        Format::Ptr => (IntFmt::Ptr, 8),
        Format::Oct(s) => (IntFmt::Oct, s),
        Format::Str | Format::StdString | Format::Float(_) => return None,
    };
    let hdr = u32::from(fctrace_format::argval::TAG_INT)
        | u32::from(f as u8) << 8
        | u32::from(size) << 16;
    Some((hdr, size))
}

fn mask(v: u64, size: u8) -> u64 {
    if size >= 8 {
        v
    } else {
        v & ((1u64 << (size * 8)) - 1)
    }
}

fn put_int(w: &mut Writer, pid: u32, string_max: usize, fmt: Format, v: u64) -> bool {
    match fmt {
        Format::Auto => w.int(IntFmt::Auto, 8, v),
        Format::Signed(s) => w.int(IntFmt::Signed, s, mask(v, s)),
        Format::Unsigned(s) => w.int(IntFmt::Unsigned, s, mask(v, s)),
        Format::Hex(s) => w.int(IntFmt::Hex, s, mask(v, s)),
        Format::Char => w.int(IntFmt::Char, 1, mask(v, 1)),
        Format::Ptr => match names::at(v) {
            // uftrace's `/p`: a pointer to a function shows as `&name`.
            Some(name) => w.enumerator(v, name),
            None => w.int(IntFmt::Ptr, 8, v),
        },
        Format::Oct(s) => w.int(IntFmt::Oct, s, mask(v, s)),
        Format::Float(_) => w.missing(),
        Format::Str => put_string(w, pid, string_max, v),
        Format::StdString => put_std_string(w, pid, string_max, v),
    }
}

/// The libstdc++ `std::string` at `addr` (its data pointer, then its
/// length), at most `max` bytes of its text.
fn put_std_string(w: &mut Writer, pid: u32, max: usize, addr: u64) -> bool {
    if addr == 0 {
        return w.null();
    }
    let mut head = [0u8; 16];
    if read_mem(pid, addr, &mut head) != 16 {
        return w.unreadable(addr);
    }
    let data = u64::from_le_bytes(head[..8].try_into().unwrap_or([0; 8]));
    let len = u64::from_le_bytes(head[8..].try_into().unwrap_or([0; 8]));
    let mut buf = [0u8; STRING_MAX];
    let n = (len.min(max as u64) as usize).min(buf.len());
    if data == 0 || read_mem(pid, data, &mut buf[..n]) != n {
        return w.unreadable(data);
    }
    w.string(&buf[..n], len > n as u64)
}

/// The `long double` (x87 80-bit) in `b` as the nearest double's bits.
fn f80_to_f64(b: &[u8; 16]) -> u64 {
    let mant = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = u64::from(se >> 15) << 63;
    let exp = i32::from(se & 0x7fff);
    if exp == 0 && mant == 0 {
        return sign;
    }
    if exp == 0x7fff {
        // Infinity or NaN.
        let frac = if mant << 1 == 0 { 0 } else { 1 << 51 };
        return sign | 0x7ff << 52 | frac;
    }
    // The explicit integer bit is bit 63 of the mantissa.
    let e = exp - 16383 + 1023;
    if e >= 0x7ff {
        return sign | 0x7ff << 52;
    }
    if e <= 0 {
        // Too small for a normal double: zero (a denormal's precision
        // does not matter to a trace).
        return sign;
    }
    sign | (e as u64) << 52 | (mant << 1) >> 12
}

fn put_float(w: &mut Writer, fmt: Format, x: &[u8; 16]) -> bool {
    let mut b = [0u8; 8];
    b.copy_from_slice(&x[..8]);
    let bits = u64::from_le_bytes(b);
    match fmt {
        Format::Float(4) => w.float(4, bits & 0xffff_ffff),
        _ => w.float(8, bits),
    }
}

/// The NUL-terminated string at `addr`, at most `max` bytes of it.
fn put_string(w: &mut Writer, pid: u32, max: usize, addr: u64) -> bool {
    if addr == 0 {
        return w.null();
    }
    let mut buf = [0u8; STRING_MAX];
    // One byte more than shown: to know whether it was cut.
    let want = (max + 1).min(buf.len());
    let mut got = 0usize;
    while got < want {
        let at = addr.wrapping_add(got as u64);
        // Page by page: a read crossing into an unmapped page would fail
        // as a whole.
        let page_left = 4096 - (at as usize & 4095);
        let n = (want - got).min(page_left);
        let r = read_mem(pid, at, &mut buf[got..got + n]);
        if let Some(nul) = buf[got..got + r].iter().position(|&b| b == 0) {
            return w.string(&buf[..got + nul], false);
        }
        got += r;
        if r < n {
            break;
        }
    }
    if got == 0 {
        return w.unreadable(addr);
    }
    if got > max {
        w.string(&buf[..max], true)
    } else {
        // Unreadable after `got` bytes without a NUL: shown cut.
        w.string(&buf[..got], true)
    }
}

/// Reads own memory at `addr` into `out` without faulting: the number of
/// bytes read (0 if unreadable).
fn read_mem(pid: u32, addr: u64, out: &mut [u8]) -> usize {
    if out.is_empty() {
        return 0;
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: process_vm_readv writes only into `out` (the local iovec);
    // the remote address is checked by the kernel (EFAULT, no signal).
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            pid as libc::c_long,
            &local as *const libc::iovec,
            1 as libc::c_ulong,
            &remote as *const libc::iovec,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        0
    } else {
        (r as usize).min(out.len())
    }
}

/// The names of functions by their address, for `/p` (a pointer to a
/// function shows as `&name`): kept only when a spec has `/p`. The
/// modules' walk notes each function ([`note`]); [`publish`] makes a
/// sorted table that the slow path reads without a lock.
pub mod names {
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
    use std::sync::Mutex;

    type Names = Vec<(u64, Box<str>)>;
    static WANTED: AtomicBool = AtomicBool::new(false);
    static PENDING: Mutex<Names> = Mutex::new(Vec::new());
    static TABLE: AtomicPtr<Names> = AtomicPtr::new(std::ptr::null_mut());

    /// Whether names are kept (from the options; what earlier options
    /// kept is forgotten: a later attach).
    pub fn want(on: bool) {
        WANTED.store(on, Ordering::Relaxed);
        PENDING.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // (The old table is leaked: a thread may still be reading it.)
        TABLE.store(std::ptr::null_mut(), Ordering::Release);
    }

    /// Whether the modules' walk should note names.
    pub fn wanted() -> bool {
        WANTED.load(Ordering::Relaxed)
    }

    /// Function `raw` (its symbol) starts at `addr`.
    pub fn note(addr: u64, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let display = if raw.starts_with("_Z") || raw.starts_with("_R") {
            fctrace_symbols::demangle_in_process(raw)
        } else {
            raw.to_string()
        };
        let short = fctrace_options::pattern::without_params(&display);
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        p.push((addr, format!("&{short}").into_boxed_str()));
    }

    /// Publishes the names noted so far (old tables are leaked: another
    /// thread may be reading one).
    pub fn publish() {
        if !wanted() {
            return;
        }
        let mut v = PENDING.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_unstable_by_key(|e| e.0);
        TABLE.store(Box::leak(Box::new(v)), Ordering::Release);
    }

    /// The name (`&f`) of the function that starts at `addr`.
    pub fn at(addr: u64) -> Option<&'static str> {
        let p = TABLE.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: published tables are leaked, never mutated.
        let v = unsafe { &*p };
        let i = v.binary_search_by_key(&addr, |e| e.0).ok()?;
        Some(&v[i].1)
    }
}
