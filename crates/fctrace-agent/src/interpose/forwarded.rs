//! Signals fctrace passes on to the program (SIGINT, SIGQUIT, SIGTERM,
//! SIGHUP sent to fctrace by `kill`): a signal sent to the whole process
//! group (`kill -TERM -- -PGID`, `timeout`) reaches the program directly
//! *and* through fctrace. fctrace sends its copy with `rt_sigqueueinfo`
//! (`SI_QUEUE`, the original sender's pid and uid, `si_value` = the
//! session's tag and the original `si_code`); before the program's handler
//! runs, [`accept`] gives the siginfo back the original's shape (the
//! handler sees what the sender sent) and pairs copies: within a burst
//! (the same signal from the same sender, each copy less than [`WINDOW_MS`]
//! after the previous one) a copy is delivered only while its kind
//! (forwarded or direct) has arrived more often than the other, so a
//! group kill runs the handler once, whichever copy comes first, and two
//! `kill`s of fctrace alone run it twice. Async-signal-safe: atomics and
//! the vDSO's clock only.

use std::sync::atomic::{AtomicU64, Ordering};

/// Copies further apart than this are separate bursts.
pub const WINDOW_MS: u64 = 1000;

/// The signals fctrace passes on.
pub fn passed_on(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGINT | libc::SIGQUIT | libc::SIGTERM | libc::SIGHUP
    )
}

/// Per signal: the current burst, packed: time (ms, 32 bits), sender pid
/// (22 bits), forwarded copies (5 bits), direct copies (5 bits).
static BURST: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn slot(sig: i32) -> Option<&'static AtomicU64> {
    let i = match sig {
        libc::SIGINT => 0,
        libc::SIGQUIT => 1,
        libc::SIGTERM => 2,
        libc::SIGHUP => 3,
        _ => return None,
    };
    Some(&BURST[i])
}

fn pack(ms: u64, pid: u32, fwd: u64, direct: u64) -> u64 {
    (ms & 0xffff_ffff) << 32 | (pid as u64 & 0x3f_ffff) << 10 | fwd.min(31) << 5 | direct.min(31)
}

fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec (the vDSO: no system call).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The session's tag (`fctrace_format::shm::forward_tag`), 0 when the
/// process records nothing.
fn tag() -> u32 {
    crate::runtime::shm::get().map_or(0, |shm| {
        let h = shm.header();
        fctrace_format::shm::forward_tag(h.recorder_pid, h.recorder_pidns)
    })
}

/// Offsets in x86_64's siginfo_t.
const SI_CODE: usize = 8;
const SI_PID: usize = 16;
const SI_VALUE: usize = 24;

/// For a delivered `sig` (one of [`passed_on`]) with its siginfo (the
/// kernel fills it: the agent's entry has SA_SIGINFO for these): a copy
/// fctrace forwarded gets the original's `si_code` back and its value
/// cleared; false when this copy is the second of a pair and must not
/// reach the program's handler.
///
/// # Safety
/// `info` is the kernel's siginfo for this delivery.
pub unsafe fn accept(sig: i32, info: *mut libc::siginfo_t) -> bool {
    let Some(burst) = slot(sig) else { return true };
    if info.is_null() {
        return true;
    }
    let base = info as *mut u8;
    // SAFETY: inside the kernel's siginfo (128 bytes).
    let (code, pid, value) = unsafe {
        (
            (base.add(SI_CODE) as *const i32).read(),
            (base.add(SI_PID) as *const u32).read(),
            (base.add(SI_VALUE) as *const u64).read_unaligned(),
        )
    };
    let t = tag();
    let forwarded = code == libc::SI_QUEUE && t != 0 && (value >> 32) as u32 == t;
    let original = if forwarded {
        let orig = value as u32 as i32;
        // SAFETY: as above; the handler then sees the original's fields
        // (kill's siginfo has nothing after the uid).
        unsafe {
            (base.add(SI_CODE) as *mut i32).write(orig);
            (base.add(SI_VALUE) as *mut u64).write_unaligned(0);
        }
        orig
    } else {
        code
    };
    // Only kill()'s copies come in pairs (a group kill).
    if original != libc::SI_USER {
        return true;
    }
    let now = now_ms();
    loop {
        let old = burst.load(Ordering::Acquire);
        let (ms, opid) = (old >> 32, (old >> 10) as u32 & 0x3f_ffff);
        let same = old != 0
            && opid == pid & 0x3f_ffff
            && (now & 0xffff_ffff).wrapping_sub(ms) & 0xffff_ffff < WINDOW_MS;
        let (mut fwd, mut direct) = if same {
            ((old >> 5) & 31, old & 31)
        } else {
            (0, 0)
        };
        let deliver = if forwarded {
            fwd += 1;
            fwd > direct
        } else {
            direct += 1;
            direct > fwd
        };
        if burst
            .compare_exchange(
                old,
                pack(now, pid, fwd, direct),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            return deliver;
        }
    }
}
