//! Running commands with a time limit, capturing what they did; the tools
//! the tests need, with the Debian package that installs each.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default time limit of one fctrace command.
pub const FCTRACE_TIMEOUT: Duration = Duration::from_secs(180);

/// What a finished command did.
#[derive(Debug, Clone)]
pub struct Run {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }
    pub fn success(&self) -> bool {
        self.status.success()
    }
    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nstatus: {}\n--- stdout ({} bytes) ---\n{}\n--- stderr ({} bytes) ---\n{}",
            self.cmdline,
            self.status,
            self.stdout.len(),
            clip(&self.stdout, 6000),
            self.stderr.len(),
            clip(&self.stderr, 6000)
        )
    }
    /// Panics if the command failed.
    #[track_caller]
    pub fn expect_success(&self) -> &Self {
        assert!(self.success(), "command failed\n{}", self.describe());
        self
    }
}

/// Cuts long text for assertion messages: head and tail.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut head = max * 2 / 3;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - max / 3;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

fn describe_command(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(char::is_whitespace) {
            s.push_str(&format!("'{a}'"));
        } else {
            s.push_str(&a);
        }
    }
    s
}

/// A started command whose stdout and stderr are being collected.
pub struct Spawned {
    pub child: Child,
    /// Its stdin, when it was started with a pipe there.
    pub stdin: Option<ChildStdin>,
    pub cmdline: String,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
}

/// Starts a command with `stdin` as its stdin, its stdout and stderr
/// captured.
pub fn spawn_captured(cmd: &mut Command, stdin: Stdio) -> Spawned {
    let cmdline = describe_command(cmd);
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        let program = Path::new(cmd.get_program());
        match program.file_name().and_then(|n| n.to_str()).map(package_of) {
            Some(Some(package)) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{}", missing_tool(&program.to_string_lossy(), package))
            }
            _ => panic!("cannot start `{cmdline}`: {e}"),
        }
    });
    fn read_all(mut from: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = from.read_to_end(&mut v);
            v
        })
    }
    Spawned {
        stdin: child.stdin.take(),
        out: read_all(child.stdout.take().unwrap()),
        err: read_all(child.stderr.take().unwrap()),
        child,
        cmdline,
    }
}

impl Spawned {
    /// Closes its stdin and waits for its end, with no time limit (for
    /// callers that have made it end, under a time limit of their own).
    pub fn finish(mut self) -> Run {
        drop(self.stdin.take());
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.cmdline));
        self.output(status)
    }

    /// Everything it wrote, once it has ended with `status`.
    fn output(self, status: ExitStatus) -> Run {
        Run {
            cmdline: self.cmdline,
            status,
            stdout: String::from_utf8_lossy(&self.out.join().unwrap()).into_owned(),
            stderr: String::from_utf8_lossy(&self.err.join().unwrap()).into_owned(),
        }
    }
}

/// Runs a command to its end, stdin closed, stdout and stderr captured,
/// killed (and the test failed) if it runs longer than `timeout`.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Run {
    let mut spawned = spawn_captured(cmd, Stdio::null());
    let start = Instant::now();
    loop {
        match spawned.child.try_wait() {
            Ok(Some(status)) => return spawned.output(status),
            Ok(None) => {}
            Err(e) => panic!("waiting for `{}`: {e}", spawned.cmdline),
        }
        if start.elapsed() > timeout {
            let _ = spawned.child.kill();
            let r = spawned.finish();
            panic!(
                "`{}` still running after {timeout:?}: killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                r.cmdline,
                clip(&r.stdout, 4000),
                clip(&r.stderr, 4000)
            );
        }
        // Polling for the time limit only; the result does not depend on it.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The Debian package of a tool the tests run (what `scripts/test`
/// installs for it).
pub fn package_of(tool: &str) -> Option<&'static str> {
    const SAME_NAME: &[&str] = &[
        "zsh",
        "fish",
        "tmux",
        "less",
        "strace",
        "valgrind",
        "chromium",
        "cpio",
        "python3",
        "gcc",
        "g++",
        "debuginfod",
    ];
    if let Some(name) = SAME_NAME.iter().find(|t| **t == tool) {
        return Some(name);
    }
    Some(match tool {
        "man" => "man-db",
        "groff" => "groff-base",
        "script" => "bsdutils",
        "setpriv" | "unshare" => "util-linux",
        "dot" => "graphviz",
        "protoc" => "protobuf-compiler",
        "node" => "nodejs",
        "go" => "golang-go",
        "java" | "javac" => "default-jdk-headless",
        "qemu-system-x86_64" => "qemu-system-x86",
        "busybox" => "busybox-static",
        "xz" => "xz-utils",
        "kill" => "procps",
        "gprof" | "objdump" | "objcopy" | "readelf" | "strip" | "c++filt" | "ld.gold" => "binutils",
        "timeout" | "mkfifo" | "env" | "id" => "coreutils",
        "mount" | "umount" => "mount",
        "ldd" => "libc-bin",
        _ => return None,
    })
}

/// What a test says when a tool it needs is missing.
fn missing_tool(tool: &str, package: &str) -> String {
    format!(
        "{tool} not found: apt-get install {package} \
         (or run ./scripts/test, which installs what the tests need)"
    )
}

/// The path of `tool` on PATH; a missing tool fails the test with the
/// line that installs its Debian `package` (never a silent skip).
#[track_caller]
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{}", missing_tool(tool, package)))
}

pub fn run(cmd: &mut Command) -> Run {
    run_with_timeout(cmd, FCTRACE_TIMEOUT)
}

/// Runs a tool of the machine (gcc, objdump, ...), panics if it fails.
#[track_caller]
pub fn tool(program: &str, args: &[&OsStr]) -> Run {
    let r = run_with_timeout(Command::new(program).args(args), Duration::from_secs(900));
    r.expect_success();
    r
}

/// Whether this is the process to run the test `test` (of the module
/// `module`, as `module_path!()` names it) in: a test that changes state
/// of its whole process (`prctl(PR_SET_CHILD_SUBREAPER)`) runs alone in a
/// child process of the test binary, so that the other tests of the binary
/// never share it. In the test binary's own process this runs the child,
/// checks the test passed there, and returns false; in the child, true.
pub fn in_own_process(module: &str, test: &str) -> bool {
    const VAR: &str = "FCTRACE_TEST_ALONE";
    let module = module.split_once("::").map_or("", |(_, m)| m);
    let name = if module.is_empty() {
        test.to_string()
    } else {
        format!("{module}::{test}")
    };
    if std::env::var_os(VAR).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let r = run_with_timeout(
        Command::new(exe)
            .args([&name, "--exact", "--nocapture", "--test-threads=1"])
            .env(VAR, &name),
        Duration::from_secs(600),
    );
    eprintln!("{}", r.describe());
    assert!(
        r.success() && r.stdout.contains("test result: ok. 1 passed"),
        "{name} failed in its own process"
    );
    false
}
