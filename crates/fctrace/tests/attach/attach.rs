//! `fctrace record -p PID`: attaching to a running process (attach.c: two
//! compute threads calling a tiny leaf, a reader thread blocked in read(2)
//! on a pipe, main waiting on stdin). The program's output and exit status
//! are those of a native run driven the same way; every thread's calls
//! made while attached are recorded (main's `step`, exactly as many as it
//! made; each compute thread's `tick`, at least as many as main waited
//! for); the blocked read completes with the whole message (no EINTR).
//! A C++ program throws through traced frames after fctrace attached (the
//! unwinder's entry points, bound before, are pointed at the agent's); so
//! does a Rust one with threads (panics caught); SQLite runs in a loop; a
//! process forked while attached is traced as a task of its own.
//! Detaching (Ctrl-C on fctrace): the process runs on, with the code of
//! its files again (compared through /proc/PID/mem) and every thread's
//! frames intact (threads were inside traced calls: a return address left
//! pointing into the unmapped generated code would crash it); a hundred
//! attach and detach cycles leave its maps, descriptors and memory flat.
//! And the errors: no such process, a statically linked one, one already
//! traced by another tracer, one fctrace's agent is already in.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

fn attach_program() -> PathBuf {
    c_program("attach.c", "-O2", &["-O2", "-pthread"])
}

/// The rounds the tests drive: each makes main call `step` 1000 times.
const ROUNDS: usize = 3;
const STEPS: u64 = 1000;
/// Calls of `tick` each compute thread makes per round, at least.
const TICKS: u64 = 1000;

/// Drives a program through `commands` (each makes the next round's
/// line), then "quit"; with `attach`, `fctrace record -p` is attached once
/// the program is ready, and with `detach` it detaches (Ctrl-C) before the
/// program is told to quit, else the program ends while traced. Returns the
/// program's output and status, and fctrace's run.
fn drive_with(
    exe: &Path,
    attach: Option<&Path>,
    commands: &[&str],
    detach: bool,
) -> (String, std::process::ExitStatus, Option<Run>) {
    drive_opts(exe, attach, &[], commands, detach, &[])
}

/// As [`drive_with`], with `opts` added to fctrace's command line, and
/// `after` sent once fctrace detached (with `detach`), each making the
/// next round's line too.
fn drive_opts(
    exe: &Path,
    attach: Option<&Path>,
    opts: &[&str],
    commands: &[&str],
    detach: bool,
    after: &[&str],
) -> (String, std::process::ExitStatus, Option<Run>) {
    let mut prog = Driven::start(&mut Command::new(exe));
    prog.wait_for("ready");
    // Every thread that waits on a pipe is in read(2) (main on stdin, and
    // attach.c's reader): the calls each is in are known.
    wait_in_read(prog.child.id(), if exe == attach_program() { 2 } else { 1 });
    let tracer = attach.map(|dir| {
        let pid = prog.child.id().to_string();
        let mut t = Driven::start(
            Command::new(fctrace_bin())
                .args(["record", "-d", dir.to_str().unwrap(), "-p", &pid])
                .args(opts),
        );
        // fctrace says so on stderr once the process runs traced.
        let err = read_lines(t.child.stderr.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut said = Vec::new();
        while !said.iter().any(|l: &String| l.contains("attached")) {
            match err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) => said.push(l),
                Err(_) => {
                    let _ = t.child.kill();
                    panic!("fctrace did not attach: {said:?}");
                }
            }
        }
        (t, err, said)
    });
    let run_rounds = |prog: &mut Driven, commands: &[&str]| {
        for command in commands {
            let before = prog.seen.len();
            prog.send(command);
            // The reader's line of this round, before the next one.
            let round = format!(
                "round {}",
                prog.seen.iter().filter(|l| l.contains("round")).count() + 1
            );
            prog.wait_for(&round);
            assert!(prog.seen.len() > before);
        }
    };
    run_rounds(&mut prog, commands);
    // With `detach`: Ctrl-C on fctrace before the end, which detaches;
    // the process then holds its files' code.
    let pid = prog.child.id();
    let tracer = tracer.map(|(t, err, mut said)| {
        if !detach {
            return Err((t, err, said));
        }
        Command::new("kill")
            .args(["-INT", &t.child.id().to_string()])
            .status()
            .unwrap();
        let (stdout, st) = t.finish();
        said.extend(err.iter());
        assert!(
            said.iter()
                .any(|l| l.contains(&format!("detached from process {pid}"))),
            "{said:?}"
        );
        // The process must still be running: if it is not, say how it
        // ended (its state and exit code while it is a zombie).
        if std::fs::File::open(format!("/proc/{pid}/mem")).is_err() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let code = stat.rsplit(' ').next().unwrap_or("").trim().to_string();
            panic!(
                "{}: the process ended while fctrace detached: /proc/{pid}/stat {stat} \
                 (exit code field {code})\nfctrace said: {said:?}",
                exe.display()
            );
        }
        assert_code_is_the_files(pid, &format!("{}: after detaching", exe.display()));
        Ok(Run {
            cmdline: "fctrace record -p".into(),
            status: st,
            stdout,
            stderr: said.join("\n"),
        })
    });
    run_rounds(&mut prog, after);
    prog.send("quit");
    let (out, status) = prog.finish();
    let run = tracer.map(|r| {
        r.unwrap_or_else(|(t, err, mut said)| {
            let (stdout, st) = t.finish();
            said.extend(err.iter());
            Run {
                cmdline: "fctrace record -p".into(),
                status: st,
                stdout,
                stderr: said.join("\n"),
            }
        })
    });
    (out, status, run)
}

/// Waits until at least `n` threads of process `pid` are blocked in
/// read(2) (/proc/PID/task/TID/syscall names the system call a blocked
/// thread is in).
fn wait_in_read(pid: u32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reading = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?;
                std::fs::read_to_string(t.path().join("syscall")).ok()
            })
            .filter(|s| s.split_whitespace().next() == Some("0"))
            .count();
        if reading >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid}: {reading} threads in read(2), not {n}"
        );
        std::thread::yield_now();
    }
}

/// The tree's lines of each task (by thread id), without the duration
/// and tid columns: what follows `| `, indentation included.
fn tree_lines(text: &str) -> std::collections::BTreeMap<String, Vec<&str>> {
    let mut m: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (Some(a), Some(b), Some(bar)) = (l.find('['), l.find(']'), l.find("| ")) else {
            continue;
        };
        m.entry(l[a + 1..b].trim().to_string())
            .or_default()
            .push(&l[bar + 2..]);
    }
    m
}

/// Drives `exe` natively, then with fctrace attached (`commands`; with
/// `detach`, fctrace detaches before the end): the program's output
/// (which has `expect`) and exit status (3) are the native run's, and
/// fctrace ends with status 0 after detaching, or as the process did (3)
/// when it ended while recorded. The trace.
fn attached_as_natively(
    exe: &Path,
    label: &str,
    commands: &[&str],
    detach: bool,
    expect: &str,
) -> TraceDir {
    let (native_out, native_status, _) = drive_with(exe, None, commands, false);
    assert!(native_out.contains(expect), "{native_out}");
    let dir = TraceDir::new(label);
    let (out, status, run) = drive_with(exe, Some(&dir.path), commands, detach);
    let run = run.unwrap();
    assert_no_panic(&run);
    let ended = if detach { 0 } else { 3 };
    assert_eq!(run.code(), Some(ended), "{}", run.describe());
    assert_eq!(out, native_out);
    assert_eq!(status.code(), Some(3));
    assert_eq!(native_status.code(), Some(3));
    dir
}

