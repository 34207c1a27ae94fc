//! debuginfod, as elfutils' client uses it: the servers of
//! `DEBUGINFOD_URLS` (space-separated base URLs) are asked
//! `GET <url>/buildid/<hex>/debuginfo` in turn; what one sends is kept in
//! the cache (`DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`), as `<build-id>/debuginfo`, where the
//! next lookup finds it without asking. `DEBUGINFOD_TIMEOUT` (seconds,
//! default 90) bounds the connection and each read.
//!
//! A server that cannot be reached gets one note (not one per module) and
//! is not asked again; nothing here is fatal.

use crate::http::{self, Answer};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// from the cache, else from the first server that has it.
    pub fn find(&mut self, build_id: &str, matches: impl Fn(&Path) -> bool) -> Option<Fetched> {
        if self.settings.servers.is_empty() || build_id.len() < 2 {
            return None;
        }
        let dir = self.settings.cache.join(build_id);
        let path = dir.join("debuginfo");
        if matches(&path) {
            return Some(Fetched { path, server: None });
        }
        for server in self.settings.servers.clone() {
            if self.failed.contains(&server) {
                continue;
            }
            let url = format!(
                "{}/buildid/{build_id}/debuginfo",
                server.trim_end_matches('/')
            );
            match http::get(&url, self.settings.timeout) {
                Ok(Answer::Found(body)) => {
                    if crate::elfid::build_id_of_bytes(&body).as_deref() != Some(build_id) {
                        self.notes.push(format!(
                            "debuginfod server {server} sent a file for build-id {build_id} \
                             that does not carry it: not used"
                        ));
                        continue;
                    }
                    if let Err(e) = store(&dir, &path, &body) {
                        self.notes.push(format!(
                            "cannot keep the debug file from {server} in the debuginfod cache \
                             {}: {e}; not used",
                            self.settings.cache.display()
                        ));
                        return None;
                    }
                    return Some(Fetched {
                        path,
                        server: Some(server),
                    });
                }
                Ok(Answer::Status(404)) => {}
                Ok(Answer::Status(status)) => {
                    self.give_up(&server, &format!("it answered HTTP {status}"))
                }
                Err(e) => self.give_up(&server, &e),
            }
        }
        None
    }

    fn give_up(&mut self, server: &str, why: &str) {
        self.failed.insert(server.to_string());
        self.notes.push(format!(
            "debuginfod server {server} cannot be used: {why}; \
             the functions it could name keep their module+offset names"
        ));
    }
}

/// Writes `data` to `path` (in `dir`) whole or not at all: a temporary file
/// in the same directory, renamed over it.
fn store(dir: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(".debuginfo.fctrace.{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
