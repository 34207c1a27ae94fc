//! `fctrace archive` (issue 26): a trace packed into one file on the
//! recording machine is read elsewhere, the original gone, by every reader
//! with the same output as the original directory gave; so is the
//! directory `tar --zstd -xf` makes of it. Bad input, an existing output
//! and a full disk end in a clear error, never a partial archive.
//!
//! The program is tests/programs/graph.c, whose calls are known from its
//! source (its header).

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The readers compared, each with its arguments after `-d PATH`.
const READERS: &[&[&str]] = &[
    &["replay"],
    &["replay", "-F", "outer", "-f", "elapsed,tid,module"],
    &["report"],
    &["report", "--format", "json", "-s", "calls"],
    &["graph"],
    &["graph", "leaf", "--format", "dot"],
    &["dump"],
    &["dump", "--chrome"],
    &["dump", "--flame-graph"],
    &["info"],
];

/// `fctrace ARGS[0] -d trace ARGS[1..]` with TMPDIR set to `tmp`:
/// (status success, stdout, stderr).
fn read(trace: &Path, args: &[&str], tmp: &Path) -> Run {
    let r = run_with_timeout(
        Command::new(fctrace_bin())
            .arg(args[0])
            .arg("-d")
            .arg(trace)
            .args(&args[1..])
            .env("TMPDIR", tmp),
        FCTRACE_TIMEOUT,
    );
    assert_no_panic(&r);
    r
}

/// The output of every reader on `trace`, `info`'s first line (which
/// names what it read) put aside.
fn outputs(trace: &Path, tmp: &Path) -> Vec<(String, String)> {
    READERS
        .iter()
        .map(|args| {
            let r = read(trace, args, tmp);
            assert!(
                r.success(),
                "{args:?} on {}\n{}",
                trace.display(),
                r.describe()
            );
            let out = if args[0] == "info" {
                let (first, rest) = r.stdout.split_once('\n').unwrap();
                assert_eq!(
                    first.split_whitespace().nth(1).map(Path::new),
                    Some(trace),
                    "info names what it read: {first}"
                );
                rest.to_string()
            } else {
                r.stdout
            };
            (args.join(" "), out)
        })
        .collect()
}

#[track_caller]
fn assert_same_outputs(want: &[(String, String)], got: &[(String, String)], what: &str) {
    for ((cmd, w), (_, g)) in want.iter().zip(got) {
        assert!(
            w == g,
            "`{cmd}` on {what} differs from the original directory's\n--- original ---\n{}\n--- {what} ---\n{}",
            clip(w, 4000),
            clip(g, 4000)
        );
    }
}

/// `fctrace archive ARGS`.
fn archive(args: &[&OsStr]) -> Run {
    let mut all = vec![OsStr::new("archive")];
    all.extend_from_slice(args);
    fctrace(&all)
}

/// `fctrace archive -d DIR -o OUT`.
fn pack(dir: &Path, out: &Path) -> Run {
    archive(&[
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
    ])
}