#[test]
fn attached_process_runs_as_natively_and_every_thread_is_traced() {
    let exe = attach_program();
    // The process ends while traced. Same output (no EINTR in the
    // reader), same exit status.
    let dir = attached_as_natively(
        &exe,
        "attach",
        &["go"; ROUNDS],
        false,
        "reader: 7 bytes: round 3",
    );

    let rep = report(&dir.path);
    let calls = |name: &str| calls_named(&rep, name);
    let ctx = format!("trace {}", dir.path.display());
    // Every call main made after fctrace attached.
    assert_eq!(calls("step"), ROUNDS as u64 * STEPS, "{ctx}");
    assert_eq!(calls("got"), ROUNDS as u64, "{ctx}");
    assert_eq!(rep.lost_events, 0, "{ctx}");
    // The four threads were there before fctrace: each is a task of
    // origin "attach", and each compute thread's ticks were recorded.
    let info = info_text(&dir.path);
    assert_eq!(info.matches(": attach, pid").count(), 4, "{ctx}\n{info}");
    let text = replay_text(&dir.path);
    let per_tid = |f: &str| calls_per_tid(&text, &format!(" {f}()"));
    // Each compute thread made at least TICKS calls per round while main
    // waited for them.
    let ticks = per_tid("tick");
    assert_eq!(ticks.len(), 2, "{ctx}: {ticks:?}");
    assert!(
        ticks.values().all(|&n| n >= ROUNDS as u64 * TICKS),
        "{ctx}: {ticks:?}"
    );
    assert_eq!(per_tid("got").len(), 1, "{ctx}");

    // The calls each thread was in when fctrace attached open its tree,
    // outermost first, marked as entered before the trace began; their
    // returns come at their depths, `(entry not recorded)` (no duration),
    // and the calls made in them nest under them.
    let ctx = format!(
        "{ctx}\n{}",
        text.lines().take(50).collect::<Vec<_>>().join("\n")
    );
    let tasks = tree_lines(&text);
    let unrecorded =
        |depth: usize, f: &str| format!("{}}} /* {f} */ (entry not recorded)", "  ".repeat(depth));
    let before = |depth: usize, f: &str| {
        format!(
            "{}{f}() {{ /* entered before the trace began */",
            "  ".repeat(depth)
        )
    };
    let main_tid = tasks
        .iter()
        .find(|(_, l)| l.iter().any(|l| l.contains("step()")))
        .map(|(t, _)| t.clone())
        .expect("main's task");
    let main = &tasks[&main_tid];
    // main > read_command > fgets (through the PLT: its frame is libc's),
    // as attach.c's main waits for its next command.
    assert_eq!(
        main[..5],
        [
            before(0, "main"),
            before(1, "read_command"),
            before(2, "fgets"),
            unrecorded(2, "fgets"),
            unrecorded(1, "read_command")
        ],
        "{ctx}"
    );
    assert_eq!(main.last().copied(), Some(&*unrecorded(0, "main")), "{ctx}");
    assert!(
        main.iter()
            .filter(|l| l.contains("step"))
            .all(|l| *l == "  step();"),
        "{ctx}"
    );
    // The reader: reader > read.
    let reader = tasks
        .values()
        .find(|l| l.iter().any(|l| l.contains("got(")))
        .expect("the reader's task");
    assert_eq!(
        reader[..3],
        [
            before(0, "reader"),
            before(1, "read"),
            unrecorded(1, "read")
        ],
        "{ctx}"
    );
    assert_eq!(
        reader.last().copied(),
        Some(&*unrecorded(0, "reader")),
        "{ctx}"
    );
    // Each compute thread: compute (and maybe tick) open; ticks inside.
    for tid in ticks.keys() {
        let lines = &tasks[tid];
        let (last, rest) = lines.split_last().unwrap();
        assert_eq!(*last, unrecorded(0, "compute"), "{ctx}");
        let compute = before(0, "compute");
        let rest = rest.strip_prefix(&[&*compute][..]).expect(&ctx);
        let (tick, tick_end) = (before(1, "tick"), unrecorded(1, "tick"));
        let rest = rest.strip_prefix(&[&*tick, &*tick_end][..]).unwrap_or(rest);
        assert!(rest.iter().all(|l| *l == "  tick();"), "{ctx}");
    }

    // replay -F: the calls open when fctrace attached that the filter
    // shows open the tree as well. Everything main's thread did after
    // the attach was inside main (it returned last): the same lines;
    // the other threads are outside main: no lines.
    let under_main = fctrace_on("replay", &dir.path, &["-F", "main"]);
    let filtered = tree_lines(&under_main);
    assert_eq!(
        filtered.keys().collect::<Vec<_>>(),
        [&main_tid],
        "{under_main}"
    );
    assert_eq!(filtered[&main_tid], *main, "{under_main}");
    // -F read_command: the read_command open then (not main, around it)
    // opens main's tree, with fgets in it.
    let under_read = fctrace_on("replay", &dir.path, &["-F", "read_command"]);
    let filtered = tree_lines(&under_read);
    assert_eq!(
        filtered[&main_tid][..4],
        [
            before(0, "read_command"),
            before(1, "fgets"),
            unrecorded(1, "fgets"),
            unrecorded(0, "read_command")
        ],
        "{under_read}"
    );
    // The other calls of read_command, recorded, follow.
    assert!(
        filtered[&main_tid][4..]
            .iter()
            .all(|l| !l.contains("entered before") && !l.contains("entry not recorded")),
        "{under_read}"
    );
}

#[test]
fn attach_errors_are_clear() {
    // No such process: one that has ended and been reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id().to_string();
    gone.wait().unwrap();
    let dir = TraceDir::new("attach-none");
    let r = fctrace(&["record", "-d", dir.path.to_str().unwrap(), "-p", &pid]);
    assert_no_panic(&r);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!("no such process: {pid}")),
        "{}",
        r.describe()
    );
    assert!(!dir.path.exists(), "a trace directory was left behind");

    // A program and -p at once.
    let r = fctrace(&["record", "-p", "1", "true"]);
    assert_eq!(r.code(), Some(2), "{}", r.describe());

    // Statically linked: nothing to load the agent with.
    let stat = c_program("attach.c", "-static", &["-O2", "-pthread", "-static"]);
    let mut prog = Driven::start(&mut Command::new(&stat));
    prog.wait_for("ready");
    let r = fctrace(&[
        "record",
        "-d",
        dir.path.to_str().unwrap(),
        "-p",
        &prog.child.id().to_string(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("statically linked"), "{}", r.describe());
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 0 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));

    // Traced by another tracer (strace), then by fctrace's agent already.
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id().to_string();
    let mut strace = Command::new("strace")
        .args(["-o", "/dev/null", "-p", &pid])
        .stderr(Stdio::null())
        .spawn()
        .expect("strace is needed (./scripts/test installs it)");
    let status_file = format!("/proc/{pid}/status");
    let traced = || {
        std::fs::read_to_string(&status_file)
            .unwrap()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !traced() {
        assert!(Instant::now() < deadline, "strace did not attach");
        // Polling for strace's attach; the assertion does not depend on it.
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = fctrace(&["record", "-d", dir.path.to_str().unwrap(), "-p", &pid]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("already traced by process"),
        "{}",
        r.describe()
    );
    let _ = strace.kill();
    let _ = strace.wait();
    while traced() {
        // Polling for strace's detach.
        std::thread::sleep(Duration::from_millis(5));
    }
    // Attached by a first fctrace: a second one is refused, clearly.
    let first = TraceDir::new("attach-first");
    let (t, _err) = start_attached(pid.parse().unwrap(), &first.path, &[]);
    let r = fctrace(&["record", "-d", dir.path.to_str().unwrap(), "-p", &pid]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("traced by fctrace already"),
        "{}",
        r.describe()
    );
    prog.send("go");
    prog.wait_for("round 1");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
    let (_, st) = t.finish();
    assert_eq!(st.code(), Some(3), "the process ended while recorded");
    assert_eq!(
        report(&first.path)
            .functions
            .iter()
            .filter(|f| f.name == "step")
            .map(|f| f.calls)
            .sum::<u64>(),
        STEPS
    );
}

#[test]
fn exceptions_thrown_after_attaching_are_caught_as_natively() {
    let exe = cxx_program("attach_throw.cpp", "-O2", &["-O2"]);
    let dir = attached_as_natively(
        &exe,
        "attach-throw",
        &["go"; ROUNDS],
        true,
        "round 3: caught boom 3",
    );
    let text = replay_text(&dir.path);
    let ctx = format!("trace {}\n{text}", dir.path.display());
    assert_eq!(
        text.matches("} /* thrower(int) */ (unwound)").count(),
        ROUNDS,
        "{ctx}"
    );
    assert_eq!(
        text.matches("} /* middle(int) */ (unwound)").count(),
        ROUNDS,
        "{ctx}"
    );
}

/// A C program that loaded a C++ library (and libstdc++ with it) with
/// dlopen(RTLD_LOCAL) before fctrace attached; each round throws and
/// catches inside the library (dlthrow_lib.cpp): the real
/// `__cxa_begin_catch` is found in the library's own scope.
#[test]
fn exceptions_in_a_dlopened_cxx_library_after_attaching() {
    let exe = dlthrow_host(Lang::Cxx, "dlthrow_lib.cpp", false);
    // Round r catches r + 1 exceptions of its own, from the source.
    let dir = attached_as_natively(
        &exe,
        "attach-dlthrow",
        &["go"; ROUNDS],
        false,
        "round 3: caught 103",
    );
    let rep = report(&dir.path);
    assert_eq!(
        calls_named(&rep, "one_round"),
        ROUNDS as u64,
        "trace {}",
        dir.path.display()
    );
}

/// dlthrow_host.c built to load the library built from `lib_source`
/// (C++ or C) at its start, or (`late`) at its first round, after fctrace
/// attached.
fn dlthrow_host(lang: Lang, lib_source: &str, late: bool) -> PathBuf {
    let stem = lib_source.split('.').next().unwrap();
    let lib = Build::new(
        lang,
        &format!("lib{}-O2.so", stem.trim_end_matches("_lib")),
        &[program_source(lib_source)],
        &["-O2", "-shared", "-fPIC"],
    )
    .build();
    let define = format!("-DDLTHROW_LIB=\"{}\"", lib.display());
    let mut flags = vec!["-O2", &define];
    if late {
        flags.push("-DDLTHROW_LATE");
    }
    let host = stem.trim_end_matches("_lib");
    let name = format!("{host}_host{}-O2", if late { "-late" } else { "" });
    Build::new(Lang::C, &name, &[program_source("dlthrow_host.c")], &flags).build()
}

/// Attached with `-l` to a C program that then loads a C library whose
/// coroutine (makecontext/swapcontext) switches back from inside traced
/// frames: libc's `swapcontext` is redirected to the agent in place (the
/// library's GOT is bound to libc's after the agent saw it). The agent
/// aborted the program before ("a traced function returned through a
/// stack slot the agent does not know").
#[test]
fn coroutines_in_a_library_loaded_after_attaching_with_l() {
    let exe = dlthrow_host(Lang::C, "dlcoro_lib.c", true);
    let dir = TraceDir::new("attach-late-dlcoro");
    let (native_out, native_status, _) = drive_with(&exe, None, &["go"; ROUNDS], false);
    // Steps 0..60 hand over 0..60: 10 steps in round 1, 20, then 30.
    assert!(native_out.contains("round 3: caught 1335"), "{native_out}");
    let (out, status, run) =
        drive_opts(&exe, Some(&dir.path), &["-l"], &["go"; ROUNDS], false, &[]);
    let run = run.unwrap();
    assert_no_panic(&run);
    assert_eq!(run.code(), Some(3), "{}", run.describe());
    assert_eq!(out, native_out);
    assert_eq!(status.code(), native_status.code());
    let ctx = format!("trace {}", dir.path.display());
    let rep = report(&dir.path);
    let steps = (1..=ROUNDS as u64).map(|r| 10 * r).sum::<u64>();
    assert_eq!(calls_named(&rep, "lib_work"), ROUNDS as u64, "{ctx}");
    assert_eq!(calls_named(&rep, "co_step"), steps, "{ctx}");
    assert_eq!(calls_named(&rep, "co_deep"), steps, "{ctx}");
    assert_eq!(calls_named(&rep, "co_mid"), steps, "{ctx}");
}

/// Every line of `lines` (a task's tree, `tree_lines`) that opens a call
/// is closed by a line of the same function at the same indentation, and
/// every closing line closes the innermost open call (but for the calls
/// in progress when fctrace attached, closed before anything opened).
fn assert_well_nested(lines: &[&str], ctx: &str) {
    let mut open: Vec<(usize, &str)> = Vec::new();
    for l in lines {
        let depth = l.len() - l.trim_start().len();
        let t = l.trim_start();
        // (Demangled C++ names keep their parameters, without "()".)
        if let Some(name) = t.strip_suffix(" {") {
            open.push((depth, name.strip_suffix("()").unwrap_or(name)));
        } else if let Some(rest) = t.strip_prefix("} /* ") {
            let name = rest.split(" */").next().unwrap();
            match open.pop() {
                Some((d, n)) => assert_eq!((d, n), (depth, name), "{ctx}: at {l:?}"),
                None => assert!(rest.ends_with("(entry not recorded)"), "{ctx}: at {l:?}"),
            }
        }
    }
    assert!(
        open.iter().all(|(_, n)| *n == "main"),
        "{ctx}: left open {open:?}"
    );
}

/// Lines of `text` closing a call of `func` as unwound.
fn unwound(text: &str, func: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(&format!("}} /* {func} */ (unwound)")))
        .count()
}

