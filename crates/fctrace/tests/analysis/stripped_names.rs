//! A stripped program (`strip --strip-all`) traced, its functions named at
//! read time from its separate debug file, found each way a reader looks:
//! `--debug-dir` (the build-id layout), `/usr/lib/debug/.build-id`, and a
//! debuginfod server on loopback (`DEBUGINFOD_URLS`); each function's calls
//! counted as callgrind counts them on the unstripped build.
//!
//! Needs the agent to instrument the functions of stripped files (issue
//! 26's call-frame discovery): without it the stripped program's own
//! functions are not traced and these tests fail.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unstripped build, the stripped one, its debug file kept apart, its
/// build-id (readelf's).
struct Stripped {
    _tmp: tempfile::TempDir,
    full: PathBuf,
    stripped: PathBuf,
    debug: PathBuf,
    build_id: String,
}

fn stripped_program() -> Stripped {
    let full = c_program(
        "stripped_names.c",
        "-O2-g",
        &["-O2", "-g", "-Wl,--build-id"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let stripped = tmp.path().join("stripped_names");
    let debug = tmp.path().join("kept.debug");
    let ok = |cmd: &mut Command| {
        let r = run(cmd);
        assert!(r.success(), "{}", r.describe());
        r.stdout
    };
    ok(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(&full));
    ok(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    let notes = ok(Command::new("readelf").arg("-n").arg(&stripped));
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id note")
        .to_string();
    Stripped {
        _tmp: tmp,
        full,
        stripped,
        debug,
        build_id,
    }
}

impl Stripped {
    /// `<root>/.build-id/xx/yyyy.debug`.
    fn build_id_path(&self, root: &Path) -> PathBuf {
        root.join(".build-id")
            .join(&self.build_id[..2])
            .join(format!("{}.debug", &self.build_id[2..]))
    }
}

/// The program's own functions (nm on the unstripped build, C runtime
/// left out) and callgrind's count of each on that build.
fn expected(p: &Stripped) -> BTreeMap<String, u64> {
    let cg = callgrind(&p.full, &[]);
    let own = canonical(&p.full);
    let mut want = BTreeMap::new();
    for sym in function_symbols(&p.full) {
        if CRT_FUNCTIONS.contains(&sym.name.as_str()) {
            continue;
        }
        let calls = cg
            .calls
            .iter()
            .filter(|((obj, name), _)| *name == sym.name && canonical(Path::new(obj)) == own)
            .map(|(_, &n)| n)
            .sum();
        want.insert(sym.name, calls);
    }
    for f in ["main", "square", "sum_squares", "fold", "twice_sum"] {
        assert!(want.get(f).is_some_and(|&n| n > 0), "{f} in {want:?}");
    }
    want
}

/// `report` of the trace with `opts` and `env`: calls per raw name of the
/// stripped program's functions.
fn counts(dir: &Path, opts: &[&str], env: &[(&str, &str)]) -> BTreeMap<String, u64> {
    let mut cmd = Command::new(fctrace_bin());
    cmd.args(["report", "--show-runtime", "--format", "json", "-d"])
        .arg(dir)
        .args(opts)
        .envs(env.iter().copied());
    let r = run(&mut cmd);
    assert!(r.success(), "{}", r.describe());
    let report: Report = serde_json::from_str(&r.stdout).unwrap();
    let mut got = BTreeMap::new();
    for f in report.functions {
        if Path::new(&f.module).file_name() == Some(OsStr::new("stripped_names")) {
            *got.entry(f.symbol).or_insert(0) += f.calls;
        }
    }
    got
}

/// Traces the stripped program (its behaviour the native one's, fctrace's
/// own notes apart).
fn traced(p: &Stripped) -> Recorded {
    let native = run(&mut Command::new(&p.stripped));
    let rec = record(&p.stripped, &[], &[]);
    assert_same_behaviour_with(&native, &rec.run, "stripped_names", without_fctrace_notes);
    rec
}

#[track_caller]
fn assert_named_counts(got: &BTreeMap<String, u64>, want: &BTreeMap<String, u64>, how: &str) {
    let got: BTreeMap<&String, u64> = want
        .keys()
        .map(|k| (k, got.get(k).copied().unwrap_or(0)))
        .collect();
    let want: BTreeMap<&String, u64> = want.iter().map(|(k, &v)| (k, v)).collect();
    assert_eq!(got, want, "calls per function named through {how}");
}

#[test]
fn named_from_a_debug_dir() {
    let p = stripped_program();
    let want = expected(&p);
    let rec = traced(&p);
    // Without the debug file: module+offset names only.
    let before = counts(&rec.dir.path, &[], &[("DEBUGINFOD_URLS", "")]);
    assert!(
        !before.is_empty() && before.keys().all(|k| k.starts_with("stripped_names+0x")),
        "{before:?}"
    );
    let dbg = tempfile::tempdir().unwrap();
    let at = p.build_id_path(dbg.path());
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(&p.debug, &at).unwrap();
    let dir_arg = dbg.path().to_str().unwrap();
    let got = counts(
        &rec.dir.path,
        &["--debug-dir", dir_arg],
        &[("DEBUGINFOD_URLS", "")],
    );
    assert_named_counts(&got, &want, "--debug-dir");
    // replay shows them too, and -F selects by them.
    let r = fctrace(&[
        "replay",
        "-d",
        rec.dir.path.to_str().unwrap(),
        "--debug-dir",
        dir_arg,
        "-F",
        "twice_sum",
    ]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stdout.contains("twice_sum() {") && r.stdout.contains("square();"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("fold"), "{}", r.stdout);
}

/// Removes a file when dropped, and its directory if that is then empty
/// (a `.build-id/xx` the test created).
struct Remove(PathBuf);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
fn named_from_usr_lib_debug() {
    let p = stripped_program();
    let want = expected(&p);
    let rec = traced(&p);
    let at = p.build_id_path(Path::new("/usr/lib/debug"));
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let _guard = Remove(at.clone());
    std::fs::copy(&p.debug, &at).unwrap();
    let got = counts(&rec.dir.path, &[], &[("DEBUGINFOD_URLS", "")]);
    assert_named_counts(&got, &want, "/usr/lib/debug");
}

#[test]
fn named_through_debuginfod() {
    let p = stripped_program();
    let want = expected(&p);
    let rec = traced(&p);
    let served = tempfile::tempdir().unwrap();
    std::fs::copy(&p.debug, served.path().join("stripped_names.debug")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = Debuginfod::serve(served.path(), &work.path().join("db.sqlite"), &p.build_id);
    let cache = work.path().join("cache");
    let env = [
        ("DEBUGINFOD_URLS", server.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
    ];
    let got = counts(&rec.dir.path, &[], &env);
    assert_named_counts(&got, &want, "debuginfod");
    assert!(cache.join(&p.build_id).join("debuginfo").is_file());
}

/// What the readers do with the agent's contract for stripped files,
/// checked without it: the unstripped build traced, then its symbol table
/// rewritten as the agent writes a stripped file's (its functions named
/// `file+0xADDR`, the module's build-id given); `report --debug-dir` names
/// them back from the debug file (any name in the directory, found by its
/// build-id) with callgrind's counts, and `info` says where the names came
/// from.
#[test]
fn named_in_a_table_written_as_for_a_stripped_program() {
    let p = stripped_program();
    let want = expected(&p);
    let native = run(&mut Command::new(&p.full));
    let rec = record(&p.full, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "stripped_names");
    let sym = rec.dir.path.join("sessions/0.sym");
    let text = std::fs::read_to_string(&sym).unwrap();
    let file = p.full.file_name().unwrap().to_str().unwrap();
    let mut rewritten = String::new();
    for line in text.lines() {
        let mut f: Vec<String> = line.split('\t').map(str::to_string).collect();
        if f[0] == "module" && f[1] == "0" {
            f.extend([p.build_id.clone(), "-".into(), "-".into()]);
        }
        if f[0] == "func" && f[2] == "0" && f[5] == "fn" {
            f[7] = format!("{file}+{}", f[3]);
        }
        rewritten.push_str(&f.join("\t"));
        rewritten.push('\n');
    }
    std::fs::write(&sym, rewritten).unwrap();
    let module_counts = |opts: &[&str]| {
        let mut cmd = Command::new(fctrace_bin());
        cmd.args(["report", "--show-runtime", "--format", "json", "-d"])
            .arg(&rec.dir.path)
            .args(opts)
            .env("DEBUGINFOD_URLS", "");
        let r = run(&mut cmd);
        assert!(r.success(), "{}", r.describe());
        let report: Report = serde_json::from_str(&r.stdout).unwrap();
        let mut got = BTreeMap::new();
        for f in report.functions {
            if canonical(Path::new(&f.module)) == canonical(&p.full) {
                *got.entry(f.symbol).or_insert(0) += f.calls;
            }
        }
        got
    };
    let before = module_counts(&[]);
    assert!(
        before.keys().all(|k| k.starts_with(&format!("{file}+0x"))),
        "{before:?}"
    );
    // A debuginfod server that cannot be reached: one warning, the trace
    // still read, the names unchanged.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{closed}");
    let r = run(Command::new(fctrace_bin())
        .args(["report", "-d"])
        .arg(&rec.dir.path)
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_CACHE_PATH", rec.dir.path.join("no-cache")));
    assert!(r.success(), "{}", r.describe());
    let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains(&url)).collect();
    assert_eq!(warned.len(), 1, "{}", r.stderr);
    assert!(
        warned[0].starts_with("fctrace: warning: debuginfod server")
            && warned[0].contains("refused"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains(&format!("{file}+0x")), "{}", r.stdout);
    let dbg = tempfile::tempdir().unwrap();
    std::fs::copy(&p.debug, dbg.path().join("any-name")).unwrap();
    let dir_arg = dbg.path().to_str().unwrap();
    assert_named_counts(
        &module_counts(&["--debug-dir", dir_arg]),
        &want,
        "--debug-dir",
    );
    let r = fctrace(&[
        "info",
        "-d",
        rec.dir.path.to_str().unwrap(),
        "--debug-dir",
        dir_arg,
    ]);
    assert!(r.success(), "{}", r.describe());
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains(p.full.to_str().unwrap()) && l.contains("named from"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        line.contains(&format!("{}/any-name (--debug-dir)", dir_arg)),
        "{line}"
    );
}
