//! `record -E PROVIDER:NAME` (uftrace's): the SDT probes of `<sys/sdt.h>`
//! (`.note.stapsdt`) recorded as events. A probe is a 1-byte `nop` at its
//! address: it takes an `int3`, which the agent's SIGTRAP handler (the
//! trap fallback's, `interpose/signal.rs`) recognises by its address,
//! records as an entry and an exit of the probe's function id (kind
//! `sdt`, named `provider:name`) and returns from, right after the probe.
//! A probe with a semaphore (a counter the program reads to decide whether
//! to compute the probe's arguments) has it raised, as SystemTap, perf and
//! bpftrace do.
//!
//! Left alone, with a note: the C library's probes (glibc runs some of its
//! code with every signal blocked, where an int3 would kill the process),
//! probes of modules holding Go code (Go's own signal handler must see no
//! int3 it does not know), and all of them when a SIGTRAP handler the
//! agent does not stand in front of is there (attaching to a process that
//! has one).

use super::loaded::Loaded;
use super::module_file::MappedFile;
use super::session::Session;
use crate::interpose::signal::{self, Trap};
use crate::runtime::{journal, log};
use fctrace_format::symtab::{FuncKind, FuncStatus, FunctionLine};
use fctrace_options::FuncPattern;
use std::sync::OnceLock;

/// The `-E` patterns, matched on `provider:name`.
static PATTERNS: OnceLock<Vec<FuncPattern>> = OnceLock::new();

/// Notes the `-E` patterns (at start-up).
pub fn init(options: &fctrace_options::Options) {
    let _ = PATTERNS.set(options.events.clone());
}

fn patterns() -> &'static [FuncPattern] {
    PATTERNS.get().map_or(&[], |p| p.as_slice())
}

/// Whether any probe is asked for.
pub fn wanted() -> bool {
    !patterns().is_empty()
}

const NOP: u8 = 0x90;
const INT3: u8 = 0xcc;

/// A probe to patch: its runtime address, its semaphore's (0: none), its
/// name and its address in the file.
struct Probe {
    at: u64,
    semaphore: u64,
    name: String,
    addr: u64,
}

/// Patches the probes of module `m` that `-E` names; what is left alone
/// is said in a note.
pub(super) fn patch_probes(s: &mut Session, m: &Loaded) -> Result<(), String> {
    if !wanted() || m.path.is_empty() {
        return Ok(());
    }
    let Ok(file) = MappedFile::map(&m.path) else {
        return Ok(());
    };
    let data = file.bytes();
    let probes: Vec<Probe> = fctrace_symbols::sdt::probes(data)
        .into_iter()
        .map(|p| Probe {
            at: m.base.wrapping_add(p.addr),
            semaphore: if p.semaphore == 0 {
                0
            } else {
                m.base.wrapping_add(p.semaphore)
            },
            name: format!("{}:{}", p.provider, p.name),
            addr: p.addr,
        })
        .filter(|p| patterns().iter().any(|pat| pat.matches_name(&p.name)))
        .collect();
    if probes.is_empty() {
        return Ok(());
    }
    if let Some(why) = left_alone(m, data) {
        log::note(&format!(
            "-E: the SDT probes of {} ({}) are not recorded: {why}",
            m.path,
            names(&probes)
        ));
        return Ok(());
    }
    let midx = s.module_index(&m.path, m.base)?;
    let mut traps = Vec::new();
    for p in &probes {
        // The probe's nop, in the module's loaded code.
        let inside = m
            .segs
            .iter()
            .any(|&(at, _, size)| p.at >= at && p.at < at.saturating_add(size));
        // SAFETY: an address inside one of the module's loaded segments,
        // readable.
        let status = if !inside {
            FuncStatus::NotTraced("its address is outside the module's loaded code".into())
        } else if unsafe { (p.at as *const u8).read_volatile() } != NOP {
            FuncStatus::NotTraced("no 1-byte nop at its address".into())
        } else {
            FuncStatus::Traced
        };
        let id = s.next_id;
        s.next_id += 1;
        s.ret_sites.resize(s.next_id as usize, 0);
        s.write_line(&FunctionLine {
            id,
            module: midx,
            addr: p.addr,
            size: 0,
            kind: FuncKind::Sdt,
            status: &status,
            name: &p.name,
        })?;
        if status == FuncStatus::Traced {
            traps.push((p, id));
        }
    }
    write_traps(m, &traps)
}

/// Why the probes of `m` (its file's bytes `data`) are left alone, if
/// they are.
fn left_alone(m: &Loaded, data: &[u8]) -> Option<&'static str> {
    let file = m.path.rsplit('/').next().unwrap_or(&m.path);
    if file.starts_with("libc.so") || file.starts_with("libc-") {
        return Some(
            "glibc runs some of its code with every signal blocked, where a probe's int3 \
             would kill the process",
        );
    }
    if fctrace_symbols::sdt::holds_go(data) {
        return Some(
            "the module holds Go code, whose signal handler must see no int3 of fctrace's",
        );
    }
    if signal::trap_handler_foreign() {
        return Some("the process has a SIGTRAP handler of its own that an int3 would reach");
    }
    None
}

/// `provider:name` of each probe, once each, for a note.
fn names(probes: &[Probe]) -> String {
    let mut n: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
    n.dedup();
    n.join(", ")
}

/// Raises the probes' semaphores, then (the handler knowing every trap
/// first) writes their int3s.
fn write_traps(m: &Loaded, traps: &[(&Probe, u32)]) -> Result<(), String> {
    if traps.is_empty() {
        return Ok(());
    }
    let table: Vec<Trap> = traps
        .iter()
        .map(|&(p, id)| Trap {
            at: p.at,
            stub: 0,
            body: 0,
            ret_site: 0,
            module: m.base,
            event: id,
        })
        .collect();
    signal::add_traps(&table);
    let mut semaphores: Vec<u64> = traps
        .iter()
        .map(|(p, _)| p.semaphore)
        .filter(|&a| a != 0)
        .collect();
    semaphores.sort_unstable();
    semaphores.dedup();
    for a in semaphores {
        let inside = m
            .segs
            .iter()
            .any(|&(at, _, size)| a >= at && a + 2 <= at.saturating_add(size));
        if inside {
            // SAFETY: the probe's semaphore, a 2-byte counter in the
            // module's writable data (`.probes`), as <sys/sdt.h> defines
            // it; raised as the tools that enable probes do.
            unsafe {
                let c = a as *mut u16;
                c.write_volatile(c.read_volatile().wrapping_add(1));
            }
        }
    }
    let mappings = crate::runtime::maps::mappings();
    let pages = journal::WritablePages::open(traps.iter().map(|(p, _)| (p.at, 1)), &mappings, true);
    for &(p, _) in traps {
        if !pages.covers(p.at, 1) {
            log::note(&format!(
                "-E: the SDT probe {} of {} is not recorded: its code cannot be made writable",
                p.name, m.path
            ));
            continue;
        }
        journal::before_write(p.at, 1);
        // SAFETY: the page was made writable above; the byte is the
        // probe's nop, replaced by an int3 the handler knows.
        unsafe { (p.at as *mut u8).write_volatile(INT3) };
    }
    pages.close();
    Ok(())
}
