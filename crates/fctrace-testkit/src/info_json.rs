//! A trace's `info.json`, as JSON.

use std::path::Path;

/// The trace's `info.json`, parsed; panics if it is missing or not JSON.
#[track_caller]
pub fn info_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("info.json"))
        .unwrap_or_else(|e| panic!("{}: no info.json: {e}", dir.display()));
    serde_json::from_str(&text).expect("info.json is JSON")
}
