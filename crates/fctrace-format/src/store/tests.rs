//! Store round trips, sizes, damage detection, versions, create/open rules.

use super::clock::ClockMap;
use super::*;
use crate::event::{EventKind, RawEvent};
use crate::symtab::{self, FuncKind, FuncStatus, Function, Module, SymTab};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "fctrace-store-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Events of a recursive computation (fib(n)) calling two leaf helpers, with
/// realistic TSC gaps: a few dozen to a few hundred cycles, jittered.
fn fib_events(n: u32, rng: &mut Rng, tsc: &mut u64, out: &mut Vec<RawEvent>) {
    fn step(rng: &mut Rng, tsc: &mut u64, base: u64) -> u64 {
        *tsc += base + rng.below(base / 2 + 1);
        *tsc
    }
    out.push(RawEvent::new(EventKind::Entry, 3, step(rng, tsc, 40)));
    if n >= 2 {
        fib_events(n - 1, rng, tsc, out);
        fib_events(n - 2, rng, tsc, out);
        let t = step(rng, tsc, 30);
        out.push(RawEvent::new(EventKind::Entry, 7, t));
        let t = step(rng, tsc, 60);
        out.push(RawEvent::new(EventKind::Exit, 7, t));
    } else {
        let t = step(rng, tsc, 20);
        out.push(RawEvent::new(EventKind::Entry, 12, t));
        let t = step(rng, tsc, 200);
        out.push(RawEvent::new(EventKind::Exit, 12, t));
    }
    let t = step(rng, tsc, 25);
    out.push(RawEvent::new(EventKind::Exit, 3, t));
}

fn sample_info(tids: &[u32]) -> TraceInfo {
    TraceInfo {
        program: "/usr/bin/prog".into(),
        args: vec!["prog".into(), "--flag".into(), "a b".into()],
        cwd: "/tmp/x".into(),
        start_unix_ns: 1_700_000_000_123_456_789,
        exit: Some(ExitStatus::Signal {
            signal: 11,
            core: true,
        }),
        tasks: tids
            .iter()
            .map(|&tid| TaskInfo {
                id: tid,
                origin: if tid == tids[0] {
                    TaskOrigin::Start
                } else {
                    TaskOrigin::Thread
                },
                parent: if tid == tids[0] { None } else { Some(tids[0]) },
                file: String::new(),
                tid,
                pid: tids[0],
                ppid: 1,
                parent_tid: if tid == tids[0] { None } else { Some(tids[0]) },
                session: 0,
                comm: format!("t{tid}"),
                events: 0,
            })
            .collect(),
        clock: Clock {
            tsc_hz: 3e9,
            pairs: vec![(1_000_000, 5_000), (3_001_000_000, 1_000_005_000)],
            ..Clock::default()
        },
        lost_events: 5,
        warnings: vec!["something odd".into()],
        ..TraceInfo::default()
    }
}

fn write_symtab_file(dir: &Path, session: u32) {
    let table = SymTab {
        session,
        pid: 100,
        exe: "/usr/bin/prog".into(),
        modules: vec![Module::new(0, 0x40_0000, "/usr/bin/prog")],
        functions: (0..16)
            .map(|id| Function {
                id,
                module: 0,
                addr: 0x1000 + u64::from(id) * 0x40,
                size: 0x40,
                kind: FuncKind::Function,
                status: FuncStatus::Traced,
                name: format!("f{id}"),
            })
            .collect(),
        forked: None,
    };
    let mut text = Vec::new();
    symtab::write_symtab(&mut text, &table).unwrap();
    fs::write(session_path(dir, session), text).unwrap();
}

fn read_all(trace: &Trace, tid: u32) -> Result<Vec<Event>, StoreError> {
    trace.events(tid)?.collect()
}

