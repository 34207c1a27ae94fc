//! Building a module's stubs in arenas near it (each arena opening with
//! its common block, `arch::x86_64::codegen`) and applying the patches that
//! divert its functions and GOT slots to them, all at once.

use super::loaded::{Loaded, PAGE};
use super::session::Session;
use crate::arch::x86_64::arena::Arena;
use crate::arch::x86_64::codegen::{self, Common};
use crate::arch::x86_64::patch::{self, Mode, Plan};
use crate::runtime::journal;
use fctrace_format::symtab::FuncStatus;

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
pub(super) const STUB_ESTIMATE: usize = 128;

/// The stubs of one module being built, in arenas near it, and the code
/// patches that divert its functions to them (applied by `finish`, once
/// every stub is built from the original code).
pub(super) struct Stubs {
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
    pub(super) last_body: u64,
}

impl Stubs {
    /// An arena of `size` bytes for the stubs of `m`, or why there is none
    /// (then no function of the module gets one).
    pub(super) fn open(s: &mut Session, m: &Loaded, size: usize) -> Result<Stubs, String> {
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
    pub(super) fn add(
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
                        event: 0,
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
    pub(super) fn finish(stubs: Result<Stubs, String>) -> Result<(), String> {
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
                // Byte by byte, not through `memcpy`: with -l the code
                // written may be libc's own copy routines (a stripped
                // libc's internal functions, found by their FDEs), which
                // must not run while they are half written.
                for (k, &b) in bytes.iter().enumerate() {
                    // SAFETY: the pages were made writable above; no
                    // other thread runs code of the module yet.
                    unsafe { (at as *mut u8).add(k).write_volatile(b) };
                }
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

pub(super) fn protect(lo: u64, hi: u64, prot: i32) -> Result<(), String> {
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
pub(super) fn write_word(slot: u64, value: u64) -> Result<(), String> {
    let prot = crate::runtime::maps::prot_of(slot).unwrap_or(libc::PROT_READ);
    protect(slot, slot + 8, libc::PROT_READ | libc::PROT_WRITE)?;
    journal::before_write(slot, 8);
    // SAFETY: the slot is an aligned GOT entry, writable now.
    unsafe { (slot as *mut u64).write(value) };
    protect(slot, slot + 8, prot)?;
    Ok(())
}
