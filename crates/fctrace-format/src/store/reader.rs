//! [`Trace`]: opens a trace directory and streams the events of its tasks.

use super::archive::{self, Unpacked};
use super::clock::ClockMap;
use super::codec::{
    self, ChunkDecoder, ChunkHeader, CHUNK_HEADER_LEN, CODEC_ZSTD, FILE_HEADER_LEN,
};
use super::decoded::Event;
use super::error::StoreError;
use super::info;
use super::layout::{task_path, INFO_FILE, SESSIONS_DIR, TASKS_DIR};
use super::trace_info::{TaskInfo, TraceInfo};
use crate::symtab::SymTab;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::OnceLock;
use std::thread::{self, JoinHandle};

/// An opened trace directory: its metadata and symbol tables. Events are
/// read on demand with [`Trace::events`].
#[derive(Debug)]
pub struct Trace {
    /// The trace directory the files are read from (for an archive, the
    /// temporary directory it was unpacked into: [`Trace::shown`] names
    /// the archive).
    pub dir: PathBuf,
    pub info: TraceInfo,
    /// Symbol tables by session id. A session whose table is missing or
    /// unreadable is absent (see `load_warnings`): its functions have no
    /// names.
    pub sessions: BTreeMap<u32, SymTab>,
    /// Problems found while opening that do not prevent reading the trace
    /// (unreadable symbol tables, ...), one sentence each.
    pub load_warnings: Vec<String>,
    /// The tasks' kernel events (`record -k`) are left out of
    /// [`Trace::task_events`] (`replay --no-event`).
    pub without_kernel: bool,
    clock: ClockMap,
    /// The archive the trace was unpacked from, kept (and its temporary
    /// directory with it) as long as the trace is.
    archive: Option<(PathBuf, Unpacked)>,
}

impl Trace {
    /// Opens the trace at `path`: a trace directory ([`Trace::open_dir`]),
    /// or an archive of one (`fctrace archive`, recognised by its first
    /// bytes), unpacked into a private temporary directory first.
    pub fn open(path: &Path) -> Result<Trace, StoreError> {
        if !fs::metadata(path).is_ok_and(|m| m.is_file()) || !archive::is_archive(path) {
            return Self::open_dir(path);
        }
        let unpacked = archive::unpack(path)?;
        let not_a_trace = |reason: &str| StoreError::Archive {
            path: path.to_path_buf(),
            reason: format!("it does not hold an fctrace trace: {reason}"),
        };
        if !unpacked.trace_dir.is_dir() {
            return Err(not_a_trace("it holds a file, not a trace directory"));
        }
        let mut trace = Self::open_dir(&unpacked.trace_dir).map_err(|e| match e {
            StoreError::NotATrace { reason, .. } => not_a_trace(&reason),
            e => e,
        })?;
        trace.archive = Some((path.to_path_buf(), unpacked));
        Ok(trace)
    }

    /// Where the trace was read from, for the user: the archive, or the
    /// trace directory.
    pub fn shown(&self) -> &Path {
        match &self.archive {
            Some((path, _)) => path,
            None => &self.dir,
        }
    }