#[test]
fn round_trip_several_tasks() {
    let tmp = TempDir::new("rt");
    let dir = tmp.path().join("fctrace.data");
    let mut w = TraceWriter::create(&dir).unwrap();
    assert_eq!(w.sessions_dir(), dir.join("sessions"));
    assert!(w.sessions_dir().is_dir());
    write_symtab_file(&dir, 0);

    let tids = [100u32, 101, 102, 7];
    let mut rng = Rng(42);
    let mut expected: BTreeMap<u32, Vec<RawEvent>> = BTreeMap::new();
    let mut tsc = 1_000_000u64;
    // Task 100: long (several chunks); 101: odd values; 102: one event;
    // 7: none at all.
    let mut long = Vec::new();
    while long.len() < 300_000 {
        fib_events(12, &mut rng, &mut tsc, &mut long);
    }
    expected.insert(100, long);
    let odd = vec![
        RawEvent::new(EventKind::Entry, u32::MAX >> 8, 1),
        RawEvent::new(EventKind::Entry, 0, u64::MAX),
        RawEvent::new(EventKind::Lost, 12345, 17),
        RawEvent::new(EventKind::Unwind, 0, 16),
        RawEvent::new(EventKind::Exit, u32::MAX >> 8, u64::MAX / 2),
        RawEvent::new(EventKind::Exit, 5, 1 << 63),
    ];
    expected.insert(101, odd);
    expected.insert(102, vec![RawEvent::new(EventKind::Entry, 1, 99)]);

    // Interleave appends of different sizes between tasks, with a few
    // invalid records mixed in.
    let mut cursors: BTreeMap<u32, usize> = expected.keys().map(|&t| (t, 0)).collect();
    let mut invalid = 0;
    while cursors.iter().any(|(t, &c)| c < expected[t].len()) {
        for (&tid, cursor) in cursors.iter_mut() {
            let all = &expected[&tid];
            let n = (rng.below(5000) as usize).min(all.len() - *cursor);
            let mut batch = all[*cursor..*cursor + n].to_vec();
            if n > 0 && rng.below(4) == 0 {
                batch.insert(
                    rng.below(n as u64) as usize,
                    RawEvent { word: 0xff, tsc: 1 },
                );
                invalid += 1;
            }
            if n > 0 && rng.below(4) == 0 {
                // Reserved by the agent but never written: skipped, not
                // counted (neither as an event nor as invalid).
                batch.insert(rng.below(n as u64) as usize, RawEvent::default());
            }
            w.append(tid, &batch).unwrap();
            *cursor += n;
        }
    }
    w.append(7, &[]).unwrap();
    let total: usize = expected.values().map(Vec::len).sum();
    assert_eq!(w.events_written(), total as u64);
    w.finish(sample_info(&tids)).unwrap();

    let trace = Trace::open(&dir).unwrap();
    assert!(trace.load_warnings.is_empty(), "{:?}", trace.load_warnings);
    assert_eq!(trace.sessions[&0].functions.len(), 16);
    let info = &trace.info;
    assert_eq!(info.format_version, FORMAT_VERSION);
    assert_eq!(info.fctrace_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.events, total as u64);
    assert_eq!(info.invalid_events, invalid);
    assert_eq!(info.lost_events, 5);
    let mut want = sample_info(&tids);
    for t in &mut want.tasks {
        t.events = expected.get(&t.tid).map_or(0, |e| e.len() as u64);
        t.file = format!("tasks/{}.dat", t.tid);
    }
    assert_eq!(info.tasks, want.tasks);
    assert_eq!(info.args, want.args);
    assert_eq!(info.exit, want.exit);
    assert_eq!(info.clock, want.clock);
    assert_eq!(info.warnings, want.warnings);
    assert_eq!(info.start_unix_ns, want.start_unix_ns);
    let on_disk: u64 = tids
        .iter()
        .filter_map(|&t| fs::metadata(task_path(&dir, t)).ok())
        .map(|m| m.len())
        .sum();
    assert_eq!(info.bytes, on_disk);

    for (&tid, want) in &expected {
        let got = read_all(&trace, tid).unwrap();
        assert_eq!(got.len(), want.len(), "task {tid}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((Some(g.kind), g.func, g.tsc), (w.kind(), w.func(), w.tsc));
            assert_eq!(g.ns, trace.tsc_to_ns(g.tsc));
        }
    }
    assert_eq!(read_all(&trace, 7).unwrap(), vec![]);
    assert!(matches!(
        trace.events(8),
        Err(StoreError::NoSuchTask { tid: 8, .. })
    ));
}

#[test]
fn recursive_pattern_is_under_4_bytes_per_event() {
    let tmp = TempDir::new("size");
    let dir = tmp.path().join("t");
    let mut w = TraceWriter::create(&dir).unwrap();
    let mut rng = Rng(7);
    let mut tsc = 123_456_789u64;
    let mut events = Vec::new();
    while events.len() < 1_000_000 {
        fib_events(15, &mut rng, &mut tsc, &mut events);
    }
    for batch in events.chunks(4096) {
        w.append(1, batch).unwrap();
    }
    w.finish(sample_info(&[1])).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let per_event = trace.info.bytes as f64 / trace.info.events as f64;
    assert!(per_event < 4.0, "{per_event} bytes per event");
    eprintln!("recursive pattern: {per_event:.3} bytes/event");
    assert_eq!(trace.events(1).unwrap().count(), events.len());
}

