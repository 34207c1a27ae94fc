//! A release fctrace's debug information (the names and file:line of its
//! own backtraces) is compressed by the linker. (The agent it embeds is
//! built by crates/fctrace-record/build.rs.)

use std::env;

fn main() {
    // zlib-compressed debug sections, which std's backtraces read as they
    // are: a 75 MB binary becomes 32 MB, with the same backtraces (full
    // function paths, file:line; line tables only would be 65 MB, or 25
    // MB compressed, and name frames `run` for fctrace::commands::run).
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
