//! The recording's clock (`record --clock`, uftrace's names): every time
//! the recorder reads or asks the kernel for (the timestamp counter's
//! calibration pairs, the perf events' `use_clockid`, ftrace's
//! `trace_clock`, the drains' settling) is on this one clock, so the
//! user events and the kernel's share one timeline.

use std::sync::atomic::{AtomicUsize, Ordering};

/// uftrace's clock names, the clock each is, and the kernel's clock for
/// its events (perf's `clockid` and ftrace's `trace_clock`): perf takes
/// only clocks it can read in an NMI for tracepoints (CLOCK_BOOTTIME:
/// EINVAL), so boot's kernel events are on CLOCK_MONOTONIC, moved by the
/// difference of the two ([`kernel_offset`]).
const CLOCKS: [(&str, libc::clockid_t, libc::clockid_t, &str); 3] = [
    ("mono", libc::CLOCK_MONOTONIC, libc::CLOCK_MONOTONIC, "mono"),
    (
        "mono_raw",
        libc::CLOCK_MONOTONIC_RAW,
        libc::CLOCK_MONOTONIC_RAW,
        "mono_raw",
    ),
    ("boot", libc::CLOCK_BOOTTIME, libc::CLOCK_MONOTONIC, "mono"),
];

/// The index in [`CLOCKS`] of the recording's clock (mono by default).
static CHOSEN: AtomicUsize = AtomicUsize::new(0);

/// Chooses the clock by uftrace's name of it (before recording).
pub fn choose(name: &str) -> anyhow::Result<()> {
    let Some(i) = CLOCKS.iter().position(|c| c.0 == name) else {
        anyhow::bail!(
            "--clock {name}: not a clock fctrace records with (mono, mono_raw, boot: \
             CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME)"
        );
    };
    CHOSEN.store(i, Ordering::Relaxed);
    Ok(())
}

type ClockRow = (&'static str, libc::clockid_t, libc::clockid_t, &'static str);

fn chosen() -> ClockRow {
    CLOCKS[CHOSEN.load(Ordering::Relaxed).min(CLOCKS.len() - 1)]
}

/// uftrace's name of the clock (`mono`, `mono_raw`, `boot`).
pub fn name() -> &'static str {
    chosen().0
}

/// The clock's id, for the timestamp counter's calibration.
pub fn id() -> libc::clockid_t {
    chosen().1
}

/// The kernel events' clock (perf's `clockid`).
pub fn kernel_id() -> libc::clockid_t {
    chosen().2
}

/// ftrace's `trace_clock` of the kernel events' clock.
pub fn ftrace_name() -> &'static str {
    chosen().3
}

/// What to add to a kernel event's time to put it on the recording's
/// clock: 0 but for boot (CLOCK_BOOTTIME less CLOCK_MONOTONIC, the time
/// the machine was suspended, read now: a suspend during the recording
/// is not followed).
pub fn kernel_offset() -> u64 {
    if id() == kernel_id() {
        return 0;
    }
    read(id()).saturating_sub(read(kernel_id()))
}

/// The kernel events' clock's time now, in nanoseconds.
pub fn kernel_now_ns() -> u64 {
    read(kernel_id())
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec; the id is one of CLOCKS'.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
