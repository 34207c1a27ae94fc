//! `record --ring`: the flight recorder. tests/programs/ring.c makes many
//! calls and then crashes, is killed, or waits for its input; the
//! snapshots must hold the most recent calls (of every thread), the
//! crash where it happened, and stay smaller than the ring, and the
//! program must end as it does natively. One event, one snapshot: a
//! Ctrl-C that kills the program, or a crash with no event since the last
//! snapshot, writes no second one.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ring_program() -> PathBuf {
    Build::new(
        Lang::C,
        "ring",
        &[program_source("ring.c")],
        &[
            "-O0",
            "-fno-inline",
            "-fno-optimize-sibling-calls",
            "-pthread",
        ],
    )
    .build()
}

/// The snapshot description of a trace's info.json.
fn snapshot_of(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("info.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["snapshot"].clone()
}

/// Bytes of the task files of a trace.
fn task_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// `fctrace replay -d DIR [args]`: its stdout.
fn replay_args(dir: &Path, args: &[&str]) -> String {
    let mut all: Vec<&OsStr> = vec![OsStr::new("replay"), OsStr::new("-d"), dir.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    let r = fctrace(&all);
    assert!(r.success(), "replay failed\n{}", r.describe());
    r.stdout
}

/// The function-column texts of a tree's lines (after `| `), keeping
/// their indentation (two spaces per level).
fn texts(tree: &str) -> Vec<String> {
    tree.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once("| ").map(|(_, t)| t.to_string()))
        .collect()
}

const RING: u64 = 4 << 20;

/// The program ends as it does natively: the same status, output and
/// errors (fctrace's own lines, which say where the snapshot went, apart).
#[track_caller]
fn same_ending(native: &Run, traced: &Run) {
    let own: String = traced
        .stderr
        .lines()
        .filter(|l| !l.starts_with("fctrace: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        (
            native.code(),
            native.signal(),
            &native.stdout,
            &native.stderr
        ),
        (traced.code(), traced.signal(), &traced.stdout, &own),
        "{}",
        traced.describe()
    );
    assert!(
        traced.stderr.contains("fctrace: snapshot 1 "),
        "{}",
        traced.describe()
    );
}

#[test]
fn the_last_calls_before_a_crash_after_tens_of_millions() {
    let exe = ring_program();
    // 10 million iterations: 30 million calls, a few hundred MB of events
    // for a whole trace.
    let n = "10000000";
    let native = run(Command::new(&exe).args(["crash", n]));
    assert!(
        native.signal() == Some(libc::SIGSEGV),
        "{}",
        native.describe()
    );
    let rec = record_any(&exe, &["crash", n], &["--ring", "4M"]);
    same_ending(&native, &rec.run);
    let dir = &rec.dir.path;
    let snap = snapshot_of(dir);
    assert_eq!(snap["number"], 1);
    assert_eq!(snap["reason"], "SIGSEGV");
    assert_eq!(snap["ring_size"].as_u64(), Some(RING));
    let bytes = task_bytes(dir);
    assert!(bytes < RING, "{bytes} bytes of events for a ring of {RING}");
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("info.json")).unwrap()).unwrap();
    let kept = info["events"].as_u64().unwrap();
    let before = snap["events_before"].as_u64().unwrap();
    assert!(before > 0 && kept > 0, "kept {kept}, before {before}");
    // Every event of the run is in the snapshot or counted before it:
    // N x (work, 2 leaf: entry and exit), main, run, parse, deref (their
    // entries), atol, strcmp; and a few of the snapshot's own (the history
    // chain, the signal's).
    let whole = 10_000_000 * 6 + 4 + 4;
    assert!(
        before + kept >= whole && before + kept <= whole + 32,
        "{before} + {kept} events for {whole}"
    );
    let tree = replay_text(dir);
    let lines = texts(&tree);
    // The history begins inside main > run (entries not in history), in
    // the loop: a call of work or leaf at its real depth.
    let first = &lines[0];
    // (Where the kept history begins: before a call of work, inside one,
    // or inside a leaf.)
    let ok = [
        "    work() {",
        "      leaf();",
        "    } /* work */ (entry not in history)",
        "      } /* leaf */ (entry not in history)",
    ];
    assert!(
        ok.contains(&first.as_str()),
        "first line {first:?}\n{}",
        clip(&tree, 3000)
    );
    let tail: Vec<&str> = lines[lines.len() - 7..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "    parse() {",
            "      deref() {",
            "        /* signal SIGSEGV */",
            "      } /* deref */ (not returned)",
            "    } /* parse */ (not returned)",
            "  } /* run */ (not returned)",
            "} /* main */ (not returned)",
        ],
        "{}",
        clip(&tree, 3000)
    );
    // The last iteration: work and its two leaves, complete.
    let before_parse: Vec<&str> = lines[lines.len() - 11..lines.len() - 7]
        .iter()
        .map(|l| {
            l.split_once(['(', '}'])
                .map_or(l.as_str(), |(a, _)| a)
                .trim_end()
        })
        .collect();
    assert_eq!(before_parse, ["    work", "      leaf", "      leaf", ""]);
    // `--last 2`: the crashing thread's last two calls.
    let last = texts(&replay_args(dir, &["--last", "2"]));
    assert_eq!(
        last[0],
        "    parse() {",
        "{:?}",
        &last[..last.len().min(10)]
    );
    // `dump`: the history's calls open first (`open`, at the history's
    // start), every call at its real depth, main and run not returned.
    let r = fctrace(&["dump", "-d", dir.to_str().unwrap()]);
    assert!(r.success(), "{}", r.describe());
    let rows: Vec<(String, usize, String)> = r
        .stdout
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[2].to_string(), f[3].parse().unwrap(), f[4].to_string())
        })
        .collect();
    let row = |e: &str, d: usize, f: &str| (e.to_string(), d, f.to_string());
    assert_eq!(rows[..2], [row("open", 0, "main"), row("open", 1, "run")]);
    assert_eq!(
        rows[rows.len() - 2..],
        [row("noreturn", 1, "run"), row("noreturn", 0, "main")]
    );
    for (event, depth, func) in &rows {
        let want = match func.as_str() {
            "main" => 0,
            "run" => 1,
            "work" | "parse" => 2,
            "leaf" | "deref" => 3,
            _ => continue,
        };
        assert_eq!(*depth, want, "{event} {func}");
    }
    // The flame graph's stacks are under main > run too; main and run
    // themselves are not counted calls (as in the report: their entries
    // are not in the history).
    let r = fctrace(&["dump", "-d", dir.to_str().unwrap(), "--flame-graph"]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stdout.lines().all(|l| l.starts_with("main;run;")),
        "{}",
        clip(&r.stdout, 2000)
    );
    let rep = report(dir);
    assert_eq!((rep.calls("main"), rep.calls("run")), (0, 0));
}

