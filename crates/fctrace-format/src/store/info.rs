//! info.json: (de)serialization through private mirror types, so the public
//! types carry no serde attributes and the JSON shape is defined here only.

use super::clock::Clock;
use super::error::StoreError;
use super::layout::{task_file_name, FORMAT_VERSION, TASKS_DIR};
use super::trace_info::{ExitStatus, TaskInfo, TaskOrigin, TraceInfo};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    options: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    detached: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    kernel_events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<SnapshotFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    run_facts: Vec<(String, String)>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    number: u32,
    reason: String,
    ring_size: u64,
    events_before: u64,
    taken_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// Since version 2 (version 1: the tid).
    #[serde(default)]
    id: Option<u32>,
    /// Since version 2: start, thread, fork, exec, spawn.
    #[serde(default)]
    origin: Option<String>,
    /// Since version 2: the id of the parent task.
    #[serde(default)]
    parent: Option<u32>,
    /// Since version 2 (version 1: `tasks/<tid>.dat`).
    #[serde(default)]
    file: Option<String>,
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
    /// (Absent: mono.)
    #[serde(default, skip_serializing_if = "String::is_empty")]
    name: String,
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
                id: Some(t.id),
                origin: Some(t.origin.as_str().to_string()),
                parent: t.parent,
                file: Some(t.file.clone()),
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
            name: info.clock.name.clone(),
        },
        events: info.events,
        lost_events: info.lost_events,
        invalid_events: info.invalid_events,
        bytes: info.bytes,
        warnings: info.warnings.clone(),
        options: info.options.clone(),
        detached: info.detached,
        kernel_events: info.kernel_events,
        snapshot: info.snapshot.as_ref().map(|s| SnapshotFile {
            number: s.number,
            reason: s.reason.clone(),
            ring_size: s.ring_size,
            events_before: s.events_before,
            taken_ns: s.taken_ns,
        }),
        run_facts: info.facts.clone(),
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
    let mut tasks = Vec::with_capacity(file.tasks.len());
    let mut ids = HashSet::new();
    for (index, t) in file.tasks.into_iter().enumerate() {
        let id = match t.id {
            Some(id) => id,
            None if version == 1 => t.tid,
            None => u32::try_from(index).unwrap_or(u32::MAX),
        };
        if !ids.insert(id) {
            return Err(bad(format!("two tasks have the id {id}")));
        }
        let origin = match &t.origin {
            Some(o) => TaskOrigin::parse(o)
                .ok_or_else(|| bad(format!("task {id}: unknown origin {o:?}")))?,
            None if t.parent_tid.is_none() => TaskOrigin::Start,
            None if t.pid != t.tid => TaskOrigin::Thread,
            None => TaskOrigin::Fork,
        };
        let parent = match (t.parent, version) {
            (Some(p), _) => Some(p),
            // Version 1: tids are unique and are the ids.
            (None, 1) => t.parent_tid,
            (None, _) => None,
        };
        let task_file = t.file.unwrap_or_else(|| task_file_name(t.tid, 1));
        if !is_task_file_name(&task_file) {
            return Err(bad(format!(
                "task {id}: {task_file:?} is not a file name in {TASKS_DIR}/"
            )));
        }
        tasks.push(TaskInfo {
            id,
            origin,
            parent,
            file: task_file,
            tid: t.tid,
            pid: t.pid,
            ppid: t.ppid,
            parent_tid: t.parent_tid,
            session: t.session,
            comm: t.comm,
            events: t.events,
        });
    }
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
        tasks,
        clock: Clock {
            tsc_hz: file.clock.tsc_hz,
            pairs: file.clock.pairs,
            name: file.clock.name,
        },
        events: file.events,
        lost_events: file.lost_events,
        invalid_events: file.invalid_events,
        bytes: file.bytes,
        warnings: file.warnings,
        options: file.options,
        detached: file.detached,
        kernel_events: file.kernel_events,
        snapshot: file.snapshot.map(|s| super::trace_info::SnapshotInfo {
            number: s.number,
            reason: s.reason,
            ring_size: s.ring_size,
            events_before: s.events_before,
            taken_ns: s.taken_ns,
        }),
        facts: file.run_facts,
    })
}

/// `tasks/<name>` with a plain file name (no directory, no `..`): a reader
/// never opens anything outside the trace's `tasks/`.
fn is_task_file_name(path: &str) -> bool {
    path.strip_prefix(TASKS_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| {
            !name.is_empty()
                && !name.contains('/')
                && name != "."
                && name != ".."
                && !name.contains('\0')
        })
}
