//! The start-up cache on the recorder's side: where it is
//! (`$XDG_CACHE_HOME/fctrace`, else `~/.cache/fctrace`), telling the agent
//! (a file in the trace directory, read by every process of the
//! recording), and installing the entries the agents left in the trace
//! directory once the recording ends: each checked (whole, its file
//! unchanged since) and written 0600 into the 0700 directory, atomically
//! (a temporary file renamed). A failure leaves the cache as it was and
//! the recording unaffected: the cache only saves time. Format:
//! `fctrace_symbols::startcache`; docs/engine.md, "The start-up cache".

use std::path::{Path, PathBuf};

/// In the trace directory: the file naming the cache directory for the
/// agent, and the directory where agents leave new entries (the agent's
/// `instrument::startcache` uses the same names).
const DIR_FILE: &str = "cache/dir";
const NEW_DIR: &str = "cache/new";

/// The per-user cache directory: `$XDG_CACHE_HOME/fctrace` (an absolute
/// path, as the XDG spec wants, whose parent exists), else
/// `$HOME/.cache/fctrace` (a home that exists); None without either.
/// fctrace never creates a home directory (`HOME=/nonexistent`, as
/// system users and some sandboxes have it, is left so).
pub fn default_dir() -> Option<PathBuf> {
    let from = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    from("XDG_CACHE_HOME")
        .filter(|d| d.parent().is_some_and(Path::is_dir))
        .or_else(|| {
            from("HOME")
                .filter(|h| h.is_dir())
                .map(|h| h.join(".cache"))
        })
        .map(|d| d.join("fctrace"))
}

/// Tells the agents of the recording in `trace` where the cache is (none
/// for `--no-cache`).
pub(crate) fn offer(trace: &Path, cache: Option<&Path>) {
    let Some(cache) = cache else { return };
    let _ = std::fs::remove_dir_all(trace.join("cache"));
    let made = private_dir(&trace.join(NEW_DIR))
        .and_then(|()| std::fs::write(trace.join(DIR_FILE), cache.as_os_str().as_encoded_bytes()));
    if made.is_err() {
        let _ = std::fs::remove_dir_all(trace.join("cache"));
    }
}

/// Creates `dir` (and its parents) if needed, itself mode 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Installs the entries the agents left in `trace` into `cache`, then
/// removes them from the trace. Returns how many were installed.
pub(crate) fn install(trace: &Path, cache: Option<&Path>) -> usize {
    let mut installed = 0;
    if let (Some(cache), Ok(list)) = (cache, std::fs::read_dir(trace.join(NEW_DIR))) {
        for e in list.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "fca") && install_one(&p, cache).is_some() {
                installed += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(trace.join("cache"));
    if let (Some(cache), true) = (cache, installed > 0) {
        trim(cache, MAX_BYTES);
    }
    installed
}

/// The most the cache directory holds: beyond it, the entries least
/// recently written go first (each program built and traced once, as
/// tests do, adds one entry).
const MAX_BYTES: u64 = 512 << 20;

/// Removes the oldest entries of `cache` until it holds at most `max`
/// bytes.
fn trim(cache: &Path, max: u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(list) = std::fs::read_dir(cache) else {
        return;
    };
    let mut all: Vec<(i64, u64, PathBuf)> = list
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "fca"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.mtime(), m.size(), e.path()))
        })
        .collect();
    let mut total: u64 = all.iter().map(|e| e.1).sum();
    all.sort_unstable();
    for (_, size, path) in all {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= size;
        }
    }
}

/// Installs the entry at `from` into `cache`, if it checks.
fn install_one(from: &Path, cache: &Path) -> Option<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let bytes = std::fs::read(from).ok()?;
    let (key, _) = fctrace_symbols::startcache::open(&bytes)?;
    if !key.file_unchanged() {
        return None;
    }
    private_dir(cache).ok()?;
    let to = cache.join(key.file_name());
    let tmp = cache.join(format!(".{}.{}", std::process::id(), key.file_name()));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        std::fs::rename(&tmp, &to)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return None;
    }
    Some(())
}
