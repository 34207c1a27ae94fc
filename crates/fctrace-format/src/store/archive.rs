//! An archive of a trace directory (`fctrace archive`, written by
//! [`super::pack`]) read back: a tar of the directory (its name as the only
//! top-level entry), compressed with zstd, so that `tar --zstd -xf FILE`
//! gives the trace directory again. The trace reader ([`super::Trace`]'s
//! `open`) recognises one by its first bytes ([`is_archive`]) and unpacks it
//! with [`unpack`] into a private temporary directory, removed when the
//! trace goes (and by [`remove_pending`] when a signal ends the process).
//!
//! Everything a reader needs is in the trace directory already: the
//! symbol tables were read when the program ran (`sessions/*.sym`, with
//! each module's build-id and debug link), the command line and the tasks
//! are in `info.json`; no reader opens the traced program's files. So the
//! archive holds the directory and nothing else.

use super::error::StoreError;
use super::writer::create_private;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// What a POSIX tar header holds at offset 257 (an uncompressed archive,
/// e.g. after `unzstd`).
const TAR_MAGIC: &[u8] = b"ustar";

/// Paths to remove if a signal ends the process first: archives being
/// written, directories being read.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub(crate) fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn forget(path: &Path) {
    pending().retain(|p| p != path);
}

/// Removes every archive being written and every archive's temporary
/// directory: for the handler of a signal that ends the process (Ctrl-C),
/// which skips the destructors.
pub fn remove_pending() {
    for path in pending().drain(..) {
        if path.is_dir() {
            let _ = fs::remove_dir_all(&path);
        } else {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Whether `path` is a file that starts as an archive does: a zstd frame,
/// or an uncompressed tar.
pub fn is_archive(path: &Path) -> bool {
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let mut head = [0u8; 262];
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    head[..n].starts_with(&ZSTD_MAGIC) || head.get(257..262) == Some(TAR_MAGIC)
}

/// An archive unpacked into a private temporary directory (0700, files
/// 0600), removed when this is dropped.
#[derive(Debug)]
pub(crate) struct Unpacked {
    tmp: tempfile::TempDir,
    /// The trace directory inside it.
    pub trace_dir: PathBuf,
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        forget(self.tmp.path());
    }
}

/// Unpacks the archive `path` into a new temporary directory ($TMPDIR).
/// Only directories and regular files are made, each inside one top-level
/// directory: an entry of another type, an absolute path or `..` is
/// refused, as is a damaged or truncated archive.
pub(crate) fn unpack(path: &Path) -> Result<Unpacked, StoreError> {
    let bad = |reason: String| StoreError::Archive {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = File::open(path).map_err(|e| StoreError::io("cannot read", path, e))?;
    let mut magic = [0u8; 4];
    let compressed = file.read_exact(&mut magic).is_ok() && magic == ZSTD_MAGIC;
    file.rewind()
        .map_err(|e| StoreError::io("cannot read", path, e))?;
    let tmp = tempfile::Builder::new()
        .prefix("fctrace-archive-")
        .tempdir()
        .map_err(|e| StoreError::io("cannot create", &std::env::temp_dir(), e))?;
    pending().push(tmp.path().to_path_buf());
    let mut unpacked = Unpacked {
        trace_dir: PathBuf::new(),
        tmp,
    };
    let reader: Box<dyn Read> = if compressed {
        Box::new(zstd::Decoder::new(file).map_err(|e| bad(format!("cannot decompress it: {e}")))?)
    } else {
        Box::new(BufReader::new(file))
    };
    let top = extract(reader, unpacked.tmp.path(), &bad)?;
    unpacked.trace_dir = unpacked.tmp.path().join(top);
    Ok(unpacked)
}

/// Writes the entries of the tar `reader` into `into`; returns the name
/// of their one top-level directory.
fn extract(
    reader: Box<dyn Read>,
    into: &Path,
    bad: &dyn Fn(String) -> StoreError,
) -> Result<PathBuf, StoreError> {
    let damaged = |e: io::Error| bad(format!("it is damaged or truncated ({e})"));
    let mut archive = tar::Archive::new(reader);
    let mut top: Option<PathBuf> = None;
    for entry in archive.entries().map_err(damaged)? {
        let mut entry = entry.map_err(damaged)?;
        let name: PathBuf = entry
            .path()
            .map_err(damaged)?
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        if name.as_os_str().is_empty() {
            continue;
        }
        let mut parts = name.components();
        let first = match parts.next() {
            Some(Component::Normal(c)) => PathBuf::from(c),
            _ => {
                return Err(bad(format!(
                    "it holds {}: not an fctrace archive",
                    name.display()
                )))
            }
        };
        if !parts.all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad(format!(
                "it holds {}: not an fctrace archive",
                name.display()
            )));
        }
        match &top {
            None => top = Some(first),
            Some(t) if *t == first => {}
            Some(t) => {
                return Err(bad(format!(
                    "it holds both {} and {}: an fctrace archive holds one directory",
                    t.display(),
                    first.display()
                )))
            }
        }
        let dest = into.join(&name);
        match entry.header().entry_type() {
            tar::EntryType::Directory => make_dir(&dest)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = dest.parent() {
                    make_dir(parent)?;
                }
                copy_entry(&mut entry, &dest, &damaged)?;
            }
            other => {
                return Err(bad(format!(
                    "it holds {} of type {other:?}: an fctrace archive holds only directories \
                     and regular files",
                    name.display()
                )))
            }
        }
    }
    // The end of the zstd stream: a truncated one fails here.
    io::copy(&mut archive.into_inner(), &mut io::sink()).map_err(damaged)?;
    top.ok_or_else(|| bad("it is empty".to_string()))
}

/// Copies an entry's bytes into the new private file `dest`: a read
/// error is the archive's (`damaged`), a write error the temporary
/// directory's.
fn copy_entry(
    entry: &mut impl Read,
    dest: &Path,
    damaged: &dyn Fn(io::Error) -> StoreError,
) -> Result<(), StoreError> {
    let written = |e: io::Error| match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => StoreError::Archive {
            path: dest.to_path_buf(),
            reason: format!(
                "cannot unpack the archive here ({e}): set TMPDIR to a directory with more room"
            ),
        },
        _ => StoreError::io("cannot write", dest, e),
    };
    let mut out = BufWriter::new(create_private(dest)?);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(damaged(e)),
        };
        out.write_all(&buf[..n]).map_err(written)?;
    }
    out.flush().map_err(written)
}

/// Creates `dir` and its missing parents, 0700.
fn make_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StoreError::io("cannot create", dir, e))
}