/// Attached with `-l` to a C program that then loads a C++ library
/// (dlopen, RTLD_LOCAL; libstdc++ with it): the loader binds the library's
/// calls of libgcc_s's unwinder after the agent saw it, so the agent
/// redirects libgcc_s's entry points themselves. Each round throws and
/// catches through the library's traced frames, and rethrows once; it ran
/// into `std::terminate` before.
#[test]
fn exceptions_in_a_cxx_library_loaded_after_attaching_with_l() {
    let exe = dlthrow_host(Lang::Cxx, "dlthrow_lib.cpp", true);
    let dir = TraceDir::new("attach-late-dlthrow");
    let (native_out, native_status, _) = drive_with(&exe, None, &["go"; ROUNDS], false);
    assert!(native_out.contains("round 3: caught 103"), "{native_out}");
    let (out, status, run) =
        drive_opts(&exe, Some(&dir.path), &["-l"], &["go"; ROUNDS], false, &[]);
    let run = run.unwrap();
    assert_no_panic(&run);
    assert_eq!(run.code(), Some(3), "{}", run.describe());
    assert_eq!(out, native_out);
    assert_eq!(status.code(), native_status.code());
    assert_eq!(status.code(), Some(3));
    let ctx = format!("trace {}", dir.path.display());
    let rep = report(&dir.path);
    // Round r (1..=3): lib_work(r) calls middle and thrower r times in
    // its loop and once through rethrower; each of them throws.
    let throws = (1..=ROUNDS as u64).map(|r| r + 1).sum::<u64>();
    assert_eq!(calls_named(&rep, "one_round"), ROUNDS as u64, "{ctx}");
    assert_eq!(calls_named(&rep, "lib_work"), ROUNDS as u64, "{ctx}");
    assert_eq!(calls_named(&rep, "rethrower"), ROUNDS as u64, "{ctx}");
    assert_eq!(calls_named(&rep, "middle"), throws, "{ctx}");
    assert_eq!(calls_named(&rep, "thrower"), throws, "{ctx}");
    let text = replay_text(&dir.path);
    assert_eq!(unwound(&text, "thrower"), throws as usize, "{ctx}");
    assert_eq!(unwound(&text, "middle"), throws as usize, "{ctx}");
    assert_eq!(unwound(&text, "rethrower"), ROUNDS, "{ctx}");
    assert_eq!(unwound(&text, "__cxa_rethrow"), ROUNDS, "{ctx}");
    assert_eq!(unwound(&text, "lib_work"), 0, "{ctx}");
    let tasks = tree_lines(&text);
    assert_eq!(tasks.len(), 1, "{ctx}");
    let main = tasks.values().next().unwrap();
    assert_well_nested(main, &ctx);
    // lib_work returns normally into one_round, under main.
    assert_eq!(
        main.iter()
            .filter(|l| **l == "    } /* lib_work */")
            .count(),
        ROUNDS,
        "{ctx}"
    );
}

/// As above, and fctrace detaches after the first round (the library
/// loaded and traced): the code is its files' again, libgcc_s's included,
/// and the next rounds throw and catch as natively.
#[test]
fn a_cxx_library_loaded_after_attaching_with_l_throws_after_the_detach() {
    let exe = dlthrow_host(Lang::Cxx, "dlthrow_lib.cpp", true);
    let dir = TraceDir::new("attach-late-dlthrow-detach");
    let (native_out, native_status, _) = drive_with(&exe, None, &["go"; ROUNDS], false);
    let (out, status, run) = drive_opts(
        &exe,
        Some(&dir.path),
        &["-l"],
        &["go"],
        true,
        &["go"; ROUNDS - 1],
    );
    let run = run.unwrap();
    assert_no_panic(&run);
    assert_eq!(run.code(), Some(0), "{}", run.describe());
    assert_eq!(out, native_out);
    assert_eq!(status.code(), native_status.code());
    let ctx = format!("trace {}", dir.path.display());
    let rep = report(&dir.path);
    // Round 1 only: lib_work(1) throws twice.
    assert_eq!(calls_named(&rep, "lib_work"), 1, "{ctx}");
    assert_eq!(calls_named(&rep, "thrower"), 2, "{ctx}");
    let text = replay_text(&dir.path);
    assert_eq!(unwound(&text, "thrower"), 2, "{ctx}");
}

/// Every file-backed executable mapping of process `pid` holds its file's
/// bytes: no patch of fctrace's is left.
fn assert_code_is_the_files(pid: u32, ctx: &str) {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut checked = 0;
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6
            || !f[1].contains('x')
            || !f[5].starts_with('/')
            || f[5].starts_with("/memfd:")
        {
            continue;
        }
        let (a, b) = f[0].split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let off = u64::from_str_radix(f[2], 16).unwrap();
        let file = std::fs::File::open(f[5]).unwrap();
        let len = (b - a).min(file.metadata().unwrap().len().saturating_sub(off)) as usize;
        let mut live = vec![0u8; len];
        let mut orig = vec![0u8; len];
        mem.read_exact_at(&mut live, a).unwrap();
        file.read_exact_at(&mut orig, off).unwrap();
        let differ = live.iter().zip(&orig).filter(|(x, y)| x != y).count();
        assert_eq!(
            differ, 0,
            "{ctx}: {} bytes of {} differ from its file",
            differ, f[5]
        );
        checked += 1;
    }
    assert!(checked >= 2, "{ctx}: {maps}");
}

/// Ctrl-C on an attached `fctrace record -p PID`: it detaches from `pid`
/// and ends with status 0; what it said on stderr.
fn ctrl_c(t: Driven, err: Receiver<String>, pid: u32) -> Vec<String> {
    Command::new("kill")
        .args(["-INT", &t.child.id().to_string()])
        .status()
        .unwrap();
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(st.code(), Some(0), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains(&format!("detached from process {pid}"))),
        "{said:?}"
    );
    said
}

/// Starts `fctrace record -p PID` (with `extra` options), waits until it
/// says it attached.
fn start_attached(pid: u32, dir: &Path, extra: &[&str]) -> (Driven, Receiver<String>) {
    let pid = pid.to_string();
    let mut args = vec!["record", "-d", dir.to_str().unwrap(), "-p", &pid];
    args.extend_from_slice(extra);
    let mut t = Driven::start(Command::new(fctrace_bin()).args(&args));
    let err = read_lines(t.child.stderr.take().unwrap());
    // (A note may come first: tracefs mounted for -k on a fresh machine.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said = Vec::new();
    while !said.iter().any(|l: &String| l.contains("attached")) {
        match err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => said.push(l),
            Err(_) => panic!("fctrace did not say it attached: {said:?}"),
        }
    }
    (t, err)
}

