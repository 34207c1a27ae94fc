//! Traced frames on the program's stack: the stub address each traced
//! function's return slots hold (its return site), putting the real
//! return addresses back for whoever walks the stack and taking the slots
//! over again, and the address range of the agent's own code (frames a
//! walk skips).

use crate::runtime::state::{ShadowEntry, ThreadState};
use crate::runtime::tls;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// For each function id, the stub address its traced frames' slots hold
/// (0 for functions without one). The table grows when libraries are
/// loaded (`dlopen`): a new table is published as one pointer (length and
/// data together), and old tables are never freed, since other threads and
/// unwinders may still be reading them.
static RET_SITES: AtomicPtr<Vec<u64>> = AtomicPtr::new(std::ptr::null_mut());

/// The lowest and highest return site (a quick test of whether an
/// address can be one, for `real_return`).
static SITES_LO: AtomicU64 = AtomicU64::new(u64::MAX);
static SITES_HI: AtomicU64 = AtomicU64::new(0);

pub fn set_ret_sites(v: Vec<u64>) {
    for &s in v.iter().filter(|&&s| s != 0) {
        SITES_LO.fetch_min(s, Ordering::Relaxed);
        SITES_HI.fetch_max(s, Ordering::Relaxed);
    }
    let v = Box::leak(Box::new(v));
    RET_SITES.store(v, Ordering::Release);
}

/// The real return address behind `addr` if it is the stub address a
/// traced frame's slot holds (the innermost such frame of the thread:
/// a return address just read from a slot); else `addr` itself.
pub(crate) fn real_return(st: &ThreadState, addr: u64) -> u64 {
    if addr < SITES_LO.load(Ordering::Relaxed) || addr > SITES_HI.load(Ordering::Relaxed) {
        return addr;
    }
    entries(st)
        .iter()
        .rev()
        .find(|e| ret_site(e.func) == addr)
        .map_or(addr, |e| e.ret)
}

pub(crate) fn ret_site(func: u64) -> u64 {
    let p = RET_SITES.load(Ordering::Acquire);
    if p.is_null() {
        return 0;
    }
    // SAFETY: published tables are leaked, never mutated after publication.
    let v = unsafe { &*p };
    // Bits above the id: filter bits (`recording::filter`), ignored; a
    // suspended context's entry (bit 63, `interpose::context`) has no
    // site to take over.
    if func >> 63 != 0 {
        return 0;
    }
    v.get(func as u32 as usize).copied().unwrap_or(0)
}

fn entries(st: &ThreadState) -> &[ShadowEntry] {
    // SAFETY: [base, top) holds this thread's pushed entries.
    unsafe {
        std::slice::from_raw_parts(
            st.shadow_base,
            st.shadow_top.offset_from(st.shadow_base) as usize,
        )
    }
}

/// Puts the real return address back into every traced frame's slot.
pub(crate) fn restore_all(st: &ThreadState) {
    restore_top(st, usize::MAX);
}

/// Takes over again the slots of frames still alive.
pub(crate) fn hijack_all(st: &ThreadState) {
    hijack_top(st, usize::MAX);
}

/// [`restore_all`] for the `n` innermost traced frames only (a walk that
/// stops after `n` frames reads no other slot).
pub(crate) fn restore_top(st: &ThreadState, n: usize) {
    let all = entries(st);
    for e in all[all.len().saturating_sub(n)..].iter().rev() {
        let site = ret_site(e.func);
        let slot = e.slot as *mut u64;
        // SAFETY: slots are return-address slots on this thread's stack;
        // only one still holding our stub address is written.
        unsafe {
            if site != 0 && slot.read() == site {
                slot.write(e.ret);
            }
        }
    }
}

/// [`hijack_all`] for the `n` innermost traced frames only.
pub(crate) fn hijack_top(st: &ThreadState, n: usize) {
    let all = entries(st);
    for e in all[all.len().saturating_sub(n)..].iter() {
        let site = ret_site(e.func);
        let slot = e.slot as *mut u64;
        // SAFETY: as in restore_all; only a slot holding the real address
        // of this entry is written.
        unsafe {
            if site != 0 && slot.read() == e.ret {
                slot.write(site);
            }
        }
    }
}

/// The address range of the agent's own loaded segments (lo, hi), found
/// once: frames whose code lies there are the interposers' own, which the
/// program's backtraces must not show.
pub(crate) fn agent_range() -> (u64, u64) {
    static LO: AtomicU64 = AtomicU64::new(0);
    static HI: AtomicU64 = AtomicU64::new(0);
    let hi = HI.load(Ordering::Acquire);
    if hi != 0 {
        return (LO.load(Ordering::Relaxed), hi);
    }
    let _busy = tls::Busy::enter();
    let mut range = (agent_range as *const () as u64, 0u64);
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; data is the `range` tuple below.
        unsafe {
            let range = &mut *(data as *mut (u64, u64));
            let info = &*info;
            let base = info.dlpi_addr;
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for ph in phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD) {
                lo = lo.min(base + ph.p_vaddr);
                hi = hi.max(base + ph.p_vaddr + ph.p_memsz);
            }
            if (lo..hi).contains(&range.0) {
                *range = (lo, hi);
                return 1;
            }
        }
        0
    }
    // SAFETY: the callback only reads what dl_iterate_phdr passes it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut range as *mut (u64, u64) as *mut c_void) };
    if range.1 == 0 {
        range = (0, 1); // not found: hide nothing
    }
    LO.store(range.0, Ordering::Relaxed);
    HI.store(range.1, Ordering::Release);
    range
}

pub(crate) fn in_agent(ip: u64) -> bool {
    let (lo, hi) = agent_range();
    (lo..hi).contains(&ip)
}
