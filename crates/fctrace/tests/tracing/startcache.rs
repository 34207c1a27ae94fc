//! The start-up cache (docs/engine.md, "The start-up cache"): Debian's
//! stripped gzip (its 127 FDE functions found by the analysis) recorded
//! cold (the cache empty), warm (the entry read) and with `--no-cache`
//! traces exactly the same calls and the same symbol table, with and
//! without `-l`; a damaged entry (truncated, a byte flipped, a whole entry
//! for another build-id) is ignored and made again with identical
//! results; an unusable cache directory does not fail the recording; the
//! directory is 0700 and its files 0600. Whether a run read the entry is
//! seen from outside: an entry is handed to the recorder, and replaced,
//! only when the agent did not find a valid one.

use fctrace_format::symtab::SymTab;
use fctrace_symbols::startcache;
use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const GZIP: &str = "/usr/bin/gzip";

/// What a recording shows: per-function call counts of gzip's functions
/// (from `report`), and the symbol table's function lines (id, address,
/// size, status, name), the program's output and fctrace's stderr.
#[derive(Debug)]
struct Seen {
    calls: BTreeMap<String, u64>,
    lines: Vec<String>,
    stdout: String,
}

/// Records gzip compressing `input` with `XDG_CACHE_HOME=xdg` and `opts`.
fn record(xdg: &Path, input: &Path, opts: &[&str]) -> (Seen, String) {
    record_program(xdg, opts, GZIP, &["-c", &input.to_string_lossy()])
}

/// Records `exe` with `args`, `XDG_CACHE_HOME=xdg` and `opts` (util-linux's
/// setarch runs it).
fn record_program(xdg: &Path, opts: &[&str], exe: &str, args: &[&str]) -> (Seen, String) {
    let dir = TraceDir::new("startcache");
    // Without address space randomisation: python's calls depend on where
    // its objects lie (hashes of addresses), and each run must make the
    // same calls.
    let r = run(Command::new("setarch")
        .args(["x86_64", "-R"])
        .arg(fctrace_bin())
        .arg("record")
        .args(opts)
        .arg("-d")
        .arg(&dir.path)
        .arg(exe)
        .args(args)
        .env("PYTHONHASHSEED", "0")
        .env("XDG_CACHE_HOME", xdg));
    assert!(
        r.success(),
        "{} (setarch: apt-get install util-linux)",
        r.describe()
    );
    assert!(
        !dir.path.join("cache").exists(),
        "the agents' new entries stay in the trace"
    );
    let calls = report(&dir.path)
        .functions_of(Path::new(exe))
        .iter()
        .map(|f| (f.symbol.clone(), f.calls))
        .collect();
    let table = SymTab::parse(&fs::read_to_string(dir.path.join("sessions/0.sym")).unwrap())
        .expect("a symbol table");
    let lines = table
        .functions
        .iter()
        .map(|f| {
            let module = &table.module(f.module).unwrap().path;
            format!(
                "{} {module} {:#x} {} {:?} {}",
                f.id, f.addr, f.size, f.status, f.name
            )
        })
        .collect();
    let seen = Seen {
        calls,
        lines,
        stdout: r.stdout.clone(),
    };
    (seen, r.stderr)
}

