//! uftrace's `--list-event` and `-E`: the SDT probes of sdt.c and its
//! library sdt_lib.c (app:start, app:step, applib:work, as their sources
//! write them) and of the C library, listed as uftrace prints them; the
//! expected lines come from `readelf -n` of each module `ldd` names; `-E`
//! records them, counted as the kernel's uprobes count them.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn sdt_program() -> PathBuf {
    assert!(
        Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
            || Path::new("/usr/include/sys/sdt.h").exists(),
        "these tests need <sys/sdt.h>: apt-get install systemtap-sdt-dev"
    );
    let lib = c_shared_lib("libsdt_lib.so", "sdt_lib.c", &["-O1"]);
    c_program_with_lib("sdt", "sdt.c", &["-O1"], &lib)
}

/// The probes of one file as `readelf -n` lists them, in uftrace's line
/// shape: `[SDT event] provider:name arguments`.
fn readelf_probes(file: &Path) -> Vec<String> {
    let r = run(Command::new("readelf").arg("-n").arg("-W").arg(file));
    assert!(
        r.success(),
        "readelf -n {}\n{}",
        file.display(),
        r.describe()
    );
    probes_of_readelf(&r.stdout)
}

/// Every probe of readelf's text: `Provider:`, `Name:`, `Location:`, and
/// `Arguments:` (which an older readelf leaves out without arguments).
fn probes_of_readelf(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let (mut provider, mut name) = (String::new(), String::new());
    let mut open = false;
    for line in text.lines().map(str::trim) {
        // The note's header and its provider share a line.
        if let Some(p) = line.split_once("Provider: ").map(|(_, p)| p) {
            if open {
                out.push(format!("[SDT event] {provider}:{name} "));
            }
            provider = p.to_string();
            open = false;
        } else if let Some(n) = line.strip_prefix("Name: ") {
            name = n.to_string();
            open = true;
        } else if let Some(a) = line.strip_prefix("Arguments:") {
            out.push(format!("[SDT event] {provider}:{name} {}", a.trim_start()));
            open = false;
        }
    }
    if open {
        out.push(format!("[SDT event] {provider}:{name} "));
    }
    out
}

/// The files `ldd` says the program loads, the program first.
fn ldd_modules(exe: &Path) -> Vec<PathBuf> {
    let r = run(Command::new("ldd").arg(exe));
    assert!(r.success(), "ldd\n{}", r.describe());
    let mut out = vec![exe.to_path_buf()];
    for line in r.stdout.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            out.push(PathBuf::from(p));
        }
    }
    out
}

#[test]
fn list_event_shows_the_probes_of_the_program_and_its_libraries() {
    let exe = sdt_program();
    let r = fctrace(&["record".as_ref(), "--list-event".as_ref(), exe.as_os_str()]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        !r.stdout.contains("done"),
        "the program must not run: {}",
        r.describe()
    );
    let lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();

    // The program's own, first and in the order of its notes.
    let own = readelf_probes(&exe);
    let names: Vec<&str> = own.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    assert_eq!(names, ["app:start", "app:step", "app:gated"], "{own:?}");
    assert_eq!(lines[..3], own[..], "{}", r.stdout);
    assert_eq!(own[0], "[SDT event] app:start ");

    // Every module's, as readelf lists them, each once.
    let mut expected: Vec<String> = ldd_modules(&exe)
        .iter()
        .flat_map(|m| readelf_probes(m))
        .collect();
    let mut got = lines.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "{}", r.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("[SDT event] applib:work ")),
        "{}",
        r.stdout
    );

    // Live mode takes it too.
    let live = fctrace(&["--list-event".as_ref(), exe.as_os_str()]);
    assert!(live.success(), "{}", live.describe());
    assert_eq!(live.stdout, r.stdout);
}