#[test]
fn detached_process_runs_on_with_its_own_code() {
    let exe = attach_program();
    let (native_out, native_status, _) = drive_with(&exe, None, &["go"; ROUNDS], false);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 2);
    let dir = TraceDir::new("attach-detach");
    let (t, err) = start_attached(pid, &dir.path, &[]);
    for round in 1..=2 {
        prog.send("go");
        prog.wait_for(&format!("round {round}"));
    }
    // Ctrl-C on fctrace once main is blocked in read_command again (the
    // detach then finds it in progress): it detaches and ends.
    wait_in_read(pid, 2);
    ctrl_c(t, err, pid);
    let ctx = format!("trace {}", dir.path.display());
    assert_code_is_the_files(pid, &ctx);
    // Untraced now, and as natively.
    prog.send("go");
    prog.wait_for("round 3");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert_eq!(out, native_out);
    assert_eq!(status.code(), native_status.code());
    let rep = report(&dir.path);
    let calls = |name: &str| calls_named(&rep, name);
    assert_eq!(calls("step"), 2 * STEPS, "{ctx}");
    assert_eq!(calls("got"), 2, "{ctx}");
    assert_eq!(rep.lost_events, 0, "{ctx}");
    // Main was waiting in read_command when fctrace attached (its return
    // shown, the entry not recorded), and again when it detached: that
    // call, entered after the second round, is in progress, closed as
    // such; both at their depth under main.
    let text = replay_text(&dir.path);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("read_command"))
        .map(|l| &l[l.find("| ").unwrap() + 2..])
        .collect();
    assert_eq!(
        lines,
        [
            "  read_command() { /* entered before the trace began */",
            "  } /* read_command */ (entry not recorded)",
            "  read_command() {",
            "  } /* read_command */",
            "  read_command() {",
            "  } /* read_command */ (detached)",
        ],
        "{ctx}"
    );
}

/// What a process holds: its mappings, its descriptors, its resident KiB.
fn holdings(pid: u32) -> (usize, usize, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .count();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    (maps, fds, rss)
}

#[test]
fn a_hundred_attach_and_detach_cycles_leave_the_process_flat() {
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let mut first = None;
    for cycle in 1..=100 {
        let dir = TraceDir::new("attach-cycle");
        // `-N tick`: the compute threads' calls are patched but not recorded
        // (the debug recorder would take seconds per cycle to write them).
        let (t, err) = start_attached(pid, &dir.path, &["--duration", "10ms", "-N", "tick"]);
        let (_, st) = t.finish();
        let said: Vec<String> = err.iter().collect();
        assert_eq!(st.code(), Some(0), "cycle {cycle}: {said:?}");
        assert!(
            said.iter().any(|l| l.contains("detached from process")),
            "cycle {cycle}: {said:?}"
        );
        let now = holdings(pid);
        // After the first cycle: what the agent leaves (its library, its
        // allocator's memory) is there; nothing may grow after.
        let (maps, fds, rss) = *first.get_or_insert(now);
        assert_eq!(now.0, maps, "cycle {cycle}: mappings");
        assert_eq!(now.1, fds, "cycle {cycle}: descriptors");
        assert!(
            now.2 <= rss + 2048,
            "cycle {cycle}: RSS {} KiB, after cycle 1 {rss} KiB",
            now.2
        );
    }
    assert_code_is_the_files(pid, "after 100 cycles");
    prog.send("go");
    prog.wait_for("round 1");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
}

/// Calls of the function named `name`, in the report.
fn calls_named(rep: &Report, name: &str) -> u64 {
    rep.functions
        .iter()
        .filter(|f| f.name == name)
        .map(|f| f.calls)
        .sum()
}

/// Per thread id, the lines of replay's `text` that hold `call` (a call's
/// opening or leaf line, e.g. " tick()").
fn calls_per_tid(text: &str, call: &str) -> std::collections::BTreeMap<String, u64> {
    let mut t = std::collections::BTreeMap::new();
    for l in text.lines().filter(|l| l.contains(call)) {
        if let Some(tid) = l.split('[').nth(1).and_then(|r| r.split(']').next()) {
            *t.entry(tid.trim().to_string()).or_default() += 1;
        }
    }
    t
}

/// Calls of the functions whose name ends with `suffix`, in the report.
fn calls_ending(rep: &Report, suffix: &str) -> u64 {
    rep.functions
        .iter()
        .filter(|f| f.name.ends_with(suffix))
        .map(|f| f.calls)
        .sum()
}

#[test]
fn rust_threads_and_panics_while_attached() {
    let exe = Build::new(
        Lang::Rust,
        "attach_rs-O2",
        &[program_source("attach_rs.rs")],
        &["-Copt-level=2"],
    )
    .build();
    let dir = attached_as_natively(
        &exe,
        "attach-rs",
        &["go"; ROUNDS],
        true,
        "round 3: sum 500500, caught true",
    );
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    assert_eq!(calls_ending(&rep, "::step"), ROUNDS as u64 * STEPS, "{ctx}");
    assert_eq!(calls_ending(&rep, "::boom"), ROUNDS as u64, "{ctx}");
    let text = replay_text(&dir.path);
    assert_eq!(
        text.matches("} /* attach_rs::boom */ (unwound)").count(),
        ROUNDS,
        "{ctx}"
    );
    // main was in std's read_line, deep under attach_rs::main, when
    // fctrace attached, and back there when it detached: its task opens
    // with the C `main` and the calls down to there, entered before the
    // trace began; the first closing line closes one of them, its calls of
    // `step` nest in attach_rs::main, which is closed at the detach, as
    // is the C `main` at depth 0.
    let tasks = tree_lines(&text);
    let main = tasks
        .values()
        .find(|l| l.iter().any(|l| l.contains("attach_rs::step")))
        .expect("main's task");
    let ctx = format!("{ctx}\n{}", main[..main.len().min(40)].join("\n"));
    assert_eq!(
        main[0], "main() { /* entered before the trace began */",
        "{ctx}"
    );
    let opened = main
        .iter()
        .take_while(|l| l.ends_with(" { /* entered before the trace began */"))
        .count();
    assert!(
        main[..opened]
            .iter()
            .any(|l| l.trim_start().starts_with("attach_rs::main() {")),
        "{ctx}"
    );
    assert!(main[opened].trim_start().starts_with("} /* "), "{ctx}");
    assert!(main[opened].ends_with(" (entry not recorded)"), "{ctx}");
    assert_eq!(
        main.last().copied(),
        Some("} /* main */ (detached)"),
        "{ctx}"
    );
    let closing: Vec<&&str> = main
        .iter()
        .filter(|l| l.ends_with("} /* attach_rs::main */ (detached)"))
        .collect();
    assert_eq!(closing.len(), 1, "{ctx}");
    let depth = closing[0].len() - closing[0].trim_start().len();
    assert!(depth >= 2, "{ctx}");
    let step = format!("{}attach_rs::step();", " ".repeat(depth + 2));
    assert_eq!(
        main.iter()
            .filter(|l| l.contains("attach_rs::step"))
            .count(),
        main.iter().filter(|l| **l == step).count(),
        "{ctx}"
    );
    // Each worker's ticks, at least as many as main waited for.
    let per_tid = calls_per_tid(&text, "::tick()");
    assert_eq!(per_tid.len(), 2, "{ctx}: {per_tid:?}");
    assert!(
        per_tid.values().all(|&n| n >= ROUNDS as u64 * TICKS),
        "{ctx}: {per_tid:?}"
    );
}

#[test]
fn sqlite_in_a_loop_while_attached() {
    let exe = sqlite_program("attach_sqlite.c", "-O2");
    let dir = attached_as_natively(
        &exe,
        "attach-sqlite",
        &["go"; ROUNDS],
        true,
        "round 3: rows 300",
    );
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    // Per round: BEGIN, 100 INSERTs, COMMIT, SELECT.
    assert_eq!(
        calls_ending(&rep, "sqlite3_exec"),
        ROUNDS as u64 * 103,
        "{ctx}"
    );
    assert_eq!(rep.lost_events, 0, "{ctx}");
}

#[test]
fn a_fork_while_attached_is_a_task_of_its_own() {
    let exe = attach_program();
    let dir = attached_as_natively(
        &exe,
        "attach-fork",
        &["go", "fork", "go"],
        true,
        "forked child 2",
    );
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    // main's three rounds and the child's.
    assert_eq!(calls_ending(&rep, "step"), 4 * STEPS, "{ctx}");
    assert_eq!(calls_ending(&rep, "got"), 4, "{ctx}");
    let info = info_text(&dir.path);
    assert_eq!(info.matches(": fork of task ").count(), 1, "{ctx}\n{info}");
}

