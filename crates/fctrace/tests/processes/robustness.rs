//! fctrace's own failures never harm the traced program, and nothing is
//! lost silently (issue 10): the recorder killed mid-run, a full disk,
//! a program that writes over the shared memory, a seccomp filter that
//! forbids sleeping, PID namespaces, more threads than the task table.
//!
//! One program, tests/programs/robust.c: THREADS threads each call
//! `worker` once and `work` N times, so the counts are known from the
//! arguments.

use fctrace_testkit::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn robust() -> PathBuf {
    c_program("robust.c", "-O2", &["-O2", "-pthread"])
}

/// The program behaves as natively; fctrace's own lines on stderr (what
/// was not recorded, a stripped program) aside.
#[track_caller]
fn same_behaviour(native: &Run, traced: &Run, ctx: &str) {
    let mut t = traced.clone();
    t.stderr = without_fctrace_notes(&traced.stderr);
    assert_same_behaviour(native, &t, ctx);
}

/// The last line a mode of robust.c prints, natively.
fn native_result(exe: &Path, mode: &str, threads: u32, n: u64) -> String {
    let r = run_native(exe, &[mode, &threads.to_string(), &n.to_string()]);
    r.stdout.lines().last().unwrap_or_default().to_string()
}

#[test]
fn recorder_killed_mid_run_program_runs_on() {
    // This test makes its process a child subreaper (below): it runs in a
    // process of its own, or the other tests of this binary would get
    // their orphans as zombies.
    if !in_own_process(module_path!(), "recorder_killed_mid_run_program_runs_on") {
        return;
    }
    let exe = robust();
    let (threads, n) = (4u32, 5_000_000u64);
    // The same computation natively ("calls" is "pause" without the pause).
    let want = native_result(&exe, "calls", threads, n).replacen("calls:", "pause:", 1);

    // The program is re-parented to this process when fctrace dies, so
    // that its exit status can be collected.
    // SAFETY: prctl with integer arguments.
    let subreaper = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(subreaper, 0);
    let dir = TraceDir::new("killed");
    let mut fct = Command::new(fctrace_bin())
        .arg("record")
        .arg("-d")
        .arg(&dir.path)
        .arg(&exe)
        .args(["pause", &threads.to_string(), &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fctrace");
    let mut stdin = fct.stdin.take().unwrap();
    let mut out = BufReader::new(fct.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line)
        .expect("read the program's first line");
    let pid: i32 = line
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));

    // SIGKILL: fctrace cannot tell anyone.
    fct.kill().expect("kill fctrace");
    let st = fct.wait().expect("reap fctrace");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL)
    );
    let start = Instant::now();
    stdin.write_all(b"go\n").expect("let the program go on");
    drop(stdin);

    // The program makes 2 * 20 M calls with nobody draining its buffers.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut rest);
        let mut status = 0;
        // SAFETY: waitpid writes the status integer only.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        let _ = tx.send((rest, r, status));
    });
    let Ok((rest, r, status)) = rx.recv_timeout(Duration::from_secs(120)) else {
        // SAFETY: kill(2) of the program this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the program still runs 120 s after fctrace was killed: it waits for it");
    };
    let took = start.elapsed();
    assert_eq!(r, pid, "the program was re-parented to the test");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the program did not exit 0 (status {status:#x}); output:\n{rest}"
    );
    assert_eq!(rest.trim_end(), want, "the program's output");
    eprintln!("the program ended {took:?} after fctrace was killed");
}

