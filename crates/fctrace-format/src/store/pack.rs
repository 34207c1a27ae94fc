//! `fctrace archive`: a trace directory packed into one file to send, the
//! format [`super::archive`] reads: a tar of the directory, its name the
//! only top-level entry, compressed with zstd. Written under a temporary
//! name and renamed when complete.

use super::archive::{forget, pending};
use super::error::StoreError;
use super::layout::RECORDER_PID_FILE;
use super::Trace;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// zstd level of `fctrace archive`: the event files are compressed
/// already; the symbol tables (text) are what shrinks.
const LEVEL: i32 = 9;
/// What [`default_output`] adds to the directory's name.
pub const ARCHIVE_SUFFIX: &str = ".tar.zst";

/// What [`pack`] wrote.
#[derive(Debug)]
pub struct Packed {
    /// Regular files packed.
    pub files: u64,
    /// Their bytes.
    pub trace_bytes: u64,
    /// The archive's bytes.
    pub archive_bytes: u64,
    /// Entries of the directory left out: symbolic links and other
    /// files that are neither regular files nor directories.
    pub skipped: Vec<PathBuf>,
}

/// `DIR.tar.zst` next to `DIR` (the current directory's name for `.`).
pub fn default_output(dir: &Path) -> Result<PathBuf, StoreError> {
    let full = top_name(dir)?;
    let parent = match dir.file_name() {
        Some(_) => dir.parent().map(Path::to_path_buf).unwrap_or_default(),
        None => fs::canonicalize(dir)
            .map_err(|e| StoreError::io("cannot access", dir, e))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/")),
    };
    Ok(parent.join(format!("{full}{ARCHIVE_SUFFIX}")))
}

/// The name the directory has inside the archive: its own.
fn top_name(dir: &Path) -> Result<String, StoreError> {
    let name = match dir.file_name() {
        Some(n) => n.to_os_string(),
        None => fs::canonicalize(dir)
            .map_err(|e| StoreError::io("cannot access", dir, e))?
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "fctrace.data".into()),
    };
    name.into_string().map_err(|n| StoreError::Archive {
        path: dir.to_path_buf(),
        reason: format!("its name {n:?} is not valid UTF-8: rename it first"),
    })
}

/// Packs the trace directory `dir` into the archive `out`: created 0600,
/// written under a temporary name in `out`'s directory and renamed when
/// complete, so that no partial archive ever has `out`'s name. An existing
/// `out` is replaced only with `replace`. A directory a recorder still
/// writes into is refused.
pub fn pack(dir: &Path, out: &Path, replace: bool) -> Result<Packed, StoreError> {
    check_packable(dir)?;
    if !replace && fs::symlink_metadata(out).is_ok() {
        return Err(StoreError::Archive {
            path: out.to_path_buf(),
            reason: "it exists: --force replaces it".to_string(),
        });
    }
    let top = top_name(dir)?;
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    walk(dir, Path::new(""), &mut entries, &mut skipped)?;

    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.as_deref().unwrap_or("archive")))
        .suffix(".part")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(parent)
        .map_err(|e| StoreError::io("cannot create", out, e))?;
    // Removed by a signal's handler until renamed; by `tmp`'s drop on an
    // error.
    let tmp_path = tmp.path().to_path_buf();
    pending().push(tmp_path.clone());
    let written = write_archive(tmp.as_file(), dir, &top, &entries, out).and_then(|counts| {
        let len = tmp.as_file().metadata().map(|m| m.len());
        len.map(|len| (counts, len))
            .map_err(|e| StoreError::io("cannot write", out, e))
    });
    let persisted = written.map(|counts| {
        let renamed = if replace {
            tmp.persist(out)
        } else {
            tmp.persist_noclobber(out)
        };
        (counts, renamed)
    });
    forget(&tmp_path);
    let (((files, trace_bytes), archive_bytes), renamed) = persisted?;
    renamed.map_err(|e| match e.error.kind() {
        io::ErrorKind::AlreadyExists => StoreError::Archive {
            path: out.to_path_buf(),
            reason: "it exists: --force replaces it".to_string(),
        },
        _ => StoreError::io("cannot create", out, e.error),
    })?;
    Ok(Packed {
        files,
        trace_bytes,
        archive_bytes,
        skipped,
    })
}