    /// Opens the trace directory `dir`: reads info.json and every
    /// `sessions/*.sym`.
    pub fn open_dir(dir: &Path) -> Result<Trace, StoreError> {
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
                    reason: "it is neither a trace directory nor an archive of one \
                             (`fctrace archive`)"
                        .to_string(),
                })
            }
            Ok(_) => {}
        }
        let info_path = dir.join(INFO_FILE);
        let bytes = match fs::read(&info_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let tasks = dir.join(TASKS_DIR);
                let no_events = fs::read_dir(&tasks).is_ok_and(|mut d| d.next().is_none());
                let reason = if dir.join(super::layout::RECORDER_PID_FILE).exists() {
                    format!(
                        "a flight recorder (`fctrace record --ring`) records there and has written \
                         no snapshot yet: `fctrace snapshot -d {}` asks for one",
                        dir.display()
                    )
                } else if no_events {
                    format!(
                        "{INFO_FILE} is missing and it holds no events: a flight recorder \
                         (`record --ring`) that wrote no snapshot, or a recording that did not \
                         finish (was fctrace killed?)"
                    )
                } else if tasks.is_dir() {
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
                super::layout::session_path(dir, s).display()
            ));
        }
        inherit_forked(&mut sessions, &mut load_warnings);
        let clock = ClockMap::new(&info.clock);
        Ok(Trace {
            dir: dir.to_path_buf(),
            info,
            sessions,
            load_warnings,
            without_kernel: false,
            clock,
            archive: None,
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
        let mut events =
            self.open_events(self.dir.join(&task.file), task.tid, Some(task.events))?;
        // Its kernel events (`record -k`), merged in by time.
        if self.without_kernel {
            return Ok(events);
        }
        if let Some(r) = super::kernel::KernelReader::open(
            &self.dir.join(super::kernel::sys_file_of(&task.file)),
        ) {
            events.kernel = Some(Box::new(super::kernel::KernelMerge::new(r)));
        }
        Ok(events)
    }

    fn open_events(
        &self,
        path: PathBuf,
        tid: u32,
        expected: Option<u64>,
    ) -> Result<TaskEvents, StoreError> {
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match expected {
                    // A task that never produced an event has no file.
                    Some(0) => Ok(TaskEvents::new(None)),
                    Some(_) => Err(StoreError::io("cannot open", &path, e)),
                    None => Err(StoreError::NoSuchTask {
                        dir: self.dir.clone(),
                        tid,
                    }),
                };
            }
            Err(e) => return Err(StoreError::io("cannot open", &path, e)),
        };
        let mut header = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut file, &mut header)
            .map_err(|e| StoreError::io("cannot read", &path, e))?;
        if n < FILE_HEADER_LEN {
            return Err(StoreError::Truncated { path, events: 0 });
        }
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.clone(),
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
                path,
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
        Ok(TaskEvents::new(Some(ChunkReader {
            path,
            file: None,
            keep_open: false,
            offset: FILE_HEADER_LEN as u64,
            file_len: 0,
            decoded: 0,
            expected,
            decoder: ChunkDecoder::new(version),
            zstd: None,
            data: Vec::new(),
            payload: Vec::new(),
            clock: NsClock::new(self.clock),
        })))
    }

    /// The CLOCK_MONOTONIC time of the first event of `task`, from the
    /// header of its first chunk (nothing is decoded: what a reader that
    /// merges tasks by time uses to open each task's events only when
    /// time reaches them). `None` for a task without events or whose file
    /// cannot be read that far (reading its events then says why).
    pub fn first_event_ns(&self, task: &TaskInfo) -> Option<u64> {
        if task.events == 0 {
            return None;
        }
        let mut file = File::open(self.dir.join(&task.file)).ok()?;
        let mut b = [0u8; FILE_HEADER_LEN + codec::CHUNK_HEADER_LEN];
        if read_full(&mut file, &mut b).ok()? < b.len() {
            return None;
        }
        let mut h = [0u8; codec::CHUNK_HEADER_LEN];
        h.copy_from_slice(&b[FILE_HEADER_LEN..]);
        let header = codec::ChunkHeader::from_bytes(&h)?;
        Some(self.tsc_to_ns(header.first_tsc))
    }

    /// Checks the event file of `task` without decoding its events,
    /// streaming (one chunk in memory): its header, each chunk's header,
    /// size and checksum, and that it holds the events info.json counts.
    /// Cheap next to reading the events (no decompression): what `info`
    /// uses to tell whether the events are damaged. The error is the one
    /// reading the events would end with (`replay` fails with it too).
    pub fn check_task(&self, task: &TaskInfo) -> Result<(), StoreError> {
        let mut events = self.task_events(task)?;
        let Source::Inline(reader) = &mut events.source else {
            // No file: a task without events.
            return Ok(());
        };
        reader.keep_open = true;
        while reader.check_chunk()? {}
        Ok(())
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
///
/// Chunks are decoded a whole chunk at a time into a buffer the iterator
/// walks. From the second chunk of a file on, a helper thread reads and
/// decodes the next chunk while the current one is consumed (at most four
/// such threads at once in the process, each holding at most two decoded
/// chunks: memory does not grow with the trace).
pub struct TaskEvents {
    /// The decoded events of the current chunk...
    batch: Vec<Event>,
    /// ... of which this many have been yielded.
    pos: usize,
    /// Events yielded before the current batch.
    before: u64,
    /// The error to yield once `batch` is consumed (the events of a chunk
    /// decoded before its fault come first).
    error: Option<StoreError>,
    source: Source,
    /// The task's kernel events, merged into each chunk's events.
    kernel: Option<Box<super::kernel::KernelMerge>>,
}

enum Source {
    /// Chunks are read on the iterator's thread.
    Inline(Box<ChunkReader>),
    /// A helper thread reads ahead.
    Prefetch(Prefetch),
    Done,
}

/// What the read-ahead thread sends: a decoded chunk and what
/// [`ChunkReader::next_chunk`] returned for it.
type Decoded = (Vec<Event>, Result<bool, StoreError>);

struct Prefetch {
    chunks: Receiver<Decoded>,
    /// Consumed buffers go back to the thread for reuse.
    spent: Sender<Vec<Event>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

/// Read-ahead threads running in the process at most: iterators opened
/// beyond that read on their own thread.
const MAX_PREFETCHING: usize = 4;
static PREFETCHING: AtomicUsize = AtomicUsize::new(0);

/// A place among the [`MAX_PREFETCHING`] read-ahead threads, given back on
/// drop.
struct PrefetchSlot;

impl PrefetchSlot {
    fn acquire() -> Option<PrefetchSlot> {
        static CORES: OnceLock<usize> = OnceLock::new();
        let cores = *CORES.get_or_init(|| thread::available_parallelism().map_or(1, |n| n.get()));
        if cores < 2 {
            return None;
        }
        PREFETCHING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PREFETCHING).then_some(n + 1)
            })
            .ok()
            .map(|_| PrefetchSlot)
    }
}

