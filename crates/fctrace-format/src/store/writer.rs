//! [`TraceWriter`]: streams the events of each task into its file
//! (`tasks/<tid>.dat`, or `tasks/<tid>-<n>.dat` for the n-th task with the
//! same tid) and writes info.json at the end.

use super::codec::{self, ChunkEncoder, ChunkHeader, ChunkSums, EncodeScratch, CODEC_ZSTD};
use super::error::StoreError;
use super::info;
use super::layout::{task_file_name, FORMAT_VERSION, INFO_FILE, SESSIONS_DIR, TASKS_DIR};
use super::trace_info::{TaskInfo, TraceInfo};
use crate::event::RawEvent;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// zstd level of a chunk's codes and data: fast, and the call patterns
/// repeat (the codes compress about 70 times).
const ZSTD_LEVEL: i32 = 1;
/// zstd's shortest match (level 1's is 6): with 7, the recorder runs 8%
/// fewer instructions on `dense fib 27` (callgrind, the whole recording)
/// and the chunks are 5% smaller; on `dense leaf8 1000000` 3% and 3%.
const ZSTD_MIN_MATCH: u32 = 7;
/// zstd level of a chunk's timestamp deltas, a frame of their own: their
/// low bits hardly repeat, so level 1's search for matches took 2.5 to
/// 2.8 ns an event and found almost nothing that Huffman coding alone
/// does not (0.35 against 0.37 bytes an event on Lua, the same on fib);
/// this level does no search to speak of, and the literals stay Huffman
/// coded: 0.8 to 0.9 ns an event (docs/performance.md, "Timestamps in a
/// frame of their own").
const ZSTD_DELTAS_LEVEL: i32 = -1000;

/// When the encoded events buffered for all tasks together exceed this,
/// every task's partial chunk is written out (bounds memory with many
/// threads).
const GLOBAL_BUFFER_LIMIT: usize = 64 << 20;

/// A file of this size is kept in the trace directory while events are
/// written, and removed before info.json is written: so that a disk that
/// fills up still leaves room for the info.json that makes the events
/// written so far readable.
const RESERVE_SIZE: usize = 256 << 10;
const RESERVE_FILE: &str = "info.json.reserve";

/// Writes a trace directory. See the module documentation for the layout.
///
/// Memory is bounded: each task buffers at most one chunk (64Ki events or
/// 1 MiB of encoded data), all tasks together at most ~64 MiB; files are
/// opened only while a chunk is written, so any number of tasks works
/// within the file-descriptor limit. Dropping the writer without
/// [`finish`](TraceWriter::finish) loses the buffered events and leaves no
/// info.json.
pub struct TraceWriter {
    dir: PathBuf,
    /// By task id.
    tasks: BTreeMap<u32, TaskStream>,
    /// Files named so far per tid (the n-th task with a tid gets `-n`).
    names_per_tid: BTreeMap<u32, u32>,
    buffered: usize,
    events: u64,
    invalid: u64,
    bytes: u64,
    compressor: ChunkCompressor,
    scratch: EncodeScratch,
    payload: Vec<u8>,
    /// The bytes of one chunk as written (headers and compressed data).
    out: Vec<u8>,
    /// Writing failed: nothing more is written; what was buffered then
    /// was dropped.
    failed: bool,
    /// Events dropped because writing failed.
    dropped: u64,
    /// The room kept for info.json ([`RESERVE_FILE`]) exists.
    reserved: bool,
    /// The tasks' kernel events (`record -k`), by task id.
    kernel: BTreeMap<u32, super::kernel::KernelWriter>,
    /// Kernel events written, and dropped (writing failed).
    kernel_events: u64,
    kernel_dropped: u64,
    reserve_tried: bool,
    /// Flight recorder: chunks kept in memory, written by snapshots.
    ring: Option<super::ring::Ring>,
    /// Where `create` moved an earlier trace, and whether it replaced an
    /// older one there.
    kept: Option<(PathBuf, bool)>,
}

struct TaskStream {
    tid: u32,
    /// Relative to the trace directory.
    file: String,
    encoder: ChunkEncoder,
    /// The file exists and has its header.
    started: bool,
    events: u64,
}

