//! `fctrace dump`: running it, and the report's counts to compare its
//! output with.

use crate::record::{fctrace, TraceDir};
use crate::report::Report;
use crate::scratch::scratch;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The file name of a module path (`/usr/lib/libc.so.6` -> `libc.so.6`),
/// as the dump formats name a call's category.
pub fn module_file_name(module: &str) -> String {
    Path::new(module)
        .file_name()
        .map_or_else(|| module.to_string(), |f| f.to_string_lossy().into_owned())
}

/// `fctrace dump -d DIR OPTS -o OUT/FILE`: the file written, in a fresh
/// scratch directory (returned with it: dropping it removes the file).
/// Asserts success and that fctrace warned about nothing.
#[track_caller]
pub fn dump_file(dir: &Path, opts: &[&str], file: &str) -> (TraceDir, PathBuf) {
    let out = scratch("dump");
    let path = out.path.join(file);
    let mut args: Vec<&OsStr> = vec![OsStr::new("dump"), OsStr::new("-d"), dir.as_os_str()];
    args.extend(opts.iter().map(OsStr::new));
    args.extend([OsStr::new("-o"), path.as_os_str()]);
    let r = fctrace(&args);
    assert!(
        r.success() && !r.stderr.contains("warning") && r.stdout.is_empty(),
        "fctrace dump {opts:?} of {} failed, warned or wrote to stdout\n{}",
        dir.display(),
        r.describe()
    );
    (out, path)
}

impl Report {
    /// Calls by (name, module file name): how the dump formats name and
    /// categorise a call.
    pub fn calls_by_name_and_module(&self) -> BTreeMap<(String, String), u64> {
        let mut m = BTreeMap::new();
        for f in &self.functions {
            *m.entry((f.name.clone(), module_file_name(&f.module)))
                .or_insert(0) += f.calls;
        }
        m
    }
}