/// A chunk's compressed payload is two zstd frames (docs/format.md): the
/// codes and data, then the timestamp deltas, Huffman coded (smaller than
/// raw) even though their level searches no matches.
#[test]
fn chunks_are_two_frames_codes_then_deltas() {
    let tmp = TempDir::new("frames");
    let dir = tmp.path().join("t");
    let (path, _) = damaged_fixture(&dir, 200_000);
    let file = fs::read(&path).unwrap();
    let chunks = chunk_offsets(&file);
    assert!(chunks.len() > 1);
    for &off in &chunks {
        let len = u32::from_le_bytes(file[off + 4..off + 8].try_into().unwrap()) as usize;
        let raw_len = u32::from_le_bytes(file[off + 8..off + 12].try_into().unwrap()) as usize;
        let data = &file[off + codec::CHUNK_HEADER_LEN..off + codec::CHUNK_HEADER_LEN + len];
        let first = zstd::zstd_safe::find_frame_compressed_size(data).unwrap();
        let (head, tail) = data.split_at(first);
        assert_eq!(
            zstd::zstd_safe::find_frame_compressed_size(tail),
            Ok(tail.len())
        );
        let head = zstd::bulk::decompress(head, raw_len).unwrap();
        let deltas = zstd::bulk::decompress(tail, raw_len).unwrap();
        assert_eq!(head.len() + deltas.len(), raw_len);
        // The first frame ends where the data stream does.
        let mut p = 0;
        let codes = codec::get_varint(&head, &mut p).unwrap() as usize;
        p += codes;
        let data_len = codec::get_varint(&head, &mut p).unwrap() as usize;
        assert_eq!(p + data_len, head.len());
        assert!(
            tail.len() < deltas.len(),
            "{} of {} bytes",
            tail.len(),
            deltas.len()
        );
    }
}

/// Where each chunk of a task file begins (its header).
fn chunk_offsets(file: &[u8]) -> Vec<usize> {
    let mut offsets = vec![];
    let mut off = codec::FILE_HEADER_LEN;
    while off < file.len() {
        offsets.push(off);
        let len = u32::from_le_bytes(file[off + 4..off + 8].try_into().unwrap()) as usize;
        off += codec::CHUNK_HEADER_LEN + len;
    }
    offsets
}

/// A one-task trace of `n` events in several chunks; returns the task file.
fn damaged_fixture(dir: &Path, n: usize) -> (PathBuf, Vec<RawEvent>) {
    let mut w = TraceWriter::create(dir).unwrap();
    let mut rng = Rng(3);
    let mut tsc = 1u64;
    let mut events = Vec::new();
    while events.len() < n {
        fib_events(10, &mut rng, &mut tsc, &mut events);
    }
    w.append(1, &events).unwrap();
    w.finish(sample_info(&[1])).unwrap();
    (task_path(dir, 1), events)
}

#[test]
fn truncation_is_reported_not_panicking() {
    let tmp = TempDir::new("trunc");
    let dir = tmp.path().join("t");
    let (path, events) = damaged_fixture(&dir, 150_000);
    let bytes = fs::read(&path).unwrap();
    assert!(bytes.len() > 1000);
    // Find the chunk boundaries to also cut exactly there.
    let boundaries = chunk_offsets(&bytes);
    assert!(boundaries.len() >= 3, "{boundaries:?}");
    let mut cuts = vec![0, 1, 15, 16, 17, 20, 55, bytes.len() - 1, bytes.len() / 2];
    cuts.extend(boundaries.iter().skip(1).copied());
    cuts.extend(boundaries.iter().map(|b| b + 39));
    for cut in cuts {
        fs::write(&path, &bytes[..cut]).unwrap();
        let trace = Trace::open(&dir).unwrap();
        let result: Vec<_> = match trace.events(1) {
            Ok(it) => it.collect(),
            Err(e) => vec![Err(e)],
        };
        let good = result.iter().take_while(|r| r.is_ok()).count();
        assert!(good < events.len(), "cut {cut}");
        let last = result.last().unwrap();
        match last {
            Err(e @ StoreError::Truncated { events: n, .. }) => {
                assert_eq!(*n as usize, good, "cut {cut}");
                let msg = e.to_string();
                assert!(
                    msg.contains("tasks/1.dat is truncated after") && msg.ends_with(" events"),
                    "{msg}"
                );
            }
            other => panic!("cut {cut}: expected truncation, got {other:?}"),
        }
        // Every event before the error is right.
        for (r, w) in result.iter().zip(&events).take(good) {
            assert_eq!(r.as_ref().unwrap().tsc, w.tsc);
        }
    }
}