impl Drop for PrefetchSlot {
    fn drop(&mut self) {
        PREFETCHING.fetch_sub(1, Ordering::AcqRel);
    }
}

impl TaskEvents {
    fn new(reader: Option<ChunkReader>) -> TaskEvents {
        TaskEvents {
            batch: Vec::new(),
            pos: 0,
            before: 0,
            error: None,
            kernel: None,
            source: match reader {
                Some(reader) => Source::Inline(Box::new(reader)),
                None => Source::Done,
            },
        }
    }

    /// Number of events yielded so far.
    pub fn events_read(&self) -> u64 {
        self.before + self.pos as u64
    }

    /// The next event, `None` at the end of the events or when they cannot
    /// be read further: [`take_error`](Self::take_error) then says why.
    /// (The same events as the iterator, without the `Result` per event.)
    #[inline]
    pub fn next_event(&mut self) -> Option<Event> {
        match self.batch.get(self.pos) {
            Some(&event) => {
                self.pos += 1;
                Some(event)
            }
            None => self.next_chunk(),
        }
    }

    /// After [`next_event`](Self::next_event) returned `None`: the error
    /// that ended the events (truncation, corruption, I/O), if one did. The
    /// events before it were good.
    pub fn take_error(&mut self) -> Option<StoreError> {
        if self.pos < self.batch.len() {
            return None;
        }
        self.error.take()
    }

