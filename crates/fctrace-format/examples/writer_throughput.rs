//! How fast the recorder's writer encodes and compresses events: feeds a
//! synthetic recursive call pattern (like fib) through `TraceWriter` in
//! buffer-sized slices, as the recorder does, and prints ns per event and
//! bytes per event.
//!
//! `cargo run --release -p fctrace-format --example writer_throughput [EVENTS]`

use fctrace_format::event::{EventKind, RawEvent};
use fctrace_format::store::{TraceInfo, TraceWriter};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(14_000_000);
    // fib-like: a binary recursion of depth up to 30, three functions.
    let mut events = Vec::with_capacity(n);
    let mut tsc = 1_000_000u64;
    let mut stack: Vec<u32> = Vec::new();
    let mut x = 0x1234_5678u64;
    while events.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tsc += 20 + (x % 40);
        if stack.len() < 30 && (stack.is_empty() || x.is_multiple_of(2)) {
            let f = (x % 3) as u32 + 1;
            stack.push(f);
            events.push(RawEvent::new(EventKind::Entry, f, tsc));
        } else {
            let f = stack.pop().unwrap();
            events.push(RawEvent::new(EventKind::Exit, f, tsc));
        }
    }
    let dir = std::env::temp_dir().join(format!("fctrace-writer-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut w = TraceWriter::create(&dir).unwrap();
    let t0 = Instant::now();
    let c0 = cpu_time();
    for slice in events.chunks(4092) {
        w.append(1, slice).unwrap();
    }
    w.finish(TraceInfo::default()).unwrap();
    let el = t0.elapsed();
    let cpu = cpu_time() - c0;
    let bytes: u64 = std::fs::read_dir(dir.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "{} events: {:.1} ns/event (cpu {:.1}), {:.3} bytes/event",
        n,
        el.as_nanos() as f64 / n as f64,
        cpu * 1e9 / n as f64,
        bytes as f64 / n as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// This thread's CPU time in seconds (from /proc: no unsafe code here).
fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the ')'.
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}