/// A tmpfs of `size`, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let path = std::env::temp_dir().join(format!("fctrace-small-{}", unique_suffix()));
        std::fs::create_dir_all(&path).ok()?;
        let r = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        match r {
            Ok(o) if o.status.success() => Some(SmallDisk { path }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs (not root?): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                let _ = std::fs::remove_dir(&path);
                None
            }
            Err(e) => panic!("cannot run mount ({e}): apt-get install mount"),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[test]
fn full_disk_stops_recording_cleanly_with_exact_counts() {
    let exe = robust();
    let args = ["calls", "4", "3000000"];
    // What the whole recording holds.
    let full = record(&exe, &args, &[]);
    let all_events = info_json(&full.dir.path)["events"].as_u64().unwrap();
    assert_eq!(info_json(&full.dir.path)["lost_events"].as_u64(), Some(0));

    let Some(disk) = SmallDisk::mount("1m") else {
        return;
    };
    let dir = disk.path.join("tr");
    let r = run_with_timeout(
        Command::new(fctrace_bin())
            .arg("record")
            .arg("-d")
            .arg(&dir)
            .arg(&exe)
            .args(args),
        Duration::from_secs(180),
    );
    assert_no_panic(&r);
    let native = run_native(&exe, &args);
    assert!(
        r.success(),
        "fctrace ends as the program did\n{}",
        r.describe()
    );
    assert_eq!(r.stdout, native.stdout);
    // "fctrace: disk full after N events; the program ran on untraced"
    let stored: u64 = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("fctrace: disk full after "))
        .and_then(|l| l.split(" events; the program ran on untraced").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no disk-full message\n{}", r.describe()));
    assert!(
        stored > 0 && stored < all_events,
        "{stored} of {all_events}"
    );

    // The partial trace is readable, and says what it holds and lost.
    let info = info_json(&dir);
    assert_eq!(info["events"].as_u64(), Some(stored));
    let lost = info["lost_events"].as_u64().unwrap();
    assert_eq!(
        stored + lost,
        all_events,
        "stored + lost = the whole recording's events"
    );
    let text = info_text(&dir);
    assert!(text.contains("disk full after"), "{text}");
    let rep = report(&dir);
    assert_eq!(rep.lost_events, lost);
    assert_eq!(rep.events, stored);
}

#[test]
fn program_writing_over_the_shared_memory_ends_normally() {
    let exe = robust();
    let args = ["scribble", "4", "2000000"];
    let native = run_native(&exe, &args);
    let dir = TraceDir::new("scribble");
    let r = run_with_timeout(
        Command::new(fctrace_bin())
            .arg("record")
            .arg("-d")
            .arg(&dir.path)
            .arg(&exe)
            .args(args),
        Duration::from_secs(90),
    );
    assert_no_panic(&r);
    assert!(r.success(), "{}", r.describe());
    assert_eq!(r.stdout, native.stdout);
    assert!(
        r.stderr
            .contains("fctrace: the shared memory was damaged (the program wrote into it?)"),
        "{}",
        r.describe()
    );
    // What was recorded before is readable.
    let text = info_text(&dir.path);
    assert!(text.contains("the shared memory was damaged"), "{text}");
}

#[test]
fn seccomp_program_forbidding_sleep_survives_a_slow_recorder() {
    let exe = robust();
    let (threads, n) = (8u32, 4_000_000u64);
    let args = ["seccomp", &threads.to_string(), &n.to_string()];
    let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
    let native = run_native(&exe, &args);
    // Few buffers: the threads wait for the recorder again and again.
    let rec = record_env(&exe, &args, &[("FCTRACE_BUFFERS", "16")]);
    same_behaviour(&native, &rec.run, "seccomp");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    assert_eq!(rep.calls("work"), u64::from(threads) * n);
    assert_eq!(rep.calls("worker"), u64::from(threads));
}

#[test]
fn pid_namespace_counts_are_exact() {
    let exe = robust();
    let (threads, n) = (4u32, 20_000u64);
    let prog = exe.to_string_lossy().into_owned();
    let args = [
        "--pid",
        "--fork",
        prog.as_str(),
        "slow",
        &threads.to_string(),
        &n.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
    let native = run(Command::new("unshare").args(&args));
    if !native.success() {
        eprintln!(
            "SKIPPED: unshare --pid does not work here: {}",
            native.stderr.trim()
        );
        return;
    }
    let unshare = PathBuf::from("/usr/bin/unshare");
    let rec = record_env(&unshare, &args, &[]);
    same_behaviour(&native, &rec.run, "unshare");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    // Threads that keep their buffer longer than a reclaim period: the
    // recorder must not take them for dead by their namespaced tids.
    assert_eq!(rep.calls("work"), u64::from(threads) * n);
    assert_eq!(rep.calls("worker"), u64::from(threads));
}

#[test]
fn threads_beyond_the_task_table_are_counted_exactly() {
    let exe = robust();
    let (threads, n) = (12u64, 10_000u64);
    let slots = 4u64;
    let args = ["serial", &threads.to_string(), &n.to_string()];
    let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
    let native = run_native(&exe, &args);
    // Few buffers too: those of the threads without a slot must come
    // back when the threads end, or the program would wait for them.
    let rec = record_env(
        &exe,
        &args,
        &[("FCTRACE_TASK_SLOTS", "4"), ("FCTRACE_BUFFERS", "8")],
    );
    same_behaviour(&native, &rec.run, "task table");
    // Slot 0 is the main thread; threads run one after the other, so the
    // first three get the other slots.
    let traced = slots - 1;
    let rep = report(&rec.dir.path);
    assert_eq!(rep.calls("work"), traced * n);
    assert_eq!(rep.calls("worker"), traced);
    // Each untraced thread: worker and n calls of work, entry and exit.
    let lost = (threads - traced) * (2 * n + 2);
    assert_eq!(rep.lost_events, lost);
    assert_eq!(info_json(&rec.dir.path)["lost_events"].as_u64(), Some(lost));
    assert!(
        rec.run.stderr.contains(&format!(
            "fctrace: {lost} events of threads beyond the task table"
        )),
        "{}",
        rec.run.describe()
    );
    let replay = fctrace(&[
        std::ffi::OsStr::new("replay"),
        std::ffi::OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert!(
        replay
            .stderr
            .contains(&format!("{lost} events were lost: parts of the tree are missing ({lost} events of threads beyond the task table")),
        "{}",
        replay.describe()
    );
}
