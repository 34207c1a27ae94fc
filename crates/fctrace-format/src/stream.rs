//! The network protocol of `fctrace record --host` (the sender) and
//! `fctrace recv` (the receiver): a finished trace directory sent over one
//! TCP connection, framed, with a magic and a version. docs/format.md
//! ("Sending a trace: record --host and recv") describes every byte.
//!
//! The receiver trusts nothing the sender names: the trace's name is one
//! path component, each file's path is relative, of at most
//! [`MAX_DEPTH`] plain components (no `..`, no `.`, no NUL, no empty
//! part, none over [`MAX_NAME`] bytes), and every length is checked
//! against its bound before anything is read or allocated. Files are
//! written into a private directory made for the connection (0700, files
//! 0600, created with `O_EXCL` so nothing is followed or overwritten),
//! renamed into place only when the whole trace arrived; a connection
//! that fails in any way leaves nothing behind.

use std::fs;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the sender writes first.
pub const MAGIC: [u8; 8] = *b"FCTRSEND";
/// What the receiver's replies start with.
pub const REPLY_MAGIC: [u8; 8] = *b"FCTRRECV";
/// The protocol's version; a receiver refuses another.
pub const VERSION: u32 = 1;
/// The port both sides use by default (uftrace's).
pub const DEFAULT_PORT: u16 = 8090;
/// The longest name of a trace or of one path component, in bytes.
pub const MAX_NAME: usize = 255;
/// The longest relative path of a file in the trace, in bytes.
pub const MAX_PATH: usize = 1024;
/// The deepest path of a file in the trace (`sessions/<id>.sym`: 2).
pub const MAX_DEPTH: usize = 4;
/// The most files one trace may hold.
pub const MAX_FILES: u64 = 1_000_000;
/// How long a receiver waits for a sender's name.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a sender waits for the receiver's last answer.
pub const END_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest message in a reply.
pub const MAX_MESSAGE: usize = 4096;
/// A frame holding one file: tag, path length (u32), path, size (u64), bytes.
pub const TAG_FILE: u8 = b'F';
/// The last frame: tag, number of files sent (u64).
pub const TAG_END: u8 = b'E';
/// The prefix of the directories a receiver fills before renaming them
/// into place (a trace's name never starts with a dot).
pub const INCOMING_PREFIX: &str = ".incoming-";

/// Whether `name` may name a received trace: one plain path component
/// not starting with a dot.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.starts_with('.') {
        return Err(format!(
            "trace name {name:?}: a name must not start with a dot"
        ));
    }
    check_component(name).map_err(|e| format!("trace name {name:?}: {e}"))
}

fn check_component(c: &str) -> Result<(), String> {
    if c.is_empty() {
        return Err("empty path component".into());
    }
    if c == "." || c == ".." {
        return Err(format!("`{c}` is not allowed"));
    }
    if c.len() > MAX_NAME {
        return Err(format!("a component is longer than {MAX_NAME} bytes"));
    }
    if c.contains(['\0', '/', '\\']) {
        return Err("NUL, `/` or `\\` in a component".into());
    }
    if c.chars().any(char::is_control) {
        return Err("control character in a component".into());
    }
    Ok(())
}

/// The components of a file's relative path as the sender names it
/// (`tasks/123.dat`), or why it is refused.
pub fn check_path(path: &str) -> Result<Vec<&str>, String> {
    if path.len() > MAX_PATH {
        return Err(format!("path longer than {MAX_PATH} bytes"));
    }
    if path.starts_with('/') {
        return Err(format!("absolute path {path:?}"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > MAX_DEPTH {
        return Err(format!("path {path:?} deeper than {MAX_DEPTH} levels"));
    }
    for p in &parts {
        check_component(p).map_err(|e| format!("path {path:?}: {e}"))?;
    }
    Ok(parts)
}

fn read_exact_or(r: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), String> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            format!("the stream ended inside {what} (truncated)")
        } else if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            format!("reading {what}: no answer in time")
        } else {
            format!("reading {what}: {e}")
        }
    })
}