fn entries_of(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn archive_read_elsewhere_gives_the_same_outputs() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    let rec = record_same(&exe, &["10"]);
    let here = scratch("archive-here");
    let trace = here.path.join("run1.data");
    std::fs::rename(&rec.dir.path, &trace).unwrap();
    let reader_tmp = scratch("archive-tmp");
    let want = outputs(&trace, &reader_tmp.path);
    // graph.c's leaf: 2 per call of twice (N + 1 calls), N per call of
    // inner (2 calls), for N = 10.
    let report = &want
        .iter()
        .find(|(c, _)| c == "report --format json -s calls")
        .unwrap()
        .1;
    let leaf_calls = serde_json::from_str::<serde_json::Value>(report).unwrap()["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "leaf")
        .map(|f| f["calls"].as_u64());
    assert_eq!(leaf_calls, Some(Some(2 * 11 + 2 * 10)), "{report}");

    // Packed with the defaults: DIR.tar.zst next to DIR, private.
    let r = archive(&[OsStr::new("-d"), trace.as_os_str()]);
    assert!(r.success(), "{}", r.describe());
    let packed = here.path.join("run1.data.tar.zst");
    assert!(
        r.stderr.contains("run1.data.tar.zst written"),
        "{}",
        r.describe()
    );
    let mode = std::fs::metadata(&packed).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "the archive's mode");
    assert_eq!(entries_of(&here.path), ["run1.data", "run1.data.tar.zst"]);

    // Elsewhere, the trace directory gone.
    let there = scratch("archive-there");
    let moved = there.path.join("from-customer.tar.zst");
    std::fs::copy(&packed, &moved).unwrap();
    std::fs::remove_dir_all(&here.path).unwrap();
    assert_same_outputs(&want, &outputs(&moved, &reader_tmp.path), "the archive");
    assert_eq!(
        entries_of(&reader_tmp.path),
        Vec::<String>::new(),
        "the readers' temporary directories are removed"
    );

    // Unpacked by tar: the directory of the original name, which reads the same.
    let untar = tool(
        "tar",
        &[
            OsStr::new("--zstd"),
            OsStr::new("-xf"),
            moved.as_os_str(),
            OsStr::new("-C"),
            there.path.as_os_str(),
        ],
    );
    assert!(untar.success(), "{}", untar.describe());
    assert_eq!(
        entries_of(&there.path),
        ["from-customer.tar.zst", "run1.data"]
    );
    let unpacked = there.path.join("run1.data");
    assert_same_outputs(
        &want,
        &outputs(&unpacked, &reader_tmp.path),
        "the unpacked directory",
    );
}

/// A file on which every reader fails with `message`, exit status 1 and
/// no panic.
#[track_caller]
fn readers_refuse(path: &Path, message: &str) {
    let tmp = scratch("archive-refused-tmp");
    for args in READERS {
        let r = read(path, args, &tmp.path);
        assert_eq!(r.code(), Some(1), "{args:?}\n{}", r.describe());
        assert!(
            r.stderr.contains(message),
            "{args:?}: wanted {message:?}\n{}",
            r.describe()
        );
    }
    assert_eq!(
        entries_of(&tmp.path),
        Vec::<String>::new(),
        "temporary files left"
    );
}

#[test]
fn archive_refuses_bad_input_and_existing_output() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    let rec = record_same(&exe, &["3"]);
    let work = scratch("archive-bad");
    let out = work.path.join("t.tar.zst");
    let r = pack(&rec.dir.path, &out);
    assert!(r.success(), "{}", r.describe());
    let first = std::fs::read(&out).unwrap();

    // An existing output: refused, left as it was; --force replaces it.
    let other = record_same(&exe, &["25"]);
    let args = [
        OsStr::new("-d"),
        other.dir.path.as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
    ];
    let r = archive(&args);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("it exists: --force replaces it"),
        "{}",
        r.describe()
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        first,
        "the existing archive is untouched"
    );
    let mut forced = args.to_vec();
    forced.push(OsStr::new("--force"));
    assert!(archive(&forced).success());
    assert_ne!(std::fs::read(&out).unwrap(), first, "--force replaced it");
    assert!(
        fctrace_on("replay", &out, &[]).contains("only_big"),
        "the N = 25 run"
    );

    // Not a trace, not an archive, damaged archives.
    let text = work.path.join("notes.txt");
    std::fs::write(&text, "not a trace\n").unwrap();
    readers_refuse(&text, "is neither a trace directory nor an archive of one");
    let truncated = work.path.join("cut.tar.zst");
    std::fs::write(&truncated, &first[..first.len() / 2]).unwrap();
    readers_refuse(&truncated, "cut.tar.zst: it is damaged or truncated");
    let stranger = work.path.join("stranger.tar.zst");
    let made = tool(
        "tar",
        &[
            OsStr::new("--zstd"),
            OsStr::new("-cf"),
            stranger.as_os_str(),
            OsStr::new("-C"),
            work.path.as_os_str(),
            OsStr::new("notes.txt"),
        ],
    );
    assert!(made.success(), "{}", made.describe());
    readers_refuse(
        &stranger,
        "stranger.tar.zst: it does not hold an fctrace trace",
    );
    let not_trace = work.path.join("somedir");
    std::fs::create_dir(&not_trace).unwrap();
    std::os::unix::fs::symlink(&rec.dir.path, work.path.join("somedir/link")).unwrap();
    let linked = tool(
        "tar",
        &[
            OsStr::new("--zstd"),
            OsStr::new("-cf"),
            work.path.join("link.tar.zst").as_os_str(),
            OsStr::new("-C"),
            work.path.as_os_str(),
            OsStr::new("somedir"),
        ],
    );
    assert!(linked.success(), "{}", linked.describe());
    readers_refuse(
        &work.path.join("link.tar.zst"),
        "an fctrace archive holds only directories and regular files",
    );

    // `archive` of what is not a trace directory.
    for (dir, message) in [
        (
            not_trace.as_path(),
            "is not an fctrace trace: it has no info.json",
        ),
        (out.as_path(), "it is a file, not a trace directory"),
        (
            Path::new("/nonexistent/x.data"),
            "no trace at /nonexistent/x.data",
        ),
    ] {
        let to = work.path.join("never.tar.zst");
        let r = pack(dir, &to);
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(
            r.stderr.contains(message),
            "wanted {message:?}\n{}",
            r.describe()
        );
        assert!(!to.exists());
    }
}