    /// The current chunk is consumed: moves to the next one and yields its
    /// first event, or `None` (at the end, or before the pending error).
    #[cold]
    #[inline(never)]
    fn next_chunk(&mut self) -> Option<Event> {
        loop {
            self.before += self.pos as u64;
            self.pos = 0;
            self.batch.clear();
            if self.error.is_some() {
                self.finish();
                return None;
            }
            let result = match &mut self.source {
                Source::Done => {
                    // After the task's events: its kernel events left.
                    let k = self.kernel.as_mut().filter(|k| k.has_more())?;
                    k.merge(&mut self.batch, true);
                    let first = self.batch.first().copied();
                    self.pos = usize::from(first.is_some());
                    return first;
                }
                Source::Inline(reader) => {
                    let result = reader.next_chunk(&mut self.batch);
                    let more = matches!(result, Ok(true)) && reader.has_more();
                    if more {
                        self.start_prefetch();
                    }
                    result
                }
                Source::Prefetch(p) => match p.chunks.recv() {
                    Ok((batch, result)) => {
                        let spent = std::mem::replace(&mut self.batch, batch);
                        // The thread may have ended (its last chunk sent).
                        let _ = p.spent.send(spent);
                        result
                    }
                    Err(_) => Err(StoreError::io(
                        "cannot read",
                        &p.path,
                        io::Error::other("the read-ahead thread failed"),
                    )),
                },
            };
            let last = !matches!(result, Ok(true));
            match result {
                Ok(true) => {}
                Ok(false) => self.finish(),
                Err(e) => self.error = Some(e),
            }
            if let Some(k) = &mut self.kernel {
                k.merge(&mut self.batch, last && self.error.is_none());
            }
            if let Some(&event) = self.batch.first() {
                self.pos = 1;
                return Some(event);
            }
        }
    }

    /// Hands the reader to a read-ahead thread, if one may be started.
    fn start_prefetch(&mut self) {
        if !matches!(self.source, Source::Inline(_)) {
            return;
        }
        let Some(slot) = PrefetchSlot::acquire() else {
            return;
        };
        // The thread decodes the next chunk while the iterator walks the
        // current one, then waits for the iterator to take it: two decoded
        // chunks at most.
        let (chunk_tx, chunks) = mpsc::sync_channel::<Decoded>(0);
        let (spent, spent_rx) = mpsc::channel::<Vec<Event>>();
        // The reader goes to the thread once it runs (if it cannot be
        // started, the iterator keeps reading on its own).
        let (reader_tx, reader_rx) = mpsc::channel::<Box<ChunkReader>>();
        let spawned = thread::Builder::new()
            .name("fctrace-read".into())
            .spawn(move || {
                let _slot = slot;
                let Ok(mut reader) = reader_rx.recv() else {
                    return;
                };
                reader.keep_open = true;
                // Two buffers take turns: the iterator's and this one.
                let mut batch = Vec::new();
                loop {
                    let result = reader.next_chunk(&mut batch);
                    let last = !matches!(result, Ok(true));
                    if chunk_tx.send((batch, result)).is_err() || last {
                        break;
                    }
                    // The iterator gives its previous buffer back as it
                    // takes this one; gone means the iterator was dropped.
                    batch = match spent_rx.recv() {
                        Ok(spent) => spent,
                        Err(_) => break,
                    };
                }
            });
        let Ok(thread) = spawned else {
            return;
        };
        let Source::Inline(reader) = std::mem::replace(&mut self.source, Source::Done) else {
            return;
        };
        let path = reader.path.clone();
        if let Err(mpsc::SendError(reader)) = reader_tx.send(reader) {
            // The thread is gone already: read here.
            self.source = Source::Inline(reader);
            return;
        }
        self.source = Source::Prefetch(Prefetch {
            chunks,
            spent,
            thread: Some(thread),
            path,
        });
    }

