//! A process driven through its stdin, its stdout (and stderr) read line
//! by line on threads: for tests that attach to a running program.

use crate::paths::fctrace_bin;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A process whose stdout is read line by line on a thread.
pub struct Driven {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Driven {
    pub fn start(cmd: &mut Command) -> Driven {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start");
        let stdin = child.stdin.take();
        let lines = read_lines(child.stdout.take().unwrap());
        Driven {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line of its stdout containing `what` (a minute at
    /// most).
    pub fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.seen.iter().any(|l| l.contains(what)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no line with {what:?} within a minute: {:?}", self.seen);
                }
            }
        }
    }

    /// Its whole stdout and exit status once it ends (a minute at most).
    pub fn finish(mut self) -> (String, std::process::ExitStatus) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("still running a minute after quit: {:?}", self.seen);
            }
            // Polling for the time limit only.
            std::thread::sleep(Duration::from_millis(5));
        };
        self.seen.extend(self.lines.iter());
        (self.seen.join("\n"), status)
    }

    /// Waits (a minute at most) for a line that contains `what` from
    /// another reader (`from`: its stderr, or another process's); returns
    /// the lines read.
    pub fn wait_on(&mut self, from: &Receiver<String>, what: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = Vec::new();
        while !got.iter().any(|l: &String| l.contains(what)) {
            match from.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) => got.push(l),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no line with {what:?}: {got:?} after {:?}", self.seen);
                }
            }
        }
        self.seen.extend(got.iter().cloned());
        got
    }

    /// Writes `line` and its newline in one write(2): a program blocked
    /// in read(2) then gets the whole line (writeln! wrote the text and
    /// the newline apart, and small_stack.c read "go" alone now and then).
    pub fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(format!("{line}\n").as_bytes()).unwrap();
        w.flush().unwrap();
    }
}

pub fn read_lines(from: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(from).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs the program driven through stdin: attached once it is ready, then
/// `rounds` rounds ("run" lines, each answered by "round N"); with `detach`, Ctrl-C on fctrace (the process must run
/// on) and one more round untraced. Returns the program's stdout and exit
/// code, and fctrace's stderr and exit code.
pub fn attached(
    prog: &mut Command,
    dir: &Path,
    opts: &[&str],
    rounds: u64,
    detach: bool,
) -> (String, Option<i32>, String, Option<i32>) {
    let mut prog = Driven::start(prog);
    let out = std::mem::replace(&mut prog.lines, channel().1);
    prog.wait_on(&out, "ready");
    let pid = prog.child.id();
    let mut tracer = Driven::start(
        Command::new(fctrace_bin())
            .args(["record", "-d"])
            .arg(dir)
            .args(opts)
            .args(["-p", &pid.to_string()]),
    );
    let err = read_lines(tracer.child.stderr.take().unwrap());
    let mut said = tracer.wait_on(&err, "attached");
    for r in 1..=rounds {
        prog.send("run");
        prog.wait_on(&out, &format!("round {r}"));
    }
    if detach {
        let st = Command::new("kill")
            .args(["-INT", &tracer.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        said.extend(tracer.wait_on(&err, &format!("detached from process {pid}")));
        prog.send("run");
        prog.wait_on(&out, &format!("round {}", rounds + 1));
    }
    prog.send("quit");
    drop(prog.stdin.take());
    let status = prog.child.wait().unwrap();
    prog.seen.extend(out.iter());
    let fstatus = tracer.child.wait().unwrap();
    said.extend(err.iter());
    (
        prog.seen.join("\n") + "\n",
        status.code(),
        said.join("\n"),
        fstatus.code(),
    )
}

/// Runs `cmd` with `input` on its stdin; its stdout and exit code.
pub fn run_with_input(cmd: &mut Command, input: &str) -> (String, Option<i32>) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}
