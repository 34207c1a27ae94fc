//! The report (`fctrace report --format json`), read into plain structs.

use crate::process::clip;
use crate::record::fctrace;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    pub functions: Vec<FnStat>,
    pub tasks: Vec<Task>,
    pub events: u64,
    pub lost_events: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FnStat {
    pub name: String,
    pub symbol: String,
    pub module: String,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// null when no call of the function returned (e.g. `exit`): there is
    /// no duration to take a minimum, maximum or mean of.
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub avg_ns: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    pub tid: u64,
    pub pid: u64,
    pub ppid: u64,
    pub session: u64,
    pub comm: String,
}

/// `fctrace report --format json --show-runtime`: every recorded call
/// (the C runtime's too, as callgrind counts them).
#[track_caller]
pub fn report_json_text(dir: &Path) -> String {
    report_json_text_with(dir, &[OsStr::new("--show-runtime")])
}

/// `fctrace report -d DIR --format json` with the options `extra`.
pub fn report_json_text_with(dir: &Path, extra: &[&OsStr]) -> String {
    let mut args = vec![
        OsStr::new("report"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("json"),
    ];
    args.extend_from_slice(extra);
    let r = fctrace(&args);
    assert!(r.success(), "fctrace report failed\n{}", r.describe());
    r.stdout
}

#[track_caller]
pub fn report(dir: &Path) -> Report {
    let text = report_json_text(dir);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "report of {} is not the JSON of the contract: {e}\n--- report ---\n{}",
            dir.display(),
            clip(&text, 6000)
        )
    })
}

/// Canonical form of a path for comparisons (the path itself if it cannot
/// be resolved).
pub fn canonical(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Report {
    /// The functions whose module is `exe`.
    pub fn functions_of(&self, exe: &Path) -> Vec<&FnStat> {
        let exe = canonical(exe);
        self.functions
            .iter()
            .filter(|f| canonical(Path::new(&f.module)) == exe)
            .collect()
    }
    /// Calls by demangled name, over all modules.
    pub fn calls_by_name(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for f in &self.functions {
            *m.entry(f.name.clone()).or_insert(0) += f.calls;
        }
        m
    }
    /// Calls of the function named `name` (0 if absent).
    pub fn calls(&self, name: &str) -> u64 {
        self.functions
            .iter()
            .filter(|f| f.name == name)
            .map(|f| f.calls)
            .sum()
    }
    pub fn function(&self, name: &str) -> Option<&FnStat> {
        self.functions.iter().find(|f| f.name == name)
    }
}
