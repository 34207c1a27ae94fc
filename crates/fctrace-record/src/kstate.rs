//! The kernel tracer's settings that `-K` changes outside a tracefs
//! instance of its own (the top-level tracer when no instance can do
//! function_graph, a global `max_graph_depth`): each one's value before
//! the change is kept in memory and in a state file
//! (`/run/fctrace/kernel-<pid>`, else under the temporary directory), put
//! back at the end and the file removed. A fctrace killed before it could
//! (SIGKILL) leaves the file: the next `-K` recording restores what it
//! says ([`recover_stale`]) before it starts. The file also says that a
//! live fctrace holds the top-level tracer ([`top_level_holder`]).

use std::io::Write;
use std::path::{Path, PathBuf};

/// First word of a state file.
const MAGIC: &str = "fctrace-kernel-state";

/// Where the state files are.
fn state_dir() -> PathBuf {
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/fctrace")
    } else {
        std::env::temp_dir().join("fctrace-kernel-state")
    }
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(value.as_bytes())
}

/// A tracefs file's value as it can be written back: the selected clock
/// of `trace_clock`, nothing for an empty filter or pid list, else the
/// text.
fn restorable(path: &Path, text: &str) -> String {
    let t = text.trim();
    if t.starts_with("####") || t == "no pid" {
        return String::new();
    }
    if path.file_name().is_some_and(|n| n == "buffer_size_kb") {
        return buffer_kb(t).map(|k| k.to_string()).unwrap_or_default();
    }
    if path.file_name().is_some_and(|n| n == "trace_clock") {
        if let Some(c) = t.split_whitespace().find(|w| w.starts_with('[')) {
            return c.trim_matches(['[', ']']).to_string();
        }
    }
    t.to_string()
}

/// `buffer_size_kb`'s size: `1410`, or `7 (expanded: 1408)` before the
/// buffer was first used (the size it takes then).
pub fn buffer_kb(text: &str) -> Option<u64> {
    let t = text.trim();
    let n = match t.split_once("expanded:") {
        Some((_, rest)) => rest.trim().trim_end_matches(')'),
        None => t,
    };
    n.trim().parse().ok()
}

/// The settings changed so far and their old values.
pub struct Saved {
    file: PathBuf,
    top_level: bool,
    items: Vec<(PathBuf, String)>,
}

impl Saved {
    /// Nothing changed yet; `top_level`: the top-level tracer is taken.
    pub fn new(top_level: bool) -> Saved {
        Saved {
            file: state_dir().join(format!("kernel-{}", std::process::id())),
            top_level,
            items: Vec::new(),
        }
    }

    fn persist(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(state_dir())?;
        let mut text = format!(
            "{MAGIC} {}\n",
            if self.top_level { "top" } else { "instance" }
        );
        for (p, v) in &self.items {
            text.push_str(&format!("{}\t{}\n", p.display(), v.replace('\n', "\\n")));
        }
        std::fs::write(&self.file, text)
    }

    /// Sets `path` to `value`, its old value kept first (on disk too).
    pub fn change(&mut self, path: &Path, value: &str) -> std::io::Result<()> {
        self.change_shared(path, path, value)
    }

    /// Sets `path` to `value` where `global` is the same setting seen from
    /// tracefs' top level (function_graph's options, which every instance
    /// shares): `global`'s old value is kept and put back.
    pub fn change_shared(
        &mut self,
        global: &Path,
        path: &Path,
        value: &str,
    ) -> std::io::Result<()> {
        if !self.items.iter().any(|(p, _)| p == global) {
            let old = std::fs::read_to_string(global)?;
            self.items
                .push((global.to_path_buf(), restorable(global, &old)));
            self.persist()?;
        }
        write_file(path, value)
    }

    /// Puts every value back (the last changed first), removes the file.
    pub fn restore(&mut self) {
        for (p, v) in self.items.drain(..).rev() {
            let _ = write_file(&p, &v);
        }
        let _ = std::fs::remove_file(&self.file);
        // (Removed when no other fctrace has a file there.)
        let _ = std::fs::remove_dir(state_dir());
    }
}

/// A state file: its fctrace's pid, its path, whether it holds the top
/// level, the settings and their old values.
type StateFile = (u32, PathBuf, bool, Vec<(PathBuf, String)>);

/// The state files.
fn state_files() -> Vec<StateFile> {
    let Ok(dir) = std::fs::read_dir(state_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("kernel-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let mut lines = text.lines();
        let Some(mode) = lines.next().and_then(|l| l.strip_prefix(MAGIC)) else {
            continue;
        };
        let items = lines
            .filter_map(|l| l.split_once('\t'))
            .map(|(p, v)| (PathBuf::from(p), v.replace("\\n", "\n")))
            .collect();
        out.push((pid, e.path(), mode.trim() == "top", items));
    }
    out
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Restores the settings of fctrace recordings that were killed before
/// they could; one line per recording, to be said.
pub fn recover_stale() -> Vec<String> {
    let mut said = Vec::new();
    for (pid, file, top, items) in state_files() {
        if alive(pid) || pid == std::process::id() {
            continue;
        }
        for (p, v) in items.iter().rev() {
            let _ = write_file(p, v);
        }
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir(state_dir());
        said.push(format!(
            "restored the kernel tracer's settings ({}) that fctrace {pid} changed and could \
             not put back (it was killed)",
            if top {
                "the top-level tracer"
            } else {
                "max_graph_depth"
            }
        ));
    }
    said
}

/// A live fctrace (not this one) that holds the top-level tracer.
pub fn top_level_holder() -> Option<u32> {
    state_files()
        .into_iter()
        .find(|(pid, _, top, _)| *top && *pid != std::process::id() && alive(*pid))
        .map(|(pid, ..)| pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_written_back() {
        let p = Path::new("/x/trace_clock");
        assert_eq!(restorable(p, "local global [mono] boot\n"), "mono");
        let f = Path::new("/x/set_ftrace_filter");
        assert_eq!(restorable(f, "#### all functions enabled ####\n"), "");
        assert_eq!(
            restorable(f, "vfs_read\nvfs_write\n"),
            "vfs_read\nvfs_write"
        );
        assert_eq!(restorable(Path::new("/x/set_ftrace_pid"), "no pid\n"), "");
        assert_eq!(restorable(Path::new("/x/tracing_on"), "1\n"), "1");
        let b = Path::new("/x/buffer_size_kb");
        assert_eq!(restorable(b, "7 (expanded: 1408)\n"), "1408");
        assert_eq!(restorable(b, "1410\n"), "1410");
    }
}