/// Whether `dir` is a trace directory fctrace wrote (a finished trace,
/// a flight recorder's, or one whose recording did not finish): its
/// `tasks/` and `sessions/` directories, and nothing fctrace does not
/// write there or in `tasks/` (a user's directory is never taken for one,
/// to be moved aside or replaced). Err: what shows it is not one.
fn trace_dir_check(dir: &Path) -> Result<(), String> {
    if let Some(missing) = [TASKS_DIR, SESSIONS_DIR]
        .into_iter()
        .find(|name| !dir.join(name).is_dir())
    {
        return Err(format!("it has no {missing}/ directory"));
    }
    let names = |d: &Path| -> Vec<String> {
        fs::read_dir(d)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let fctrace_top = |n: &str| {
        [
            TASKS_DIR,
            SESSIONS_DIR,
            INFO_FILE,
            RESERVE_FILE,
            super::layout::RECORDER_PID_FILE,
        ]
        .contains(&n)
            || n == format!("{INFO_FILE}.tmp")
            || n.strip_prefix("snapshot.")
                .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some(other) = names(dir).into_iter().find(|n| !fctrace_top(n)) {
        return Err(format!("it holds `{other}`, which fctrace does not write"));
    }
    // tasks/<tid>.dat, <tid>-<n>.dat and their .sys files.
    let task_file = |n: &str| {
        n.strip_suffix(".dat")
            .or_else(|| n.strip_suffix(".sys"))
            .is_some_and(|stem| {
                !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit() || b == b'-')
            })
    };
    if let Some(other) = names(&dir.join(TASKS_DIR))
        .into_iter()
        .find(|n| !task_file(n))
    {
        return Err(format!(
            "it holds `{TASKS_DIR}/{other}`, which fctrace does not write"
        ));
    }
    Ok(())
}

fn is_empty_dir(dir: &Path) -> Result<bool, StoreError> {
    let mut entries =
        fs::read_dir(dir).map_err(|e| StoreError::io("cannot read directory", dir, e))?;
    Ok(entries.next().is_none())
}

/// Permissions of what the writer creates: the events hold argument
/// strings and memory contents, for the user's eyes only, whatever the
/// umask.
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Creates the directory `path` (not its parents), private: 0700 whatever
/// the umask. Fails if anything exists there.
fn mkdir_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(path)
        .map_err(|e| StoreError::io("cannot create directory", path, e))?;
    // The umask may have removed bits of the mode, never added any; the
    // directory is new and empty, set its mode exactly.
    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
        .map_err(|e| StoreError::io("cannot set the permissions of", path, e))
}

/// Opens a new file `path` for writing, private (0600 whatever the umask),
/// never through a symbolic link and never an existing file (O_EXCL,
/// O_NOFOLLOW): nobody else can have planted it.
pub(crate) fn create_private(path: &Path) -> Result<fs::File, StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| StoreError::io("cannot create", path, e))?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| StoreError::io("cannot set the permissions of", path, e))?;
    Ok(file)
}

