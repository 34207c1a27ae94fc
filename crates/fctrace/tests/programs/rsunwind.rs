//! rsunwind: Rust panics caught with catch_unwind, and std's backtraces.
//! Built by cargo during the tests (tests/cargo_prog), as package
//! `rsunwind`.
//!
//!   rsunwind tree        one panic through three frames (a Drop guard runs
//!                        on the way), caught, then ordinary calls
//!   rsunwind loop N      N rounds, panics silenced by a hook, for counts
//!   rsunwind backtrace   prints std::backtrace::Backtrace::force_capture()
//!                        taken three frames down, then one taken inside a
//!                        panic hook
//!
//! The expected trees are in tests/tracing/panics.rs; keep both in step.

use std::backtrace::Backtrace;
use std::hint::black_box;
use std::panic;

struct Guard(u32);

impl Drop for Guard {
    #[inline(never)]
    fn drop(&mut self) {
        println!("guard {} dropped", self.0);
    }
}

#[inline(never)]
fn thrower(x: u32) -> u32 {
    if black_box(x) > 0 {
        panic!("boom {x}");
    }
    x
}

#[inline(never)]
fn level2(x: u32) -> u32 {
    let _g = Guard(x);
    black_box(thrower(x)) + 1
}

#[inline(never)]
fn level1(x: u32) -> u32 {
    black_box(level2(x)) * 2
}

#[inline(never)]
fn after(x: u32) -> u32 {
    black_box(x) + 1
}

#[inline(never)]
fn bt_leaf(depth: u32) -> u32 {
    if black_box(depth) == 0 {
        println!("{}", Backtrace::force_capture());
        return 0;
    }
    black_box(bt_leaf(depth - 1)) + 1
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("tree") => {
            let r = panic::catch_unwind(|| level1(3));
            println!("caught: {}", r.is_err());
            println!("after: {}", after(1));
        }
        Some("loop") => {
            let n: u32 = args[2].parse().unwrap();
            panic::set_hook(Box::new(|_| {}));
            let mut caught = 0;
            let mut sum = 0u64;
            for i in 0..n {
                match panic::catch_unwind(|| level1(i % 3)) {
                    Ok(v) => sum += u64::from(v),
                    Err(_) => caught += 1,
                }
                sum += u64::from(after(i));
            }
            println!("loop: caught={caught} sum={sum}");
        }
        Some("backtrace") => {
            println!("depth {}", bt_leaf(2));
            panic::set_hook(Box::new(|info| {
                println!("hook: {info}");
                println!("{}", Backtrace::force_capture());
            }));
            let r = panic::catch_unwind(|| level1(4));
            println!("caught: {}", r.is_err());
        }
        _ => {
            eprintln!("usage: rsunwind tree|loop N|backtrace");
            std::process::exit(2);
        }
    }
}
