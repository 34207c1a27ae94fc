//! Calls in progress when `fctrace -p` attaches.
//!
//! Every thread of the process is stopped somewhere in the middle of its
//! calls. fctrace unwinds each one's stack from outside (through the
//! modules' `.eh_frame`, `recorder::stacks`) and hands the agent, per
//! thread, the frames it found: an address in each frame's code and the
//! stack slot holding its return address. Here the frames of traced
//! functions become the thread's first shadow entries, their slots are
//! taken over as a traced call's are at its entry, and the thread's state
//! is installed in its TLS words: their returns are recorded (as `Exit`
//! events whose entries were not) and the thread's new calls nest under
//! them. The thread records their functions (an attach chain,
//! `fctrace_format::argval`) before its first event, when it registers
//! itself (`runtime::buffer`), so that readers place everything at its
//! depth.

use crate::instrument::imports;
use crate::recording::filter;
use crate::runtime::state::ShadowEntry;
use crate::runtime::{frames, shm, thread, tls};

/// One stopped thread, as fctrace describes it.
pub struct Stopped<'a> {
    /// Its thread id in the process's PID namespace.
    pub tid: u32,
    /// Its TLS base (`fs`).
    pub fs: u64,
    /// Where it is stopped.
    pub rip: u64,
    /// Innermost first: per frame, an address inside its function's code
    /// (the instruction pointer for the innermost frame and a frame a
    /// signal interrupted, else the return address minus one) and the
    /// stack address of its return address (0: unknown).
    pub frames: &'a [[u64; 2]],
}

/// Parses fctrace's description of the stopped threads: per thread the
/// words tid, fs, rip, n and n (address, slot) pairs. `None` if it does
/// not add up.
pub fn parse(words: &[u64]) -> Option<Vec<Stopped<'_>>> {
    let mut out = Vec::new();
    let mut rest = words;
    while !rest.is_empty() {
        let (&[tid, fs, rip, n], tail) = rest.split_first_chunk::<4>()?;
        let n = usize::try_from(n).ok()?;
        let len = n.checked_mul(2)?;
        if tail.len() < len {
            return None;
        }
        let (pairs, tail) = tail.split_at(len);
        let (frames, _) = pairs.as_chunks::<2>();
        out.push(Stopped {
            tid: tid as u32,
            fs,
            rip,
            frames,
        });
        rest = tail;
    }
    Some(out)
}

/// The traced calls open on thread `t` (outermost first): (return
/// address, slot, function id).
fn open_calls(t: &Stopped) -> Vec<(u64, u64, u32)> {
    let mut calls = Vec::new();
    let mut last_slot = 0u64;
    for (k, &[pc, slot]) in t.frames.iter().enumerate() {
        // Slots grow outwards; a frame out of order (another stack) ends
        // the walk.
        if slot != 0 && slot <= last_slot {
            break;
        }
        if slot == 0 || slot % 8 != 0 {
            continue;
        }
        last_slot = slot;
        let Some((id, start)) = filter::func_at(pc) else {
            continue;
        };
        if frames::ret_site(id as u64) == 0 {
            continue;
        }
        // SAFETY: `slot` is a return-address slot on the stopped thread's
        // stack (8-aligned, found by the unwinder): readable memory.
        let ret = unsafe { (slot as *const u64).read() };
        match imports::import_call_from_program(id, ret) {
            // A library function the program did not call through its
            // import (the library itself did): not a traced call.
            Some(false) => continue,
            // A call through the import: its frame is the library's
            // function, entered already.
            Some(true) => {}
            // About to run the first instruction of a patched function:
            // its entry will be recorded.
            None if k == 0 && t.rip == start => continue,
            None => {}
        }
        calls.push((ret, slot, id));
    }
    calls.reverse();
    calls
}

/// Gives each stopped thread with traced calls open a state holding them
/// (see the module documentation). Runs in `fctrace_agent_attach`, after
/// the functions are instrumented, on the thread fctrace works with,
/// every other one stopped. Returns the number of threads adopted.
pub fn adopt(threads: &[Stopped]) -> usize {
    let off = tls::offset();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let me = tls::thread_pointer();
    let mut adopted = 0;
    for t in threads {
        if t.fs == 0 || !shm::attach_traces(t.tid) {
            continue;
        }
        let word = (t.fs as i64 + off) as *mut u64;
        // SAFETY: the stopped thread's static TLS block holds the agent's
        // words at `off` from its thread pointer (the agent was loaded
        // before the attach entry was called).
        let (state, busy) = unsafe { (word.read_volatile(), word.add(1).read_volatile()) };
        // (This thread is busy: it runs the attach entry.)
        if state != 0 || (busy != 0 && t.fs != me) {
            continue;
        }
        let calls = open_calls(t);
        if calls.is_empty() {
            continue;
        }
        let Some(st) = thread::adopt_state(shm::session(), pid, calls.len()) else {
            continue;
        };
        let mut chain = Vec::with_capacity(calls.len());
        for &(ret, slot, id) in &calls {
            let Some(func) = filter::adopted_call(st, id) else {
                continue;
            };
            if func & crate::runtime::state::E_HIDDEN == 0 {
                chain.push(id);
            }
            // SAFETY: room for every call was made by `adopt_state`; the
            // slot is the frame's return-address slot, which now returns
            // through the function's return site, as after a traced entry.
            unsafe {
                st.shadow_top.write(ShadowEntry { ret, slot, func });
                st.shadow_top = st.shadow_top.add(1);
                (slot as *mut u64).write(frames::ret_site(id as u64));
            }
        }
        filter::adopted_calls_done(st);
        if !chain.is_empty() {
            st.adopt = Box::into_raw(Box::new(chain));
        }
        // SAFETY: the thread's TLS word 0, as above.
        unsafe { word.write_volatile(st as *mut _ as u64) };
        adopted += 1;
    }
    adopted
}
