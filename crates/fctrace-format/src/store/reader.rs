//! [`Trace`]: opens a trace directory and streams the events of its tasks.

use super::codec::{
    self, ChunkDecoder, ChunkHeader, CHUNK_HEADER_LEN, CODEC_ZSTD, FILE_HEADER_LEN,
};
use super::{info, task_path, ClockMap, Event, StoreError, TaskInfo, TraceInfo};
use super::{INFO_FILE, SESSIONS_DIR, TASKS_DIR};
use crate::symtab::SymTab;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// An opened trace directory: its metadata and symbol tables. Events are
/// read on demand with [`Trace::events`].
#[derive(Debug)]
pub struct Trace {
    pub dir: PathBuf,
    pub info: TraceInfo,
    /// Symbol tables by session id. A session whose table is missing or
    /// unreadable is absent (see `load_warnings`): its functions have no
    /// names.
    pub sessions: BTreeMap<u32, SymTab>,
    /// Problems found while opening that do not prevent reading the trace
    /// (unreadable symbol tables, ...), one sentence each.
    pub load_warnings: Vec<String>,
    clock: ClockMap,
}

impl Trace {
    /// Opens the trace directory `dir`: reads info.json and every
    /// `sessions/*.sym`.
    pub fn open(dir: &Path) -> Result<Trace, StoreError> {
        match fs::metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NoTrace {
                    dir: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(StoreError::io("cannot access", dir, e)),
            Ok(meta) if !meta.is_dir() => {
                return Err(StoreError::NotATrace {
                    dir: dir.to_path_buf(),
                    reason: "it is not a directory".to_string(),
                })
            }
            Ok(_) => {}
        }
        let info_path = dir.join(INFO_FILE);
        let bytes = match fs::read(&info_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let reason = if dir.join(TASKS_DIR).is_dir() {
                    format!(
                        "{INFO_FILE} is missing: the recording did not finish (was fctrace killed?)"
                    )
                } else {
                    format!("it has no {INFO_FILE}")
                };
                return Err(StoreError::NotATrace {
                    dir: dir.to_path_buf(),
                    reason,
                });
            }
            Err(e) => return Err(StoreError::io("cannot read", &info_path, e)),
        };
        let text = String::from_utf8(bytes).map_err(|_| StoreError::BadInfo {
            path: info_path.clone(),
            reason: "not valid UTF-8".to_string(),
        })?;
        let info = info::from_json(dir, &info_path, &text)?;

