//! Go programs built with cgo (programs/go_cgo: goroutines whose stacks
//! grow and are copied, the garbage collector, C functions that call each
//! other and call back into Go). Go's stack copier and garbage collector
//! read every return address on a goroutine's stack through Go's own
//! tables: with fctrace's stubs there, Go died ("fatal error: unknown
//! pc"), and attached, Go's SIGTRAP handler met the trap fallback's int3.
//! The Go code (runtime.text to runtime.etext, or the pc-line table's
//! range without a symbol table) is left alone, with a message that
//! `fctrace info` lists; its C functions are traced, with exact counts.
//! Launched (with and without -ldflags=-s), attached with `-p` (and -l),
//! and Go in a c-shared library loaded by a C program, with -l: the
//! program goes on to its native output and status (3), detached or not.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The program's rounds in each test.
const ROUNDS: u64 = 3;

/// Calls of each C function per round (from cfuncs.c: c_top calls
/// c_middle, which calls c_leaf twice; c_calls_go calls goCallback (the
/// C wrapper cgo exports) and c_leaf once).
const PER_ROUND: &[(&str, u64)] = &[
    ("c_top", 1),
    ("c_middle", 1),
    ("c_leaf", 3),
    ("c_calls_go", 1),
    ("goCallback", 1),
];

/// Builds programs/go_cgo with Debian's Go (`ldflags` for `go build`).
fn go_program(ldflags: &str) -> PathBuf {
    go_build(
        "go_cgo",
        &["main.go", "cfuncs.c", "go.mod"],
        &["-ldflags", ldflags],
        true,
    )
}

