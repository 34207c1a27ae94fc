//! debuginfod, as elfutils' client uses it: the servers of
//! `DEBUGINFOD_URLS` (space-separated base URLs) are asked
//! `GET <url>/buildid/<hex>/debuginfo` in turn; what one sends is kept in
//! the cache (`DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`), as `<build-id>/debuginfo`, where the
//! next lookup finds it without asking. `DEBUGINFOD_TIMEOUT` (seconds,
//! default 90) bounds the connection and each read. `https://` servers
//! are trusted through the system's CA store ([`crate::http`]).
//!
//! A build-id every server answered 404 for is remembered in the cache as
//! elfutils does (its negative cache, shared with it): an empty file of
//! mode 000 at `<build-id>/debuginfo`, not asked for again while it is
//! younger than `<cache>/cache_miss_s` seconds (default 600).
//!
//! A server that cannot be reached gets one note (not one per module) and
//! is not asked again; nothing here is fatal.

use crate::http::{self, Answer};
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Where and how to ask.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Base URLs, in order; none: debuginfod is not used.
    pub servers: Vec<String>,
    pub cache: PathBuf,
    pub timeout: Duration,
}

impl Settings {
    /// From the environment, as elfutils reads it.
    pub fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let servers = var("DEBUGINFOD_URLS")
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let cache = var("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|x| Path::new(&x).join("debuginfod_client")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client")))
            .unwrap_or_else(|| PathBuf::from(".cache/debuginfod_client"));
        let timeout = var("DEBUGINFOD_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(90);
        Settings {
            servers,
            cache,
            timeout: Duration::from_secs(timeout),
        }
    }
}

/// Asks the servers, remembering which could not be reached.
#[derive(Debug, Default)]
pub struct Client {
    settings: Settings,
    /// Made at the first request.
    http: Option<http::Client>,
    failed: HashSet<String>,
    notes: Vec<String>,
}

/// A debug file debuginfod gave: its path in the cache, and the server
/// that sent it (`None`: it was in the cache already).
#[derive(Debug)]
pub struct Fetched {
    pub path: PathBuf,
    pub server: Option<String>,
}

/// How long a negative entry holds when `cache_miss_s` does not say.
pub const CACHE_MISS_DEFAULT_S: u64 = 600;

impl Client {
    pub fn new(settings: Settings) -> Client {
        Client {
            settings,
            ..Client::default()
        }
    }

    /// Notes for the user gathered so far (servers not reached, files
    /// refused, a cache that cannot be written), one line each.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// The debug file of the module with this build-id (lower-case hex):
    /// from the cache, else from the first server that has it. None when
    /// the cache's negative entry for it is fresh (no server is asked).
    pub fn find(&mut self, build_id: &str, matches: impl Fn(&Path) -> bool) -> Option<Fetched> {
        if self.settings.servers.is_empty() || build_id.len() < 2 {
            return None;
        }
        let dir = self.settings.cache.join(build_id);
        let path = dir.join("debuginfo");
        if matches(&path) {
            return Some(Fetched { path, server: None });
        }
        if self.negative_entry_holds(&path) {
            return None;
        }
        let mut all_404 = true;
        for server in self.settings.servers.clone() {
            if self.failed.contains(&server) {
                all_404 = false;
                continue;
            }
            match self.ask(&server, build_id, &dir, &path) {
                Asked::Kept => {
                    return Some(Fetched {
                        path,
                        server: Some(server),
                    })
                }
                Asked::NotThere => {}
                Asked::Refused => all_404 = false,
                Asked::CacheBroken => return None,
            }
        }
        if all_404 {
            // Best effort, as elfutils: a cache that cannot be written only
            // means the next reader asks again.
            let _ = store_negative(&dir, &path);
        }
        None
    }

    /// Asks one server; a file it sends is checked and kept in the cache.
    fn ask(&mut self, server: &str, build_id: &str, dir: &Path, path: &Path) -> Asked {
        let url = format!(
            "{}/buildid/{build_id}/debuginfo",
            server.trim_end_matches('/')
        );
        let settings = &self.settings;
        let http = self.http.get_or_insert_with(|| {
            let https = settings.servers.iter().any(|s| s.starts_with("https://"));
            http::Client::new(settings.timeout, https)
        });
        let body = match http.get(&url) {
            Ok(Answer::Found(body)) => body,
            Ok(Answer::Status(404)) => return Asked::NotThere,
            Ok(Answer::Status(status)) => {
                self.give_up(server, &format!("it answered HTTP {status}"));
                return Asked::Refused;
            }
            Err(e) => {
                self.give_up(server, &e);
                return Asked::Refused;
            }
        };
        match store(dir, path, body, build_id) {
            Ok(()) => Asked::Kept,
            Err(Stored::NotIt) => {
                self.notes.push(format!(
                    "debuginfod server {server} sent a file for build-id {build_id} \
                     that does not carry it: not used"
                ));
                Asked::Refused
            }
            Err(Stored::Read(e)) => {
                let why = http.read_error(&e);
                self.give_up(server, &why);
                Asked::Refused
            }
            Err(Stored::Write(e)) => {
                self.notes.push(format!(
                    "cannot keep the debug file from {server} in the debuginfod cache \
                     {}: {e}; not used",
                    self.settings.cache.display()
                ));
                Asked::CacheBroken
            }
        }
    }