#[test]
fn flipped_bytes_are_reported_not_panicking() {
    let tmp = TempDir::new("flip");
    let dir = tmp.path().join("t");
    let (path, events) = damaged_fixture(&dir, 100_000);
    let bytes = fs::read(&path).unwrap();
    let mut rng = Rng(99);
    let mut offsets: Vec<usize> = (0..60)
        .map(|_| rng.below(bytes.len() as u64) as usize)
        .collect();
    offsets.extend([
        0,
        8,
        12,
        16,
        17,
        20,
        24,
        40,
        48,
        52,
        55,
        56,
        60,
        bytes.len() - 1,
    ]);
    for off in offsets {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut damaged = bytes.clone();
            damaged[off] ^= mask;
            fs::write(&path, &damaged).unwrap();
            let trace = Trace::open(&dir).unwrap();
            let result: Vec<_> = match trace.events(1) {
                Ok(it) => it.collect(),
                Err(e) => vec![Err(e)],
            };
            let good = result.iter().take_while(|r| r.is_ok()).count();
            let err = result
                .last()
                .and_then(|r| r.as_ref().err())
                .unwrap_or_else(|| panic!("flip at {off} ^ {mask:#x} not detected"));
            assert!(good < events.len());
            let msg = err.to_string();
            assert!(msg.contains("tasks/1.dat"), "{msg}");
            match err {
                StoreError::Corrupt { .. }
                | StoreError::Truncated { .. }
                | StoreError::NewerVersion { .. } => {}
                other => panic!("unexpected error {other:?}"),
            }
        }
    }
    // The error names the chunk's offset.
    let mut damaged = bytes.clone();
    damaged[codec::FILE_HEADER_LEN + codec::CHUNK_HEADER_LEN + 3] ^= 0x10;
    fs::write(&path, &damaged).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let err = trace.events(1).unwrap().find_map(Result::err).unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "trace file {}: corrupt chunk at offset 16: checksum mismatch",
            path.display()
        )
    );
}

#[test]
fn newer_versions_are_refused() {
    let tmp = TempDir::new("ver");
    let dir = tmp.path().join("t");
    let (path, _) = damaged_fixture(&dir, 10);
    let info_path = dir.join(INFO_FILE);
    let text = fs::read_to_string(&info_path).unwrap();
    assert!(text.contains("\"format_version\": 2"), "{text}");
    fs::write(
        &info_path,
        text.replace("\"format_version\": 2", "\"format_version\": 3")
            .replace("\"tasks\"", "\"tasks_v3\""),
    )
    .unwrap();
    let err = Trace::open(&dir).unwrap_err();
    assert!(matches!(
        err,
        StoreError::NewerVersion {
            found: 3,
            supported: 2,
            ..
        }
    ));
    assert!(err.to_string().contains("newer"), "{err}");
    fs::write(&info_path, &text).unwrap();

    let mut bytes = fs::read(&path).unwrap();
    assert_eq!(bytes[8], 4);
    bytes[8] = 5;
    fs::write(&path, &bytes).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let err = trace.events(1).err().unwrap();
    assert!(
        matches!(err, StoreError::NewerVersion { found: 5, .. }),
        "{err}"
    );

    write_symtab_file(&dir, 0);
    let sym = session_path(&dir, 0);
    let text = fs::read_to_string(&sym).unwrap();
    fs::write(
        &sym,
        text.replacen("fctrace-symtab 1", "fctrace-symtab 3", 1),
    )
    .unwrap();
    let trace = Trace::open(&dir).unwrap();
    assert!(trace.sessions.is_empty());
    assert_eq!(trace.load_warnings.len(), 1);
    assert!(
        trace.load_warnings[0].contains("version 3 is newer"),
        "{:?}",
        trace.load_warnings
    );
}

#[test]
fn open_errors_are_clear() {
    let tmp = TempDir::new("open");
    let missing = tmp.path().join("nothing");
    let err = Trace::open(&missing).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no trace at {}: run `fctrace record` first",
            missing.display()
        )
    );

    let err = Trace::open(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("has no info.json"), "{err}");

    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    let err = Trace::open(&file).unwrap_err();
    assert!(
        err.to_string()
            .contains("neither a trace directory nor an archive"),
        "{err}"
    );

    let dir = tmp.path().join("t");
    let w = TraceWriter::create(&dir).unwrap();
    drop(w); // killed before finish
    let err = Trace::open(&dir).unwrap_err();
    assert!(err.to_string().contains("did not finish"), "{err}");

    let info_path = dir.join(INFO_FILE);
    for (text, needle) in [
        ("", "EOF"),
        (
            "{\"format\": \"fctrace-trace\", \"format_version\": 1",
            "EOF",
        ),
        ("[1]", "not a JSON object"),
        ("{\"format\": \"other\"}", "does not say"),
        ("{\"format\": \"fctrace-trace\"}", "format_version"),
        (
            "{\"format\": \"fctrace-trace\", \"format_version\": 1}",
            "missing field",
        ),
    ] {
        fs::write(&info_path, text).unwrap();
        let err = Trace::open(&dir).unwrap_err();
        assert!(err.to_string().contains(needle), "{text:?}: {err}");
    }
    fs::write(&info_path, [0xff, 0xfe]).unwrap();
    assert!(Trace::open(&dir).unwrap_err().to_string().contains("UTF-8"));
}

