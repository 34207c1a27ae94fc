//! info.json: (de)serialization through private mirror types, so the public
//! types carry no serde attributes and the JSON shape is defined here only.

use super::{Clock, ExitStatus, StoreError, TaskInfo, TraceInfo, FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Value of the `format` key: identifies an fctrace info.json.
pub(crate) const FORMAT_NAME: &str = "fctrace-trace";

#[derive(Serialize, Deserialize)]
struct InfoFile {
    format: String,
    format_version: u32,
    fctrace_version: String,
    program: String,
    args: Vec<String>,
    cwd: String,
    start_unix_ns: u64,
    exit: Option<ExitFile>,
    tasks: Vec<TaskFile>,
    clock: ClockFile,
    events: u64,
    lost_events: u64,
    #[serde(default)]
    invalid_events: u64,
    bytes: u64,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ExitFile {
    Code {
        code: i32,
    },
    Signal {
        signal: i32,
        #[serde(default)]
        core: bool,
    },
}

#[derive(Serialize, Deserialize)]
struct TaskFile {
    tid: u32,
    pid: u32,
    ppid: u32,
    #[serde(default)]
    parent_tid: Option<u32>,
    session: u32,
    #[serde(default)]
    comm: String,
    #[serde(default)]
    events: u64,
}

#[derive(Serialize, Deserialize)]
struct ClockFile {
    tsc_hz: f64,
    pairs: Vec<(u64, u64)>,
}

pub(crate) fn to_json(info: &TraceInfo) -> String {
    let file = InfoFile {
        format: FORMAT_NAME.to_string(),
        format_version: info.format_version,
        fctrace_version: info.fctrace_version.clone(),
        program: info.program.clone(),
        args: info.args.clone(),
        cwd: info.cwd.clone(),
        start_unix_ns: info.start_unix_ns,
        exit: info.exit.map(|e| match e {
            ExitStatus::Code(code) => ExitFile::Code { code },
            ExitStatus::Signal { signal, core } => ExitFile::Signal { signal, core },
        }),
        tasks: info
            .tasks
            .iter()
            .map(|t| TaskFile {
                tid: t.tid,
                pid: t.pid,
                ppid: t.ppid,
                parent_tid: t.parent_tid,
                session: t.session,
                comm: t.comm.clone(),
                events: t.events,
            })
            .collect(),
        clock: ClockFile {
            // JSON has no NaN/infinity: an unusable frequency is written as 0.
            tsc_hz: if info.clock.tsc_hz.is_finite() {
                info.clock.tsc_hz
            } else {
                0.0
            },
            pairs: info.clock.pairs.clone(),
        },
        events: info.events,
        lost_events: info.lost_events,
        invalid_events: info.invalid_events,
        bytes: info.bytes,
        warnings: info.warnings.clone(),
    };
    let mut text = serde_json::to_string_pretty(&file).unwrap_or_else(|_| String::from("{}"));
    text.push('\n');
    text
}

/// Parses info.json. `dir` is the trace directory (for "not a trace").
pub(crate) fn from_json(dir: &Path, path: &Path, text: &str) -> Result<TraceInfo, StoreError> {
    let bad = |reason: String| StoreError::BadInfo {
        path: path.to_path_buf(),
        reason,
    };
    // First only the identification, so that a newer version is reported as
    // such even if its shape has changed.
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad("not a JSON object".to_string()))?;
    if object.get("format").and_then(|v| v.as_str()) != Some(FORMAT_NAME) {
        return Err(StoreError::NotATrace {
            dir: dir.to_path_buf(),
            reason: format!(
                "{} does not say \"format\": \"{FORMAT_NAME}\"",
                path.display()
            ),
        });
    }
    let version = object
        .get("format_version")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| bad("`format_version` is missing or not a number".to_string()))?;
    if version > u64::from(FORMAT_VERSION) {
        return Err(StoreError::NewerVersion {
            path: path.to_path_buf(),
            found: u32::try_from(version).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION,
        });
    }
    if version == 0 {
        return Err(bad("format_version 0 is not valid".to_string()));
    }
    let file: InfoFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    Ok(TraceInfo {
        format_version: file.format_version,
        fctrace_version: file.fctrace_version,
        program: file.program,
        args: file.args,
        cwd: file.cwd,
        start_unix_ns: file.start_unix_ns,
        exit: file.exit.map(|e| match e {
            ExitFile::Code { code } => ExitStatus::Code(code),
            ExitFile::Signal { signal, core } => ExitStatus::Signal { signal, core },
        }),
        tasks: file
            .tasks
            .into_iter()
            .map(|t| TaskInfo {
                tid: t.tid,
                pid: t.pid,
                ppid: t.ppid,
                parent_tid: t.parent_tid,
                session: t.session,
                comm: t.comm,
                events: t.events,
            })
            .collect(),
        clock: Clock {
            tsc_hz: file.clock.tsc_hz,
            pairs: file.clock.pairs,
        },
        events: file.events,
        lost_events: file.lost_events,
        invalid_events: file.invalid_events,
        bytes: file.bytes,
        warnings: file.warnings,
    })
}