#[test]
fn a_process_in_its_own_pid_and_mount_namespace() {
    // unshare(1) runs attach.c as pid 1 of a new PID namespace with its
    // own /proc: paths of fctrace's are out of its reach (it makes the
    // shared memory's file itself), and its threads have other numbers.
    let exe = attach_program();
    let mut prog = Driven::start(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(&exe),
    );
    prog.wait_for("ready");
    // The program is unshare's child (unshare forks it into the new
    // namespace), as this test's pid namespace sees it.
    let unshare = prog.child.id();
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
        .unwrap_or_default();
    let pid: u32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("attach.c under unshare");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(), exe);
    let dir = TraceDir::new("attach-pidns");
    let (t, err) = start_attached(pid, &dir.path, &[]);
    prog.send("go");
    prog.wait_for("round 1");
    ctrl_c(t, err, pid);
    assert_code_is_the_files(pid, "attach.c in its own namespaces");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    assert_eq!(calls_ending(&rep, "step"), STEPS, "{ctx}");
    // Its numbers in its own namespace: pid 1.
    assert!(
        rep.tasks.iter().all(|t| t.pid == 1),
        "{ctx}: {:?}",
        rep.tasks
    );
}

#[test]
fn tid_chooses_the_threads_to_trace() {
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    // Threads in creation order: main, the two compute threads, the reader.
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort();
    assert_eq!(tids.len(), 4);
    let compute = tids[1].to_string();
    let dir = TraceDir::new("attach-tid");
    let (t, err) = start_attached(pid, &dir.path, &["--tid", &compute]);
    prog.send("go");
    prog.wait_for("round 1");
    ctrl_c(t, err, pid);
    // Not a thread of the process: an error, nothing traced.
    let r = fctrace(&[
        "record",
        "-d",
        dir.path.to_str().unwrap(),
        "-p",
        &pid.to_string(),
        "--tid",
        "1",
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("no such thread"), "{}", r.describe());
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    assert_eq!(rep.tasks.len(), 1, "{ctx}: {:?}", rep.tasks);
    assert_eq!(rep.tasks[0].tid.to_string(), compute, "{ctx}");
    assert!(calls_ending(&rep, "tick") >= TICKS, "{ctx}");
    assert_eq!(calls_ending(&rep, "step"), 0, "{ctx}");
}

/// Starts live `fctrace -p PID` (with `extra` options), waits until it
/// says it attached.
fn start_live(pid: u32, extra: &[&str]) -> (Driven, Receiver<String>) {
    let pid = pid.to_string();
    let mut t = Driven::start(Command::new(fctrace_bin()).args(["-p", &pid]).args(extra));
    let err = read_lines(t.child.stderr.take().unwrap());
    let line = err.recv_timeout(Duration::from_secs(60)).expect("attached");
    assert!(line.contains("attached"), "{line}");
    (t, err)
}

/// Ctrl-C (kill -INT) on a live `fctrace -p`: it detaches, prints the
/// tree and ends with status 0; returns the tree.
fn stop_live((t, err): (Driven, Receiver<String>)) -> String {
    let fct = t.child.id().to_string();
    Command::new("kill").args(["-INT", &fct]).status().unwrap();
    let (tree, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(st.code(), Some(0), "{said:?}");
    tree
}

#[test]
fn live_mode_attaches_and_prints_the_tree() {
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    // `fctrace -p PID`: the tree on stdout once it has detached.
    let live = start_live(pid, &["-F", "step"]);
    prog.send("go");
    prog.wait_for("round 1");
    let tree = stop_live(live);
    // -F step: the tree is main's STEPS calls of step, nothing else.
    let calls: Vec<&str> = tree.lines().filter(|l| l.contains(" | ")).collect();
    assert_eq!(calls.len() as u64, STEPS, "{tree}");
    assert!(calls.iter().all(|l| l.ends_with("| step();")), "{tree}");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
}

/// `fctrace -p PID -F read_command` (the agent applies -F): of the calls
/// main was in when fctrace attached (main > read_command > fgets >
/// read), those -F shows open its tree, `main` not.
#[test]
fn live_mode_under_a_filter_opens_with_the_calls_it_shows() {
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 2);
    let live = start_live(pid, &["-F", "read_command"]);
    prog.send("go");
    prog.wait_for("round 1");
    let tree = stop_live(live);
    let tasks = tree_lines(&tree);
    let main = tasks
        .get(&pid.to_string())
        .unwrap_or_else(|| panic!("no lines of main's thread in\n{tree}"));
    assert_eq!(
        main[..4],
        [
            "read_command() { /* entered before the trace began */",
            "  fgets() { /* entered before the trace began */",
            "  } /* fgets */ (entry not recorded)",
            "} /* read_command */ (entry not recorded)",
        ],
        "{tree}"
    );
    assert!(!tree.contains("main()"), "{tree}");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn a_child_forked_while_attached_is_detached_from_too() {
    let exe = attach_program();
    let (native_out, native_status, _) = drive_with(&exe, None, &["go", "stay", "go"], false);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let dir = TraceDir::new("attach-stay");
    let (t, err) = start_attached(pid, &dir.path, &[]);
    prog.send("go");
    prog.wait_for("round 1");
    prog.send("stay");
    prog.wait_for("round 2");
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let child: u32 = children
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .expect("the child that stays");
    ctrl_c(t, err, pid);
    // Both have their files' code again; the child runs on (its calls of
    // step go on) until main quits.
    assert_code_is_the_files(pid, "main process after detaching");
    assert_code_is_the_files(child, "forked child after detaching");
    prog.send("go");
    prog.wait_for("round 3");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert_eq!(out, native_out);
    assert_eq!(status.code(), native_status.code());
    assert_eq!(status.code(), Some(3));
    let rep = report(&dir.path);
    let ctx = format!("trace {}", dir.path.display());
    let info = info_text(&dir.path);
    assert_eq!(info.matches(": fork of task ").count(), 1, "{ctx}\n{info}");
    // main's two rounds, and the child's calls before the detach.
    assert!(calls_ending(&rep, "step") > 2 * STEPS, "{ctx}");
}

#[test]
fn a_process_that_only_computes() {
    // Its one thread makes no system call: fctrace loads the agent from
    // it while it runs the program's own code.
    let exe = c_program("attach_spin.c", "-O2", &["-O2"]);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let dir = TraceDir::new("attach-spin");
    let (t, err) = start_attached(pid, &dir.path, &["--duration", "200ms"]);
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(st.code(), Some(0), "{said:?}");
    assert!(
        said.iter().any(|l| l.contains("detached from process")),
        "{said:?}"
    );
    assert_code_is_the_files(pid, "attach_spin.c after detaching");
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let (out, status) = prog.finish();
    assert_eq!(out, "ready\ndone: counted");
    assert_eq!(status.code(), Some(3));
    let rep = report(&dir.path);
    assert!(
        calls_ending(&rep, "spin_step") > 1000,
        "trace {}",
        dir.path.display()
    );
}

/// A process asleep in usleep, attached again and again: fctrace takes
/// its thread at a system call's entry to load the agent, where the
/// kernel reports the first single step before any instruction ran (that
/// stop was taken for a fault: "the process faulted (signal 5 ...) while
/// loading the agent", about one attach in ten). Every attach succeeds,
/// and the process runs on as natively.
#[test]
fn attaching_to_a_process_asleep_again_and_again() {
    let exe = c_program("attach_nap.c", "-O2", &["-O2"]);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    for round in 0..40 {
        let dir = TraceDir::new("attach-nap");
        let (t, err) = start_attached(pid, &dir.path, &["--duration", "10ms"]);
        let (_, st) = t.finish();
        let said: Vec<String> = err.iter().collect();
        assert_eq!(st.code(), Some(0), "attach {round}: {said:?}");
        assert!(
            said.iter().any(|l| l.contains("detached from process")),
            "attach {round}: {said:?}"
        );
    }
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let (out, status) = prog.finish();
    assert_eq!(out, "ready\ndone: napped");
    assert_eq!(status.code(), Some(3));
}

/// `-k` with `-p`: the threads' system calls from the attach to the
/// detach, under the functions that made them (the read the reader was
/// blocked in when fctrace attached returns `<... read resumed>`).
#[test]
fn system_calls_of_an_attached_process() {
    let exe = attach_program();
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 2);
    let dir = TraceDir::new("attach-k");
    let (t, err) = start_attached(pid, &dir.path, &["-k"]);
    prog.send("go");
    prog.wait_for("round 1");
    let said = ctrl_c(t, err, pid);
    assert!(!said.iter().any(|l| l.contains("lost")), "{said:?}");
    prog.send("quit");
    let (out, status) = prog.finish();
    assert!(out.ends_with("done after 1 rounds"), "{out}");
    assert_eq!(status.code(), Some(3));
    let text = replay_text(&dir.path);
    let ctx = format!(
        "trace {}\n{}",
        dir.path.display(),
        text.lines()
            .filter(|l| !l.contains("tick();"))
            .take(80)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let tasks = tree_lines(&text);
    let reader = tasks
        .values()
        .find(|l| l.iter().any(|l| l.contains("got(")))
        .expect("the reader's task");
    // (Without the page faults and times off the CPU.)
    let reader: Vec<&str> = reader
        .iter()
        .copied()
        .filter(|l| !l.trim_start().starts_with("/* "))
        .collect();
    let (before, reader) = reader.split_at(2);
    // Blocked in read when fctrace attached: the calls open then (reader
    // and read), then its return (or the whole
    // call: interrupted by the attach, the kernel restarts it, maybe once
    // the events are open), then `read`'s.
    assert!(
        reader[0] == "    <... read resumed> = 7"
            || (reader[0].starts_with("    read(3, 0x") && reader[0].contains(", 128) = 7")),
        "{ctx}"
    );
    assert_eq!(reader[1], "  } /* read */ (entry not recorded)", "{ctx}");
    assert_eq!(
        before[..],
        [
            "reader() { /* entered before the trace began */",
            "  read() { /* entered before the trace began */"
        ],
        "{ctx}"
    );
    // got's printf writes the line "reader: 7 bytes: round 1".
    assert!(
        reader
            .iter()
            .any(|l| l.trim_start().starts_with("write(1, 0x") && l.ends_with(", 25) = 25")),
        "{ctx}"
    );
    // main writes "round 1" into the pipe.
    let main = tasks
        .values()
        .find(|l| l.iter().any(|l| l.contains("step()")))
        .expect("main's task");
    assert!(
        main.iter()
            .any(|l| l.starts_with("    write(") && l.ends_with(", 7) = 7")),
        "{ctx}"
    );
}

/// A function's address taken while attached (read from the program's GOT)
/// and called after the detach: the pointer is the function's own, not a
/// stub's (the stubs are unmapped at the detach). Calls made through the
/// PLT stay traced.
#[test]
fn function_pointers_taken_while_attached_work_after_the_detach() {
    let exe = c_program("attach_fnptr.c", "-O2", &["-O2", "-fPIE", "-pie"]);
    let (native, (out, status), dir) = across_a_detach(
        &exe,
        "attach-fnptr",
        &[("take", "ok take"), ("call", "ok call")],
        1,
    );
    assert_eq!(out, native.0);
    assert_eq!(status.code(), Some(3));
    assert_eq!(native.1.code(), Some(3));
    assert!(out.contains("called: 5"), "{out}");
    // take() ran traced; the import whose address it read is said untraced.
    let text = replay_text(&dir.path);
    assert!(text.contains("take();"), "{text}");
    let info = info_text(&dir.path);
    assert!(
        info.contains("its address is read from its GOT slot"),
        "{info}"
    );
}

/// A function whose first bytes (moved into its stub by the patch) hold a
/// call: the moved call pushes the function's own return address (not
/// one in the stub), so a thread blocked in the callee while fctrace
/// detaches (the stubs unmapped) returns into the function's own code.
#[test]
fn a_call_moved_by_a_patch_returns_after_the_detach() {
    let exe = c_program(
        "attach_movedcall.c",
        "O2-nosibling",
        &["-O2", "-fno-optimize-sibling-calls"],
    );
    // Blocked in block_read, called from waiter's moved first bytes, at
    // the detach.
    let (native, (out, status), dir) = across_a_detach(
        &exe,
        "attach-movedcall",
        &[("wait", "waiting"), ("hello", "got hello")],
        1,
    );
    assert_eq!(out, native.0);
    assert_eq!(status.code(), Some(3));
    assert_eq!(native.1.code(), Some(3));
    let text = replay_text(&dir.path);
    assert!(text.contains("waiter() {"), "{text}");
    assert!(text.contains("} /* waiter */ (detached)"), "{text}");
}

/// Runs `exe` natively, then attached: each step sends a line and waits
/// for the text; fctrace attaches before the first step and detaches
/// (Ctrl-C, the process blocked in read) before step `detach_at`; then
/// `quit`. The native and traced (output, status), and the trace.
fn across_a_detach(
    exe: &Path,
    label: &str,
    steps: &[(&str, &str)],
    detach_at: usize,
) -> (
    (String, std::process::ExitStatus),
    (String, std::process::ExitStatus),
    TraceDir,
) {
    let native = {
        let mut prog = Driven::start(&mut Command::new(exe));
        prog.wait_for("ready");
        for (line, expect) in steps {
            prog.send(line);
            prog.wait_for(expect);
        }
        prog.send("quit");
        prog.finish()
    };
    let mut prog = Driven::start(&mut Command::new(exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 1);
    let dir = TraceDir::new(label);
    let (t, err) = start_attached(pid, &dir.path, &[]);
    let mut tracer = Some((t, err));
    for (k, (line, expect)) in steps.iter().enumerate() {
        if k == detach_at {
            wait_in_read(pid, 1);
            let (t, err) = tracer.take().expect("attached");
            ctrl_c(t, err, pid);
        }
        prog.send(line);
        prog.wait_for(expect);
    }
    prog.send("quit");
    (native, prog.finish(), dir)
}

/// attach_end.c started and waiting in read(2), with `fctrace record -p`
/// attached for `duration` at most.
fn attached_end_program(
    name: &str,
    duration: &str,
) -> (Driven, Driven, Receiver<String>, TraceDir) {
    let exe = c_program("attach_end.c", "-O2", &["-O2"]);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    wait_in_read(prog.child.id(), 1);
    let dir = TraceDir::new(name);
    let (t, err) = start_attached(prog.child.id(), &dir.path, &["--duration", duration]);
    (prog, t, err, dir)
}

#[test]
fn a_process_that_exits_while_attached_is_reported() {
    let (mut prog, t, err, dir) = attached_end_program("attach-exit3", "60s");
    let pid = prog.child.id();
    prog.send("go");
    prog.wait_for("round 1");
    prog.send("exit");
    // Its parent (this test) reaps it at once, as a shell would.
    let (out, status) = prog.finish();
    assert_eq!((out.as_str(), status.code()), ("ready\nround 1", Some(3)));
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(st.code(), Some(3), "fctrace's status: {said:?}");
    assert!(
        said.iter().any(
            |l| l.contains(&format!("process {pid} ended while recorded"))
                && l.ends_with(": exited with code 3")
        ),
        "{said:?}"
    );
    let info = info_text(&dir.path);
    assert!(
        info.contains("Exit status:    exited with code 3\n"),
        "{info}"
    );
    assert_eq!(calls_ending(&report(&dir.path), "work"), 100);
}

#[test]
fn a_process_killed_while_attached_is_reported() {
    use std::os::unix::process::ExitStatusExt;
    let (mut prog, t, err, dir) = attached_end_program("attach-killed", "60s");
    let pid = prog.child.id();
    prog.send("go");
    prog.wait_for("round 1");
    wait_in_read(pid, 1);
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let (_, status) = prog.finish();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(
        st.signal(),
        Some(libc::SIGTERM),
        "fctrace's status: {said:?}"
    );
    assert!(
        said.iter().any(
            |l| l.contains(&format!("process {pid} ended while recorded"))
                && l.ends_with(": killed by signal 15 (SIGTERM)")
        ),
        "{said:?}"
    );
    let info = info_text(&dir.path);
    assert!(
        info.contains("Exit status:    killed by signal 15 (SIGTERM)\n"),
        "{info}"
    );
}

#[test]
fn an_attach_in_which_no_traced_call_ran_says_so() {
    let (prog, t, err, dir) = attached_end_program("attach-idle", "300ms");
    let pid = prog.child.id();
    // Blocked in read(2) for the whole window.
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(st.code(), Some(0), "{said:?}");
    assert!(
        said.iter().any(|l| l.contains(&format!(
            "no traced call ran in process {pid} while attached ("
        ))),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|l| l.contains("did not start")),
        "{said:?}"
    );
    let info = info_text(&dir.path);
    assert!(info.contains("no traced call ran in process"), "{info}");
    assert!(!info.contains("did not start"), "{info}");
    let (out, status) = prog.finish();
    assert_eq!((out.as_str(), status.code()), ("ready", Some(0)));
}

/// Drives san_attach.c (an AddressSanitizer program): "keep" (a block
/// allocated and freed through nested functions), then "use" (a
/// heap-use-after-free through nested functions, reported). With
/// `attach`, fctrace attaches once main waits for its first command, and
/// with `detach` it detaches (Ctrl-C) between the two: the block's stacks
/// were collected while attached, the report is made after. Returns the
/// program's stdout, status and stderr, and what fctrace said.
fn drive_asan(
    exe: &Path,
    attach: Option<&Path>,
    detach: bool,
) -> (String, std::process::ExitStatus, String, Vec<String>) {
    let mut prog = Driven::start(&mut Command::new(exe));
    let stderr = read_lines(prog.child.stderr.take().unwrap());
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 1);
    let mut tracer = attach.map(|dir| start_attached(pid, dir, &[]));
    prog.send("keep");
    prog.wait_for("kept");
    let mut said = Vec::new();
    if detach {
        let (t, err) = tracer.take().unwrap();
        wait_in_read(pid, 1);
        said = ctrl_c(t, err, pid);
        assert_code_is_the_files(pid, &format!("{}: after detaching", exe.display()));
    }
    prog.send("use");
    let (out, status) = prog.finish();
    if let Some((t, err)) = tracer {
        // The process ended while recorded: fctrace ends as it did.
        let (_, st) = t.finish();
        said = err.iter().collect();
        assert_eq!(st.code(), status.code(), "{said:?}");
    }
    (
        out,
        status,
        stderr.iter().collect::<Vec<_>>().join("\n"),
        said,
    )
}

/// fctrace attached to a running AddressSanitizer program: the stacks ASan
/// collects at `malloc` and `free` while attached, and its report's, name
/// the same frames as natively (without the runtime's stack collector
/// redirected they read stub addresses: `#2 0x... (<unknown module>)`);
/// after detaching too, with the runtime's code its file's again.
#[test]
fn asan_reports_while_attached_name_the_same_frames() {
    let asan = "/usr/lib/x86_64-linux-gnu/libasan.so.8";
    assert!(
        Path::new(asan).exists(),
        "{asan} is missing: apt-get install libasan8"
    );
    let exe = c_program(
        "san_attach.c",
        "-asan",
        &["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address"],
    );
    let (native_out, native_status, native_err, _) = drive_asan(&exe, None, false);
    assert_eq!(native_status.code(), Some(1), "{native_out}\n{native_err}");
    assert!(native_err.contains(" in keep1 "), "{native_err}");
    for detach in [false, true] {
        let dir = TraceDir::new("attach-asan");
        let (out, status, err, said) = drive_asan(&exe, Some(&dir.path), detach);
        let ctx = format!(
            "detach {detach}, trace {}\nfctrace said {said:?}",
            dir.path.display()
        );
        assert_eq!(out, native_out, "{ctx}");
        assert_eq!(status.code(), native_status.code(), "{ctx}\n{err}");
        assert_eq!(frames(&native_err), frames(&err), "{ctx}\n{err}");
        let rep = report(&dir.path);
        for f in ["keep1", "keep2", "make", "drop"] {
            assert_eq!(calls_named(&rep, f), 1, "{ctx}: {f}");
        }
        let used = if detach { 0 } else { 1 };
        assert_eq!(calls_named(&rep, "use3"), used, "{ctx}");
    }
}

/// A process whose only thread waits in read(2) on a small stack inside
/// other data (a goroutine's stack in Go's heap, a coroutine's):
/// fctrace's calls in the process (`dlopen`, the agent's start-up) run on
/// a stack of their own, so nothing around the thread's stack is written
/// (they overran it, and Go with cgo died later in its stack allocator).
#[test]
fn attaching_to_a_thread_on_a_small_stack_writes_nothing_around_it() {
    let exe = c_program("small_stack.c", "-O2", &["-O2"]);
    let native = run_with_input(&mut Command::new(&exe), "go\n");
    let expected = "ready\ncommand go\nbytes written outside the stack: 0\nsum 10000\n";
    assert_eq!(native, (expected.to_string(), Some(3)));
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    wait_in_read(pid, 1);
    let dir = TraceDir::new("attach-small-stack");
    let (t, err) = start_attached(pid, &dir.path, &[]);
    prog.send("go");
    let (out, status) = prog.finish();
    let (_, st) = t.finish();
    let said: Vec<String> = err.iter().collect();
    assert_eq!(format!("{out}\n"), expected, "{said:?}");
    assert_eq!(status.code(), Some(3));
    assert_eq!(st.code(), Some(3), "{said:?}");
    assert_eq!(calls_named(&report(&dir.path), "work"), 100);
}

/// Checks the trace (its directory) of one attach; the second argument
/// says which attach, for the messages.
type ReoptCheck = fn(&Path, &str);

/// attach_reopt.c's calls of `top` per round.
const REOPT_CALLS: u64 = 100;

/// Options of the first and third attach of
/// `a_reattach_follows_its_own_options`: only `top` and what it calls,
/// without `mid` (and its `leaf`), two levels (so `lib_outer` but not
/// what it calls), `top`'s argument.
const REOPT_A: &[&str] = &["-F", "top", "-N", "mid", "-D", "2", "-A", "top@arg1"];
/// Options of the second: libraries too (`lib_inner`), `leaf`'s return
/// value, `mid` one level deep (its `leaf` not recorded), no filter.
const REOPT_B: &[&str] = &["-l", "-R", "leaf@retval", "-T", "mid@depth=1"];

/// The call lines of a trace (trimmed) of the function `name`.
fn lines_of<'a>(lines: &'a [String], name: &str) -> Vec<&'a str> {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with(&format!("{name}(")))
        .collect()
}