fn read_u32(r: &mut impl Read, what: &str) -> Result<u32, String> {
    let mut b = [0u8; 4];
    read_exact_or(r, &mut b, what)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read, what: &str) -> Result<u64, String> {
    let mut b = [0u8; 8];
    read_exact_or(r, &mut b, what)?;
    Ok(u64::from_le_bytes(b))
}

/// A length-prefixed UTF-8 string of at most `max` bytes.
fn read_text(r: &mut impl Read, max: usize, what: &str) -> Result<String, String> {
    let len = read_u32(r, what)? as usize;
    if len > max {
        return Err(format!("{what} of {len} bytes (at most {max})"));
    }
    let mut b = vec![0u8; len];
    read_exact_or(r, &mut b, what)?;
    String::from_utf8(b).map_err(|_| format!("{what} is not UTF-8"))
}

fn write_text(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u32).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

/// A reply: `REPLY_MAGIC`, status (0: accepted, 1: refused), message.
fn write_reply(w: &mut impl Write, refused: Option<&str>) -> io::Result<()> {
    w.write_all(&REPLY_MAGIC)?;
    w.write_all(&[u8::from(refused.is_some())])?;
    let msg = refused.unwrap_or("");
    let end = (0..=msg.len().min(MAX_MESSAGE))
        .rev()
        .find(|&i| msg.is_char_boundary(i))
        .unwrap_or(0);
    write_text(w, &msg[..end])?;
    w.flush()
}

/// The receiver's reply: `Ok` when it accepted, its reason when it refused.
fn read_reply(r: &mut impl Read) -> Result<(), String> {
    let mut magic = [0u8; 8];
    read_exact_or(r, &mut magic, "the receiver's reply")?;
    if magic != REPLY_MAGIC {
        return Err("the peer is not an `fctrace recv` (wrong reply magic)".into());
    }
    let mut status = [0u8; 1];
    read_exact_or(r, &mut status, "the receiver's reply")?;
    let msg = read_text(r, MAX_MESSAGE, "the receiver's message")?;
    match status[0] {
        0 => Ok(()),
        _ => Err(format!("the receiver refused: {msg}")),
    }
}

/// The sending side: connected, its trace's name accepted by the receiver.
pub struct Sender {
    stream: TcpStream,
}

/// What a sender sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub files: u64,
    pub bytes: u64,
}

impl Sender {
    /// Connects to a receiver and announces the trace `name` (the sender's
    /// directory's last component); an error when it cannot be reached or
    /// refuses.
    pub fn connect(stream: TcpStream, name: &str) -> Result<Sender, String> {
        check_name(name)?;
        let mut s = Sender { stream };
        let mut w = BufWriter::new(&s.stream);
        let hello = (|| {
            w.write_all(&MAGIC)?;
            w.write_all(&VERSION.to_le_bytes())?;
            write_text(&mut w, name)?;
            w.flush()
        })();
        drop(w);
        hello.map_err(|e| format!("sending the trace's name: {e}"))?;
        read_reply(&mut s.stream)?;
        Ok(s)
    }

    /// Sends every regular file under `dir` (sorted, symlinks and other
    /// files left out), then the end frame, and waits for the receiver to
    /// say the trace is in place.
    pub fn send_dir(mut self, dir: &Path) -> Result<Sent, String> {
        let mut files = Vec::new();
        list_files(dir, "", 0, &mut files)?;
        let mut sent = Sent { files: 0, bytes: 0 };
        let mut w = BufWriter::with_capacity(1 << 16, &self.stream);
        for rel in &files {
            let path = dir.join(rel);
            let mut f = fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let size = f
                .metadata()
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            let io = (|| {
                w.write_all(&[TAG_FILE])?;
                write_text(&mut w, rel)?;
                w.write_all(&size.to_le_bytes())?;
                let n = io::copy(&mut (&mut f).take(size), &mut w)?;
                if n != size {
                    return Err(io::Error::other(format!(
                        "{} shrank while being sent",
                        path.display()
                    )));
                }
                Ok(())
            })();
            io.map_err(|e| format!("sending {rel}: {e}"))?;
            sent.files += 1;
            sent.bytes += size;
        }
        let end = (|| {
            w.write_all(&[TAG_END])?;
            w.write_all(&sent.files.to_le_bytes())?;
            w.flush()
        })();
        drop(w);
        end.map_err(|e| format!("sending the end of the trace: {e}"))?;
        let _ = self.stream.set_read_timeout(Some(END_TIMEOUT));
        read_reply(&mut self.stream)?;
        Ok(sent)
    }
}