#[test]
fn create_moves_old_trace_aside_and_refuses_others() {
    let tmp = TempDir::new("create");
    let dir = tmp.path().join("fctrace.data");
    let old = tmp.path().join("fctrace.data.old");

    damaged_fixture(&dir, 10);
    fs::write(dir.join("sessions/marker"), "first").unwrap();
    let w = TraceWriter::create(&dir).unwrap();
    assert_eq!(w.kept_earlier(), Some(&(old.clone(), false)));
    w.finish(sample_info(&[1])).unwrap();
    assert_eq!(
        fs::read_to_string(old.join("sessions/marker")).unwrap(),
        "first"
    );
    assert!(!dir.join("sessions/marker").exists());

    // A second time: the older .old trace is replaced.
    fs::write(dir.join("sessions/marker"), "second").unwrap();
    let w = TraceWriter::create(&dir).unwrap();
    assert_eq!(w.kept_earlier(), Some(&(old.clone(), true)));
    assert_eq!(
        fs::read_to_string(old.join("sessions/marker")).unwrap(),
        "second"
    );

    // With a trailing slash too.
    let mut slashed = dir.clone().into_os_string();
    slashed.push("/");
    fs::write(dir.join("sessions/marker"), "third").unwrap();
    TraceWriter::create(Path::new(&slashed)).unwrap();
    assert_eq!(
        fs::read_to_string(old.join("sessions/marker")).unwrap(),
        "third"
    );

    // An empty directory is used as is.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    TraceWriter::create(&empty).unwrap();
    assert!(empty.join("tasks").is_dir());

    // A non-empty directory that is not a trace is refused.
    let other = tmp.path().join("src");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("main.c"), "int main;").unwrap();
    let err = TraceWriter::create(&other).err().unwrap();
    assert!(err.to_string().contains("not an fctrace trace"), "{err}");
    assert!(other.join("main.c").exists());

    // And so is one that has a trace's tasks/ and sessions/ but also
    // files fctrace does not write: at the top, or in tasks/.
    for extra in ["notes.txt", "tasks/main.yml"] {
        let mixed = tmp.path().join("mixed");
        let _ = fs::remove_dir_all(&mixed);
        fs::create_dir_all(mixed.join("tasks")).unwrap();
        fs::create_dir_all(mixed.join("sessions")).unwrap();
        fs::write(mixed.join("tasks/1.dat"), "").unwrap();
        fs::write(mixed.join(extra), "mine").unwrap();
        let err = TraceWriter::create(&mixed).err().unwrap();
        assert!(err.to_string().contains(&format!("`{extra}`")), "{err}");
        assert!(mixed.join(extra).exists());
        assert!(!tmp.path().join("mixed.old").exists());
    }

    // So is a file.
    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    let err = TraceWriter::create(&file).err().unwrap();
    assert!(err.to_string().contains("not a directory"), "{err}");

    // And moving a trace aside onto something that is not a trace.
    fs::remove_dir_all(&old).unwrap();
    fs::create_dir(&old).unwrap();
    fs::write(old.join("precious"), "x").unwrap();
    let err = TraceWriter::create(&dir).err().unwrap();
    assert!(err.to_string().contains("fctrace.data.old"), "{err}");
    assert!(old.join("precious").exists());
    // Even with a tasks/ directory of its own (it was removed).
    fs::create_dir_all(old.join("tasks")).unwrap();
    let err = TraceWriter::create(&dir).err().unwrap();
    assert!(err.to_string().contains("fctrace.data.old"), "{err}");
    assert!(old.join("precious").exists());
}

#[test]
fn many_tasks() {
    let tmp = TempDir::new("many");
    let dir = tmp.path().join("t");
    let mut w = TraceWriter::create(&dir).unwrap();
    let tids: Vec<u32> = (1000..2200).collect();
    for round in 0..3u64 {
        for &tid in &tids {
            let base = round * 1000 + u64::from(tid);
            w.append(
                tid,
                &[
                    RawEvent::new(EventKind::Entry, tid % 7, base),
                    RawEvent::new(EventKind::Exit, tid % 7, base + 5),
                ],
            )
            .unwrap();
        }
    }
    w.finish(sample_info(&tids)).unwrap();
    let trace = Trace::open(&dir).unwrap();
    // All open at once, as replay's merge does.
    let mut iters: Vec<_> = tids.iter().map(|&t| trace.events(t).unwrap()).collect();
    for (it, &tid) in iters.iter_mut().zip(&tids) {
        let first = it.next().unwrap().unwrap();
        assert_eq!((first.func, first.tsc), (tid % 7, u64::from(tid)));
        assert_eq!(it.count(), 5);
    }
}

