//! Endings: programs that end from deep inside their call tree, by exit(),
//! _exit(), abort(), a segmentation fault, SIGKILL, Ctrl-C or SIGTERM
//! (tests/programs/endings.c). For each: the same stdout, stderr and exit
//! status (or death by the same signal) with and without fctrace; the trace
//! is readable and its call tree nests properly up to the end, the frames
//! that never returned shown as such (` (not returned)`); calls are counted
//! as callgrind counts them where callgrind can run the program.
//!
//! Synchronisation with a running program is by a FIFO: it writes
//! `ready <pid>` when it has made its calls, then blocks in pause(); the
//! test waits for that line, then until /proc/PID/syscall shows the
//! process blocked in pause(), so that it is stopped in an exact state.

use fctrace_testkit::*;
use libc::{SIGABRT, SIGINT, SIGKILL, SIGSEGV, SIGTERM};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Time limit for a program to get ready, or for fctrace to end.
const LIMIT: Duration = Duration::from_secs(120);

fn endings(opt: &str) -> PathBuf {
    c_program("endings.c", opt, &[opt])
}

/// The functions the trees below are projected on: the program's own and
/// the library calls that end it.
const OWN: &[&str] = &[
    "main()",
    "descend()",
    "leave()",
    "exit()",
    "_exit()",
    "abort()",
    "crash()",
    "at_exit_handler()",
    "cleanup_helper()",
    "ready()",
    "wait_forever()",
    "pause()",
];

/// `main() > descend() x6 > leave()`, all open, then `inner` under leave()
/// (an outline indented from depth 8).
fn deep_outline(inner: &str) -> String {
    let mut s = String::from("main() (open)\n");
    for depth in 1..=6 {
        s.push_str(&format!("{}descend() (open)\n", "  ".repeat(depth)));
    }
    s.push_str(&format!("{}leave() (open)\n", "  ".repeat(7)));
    for line in expected_outline(inner).lines() {
        s.push_str(&format!("{}{line}\n", "  ".repeat(8)));
    }
    s
}

/// The main thread's tree projected on [`OWN`] (signal markers left out),
/// as an outline.
#[track_caller]
fn own_outline(tree: &Replay) -> String {
    let main = tree.main_thread().expect("a thread runs main()");
    outline(&project(&main.roots, &|l| OWN.contains(&l)))
}

/// `fctrace info`'s exit status line.
#[track_caller]
fn info_exit_line(dir: &Path) -> String {
    info_text(dir)
        .lines()
        .find(|l| l.starts_with("Exit status:"))
        .unwrap_or_default()
        .to_string()
}

/// The lines of the first task's block in the replay text.
fn first_task_lines(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("# task "))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("# task "))
        .collect()
}

// ---------------------------------------------------------------------------
// exit, _exit, abort, segfault
// ---------------------------------------------------------------------------

#[test]
fn exit_from_deep_inside() {
    for opt in ["-O0", "-O2"] {
        let exe = endings(opt);
        let native = run_with_timeout(Command::new(&exe).args(["exit", "3"]), LIMIT);
        assert_eq!(native.code(), Some(3), "{}", native.describe());
        assert_eq!(native.stdout, "buffered output of exit\n");
        assert_eq!(native.stderr, "start\nleaving\natexit handler\n");
        let Recorded { dir, run: traced } = record_any(&exe, &["exit", "3"], &[]);
        let ctx = format!("endings {opt} exit 3 (trace {})", dir.path.display());
        assert_same_behaviour(&native, &traced, &ctx);

        let tree = replay(&dir.path);
        // exit() never returns: every frame under main stays open; the
        // atexit handler, called by exit(), returns.
        assert_outline_eq(
            &own_outline(&tree),
            &deep_outline(
                "
                exit() (open)
                  at_exit_handler()
                    cleanup_helper()
                ",
            ),
            &ctx,
        );
        let rep = report(&dir.path);
        for (name, n) in [
            ("main", 1),
            ("descend", 6),
            ("leave", 1),
            ("exit", 1),
            ("at_exit_handler", 1),
            ("cleanup_helper", 1),
        ] {
            assert_eq!(rep.calls(name), n, "{ctx}: calls of {name}");
        }
        assert_eq!(
            info_exit_line(&dir.path),
            "Exit status:    exited with code 3"
        );

        // Status 0, so callgrind can run it: the same counts.
        assert_counts_match_callgrind(&exe, &["exit", "0"], &CompareOptions::default());
    }
}