#[test]
fn archive_leaves_out_symbolic_links_and_refuses_a_live_recorder() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    let rec = record_same(&exe, &["3"]);
    let work = scratch("archive-links");
    let secret = work.path.join("secret.txt");
    std::fs::write(&secret, "private\n").unwrap();
    std::os::unix::fs::symlink(&secret, rec.dir.path.join("sessions/link.sym")).unwrap();
    let out = work.path.join("t.tar.zst");
    let r = pack(&rec.dir.path, &out);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stderr
            .contains("link.sym left out: not a regular file or directory"),
        "{}",
        r.describe()
    );
    let list = tool(
        "tar",
        &[OsStr::new("--zstd"), OsStr::new("-tvf"), out.as_os_str()],
    );
    assert!(list.success(), "{}", list.describe());
    assert!(!list.stdout.contains("link.sym"), "{}", list.stdout);
    assert!(
        list.stdout
            .lines()
            .all(|l| l.starts_with("-rw------- ") || l.starts_with("drwx------ ")),
        "{}",
        list.stdout
    );

    // A recorder that still runs (this test's process stands for it).
    std::fs::write(
        rec.dir.path.join("recorder.pid"),
        format!("{}\n", std::process::id()),
    )
    .unwrap();
    let again = work.path.join("again.tar.zst");
    let r = pack(&rec.dir.path, &again);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("still writes into it"),
        "{}",
        r.describe()
    );
    assert!(!again.exists());
}

/// A tmpfs of `size`, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let path = std::env::temp_dir().join(format!("fctrace-small-{}", unique_suffix()));
        std::fs::create_dir_all(&path).unwrap();
        let r = tool(
            "mount",
            &[
                OsStr::new("-t"),
                OsStr::new("tmpfs"),
                OsStr::new("-o"),
                OsStr::new(&format!("size={size}")),
                OsStr::new("tmpfs"),
                path.as_os_str(),
            ],
        );
        assert!(
            r.success(),
            "this test mounts a tmpfs: run it as root\n{}",
            r.describe()
        );
        SmallDisk { path }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[test]
fn a_full_disk_fails_packing_and_unpacking_and_leaves_no_file() {
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    // With -l, the C library's symbol table too: more than the disk holds.
    let rec = record(&exe, &["10"], &["-l"]);
    let disk = SmallDisk::mount("8k");
    let out = disk.path.join("t.tar.zst");
    let r = pack(&rec.dir.path, &out);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!(
            "cannot write {}: No space left on device",
            out.display()
        )),
        "{}",
        r.describe()
    );
    assert_eq!(
        entries_of(&disk.path),
        Vec::<String>::new(),
        "nothing left on the disk"
    );

    // Read with the full disk as TMPDIR: the archive cannot be unpacked.
    let work = scratch("archive-full-read");
    let packed = work.path.join("t.tar.zst");
    let r = pack(&rec.dir.path, &packed);
    assert!(r.success(), "{}", r.describe());
    let r = read(&packed, &["replay"], &disk.path);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("cannot unpack the archive here (No space left on device")
            && r.stderr
                .contains("set TMPDIR to a directory with more room"),
        "{}",
        r.describe()
    );
    assert_eq!(
        entries_of(&disk.path),
        Vec::<String>::new(),
        "nothing left on the disk"
    );
}