#[test]
fn clock_conversion() {
    let two = ClockMap::new(&Clock {
        tsc_hz: 1.0,
        pairs: vec![(1000, 10_000), (3000, 11_000)],
        ..Clock::default()
    });
    assert_eq!(two.to_ns(1000), 10_000);
    assert_eq!(two.to_ns(2000), 10_500);
    assert_eq!(two.to_ns(3000), 11_000);
    assert_eq!(two.to_ns(5000), 12_000); // extrapolated
    assert_eq!(two.to_ns(0), 9_500);
    let one = ClockMap::new(&Clock {
        tsc_hz: 2e9,
        pairs: vec![(1000, 10_000)],
        ..Clock::default()
    });
    assert_eq!(one.to_ns(3000), 11_000);
    assert_eq!(one.to_ns(0), 9_500);
    let none = ClockMap::new(&Clock {
        tsc_hz: 4e9,
        pairs: vec![],
        ..Clock::default()
    });
    assert_eq!(none.to_ns(4_000_000_000), 1_000_000_000);
    // Garbage calibration: no panic, clamped.
    let bad = ClockMap::new(&Clock {
        tsc_hz: f64::NAN,
        pairs: vec![(u64::MAX, u64::MAX), (0, 0)],
        ..Clock::default()
    });
    let _ = bad.to_ns(u64::MAX);
    let bad = ClockMap::new(&Clock {
        tsc_hz: 0.0,
        pairs: vec![(0, u64::MAX), (1, 0)],
        ..Clock::default()
    });
    assert_eq!(bad.to_ns(0), u64::MAX);
    let huge = ClockMap::new(&Clock {
        tsc_hz: 1.0,
        pairs: vec![(0, 0), (1, u64::MAX)],
        ..Clock::default()
    });
    assert_eq!(huge.to_ns(u64::MAX), u64::MAX);
}

/// An exec keeps the tid: two tasks with one tid, each its own file, both
/// readable; info.json records origin, parent and file.
#[test]
fn tasks_sharing_a_tid() {
    let tmp = TempDir::new("sametid");
    let dir = tmp.path().join("t");
    let mut w = TraceWriter::create(&dir).unwrap();
    let first = [
        RawEvent::new(EventKind::Entry, 0, 10),
        RawEvent::new(EventKind::Signal, 10, 11),
        RawEvent::new(EventKind::Entry, 1, 12),
    ];
    let second = [
        RawEvent::new(EventKind::Entry, 2, 20),
        RawEvent::new(EventKind::Signal, 11, 21),
    ];
    let third = [RawEvent::new(EventKind::Entry, 3, 30)];
    w.append_task(0, 500, &first[..1]).unwrap();
    w.append_task(3, 500, &second).unwrap();
    w.append_task(0, 500, &first[1..]).unwrap();
    w.append_task(7, 500, &third).unwrap();
    let task = |id, origin, parent| TaskInfo {
        id,
        origin,
        parent,
        tid: 500,
        pid: 500,
        ppid: 1,
        parent_tid: parent.map(|_| 500),
        session: id,
        ..TaskInfo::default()
    };
    let info = TraceInfo {
        tasks: vec![
            task(0, TaskOrigin::Start, None),
            task(3, TaskOrigin::Exec, Some(0)),
            task(7, TaskOrigin::Exec, Some(3)),
            task(9, TaskOrigin::Fork, Some(7)),
        ],
        ..sample_info(&[])
    };
    w.finish(info).unwrap();
    let text = fs::read_to_string(dir.join(INFO_FILE)).unwrap();
    assert!(text.contains("\"origin\": \"exec\""), "{text}");
    assert!(text.contains("\"file\": \"tasks/500-2.dat\""), "{text}");
    let trace = Trace::open(&dir).unwrap();
    let files: Vec<&str> = trace.info.tasks.iter().map(|t| t.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "tasks/500.dat",
            "tasks/500-2.dat",
            "tasks/500-3.dat",
            "tasks/500-4.dat"
        ]
    );
    let origins: Vec<TaskOrigin> = trace.info.tasks.iter().map(|t| t.origin).collect();
    assert_eq!(
        origins,
        [
            TaskOrigin::Start,
            TaskOrigin::Exec,
            TaskOrigin::Exec,
            TaskOrigin::Fork
        ]
    );
    assert_eq!(trace.info.task_by_id(7).unwrap().parent, Some(3));
    let read = |t: &TaskInfo| -> Vec<(EventKind, u32, u64)> {
        trace
            .task_events(t)
            .unwrap()
            .map(|e| e.map(|e| (e.kind, e.func, e.tsc)))
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let raw = |e: &[RawEvent]| -> Vec<(EventKind, u32, u64)> {
        e.iter()
            .map(|e| (e.kind().unwrap(), e.func(), e.tsc))
            .collect()
    };
    assert_eq!(read(&trace.info.tasks[0]), raw(&first));
    assert_eq!(read(&trace.info.tasks[1]), raw(&second));
    assert_eq!(read(&trace.info.tasks[2]), raw(&third));
    assert_eq!(read(&trace.info.tasks[3]), vec![]);
    // `events(tid)` is the first task with the tid.
    assert_eq!(trace.events(500).unwrap().count(), 3);
}