#[test]
fn underscore_exit_from_deep_inside() {
    for opt in ["-O0", "-O2"] {
        let exe = endings(opt);
        let native = run_with_timeout(Command::new(&exe).args(["_exit", "4"]), LIMIT);
        assert_eq!(native.code(), Some(4), "{}", native.describe());
        // No atexit handler, stdout's buffer is lost.
        assert_eq!(native.stdout, "");
        assert_eq!(native.stderr, "start\nleaving\n");
        let Recorded { dir, run: traced } = record_any(&exe, &["_exit", "4"], &[]);
        let ctx = format!("endings {opt} _exit 4 (trace {})", dir.path.display());
        assert_same_behaviour(&native, &traced, &ctx);
        let tree = replay(&dir.path);
        assert_outline_eq(&own_outline(&tree), &deep_outline("_exit() (open)"), &ctx);
        assert_eq!(report(&dir.path).calls("descend"), 6, "{ctx}");
        assert_counts_match_callgrind(&exe, &["_exit", "0"], &CompareOptions::default());
    }
}

#[test]
fn abort_from_deep_inside() {
    for opt in ["-O0", "-O2"] {
        let exe = endings(opt);
        let native = run_with_timeout(Command::new(&exe).arg("abort"), LIMIT);
        assert_eq!(native.signal(), Some(SIGABRT), "{}", native.describe());
        let Recorded { dir, run: traced } = record_any(&exe, &["abort"], &[]);
        let ctx = format!("endings {opt} abort (trace {})", dir.path.display());
        // fctrace finishes the trace, then dies by SIGABRT too.
        assert_same_behaviour(&native, &traced, &ctx);
        let tree = replay(&dir.path);
        assert_outline_eq(&own_outline(&tree), &deep_outline("abort() (open)"), &ctx);
        let rep = report(&dir.path);
        assert_eq!((rep.calls("descend"), rep.calls("abort")), (6, 1), "{ctx}");
        assert_eq!(
            info_exit_line(&dir.path),
            "Exit status:    killed by signal 6 (SIGABRT)"
        );
    }
}

#[test]
fn segfault_deep_inside() {
    for opt in ["-O0", "-O2"] {
        let exe = endings(opt);
        let native = run_with_timeout(Command::new(&exe).arg("segv"), LIMIT);
        assert_eq!(native.signal(), Some(SIGSEGV), "{}", native.describe());
        let Recorded { dir, run: traced } = record_any(&exe, &["segv"], &[]);
        let ctx = format!("endings {opt} segv (trace {})", dir.path.display());
        assert_same_behaviour(&native, &traced, &ctx);
        let tree = replay(&dir.path);
        assert_outline_eq(&own_outline(&tree), &deep_outline("crash() (open)"), &ctx);
        assert_eq!(report(&dir.path).calls("crash"), 1, "{ctx}");
        assert_eq!(
            info_exit_line(&dir.path),
            "Exit status:    killed by signal 11 (SIGSEGV)"
        );
    }
}

/// The crash is shown where it happened: the fatal SIGSEGV is the crashing
/// thread's last event, inside crash() (needs the agent to record fatal
/// signals).
#[test]
fn segfault_signal_is_the_last_event() {
    for opt in ["-O0", "-O2"] {
        let exe = endings(opt);
        let Recorded { dir, run: traced } = record_any(&exe, &["segv"], &[]);
        assert_eq!(traced.signal(), Some(SIGSEGV), "{}", traced.describe());
        let (text, _) = replay_with_text(&dir.path);
        let lines = first_task_lines(&text);
        let last_event = lines
            .iter()
            .rev()
            .find(|l| !l.ends_with(" (not returned)"))
            .unwrap_or_else(|| panic!("no event in\n{text}"));
        // main 0, descend 1..=6, leave 7, crash 8: the signal at depth 9.
        let want = format!("{}/* signal SIGSEGV */", "  ".repeat(9));
        assert_eq!(
            last_event.split_once("] | ").map(|(_, text)| text),
            Some(want.as_str()),
            "endings {opt} segv: the last event is the signal, inside crash()\n{}",
            clip(&text, 6000)
        );
        assert_eq!(marker_lines(lines.iter().copied()).len(), 1, "{text}");
    }
}

