//! `fctrace dump --perfetto`: the file must decode with Google's `protoc
//! --decode perfetto.protos.Trace` against Perfetto's official
//! perfetto_trace.proto (the copy in crates/fctrace-perfetto/protos), and
//! hold every call: per function, the slice begins (names resolved through
//! each sequence's interned data) equal `report --format json`'s calls;
//! per sequence, the slices end in the order they began, timestamps do not
//! go back, interned ids are defined before use, after the sequence's
//! state was cleared; every sequence is a described thread. On tree.c
//! (arguments and return values), tree.cpp's exceptions, threads.c and
//! SQLite.

use fctrace_testkit::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The official proto (vendored with the crate that generates fctrace's
/// messages from it).
fn proto_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fctrace-perfetto/protos")
}

/// A slice as the decoded trace shows it.
#[derive(Debug, Default, Clone)]
struct Slice {
    name: String,
    cat: String,
    /// Debug annotations of its begin and end.
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Decoded {
    /// Slice begins per (name, category).
    begins: BTreeMap<(String, String), u64>,
    /// Every slice, in the order they ended (with the end's annotations).
    slices: Vec<Slice>,
    /// tid by sequence, from the thread track descriptors.
    threads: HashMap<u64, u64>,
    /// Sequences with events.
    sequences: BTreeSet<u64>,
    /// Names of the instant events.
    instants: Vec<String>,
    processes: BTreeSet<u64>,
}

/// One packet's fields of interest.
#[derive(Debug, Default)]
struct Packet {
    seq: Option<u64>,
    flags: u64,
    timestamp: Option<u64>,
    kind: Option<String>,
    name_iid: Option<u64>,
    name: Option<String>,
    cat_iids: Vec<u64>,
    annotations: Vec<(String, String)>,
    names: Vec<(u64, String)>,
    cats: Vec<(u64, String)>,
    tid: Option<u64>,
    pid: Option<u64>,
}

/// The text of a text-format string literal (C escapes, octal bytes).
fn unquote(s: &str) -> String {
    let s = s.trim();
    let inner = &s[1..s.len() - 1];
    let b = inner.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                c @ b'0'..=b'7' => {
                    let mut v = u32::from(c - b'0');
                    let mut n = 1;
                    while n < 3 && i + 1 < b.len() && (b'0'..=b'7').contains(&b[i + 1]) {
                        i += 1;
                        v = v * 8 + u32::from(b[i] - b'0');
                        n += 1;
                    }
                    out.push(v as u8);
                }
                c => out.push(c),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Per sequence: its interned names and categories, the open slices, the
/// last timestamp.
#[derive(Default)]
struct SeqState {
    cleared: bool,
    names: HashMap<u64, String>,
    cats: HashMap<u64, String>,
    open: Vec<Slice>,
    last_ts: u64,
}

/// `protoc --decode perfetto.protos.Trace` of `file`, checked and summed
/// as it streams (the text is ten times the file).
#[track_caller]
fn decode(file: &Path) -> Decoded {
    let proto = proto_dir();
    let mut child = Command::new("protoc")
        .arg("--decode")
        .arg("perfetto.protos.Trace")
        .arg(format!("-I{}", proto.display()))
        .arg("perfetto_trace.proto")
        .stdin(std::fs::File::open(file).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run protoc ({e}): install the protobuf-compiler package \
                 (apt-get install protobuf-compiler; ./scripts/test does)"
            )
        });
    let mut d = Decoded::default();
    let mut seqs: HashMap<u64, SeqState> = HashMap::new();
    let mut path: Vec<String> = Vec::new();
    let mut p = Packet::default();
    let mut annotation: (String, String) = Default::default();
    let mut interned: (u64, String) = Default::default();
    let mut packets = 0u64;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let t = line.trim();
        if let Some(block) = t.strip_suffix(" {") {
            path.push(block.to_string());
            continue;
        }
        if t == "}" {
            let closed = path.pop().expect("unbalanced protoc output");
            let at: Vec<&str> = path.iter().map(String::as_str).collect();
            match (at.as_slice(), closed.as_str()) {
                ([], "packet") => {
                    packets += 1;
                    finish_packet(std::mem::take(&mut p), &mut seqs, &mut d);
                }
                (["packet", "track_event"], "debug_annotations") => {
                    p.annotations.push(std::mem::take(&mut annotation))
                }
                (["packet", "interned_data"], "event_names") => {
                    p.names.push(std::mem::take(&mut interned))
                }
                (["packet", "interned_data"], "event_categories") => {
                    p.cats.push(std::mem::take(&mut interned))
                }
                _ => {}
            }
            continue;
        }
        let Some((key, value)) = t.split_once(": ") else {
            panic!("unexpected protoc output line: {line}")
        };
        let num = || value.parse::<u64>().unwrap();
        let at: Vec<&str> = path.iter().map(String::as_str).collect();
        match (at.as_slice(), key) {
            (["packet"], "trusted_packet_sequence_id") => p.seq = Some(num()),
            (["packet"], "sequence_flags") => p.flags = num(),
            (["packet"], "timestamp") => p.timestamp = Some(num()),
            (["packet", "track_event"], "type") => p.kind = Some(value.to_string()),
            (["packet", "track_event"], "name_iid") => p.name_iid = Some(num()),
            (["packet", "track_event"], "name") => p.name = Some(unquote(value)),
            (["packet", "track_event"], "category_iids") => p.cat_iids.push(num()),
            (["packet", "track_event", "debug_annotations"], "name") => {
                annotation.0 = unquote(value)
            }
            (["packet", "track_event", "debug_annotations"], "string_value") => {
                annotation.1 = unquote(value)
            }
            (["packet", "interned_data", _], "iid") => interned.0 = num(),
            (["packet", "interned_data", _], "name") => interned.1 = unquote(value),
            (["packet", "track_descriptor", "thread"], "tid") => p.tid = Some(num()),
            (["packet", "track_descriptor", "thread"], "pid") => p.pid = Some(num()),
            (["packet", "track_descriptor", "process"], "pid") => {
                d.processes.insert(num());
            }
            _ => {}
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc --decode perfetto.protos.Trace failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(path.is_empty());
    assert!(packets > 0, "no packet in {}", file.display());
    for (seq, s) in &seqs {
        assert!(
            s.open.is_empty(),
            "sequence {seq}: slices never ended: {:?}",
            s.open
        );
    }
    d
}

fn finish_packet(p: Packet, seqs: &mut HashMap<u64, SeqState>, d: &mut Decoded) {
    let seq = p.seq.expect("a packet without trusted_packet_sequence_id");
    let s = seqs.entry(seq).or_default();
    if p.flags & 1 != 0 {
        // SEQ_INCREMENTAL_STATE_CLEARED
        s.cleared = true;
        s.names.clear();
        s.cats.clear();
    }
    if let Some(tid) = p.tid {
        d.threads.insert(seq, tid);
        assert!(p.pid.is_some(), "a thread without pid");
    }
    for (iid, name) in p.names {
        assert!(
            s.names.insert(iid, name).is_none(),
            "iid {iid} interned twice"
        );
    }
    for (iid, name) in p.cats {
        s.cats.insert(iid, name);
    }
    let Some(kind) = p.kind else { return };
    d.sequences.insert(seq);
    assert!(
        s.cleared,
        "sequence {seq}: an event before its state was cleared"
    );
    assert!(
        p.flags & 2 != 0,
        "sequence {seq}: an event without SEQ_NEEDS_INCREMENTAL_STATE"
    );
    let ts = p.timestamp.expect("an event without timestamp");
    assert!(ts >= s.last_ts, "sequence {seq}: time goes back");
    s.last_ts = ts;
    let name = match (p.name_iid, p.name) {
        (Some(iid), _) => s
            .names
            .get(&iid)
            .unwrap_or_else(|| panic!("sequence {seq}: name iid {iid} not interned"))
            .clone(),
        (None, Some(name)) => name,
        (None, None) => String::new(),
    };
    match kind.as_str() {
        "TYPE_SLICE_BEGIN" => {
            let cat = match p.cat_iids[..] {
                [iid] => s.cats[&iid].clone(),
                _ => panic!("sequence {seq}: a slice with categories {:?}", p.cat_iids),
            };
            *d.begins.entry((name.clone(), cat.clone())).or_insert(0) += 1;
            s.open.push(Slice {
                name,
                cat,
                annotations: p.annotations.into_iter().collect(),
            });
        }
        "TYPE_SLICE_END" => {
            let mut slice = s
                .open
                .pop()
                .unwrap_or_else(|| panic!("sequence {seq}: an end without begin"));
            slice.annotations.extend(p.annotations);
            d.slices.push(slice);
        }
        "TYPE_INSTANT" => d.instants.push(name),
        other => panic!("unexpected event type {other}"),
    }
}

/// `fctrace dump --perfetto` of `dir`, decoded; its calls per function
/// are the report's, and every sequence with events is a thread.
#[track_caller]
fn check(dir: &Path, opts: &[&str]) -> Decoded {
    let mut all = vec!["--perfetto"];
    all.extend(opts);
    let (_out, file) = dump_file(dir, &all, "trace.pftrace");
    let d = decode(&file);
    let mut report_args = vec!["--format", "json"];
    report_args.extend(opts);
    let rep: Report = serde_json::from_str(&fctrace_on("report", dir, &report_args)).unwrap();
    assert_eq!(
        d.begins,
        rep.calls_by_name_and_module(),
        "dump --perfetto {opts:?} of {}: slices per function (left) and the report's calls (right)",
        dir.display()
    );
    for seq in &d.sequences {
        assert!(d.threads.contains_key(seq), "sequence {seq} has no thread");
    }
    let tids: BTreeSet<u64> = d.sequences.iter().map(|s| d.threads[s]).collect();
    let task_tids: BTreeSet<u64> = rep.tasks.iter().map(|t| t.tid).collect();
    assert!(tids.is_subset(&task_tids));
    d
}

#[test]
fn perfetto_c_tree_with_arguments() {
    let exe = c_program("tree.c", "-O0", &["-O0"]);
    let rec = record(&exe, &[], &["-A", "leaf@arg1", "-R", "leaf@retval"]);
    let d = check(&rec.dir.path, &[]);
    // tree.c: leaf(1) = 10, leaf(2) = 17, leaf(20) = 143 (see
    // dump_chrome.rs).
    let leaf: BTreeSet<(String, String)> = d
        .slices
        .iter()
        .filter(|s| s.name == "leaf")
        .map(|s| {
            (
                s.annotations["args"].clone(),
                s.annotations["retval"].clone(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String)> = [("1", "10"), ("2", "17"), ("20", "143")]
        .iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect();
    assert_eq!(leaf, expected);
    let exe_file = module_file_name(&exe.to_string_lossy());
    assert!(d
        .slices
        .iter()
        .filter(|s| s.name == "leaf")
        .all(|s| s.cat == exe_file));
    assert_eq!(d.processes.len(), 1);
    // With filters.
    let f = check(&rec.dir.path, &["-F", "nest1"]);
    assert_eq!(f.slices.len(), 5);
}

#[test]
fn perfetto_cpp_exceptions_unwind() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record(&exe, &["exceptions"], &[]);
    let d = check(&rec.dir.path, &[]);
    assert!(
        d.slices
            .iter()
            .any(|s| s.annotations.get("end").map(String::as_str) == Some("unwound")),
        "no unwound call in tree.cpp's exceptions"
    );
}

#[test]
fn perfetto_threads_one_sequence_per_thread() {
    const N: u64 = 100;
    let exe = c_program("threads.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let d = check(&rec.dir.path, &[]);
    let calls = |name: &str| -> u64 {
        d.begins
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, c)| c)
            .sum()
    };
    // threads.c: thread i calls work() i + 1 times, each work() calls
    // leaf() twice.
    assert_eq!(calls("work"), N * (N + 1) / 2);
    assert_eq!(calls("leaf"), N * (N + 1));
    assert_eq!(d.sequences.len() as u64, N + 1);
    let tids: BTreeSet<u64> = d.threads.values().copied().collect();
    assert_eq!(tids.len() as u64, N + 1);
}

#[test]
fn perfetto_sqlite() {
    let exe = sqlite_driver("-O2");
    let rec = record(&exe, &[], &[]);
    let d = check(&rec.dir.path, &[]);
    let binds: u64 = d
        .begins
        .iter()
        .filter(|((n, _), _)| n == "sqlite3_bind_double")
        .map(|(_, c)| c)
        .sum();
    assert_eq!(binds, SQLITE_ROWS);
}