/// The trace of two rounds of attach_reopt.c recorded with [`REOPT_A`]:
/// per round `top` (its argument 0 .. CALLS-1), the `leaf` it calls
/// directly and `lib_outer`, nothing else.
fn assert_reopt_a(dir: &Path, ctx: &str) {
    let rep = report(dir);
    let mut called: Vec<(&str, u64)> = rep
        .functions
        .iter()
        .filter(|f| f.calls > 0)
        .map(|f| (f.name.as_str(), f.calls))
        .collect();
    called.sort();
    let n = 2 * REOPT_CALLS;
    assert_eq!(called, [("leaf", n), ("lib_outer", n), ("top", n)], "{ctx}");
    assert_eq!(rep.lost_events, 0, "{ctx}");
    let lines = call_lines(&replay_text(dir));
    let mut tops = lines_of(&lines, "top");
    tops.sort();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|_| (0..REOPT_CALLS).map(|i| format!("top({i}) {{")))
        .collect();
    expected.sort();
    assert_eq!(tops, expected, "{ctx}");
    // No return value: `-R` was the second attach's.
    let leaves = lines_of(&lines, "leaf");
    assert!(leaves.iter().all(|l| *l == "leaf();"), "{ctx}: {leaves:?}");
}

/// The trace of two rounds recorded with [`REOPT_B`]: per round each of
/// `top`, `mid`, the direct `leaf` (its value x + 8), `lib_outer` and
/// `lib_inner` called CALLS times; `top` without its argument.
fn assert_reopt_b(dir: &Path, ctx: &str) {
    let rep = report(dir);
    let n = 2 * REOPT_CALLS;
    for name in ["top", "mid", "leaf", "lib_outer", "lib_inner"] {
        assert_eq!(calls_named(&rep, name), n, "{ctx}: {name}");
    }
    // Main's own calls (no -F): read_command, entered after round 1.
    assert!(calls_named(&rep, "read_command") >= 1, "{ctx}");
    assert_eq!(rep.lost_events, 0, "{ctx}");
    let lines = call_lines(&replay_text(dir));
    let tops = lines_of(&lines, "top");
    assert!(tops.iter().all(|l| *l == "top() {"), "{ctx}: {tops:?}");
    let mut leaves = lines_of(&lines, "leaf");
    leaves.sort();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|_| (0..REOPT_CALLS).map(|i| format!("leaf() = {};", i + 8)))
        .collect();
    expected.sort();
    assert_eq!(leaves, expected, "{ctx}");
}