// ---------------------------------------------------------------------------
// Killed while running: SIGKILL, Ctrl-C, SIGTERM
// ---------------------------------------------------------------------------

/// A FIFO in a fresh directory; its reader side, opened read-write so that
/// opening does not wait for the writer, delivers lines on a channel.
struct Fifo {
    _dir: TraceDir,
    path: PathBuf,
    lines: mpsc::Receiver<String>,
}

impl Fifo {
    fn new() -> Fifo {
        let dir = TraceDir::new("fifo");
        std::fs::create_dir_all(&dir.path).unwrap();
        let path = dir.path.join("ready");
        tool("mkfifo", &[path.as_os_str()]);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(file).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Fifo {
            _dir: dir,
            path,
            lines: rx,
        }
    }

    /// Waits for `ready <pid>`; returns the pid.
    #[track_caller]
    fn wait_ready(&self) -> u32 {
        let line = self
            .lines
            .recv_timeout(LIMIT)
            .expect("the program did not get ready");
        line.strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a readiness line: {line:?}"))
    }
}

/// Waits until process `pid` is blocked in pause() (its readiness line is
/// written just before: this makes the state the test stops it in exact).
/// Watches /proc/PID/syscall, which shows the system call a blocked
/// process is in; a condition wait, with a time limit.
#[track_caller]
fn wait_in_pause(pid: u32) {
    let path = format!("/proc/{pid}/syscall");
    let start = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (did the program end?)"));
        if text.split_whitespace().next() == Some(&libc::SYS_pause.to_string()) {
            return;
        }
        assert!(
            start.elapsed() < LIMIT,
            "process {pid} never blocked in pause(): {text}"
        );
        std::thread::yield_now();
    }
}

/// Types Ctrl-C on the terminal of a command run by [`Stop::TerminalCtrlC`].
fn type_ctrl_c(running: &mut Spawned) {
    use std::io::Write;
    let stdin = running.stdin.as_mut().unwrap();
    stdin.write_all(b"\x03").unwrap();
    stdin.flush().unwrap();
}

/// `kill -SIG target` (target: a pid, or `-pgid` for a process group).
#[track_caller]
fn kill(sig: i32, target: &str) {
    let sig = format!("-{sig}");
    tool(
        "kill",
        &[OsStr::new(&sig), OsStr::new("--"), OsStr::new(target)],
    );
}

/// How the test stops the running program.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGKILL to the program.
    KillProgram,
    /// SIGINT to the whole process group, as Ctrl-C does (fctrace gets it
    /// with si_code SI_USER and passes it on too).
    CtrlC,
    /// SIGTERM to fctrace only.
    TermFctrace,
    /// SIGINT to fctrace only, with kill(): passed on.
    IntFctrace,
    /// Ctrl-C typed on a terminal: the command runs under `script`, in a
    /// pseudo-terminal whose foreground process group it is; the terminal
    /// sends SIGINT (si_code SI_KERNEL) to fctrace and the program, and
    /// fctrace must not pass it on, only wait for the program to end.
    TerminalCtrlC,
}

/// Quotes a word for `sh -c`.
fn sh_quote(word: &OsStr) -> String {
    format!("'{}'", word.to_str().unwrap().replace('\'', "'\\''"))
}