    fn finish(&mut self) {
        if let Source::Prefetch(mut p) = std::mem::replace(&mut self.source, Source::Done) {
            let thread = p.thread.take();
            // Closing the channels ends the thread (after the chunk it is
            // decoding, if any).
            drop(p);
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for TaskEvents {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Iterator for TaskEvents {
    type Item = Result<Event, StoreError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Some(event) => Some(Ok(event)),
            None => self.take_error().map(Err),
        }
    }
}

/// Reads and decodes the chunks of one task file, in order.
struct ChunkReader {
    path: PathBuf,
    /// The open file when `keep_open`; otherwise the file is opened for
    /// each chunk (many iterators may be open at once).
    file: Option<File>,
    keep_open: bool,
    /// Offset of the next chunk.
    offset: u64,
    /// Size of the file when the last chunk was read.
    file_len: u64,
    /// Events of the chunks decoded so far.
    decoded: u64,
    /// Events info.json says the file holds.
    expected: Option<u64>,
    decoder: ChunkDecoder,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    /// The compressed payload read...
    data: Vec<u8>,
    /// ... and decompressed.
    payload: Vec<u8>,
    clock: NsClock,
}

impl ChunkReader {
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
            events: self.decoded,
        }
    }

    /// Whether the file had bytes after the last chunk read.
    fn has_more(&self) -> bool {
        self.file_len > self.offset
    }

    /// Decodes the chunk at `self.offset` into `out` (cleared first):
    /// `Ok(true)` for a chunk, `Ok(false)` at the end of the file, `Err`
    /// if the chunk cannot be read, after the good events of a chunk whose
    /// payload is corrupt (they are in `out`).
    fn next_chunk(&mut self, out: &mut Vec<Event>) -> Result<bool, StoreError> {
        out.clear();
        let offset = self.offset;
        let mut file = self.open_at(offset)?;
        let Some(header) = self.read_raw_chunk(&mut file, offset)? else {
            return Ok(false);
        };
        self.decompress(offset, header.raw_len as usize)?;
        let clock = self.clock;
        self.decoder
            .decode(&self.payload, &header, out, |tsc| clock.to_ns(tsc))
            .map_err(|reason| self.corrupt(offset, reason))?;
        self.chunk_done(file, offset, &header);
        Ok(true)
    }

    /// Checks the chunk at `self.offset` without decoding it (its header,
    /// its size and its checksum): `Ok(true)` for a good chunk, `Ok(false)`
    /// at the end of the file.
    fn check_chunk(&mut self) -> Result<bool, StoreError> {
        let offset = self.offset;
        let mut file = self.open_at(offset)?;
        let Some(header) = self.read_raw_chunk(&mut file, offset)? else {
            return Ok(false);
        };
        self.chunk_done(file, offset, &header);
        Ok(true)
    }

    /// The file, positioned at `offset`.
    fn open_at(&mut self, offset: u64) -> Result<File, StoreError> {
        match self.file.take() {
            Some(file) => Ok(file),
            None => {
                let mut file = File::open(&self.path)
                    .map_err(|e| StoreError::io("cannot open", &self.path, e))?;
                file.seek(SeekFrom::Start(offset))
                    .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
                Ok(file)
            }
        }
    }