/// The relative paths (`/`-separated) of the regular files under `dir`.
fn list_files(dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>) -> Result<(), String> {
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| format!("{}: a file name that is not UTF-8", e.path().display()))?;
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let kind = e.file_type().map_err(|err| format!("{path}: {err}"))?;
        if kind.is_dir() && depth + 1 < MAX_DEPTH {
            list_files(&e.path(), &path, depth + 1, out)?;
        } else if kind.is_file() {
            check_path(&path)?;
            out.push(path);
        }
    }
    Ok(())
}

/// The receiver's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most bytes of one trace, all files together.
    pub max_bytes: u64,
}

/// A trace received.
#[derive(Debug)]
pub struct Received {
    pub name: String,
    /// Where it is now: `root/name`.
    pub dir: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// The trace of the same name it replaced, moved aside, removed once
    /// the sender has its answer.
    replaced: Option<PathBuf>,
}

/// The directories being filled, removed by [`remove_incoming`] when a
/// signal ends the receiver.
static INCOMING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

fn incoming() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    INCOMING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every directory still being received (for a signal's handler:
/// Ctrl-C on `recv` leaves no partial trace).
pub fn remove_incoming() {
    for p in incoming().drain(..) {
        let _ = fs::remove_dir_all(p);
    }
}

/// A directory being filled, removed when dropped unless renamed.
struct Incoming(PathBuf);

impl Drop for Incoming {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        incoming().retain(|p| p != &self.0);
    }
}

/// Receives one trace from `stream` into `root/NAME` (`root` must exist).
/// Any error (refused name, bad magic or version, truncated stream, a
/// length over its bound, a refused path) ends the connection, with the
/// reason sent back when the stream still takes it, and leaves nothing
/// under `root`.
pub fn receive(stream: &TcpStream, root: &Path, limits: Limits) -> Result<Received, String> {
    // The name comes at once; the files may take as long as the sender's
    // program runs.
    let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
    let mut r = BufReader::with_capacity(1 << 16, stream);
    let mut w = stream;
    let mut accepted = || {
        let _ = stream.set_read_timeout(None);
    };
    let result = receive_from(&mut r, &mut w, &mut accepted, root, limits);
    let _ = write_reply(&mut w, result.as_ref().err().map(String::as_str));
    if let Ok(Received {
        replaced: Some(old),
        ..
    }) = &result
    {
        let _ = fs::remove_dir_all(old);
    }
    result
}