/// Refuses an existing directory that another user could change under
/// the writer: owned by another user, or writable by others (a sticky
/// `/tmp` included). `meta` is the directory's own metadata (not a
/// symbolic link's).
fn check_private_dir(dir: &Path, meta: &fs::Metadata) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let refuse = |reason: String| StoreError::WontOverwrite {
        dir: dir.to_path_buf(),
        reason,
    };
    if meta.uid() != me {
        return Err(refuse(format!(
            "it belongs to another user (uid {}), who could read the trace or plant files in \
             it; choose a directory of your own with -d",
            meta.uid()
        )));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(refuse(format!(
            "it is writable by every user (mode {:o}), who could plant files in it; \
             `chmod o-w` it or choose another directory with -d",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

impl TraceWriter {
    /// Creates the trace directory `dir` (and its `sessions/` and `tasks/`).
    ///
    /// An existing empty directory is used as is. An existing trace
    /// directory (`trace_dir_check`: its tasks/ and sessions/, nothing
    /// fctrace does not write) is renamed to `<dir>.old`, replacing an
    /// older `<dir>.old` trace ([`kept_earlier`](Self::kept_earlier) says
    /// so). Anything else that exists is
    /// refused with [`StoreError::WontOverwrite`], and so is an existing
    /// directory of another user or writable by every user (or a symbolic
    /// link of another user to one).
    ///
    /// What the writer creates is private (directories 0700, files 0600,
    /// whatever the umask), and every file is new: never opened through a
    /// symbolic link, never one that already exists.
    pub fn create(dir: &Path) -> Result<TraceWriter, StoreError> {
        let mut kept = None;
        let exists = match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(StoreError::io("cannot access", dir, e)),
            Ok(link) => {
                if link.file_type().is_symlink() {
                    // A link is followed only if it is the user's own.
                    check_private_dir(dir, &link).map_err(|_| StoreError::WontOverwrite {
                        dir: dir.to_path_buf(),
                        reason: "it is a symbolic link of another user; choose a directory \
                                 of your own with -d"
                            .to_string(),
                    })?;
                }
                true
            }
        };
        if exists {
            let meta = fs::metadata(dir).map_err(|e| StoreError::io("cannot access", dir, e))?;
            if !meta.is_dir() {
                return Err(StoreError::WontOverwrite {
                    dir: dir.to_path_buf(),
                    reason: "it exists and is not a directory".to_string(),
                });
            }
            check_private_dir(dir, &meta)?;
            if !is_empty_dir(dir)? {
                if let Err(why) = trace_dir_check(dir) {
                    return Err(StoreError::WontOverwrite {
                        dir: dir.to_path_buf(),
                        reason: format!(
                            "it is a non-empty directory that is not an fctrace trace \
                             ({why}); remove it or choose another directory with -d"
                        ),
                    });
                }
                kept = Some(move_aside(dir)?);
                mkdir_private(dir)?;
            }
        } else {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent)
                    .map_err(|e| StoreError::io("cannot create directory", parent, e))?;
            }
            mkdir_private(dir)?;
        }
        mkdir_private(&dir.join(SESSIONS_DIR))?;
        mkdir_private(&dir.join(TASKS_DIR))?;
        let compressor = ChunkCompressor::new()
            .map_err(|e| StoreError::io("cannot set up compression for", dir, e))?;
        Ok(TraceWriter {
            dir: dir.to_path_buf(),
            tasks: BTreeMap::new(),
            names_per_tid: BTreeMap::new(),
            buffered: 0,
            events: 0,
            invalid: 0,
            bytes: 0,
            compressor,
            scratch: EncodeScratch::default(),
            payload: Vec::new(),
            out: Vec::new(),
            failed: false,
            dropped: 0,
            reserved: false,
            reserve_tried: false,
            kernel: BTreeMap::new(),
            kernel_events: 0,
            kernel_dropped: 0,
            ring: None,
            kept,
        })
    }

    /// Where an earlier trace in the directory was moved (`<dir>.old`),
    /// and whether that replaced an older `<dir>.old` trace.
    pub fn kept_earlier(&self) -> Option<&(PathBuf, bool)> {
        self.kept.as_ref()
    }

    /// The trace directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/sessions`, where the agent writes `<session>.sym`.
    pub fn sessions_dir(&self) -> PathBuf {
        self.dir.join(SESSIONS_DIR)
    }

    /// Event records stored so far (buffered ones included). After a
    /// write error: the events in the files, whole chunks only.
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Events dropped because writing failed (see
    /// [`append_task`](Self::append_task)).
    pub fn dropped_events(&self) -> u64 {
        self.dropped
    }

    /// After a write error: drops every buffered event (counted in
    /// `dropped`) and writes nothing more.
    fn fail(&mut self, rest: &[RawEvent]) {
        self.failed = true;
        self.release_reserve();
        self.dropped += crate::shm::count_events(rest);
        let mut sink = Vec::new();
        for stream in self.tasks.values_mut() {
            let n = stream.encoder.events();
            if n > 0 {
                stream.encoder.take_payload(&mut sink);
                sink.clear();
                stream.events -= u64::from(n);
                self.events -= u64::from(n);
                self.dropped += u64::from(n);
            }
        }
        self.buffered = 0;
    }

    /// Appends events of the task whose id and tid are both `tid` (for
    /// traces where tids are unique): [`append_task`](Self::append_task).
    pub fn append(&mut self, tid: u32, events: &[RawEvent]) -> Result<(), StoreError> {
        self.append_task(tid, tid, events)
    }

    /// Task `id` (thread `tid`) has its stream (and so its file's name)
    /// from its first events on.
    fn name_task(&mut self, id: u32, tid: u32) {
        if !self.tasks.contains_key(&id) {
            let file = self.new_file_name(tid);
            let mut encoder = ChunkEncoder::default();
            if let Some(r) = &self.ring {
                encoder.set_max_raw(r.chunk_raw());
            }
            self.tasks.insert(
                id,
                TaskStream {
                    tid,
                    file,
                    encoder,
                    started: false,
                    events: 0,
                },
            );
        }
    }

    /// The file name the next new task with tid `tid` gets.
    fn new_file_name(&mut self, tid: u32) -> String {
        let n = self.names_per_tid.entry(tid).or_insert(0);
        *n += 1;
        task_file_name(tid, *n)
    }

    /// Appends events of task `id` (the task's [`TaskInfo::id`]) whose
    /// thread id is `tid`. A task's events must come in its order (calls
    /// for different tasks may interleave freely). The first call for an
    /// id names its file: `tasks/<tid>.dat` for the first task with that
    /// tid, `tasks/<tid>-<n>.dat` for the n-th. Records whose kind is
    /// invalid are skipped and counted in `invalid_events`; records whose
    /// timestamp is 0 (reserved by the agent but never written, because
    /// their process died in between) are skipped.
    pub fn append_task(
        &mut self,
        id: u32,
        tid: u32,
        events: &[RawEvent],
    ) -> Result<(), StoreError> {
        if self.failed {
            self.dropped += crate::shm::count_events(events);
            return Err(StoreError::Io {
                action: "cannot write",
                path: self.dir.clone(),
                error: io::Error::other("writing stopped after an earlier error"),
            });
        }
        self.name_task(id, tid);
        let mut rest = events;
        while let Some(stream) = self.tasks.get_mut(&id) {
            let before = stream.encoder.buffered();
            let fresh = stream.encoder.events() == 0;
            let pushed = stream.encoder.push_records(rest, &mut self.scratch);
            if let Some(ring) = &mut self.ring {
                // The calls open where each chunk begins.
                let t = ring.tasks.entry(id).or_default();
                if fresh {
                    t.chunk_open.clone_from(&t.open);
                }
                super::ring::track(&mut t.open, &rest[..pushed.used]);
            }
            stream.events += u64::from(pushed.stored);
            self.events += u64::from(pushed.stored);
            self.invalid += u64::from(pushed.invalid);
            self.buffered = self.buffered - before + stream.encoder.buffered();
            rest = &rest[pushed.used..];
            if rest.is_empty() {
                break;
            }
            if stream.encoder.is_full() {
                if let Err(e) = self.write_chunk(id) {
                    self.fail(rest);
                    return Err(e);
                }
            }
        }
        let limit = self
            .ring
            .as_ref()
            .map_or(GLOBAL_BUFFER_LIMIT, |r| r.buffer_limit());
        if self.buffered > limit {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends a kernel event of task `id` (thread `tid`), in the task's
    /// time order, to its kernel events file (beside its events file,
    /// `super::kernel`). A write error drops this and later kernel events
    /// (counted: [`kernel_counts`](Self::kernel_counts)).
    pub fn append_kernel(
        &mut self,
        id: u32,
        tid: u32,
        e: &super::kernel::KernelEvent,
    ) -> Result<(), StoreError> {
        if self.failed {
            self.kernel_dropped += 1;
            return Ok(());
        }
        if !self.kernel.contains_key(&id) {
            self.name_task(id, tid);
            let file = &self.tasks[&id].file;
            let path = self.dir.join(super::kernel::sys_file_of(file));
            let w = create_private(&path).and_then(|f| super::kernel::KernelWriter::new(f, &path));
            match w {
                Ok(w) => {
                    self.kernel.insert(id, w);
                }
                Err(e) => {
                    self.kernel_dropped += 1;
                    self.fail(&[]);
                    return Err(e);
                }
            }
        }
        let w = self.kernel.get_mut(&id).expect("kernel writer");
        match w.write(e) {
            Ok(()) => {
                self.kernel_events += 1;
                Ok(())
            }
            Err(err) => {
                self.kernel_dropped += 1;
                self.fail(&[]);
                Err(err)
            }
        }
    }

    /// Makes this writer a flight recorder (`record --ring SIZE`): task
    /// events are kept in memory, at most about `size` bytes of compressed
    /// chunks for all tasks together (`super::ring` says how it is split
    /// between threads), and written only by [`snapshot`](Self::snapshot);
    /// [`finish`](Self::finish) writes nothing. Call before any event.
    pub fn set_ring(&mut self, size: u64) {
        self.ring = Some(super::ring::Ring::new(size.max(1)));
    }

    /// A flight recorder's task `id` has ended: its history is no longer
    /// kept in preference to the others'.
    pub fn ring_task_ended(&mut self, id: u32) -> Result<(), StoreError> {
        if self.ring.is_none() {
            return Ok(());
        }
        // Its last events join its kept chunks; its encoder's memory goes.
        self.write_chunk(id)?;
        if let (Some(stream), Some(r)) = (self.tasks.get_mut(&id), &self.ring) {
            let mut fresh = ChunkEncoder::default();
            fresh.set_max_raw(r.chunk_raw());
            stream.encoder = fresh;
        }
        if let Some(r) = &mut self.ring {
            r.ended(id);
        }
        self.forget_ended();
        Ok(())
    }

    /// Drops what the writer holds of ended tasks whose kept chunks are
    /// all gone (a program that creates threads for days keeps nothing
    /// of the ones that ended long ago).
    fn forget_ended(&mut self) {
        let Some(r) = &mut self.ring else { return };
        for id in std::mem::take(&mut r.forgotten) {
            if self.tasks.get(&id).is_some_and(|s| s.encoder.events() == 0) {
                self.tasks.remove(&id);
            }
        }
    }

    /// Writes a flight recorder's snapshot: the trace directory becomes a
    /// complete trace of each task's kept history (its `tasks/` and
    /// `info.json`); the previous snapshot, if any, is moved into
    /// `snapshot.<n>/` inside it (with links to the symbol tables), so that
    /// every snapshot of the run stays readable. `live` holds, per task
    /// (id, tid), the events its thread wrote since the last ones given to
    /// [`append_task`](Self::append_task) (not kept: they will come again).
    /// Each task's file begins with a history chain of the calls open where
    /// its kept history begins. `info` is completed as by `finish`.
    pub fn snapshot(
        &mut self,
        info: TraceInfo,
        reason: &str,
        taken_ns: u64,
        live: &[(u32, u32, Vec<RawEvent>)],
    ) -> Result<Snapshot, StoreError> {
        self.write_snapshot(info, reason, taken_ns, live, false)
    }

    /// Writes the last snapshot again, with its number, in place (nothing
    /// moves to `snapshot.<n>/`): for the end of the same event (a Ctrl-C
    /// snapshot brought up to the program's death by that Ctrl-C), or a
    /// program that ended with no event since (its info then says how it
    /// ended). As [`snapshot`](Self::snapshot) when none was written yet.
    pub fn rewrite_snapshot(
        &mut self,
        info: TraceInfo,
        reason: &str,
        taken_ns: u64,
        live: &[(u32, u32, Vec<RawEvent>)],
    ) -> Result<Snapshot, StoreError> {
        self.write_snapshot(info, reason, taken_ns, live, true)
    }

    fn write_snapshot(
        &mut self,
        mut info: TraceInfo,
        reason: &str,
        taken_ns: u64,
        live: &[(u32, u32, Vec<RawEvent>)],
        again: bool,
    ) -> Result<Snapshot, StoreError> {
        if self.ring.is_none() {
            return Err(StoreError::io(
                "cannot take a snapshot of",
                &self.dir,
                io::Error::other("not a flight recorder (--ring)"),
            ));
        }
        // Every task's chunk being built joins its kept chunks.
        for id in self.building() {
            self.write_chunk(id)?;
        }
        for &(id, tid, _) in live {
            self.name_task(id, tid);
        }
        let taken = self.ring.as_ref().map_or(0, |r| r.snapshots);
        let number = if again && taken > 0 { taken } else { taken + 1 };
        let tasks_dir = self.dir.join(TASKS_DIR);
        let info_path = self.dir.join(INFO_FILE);
        // The previous snapshot moves aside, readable where it goes.
        let mut earlier = None;
        if info_path.exists() && number > taken && number > 1 {
            let old = self.dir.join(format!("snapshot.{}", number - 1));
            if !old.exists() {
                mkdir_private(&old)?;
            }
            for name in [TASKS_DIR, INFO_FILE] {
                let from = self.dir.join(name);
                if from.exists() {
                    fs::rename(&from, old.join(name)).map_err(|e| {
                        StoreError::io("cannot move the previous snapshot", &from, e)
                    })?;
                }
            }
            link_sessions(&self.sessions_dir(), &old.join(SESSIONS_DIR))?;
            earlier = Some(old);
        }
        if tasks_dir.exists() {
            fs::remove_dir_all(&tasks_dir)
                .map_err(|e| StoreError::io("cannot replace", &tasks_dir, e))?;
        }
        mkdir_private(&tasks_dir)?;
        let written = self.write_snapshot_tasks(live);
        let (per_task, bytes) = match written {
            Ok(w) => w,
            Err(e) => {
                let _ = fs::remove_dir_all(&tasks_dir);
                return Err(e);
            }
        };
        let ring = self.ring.as_mut().expect("ring");
        for (&id, stream) in &self.tasks {
            if per_task.contains_key(&id) && info.task_by_id(id).is_none() {
                info.tasks.push(TaskInfo {
                    id,
                    tid: stream.tid,
                    pid: stream.tid,
                    ..TaskInfo::default()
                });
            }
        }
        for task in &mut info.tasks {
            task.events = per_task.get(&task.id).copied().unwrap_or(0);
            task.file = match self.tasks.get(&task.id) {
                Some(stream) => stream.file.clone(),
                None => {
                    let n = self.names_per_tid.entry(task.tid).or_insert(0);
                    *n += 1;
                    task_file_name(task.tid, *n)
                }
            };
        }
        let events: u64 = per_task.values().sum();
        info.format_version = FORMAT_VERSION;
        if info.fctrace_version.is_empty() {
            info.fctrace_version = env!("CARGO_PKG_VERSION").to_string();
        }
        info.events = events;
        info.invalid_events = self.invalid;
        info.bytes = bytes;
        info.snapshot = Some(super::trace_info::SnapshotInfo {
            number,
            reason: reason.to_string(),
            ring_size: ring.size,
            events_before: ring.evicted_events,
            taken_ns,
        });
        let text = info::to_json(&info);
        let tmp = self.dir.join(format!("{INFO_FILE}.tmp"));
        let _ = fs::remove_file(&tmp);
        let wrote = create_private(&tmp).and_then(|mut f| {
            f.write_all(text.as_bytes())
                .map_err(|e| StoreError::io("cannot write", &tmp, e))
        });
        if let Err(e) = wrote.and_then(|()| {
            fs::rename(&tmp, &info_path).map_err(|e| StoreError::io("cannot write", &info_path, e))
        }) {
            let _ = fs::remove_file(&tmp);
            let _ = fs::remove_dir_all(&tasks_dir);
            return Err(e);
        }
        ring.snapshots = number;
        Ok(Snapshot {
            number,
            dir: self.dir.clone(),
            earlier,
            events,
            bytes,
            events_before: ring.evicted_events,
        })
    }

    /// The task files of a snapshot: per task, its history chain, kept
    /// chunks and live events; (events per task id, bytes written).
    fn write_snapshot_tasks(
        &mut self,
        live: &[(u32, u32, Vec<RawEvent>)],
    ) -> Result<(BTreeMap<u32, u64>, u64), StoreError> {
        let ring = self.ring.as_ref().expect("ring");
        let chunk_raw = ring.chunk_raw();
        let mut ids: Vec<u32> = ring
            .tasks
            .iter()
            .filter(|(_, t)| !t.chunks.is_empty())
            .map(|(&id, _)| id)
            .chain(live.iter().filter(|l| !l.2.is_empty()).map(|l| l.0))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut per_task = BTreeMap::new();
        let mut bytes = 0u64;
        let empty = super::ring::TaskRing::default();
        for id in ids {
            let Some(stream) = self.tasks.get(&id) else {
                continue;
            };
            let ring = self.ring.as_ref().expect("ring");
            let t = ring.tasks.get(&id).unwrap_or(&empty);
            let live_records: &[RawEvent] = live
                .iter()
                .find(|l| l.0 == id)
                .map_or(&[], |l| l.2.as_slice());
            let path = self.dir.join(&stream.file);
            let mut out = codec::file_header(stream.tid).to_vec();
            let mut events = 0u64;
            // Where the kept history begins, the calls open then.
            let (open, start) = match t.chunks.front() {
                Some(c) => (&c.open, c.first_tsc),
                None => (
                    &t.open,
                    live_records
                        .iter()
                        .map(|r| r.tsc)
                        .find(|&t| t != 0)
                        .unwrap_or(1),
                ),
            };
            let chain = super::ring::history_records(open, start);
            let mut encode = |records: &[RawEvent], out: &mut Vec<u8>| {
                encode_records(
                    records,
                    chunk_raw,
                    (&mut self.compressor, &mut self.scratch),
                    &mut self.payload,
                    &path,
                    out,
                )
            };
            events += encode(&chain, &mut out)?;
            for c in &t.chunks {
                out.extend_from_slice(&c.bytes);
                events += u64::from(c.events);
            }
            events += encode(live_records, &mut out)?;
            create_private(&path)?
                .write_all(&out)
                .map_err(|e| StoreError::io("cannot write", &path, e))?;
            bytes += out.len() as u64;
            per_task.insert(id, events);
        }
        Ok((per_task, bytes))
    }

    /// The tasks whose chunk being built holds events.
    fn building(&self) -> Vec<u32> {
        self.tasks
            .iter()
            .filter(|(_, s)| s.encoder.events() > 0)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Kernel events written and dropped.
    pub fn kernel_counts(&self) -> (u64, u64) {
        (self.kernel_events, self.kernel_dropped)
    }

    /// Writes out every task's partial chunk. Not needed before
    /// [`finish`](TraceWriter::finish); useful to bound what a crash of the
    /// recorder would lose.
    ///
    /// A write error (a full disk...) leaves the files as they were before
    /// the chunk that failed (whole chunks only, readable) and the writer
    /// failed: every event not yet written is dropped and counted in
    /// [`dropped_events`](Self::dropped_events), later appends are refused
    /// (and counted), and [`finish`](Self::finish) still writes info.json.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.failed {
            return Ok(());
        }
        for id in self.building() {
            if let Err(e) = self.write_chunk(id) {
                self.fail(&[]);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes the buffered events and info.json. The writer fills in
    /// `format_version`, `fctrace_version` (if empty), `events`,
    /// `invalid_events` and `bytes`, and each task's `file` and `events`
    /// (tasks are matched by [`TaskInfo::id`]; a task without events gets
    /// a file name too, but no file); a task that has events but is
    /// missing from `info.tasks` is added (with pid = tid and a warning).
    pub fn finish(mut self, mut info: TraceInfo) -> Result<(), StoreError> {
        if self.ring.is_some() {
            // A flight recorder writes snapshots only.
            return Ok(());
        }
        // After a failure, info.json is still written: it describes the
        // whole chunks that were.
        let flushed = self.flush();
        for (_, w) in std::mem::take(&mut self.kernel) {
            if let Err(e) = w.finish() {
                info.warnings
                    .push(format!("not recorded: the end of the kernel events: {e}"));
            }
        }
        for (&id, stream) in &self.tasks {
            if stream.started && info.task_by_id(id).is_none() {
                info.tasks.push(TaskInfo {
                    id,
                    tid: stream.tid,
                    pid: stream.tid,
                    ..TaskInfo::default()
                });
                info.warnings.push(format!(
                    "task {} has events but the recorder knew nothing else about it",
                    stream.tid
                ));
            }
        }
        for task in &mut info.tasks {
            match self.tasks.get(&task.id) {
                Some(stream) => {
                    task.events = stream.events;
                    task.file = stream.file.clone();
                }
                None => {
                    task.events = 0;
                    task.file = {
                        let n = self.names_per_tid.entry(task.tid).or_insert(0);
                        *n += 1;
                        task_file_name(task.tid, *n)
                    };
                }
            }
        }
        self.release_reserve();
        info.format_version = FORMAT_VERSION;
        if info.fctrace_version.is_empty() {
            info.fctrace_version = env!("CARGO_PKG_VERSION").to_string();
        }
        info.events = self.events;
        info.invalid_events = self.invalid;
        info.bytes = self.bytes;
        let text = info::to_json(&info);
        let tmp = self.dir.join(format!("{INFO_FILE}.tmp"));
        let path = self.dir.join(INFO_FILE);
        create_private(&tmp)?
            .write_all(text.as_bytes())
            .map_err(|e| StoreError::io("cannot write", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| StoreError::io("cannot write", &path, e))?;
        flushed
    }

    /// Keeps [`RESERVE_SIZE`] bytes of the disk for info.json (before the
    /// first chunk is written). Best effort: a disk too full for it fails
    /// at the chunk anyway.
    fn reserve(&mut self) {
        if self.failed {
            return;
        }
        let path = self.dir.join(RESERVE_FILE);
        let made = create_private(&path).and_then(|mut f| {
            f.write_all(&vec![0u8; RESERVE_SIZE])
                .map_err(|e| StoreError::io("cannot write", &path, e))
        });
        match made {
            Ok(()) => self.reserved = true,
            Err(_) => {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// Gives the room kept for info.json back.
    fn release_reserve(&mut self) {
        if self.reserved {
            let _ = fs::remove_file(self.dir.join(RESERVE_FILE));
            self.reserved = false;
        }
    }

    /// Compresses task `id`'s buffered events into one chunk and appends it
    /// to its file (creating the file with its header the first time).
    fn write_chunk(&mut self, id: u32) -> Result<(), StoreError> {
        if !self.reserve_tried && self.ring.is_none() {
            self.reserve_tried = true;
            self.reserve();
        }
        let Some(stream) = self.tasks.get_mut(&id) else {
            return Ok(());
        };
        if stream.encoder.events() == 0 {
            return Ok(());
        }
        self.buffered -= stream.encoder.buffered();
        let sums = stream.encoder.take_payload(&mut self.payload);
        let ChunkSums {
            events,
            first_tsc,
            last_tsc,
            ..
        } = sums;
        let path = self.dir.join(&stream.file);
        let out = &mut self.out;
        out.clear();
        if !stream.started && self.ring.is_none() {
            out.extend_from_slice(&codec::file_header(stream.tid));
        }
        seal_chunk(&mut self.compressor, &self.payload, sums, &path, out)?;
        if let Some(ring) = &mut self.ring {
            let open = std::mem::take(&mut ring.tasks.entry(id).or_default().chunk_open);
            ring.keep(
                id,
                super::ring::KeptChunk {
                    bytes: out.clone(),
                    events,
                    first_tsc,
                    last_tsc,
                    open,
                },
            );
            if !ring.forgotten.is_empty() {
                self.forget_ended();
            }
            return Ok(());
        }
        let opened = if stream.started {
            // The file this writer created (in its private directory).
            OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(|e| StoreError::io("cannot open", &path, e))
        } else {
            create_private(&path)
        };
        let written = opened.and_then(|mut file| {
            let before = if stream.started {
                file.metadata().map(|m| m.len()).unwrap_or(0)
            } else {
                0
            };
            file.write_all(out).map_err(|e| {
                // No half chunk at the end of the file (it would read
                // as damaged): back to the whole chunks before it.
                if stream.started {
                    let _ = file.set_len(before);
                }
                StoreError::io("cannot write", &path, e)
            })
        });
        if let Err(e) = written {
            if !stream.started {
                let _ = fs::remove_file(&path);
            }
            stream.events -= u64::from(events);
            self.events -= u64::from(events);
            self.dropped += u64::from(events);
            return Err(e);
        }
        stream.started = true;
        self.bytes += out.len() as u64;
        Ok(())
    }
}

/// What [`TraceWriter::snapshot`] wrote.
#[derive(Debug)]
pub struct Snapshot {
    /// 1 for the run's first snapshot, then 2, ...
    pub number: u32,
    /// The trace directory, now a trace of this snapshot.
    pub dir: PathBuf,
    /// Where the previous snapshot went (`<dir>/snapshot.<n-1>`).
    pub earlier: Option<PathBuf>,
    /// Events and bytes in its task files.
    pub events: u64,
    pub bytes: u64,
    /// Events recorded before its history (dropped from the ring).
    pub events_before: u64,
}

/// Encodes `records` (the agent's) into chunks of at most `chunk_raw`
/// encoded bytes appended to `out`; the events stored.
fn encode_records(
    records: &[RawEvent],
    chunk_raw: usize,
    (compressor, scratch): (&mut ChunkCompressor, &mut EncodeScratch),
    payload: &mut Vec<u8>,
    path: &Path,
    out: &mut Vec<u8>,
) -> Result<u64, StoreError> {
    let mut enc = ChunkEncoder::default();
    enc.set_max_raw(chunk_raw);
    let mut rest = records;
    let mut stored = 0u64;
    loop {
        let pushed = enc.push_records(rest, scratch);
        stored += u64::from(pushed.stored);
        rest = &rest[pushed.used..];
        if enc.events() > 0 && (rest.is_empty() || enc.is_full()) {
            let sums = enc.take_payload(payload);
            seal_chunk(compressor, payload, sums, path, out)?;
        }
        if rest.is_empty() || pushed.used == 0 && enc.events() == 0 {
            return Ok(stored);
        }
    }
}

/// Links (or copies) every symbol table of `from` into the new directory
/// `to`.
fn link_sessions(from: &Path, to: &Path) -> Result<(), StoreError> {
    if !to.exists() {
        mkdir_private(to)?;
    }
    let entries =
        fs::read_dir(from).map_err(|e| StoreError::io("cannot read directory", from, e))?;
    for e in entries.flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if dst.exists() || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if fs::hard_link(&src, &dst).is_err() {
            let data = fs::read(&src).map_err(|e| StoreError::io("cannot read", &src, e))?;
            create_private(&dst)?
                .write_all(&data)
                .map_err(|e| StoreError::io("cannot write", &dst, e))?;
        }
    }
    Ok(())
}

/// The two zstd contexts of a writer, and room kept from chunk to chunk:
/// a chunk's compressed payload is two zstd frames, its codes and data,
/// then its timestamp deltas, each compressed its own way (zstd
/// decompresses concatenated frames as one).
struct ChunkCompressor {
    streams: zstd::bulk::Compressor<'static>,
    deltas: zstd::bulk::Compressor<'static>,
    compressed: Vec<u8>,
    tail: Vec<u8>,
}

impl ChunkCompressor {
    fn new() -> io::Result<ChunkCompressor> {
        use zstd::zstd_safe::{CParameter, ParamSwitch};
        let mut streams = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
        streams.set_parameter(CParameter::MinMatch(ZSTD_MIN_MATCH))?;
        let mut deltas = zstd::bulk::Compressor::new(ZSTD_DELTAS_LEVEL)?;
        // Negative levels turn Huffman coding of literals off by default.
        deltas.set_parameter(CParameter::LiteralCompressionMode(ParamSwitch::Enable))?;
        Ok(ChunkCompressor {
            streams,
            deltas,
            compressed: Vec::new(),
            tail: Vec::new(),
        })
    }

    /// `payload` compressed: `payload[..deltas_at]` then the rest, each
    /// a frame.
    fn compress(&mut self, payload: &[u8], deltas_at: usize) -> io::Result<&[u8]> {
        let (head, deltas) = payload.split_at(deltas_at.min(payload.len()));
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(head.len()));
        self.streams
            .compress_to_buffer(head, &mut self.compressed)?;
        if !deltas.is_empty() {
            self.tail.clear();
            self.tail
                .reserve(zstd::zstd_safe::compress_bound(deltas.len()));
            self.deltas.compress_to_buffer(deltas, &mut self.tail)?;
            self.compressed.extend_from_slice(&self.tail);
        }
        Ok(&self.compressed)
    }
}

/// Compresses a chunk's `payload` (with its counts and where its deltas
/// begin) and appends its header and compressed bytes to `out`.
fn seal_chunk(
    compressor: &mut ChunkCompressor,
    payload: &[u8],
    sums: ChunkSums,
    path: &Path,
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let compressed = compressor
        .compress(payload, sums.deltas_at)
        .map_err(|e| StoreError::io("cannot compress events for", path, e))?;
    let too_big = |what: &str| StoreError::Io {
        action: "cannot write",
        path: path.to_path_buf(),
        error: io::Error::other(format!("chunk {what} exceeds 4 GiB")),
    };
    let mut header = ChunkHeader {
        compressed_len: u32::try_from(compressed.len()).map_err(|_| too_big("data"))?,
        raw_len: u32::try_from(payload.len()).map_err(|_| too_big("payload"))?,
        events: sums.events,
        first_tsc: sums.first_tsc,
        last_tsc: sums.last_tsc,
        codec: CODEC_ZSTD,
        crc: 0,
    };
    header.crc = ChunkHeader::checksum(&header.to_bytes(), compressed);
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(compressed);
    Ok(())
}

/// Renames the trace directory `dir` to `<dir>.old`, replacing a previous
/// `<dir>.old` trace (never anything else).
fn move_aside(dir: &Path) -> Result<(PathBuf, bool), StoreError> {
    // `components()` drops a trailing slash: "t/" becomes "t.old", not "t/.old".
    let mut old_name: OsString = dir.components().as_path().as_os_str().to_os_string();
    old_name.push(".old");
    let old = PathBuf::from(old_name);
    let replaced = match fs::symlink_metadata(&old) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(StoreError::io("cannot access", &old, e)),
        Ok(meta) => {
            let replaceable = meta.is_dir()
                && !meta.file_type().is_symlink()
                && (trace_dir_check(&old).is_ok() || is_empty_dir(&old)?);
            if !replaceable {
                return Err(StoreError::WontOverwrite {
                    dir: dir.to_path_buf(),
                    reason: format!(
                        "the previous trace there would be moved to {}, which exists and is \
                         not an fctrace trace; remove it or choose another directory with -d",
                        old.display()
                    ),
                });
            }
            fs::remove_dir_all(&old)
                .map_err(|e| StoreError::io("cannot remove the old trace", &old, e))?;
            true
        }
    };
    fs::rename(dir, &old).map_err(|e| StoreError::io("cannot rename", dir, e))?;
    Ok((old, replaced))
}