/// Refuses what is not a finished trace directory, or one a recorder
/// still writes into.
fn check_packable(dir: &Path) -> Result<(), StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_file() => {
            return Err(StoreError::NotATrace {
                dir: dir.to_path_buf(),
                reason: "it is a file, not a trace directory (an archive already?)".to_string(),
            })
        }
        _ => {}
    }
    let pid_file = dir.join(RECORDER_PID_FILE);
    if let Ok(text) = fs::read_to_string(&pid_file) {
        if let Ok(pid) = text.trim().parse::<u32>() {
            if Path::new(&format!("/proc/{pid}")).exists() {
                return Err(StoreError::Archive {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "a recorder (fctrace record, pid {pid}) still writes into it: archive \
                         it when the recording has ended"
                    ),
                });
            }
        }
    }
    // The trace must be readable as a trace (info.json, symbol tables).
    Trace::open_dir(dir).map(|_| ())
}

/// A file or directory to pack, relative to the trace directory.
struct Entry {
    rel: PathBuf,
    dir: bool,
    mtime: u64,
}

/// Every directory and regular file below `dir` (`rel` inside the trace),
/// sorted by name, parents before their contents; anything else in
/// `skipped`. Symbolic links are never followed.
fn walk(
    root: &Path,
    rel: &Path,
    entries: &mut Vec<Entry>,
    skipped: &mut Vec<PathBuf>,
) -> Result<(), StoreError> {
    let here = root.join(rel);
    let mut names: Vec<_> = fs::read_dir(&here)
        .map_err(|e| StoreError::io("cannot read directory", &here, e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::io("cannot read directory", &here, e))?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let path = root.join(&rel);
        let meta =
            fs::symlink_metadata(&path).map_err(|e| StoreError::io("cannot access", &path, e))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        if meta.is_dir() {
            entries.push(Entry {
                rel: rel.clone(),
                dir: true,
                mtime,
            });
            walk(root, &rel, entries, skipped)?;
        } else if meta.is_file() {
            entries.push(Entry {
                rel,
                dir: false,
                mtime,
            });
        } else {
            skipped.push(path);
        }
    }
    Ok(())
}

/// The tar of `entries`, compressed, into `file`: (files, their bytes).
fn write_archive(
    file: &File,
    root: &Path,
    top: &str,
    entries: &[Entry],
    out: &Path,
) -> Result<(u64, u64), StoreError> {
    let werr = |e: io::Error| StoreError::io("cannot write", out, e);
    let encoder = zstd::Encoder::new(BufWriter::new(file), LEVEL).map_err(werr)?;
    let mut tar = tar::Builder::new(encoder);
    tar.mode(tar::HeaderMode::Deterministic);
    let (mut files, mut bytes) = (0u64, 0u64);
    let top_dir = Entry {
        rel: PathBuf::new(),
        dir: true,
        mtime: fs::metadata(root)
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs()),
    };
    for entry in std::iter::once(&top_dir).chain(entries) {
        let name = Path::new(top).join(&entry.rel);
        let mut header = tar::Header::new_gnu();
        header.set_mtime(entry.mtime);
        header.set_uid(0);
        header.set_gid(0);
        if entry.dir {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o700);
            header.set_size(0);
            tar.append_data(&mut header, &name, io::empty())
                .map_err(werr)?;
            continue;
        }
        let path = root.join(&entry.rel);
        let source = open_nofollow(&path)?;
        let len = source
            .metadata()
            .map_err(|e| StoreError::io("cannot access", &path, e))?
            .len();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o600);
        header.set_size(len);
        // A file that grows meanwhile is cut at the length given above;
        // one that shrinks fails (tar's own check).
        let mut source = Source {
            file: BufReader::new(source).take(len),
            failed: None,
        };
        tar.append_data(&mut header, &name, &mut source)
            .map_err(|e| match source.failed.take() {
                Some(e) => StoreError::io("cannot read", &path, e),
                None => werr(e),
            })?;
        files += 1;
        bytes += len;
    }
    let encoder = tar.into_inner().map_err(werr)?;
    let mut writer = encoder.finish().map_err(werr)?;
    writer.flush().map_err(werr)?;
    drop(writer);
    file.sync_all().map_err(werr)?;
    Ok((files, bytes))
}

/// A file being packed, which keeps its read error (the archive's own
/// errors being write errors).
struct Source<R> {
    file: R,
    failed: Option<io::Error>,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf).inspect_err(|e| {
            self.failed = Some(io::Error::new(e.kind(), e.to_string()));
        })
    }
}

fn open_nofollow(path: &Path) -> Result<File, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| StoreError::io("cannot read", path, e))
}