fn receive_from(
    r: &mut impl Read,
    w: &mut impl Write,
    accepted: &mut dyn FnMut(),
    root: &Path,
    limits: Limits,
) -> Result<Received, String> {
    let mut magic = [0u8; 8];
    read_exact_or(r, &mut magic, "the magic")?;
    if magic != MAGIC {
        return Err("wrong magic: not an `fctrace record --host` stream".into());
    }
    let version = read_u32(r, "the version")?;
    if version != VERSION {
        return Err(format!(
            "protocol version {version}, this fctrace reads version {VERSION}"
        ));
    }
    let name = read_text(r, MAX_NAME, "the trace's name")?;
    check_name(&name)?;
    let tmp = root.join(format!(
        "{INCOMING_PREFIX}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    incoming().push(tmp.clone());
    let tmp = Incoming(tmp);
    // The sender learns its name is accepted, then runs its program.
    write_reply(w, None).map_err(|e| format!("replying: {e}"))?;
    accepted();
    let (files, bytes) = receive_files(r, &tmp.0, limits)?;
    let dir = root.join(&name);
    let replaced = put_in_place(&tmp.0, &dir)?;
    Ok(Received {
        name,
        dir,
        files,
        bytes,
        replaced,
    })
}

fn receive_files(r: &mut impl Read, dir: &Path, limits: Limits) -> Result<(u64, u64), String> {
    let (mut files, mut bytes) = (0u64, 0u64);
    loop {
        let mut tag = [0u8; 1];
        read_exact_or(r, &mut tag, "a frame's tag")?;
        match tag[0] {
            TAG_FILE => {
                if files >= MAX_FILES {
                    return Err(format!("more than {MAX_FILES} files"));
                }
                let path = read_text(r, MAX_PATH, "a file's path")?;
                let parts = check_path(&path)?;
                let size = read_u64(r, "a file's size")?;
                if size > limits.max_bytes.saturating_sub(bytes) {
                    return Err(format!(
                        "{path}: {size} bytes would pass the limit of {} bytes per trace \
                         (recv --max-size)",
                        limits.max_bytes
                    ));
                }
                write_file(r, dir, &parts, size).map_err(|e| format!("{path}: {e}"))?;
                files += 1;
                bytes += size;
            }
            TAG_END => {
                let count = read_u64(r, "the end frame")?;
                if count != files {
                    return Err(format!("the sender says {count} files, {files} arrived"));
                }
                return Ok((files, bytes));
            }
            t => return Err(format!("unknown frame tag {t:#04x}")),
        }
    }
}

/// Writes one file of `size` bytes read from `r` at `dir/parts...`,
/// creating its folders (0700) and the file (0600, `O_EXCL`).
fn write_file(r: &mut impl Read, dir: &Path, parts: &[&str], size: u64) -> Result<(), String> {
    let mut path = dir.to_path_buf();
    for p in &parts[..parts.len() - 1] {
        path.push(p);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Only a folder this connection made can be there.
                let m = fs::symlink_metadata(&path).map_err(|e| e.to_string())?;
                if !m.is_dir() {
                    return Err("a file and a folder of the same name".into());
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    path.push(parts[parts.len() - 1]);
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                "sent twice".to_string()
            } else {
                e.to_string()
            }
        })?;
    let mut w = BufWriter::new(f);
    let n = io::copy(&mut r.take(size), &mut w).map_err(|e| e.to_string())?;
    if n != size {
        return Err(format!(
            "the stream ended after {n} of its {size} bytes (truncated)"
        ));
    }
    w.flush().map_err(|e| e.to_string())
}

/// Renames the received directory to `dir`, replacing a trace received
/// earlier under that name (a directory), which is moved aside (its new
/// path returned, to be removed); anything else there is refused.
fn put_in_place(tmp: &Path, dir: &Path) -> Result<Option<PathBuf>, String> {
    let mut replaced = None;
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            let old = tmp.with_extension("replaced");
            fs::rename(dir, &old).map_err(|e| format!("{}: {e}", dir.display()))?;
            replaced = Some(old);
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a directory: not replaced",
                dir.display()
            ))
        }
        Err(_) => {}
    }
    match fs::rename(tmp, dir) {
        Ok(()) => Ok(replaced),
        Err(e) => {
            // The earlier trace goes back where it was.
            if let Some(old) = replaced {
                let _ = fs::rename(old, dir);
            }
            Err(format!("{}: {e}", dir.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_outside_the_trace_are_refused() {
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"x".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("run1.data").is_ok());
        for bad in [
            "/etc/passwd",
            "../x",
            "tasks/../../x",
            "tasks//x",
            "tasks/./x",
            "a/b/c/d/e",
            "tasks/x\0",
            "",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_path("sessions/0.sym").unwrap(), ["sessions", "0.sym"]);
        assert!(check_path(&format!("a/{}", "x".repeat(MAX_PATH))).is_err());
    }

    #[test]
    fn a_reply_is_read_back() {
        let mut buf = Vec::new();
        write_reply(&mut buf, Some("too big")).unwrap();
        assert_eq!(
            read_reply(&mut buf.as_slice()),
            Err("the receiver refused: too big".to_string())
        );
        buf.clear();
        write_reply(&mut buf, None).unwrap();
        assert_eq!(read_reply(&mut buf.as_slice()), Ok(()));
        assert!(read_reply(&mut &b"FCTRRE"[..])
            .unwrap_err()
            .contains("truncated"));
    }
}
