//! prog.rs: a Rust program for fctrace's tests, built with plain rustc (the
//! crate is `prog`, after the file name). Its functions must be reported
//! demangled without the hash: `prog::compute`, `prog::fib`,
//! `<prog::Square as prog::Shape>::area`.
//!
//! Semantics (counts the tests check at opt-level 0, where nothing is
//! inlined or turned into loops): prog::main 1, prog::compute 1,
//! prog::leaf LEN, prog::fib 2 * F(FIB_N + 1) - 1, prog::total_area 1,
//! <prog::Square as prog::Shape>::area 2.

use std::hint::black_box;

pub const LEN: u64 = 50;
pub const FIB_N: u64 = 10;

pub trait Shape {
    fn area(&self) -> u64;
}

pub struct Square(pub u64);

impl Shape for Square {
    #[inline(never)]
    fn area(&self) -> u64 {
        self.0 * self.0
    }
}

#[inline(never)]
pub fn leaf(x: u64) -> u64 {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7
}

#[inline(never)]
pub fn compute(v: &[u64]) -> u64 {
    v.iter().map(|&x| leaf(x)).fold(0u64, |a, b| a.wrapping_add(b))
}

#[inline(never)]
pub fn fib(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

#[inline(never)]
pub fn total_area(shapes: &[&dyn Shape]) -> u64 {
    shapes.iter().map(|s| s.area()).sum()
}

fn main() {
    let v: Vec<u64> = (0..black_box(LEN)).collect();
    let c = compute(&v);
    let f = fib(black_box(FIB_N));
    let a = Square(black_box(3));
    let b = Square(black_box(4));
    let shapes: Vec<&dyn Shape> = vec![&a, &b];
    let t = total_area(black_box(&shapes));
    println!("rust: compute={c} fib={f} area={t}");
}