/// Runs `endings wait FIFO` natively and under fctrace, each in its own
/// process group, stops it with `stop` once it is ready; asserts both
/// behave the same and the trace is that of the stopped program
/// ([`check_stopped_trace`]). Returns the native run and the trace.
#[track_caller]
fn run_stopped(opt: &str, stop: Stop, what: &str) -> (Run, TraceDir) {
    let exe = endings(opt);
    let go = |fctrace: Option<&Path>| -> Run {
        let fifo = Fifo::new();
        let fifo_arg = fifo.path.to_str().unwrap().to_string();
        let mut cmd = maybe_recorded(&exe, fctrace);
        cmd.args(["wait", &fifo_arg]).process_group(0);
        if let Stop::TerminalCtrlC = stop {
            // `script -c` runs `sh -c 'exec COMMAND'` as the foreground
            // process group of a new pseudo-terminal; what it reads on its
            // stdin is typed on that terminal. -e: its status is the
            // command's (128+N for a signal N).
            let mut line = sh_quote(cmd.get_program());
            for a in cmd.get_args() {
                line.push(' ');
                line.push_str(&sh_quote(a));
            }
            let mut script = Command::new("script");
            script
                .arg("-qefc")
                .arg(format!("exec {line}"))
                .arg("/dev/null")
                .env("SHELL", "/bin/sh");
            cmd = script;
        }
        let mut running = spawn_captured(&mut cmd, Stdio::piped());
        let top = running.child.id();
        let program = fifo.wait_ready();
        wait_in_pause(program);
        match (stop, fctrace.is_some()) {
            (Stop::KillProgram, _) => kill(SIGKILL, &program.to_string()),
            (Stop::CtrlC, _) => kill(SIGINT, &format!("-{top}")),
            (Stop::TermFctrace, true) => kill(SIGTERM, &top.to_string()),
            (Stop::TermFctrace, false) => kill(SIGTERM, &program.to_string()),
            (Stop::IntFctrace, true) => kill(SIGINT, &top.to_string()),
            (Stop::IntFctrace, false) => kill(SIGINT, &program.to_string()),
            (Stop::TerminalCtrlC, _) => type_ctrl_c(&mut running),
        }
        running.finish()
    };
    let native = go(None);
    let dir = TraceDir::new("endings-stopped");
    let traced = go(Some(&dir.path));
    assert_recorder_ending(&traced, &dir.path);
    let ctx = format!("endings wait, {what} (trace {})", dir.path.display());
    assert_same_behaviour(&native, &traced, &ctx);
    check_stopped_trace(&dir.path, &ctx);
    (native, dir)
}

/// The trace of a program stopped while blocked in pause(): everything
/// before is there, ready() returned, the rest is open.
#[track_caller]
fn check_stopped_trace(dir: &Path, ctx: &str) {
    let tree = replay(dir);
    assert_outline_eq(
        &own_outline(&tree),
        &deep_outline(
            "
            ready()
            wait_forever() (open)
              pause() (open)
            ",
        ),
        ctx,
    );
    let rep = report(dir);
    for (name, n) in [("descend", 6), ("ready", 1), ("pause", 1)] {
        assert_eq!(rep.calls(name), n, "{ctx}: calls of {name}");
    }
}

#[test]
fn sigkill_of_the_program() {
    let (native, dir) = run_stopped("-O2", Stop::KillProgram, "SIGKILL");
    assert_eq!(native.signal(), Some(SIGKILL), "{}", native.describe());
    assert_eq!(native.stderr, "start\nleaving\n");
    assert_eq!(
        info_exit_line(&dir.path),
        "Exit status:    killed by signal 9 (SIGKILL)"
    );
}

#[test]
fn ctrl_c_to_the_process_group() {
    let (native, dir) = run_stopped("-O2", Stop::CtrlC, "Ctrl-C");
    assert_eq!(native.signal(), Some(SIGINT), "{}", native.describe());
    assert_eq!(
        info_exit_line(&dir.path),
        "Exit status:    killed by signal 2 (SIGINT)"
    );
}

#[test]
fn sigterm_to_fctrace_only() {
    let (native, dir) = run_stopped("-O0", Stop::TermFctrace, "SIGTERM to fctrace");
    assert_eq!(native.signal(), Some(SIGTERM), "{}", native.describe());
    assert_eq!(
        info_exit_line(&dir.path),
        "Exit status:    killed by signal 15 (SIGTERM)"
    );
}

/// `kill -INT <fctrace>`: not from the terminal, so the program would not
/// get it: fctrace passes it on, and the program stops as by Ctrl-C.
#[test]
fn sigint_to_fctrace_only() {
    let (native, dir) = run_stopped("-O0", Stop::IntFctrace, "SIGINT to fctrace");
    assert_eq!(native.signal(), Some(SIGINT), "{}", native.describe());
    assert_eq!(
        info_exit_line(&dir.path),
        "Exit status:    killed by signal 2 (SIGINT)"
    );
}