/// A version 1 info.json (no id/origin/parent/file) still reads: ids are
/// tids, files `tasks/<tid>.dat`.
#[test]
fn version_1_info_is_read() {
    let tmp = TempDir::new("v1");
    let dir = tmp.path().join("t");
    let mut w = TraceWriter::create(&dir).unwrap();
    w.append(4, &[RawEvent::new(EventKind::Entry, 1, 5)])
        .unwrap();
    w.finish(sample_info(&[4, 6])).unwrap();
    let text = fs::read_to_string(dir.join(INFO_FILE)).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["format_version"] = 1.into();
    for t in value["tasks"].as_array_mut().unwrap() {
        let t = t.as_object_mut().unwrap();
        for key in ["id", "origin", "parent", "file"] {
            assert!(t.remove(key).is_some(), "{key}");
        }
    }
    fs::write(dir.join(INFO_FILE), value.to_string()).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let t = &trace.info.tasks;
    assert_eq!(
        (t[0].id, t[0].origin, t[0].parent),
        (4, TaskOrigin::Start, None)
    );
    assert_eq!(
        (t[1].id, t[1].origin, t[1].parent),
        (6, TaskOrigin::Thread, Some(4))
    );
    assert_eq!(t[1].file, "tasks/6.dat");
    assert_eq!(trace.task_events(&t[0]).unwrap().count(), 1);
}

/// A `file` that would leave `tasks/` is refused.
#[test]
fn task_file_names_stay_inside_the_trace() {
    let tmp = TempDir::new("escape");
    let dir = tmp.path().join("t");
    let w = TraceWriter::create(&dir).unwrap();
    w.finish(sample_info(&[4])).unwrap();
    let text = fs::read_to_string(dir.join(INFO_FILE)).unwrap();
    for bad in [
        "../info.json",
        "tasks/../../x",
        "/etc/passwd",
        "tasks/",
        "tasks/a/b",
    ] {
        fs::write(
            dir.join(INFO_FILE),
            text.replace("\"tasks/4.dat\"", &format!("{bad:?}")),
        )
        .unwrap();
        let err = Trace::open(&dir).unwrap_err();
        assert!(
            err.to_string().contains("is not a file name"),
            "{bad}: {err}"
        );
    }
}

/// The events `trace` holds for `tid`, as (kind, func), skipping history
/// chains; and the history chain's calls.
fn kinds_and_chain(trace: &Trace, tid: u32) -> (Vec<(EventKind, u32)>, Vec<u32>) {
    let mut chain = Vec::new();
    let mut out = Vec::new();
    let mut payload: Option<Vec<u8>> = None;
    let end_payload = |p: &mut Option<Vec<u8>>, chain: &mut Vec<u32>| {
        if let Some(bytes) = p.take() {
            let b = crate::argval::decode_backtrace(&bytes).unwrap();
            assert!(b.attached && b.history);
            chain.extend(b.funcs);
        }
    };
    for e in trace.events(tid).unwrap() {
        let e = e.unwrap();
        match e.kind {
            EventKind::Data => {
                let (b, n) = e.data_bytes();
                payload.as_mut().unwrap().extend_from_slice(&b[..n]);
            }
            EventKind::Args => {
                end_payload(&mut payload, &mut chain);
                payload = Some(Vec::new());
            }
            _ => {
                end_payload(&mut payload, &mut chain);
                out.push((e.kind, e.func));
            }
        }
    }
    end_payload(&mut payload, &mut chain);
    (out, chain)
}