#[test]
fn ctrl_c_while_reading_an_archive_removes_its_temporary_directory() {
    use std::io::{BufRead, BufReader};
    let exe = c_program("graph.c", "-O0", &["-O0"]);
    // About 8,000 calls of leaf: a call tree far larger than a pipe holds.
    let rec = record_same(&exe, &["2000"]);
    let work = scratch("archive-ctrl-c");
    let packed = work.path.join("t.tar.zst");
    let r = pack(&rec.dir.path, &packed);
    assert!(r.success(), "{}", r.describe());
    let tmp = scratch("archive-ctrl-c-tmp");
    let mut child = Command::new(fctrace_bin())
        .args(["replay", "-d"])
        .arg(&packed)
        .env("TMPDIR", &tmp.path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its first line: the archive is unpacked and being read; the rest
    // waits in the full pipe.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("# "), "{line}");
    assert_eq!(
        entries_of(&tmp.path).len(),
        1,
        "the archive's temporary directory"
    );
    // SAFETY: kill(2) of the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGINT),
        "fctrace ends by the signal, as without an archive: {status:?}"
    );
    assert_eq!(
        entries_of(&tmp.path),
        Vec::<String>::new(),
        "temporary files left"
    );
}

/// The build-id of `elf`, as `readelf -n` prints it.
fn build_id(elf: &Path) -> String {
    let notes = tool("readelf", &[OsStr::new("-n"), elf.as_os_str()]);
    notes
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}\n{}", elf.display(), notes.stdout))
        .trim()
        .to_string()
}

/// Issue 26's whole story: a stripped program recorded on one machine,
/// its archive read on another where only its debug file is, in a
/// `--debug-dir`: the names appear.
#[test]
fn archive_of_a_stripped_program_is_named_elsewhere_from_a_debug_dir() {
    let built = c_program("graph.c", "-O0-g", &["-O0", "-g"]);
    let here = scratch("archive-stripped-here");
    let exe = here.path.join("graph");
    let debug = here.path.join("graph.debug");
    std::fs::copy(&built, &exe).unwrap();
    let keep = tool(
        "objcopy",
        &[
            OsStr::new("--only-keep-debug"),
            exe.as_os_str(),
            debug.as_os_str(),
        ],
    );
    assert!(keep.success());
    tool("strip", &[OsStr::new("--strip-all"), exe.as_os_str()]);
    let id = build_id(&exe);
    assert_eq!(build_id(&debug), id);

    // fctrace says on stderr that the program is stripped: stdout only.
    let rec = record(&exe, &["10"], &[]);
    assert_eq!(rec.run.stdout, run_native(&exe, &["10"]).stdout);
    let packed = here.path.join("run.tar.zst");
    let r = pack(&rec.dir.path, &packed);
    assert!(r.success(), "{}", r.describe());

    // The other machine: the archive and the debug file, in the layout
    // of /usr/lib/debug; neither the program nor the trace directory.
    let there = scratch("archive-stripped-there");
    let moved = there.path.join("run.tar.zst");
    std::fs::copy(&packed, &moved).unwrap();
    let dbg = there.path.join("dbg");
    let by_id = dbg.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::copy(&debug, by_id.join(format!("{}.debug", &id[2..]))).unwrap();
    drop(rec);
    std::fs::remove_dir_all(&here.path).unwrap();

    let leaf_calls = |extra: &[&OsStr]| -> Option<u64> {
        let mut args = vec![
            OsStr::new("report"),
            OsStr::new("-d"),
            moved.as_os_str(),
            OsStr::new("--format"),
            OsStr::new("json"),
        ];
        args.extend_from_slice(extra);
        let r = run_with_timeout(
            Command::new(fctrace_bin())
                .args(&args)
                .env_remove("DEBUGINFOD_URLS"),
            FCTRACE_TIMEOUT,
        );
        assert!(r.success(), "{}", r.describe());
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "leaf")
            .and_then(|f| f["calls"].as_u64())
    };
    assert_eq!(leaf_calls(&[]), None, "no name without the debug file");
    // graph.c's leaf for N = 10: 2 per call of twice (11), 10 per call
    // of inner (2).
    assert_eq!(
        leaf_calls(&[OsStr::new("--debug-dir"), dbg.as_os_str()]),
        Some(2 * 11 + 2 * 10)
    );
}
