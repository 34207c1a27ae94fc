//! Helpers of the export tests (tests/analysis/flame.rs, tests/analysis/parquet.rs): the
//! programs they trace and what they compare with.

use crate::dump::module_file_name;
use crate::paths::target_tmpdir;
use crate::programs::c_program;
use crate::report::Report;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::PathBuf;

/// tests/programs/flame.c at -O0 (every call of its source is a call).
pub fn flame_program() -> PathBuf {
    c_program("flame.c", "-O0", &["-O0", "-pthread"])
}

/// What tests/programs/flame.c prints.
pub const FLAME_OUTPUT: &str = "sink 10 fib(5) 5\n";

/// The name of a report's function as the exports show it: `name`, or
/// `name@module-file` where functions of two modules share the name.
pub fn shown_names(report: &Report) -> Vec<String> {
    let mut modules: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for f in &report.functions {
        modules.entry(&f.name).or_default().insert(&f.module);
    }
    report
        .functions
        .iter()
        .map(|f| {
            if modules[f.name.as_str()].len() > 1 {
                format!("{}@{}", f.name, module_file_name(&f.module))
            } else {
                f.name.clone()
            }
        })
        .collect()
}

/// A directory of a test's outputs kept after the run (screenshots, files
/// to look at): `target/tmp/outputs/<name>`, emptied first.
pub fn output_dir(name: &str) -> PathBuf {
    let dir = target_tmpdir().join("outputs").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}