        let mut sessions = BTreeMap::new();
        let mut unusable = BTreeSet::new();
        let mut load_warnings = Vec::new();
        let sessions_dir = dir.join(SESSIONS_DIR);
        match fs::read_dir(&sessions_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("cannot read directory", &sessions_dir, e)),
            Ok(entries) => {
                for entry in entries {
                    let entry = entry
                        .map_err(|e| StoreError::io("cannot read directory", &sessions_dir, e))?;
                    let name = entry.file_name();
                    let Some(id) = name
                        .to_str()
                        .and_then(|n| n.strip_suffix(".sym"))
                        .and_then(|n| n.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    let path = entry.path();
                    let bytes =
                        fs::read(&path).map_err(|e| StoreError::io("cannot read", &path, e))?;
                    let text = String::from_utf8_lossy(&bytes);
                    if !text.is_empty() && !text.ends_with('\n') {
                        load_warnings.push(format!(
                            "{} is truncated (its last line is incomplete): some functions of \
                             session {id} are shown by number",
                            path.display()
                        ));
                    }
                    match SymTab::parse(&text) {
                        Ok(table) => {
                            if table.session != id {
                                load_warnings.push(format!(
                                    "{} says it is session {}; using it as session {id}",
                                    path.display(),
                                    table.session
                                ));
                            }
                            sessions.insert(id, table);
                        }
                        Err(e) => {
                            unusable.insert(id);
                            load_warnings.push(format!(
                                "cannot use symbol table {}: {e}; functions of session {id} \
                                 are shown by number",
                                path.display()
                            ));
                        }
                    }
                }
            }
        }
        let mut missing: Vec<u32> = info
            .tasks
            .iter()
            .map(|t| t.session)
            .filter(|s| !sessions.contains_key(s) && !unusable.contains(s))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for s in missing {
            load_warnings.push(format!(
                "no symbol table for session {s} ({} is missing); its functions are shown by number",
                super::session_path(dir, s).display()
            ));
        }
        let clock = ClockMap::new(&info.clock);
        Ok(Trace {
            dir: dir.to_path_buf(),
            info,
            sessions,
            load_warnings,
            clock,
        })
    }

    /// Converts a raw TSC value to CLOCK_MONOTONIC nanoseconds: linear
    /// through the first and last calibration pairs, or from one pair and
    /// `tsc_hz`, or (no pair) `tsc * 1e9 / tsc_hz`.
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        self.clock.to_ns(tsc)
    }

    /// The symbol table of the session of the first task with tid `tid`,
    /// if there is one.
    pub fn symtab_of_task(&self, tid: u32) -> Option<&SymTab> {
        self.sessions.get(&self.info.task(tid)?.session)
    }

    /// The symbol table of `task`'s session, if there is one.
    pub fn symtab_of(&self, task: &TaskInfo) -> Option<&SymTab> {
        self.sessions.get(&task.session)
    }

    /// The events of the first task with tid `tid` (see [`Trace::task_events`];
    /// a trace may have several tasks with one tid). A tid info.json does
    /// not list is looked up as `tasks/<tid>.dat`.
    pub fn events(&self, tid: u32) -> Result<TaskEvents, StoreError> {
        match self.info.task(tid) {
            Some(task) => self.task_events(task),
            None => self.open_events(task_path(&self.dir, tid), tid, None),
        }
    }

    /// The events of `task` (one of `self.info.tasks`), in order, read chunk
    /// by chunk (memory does not grow with the trace). A task without a file
    /// (no events) gives an empty iterator. The iterator yields at most one
    /// `Err` (truncation, corruption, I/O) and then ends; the events before
    /// it are good.
    pub fn task_events(&self, task: &TaskInfo) -> Result<TaskEvents, StoreError> {
        self.open_events(self.dir.join(&task.file), task.tid, Some(task.events))
    }

    fn open_events(
        &self,
        path: PathBuf,
        tid: u32,
        expected: Option<u64>,
    ) -> Result<TaskEvents, StoreError> {
        let mut events = TaskEvents {
            path,
            offset: FILE_HEADER_LEN as u64,
            decoder: ChunkDecoder::empty(codec::TASK_FILE_VERSION),
            chunk_offset: 0,
            events: 0,
            expected,
            clock: self.clock,
            done: false,
        };
        let mut file = match File::open(&events.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match events.expected {
                    // A task that never produced an event has no file.
                    Some(0) => {
                        events.done = true;
                        Ok(events)
                    }
                    Some(_) => Err(StoreError::io("cannot open", &events.path, e)),
                    None => Err(StoreError::NoSuchTask {
                        dir: self.dir.clone(),
                        tid,
                    }),
                };
            }
            Err(e) => return Err(StoreError::io("cannot open", &events.path, e)),
        };
        let mut header = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut file, &mut header)
            .map_err(|e| StoreError::io("cannot read", &events.path, e))?;
        if n < FILE_HEADER_LEN {
            return Err(StoreError::Truncated {
                path: events.path,
                events: 0,
            });
        }
        let corrupt = |reason: String| StoreError::Corrupt {
            path: events.path.clone(),
            offset: 0,
            reason,
        };
        if header[0..8] != codec::FILE_MAGIC {
            return Err(corrupt(
                "not an fctrace task file (bad magic number)".to_string(),
            ));
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version > codec::TASK_FILE_VERSION {
            return Err(StoreError::NewerVersion {
                path: events.path,
                found: u32::from(version),
                supported: u32::from(codec::TASK_FILE_VERSION),
            });
        }
        if version < codec::TASK_FILE_OLDEST {
            return Err(corrupt(format!("invalid task file version {version}")));
        }
        let file_tid = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if file_tid != tid {
            return Err(corrupt(format!(
                "the file header says it holds task {file_tid}"
            )));
        }
        events.decoder = ChunkDecoder::empty(version);
        Ok(events)
    }

    /// Bytes the trace directory occupies (its files, not recursing further
    /// than `sessions/` and `tasks/`).
    pub fn disk_size(&self) -> Result<u64, StoreError> {
        fn dir_size(dir: &Path, recurse: bool) -> Result<u64, StoreError> {
            let mut total = 0;
            let entries =
                fs::read_dir(dir).map_err(|e| StoreError::io("cannot read directory", dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| StoreError::io("cannot read directory", dir, e))?;
                let path = entry.path();
                let meta = entry
                    .metadata()
                    .map_err(|e| StoreError::io("cannot access", &path, e))?;
                if meta.is_dir() {
                    if recurse {
                        total += dir_size(&path, false)?;
                    }
                } else {
                    total += meta.len();
                }
            }
            Ok(total)
        }
        dir_size(&self.dir, true)
    }
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The events of one task, from [`Trace::events`].
pub struct TaskEvents {
    path: PathBuf,
    /// Offset of the next chunk to load.
    offset: u64,
    /// Offset of the chunk being decoded.
    chunk_offset: u64,
    decoder: ChunkDecoder,
    /// Events yielded so far.
    events: u64,
    /// Events info.json says the file holds.
    expected: Option<u64>,
    clock: ClockMap,
    done: bool,
}