/// Ctrl-C from a real (pseudo-)terminal: the program and fctrace both get
/// SIGINT from the kernel; fctrace does not pass it on, waits for the
/// program, which dies by SIGINT as without fctrace, writes the trace and
/// dies by SIGINT too (`script -e` reports 130 for both).
#[test]
fn ctrl_c_from_a_terminal() {
    let (native, dir) = run_stopped("-O2", Stop::TerminalCtrlC, "Ctrl-C on a terminal");
    assert_eq!(native.code(), Some(128 + SIGINT), "{}", native.describe());
    // On a terminal stdout is line-buffered: its line is shown too; the
    // terminal echoes the Ctrl-C.
    assert_eq!(
        native.stdout,
        "buffered output of wait\r\nstart\r\nleaving\r\n^C",
        "{}",
        native.describe()
    );
    assert_eq!(
        info_exit_line(&dir.path),
        "Exit status:    killed by signal 2 (SIGINT)"
    );
}

// ---------------------------------------------------------------------------
// A signal sent to the process group reaches the program once
// ---------------------------------------------------------------------------

/// How the test signals sigcount.c (natively, or fctrace running it).
#[derive(Clone, Copy, Debug)]
enum Send {
    /// SIGTERM to the process group of fctrace (or of the program).
    GroupTerm,
    /// SIGTERM to fctrace only (natively: to the program).
    TermTop,
}

/// Runs `sigcount FIFO MODE` natively and under fctrace, each in its own
/// process group, and sends SIGTERM (from this process) as `send` says
/// once it is in pause(); both print `count 1 code 0 from <this
/// process>`, exit 0, and the trace is readable.
#[track_caller]
fn count_signals(mode: &str, send: Send) {
    let exe = c_program("sigcount.c", "-O2", &["-O2"]);
    let me = std::process::id();
    let go = |fctrace: Option<&Path>| -> Run {
        let fifo = Fifo::new();
        let fifo_arg = fifo.path.to_str().unwrap().to_string();
        let mut cmd = maybe_recorded(&exe, fctrace);
        cmd.args([&fifo_arg, mode]).process_group(0);
        let running = spawn_captured(&mut cmd, Stdio::null());
        let top = running.child.id() as i32;
        let program = fifo.wait_ready();
        wait_in_pause(program);
        let target = match send {
            Send::GroupTerm => -top,
            Send::TermTop => top,
        };
        // SAFETY: kill(2) with plain integers.
        assert_eq!(unsafe { libc::kill(target, SIGTERM) }, 0);
        running.finish()
    };
    let native = go(None);
    let expected = if mode == "info" {
        format!("count 1 code 0 from {me}\n")
    } else {
        "count 1 code -1 from -1\n".to_string()
    };
    assert_eq!(native.stdout, expected, "native: {}", native.describe());
    let dir = TraceDir::new("sigcount");
    let traced = go(Some(&dir.path));
    assert_recorder_ending(&traced, &dir.path);
    let ctx = format!("sigcount {mode}, {send:?} (trace {})", dir.path.display());
    assert_same_behaviour(&native, &traced, &ctx);
    assert_eq!(traced.stdout, expected, "{ctx}: {}", traced.describe());
}

#[test]
fn sigterm_to_the_process_group_reaches_a_handler_once() {
    count_signals("info", Send::GroupTerm);
    count_signals("plain", Send::GroupTerm);
}

#[test]
fn sigterm_to_fctrace_alone_reaches_a_handler_once() {
    count_signals("info", Send::TermTop);
    count_signals("plain", Send::TermTop);
}

/// `timeout -s INT 5 COMMAND` as a test runs it (timeout sends SIGINT to
/// its child, then to its whole process group).
fn under_timeout(command: &[&OsStr]) -> Run {
    let timeout = "timeout";
    require_tool(timeout, "coreutils");
    let mut cmd = Command::new(timeout);
    cmd.args(["-s", "INT", "5"]).args(command);
    run_with_timeout(&mut cmd, LIMIT)
}