#[test]
fn ring_snapshots_keep_the_recent_history_of_every_task() {
    let tmp = TempDir::new("ring");
    let dir = tmp.path().join("fctrace.data");
    let mut w = TraceWriter::create(&dir).unwrap();
    write_symtab_file(&dir, 0);
    let size = 64 << 10;
    w.set_ring(size);
    // Task 1: main (f1) > loop (f2) calling f3 > f4 a million times;
    // task 2: a quiet thread with a few calls, long ago.
    let mut tsc = 1_000u64;
    let mut rng = Rng(7);
    let mut next = || {
        tsc += 20 + rng.below(300);
        tsc
    };
    w.append_task(
        2,
        2,
        &[
            RawEvent::new(EventKind::Entry, 5, next()),
            RawEvent::new(EventKind::Exit, 5, next()),
        ],
    )
    .unwrap();
    w.append_task(
        1,
        1,
        &[
            RawEvent::new(EventKind::Entry, 1, next()),
            RawEvent::new(EventKind::Entry, 2, next()),
        ],
    )
    .unwrap();
    let mut batch = Vec::new();
    for i in 0..1_000_000u32 {
        batch.push(RawEvent::new(EventKind::Entry, 3, next()));
        batch.push(RawEvent::new(EventKind::Entry, 4 + (i % 3) * 4, next()));
        batch.push(RawEvent::new(EventKind::Exit, 4 + (i % 3) * 4, next()));
        batch.push(RawEvent::new(EventKind::Exit, 3, next()));
        if batch.len() >= 4096 {
            w.append_task(1, 1, &batch).unwrap();
            batch.clear();
        }
    }
    w.append_task(1, 1, &batch).unwrap();
    // The live part of task 1's thread: an entry of f3, not yet handed over.
    let live = vec![(1, 1, vec![RawEvent::new(EventKind::Entry, 3, next())])];
    let snap = w
        .snapshot(sample_info(&[1, 2]), "SIGUSR2", 5, &live)
        .unwrap();
    assert_eq!(snap.number, 1);
    assert!(snap.earlier.is_none());
    assert!(
        snap.bytes < size,
        "{} bytes for a ring of {size}",
        snap.bytes
    );
    assert!(snap.events_before > 0);
    let trace = Trace::open(&dir).unwrap();
    let info = &trace.info;
    let s = info.snapshot.as_ref().unwrap();
    assert_eq!(
        (s.number, s.reason.as_str(), s.ring_size),
        (1, "SIGUSR2", size)
    );
    assert_eq!(
        s.events_before + info.events,
        4 + 4_000_000 + 1 + 1,
        "every event kept or counted"
    );
    // Task 1: its history begins inside main > loop (maybe inside f3),
    // and ends with the live entry.
    let (events, chain) = kinds_and_chain(&trace, 1);
    assert_eq!(chain[..2], [1, 2]);
    assert!(chain.len() <= 3);
    assert_eq!(events.last(), Some(&(EventKind::Entry, 3)));
    let n = events.len();
    // The last iteration's leaf: i = 999_999, i % 3 == 0.
    let leaf = 4;
    assert_eq!(
        events[n - 5..n - 1],
        [
            (EventKind::Entry, 3),
            (EventKind::Entry, leaf),
            (EventKind::Exit, leaf),
            (EventKind::Exit, 3)
        ]
    );
    // The quiet thread keeps its only chunk.
    let (quiet, chain) = kinds_and_chain(&trace, 2);
    assert!(chain.is_empty());
    assert_eq!(quiet, [(EventKind::Entry, 5), (EventKind::Exit, 5)]);
    drop(trace);

    // A second snapshot: the first moves to snapshot.1 and stays readable.
    w.append_task(1, 1, &[RawEvent::new(EventKind::Entry, 3, next())])
        .unwrap();
    let snap = w.snapshot(sample_info(&[1, 2]), "trigger", 6, &[]).unwrap();
    assert_eq!(snap.number, 2);
    assert_eq!(
        snap.earlier.as_deref(),
        Some(dir.join("snapshot.1").as_path())
    );
    let first = Trace::open(&dir.join("snapshot.1")).unwrap();
    assert_eq!(first.info.snapshot.as_ref().unwrap().number, 1);
    assert_eq!(kinds_and_chain(&first, 2).0.len(), 2);
    let second = Trace::open(&dir).unwrap();
    assert_eq!(second.info.snapshot.as_ref().unwrap().reason, "trigger");
    let (events, _) = kinds_and_chain(&second, 1);
    // The live entry of the first snapshot was not kept: the appended
    // one is the last.
    assert_eq!(
        events[events.len() - 2..],
        [(EventKind::Exit, 3), (EventKind::Entry, 3)]
    );
    // Nothing written but snapshots: finish leaves the second in place.
    w.finish(sample_info(&[1, 2])).unwrap();
    assert_eq!(
        Trace::open(&dir)
            .unwrap()
            .info
            .snapshot
            .as_ref()
            .unwrap()
            .number,
        2
    );
}