#[test]
fn a_crash_in_one_thread_keeps_every_threads_last_calls() {
    let exe = ring_program();
    let per_thread = 2_000_000;
    let native = run(Command::new(&exe).args(["threads", &per_thread.to_string()]));
    assert_eq!(
        native.signal(),
        Some(libc::SIGSEGV),
        "{}",
        native.describe()
    );
    let rec = record_any(
        &exe,
        &["threads", &per_thread.to_string()],
        &["--ring", "1M"],
    );
    same_ending(&native, &rec.run);
    let dir = &rec.dir.path;
    assert_eq!(snapshot_of(dir)["reason"], "SIGSEGV");
    assert!(task_bytes(dir) < 1 << 20);
    let tree = replay_text(dir);
    // Each thread's own calls, up to the barrier all three reached: per
    // thread, the lines of its task.
    let tids = thread_ids(&tree);
    assert_eq!(tids.len(), 4, "{}", clip(&tree, 3000));
    let of = |tid: u32| texts(&tree_of_task(&tree, tid));
    let with = |f: &str| -> Vec<u32> {
        tids.iter()
            .copied()
            .filter(|&t| {
                of(t)
                    .iter()
                    .any(|l| l.trim_start().starts_with(&format!("{f}()")))
            })
            .collect()
    };
    for f in ["tick", "tock", "tack"] {
        let ts = with(f);
        assert_eq!(ts.len(), 1, "{f} in {ts:?}");
        let own = of(ts[0]);
        let barrier = own
            .iter()
            .position(|l| l.trim_start().starts_with("pthread_barrier_wait"))
            .unwrap_or_else(|| {
                panic!(
                    "{f}'s thread never reached the barrier: {:?}",
                    &own[own.len().saturating_sub(10)..]
                )
            });
        assert!(
            own[barrier - 1].trim_start().starts_with(&format!("{f}()")),
            "{f}'s thread: {:?}",
            &own[barrier.saturating_sub(3)..]
        );
    }
    // The crash, in the tack thread only.
    assert_eq!(with("crash_parse"), with("tack"));
    assert_eq!(
        tree.matches("/* signal SIGSEGV */").count(),
        1,
        "{}",
        clip(&tree, 3000)
    );
    // main's few calls, long before the others' last ones, are kept.
    let main = of(tids[0]);
    assert_eq!(
        main.iter().filter(|l| l.contains("pthread_create")).count(),
        3,
        "{main:?}"
    );
}