/// sigcount.c under `timeout -s INT`: its handler counts one SIGINT, from
/// timeout (the sender of both copies), as natively when timeout's two
/// sends come before the handler runs.
#[test]
fn timeout_sigint_reaches_a_handler_once() {
    let exe = c_program("sigcount.c", "-O2", &["-O2"]);
    let native = under_timeout(&[exe.as_os_str(), OsStr::new(""), OsStr::new("info")]);
    let dir = TraceDir::new("sigcount-timeout");
    let traced = under_timeout(&[
        OsStr::new(fctrace_bin().as_os_str()),
        OsStr::new("record"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
        exe.as_os_str(),
        OsStr::new(""),
        OsStr::new("info"),
    ]);
    // The sender is timeout, whose pid differs between the runs.
    let shape = |r: &Run| -> String {
        let line = r.stdout.trim_end();
        let (head, from) = line.rsplit_once(' ').unwrap_or((line, ""));
        assert!(from.parse::<u32>().is_ok_and(|p| p > 1), "{}", r.describe());
        head.to_string()
    };
    // Natively the handler sees one copy, or two when it ran between
    // timeout's two sends (seen once in CI under load: the child ran its
    // handler on the other CPU before timeout's kill(0)). Under fctrace,
    // which passes the first on and keeps the group's copy from the
    // handler, one.
    let native_shape = shape(&native);
    assert!(
        ["count 1 code 0 from", "count 2 code 0 from"].contains(&native_shape.as_str()),
        "{}",
        native.describe()
    );
    assert_eq!(
        shape(&traced),
        "count 1 code 0 from",
        "{}",
        traced.describe()
    );
    assert_eq!(native.code(), Some(124), "{}", native.describe());
    assert_eq!(traced.code(), native.code(), "{}", traced.describe());
    assert_eq!(traced.stderr, native.stderr, "{}", traced.describe());
    assert_recorder_ending(&traced, &dir.path);
}

/// Python under `timeout -s INT`: its KeyboardInterrupt traceback, as
/// natively (a second SIGINT while it prints it gave `lost sys.stderr`).
#[test]
fn timeout_sigint_gives_python_its_keyboard_interrupt() {
    let python = Path::new("/usr/bin/python3");
    assert!(
        python.exists(),
        "python3 not found: apt-get install python3"
    );
    // Some work before the traceback: a second SIGINT meanwhile raises a
    // second KeyboardInterrupt (or, later, `lost sys.stderr`).
    let script = "import time\nprint('ready', flush=True)\ntry:\n    time.sleep(60)\n\
                  except KeyboardInterrupt:\n    sum(range(3000000))\n    raise\n";
    // timeout sends SIGINT to python, then to its process group (python
    // again): the kernel merges the two pending signals, but on a busy
    // machine the second can come after Python took the first, and a
    // second KeyboardInterrupt interrupts the handling of the first (seen
    // natively in 1 run of 8 while two test suites ran). fctrace passes one
    // on for the pair; compare with a native run where the two were one.
    let native = (0..5)
        .map(|_| under_timeout(&[python.as_os_str(), OsStr::new("-c"), OsStr::new(script)]))
        .find(|r| !r.stderr.contains("During handling of the above exception"))
        .expect("5 native runs each got two KeyboardInterrupts");
    // Twice: the second copy's timing varied (it was seen in one run of
    // two before the fix).
    for _ in 0..2 {
        let dir = TraceDir::new("python-timeout");
        let traced = under_timeout(&[
            OsStr::new(fctrace_bin().as_os_str()),
            OsStr::new("record"),
            OsStr::new("-d"),
            dir.path.as_os_str(),
            python.as_os_str(),
            OsStr::new("-c"),
            OsStr::new(script),
        ]);
        assert!(
            native.stderr.ends_with("KeyboardInterrupt\n"),
            "{}",
            native.describe()
        );
        assert_eq!(native.stdout, "ready\n", "{}", native.describe());
        assert_eq!(traced.stdout, native.stdout, "{}", traced.describe());
        // fctrace's own note first (python3 is stripped), then the program's.
        let program_err: String = traced
            .stderr
            .lines()
            .filter(|l| !l.starts_with("fctrace: /usr/bin/python3"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(program_err, native.stderr, "{}", traced.describe());
        assert_eq!(traced.code(), native.code(), "{}", traced.describe());
    }
}

/// `exe` natively, or under `fctrace record -d DIR` with `Some(DIR)`.
fn maybe_recorded(exe: &Path, fctrace: Option<&Path>) -> Command {
    match fctrace {
        Some(dir) => {
            let mut c = Command::new(fctrace_bin());
            c.arg("record").arg("-d").arg(dir).arg(exe);
            c
        }
        None => Command::new(exe),
    }
}
