//! Programs built with sanitizers run under fctrace as they do natively,
//! and their reports name the same frames. ASan refuses to start unless its
//! runtime is the first object after the program (the agent goes after
//! it in LD_PRELOAD, also across exec, and the entry leaves the program's
//! environment); sanitizers collect stacks with their own unwinders, which
//! would otherwise read fctrace's stub addresses from traced frames'
//! return slots (`#1 0x... (<unknown module>)`, callers missing).
//! Addresses, pids and thread ids differ from run to run: they are
//! normalised before comparing.

use fctrace_testkit::*;
use std::path::PathBuf;

/// Fails with the install line when the compiler's sanitizer runtimes are
/// missing (they come with gcc's libgcc-12-dev on Debian).
fn need_runtimes() {
    for (lib, pkg) in [
        ("libasan.so.8", "libasan8"),
        ("libtsan.so.2", "libtsan2"),
        ("libubsan.so.1", "libubsan1"),
    ] {
        let path = format!("/usr/lib/x86_64-linux-gnu/{lib}");
        assert!(
            std::path::Path::new(&path).exists(),
            "{path} is missing: apt-get install {pkg}"
        );
    }
}

fn san_program(file: &str, suffix: &str, flags: &[&str]) -> PathBuf {
    need_runtimes();
    c_program(file, suffix, flags)
}

/// Exit status, stdout and the normalised report as natively.
#[track_caller]
fn assert_same_report(native: &Run, traced: &Run, ctx: &str) {
    assert_same_behaviour_with(native, traced, ctx, normalise);
}

#[test]
fn asan_reports_name_the_same_frames() {
    for (suffix, flags) in [
        ("-asan-O0", &["-g", "-O0", "-fsanitize=address"][..]),
        (
            "-asan-O1",
            &["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address"][..],
        ),
    ] {
        let exe = san_program("san_uaf.c", suffix, flags);
        let native = run_env(&exe, &[], &[]);
        assert_eq!(native.code(), Some(1), "{}", native.describe());
        assert!(native.stderr.contains(" in use3 "), "{}", native.describe());
        let rec = record_env(&exe, &[], &[]);
        assert_same_report(&native, &rec.run, suffix);
        let rep = report(&rec.dir.path);
        for f in ["main", "make", "drop", "use1", "use2", "use3"] {
            assert_eq!(rep.calls(f), 1, "{suffix}: {f}: {:?}", rep.calls_by_name());
        }
        // With -l (libc traced too) the heap's layout differs (libraries
        // allocate differently), and with it the shadow bytes shown: the
        // frames are the same.
        let rec = record_any(&exe, &[], &["-l"]);
        assert_eq!(rec.run.code(), Some(1), "{}", rec.run.describe());
        assert_eq!(
            frames(&native.stderr),
            frames(&rec.run.stderr),
            "{suffix} -l\n{}",
            rec.run.describe()
        );
    }
}

#[test]
fn asan_preloaded_by_the_user_stays_theirs() {
    // Built without ASan: the user's LD_PRELOAD=libasan.so.8 brings ASan's
    // malloc and free, which catch the double free.
    let exe = san_program(
        "san_double_free.c",
        "-plain",
        &["-g", "-O0", "-fno-omit-frame-pointer"],
    );
    let env = [("LD_PRELOAD", "libasan.so.8")];
    let native = run_env(&exe, &[], &env);
    assert_eq!(
        native.stdout,
        "LD_PRELOAD=libasan.so.8\n",
        "{}",
        native.describe()
    );
    assert!(
        native.stderr.contains("attempting double-free") && native.stderr.contains(" in release3 "),
        "{}",
        native.describe()
    );
    let rec = record_env(&exe, &[], &env);
    assert_same_report(&native, &rec.run, "LD_PRELOAD=libasan.so.8");
    let rep = report(&rec.dir.path);
    for f in ["release1", "release2", "release3"] {
        assert_eq!(rep.calls(f), 2, "{f}: {:?}", rep.calls_by_name());
    }
}

#[test]
fn tsan_reports_name_the_same_frames() {
    let exe = san_program(
        "san_race.c",
        "-tsan",
        &["-g", "-O0", "-fsanitize=thread", "-pthread"],
    );
    let native = run_env(&exe, &[], &[]);
    assert_eq!(native.code(), Some(66), "{}", native.describe());
    assert!(
        native.stderr.contains(" bump3 ") && native.stderr.contains(" peek3 "),
        "{}",
        native.describe()
    );
    let rec = record_env(&exe, &[], &[]);
    assert_same_report(&native, &rec.run, "tsan");
    let rep = report(&rec.dir.path);
    for f in [
        "bump1", "bump2", "bump3", "peek1", "peek2", "peek3", "worker",
    ] {
        assert_eq!(rep.calls(f), 1, "{f}: {:?}", rep.calls_by_name());
    }
}

#[test]
fn ubsan_stack_traces_name_the_same_frames() {
    let exe = san_program(
        "san_ubsan.c",
        "-ubsan",
        &["-g", "-O0", "-fsanitize=undefined"],
    );
    let env = [("UBSAN_OPTIONS", "print_stacktrace=1")];
    let native = run_env(&exe, &[], &env);
    assert!(
        native.stderr.contains("runtime error") && native.stderr.contains(" in add3 "),
        "{}",
        native.describe()
    );
    let rec = record_env(&exe, &[], &env);
    assert_same_report(&native, &rec.run, "ubsan");
}

#[test]
fn asan_programs_executed_by_an_asan_program() {
    let parent = san_program("san_exec.c", "-asan", &["-g", "-O0", "-fsanitize=address"]);
    let plain = san_program("san_env.c", "", &["-O0"]);
    let args = [plain.to_str().unwrap()];
    let native = run_env(&parent, &args, &[]);
    for line in [
        "parent: PATH=",
        "asan child: PATH=",
        "plain: PATH=",
        "asan child: exit 1\n",
        "plain child: exit 0\n",
    ] {
        assert!(
            native.stdout.contains(line),
            "{line}: {}",
            native.describe()
        );
    }
    assert!(
        native.stderr.contains(" in read3 "),
        "{}",
        native.describe()
    );
    let rec = record_env(&parent, &args, &[]);
    // The environment each program prints, how each ended, the child's
    // report, whole: its shadow-memory dump shows a 24-byte block, glibc's
    // dlerror state (allocated when ASan's start-up looks up a symbol that
    // is missing), live as natively (the agent's own dlsym calls keep it).
    assert_same_report(&native, &rec.run, "exec");
    let rep = report(&rec.dir.path);
    for f in ["read1", "read2", "read3", "show"] {
        let want = if f == "show" { 2 } else { 1 };
        assert_eq!(rep.calls(f), want, "{f}: {:?}", rep.calls_by_name());
    }
}