/// Options of the third: `finish` at the first `top` (nothing of the
/// rounds recorded).
const REOPT_FINISH: &[&str] = &["-T", "top@finish"];

fn assert_reopt_finish(dir: &Path, ctx: &str) {
    let rep = report(dir);
    for name in ["top", "mid", "leaf", "lib_outer", "lib_inner"] {
        assert_eq!(calls_named(&rep, name), 0, "{ctx}: {name}");
    }
}

/// The trace of two rounds recorded without options: every call of the
/// program's (`leaf` twice per `top`), none inside the library.
fn assert_reopt_none(dir: &Path, ctx: &str) {
    let rep = report(dir);
    let n = 2 * REOPT_CALLS;
    for (name, calls) in [
        ("top", n),
        ("mid", n),
        ("leaf", 2 * n),
        ("lib_outer", n),
        ("lib_inner", 0),
    ] {
        assert_eq!(calls_named(&rep, name), calls, "{ctx}: {name}");
    }
    let lines = call_lines(&replay_text(dir));
    let tops = lines_of(&lines, "top");
    assert!(tops.iter().all(|l| *l == "top() {"), "{ctx}: {tops:?}");
    let leaves = lines_of(&lines, "leaf");
    assert!(leaves.iter().all(|l| *l == "leaf();"), "{ctx}: {leaves:?}");
}

/// Attached five times to one process, detached in between, each time
/// with other options (filters, depth, triggers, `finish`, argument and
/// return values, libraries or not, none): each trace follows its own
/// attach's options exactly (they were refused for the process's life
/// once it had been attached with others; a `finish` stayed), and the
/// process runs as natively.
#[test]
fn a_reattach_follows_its_own_options() {
    let lib = c_shared_lib("libreopt.so", "reopt_lib.c", &["-O2"]);
    let exe = c_program_with_lib("attach_reopt", "attach_reopt.c", &["-O2"], &lib);
    let phases: [(&[&str], ReoptCheck); 5] = [
        (REOPT_A, assert_reopt_a),
        (REOPT_B, assert_reopt_b),
        (REOPT_FINISH, assert_reopt_finish),
        (&[], assert_reopt_none),
        (REOPT_A, assert_reopt_a),
    ];
    let native = {
        let mut prog = Driven::start(&mut Command::new(&exe));
        prog.wait_for("ready");
        for round in 1..=2 * phases.len() {
            prog.send("go");
            prog.wait_for(&format!("round {round}:"));
        }
        prog.send("quit");
        prog.finish()
    };
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let mut round = 0;
    let mut traces = Vec::new();
    for (k, (opts, _)) in phases.iter().enumerate() {
        // Main blocked in read_command: the calls in progress are known.
        wait_in_read(pid, 1);
        let dir = TraceDir::new(&format!("attach-reopt-{k}"));
        let (t, err) = start_attached(pid, &dir.path, opts);
        for _ in 0..2 {
            round += 1;
            prog.send("go");
            prog.wait_for(&format!("round {round}:"));
        }
        wait_in_read(pid, 1);
        ctrl_c(t, err, pid);
        assert_code_is_the_files(pid, &format!("after attach {k}"));
        traces.push(dir);
    }
    prog.send("quit");
    let (out, status) = prog.finish();
    assert_eq!(out, native.0);
    assert_eq!(status.code(), Some(3));
    assert_eq!(native.1.code(), Some(3));
    for (k, ((opts, check), dir)) in phases.iter().zip(&traces).enumerate() {
        check(
            &dir.path,
            &format!("attach {k} {opts:?}, trace {}", dir.path.display()),
        );
    }
}