    /// Reads the chunk at `offset` (the file is there) into `self.data`
    /// and checks it, without decompressing it: its header, or `None` at
    /// the end of the file.
    fn read_raw_chunk(
        &mut self,
        file: &mut File,
        offset: u64,
    ) -> Result<Option<ChunkHeader>, StoreError> {
        let mut header_bytes = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(file, &mut header_bytes)
            .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
        if n == 0 {
            if self
                .expected
                .is_some_and(|expected| self.decoded < expected)
            {
                return Err(self.truncated());
            }
            return Ok(None);
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
        let len = header.compressed_len as usize;
        self.data.clear();
        self.data.resize(len, 0);
        let n = read_full(file, &mut self.data)
            .map_err(|e| StoreError::io("cannot read", &self.path, e))?;
        if n < len {
            return Err(self.truncated());
        }
        if ChunkHeader::checksum(&header_bytes, &self.data) != header.crc {
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
        Ok(Some(header))
    }

    /// After the chunk at `offset`: on to the next one.
    fn chunk_done(&mut self, file: File, offset: u64, header: &ChunkHeader) {
        self.decoded += u64::from(header.events);
        self.offset = offset + (CHUNK_HEADER_LEN as u64) + u64::from(header.compressed_len);
        if self.keep_open {
            self.file = Some(file);
        }
        if self.file_len <= self.offset {
            self.file_len = match &self.file {
                Some(file) => file.metadata().map_or(0, |m| m.len()),
                None => fs::metadata(&self.path).map_or(0, |m| m.len()),
            };
        }
    }

    /// Decompresses `self.data` into `self.payload`, which must come out
    /// `raw_len` bytes long.
    fn decompress(&mut self, offset: u64, raw_len: usize) -> Result<(), StoreError> {
        let zstd = match &mut self.zstd {
            Some(zstd) => zstd,
            None => {
                let zstd = zstd::bulk::Decompressor::new()
                    .map_err(|e| self.corrupt(offset, format!("cannot decompress: {e}")))?;
                self.zstd.insert(zstd)
            }
        };
        self.payload.clear();
        self.payload.reserve(raw_len);
        if zstd
            .decompress_to_buffer(&self.data[..], &mut self.payload)
            .is_err()
        {
            // Again the way that says best what is wrong.
            let e = zstd::bulk::decompress(&self.data, raw_len)
                .err()
                .map_or_else(|| "decompression failed".to_string(), |e| e.to_string());
            return Err(self.corrupt(offset, format!("cannot decompress: {e}")));
        }
        if self.payload.len() != raw_len {
            return Err(self.corrupt(offset, "decompressed size does not match the header"));
        }
        Ok(())
    }
}

/// [`ClockMap::to_ns`] without a 128-bit division per event: the same
/// nanoseconds, exactly.
#[derive(Clone, Copy, Debug)]
struct NsClock {
    map: ClockMap,
    fast: Option<Ratio>,
}

/// `ns0 + floor((tsc - tsc0) * num / den)` for `tsc0 <= tsc <= tsc0 +
/// x_max`, with `num = a * den + b` and `m = floor(2^64 * b / den)`.
#[derive(Clone, Copy, Debug)]
struct Ratio {
    tsc0: u64,
    ns0: u64,
    x_max: u64,
    a: u64,
    b: u64,
    den: u64,
    m: u64,
}

impl NsClock {
    fn new(map: ClockMap) -> NsClock {
        let fast = match map {
            ClockMap::Linear {
                tsc0,
                ns0,
                tsc1,
                ns1,
            } if tsc1 > tsc0 && ns1 >= ns0 && tsc1 - tsc0 < 1 << 63 => {
                let num = ns1 - ns0;
                let den = tsc1 - tsc0;
                // ClockMap multiplies in i128 and only beyond it goes
                // through f64: stay where it is exact.
                let x_max = match num {
                    0 => u64::MAX,
                    _ => u64::try_from(i128::MAX as u128 / u128::from(num)).unwrap_or(u64::MAX),
                };
                let b = num % den;
                Some(Ratio {
                    tsc0,
                    ns0,
                    x_max,
                    a: num / den,
                    b,
                    den,
                    // b < den, so it fits in 64 bits.
                    m: ((u128::from(b) << 64) / u128::from(den)) as u64,
                })
            }
            _ => None,
        };
        NsClock { map, fast }
    }

    #[inline(always)]
    fn to_ns(self, tsc: u64) -> u64 {
        if let Some(r) = self.fast {
            let x = tsc.wrapping_sub(r.tsc0);
            if tsc >= r.tsc0 && x <= r.x_max {
                return r.apply(x);
            }
        }
        self.map.to_ns(tsc)
    }
}

impl Ratio {
    /// `ns0 + floor(x * num / den)`, saturated to `u64::MAX`.
    #[inline(always)]
    fn apply(self, x: u64) -> u64 {
        // floor(x * b / den) by the reciprocal: x * m / 2^64 is below
        // x * b / den by less than x / 2^64 < 1, so `t` is the quotient or
        // one less. The remainder x * b - t * den is then below 2 * den
        // <= 2^64: its low 64 bits are all of it, and say which.
        let mut t = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        let rem = x
            .wrapping_mul(self.b)
            .wrapping_sub(t.wrapping_mul(self.den));
        if rem >= self.den {
            t += 1;
        }
        let whole = if self.a == 0 {
            Some(t)
        } else {
            x.checked_mul(self.a).and_then(|v| v.checked_add(t))
        };
        // ClockMap clamps to u64::MAX too.
        whole
            .and_then(|v| v.checked_add(self.ns0))
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod ns_tests {
    use super::*;
    use crate::store::clock::Clock;

    /// Compares [`NsClock`] with [`ClockMap::to_ns`] around interesting
    /// points and at pseudo-random ones.
    fn check(pairs: Vec<(u64, u64)>, tsc_hz: f64) {
        let map = ClockMap::new(&Clock {
            tsc_hz,
            pairs,
            ..Clock::default()
        });
        let fast = NsClock::new(map);
        let mut points = vec![0u64, 1, u64::MAX, u64::MAX - 1, 1 << 63, 1 << 32];
        if let ClockMap::Linear { tsc0, tsc1, .. } = map {
            for base in [tsc0, tsc1] {
                for d in 0..50u64 {
                    points.push(base.wrapping_add(d));
                    points.push(base.wrapping_sub(d));
                    points.push(base.wrapping_add(d << 30));
                }
            }
            if let Some(r) = fast.fast {
                for d in [0, 1, 2] {
                    points.push(tsc0.wrapping_add(r.x_max).wrapping_add(d));
                    points.push(tsc0.wrapping_add(r.x_max).wrapping_sub(d));
                }
            }
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Values of every magnitude.
            points.push(x >> (i % 64));
        }
        // Elsewhere NsClock calls ClockMap::to_ns itself.
        let Some(r) = fast.fast else {
            return;
        };
        let mut compared = 0;
        for tsc in points {
            if tsc >= r.tsc0 && tsc - r.tsc0 <= r.x_max {
                assert_eq!(fast.to_ns(tsc), map.to_ns(tsc), "tsc {tsc} {map:?}");
                compared += 1;
            }
        }
        assert!(compared > 1000, "{compared}");
    }

    #[test]
    fn the_fast_conversion_is_exact() {
        // A 2.1 GHz TSC over 10 s, as recorded.
        check(
            vec![
                (123_456_789_012, 5_000_000_000),
                (123_456_789_012 + 21_000_000_007, 15_000_000_003),
            ],
            2.1e9,
        );
        // Slower than 1 GHz (a > 0), tiny and huge spans.
        check(vec![(1000, 10_000), (3000, 11_000)], 1.0);
        check(vec![(10, 0), (11, 1_000_000_000_000)], 1.0);
        check(vec![(0, 0), (u64::MAX, u64::MAX)], 1.0);
        check(vec![(0, u64::MAX - 5), (7, u64::MAX)], 1.0);
        check(vec![(5, 7), (u64::MAX - 3, 7)], 1.0);
        check(vec![(1, 1), (2, u64::MAX)], 1.0);
        check(
            vec![(1 << 40, 3 << 50), ((1 << 40) + 999_983, (3 << 50) + 1)],
            1.0,
        );
    }
}

#[cfg(test)]
mod read_ahead_tests {
    use super::*;
    use crate::event::{EventKind, RawEvent};
    use crate::store::clock::Clock;
    use crate::store::trace_info::{TaskInfo, TraceInfo};
    use crate::store::writer::TraceWriter;

    /// More multi-chunk iterators open at once than read-ahead threads, read
    /// in turns, some dropped half-way: every one yields exactly its
    /// task's events, with the clock's nanoseconds.
    #[test]
    fn interleaved_iterators_read_everything() {
        let dir = std::env::temp_dir().join(format!("fctrace-read-ahead-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let tasks = (MAX_PREFETCHING + 3) as u32;
        let per_task = 3 * codec::CHUNK_MAX_EVENTS as usize + 123;
        let mut w = TraceWriter::create(&dir).unwrap();
        let mut expected = Vec::new();
        for tid in 1..=tasks {
            let mut tsc = 1_000_000 + u64::from(tid);
            let events: Vec<RawEvent> = (0..per_task)
                .map(|i| {
                    tsc += 20 + (i as u64 * 7 + u64::from(tid)) % 90;
                    let (kind, func) = match i % 4 {
                        0 | 1 => (EventKind::Entry, (i % 4) as u32 + tid),
                        2 => (EventKind::Exit, 1 + tid),
                        _ => (EventKind::Exit, tid),
                    };
                    RawEvent::new(kind, func, tsc)
                })
                .collect();
            for batch in events.chunks(10_000) {
                w.append(tid, batch).unwrap();
            }
            expected.push(events);
        }
        w.finish(TraceInfo {
            program: "/usr/bin/prog".into(),
            tasks: (1..=tasks)
                .map(|tid| TaskInfo {
                    id: tid,
                    tid,
                    pid: 1,
                    ..TaskInfo::default()
                })
                .collect(),
            clock: Clock {
                tsc_hz: 3e9,
                pairs: vec![(1_000_000, 5_000), (3_001_000_000, 1_000_005_000)],
                ..Clock::default()
            },
            ..TraceInfo::default()
        })
        .unwrap();

        let trace = Trace::open(&dir).unwrap();
        let mut iters: Vec<TaskEvents> = trace
            .info
            .tasks
            .iter()
            .map(|t| trace.task_events(t).unwrap())
            .collect();
        let mut read = vec![0usize; iters.len()];
        let mut round = 0;
        while read.iter().any(|&n| n < per_task) {
            round += 1;
            for (k, it) in iters.iter_mut().enumerate() {
                // Task 2 is dropped half-way (its thread must end).
                if k == 2 && read[k] > per_task / 2 {
                    read[k] = per_task;
                    *it = TaskEvents::new(None);
                    continue;
                }
                for _ in 0..(round * 9_001 + k * 17) % 50_000 {
                    let Some(e) = it.next_event() else {
                        assert!(it.take_error().is_none());
                        assert_eq!(read[k], per_task);
                        break;
                    };
                    let want = expected[k][read[k]];
                    assert_eq!(
                        (Some(e.kind), e.func, e.tsc),
                        (want.kind(), want.func(), want.tsc)
                    );
                    assert_eq!(e.ns, trace.tsc_to_ns(e.tsc));
                    read[k] += 1;
                    assert_eq!(it.events_read(), read[k] as u64);
                }
            }
        }
        for it in &mut iters {
            assert!(it.next().is_none());
        }
        drop(iters);
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Completes each fork child's table from its parent's (a parent's
/// session is older: its number is lower, and it is complete first).
fn inherit_forked(sessions: &mut BTreeMap<u32, SymTab>, warnings: &mut Vec<String>) {
    let ids: Vec<u32> = sessions.keys().copied().collect();
    for sid in ids {
        let Some(parent) = sessions[&sid].forked.as_ref().map(|f| f.parent) else {
            continue;
        };
        let Some(mut child) = sessions.remove(&sid) else {
            continue;
        };
        let complete = parent != sid && sessions.get(&parent).is_some_and(|p| child.inherit(p));
        if !complete {
            warnings.push(format!(
                "session {sid} (a fork child's) takes functions from session {parent}, whose \
                 symbol table is missing or short: some of its functions are shown by number"
            ));
        }
        sessions.insert(sid, child);
    }
}
