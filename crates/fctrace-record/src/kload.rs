//! `-k`: the dynamic loader's loading of fctrace's agent in each new
//! program. It happens before any of the agent's code runs, so no mark of
//! the agent's covers it: a thread's events from its `execve`'s return to
//! the agent's first mark are held here, then those
//! `store::kernel::agents_loading` says are the loader's work on the
//! agent's files (the agent's, and the libraries only it needs: its
//! `DT_NEEDED` that the program's own, closed over the libraries loaded,
//! does not name) are left out.

use fctrace_format::store::kernel::{agents_loading, KernelEvent};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Held events of one thread beyond this: not a program the agent starts
/// in (written as they are).
const MAX_HELD: usize = 1 << 16;

/// The loader's work for the agent, per thread of a new program.
pub struct AgentLoad {
    /// The agent's path in `LD_PRELOAD`.
    path: String,
    /// The agent's `DT_NEEDED`.
    needed: Vec<String>,
    /// Threads between their `execve`'s return and the agent's first
    /// mark: their events.
    held: HashMap<u32, Vec<KernelEvent>>,
    /// The new program's `DT_NEEDED` (read when its `execve`'s return was
    /// read; absent if it could not be).
    exe_needed: HashMap<u32, Vec<String>>,
    /// Libraries' `DT_NEEDED`, by path.
    needed_of: HashMap<Box<[u8]>, Vec<String>>,
    /// Programs each process executed.
    images: HashMap<u32, usize>,
    /// The trace's `sessions` directory.
    sessions: PathBuf,
}

/// Whether `p` is a `/proc/self/fd/N` or `/proc/PID/fd/N` path: how the
/// agent's memfd is preloaded (fctrace's own, or inherited by a program
/// in a new mount namespace).
fn proc_fd(p: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let Some(rest) = p.strip_prefix(b"/proc/") else {
        return false;
    };
    let mut parts = rest.split(|&b| b == b'/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(who), Some(b"fd"), Some(n), None) => (who == b"self" || digits(who)) && digits(n),
        _ => false,
    }
}

fn base_name(p: &[u8]) -> &[u8] {
    p.rsplit(|&b| b == b'/').next().unwrap_or(p)
}

impl AgentLoad {
    /// `sessions`: the trace's sessions directory.
    pub fn new(path: &str, agent: &[u8], sessions: &Path) -> AgentLoad {
        AgentLoad {
            path: path.to_string(),
            needed: fctrace_symbols::needed_libraries(agent),
            held: HashMap::new(),
            exe_needed: HashMap::new(),
            needed_of: HashMap::new(),
            images: HashMap::new(),
            sessions: sessions.to_path_buf(),
        }
    }

