//! A test's own scratch directory.

use crate::record::TraceDir;

use std::fs;

/// A scratch directory, created (removed at the end unless the test fails).
pub fn scratch(label: &str) -> TraceDir {
    let d = TraceDir::new(label);
    fs::create_dir_all(&d.path).unwrap();
    d
}