/// The cache entries in `cache` (files ending in .fca), with their inode.
fn entries(cache: &Path) -> BTreeMap<PathBuf, u64> {
    fs::read_dir(cache)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "fca"))
                .map(|p| {
                    let ino = fs::metadata(&p).unwrap().ino();
                    (p, ino)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The one entry of gzip's module in `cache`.
fn gzip_entry(cache: &Path) -> (PathBuf, u64) {
    entry_of(cache, GZIP)
}

/// The one entry in `cache` whose key names the file at `path`.
fn entry_of(cache: &Path, path: &str) -> (PathBuf, u64) {
    let found: Vec<(PathBuf, u64)> = entries(cache)
        .into_iter()
        .filter(|(p, _)| {
            let bytes = fs::read(p).unwrap();
            let (key, _) = startcache::open(&bytes).expect("a valid entry");
            key.path == path
        })
        .collect();
    assert_eq!(found.len(), 1, "one entry for {path}: {found:?}");
    found.into_iter().next().unwrap()
}

/// Asserts that two recordings saw the same, showing the first
/// differences.
fn assert_same(a: &Seen, b: &Seen, ctx: &str) {
    let calls: Vec<_> = a
        .calls
        .iter()
        .filter(|(k, v)| b.calls.get(*k) != Some(v))
        .chain(b.calls.iter().filter(|(k, _)| !a.calls.contains_key(*k)))
        .take(10)
        .collect();
    let lines: Vec<_> = a
        .lines
        .iter()
        .zip(&b.lines)
        .filter(|(x, y)| x != y)
        .take(10)
        .collect();
    assert!(
        calls.is_empty() && lines.is_empty() && a.lines.len() == b.lines.len(),
        "{ctx}: calls differ: {calls:?}; symbol table lines ({} and {}) differ: {lines:?}",
        a.lines.len(),
        b.lines.len()
    );
    assert_eq!(a.stdout, b.stdout, "{ctx}");
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// A test's cache home and gzip's input.
fn setup(name: &str) -> (TraceDir, PathBuf, PathBuf) {
    assert!(
        Path::new(GZIP).exists(),
        "{GZIP} is missing: apt-get install gzip"
    );
    let dir = scratch(name);
    let input = dir.path.join("input");
    let text: String = (0..3000)
        .map(|i| format!("line {i} {}\n", i * 7919 % 1000))
        .collect();
    fs::write(&input, text).unwrap();
    let xdg = dir.path.join("xdg");
    (dir, xdg, input)
}

#[test]
fn cached_runs_trace_the_same_calls_as_uncached_ones() {
    let (_dir, xdg, input) = setup("startcache_same");
    let cache = xdg.join("fctrace");
    for opts in [&[][..], &["-l"][..]] {
        let (uncached, _) = record(&xdg, &input, &[&["--no-cache"][..], opts].concat());
        assert!(entries(&cache).is_empty(), "--no-cache adds nothing");
        assert!(uncached.calls.values().sum::<u64>() > 100, "{uncached:?}");
        let (cold, _) = record(&xdg, &input, opts);
        let (path, ino) = gzip_entry(&cache);
        assert_eq!(mode(&cache), 0o700, "{opts:?}");
        for p in entries(&cache).keys() {
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
        let (warm, _) = record(&xdg, &input, opts);
        assert_eq!(
            gzip_entry(&cache),
            (path.clone(), ino),
            "{opts:?}: the warm run read the entry (none was made again)"
        );
        let (bypassed, _) = record(&xdg, &input, &[&["--no-cache"][..], opts].concat());
        assert_eq!(gzip_entry(&cache), (path, ino), "--no-cache leaves it");
        let ctx = format!("{opts:?}");
        assert_same(&cold, &uncached, &format!("{ctx}: cold against --no-cache"));
        assert_same(&warm, &uncached, &format!("{ctx}: warm against --no-cache"));
        assert_same(&bypassed, &uncached, &ctx);
        fs::remove_dir_all(&cache).unwrap();
    }
}

#[test]
fn a_damaged_cache_entry_is_ignored_and_made_again() {
    let (_dir, xdg, input) = setup("startcache_damaged");
    let cache = xdg.join("fctrace");
    let (reference, _) = record(&xdg, &input, &["--no-cache"]);
    record(&xdg, &input, &[]);
    let (path, _) = gzip_entry(&cache);
    let good = fs::read(&path).unwrap();
    let (key, payload) = startcache::open(&good).unwrap();
    let mut other_build = key.clone();
    other_build.build_id[0] ^= 0xff;
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        ("a byte flipped", {
            let mut b = good.clone();
            let k = b.len() - 40;
            b[k] ^= 0x01;
            b
        }),
        ("empty", Vec::new()),
        (
            "a whole entry for another build-id",
            startcache::seal(&other_build, payload),
        ),
        (
            "a whole entry whose plans lie outside the module",
            startcache::seal(&key, &shifted_plans(payload)),
        ),
    ];
    for (what, bytes) in damages {
        fs::write(&path, &bytes).unwrap();
        let before = fs::metadata(&path).unwrap().ino();
        let (seen, _) = record(&xdg, &input, &[]);
        assert_same(&seen, &reference, what);
        let (again, ino) = gzip_entry(&cache);
        assert_eq!(again, path);
        assert_ne!(ino, before, "{what}: the entry was made again");
        assert_eq!(
            fs::read(&path).unwrap(),
            good,
            "{what}: made again as before"
        );
    }
}

/// `payload` (an entry's analysis and plans) with every function's patch
/// address moved 1 TiB on: each decodes, none lies in the module.
fn shifted_plans(payload: &[u8]) -> Vec<u8> {
    let mut r = startcache::Reader::new(payload);
    let (_, funcs) = startcache::decode_analysis(&mut r).expect("the analysis");
    let plans_at = payload.len() - r.remaining();
    let mut out = payload[..plans_at].to_vec();
    let n = r.u32().unwrap() as usize;
    assert_eq!(n, funcs.len());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let mut patched = 0;
    for _ in 0..n {
        out.extend_from_slice(&r.u64().unwrap().to_le_bytes());
        let tag = r.u8().unwrap();
        out.push(tag);
        if tag == 0 {
            let why = r.bytes().unwrap();
            out.extend_from_slice(&(why.len() as u32).to_le_bytes());
            out.extend_from_slice(why);
            continue;
        }
        let at = r.u64().unwrap() + (1 << 40);
        out.extend_from_slice(&at.to_le_bytes());
        patched += 1;
        // patch_len, moved_at, moved_len, moved_count, bits, resume,
        // trampoline as they were.
        out.extend_from_slice(r.take(4 + 8 + 4 + 4 + 1 + 9 + 9).unwrap());
        let moved = r.bytes().unwrap();
        out.extend_from_slice(&(moved.len() as u32).to_le_bytes());
        out.extend_from_slice(moved);
    }
    assert!(r.done() && patched > 50, "{patched} plans");
    out
}

#[test]
fn an_unusable_cache_directory_does_not_fail_the_recording() {
    let (dir, _, input) = setup("startcache_unusable");
    let (reference, _) = record(&dir.path.join("xdg"), &input, &["--no-cache"]);
    // A cache home under a regular file: nothing can be created there,
    // not even by root.
    let file = dir.path.join("file");
    fs::write(&file, "").unwrap();
    let (seen, stderr) = record(&file.join("xdg"), &input, &[]);
    assert_same(&seen, &reference, "unusable");
    assert!(
        !stderr.to_lowercase().contains("cache"),
        "the cache's failure is silent: {stderr}"
    );
    let (again, _) = record(&file.join("xdg"), &input, &[]);
    assert_same(&again, &reference, "unusable, again");
}

/// Debian's python3.11 (6,800 functions, plans that move up to 128 bytes
/// of instructions): its warm run reads the entry and patches as a run
/// without the cache (run without address randomisation, its cold run
/// makes exactly the same calls).
#[test]
fn a_large_stripped_program_is_read_from_the_cache() {
    let py = "/usr/bin/python3.11";
    assert!(
        Path::new(py).exists(),
        "{py} is missing: apt-get install python3.11"
    );
    let (dir, xdg, _) = setup("startcache_python");
    let script = dir.path.join("s.py");
    fs::write(
        &script,
        "import json\nprint(json.dumps({'a': [1, 2.5, None]}))\n",
    )
    .unwrap();
    let args = ["-I", &script.to_string_lossy()].map(str::to_string);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cache = xdg.join("fctrace");
    let (uncached, _) = record_program(&xdg, &["--no-cache"], py, &args);
    let (cold, _) = record_program(&xdg, &[], py, &args);
    let entry = entry_of(&cache, py);
    let (warm, _) = record_program(&xdg, &[], py, &args);
    assert_eq!(entry_of(&cache, py), entry, "the warm run read the entry");
    assert!(
        uncached.calls.len() > 1000,
        "{} functions called",
        uncached.calls.len()
    );
    assert_same(&cold, &uncached, "python cold");
    // The warm run maps the entry (1 MB) where the cold one mapped the
    // file (7 MB): python's later mappings, and so the addresses of its
    // objects, differ, and with them a few of its calls (hashes of
    // addresses). The patches are the same (the symbol table), the same
    // functions are called, almost all the same number of times.
    assert_eq!(warm.lines, uncached.lines, "python warm: symbol table");
    assert_eq!(warm.stdout, uncached.stdout);
    assert_eq!(
        warm.calls.keys().collect::<Vec<_>>(),
        uncached.calls.keys().collect::<Vec<_>>(),
        "python warm: the functions called"
    );
    let differ: Vec<_> = warm
        .calls
        .iter()
        .filter(|(k, v)| uncached.calls[*k] != **v)
        .collect();
    assert!(
        differ.len() * 100 <= warm.calls.len(),
        "python warm: {} of {} functions called another number of times: {differ:?}",
        differ.len(),
        warm.calls.len()
    );
}

/// A home that does not exist (`HOME=/nonexistent`, as system users and
/// sandboxes have it) is never made: that recording goes without the
/// cache, its calls as without it.
#[test]
fn a_missing_home_is_never_made() {
    let (dir, _, input) = setup("startcache_no_home");
    let home = dir.path.join("missing").join("home");
    let trace = TraceDir::new("startcache");
    let out = dir.path.join("out.gz");
    let r = run(Command::new(fctrace_bin())
        .args(["record", "-d"])
        .arg(&trace.path)
        .args(["/usr/bin/gzip", "-c"])
        .arg(&input)
        .stdout(fs::File::create(&out).unwrap())
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", &home));
    assert!(r.success(), "{}", r.describe());
    assert!(
        !dir.path.join("missing").exists(),
        "fctrace made {}",
        home.display()
    );
}