    /// Whether `path` is a negative entry younger than `cache_miss_s`; an
    /// older one is removed (the servers are asked again).
    fn negative_entry_holds(&self, path: &Path) -> bool {
        let Some(age) = negative_entry_age(path) else {
            return false;
        };
        let limit = cache_miss_s(&self.settings.cache);
        if limit > 0 && age.as_secs() <= limit {
            return true;
        }
        let _ = std::fs::remove_file(path);
        false
    }

    fn give_up(&mut self, server: &str, why: &str) {
        self.failed.insert(server.to_string());
        self.notes.push(format!(
            "debuginfod server {server} cannot be used: {why}; \
             the functions it could name keep their module+offset names"
        ));
    }
}

/// What asking one server gave.
enum Asked {
    /// Its file, kept in the cache.
    Kept,
    /// 404.
    NotThere,
    /// Another answer, or none, or a wrong file.
    Refused,
    /// The cache cannot be written.
    CacheBroken,
}

/// The age of the negative entry at `path`, if it is one: an empty
/// regular file (elfutils since 0.190 writes them so) or one of mode 000
/// (elfutils 0.186 to 0.189).
fn negative_entry_age(path: &Path) -> Option<Duration> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    let negative = meta.is_file() && (meta.len() == 0 || meta.permissions().mode() & 0o777 == 0);
    if !negative {
        return None;
    }
    let mtime = meta.modified().ok()?;
    Some(
        SystemTime::now()
            .duration_since(mtime)
            .unwrap_or(Duration::ZERO),
    )
}

/// Seconds a negative entry holds: the number in `<cache>/cache_miss_s`,
/// else 600 (0: not at all).
pub fn cache_miss_s(cache: &Path) -> u64 {
    let Ok(text) = std::fs::read_to_string(cache.join("cache_miss_s")) else {
        return CACHE_MISS_DEFAULT_S;
    };
    let text = text.trim_start();
    let digits: String = text
        .char_indices()
        .take_while(|&(i, c)| c.is_ascii_digit() || (i == 0 && c == '-'))
        .map(|(_, c)| c)
        .collect();
    match digits.parse::<i64>() {
        Ok(n) => n.max(0) as u64,
        Err(_) => CACHE_MISS_DEFAULT_S,
    }
}

/// Why a body was not kept.
enum Stored {
    /// It does not carry the build-id asked for.
    NotIt,
    /// Reading it from the server failed.
    Read(std::io::Error),
    /// Writing the cache failed.
    Write(std::io::Error),
}

/// A temporary file beside `path` (in `dir`), made with `mode`; the cache
/// directory is made first.
fn temp_file(dir: &Path, mode: u32) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(".debuginfo.fctrace.{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    Ok((tmp, file))
}

/// Streams `body` to `path` (in `dir`) whole or not at all: a temporary
/// file in the same directory, checked for `build_id`, renamed over it.
fn store(
    dir: &Path,
    path: &Path,
    mut body: Box<dyn Read + Send + Sync>,
    build_id: &str,
) -> Result<(), Stored> {
    use std::io::Write;
    let (tmp, file) = temp_file(dir, 0o600).map_err(Stored::Write)?;
    let written = (|| {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Stored::Read(e)),
            };
            out.write_all(&buf[..n]).map_err(Stored::Write)?;
        }
        let file = out
            .into_inner()
            .map_err(|e| Stored::Write(e.into_error()))?;
        file.sync_all().map_err(Stored::Write)?;
        if crate::elfid::build_id_of_file(&tmp).as_deref() != Some(build_id) {
            return Err(Stored::NotIt);
        }
        std::fs::rename(&tmp, path).map_err(Stored::Write)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        // The build-id's directory, if this made it and it is empty.
        let _ = std::fs::remove_dir(dir);
    }
    written
}

/// Writes the negative entry for `path`: an empty file of mode 000,
/// renamed over it.
fn store_negative(dir: &Path, path: &Path) -> std::io::Result<()> {
    let (tmp, file) = temp_file(dir, 0)?;
    drop(file);
    let renamed = std::fs::rename(&tmp, path);
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}