    /// The `DT_NEEDED` of the program process `pid` executed last, when
    /// it had ended before its /proc entry was read: the agent's session
    /// file of that program names it (`sessions/N.sym`: its `pid` and
    /// `exe` lines; a process's sessions are numbered in the order of
    /// its programs).
    fn exe_of_session(&mut self, pid: u32) -> Option<Vec<String>> {
        let nth = *self.images.get(&pid)?;
        let mut found: Vec<(u64, String)> = Vec::new();
        for entry in std::fs::read_dir(&self.sessions).ok()?.flatten() {
            let name = entry.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".sym"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let Ok(f) = std::fs::File::open(entry.path()) else {
                continue;
            };
            // (A fork child's own session, `forked` after its header, is
            // no program of its own.)
            let head: Vec<String> = BufReader::new(f).lines().take(5).flatten().collect();
            if head.iter().any(|l| l.starts_with("forked\t")) {
                continue;
            }
            let field = |k: &str| {
                head.iter()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('\t').map(str::to_string))
            };
            if field("pid").as_deref() == Some(pid.to_string().as_str()) {
                if let Some(exe) = field("exe") {
                    found.push((n, exe));
                }
            }
        }
        found.sort();
        let (_, exe) = found.get(nth.checked_sub(1)?)?;
        Some(fctrace_symbols::needed_libraries(&std::fs::read(exe).ok()?))
    }

    /// Thread `tid` executed a program (its `execve`'s return was just
    /// read): its `DT_NEEDED`, while its /proc entry is there.
    pub fn executed(&mut self, tid: u32) {
        *self.images.entry(tid).or_default() += 1;
        match std::fs::read(format!("/proc/{tid}/exe")) {
            Ok(bytes) => {
                self.exe_needed
                    .insert(tid, fctrace_symbols::needed_libraries(&bytes));
            }
            Err(_) => {
                self.exe_needed.remove(&tid);
            }
        }
    }

    /// Holds `tid`'s events from now on (its `execve` returned).
    pub fn start(&mut self, tid: u32) {
        self.held.insert(tid, Vec::new());
    }

    /// Takes `e` if `tid`'s events are held (`None`), else gives it back.
    /// Too many held: they go to `out` as they are.
    pub fn hold(
        &mut self,
        tid: u32,
        e: KernelEvent,
        out: &mut Vec<(u32, KernelEvent)>,
    ) -> Option<KernelEvent> {
        let Some(held) = self.held.get_mut(&tid) else {
            return Some(e);
        };
        held.push(e);
        if held.len() > MAX_HELD {
            let all = self.held.remove(&tid).unwrap_or_default();
            out.extend(all.into_iter().map(|e| (tid, e)));
        }
        None
    }

    /// The agent's first mark on `tid`: its held events but the loader's
    /// work for the agent go to `out`.
    pub fn agent_started(&mut self, tid: u32, out: &mut Vec<(u32, KernelEvent)>) {
        let Some(held) = self.held.remove(&tid) else {
            return;
        };
        let only = self.agents_only(tid, &held);
        let agents_file = |p: &[u8]| {
            p == self.path.as_bytes()
                || proc_fd(p)
                || only.iter().any(|n| base_name(p) == n.as_bytes())
        };
        let theirs = agents_loading(&held, &agents_file);
        out.extend(
            held.into_iter()
                .zip(theirs)
                .filter(|(_, t)| !t)
                .map(|(e, _)| (tid, e)),
        );
    }

    /// The agent's libraries the program does not need: none when its
    /// needs are unknown.
    fn agents_only(&mut self, tid: u32, held: &[KernelEvent]) -> Vec<String> {
        let Some(exe) = self
            .exe_needed
            .remove(&tid)
            .or_else(|| self.exe_of_session(tid))
        else {
            return Vec::new();
        };
        let mut need: HashSet<String> = exe.into_iter().collect();
        let opened: Vec<&[u8]> = held
            .iter()
            .filter_map(|e| match e {
                KernelEvent::Path {
                    nr: 2 | 257, bytes, ..
                } => Some(&bytes[..]),
                _ => None,
            })
            .collect();
        for p in &opened {
            if !self.needed_of.contains_key(*p) {
                let n = std::fs::read(std::ffi::OsStr::from_bytes(p))
                    .map(|b| fctrace_symbols::needed_libraries(&b))
                    .unwrap_or_default();
                self.needed_of.insert((*p).into(), n);
            }
        }
        // The program's needs, closed over the libraries loaded.
        loop {
            let mut more = Vec::new();
            for p in &opened {
                let name = String::from_utf8_lossy(base_name(p)).into_owned();
                if need.contains(&name) {
                    more.extend(
                        self.needed_of[*p]
                            .iter()
                            .filter(|n| !need.contains(*n))
                            .cloned(),
                    );
                }
            }
            if more.is_empty() {
                break;
            }
            need.extend(more);
        }
        self.needed
            .iter()
            .filter(|n| !need.contains(*n))
            .cloned()
            .collect()
    }

    /// At the end: what is still held (a program the agent never
    /// started in) goes to `out` as it is.
    pub fn flush(&mut self, out: &mut Vec<(u32, KernelEvent)>) {
        for (tid, held) in self.held.drain() {
            out.extend(held.into_iter().map(|e| (tid, e)));
        }
    }
}
