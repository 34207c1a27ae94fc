//! What goes wrong reading or writing a trace directory ([`StoreError`]),
//! each a complete message for the user.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong reading or writing a trace directory. The `Display` of
/// every variant is a complete, user-facing message.
#[derive(Debug)]
pub enum StoreError {
    /// `Trace::open` of a directory that does not exist.
    NoTrace { dir: PathBuf },
    /// The directory exists but is not (or not yet) a trace directory.
    NotATrace { dir: PathBuf, reason: String },
    /// `TraceWriter::create` refuses to touch an existing directory.
    WontOverwrite { dir: PathBuf, reason: String },
    /// A file of a newer format than this fctrace reads.
    NewerVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// A system call failed; `action` says what fctrace was doing
    /// ("cannot read", "cannot create", ...).
    Io {
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// info.json is not valid.
    BadInfo { path: PathBuf, reason: String },
    /// A task file ends in the middle of a chunk.
    Truncated { path: PathBuf, events: u64 },
    /// A task file holds bytes that are not what the format says.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// `Trace::events` for a tid the trace does not have.
    NoSuchTask { dir: PathBuf, tid: u32 },
    /// An archive (`fctrace archive`) that cannot be written or read.
    Archive { path: PathBuf, reason: String },
}

impl StoreError {
    pub(crate) fn io(action: &'static str, path: &Path, error: io::Error) -> StoreError {
        StoreError::Io {
            action,
            path: path.to_path_buf(),
            error,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NoTrace { dir } => write!(
                f,
                "no trace at {}: run `fctrace record` first",
                dir.display()
            ),
            StoreError::NotATrace { dir, reason } => {
                write!(f, "{} is not an fctrace trace: {reason}", dir.display())
            }
            StoreError::WontOverwrite { dir, reason } => {
                write!(f, "will not write a trace to {}: {reason}", dir.display())
            }
            StoreError::NewerVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}, newer than this fctrace reads \
                 (version {supported}): use a newer fctrace",
                path.display()
            ),
            StoreError::Io {
                action,
                path,
                error,
            } => write!(f, "{action} {}: {error}", path.display()),
            StoreError::BadInfo { path, reason } => {
                write!(f, "corrupt trace metadata {}: {reason}", path.display())
            }
            StoreError::Truncated { path, events } => write!(
                f,
                "trace file {} is truncated after {events} events",
                path.display()
            ),
            StoreError::Corrupt {
                path,
                offset,
                reason,
            } => write!(
                f,
                "trace file {}: corrupt chunk at offset {offset}: {reason}",
                path.display()
            ),
            StoreError::NoSuchTask { dir, tid } => {
                write!(f, "the trace at {} has no task {tid}", dir.display())
            }
            StoreError::Archive { path, reason } => write!(f, "{}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for StoreError {}
