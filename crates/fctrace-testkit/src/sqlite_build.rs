//! The SQLite amalgamation built with a test driver (tests/runtimes/sqlite.rs
//! describes it).

use crate::paths::program_source;
use crate::programs::{package_dir, Build, Lang};

use std::path::PathBuf;

/// Rows the driver inserts (as in sqlite_driver.c).
pub const SQLITE_ROWS: u64 = 2000;

/// The directory of the amalgamation's sqlite3.c.
pub fn sqlite_dir() -> PathBuf {
    let dir = package_dir("libsqlite3-sys").join("sqlite3");
    assert!(
        dir.join("sqlite3.c").exists(),
        "no sqlite3.c in {}",
        dir.display()
    );
    dir
}

/// The driver linked with sqlite3.c, both compiled with `opt`.
pub fn sqlite_driver(opt: &str) -> PathBuf {
    sqlite_program("sqlite_driver.c", opt)
}

/// The program `tests/programs/<source>` linked with sqlite3.c, both
/// compiled with `opt`.
pub fn sqlite_program(source: &str, opt: &str) -> PathBuf {
    let dir = sqlite_dir();
    // Single-threaded, no extension loading: no pthread or dl calls. No
    // HAVE_MALLOC_USABLE_SIZE: SQLite keeps allocation sizes itself, so its
    // code paths do not depend on the malloc in use (valgrind replaces it).
    let defines = ["-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION"];
    let mut flags = vec![opt];
    flags.extend(defines);
    let object = Build::new(
        Lang::C,
        &format!("sqlite3{opt}.o"),
        &[dir.join("sqlite3.c")],
        &flags,
    )
    .object()
    .build();
    let include = format!("-I{}", dir.display());
    let mut flags = vec![opt, include.as_str()];
    flags.extend(defines);
    let stem = source.trim_end_matches(".c");
    Build::new(
        Lang::C,
        &format!("{stem}{opt}"),
        &[program_source(source), object],
        &flags,
    )
    .libs(&["-lm"])
    .build()
}