/// How many times each SDT probe `provider:name` of `files` fires in a
/// native run of `exe`, counted by the kernel's uprobes (`perf probe` of
/// the probe `%sdt_PROVIDER:NAME`, `perf stat`): the ground truth for
/// `-E`. The probes are removed afterwards.
fn uprobe_counts(exe: &Path, files: &[&Path], probes: &[&str]) -> BTreeMap<String, u64> {
    require_tool("perf", "linux-perf");
    // The kernel's probe events are one namespace: two tests adding and
    // removing `sdt_app:gated` at once failed each other (perf probe
    // exits 254 on an event that exists).
    static PROBES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = PROBES.lock().unwrap_or_else(|e| e.into_inner());
    let events: Vec<String> = probes
        .iter()
        .map(|p| {
            let (provider, name) = p.split_once(':').unwrap();
            format!("sdt_{provider}:{name}")
        })
        .collect();
    let remove = || {
        for e in &events {
            let _ = run(Command::new("perf").args(["probe", "-q", "-d", e]));
        }
    };
    remove();
    for f in files {
        // A file of an earlier run with the same build-id (the same
        // source built again), since deleted, may be in perf's cache
        // under its old path: its probes would point there (ENOENT).
        let _ = run(Command::new("perf")
            .arg("buildid-cache")
            .arg("--remove")
            .arg(f));
        let r = run(Command::new("perf")
            .arg("buildid-cache")
            .arg("--add")
            .arg(f));
        assert!(r.success(), "{}", r.describe());
    }
    for (e, f) in events.iter().zip(files.iter().cycle()) {
        let _ = f;
        let r = run(Command::new("perf").args(["probe", "-a", &format!("%{e}")]));
        assert!(r.success(), "perf probe %{e}\n{}", r.describe());
    }
    let mut cmd = Command::new("perf");
    cmd.args(["stat", "-x", ","]);
    for e in &events {
        cmd.args(["-e", e]);
    }
    let r = run(cmd.arg("--").arg(exe));
    remove();
    assert!(r.success(), "{}", r.describe());
    let mut counts = BTreeMap::new();
    for (p, e) in probes.iter().zip(&events) {
        let n = r
            .stderr
            .lines()
            .find(|l| l.split(',').nth(2) == Some(e.as_str()))
            .and_then(|l| l.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no count of {e}\n{}", r.describe()));
        counts.insert(p.to_string(), n);
    }
    counts
}

/// `/* provider:name */` lines of a replay, per probe, with the function
/// each is directly under.
fn event_lines(text: &str) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<String> = Vec::new();
    for l in text.lines().filter_map(|l| split_replay_line(l).ok()) {
        stack.truncate(l.depth);
        if let Some(f) = l.text.strip_suffix("() {") {
            stack.push(f.to_string());
        } else if let Some(e) = l
            .text
            .strip_prefix("/* ")
            .and_then(|t| t.strip_suffix(" */"))
            .filter(|t| t.contains(':') && !t.contains(' '))
        {
            let under = stack.last().cloned().unwrap_or_default();
            *out.entry((e.to_string(), under)).or_insert(0) += 1;
        }
    }
    out
}

/// `-E`: sdt.c's probes, in the program (app:start, app:step, app:gated)
/// and in its
/// library (applib:work, not traced without -l: the event is all there
/// is of it), each as `/* provider:name */` under the function that ran
/// it, as many times as the kernel's uprobes count them in a native run;
/// glob patterns (`--match glob`) choose them as uftrace's do; the
/// program's output and exit status are its own.
#[test]
fn probes_are_recorded_as_events() {
    let exe = sdt_program();
    let lib = ldd_modules(&exe)
        .into_iter()
        .find(|m| m.to_string_lossy().contains("libsdt_lib"))
        .expect("sdt's library");
    let want = uprobe_counts(
        &exe,
        &[exe.as_path(), exe.as_path(), exe.as_path(), lib.as_path()],
        &["app:start", "app:step", "app:gated", "applib:work"],
    );
    let native = run_native(&exe, &[]);
    let rec = record(
        &exe,
        &[],
        &["--match", "glob", "-E", "app:*", "-E", "applib:work"],
    );
    assert_same_behaviour(&native, &rec.run, "sdt -E");
    let text = replay_text(&rec.dir.path);
    let got = event_lines(&text);
    let expected = BTreeMap::from([
        (
            ("app:start".to_string(), "main".to_string()),
            want["app:start"],
        ),
        (
            ("app:step".to_string(), "main".to_string()),
            want["app:step"],
        ),
        (
            ("app:gated".to_string(), "main".to_string()),
            want["app:gated"],
        ),
        (
            ("applib:work".to_string(), "lib_work".to_string()),
            want["applib:work"],
        ),
    ]);
    assert_eq!(got, expected, "{text}");
    // uftrace's report leaves events out: the functions alone, lib_work
    // once per applib:work (the probe is its body).
    let rows: BTreeMap<String, u64> = report(&rec.dir.path)
        .functions
        .into_iter()
        .map(|f| (f.name, f.calls))
        .collect();
    assert!(rows.keys().all(|n| !n.contains(':')), "{rows:?}");
    assert_eq!(rows.get("lib_work"), Some(&want["applib:work"]), "{rows:?}");
    // Only the probes asked for.
    let rec = record(&exe, &[], &["-E", "app:step"]);
    let got = event_lines(&replay_text(&rec.dir.path));
    assert_eq!(
        got.keys().map(|k| k.0.as_str()).collect::<Vec<_>>(),
        ["app:step"]
    );
}

/// A probe with a semaphore (app:gated: its argument, `expensive(i)`, is
/// computed only while the semaphore is raised): `-E` raises it, as the
/// kernel's uprobes do for perf, so the probe fires as often as perf
/// counts it and `expensive` runs under it; without `-E` for it, neither.
#[test]
fn a_probes_semaphore_is_raised() {
    let exe = sdt_program();
    let want = uprobe_counts(&exe, &[exe.as_path()], &["app:gated"]);
    assert_eq!(
        want["app:gated"], 3,
        "sdt.c's loop of 3, the semaphore raised by perf"
    );
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &["-E", "app:gated"]);
    assert_same_behaviour(&native, &rec.run, "sdt -E app:gated");
    let text = replay_text(&rec.dir.path);
    let got = event_lines(&text);
    assert_eq!(
        got,
        BTreeMap::from([(
            ("app:gated".to_string(), "main".to_string()),
            want["app:gated"]
        )]),
        "{text}"
    );
    let calls = |t: &str| t.lines().filter(|l| l.contains("expensive();")).count() as u64;
    assert_eq!(calls(&text), want["app:gated"], "{text}");
    let plain = record(&exe, &[], &["-E", "app:step"]);
    let text = replay_text(&plain.dir.path);
    assert_eq!(calls(&text), 0, "{text}");
}
