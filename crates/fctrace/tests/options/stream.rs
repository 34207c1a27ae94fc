//! `fctrace record --host/--port` and `fctrace recv` (uftrace's
//! streaming) on loopback, recv on a free port it picks (`--port 0`, the
//! port read from its "listening on" line). stream.c at -O0: main calls
//! a() three times, a calls b, b calls c; the expected tree is that, not
//! fctrace's output. Hostile streams are written by hand and must be
//! refused, with nothing written outside (nor inside) recv's directory.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

fn program() -> PathBuf {
    c_program("stream.c", "-O0", &["-O0"])
}

/// main's tree as stream.c makes it, in replay's shape without durations.
fn expected_tree() -> Vec<String> {
    let mut v = vec!["main() {".to_string()];
    for _ in 0..3 {
        v.extend(
            [
                "  a() {",
                "    b() {",
                "      c();",
                "    } /* b */",
                "  } /* a */",
            ]
            .map(String::from),
        );
    }
    v.push("} /* main */".into());
    v
}

/// The call lines of a replay, durations and task ids stripped.
fn shape(replay: &str) -> Vec<String> {
    replay
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("| ").map(|(_, f)| f.trim_end().to_string()))
        .collect()
}

/// A running `fctrace recv`, its stderr read line by line.
struct Recv {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    port: u16,
}

impl Recv {
    fn start(dir: &Path) -> Recv {
        Recv::start_with(dir, &[])
    }