/// The steps of `signal_triggers_of_an_earlier_attach_leave_the_signals_to_the_program`
/// (the second attach starts at [`SIGNAL_SECOND`]): "go" makes a round,
/// else the signal is sent; the process ends by the last.
const SIGNAL_STEPS: &[&str] = &["go", "-USR1", "go", "-USR1", "go", "-USR2"];
const SIGNAL_SECOND: usize = 3;

/// Runs attach_reopt.c through [`SIGNAL_STEPS`]; with `traced`, fctrace
/// attaches with `--signal SIGUSR1@trace_off --signal SIGUSR2@trace_off`
/// before the first step and detaches before [`SIGNAL_SECOND`], then
/// attaches without options until the process ends. The process's output
/// and status, the traces.
fn signal_steps(traced: bool) -> (String, std::process::ExitStatus, Vec<TraceDir>) {
    let lib = c_shared_lib("libreopt.so", "reopt_lib.c", &["-O2"]);
    let exe = c_program_with_lib("attach_reopt", "attach_reopt.c", &["-O2"], &lib);
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let mut traces = Vec::new();
    let mut tracer = None;
    let mut round = 0;
    let first: &[&str] = &[
        "--signal",
        "SIGUSR1@trace_off",
        "--signal",
        "SIGUSR2@trace_off",
    ];
    for (k, step) in SIGNAL_STEPS.iter().enumerate() {
        // Main blocked in read_command: a signal sent now is handled
        // before it reads the next line.
        wait_in_read(pid, 1);
        if traced && (k == 0 || k == SIGNAL_SECOND) {
            if let Some((t, err)) = tracer.take() {
                ctrl_c(t, err, pid);
            }
            let dir = TraceDir::new(&format!("attach-signal-{k}"));
            let opts = if k == 0 { first } else { &[] };
            tracer = Some(start_attached(pid, &dir.path, opts));
            traces.push(dir);
        }
        if *step == "go" {
            round += 1;
            prog.send("go");
            prog.wait_for(&format!("round {round}:"));
        } else {
            let kill = Command::new("kill")
                .args([*step, &pid.to_string()])
                .status()
                .unwrap();
            assert!(kill.success());
        }
    }
    let (out, status) = prog.finish();
    if let Some((t, err)) = tracer {
        let (_, st) = t.finish();
        let said: Vec<String> = err.iter().collect();
        // fctrace ends as the process did.
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(libc::SIGUSR2),
            "{said:?}"
        );
    }
    (out, status, traces)
}

/// An attach with `--signal` triggers on SIGUSR1 (which the process
/// handles) and SIGUSR2 (left at its default action), detached, then one
/// without: the first trigger turns tracing off and the program's handler
/// still runs; after the detach and in the second attach neither
/// trigger fires, the handler runs, and SIGUSR2 kills the process as
/// natively (it was kept from the program after the first attach).
#[test]
fn signal_triggers_of_an_earlier_attach_leave_the_signals_to_the_program() {
    use std::os::unix::process::ExitStatusExt;
    let (native_out, native_status, _) = signal_steps(false);
    assert_eq!(native_status.signal(), Some(libc::SIGUSR2));
    assert!(
        native_out.contains("round 3: 30800, SIGUSR1 2"),
        "{native_out}"
    );
    let (out, status, traces) = signal_steps(true);
    assert_eq!(out, native_out);
    assert_eq!(status.signal(), Some(libc::SIGUSR2));
    // The first attach: round 1 recorded, round 2 not (SIGUSR1 turned
    // tracing off); the second: round 3, SIGUSR1 triggering nothing.
    for (dir, rounds) in traces.iter().zip([1, 1]) {
        let rep = report(&dir.path);
        let ctx = format!("trace {}", dir.path.display());
        assert_eq!(calls_named(&rep, "top"), rounds * REOPT_CALLS, "{ctx}");
    }
}

/// A Python service: each `go` line on stdin makes `handle` call `step`
/// `PY_STEPS` times, each calling `leaf`; main waits on stdin between.
const PY_SERVICE: &str = r#"import sys


def leaf(i):
    return i * 2


def step(i):
    return leaf(i) + 1


def handle(n):
    total = 0
    for i in range(n):
        total += step(i)
    return total


print("ready", flush=True)
rounds = 0
for line in sys.stdin:
    if line.strip() == "quit":
        break
    rounds += 1
    print(f"round {rounds} {handle(1000)}", flush=True)
"#;
const PY_STEPS: u64 = 1000;

/// Runs the Python service under `python`, attached (`-p`) for its first
/// two rounds and detached (Ctrl-C) before the third: its output and
/// status are a native run's, and fctrace's stderr is returned with the
/// trace.
fn python_service_attached(python: &Path, label: &str) -> (TraceDir, Vec<String>) {
    let work = scratch(label);
    let script = work.path.join("service.py");
    std::fs::write(&script, PY_SERVICE).unwrap();
    let drive = |attach: Option<&Path>| {
        let mut prog = Driven::start(Command::new(python).arg(&script));
        prog.wait_for("ready");
        let pid = prog.child.id();
        wait_in_read(pid, 1);
        let tracer = attach.map(|dir| start_attached(pid, dir, &[]));
        for round in 1..=2 {
            prog.send("go");
            prog.wait_for(&format!("round {round}"));
        }
        // Detached while main waits on stdin again.
        let said = tracer.map(|(t, err)| {
            wait_in_read(pid, 1);
            ctrl_c(t, err, pid)
        });
        prog.send("go");
        prog.wait_for("round 3");
        prog.send("quit");
        let (out, status) = prog.finish();
        (out, status, said.unwrap_or_default())
    };
    let (native_out, native_status, _) = drive(None);
    let dir = TraceDir::new(label);
    let (out, status, said) = drive(Some(&dir.path));
    assert_eq!(out, native_out, "{label}");
    assert_eq!(status.code(), native_status.code(), "{label}");
    (dir, said)
}

/// Attached to a running CPython (3.11 to 3.13: through its frame
/// evaluation function, installed from outside): the Python functions
/// called while attached are recorded, as many times as the service made
/// them; the rounds before and after are not (the frame evaluation
/// function is removed at the detach: the third round runs as natively).
/// Debian's 3.11.2 and 3.13 run some Python calls without it (`x[i]` on a
/// class with a Python `__getitem__`, a class's `__init__`, once
/// specialised: the service makes neither): fctrace says so.
#[test]
fn python_functions_of_a_running_interpreter() {
    for (python, gap) in [
        (pyenv_python_version("3.11.7"), None),
        (pyenv_python_version("3.12.1"), None),
        (debian_python(), Some("gh-104405")),
    ] {
        let (dir, said) = python_service_attached(&python, "attach-python");
        let ctx = format!(
            "{}: trace {}: fctrace said {said:?}",
            python.display(),
            dir.path.display()
        );
        let rep = report(&dir.path);
        let calls = |name: &str| calls_named(&rep, name);
        assert_eq!(calls("__main__.handle"), 2, "{ctx}");
        assert_eq!(calls("__main__.step"), 2 * PY_STEPS, "{ctx}");
        assert_eq!(calls("__main__.leaf"), 2 * PY_STEPS, "{ctx}");
        assert_eq!(rep.lost_events, 0, "{ctx}");
        // step nests under handle, leaf under step.
        let text = replay_text(&dir.path);
        let depth = |name: &str| {
            let l = text
                .lines()
                .find(|l| l.contains(&format!(" {name}()")))
                .unwrap_or_else(|| panic!("{ctx}: no {name} in\n{text}"));
            let body = &l[l.find("| ").unwrap() + 2..];
            body.len() - body.trim_start().len()
        };
        assert!(
            depth("__main__.handle") < depth("__main__.step")
                && depth("__main__.step") < depth("__main__.leaf"),
            "{ctx}\n{text}"
        );
        let noted = said.iter().any(|l| l.contains(", attached: "));
        match gap {
            Some(g) => assert!(said.iter().any(|l| l.contains(g)), "{ctx}"),
            None => assert!(!noted, "{ctx}"),
        }
    }
    // 3.13: left alone, with a word; nothing of it recorded.
    let python = pyenv_python_version("3.13.0");
    let (dir, said) = python_service_attached(&python, "attach-python-3.13");
    let ctx = format!("3.13: trace {}: fctrace said {said:?}", dir.path.display());
    let word = "Python 3.13.0: its functions are not traced (attached";
    assert!(said.iter().any(|l| l.contains(word)), "{ctx}");
    assert!(said.iter().any(|l| l.contains("nothing recorded")), "{ctx}");
}
