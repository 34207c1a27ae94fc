// attach_rs.rs: a running Rust process for `fctrace -p`. Two worker
// threads call `tick` in a loop; main waits on stdin. Each line "go" makes
// main call `step` STEPS times, wait until each worker made TICKS more
// calls, and catch a panic thrown through `boom` (unwinding through traced
// frames); "quit" ends the workers and the program (exit status 3).
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const STEPS: u64 = 1000;
const TICKS: u64 = 1000;

#[inline(never)]
fn tick(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(3).wrapping_add(1))
}

#[inline(never)]
fn step(x: u64) -> u64 {
    std::hint::black_box(x + 1)
}

#[inline(never)]
fn boom(round: u32) -> u32 {
    if std::hint::black_box(round) > 0 {
        panic!("boom {round}");
    }
    round
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let stop = stop.clone();
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut x = 0;
                while !stop.load(Ordering::Relaxed) {
                    x = tick(x);
                    counts[i].fetch_add(1, Ordering::Relaxed);
                }
                x
            })
        })
        .collect();
    println!("ready");
    let mut round = 0;
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if line == "quit" {
            break;
        }
        round += 1;
        let from: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let mut s = 0;
        for i in 0..STEPS {
            s += step(i);
        }
        for (c, f) in counts.iter().zip(&from) {
            while c.load(Ordering::Relaxed) < f + TICKS {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        let caught = std::panic::catch_unwind(|| boom(round)).is_err();
        println!("round {round}: sum {s}, caught {caught}");
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    println!("done after {round} rounds");
    std::process::exit(3);
}