    fn start_with(dir: &Path, extra: &[&str]) -> Recv {
        let mut child = Command::new(fctrace_bin())
            .args(["recv", "--port", "0", "-d"])
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fctrace recv");
        let lines = read_lines(child.stderr.take().unwrap());
        let mut r = Recv {
            child,
            lines,
            seen: Vec::new(),
            port: 0,
        };
        let line = r.wait_for("listening on", 1);
        r.port = line
            .rsplit_once(':')
            .and_then(|(_, p)| p.split(',').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        r
    }

    /// Waits (a minute at most) until `n` lines of its stderr contain
    /// `what`; the last of them.
    fn wait_for(&mut self, what: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found: Vec<&String> = self.seen.iter().filter(|l| l.contains(what)).collect();
            if found.len() >= n {
                return found[n - 1].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "recv: no {n} lines with {what:?} within a minute: {:?}",
                        self.seen
                    );
                }
            }
        }
    }

    /// Ctrl-C: recv must end at once, with status 0.
    fn interrupt(mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on our own child's pid, not yet waited for.
        let sent = unsafe { libc::kill(pid, libc::SIGINT) };
        assert_eq!(sent, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "recv did not end on SIGINT");
            std::thread::yield_now();
        };
        assert_eq!(status.code(), Some(0), "recv after SIGINT: {:?}", self.seen);
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fctrace record --host HOST --port PORT -d LOCAL EXE ARGS...`.
fn record_to(host: &str, port: &str, local: &Path, exe: &Path, args: &[&OsStr]) -> Run {
    let mut all: Vec<&OsStr> = vec![
        "record".as_ref(),
        "--host".as_ref(),
        host.as_ref(),
        "--port".as_ref(),
        port.as_ref(),
        "-d".as_ref(),
        local.as_os_str(),
        exe.as_os_str(),
    ];
    all.extend_from_slice(args);
    fctrace(&all)
}

/// Every file under `dir` is 0600 and every folder 0700 (`dir` too).
fn assert_private(dir: &Path) {
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        if m.is_dir() {
            assert_private(&e.path());
        } else {
            assert_eq!(
                m.permissions().mode() & 0o777,
                0o600,
                "{}",
                e.path().display()
            );
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn received_trace_replays_as_the_local_one() {
    let exe = program();
    let base = TraceDir::new("stream");
    std::fs::create_dir_all(&base.path).unwrap();
    let got = base.path.join("got");
    let mut recv = Recv::start(&got);
    let local = base.path.join("run1.data");
    let port = recv.port.to_string();
    let r = record_to("127.0.0.1", &port, &local, &exe, &[]);
    assert!(r.success(), "record --host failed\n{}", r.describe());
    assert!(
        r.stderr.contains("trace sent to 127.0.0.1:"),
        "{}",
        r.describe()
    );
    recv.wait_for("received run1.data", 1);
    let received = got.join("run1.data");
    let (local_text, received_text) = (replay_text(&local), replay_text(&received));
    assert_eq!(
        shape(&local_text),
        expected_tree(),
        "local replay:\n{local_text}"
    );
    assert_eq!(
        shape(&received_text),
        expected_tree(),
        "received replay:\n{received_text}"
    );
    // The same trace, byte for byte: the same replay, times included.
    assert_eq!(local_text, received_text);
    assert_private(&got);
    assert_eq!(names(&got), ["run1.data"]);
    // A second trace of the same name replaces the first, whole.
    let r = record_to("localhost", &port, &local, &exe, &[]);
    assert!(r.success(), "second record --host failed\n{}", r.describe());
    recv.wait_for("received run1.data", 2);
    assert_eq!(shape(&replay_text(&received)), expected_tree());
    assert_eq!(names(&got), ["run1.data"]);
    recv.interrupt();
}

#[test]
fn closed_port_fails_before_the_program_runs() {
    let exe = program();
    let base = TraceDir::new("stream-closed");
    std::fs::create_dir_all(&base.path).unwrap();
    // A port nobody listens on: bound, then closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let marker = base.path.join("ran");
    let local = base.path.join("run.data");
    let r = record_to("127.0.0.1", &port, &local, &exe, &[marker.as_os_str()]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("cannot connect to 127.0.0.1:") && r.stderr.contains("not started"),
        "{}",
        r.describe()
    );
    assert!(!marker.exists(), "the program ran");
    assert!(!local.exists(), "a trace was written");
}

#[test]
fn lost_receiver_keeps_the_local_trace() {
    let exe = program();
    let base = TraceDir::new("stream-lost");
    std::fs::create_dir_all(&base.path).unwrap();
    let mut recv = Recv::start(&base.path.join("got"));
    let local = base.path.join("run.data");
    let mut rec = Driven::start(
        Command::new(fctrace_bin())
            .args(["record", "--host", "127.0.0.1", "--port"])
            .arg(recv.port.to_string())
            .arg("-d")
            .arg(&local)
            .arg(&exe)
            .arg("wait"),
    );
    rec.wait_for("ready");
    // The receiver goes away while the program runs.
    recv.child.kill().unwrap();
    recv.child.wait().unwrap();
    rec.send("go");
    let stderr = rec.child.stderr.take().unwrap();
    let (_, status) = rec.finish();
    let mut err = String::new();
    let mut stderr = stderr;
    stderr.read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "the program's status: {err}");
    assert!(
        err.contains("sending the trace to 127.0.0.1:") && err.contains("the trace is kept in"),
        "{err}"
    );
    let text = replay_text(&local);
    let tree = shape(&text);
    for (call, n) in [("a() {", 3), ("b() {", 3), ("c();", 3)] {
        assert_eq!(
            tree.iter().filter(|l| l.trim() == call).count(),
            n,
            "{call} in\n{text}"
        );
    }
}

/// One hand-written stream: its bytes, sent then the writing side shut.
struct Hostile {
    what: &'static str,
    bytes: Vec<u8>,
}

fn text(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

fn hello(name: &[u8]) -> Vec<u8> {
    let mut v = b"FCTRSEND".to_vec();
    v.extend(1u32.to_le_bytes());
    v.extend(text(name));
    v
}

fn file(path: &[u8], size: u64, data: &[u8]) -> Vec<u8> {
    let mut v = vec![b'F'];
    v.extend(text(path));
    v.extend(size.to_le_bytes());
    v.extend_from_slice(data);
    v
}

fn end(n: u64) -> Vec<u8> {
    let mut v = vec![b'E'];
    v.extend(n.to_le_bytes());
    v
}

fn hostile_streams() -> Vec<Hostile> {
    let cat = |parts: &[Vec<u8>]| parts.concat();
    let mut huge_name = b"FCTRSEND".to_vec();
    huge_name.extend(1u32.to_le_bytes());
    huge_name.extend(u32::MAX.to_le_bytes());
    let mut version = b"FCTRSEND".to_vec();
    version.extend(99u32.to_le_bytes());
    version.extend(text(b"v.data"));
    vec![
        Hostile {
            what: "bad magic",
            bytes: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        },
        Hostile {
            what: "bad version",
            bytes: version,
        },
        Hostile {
            what: "truncated magic",
            bytes: b"FCTR".to_vec(),
        },
        Hostile {
            what: "huge name length",
            bytes: huge_name,
        },
        Hostile {
            what: "name ..",
            bytes: cat(&[hello(b".."), end(0)]),
        },
        Hostile {
            what: "absolute name",
            bytes: cat(&[hello(b"/tmp/evil"), end(0)]),
        },
        Hostile {
            what: "name with a slash",
            bytes: cat(&[hello(b"../evil"), end(0)]),
        },
        Hostile {
            what: "name with NUL",
            bytes: cat(&[hello(b"ev\0il"), end(0)]),
        },
        Hostile {
            what: "over-long name",
            bytes: cat(&[hello(&[b'x'; 300]), end(0)]),
        },
        Hostile {
            what: "path traversal",
            bytes: cat(&[hello(b"t1.data"), file(b"../../escaped", 2, b"hi"), end(1)]),
        },
        Hostile {
            what: "traversal inside",
            bytes: cat(&[
                hello(b"t2.data"),
                file(b"tasks/../../../escaped", 2, b"hi"),
                end(1),
            ]),
        },
        Hostile {
            what: "absolute path",
            bytes: cat(&[hello(b"t3.data"), file(b"/tmp/escaped", 2, b"hi"), end(1)]),
        },
        Hostile {
            what: "huge file length",
            bytes: cat(&[
                hello(b"t4.data"),
                file(b"info.json", u64::MAX, b"{}"),
                end(1),
            ]),
        },
        Hostile {
            what: "truncated file",
            bytes: cat(&[hello(b"t5.data"), file(b"info.json", 100, b"{\"a\":")]),
        },
        Hostile {
            what: "no end frame",
            bytes: cat(&[hello(b"t6.data"), file(b"info.json", 2, b"{}")]),
        },
        Hostile {
            what: "wrong file count",
            bytes: cat(&[hello(b"t7.data"), file(b"info.json", 2, b"{}"), end(5)]),
        },
        Hostile {
            what: "unknown frame",
            bytes: cat(&[hello(b"t8.data"), vec![b'Z'; 9]]),
        },
        Hostile {
            what: "same file twice",
            bytes: cat(&[
                hello(b"t9.data"),
                file(b"info.json", 2, b"{}"),
                file(b"info.json", 2, b"{}"),
                end(2),
            ]),
        },
    ]
}

/// Sends `bytes` and reads until the receiver closes: its reply's status
/// byte (1: refused) if a reply came.
fn send_raw(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to recv");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // The receiver may close as soon as it refuses: a failed write is fine.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    reply
}

#[test]
fn hostile_streams_are_refused_and_write_nothing() {
    let base = TraceDir::new("stream-hostile");
    std::fs::create_dir_all(&base.path).unwrap();
    let got = base.path.join("got");
    let mut recv = Recv::start(&got);
    let streams = hostile_streams();
    for (i, h) in streams.iter().enumerate() {
        let reply = send_raw(recv.port, &h.bytes);
        // Each connection ends in one line: refused, or (wrongly) received.
        let line = recv.wait_for(": re", i + 1);
        assert!(line.contains("refused"), "{}: not refused: {line}", h.what);
        // A refusal, with its reason, when the stream got as far as one.
        if let Some(pos) = reply.windows(8).rposition(|w| w == b"FCTRRECV") {
            assert_eq!(reply.get(pos + 8), Some(&1), "{}: {reply:?}", h.what);
        }
        assert!(
            recv.child.try_wait().unwrap().is_none(),
            "{}: recv ended: {line}",
            h.what
        );
    }
    // Nothing was written: recv's directory is empty, its parent holds it only.
    assert_eq!(names(&got), Vec::<String>::new(), "{:?}", recv.seen);
    assert_eq!(names(&base.path), ["got"]);
    assert!(!Path::new("/tmp/escaped").exists());
    // recv still serves: a well-formed stream written by hand arrives.
    let ok = [
        hello(b"ok.data"),
        file(b"sessions/x.txt", 3, b"abc"),
        end(1),
    ]
    .concat();
    let reply = send_raw(recv.port, &ok);
    assert!(
        reply.ends_with(&[b'F', b'C', b'T', b'R', b'R', b'E', b'C', b'V', 0, 0, 0, 0, 0]),
        "{reply:?}"
    );
    recv.wait_for("received ok.data", 1);
    assert_eq!(
        std::fs::read(got.join("ok.data/sessions/x.txt")).unwrap(),
        b"abc"
    );
    assert_private(&got);
    // Ctrl-C while a trace arrives: what arrived of it is removed. The
    // name's acceptance (read here) comes once its directory exists.
    let mut partial = TcpStream::connect(("127.0.0.1", recv.port)).unwrap();
    partial
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    partial.write_all(&hello(b"partial.data")).unwrap();
    let mut ack = [0u8; 13];
    partial.read_exact(&mut ack).unwrap();
    assert_eq!(&ack[..9], b"FCTRRECV\0");
    assert_eq!(
        names(&got).len(),
        2,
        "no incoming directory: {:?}",
        names(&got)
    );
    partial
        .write_all(&file(b"info.json", 1000, b"{\"partial\":"))
        .unwrap();
    recv.interrupt();
    assert_eq!(names(&got), ["ok.data"]);
}

#[test]
fn help_lists_recv_and_host() {
    let help = fctrace(&["--help"]).stdout;
    assert!(
        help.lines().any(|l| l.trim_start().starts_with("recv ")),
        "{help}"
    );
    let record = fctrace(&["record", "--help"]).stdout;
    assert!(
        record.contains("--host <HOST>") && record.contains("--port <PORT>"),
        "{record}"
    );
    let recv = fctrace(&["recv", "--help"]).stdout;
    for opt in [
        "--data <DIR>",
        "--port <PORT>",
        "--bind <ADDR>",
        "--run-cmd <CMD>",
    ] {
        assert!(recv.contains(opt), "{opt} in\n{recv}");
    }
    // --port without --host means nothing on record: refused.
    let r = fctrace(&["record", "--port", "1234", "true"]);
    assert_eq!(r.code(), Some(2), "{}", r.describe());
}

/// `--run-cmd CMD` runs after the trace arrived, with its directory as
/// $1: here a replay of it, onto recv's stderr.
#[test]
fn run_cmd_replays_the_received_trace() {
    let exe = program();
    let base = TraceDir::new("stream-runcmd");
    std::fs::create_dir_all(&base.path).unwrap();
    let cmd = format!(
        "'{}' replay --no-pager -d \"$1\" >&2 && echo \"run-cmd done on $1\" >&2",
        fctrace_bin().display()
    );
    let mut recv = Recv::start_with(&base.path.join("got"), &["--run-cmd", &cmd]);
    let local = base.path.join("sent.data");
    let port = recv.port.to_string();
    let r = record_to("127.0.0.1", &port, &local, &exe, &[]);
    assert!(r.success(), "{}", r.describe());
    let done = recv.wait_for("run-cmd done on", 1);
    assert!(done.ends_with("got/sent.data"), "{done}");
    let start = recv
        .seen
        .iter()
        .position(|l| l.contains("| main() {"))
        .expect("the replay's first line");
    let end = recv.seen.len() - 1;
    let tree = shape(&recv.seen[start..end].join("\n"));
    assert_eq!(tree, expected_tree(), "{:?}", recv.seen);
    recv.interrupt();
}

/// `--max-size`: a trace's files together over it are refused, the
/// first files already written removed with it.
#[test]
fn max_size_bounds_a_whole_trace() {
    let base = TraceDir::new("stream-maxsize");
    std::fs::create_dir_all(&base.path).unwrap();
    let got = base.path.join("got");
    let mut recv = Recv::start_with(&got, &["--max-size", "64K"]);
    let first = vec![b'a'; 40_000];
    let second = vec![b'b'; 30_000];
    let over = [
        hello(b"big.data"),
        file(b"tasks/1.dat", first.len() as u64, &first),
        file(b"tasks/2.dat", second.len() as u64, &second),
        end(2),
    ]
    .concat();
    send_raw(recv.port, &over);
    let line = recv.wait_for(": re", 1);
    assert!(
        line.contains("refused") && line.contains("65536 bytes per trace"),
        "{line}"
    );
    assert_eq!(names(&got), Vec::<String>::new());
    // Under the limit, the same first file arrives.
    let under = [
        hello(b"small.data"),
        file(b"tasks/1.dat", first.len() as u64, &first),
        end(1),
    ]
    .concat();
    send_raw(recv.port, &under);
    let line = recv.wait_for(": re", 2);
    assert!(line.contains("received small.data"), "{line}");
    assert_eq!(
        std::fs::read(got.join("small.data/tasks/1.dat")).unwrap(),
        first
    );
    recv.interrupt();
}

/// A peer that is no `fctrace recv` (it answers something else): an
/// error before the program runs, as for a closed port.
#[test]
fn other_peer_fails_before_the_program_runs() {
    let exe = program();
    let base = TraceDir::new("stream-other");
    std::fs::create_dir_all(&base.path).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let peer = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        // The whole hello (magic, version, "run.data"), so that closing
        // leaves nothing unread (which would reset the connection).
        let mut hello = [0u8; 24];
        conn.read_exact(&mut hello).unwrap();
        conn.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n").unwrap();
        hello
    });
    let marker = base.path.join("ran");
    let local = base.path.join("run.data");
    let r = record_to("127.0.0.1", &port, &local, &exe, &[marker.as_os_str()]);
    let hello = peer.join().unwrap();
    assert_eq!(&hello[..8], b"FCTRSEND");
    assert_eq!(&hello[16..], b"run.data");
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("not an `fctrace recv`") && r.stderr.contains("not started"),
        "{}",
        r.describe()
    );
    assert!(!marker.exists(), "the program ran");
    assert!(!local.exists(), "a trace was written");
}