/// The thread ids of a tree, in the order of their first line.
fn thread_ids(tree: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for l in tree.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, rest)) = l.split_once('[') else {
            continue;
        };
        let Some((tid, _)) = rest.split_once(']') else {
            continue;
        };
        if let Ok(t) = tid.trim().parse::<u32>() {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// The lines of task `tid` in a whole tree.
fn tree_of_task(tree: &str, tid: u32) -> String {
    let mark = format!("[{tid:>5}] |");
    tree.lines()
        .filter(|l| l.contains(&mark))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn a_program_killed_by_sigkill_leaves_its_last_calls() {
    let exe = ring_program();
    let dir = TraceDir::new("ring-kill");
    let mut cmd = Command::new(fctrace_bin());
    cmd.args(["record", "--ring", "2M", "-d"])
        .arg(&dir.path)
        .arg(&exe)
        .args(["block", "300000"]);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its pid, once its calls are made; then it waits in read (system
    // call 0 in /proc/PID/syscall).
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    let start = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| s.starts_with("0 "))
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never blocked in read"
        );
        // Polling the program's state; the result does not depend on it.
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill(2) of the traced program.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(snapshot_of(&dir.path)["reason"], "SIGKILL");
    let lines = texts(&replay_text(&dir.path));
    let tail: Vec<&str> = lines[lines.len() - 4..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail[1..],
        [
            "  read() {",
            "  } /* read */ (not returned)",
            "} /* main */ (not returned)"
        ],
        "{tail:?}"
    );
    assert!(tail[0].contains("fflush()"), "{tail:?}");
    // The whole run fits the ring.
    assert_eq!(lines.iter().filter(|l| *l == "  work() {").count(), 300_000);
    assert_eq!(
        lines.iter().filter(|l| *l == "    leaf();").count(),
        600_000
    );
}

/// Waits until the trace in `dir` is snapshot `n` (or fails after a minute).
fn wait_for_snapshot(dir: &Path, n: u64) {
    let start = Instant::now();
    loop {
        let got = std::fs::read_to_string(dir.join("info.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["snapshot"]["number"].as_u64());
        if got == Some(n) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no snapshot {n} in {} (now {got:?})",
            dir.display()
        );
        // Polling a file another process writes; the result does not
        // depend on the interval.
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn snapshots_by_trigger_by_request_and_at_exit() {
    let exe = ring_program();
    let dir = TraceDir::new("ring-stages");
    let mut cmd = Command::new(fctrace_bin());
    cmd.args([
        "record",
        "--ring",
        "2M",
        "--snapshot-at-exit",
        "-T",
        "marker@snapshot",
        "-d",
    ])
    .arg(&dir.path)
    .arg(&exe)
    .args(["stages", "1000"]);
    let mut spawned = spawn_captured(&mut cmd, Stdio::piped());
    // 1: the trigger, while the program waits for its first line.
    wait_for_snapshot(&dir.path, 1);
    let first = texts(&replay_text(&dir.path));
    let n = first.len();
    assert_eq!(first[n - 4], "  marker();", "{:?}", &first[n - 6..]);
    assert_eq!(first[n - 3], "  fgets() {");
    assert_eq!(first.iter().filter(|l| *l == "  work() {").count(), 1000);
    // 2: asked with `fctrace snapshot` once the program waits again,
    // after a line: its three calls of `after`, still in the thread's own
    // buffer (not handed over yet).
    let stdin = spawned.stdin.as_mut().unwrap();
    stdin.write_all(b"one\n").unwrap();
    stdin.flush().unwrap();
    let mut tries = 0;
    loop {
        let r = fctrace(&[
            OsStr::new("snapshot"),
            OsStr::new("-d"),
            dir.path.as_os_str(),
        ]);
        assert!(r.success(), "{}", r.describe());
        let lines = texts(&replay_text(&dir.path));
        // The program may not have read the line yet: then again.
        if lines.iter().filter(|l| l.as_str() == "  after();").count() == 3 || tries == 50 {
            let n = lines.len();
            assert_eq!(
                lines[n - 6..],
                [
                    "  after();",
                    "  after();",
                    "  after();",
                    "  fgets() {",
                    "  } /* fgets */ (not returned)",
                    "} /* main */ (not returned)",
                ]
            );
            break;
        }
        tries += 1;
    }
    let second = snapshot_of(&dir.path)["number"].as_u64().unwrap();
    assert!(second >= 2);
    assert_eq!(snapshot_of(&dir.path)["reason"], "SIGUSR2");
    // 3: at the exit; the earlier ones stay, numbered.
    let run = spawned.finish();
    assert!(run.success(), "{}", run.describe());
    let last = snapshot_of(&dir.path);
    assert_eq!(last["number"].as_u64(), Some(second + 1));
    assert_eq!(last["reason"], "exit");
    assert_eq!(
        snapshot_of(&dir.path.join("snapshot.1"))["reason"],
        "trigger"
    );
    assert_eq!(
        snapshot_of(&dir.path.join(format!("snapshot.{second}")))["reason"],
        "SIGUSR2"
    );
    let earlier = texts(&replay_text(&dir.path.join("snapshot.1")));
    assert_eq!(earlier, first);
    let end = texts(&replay_text(&dir.path));
    assert_eq!(end.iter().filter(|l| *l == "  after();").count(), 3);
    assert_eq!(end.last().map(String::as_str), Some("} /* main */"));
    assert!(!dir.path.join("recorder.pid").exists());
}

#[test]
fn mistakes_are_explained() {
    let exe = ring_program();
    // A snapshot trigger without a ring.
    let dir = TraceDir::new("ring-mistake");
    let r = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-T"),
        OsStr::new("marker@snapshot"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
        exe.as_os_str(),
        OsStr::new("crash"),
        OsStr::new("1"),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("--ring"), "{}", r.describe());
    // A ring too small, a size that is not one.
    for size in ["1K", "lots", "4X"] {
        let r = fctrace(&["record", "--ring", size, "true"]);
        assert_eq!(r.code(), Some(2), "{}", r.describe());
        assert!(r.stderr.contains(size), "{}", r.describe());
    }
    // No flight recorder there.
    let r = fctrace(&[
        OsStr::new("snapshot"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("no flight recorder"), "{}", r.describe());
    // A normal exit without --snapshot-at-exit writes nothing, and says so.
    let rec = record_any(&exe, &["stages", "10"], &["--ring", "1M"]);
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert!(
        rec.run.stderr.contains("no snapshot"),
        "{}",
        rec.run.describe()
    );
    assert!(!rec.dir.path.join("info.json").exists());
    let r = fctrace(&[
        OsStr::new("replay"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("wrote no snapshot"), "{}", r.describe());
    // Recording there again moves it aside, as any trace.
    let again = fctrace(&[
        OsStr::new("record"),
        OsStr::new("--ring"),
        OsStr::new("1M"),
        OsStr::new("--snapshot-at-exit"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        exe.as_os_str(),
        OsStr::new("stages"),
        OsStr::new("10"),
    ]);
    assert!(again.success(), "{}", again.describe());
    assert_eq!(snapshot_of(&rec.dir.path)["reason"], "exit");
}

/// `ring wait 1000`, natively or recorded (`fctrace record OPTS -d DIR`),
/// in a process group of its own, once it said "ready" and blocks in read.
struct Waiting {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
    err: std::thread::JoinHandle<String>,
    cmdline: String,
    /// The program's pid (fctrace's child when recorded).
    program: i32,
}

/// Waits until `/proc/PID/stat` says process `pid` is in `state` (a
/// condition wait on another process, with a time limit).
#[track_caller]
fn wait_state(pid: i32, state: char) {
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let now = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if now == Some(state) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "process {pid} never in state {state} (now {now:?})"
        );
        std::thread::yield_now();
    }
}

impl Waiting {
    fn start(exe: &Path, record: Option<(&Path, &[&str])>) -> Waiting {
        use std::os::unix::process::CommandExt;
        let mut cmd = match record {
            None => Command::new(exe),
            Some((dir, opts)) => {
                let mut c = Command::new(fctrace_bin());
                c.arg("record").args(opts).arg("-d").arg(dir).arg(exe);
                c
            }
        };
        cmd.args(["wait", "1000"])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let cmdline = format!("{cmd:?}");
        let mut child = cmd.spawn().unwrap();
        let mut err = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{cmdline}");
        let top = child.id() as i32;
        let program = match record {
            None => top,
            // fctrace's only child.
            Some(_) => std::fs::read_dir(format!("/proc/{top}/task"))
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("children")).ok())
                .flat_map(|c| {
                    c.split_whitespace()
                        .map(|p| p.parse::<i32>().unwrap())
                        .collect::<Vec<_>>()
                })
                .next()
                .expect("fctrace has no child"),
        };
        // Blocked in read (system call 0).
        let start = Instant::now();
        while !std::fs::read_to_string(format!("/proc/{program}/syscall"))
            .is_ok_and(|s| s.starts_with("0 "))
        {
            assert!(start.elapsed() < Duration::from_secs(60), "never in read");
            std::thread::yield_now();
        }
        Waiting {
            stdin: child.stdin.take(),
            child,
            out,
            err,
            cmdline,
            program,
        }
    }

    /// Sends `sig` to the command (fctrace, or the program run natively),
    /// or with `group` to its whole process group, as a terminal does.
    fn signal(&self, sig: i32, group: bool) {
        let pid = self.child.id() as i32;
        let target = if group { -pid } else { pid };
        // SAFETY: kill(2) of the test's own child or its process group.
        let sent = unsafe { libc::kill(target, sig) };
        assert_eq!(sent, 0);
    }

    fn finish(mut self) -> Run {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let mut stdout = "ready\n".to_string();
        std::io::Read::read_to_string(&mut self.out, &mut stdout).unwrap();
        Run {
            cmdline: self.cmdline,
            status,
            stdout,
            stderr: self.err.join().unwrap(),
        }
    }
}

/// The trace's info.json.
fn info_of(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("info.json")).unwrap()).unwrap()
}

#[test]
fn ctrl_c_is_one_snapshot() {
    // Ctrl-C: SIGINT to the process group, fctrace and the program; the
    // program dies of it. fctrace's SIGINT and the program's death are one
    // event: one snapshot, of the program's last calls up to its death.
    let exe = ring_program();
    let go = |record: Option<(&Path, &[&str])>| {
        let w = Waiting::start(&exe, record);
        w.signal(libc::SIGINT, true);
        w.finish()
    };
    let native = go(None);
    assert_eq!(native.signal(), Some(libc::SIGINT), "{}", native.describe());
    let dir = TraceDir::new("ring-ctrl-c");
    let traced = go(Some((&dir.path, &["--ring", "2M"])));
    same_ending(&native, &traced);
    let info = info_of(&dir.path);
    assert_eq!(info["snapshot"]["number"], 1, "{}", traced.describe());
    assert_eq!(info["snapshot"]["reason"], "SIGINT");
    assert_eq!(info["exit"]["signal"], libc::SIGINT);
    assert!(
        !dir.path.join("snapshot.1").exists(),
        "{}",
        traced.describe()
    );
    assert!(
        !traced.stderr.contains("snapshot 2"),
        "{}",
        traced.describe()
    );
    let lines = texts(&replay_text(&dir.path));
    assert_eq!(
        lines[lines.len() - 3..],
        [
            "  read() {",
            "  } /* read */ (not returned)",
            "} /* main */ (not returned)"
        ]
    );
    assert_eq!(lines.iter().filter(|l| *l == "  work() {").count(), 1000);
}

#[test]
fn a_crash_right_after_a_snapshot_trigger_is_in_that_snapshot() {
    // `-T deref@snapshot`, and deref crashes: fctrace (stopped meanwhile)
    // sees the trigger's request and the program's death together. The
    // crash's snapshot would hold the same events as the trigger's: it is
    // not written; snapshot 1 holds the crash and says how the program
    // ended.
    let exe = ring_program();
    let native = {
        let mut w = Waiting::start(&exe, None);
        w.stdin.as_mut().unwrap().write_all(b"x").unwrap();
        w.finish()
    };
    assert_eq!(
        native.signal(),
        Some(libc::SIGSEGV),
        "{}",
        native.describe()
    );
    let dir = TraceDir::new("ring-trigger-crash");
    let mut w = Waiting::start(
        &exe,
        Some((&dir.path, &["--ring", "2M", "-T", "deref@snapshot"])),
    );
    let fctrace_pid = w.child.id() as i32;
    w.signal(libc::SIGSTOP, false);
    wait_state(fctrace_pid, 'T');
    w.stdin.as_mut().unwrap().write_all(b"x").unwrap();
    w.stdin.as_mut().unwrap().flush().unwrap();
    wait_state(w.program, 'Z');
    w.signal(libc::SIGCONT, false);
    let traced = w.finish();
    same_ending(&native, &traced);
    let info = info_of(&dir.path);
    assert_eq!(info["snapshot"]["number"], 1, "{}", traced.describe());
    assert_eq!(info["snapshot"]["reason"], "trigger");
    assert_eq!(info["exit"]["signal"], libc::SIGSEGV);
    assert!(
        !dir.path.join("snapshot.1").exists(),
        "{}",
        traced.describe()
    );
    assert!(
        traced.stderr.contains(
            "killed by SIGSEGV with no event since snapshot 1 (trigger): \
             no new snapshot, the end is in snapshot 1"
        ),
        "{}",
        traced.describe()
    );
    let tree = replay_text(&dir.path);
    assert_eq!(tree.matches("/* signal SIGSEGV */").count(), 1, "{tree}");
    let lines = texts(&tree);
    assert!(
        lines.iter().any(|l| l.trim_start().starts_with("deref(")),
        "{lines:?}"
    );
}