impl TaskEvents {
    /// Number of events yielded so far.
    pub fn events_read(&self) -> u64 {
        self.events
    }

    fn corrupt(&self, offset: u64, reason: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            offset,
            reason: reason.into(),
        }
    }

    fn truncated(&self) -> StoreError {
        StoreError::Truncated {
            path: self.path.clone(),
            events: self.events,
        }
    }

    /// Loads the chunk at `self.offset`; `Ok(false)` at the end of the file.
    fn load_chunk(&mut self) -> Result<bool, StoreError> {
        let offset = self.offset;
        let mut file =
            File::open(&self.path).map_err(|e| StoreError::io("cannot open", &self.path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
        let mut header_bytes = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(&mut file, &mut header_bytes)
            .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
        if n == 0 {
            if self.expected.is_some_and(|expected| self.events < expected) {
                return Err(self.truncated());
            }
            return Ok(false);
        }
        if n < CHUNK_HEADER_LEN {
            return Err(self.truncated());
        }
        let header = ChunkHeader::from_bytes(&header_bytes)
            .ok_or_else(|| self.corrupt(offset, "bad magic number (not the start of a chunk)"))?;
        if header.compressed_len > codec::READ_MAX_COMPRESSED
            || header.raw_len > codec::READ_MAX_RAW
            || header.events > codec::READ_MAX_EVENTS
        {
            return Err(self.corrupt(offset, "implausible sizes in the chunk header"));
        }
        let mut data = Vec::new();
        (&mut file)
            .take(u64::from(header.compressed_len))
            .read_to_end(&mut data)
            .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
        if data.len() < header.compressed_len as usize {
            return Err(self.truncated());
        }
        if ChunkHeader::checksum(&header_bytes, &data) != header.crc {
            return Err(self.corrupt(offset, "checksum mismatch"));
        }
        if header.codec != CODEC_ZSTD {
            return Err(self.corrupt(
                offset,
                format!(
                    "unknown compression {} (written by a newer fctrace?)",
                    header.codec
                ),
            ));
        }
        let payload = zstd::bulk::decompress(&data, header.raw_len as usize)
            .map_err(|e| self.corrupt(offset, format!("cannot decompress: {e}")))?;
        if payload.len() != header.raw_len as usize {
            return Err(self.corrupt(offset, "decompressed size does not match the header"));
        }
        self.decoder
            .reset(payload, &header)
            .map_err(|reason| self.corrupt(offset, reason))?;
        self.chunk_offset = offset;
        self.offset = offset + (CHUNK_HEADER_LEN as u64) + u64::from(header.compressed_len);
        Ok(true)
    }
}

impl Iterator for TaskEvents {
    type Item = Result<Event, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            match self.decoder.next_event() {
                Ok(Some((kind, func, tsc))) => {
                    self.events += 1;
                    return Some(Ok(Event {
                        kind,
                        func,
                        tsc,
                        ns: self.clock.to_ns(tsc),
                    }));
                }
                Ok(None) => match self.load_chunk() {
                    Ok(true) => {}
                    Ok(false) => self.done = true,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                },
                Err(reason) => {
                    self.done = true;
                    return Some(Err(self.corrupt(self.chunk_offset, reason)));
                }
            }
        }
        None
    }
}