/// Builds the Go package programs/`name` (its `files`) with `go build
/// flags`, cached by the sources' hash; GOCACHE and GOPATH in the cache,
/// no network, with cgo or without (`CGO_ENABLED=0`: a static binary).
/// The result is named `name` (`.so` added for c-shared).
fn go_build(name: &str, files: &[&str], flags: &[&str], cgo: bool) -> PathBuf {
    let src = program_source(name);
    let mut h = Fnv::new().str(if cgo { "cgo" } else { "no cgo" });
    for f in flags {
        h = h.str(f);
    }
    for f in files {
        h = h.str(f).file(&src.join(f));
    }
    let dir = cache_root()
        .join("builds")
        .join(format!("go_cgo-{}", h.hex()));
    let out = dir.join("go_cgo");
    if out.exists() {
        return out;
    }
    let _lock = FileLock::acquire(&format!("build-{name}-{}", h.hex()));
    if out.exists() {
        return out;
    }
    let go = require_tool("go", "golang-go");
    let work = dir.join("src");
    std::fs::create_dir_all(&work).unwrap();
    for f in files.iter().copied() {
        std::fs::copy(src.join(f), work.join(f)).unwrap();
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", unique_suffix()));
    let gocache = cache_root().join("go-cache");
    let r = run_with_timeout(
        Command::new(go)
            .current_dir(&work)
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(".")
            .env("GOCACHE", gocache.join("build"))
            .env("GOPATH", gocache.join("path"))
            .env("GOFLAGS", "")
            .env("GOPROXY", "off")
            .env("CGO_ENABLED", if cgo { "1" } else { "0" }),
        Duration::from_secs(600),
    );
    assert!(r.success(), "go build failed\n{}", r.describe());
    std::fs::rename(&tmp, &out).unwrap();
    out
}
/// The message that says the Go code is not traced.
const GO_NOTE: &str = "its Go code (0x";

/// C functions traced `rounds` times each as the sources say, Go's not.
fn assert_c_side_traced(dir: &Path, rounds: u64, ctx: &str) {
    let rep = report(dir);
    for (f, n) in PER_ROUND {
        assert_eq!(
            rep.calls(f),
            n * rounds,
            "{ctx}: {f}: {:?}",
            rep.calls_by_name()
        );
    }
    let go: Vec<_> = rep
        .functions
        .iter()
        .filter(|f| f.calls > 0 && (f.name.starts_with("main.") || f.name.starts_with("runtime.")))
        .map(|f| &f.name)
        .collect();
    assert!(go.is_empty(), "{ctx}: Go functions traced: {go:?}");
    let info = info_text(dir);
    assert!(
        info.contains("Warnings:") && info.contains(GO_NOTE),
        "{ctx}: fctrace info does not say the Go code is untraced:\n{info}"
    );
}

#[test]
fn a_cgo_program_runs_as_natively_with_its_c_side_traced() {
    for ldflags in ["", "-s"] {
        let exe = go_program(ldflags);
        let ctx = format!("go build -ldflags={ldflags:?}");
        let rounds = ROUNDS.to_string();
        let native = run(Command::new(&exe).arg(&rounds));
        assert_eq!(native.code(), Some(3), "{ctx}: {}", native.describe());
        assert!(native.stdout.starts_with("total "), "{}", native.describe());
        let rec = record_any(&exe, &[&rounds], &[]);
        assert_eq!(
            rec.run.stdout,
            native.stdout,
            "{ctx}: {}",
            rec.run.describe()
        );
        assert_eq!(rec.run.code(), Some(3), "{ctx}: {}", rec.run.describe());
        // fctrace's own lines only.
        let other: Vec<_> = rec
            .run
            .stderr
            .lines()
            .filter(|l| !l.starts_with("fctrace: "))
            .collect();
        assert!(other.is_empty(), "{ctx}: {}", rec.run.describe());
        assert_eq!(
            rec.run.stderr.matches(GO_NOTE).count(),
            1,
            "{ctx}: {}",
            rec.run.describe()
        );
        assert_c_side_traced(&rec.dir.path, ROUNDS, &ctx);
    }
}

#[test]
fn an_attached_cgo_program_runs_on_with_its_c_side_traced() {
    let exe = go_program("");
    for (opts, detach) in [(&[][..], false), (&[][..], true), (&["-l"][..], true)] {
        let ctx = format!("attached {opts:?}, detach {detach}");
        let rounds = ROUNDS + u64::from(detach);
        // The same rounds, natively.
        let mut input = "run\n".repeat(rounds as usize);
        input.push_str("quit\n");
        let (native, native_code) = run_with_input(&mut Command::new(&exe), &input);
        assert_eq!(native_code, Some(3), "{ctx}: {native}");
        let dir = TraceDir::new("go_cgo-attached");
        let (stdout, code, said, fcode) =
            attached(&mut Command::new(&exe), &dir.path, opts, ROUNDS, detach);
        assert_eq!(stdout, native, "{ctx}: {said}");
        assert_eq!(code, Some(3), "{ctx}: {said}");
        // fctrace -p ends with status 0 after detaching, or as the
        // process did (3) when it ended while recorded.
        let ended = if detach { 0 } else { 3 };
        assert_eq!(fcode, Some(ended), "{ctx}: {said}");
        assert_eq!(said.matches(GO_NOTE).count(), 1, "{ctx}: {said}");
        assert_c_side_traced(&dir.path, ROUNDS, &ctx);
    }
}

#[test]
fn go_code_in_a_shared_library_is_left_alone_and_the_rest_traced() {
    for ldflags in ["", "-s"] {
        let ctx = format!("-buildmode=c-shared -ldflags={ldflags:?}");
        let lib = go_build(
            "go_cshared",
            &["lib.go", "go.mod"],
            &["-buildmode=c-shared", "-ldflags", ldflags],
            true,
        );
        let host = c_program_with_lib(
            &format!("go_cshared_host{ldflags}"),
            "go_cshared_host.c",
            &["-O1"],
            &lib,
        );
        let native = run_native(&host, &[]);
        let rec = record_any(&host, &[], &["-l"]);
        assert_eq!(
            rec.run.stdout,
            native.stdout,
            "{ctx}: {}",
            rec.run.describe()
        );
        assert!(rec.run.success(), "{ctx}: {}", rec.run.describe());
        assert_eq!(
            rec.run.stderr.matches(GO_NOTE).count(),
            1,
            "{ctx}: {}",
            rec.run.describe()
        );
        // GoWork is cgo's C wrapper (it enters Go through crosscall2).
        let rep = report(&rec.dir.path);
        for f in ["host_add", "GoWork"] {
            assert_eq!(rep.calls(f), 3, "{ctx}: {f}: {:?}", rep.calls_by_name());
        }
        for f in ["main.deep", "main.GoWork", "runtime.gcStart", "crosscall2"] {
            assert_eq!(rep.calls(f), 0, "{ctx}: {f}: {:?}", rep.calls_by_name());
        }
    }
}

/// A SIGTRAP handler installed before fctrace attaches (Go installs one
/// for every signal) would receive the trap fallback's int3: attached, no
/// function takes the fallback (tiny2 fits no jump: it stays untraced),
/// and the program's output is the native one.
#[test]
fn a_sigtrap_handler_installed_before_attaching_never_sees_an_int3() {
    let exe = c_program("attach_trap.c", "-O1", &["-O1"]);
    let mut input = "run\n".repeat(ROUNDS as usize);
    input.push_str("quit\n");
    let (native, code) = run_with_input(&mut Command::new(&exe), &input);
    assert_eq!(code, Some(0), "{native}");
    assert!(native.ends_with(", traps seen 0\n"), "{native}");
    let dir = TraceDir::new("attach_trap");
    let (stdout, code, said, fcode) =
        attached(&mut Command::new(&exe), &dir.path, &[], ROUNDS, false);
    assert_eq!(stdout, native, "{said}");
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(fcode, Some(0), "{said}");
    let rep = report(&dir.path);
    assert_eq!(
        rep.calls("next_fn"),
        1000 * ROUNDS,
        "{:?}",
        rep.calls_by_name()
    );
    assert_eq!(rep.calls("tiny2"), 0, "{:?}", rep.calls_by_name());
}

/// A pure Go program is statically linked (no program interpreter, so no
/// `LD_PRELOAD`): fctrace refuses it with a clear message and a non-zero
/// status instead of running it untraced as if traced.
#[test]
fn a_pure_go_program_is_refused_with_a_reason() {
    let exe = go_build("go_pure", &["main.go", "go.mod"], &[], false);
    let (native, code) = run_with_input(&mut Command::new(&exe), "");
    assert_eq!((native.as_str(), code), ("pure go\n", Some(4)));
    let dir = TraceDir::new("go_pure");
    let r = fctrace(&[
        std::ffi::OsStr::new("record"),
        std::ffi::OsStr::new("-d"),
        dir.path.as_os_str(),
        exe.as_os_str(),
    ]);
    assert!(!r.success(), "{}", r.describe());
    assert!(r.stderr.contains("statically linked"), "{}", r.describe());
}
