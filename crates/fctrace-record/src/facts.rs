//! What the trace says about the run, shared by the trace written at the
//! end and the flight recorder's snapshots: the program, its command
//! line, the clock, each task's description.

use crate::shm;
use fctrace_format::shm::{ORIGIN_ATTACH, ORIGIN_EXEC, ORIGIN_FORK, ORIGIN_THREAD};
use fctrace_format::store::{Clock, TaskInfo, TaskOrigin, TraceInfo};
use std::ffi::OsString;
use std::path::Path;

/// What every snapshot and the trace say about the run.
pub(crate) struct RunFacts<'a> {
    pub(crate) program: &'a Path,
    pub(crate) command: &'a [OsString],
    pub(crate) start_unix_ns: u64,
    /// The clock pair taken when the recording started.
    pub(crate) first: (u64, u64),
    pub(crate) wire: &'a str,
}

impl RunFacts<'_> {
    /// The trace's description of the run, without its tasks and totals.
    pub(crate) fn base_info(&self) -> TraceInfo {
        TraceInfo {
            program: std::fs::canonicalize(self.program)
                .unwrap_or_else(|_| self.program.to_path_buf())
                .to_string_lossy()
                .into_owned(),
            args: self
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            cwd: std::env::current_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            start_unix_ns: self.start_unix_ns,
            options: self.wire.to_string(),
            facts: system_facts(),
            ..Default::default()
        }
    }
}

/// A file of /proc or /sys, trimmed (empty if unreadable).
fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The number of CPUs in a /sys CPU list (`0-3,6`).
fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => 1,
        })
        .sum()
}

/// The system a trace is recorded on (and `fctrace info --system`'s
/// lines), as uftrace's info shows it: CPU model and count, memory, load,
/// kernel, hostname, distribution, perf_event_paranoid, kptr_restrict;
/// (label, value) pairs, a value left out when the system does not say.
pub fn system_facts() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    let mut add = |label: &str, value: String| {
        if !value.is_empty() {
            v.push((label.to_string(), value));
        }
    };
    let cpuinfo = read_trimmed("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_default();
    add("cpu info", model);
    let online = cpu_count(&read_trimmed("/sys/devices/system/cpu/online"));
    let possible = cpu_count(&read_trimmed("/sys/devices/system/cpu/possible"));
    if online > 0 {
        add(
            "number of cpus",
            format!("{online} / {possible} (online / possible)"),
        );
    }
    let meminfo = read_trimmed("/proc/meminfo");
    let kb = |key: &str| -> Option<f64> {
        meminfo.lines().find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .trim_end_matches(" kB")
                .parse()
                .ok()
        })
    };
    if let (Some(free), Some(total)) = (kb("MemFree:"), kb("MemTotal:")) {
        let gb = |k: f64| k / (1024.0 * 1024.0);
        add(
            "memory info",
            format!("{:.1} / {:.1} GB (free / total)", gb(free), gb(total)),
        );
    }
    let loadavg = read_trimmed("/proc/loadavg");
    let load: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    if load.len() == 3 {
        add(
            "system load",
            format!("{} / {} / {} (1 / 5 / 15 min)", load[0], load[1], load[2]),
        );
    }
    let release = read_trimmed("/proc/sys/kernel/osrelease");
    if !release.is_empty() {
        add("kernel version", format!("Linux {release}"));
    }
    add("hostname", read_trimmed("/proc/sys/kernel/hostname"));
    let os = read_trimmed("/etc/os-release");
    add(
        "distro",
        os.lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .unwrap_or_default()
            .to_string(),
    );
    add(
        "perf_event_paranoid",
        read_trimmed("/proc/sys/kernel/perf_event_paranoid"),
    );
    add(
        "kptr_restrict",
        read_trimmed("/proc/sys/kernel/kptr_restrict"),
    );
    v
}

/// What the program used, as uftrace's info shows it (from
/// [`crate::process::children_usage`], after it was reaped): CPU time,
/// context switches, max RSS, page faults.
pub(crate) fn usage_facts(u: &crate::process::ChildUsage) -> Vec<(String, String)> {
    let sec = |us: i64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    vec![
        (
            "cpu time".to_string(),
            format!("{} / {} sec (sys / user)", sec(u.system_us), sec(u.user_us)),
        ),
        (
            "context switch".to_string(),
            format!(
                "{} / {} (voluntary / involuntary)",
                u.voluntary_switches, u.involuntary_switches
            ),
        ),
        ("max rss".to_string(), format!("{} KB", u.max_rss_kb)),
        (
            "page fault".to_string(),
            format!("{} / {} (major / minor)", u.major_faults, u.minor_faults),
        ),
    ]
}

/// The clock of a trace whose recording started at `first` (a TSC and
/// CLOCK_MONOTONIC pair) and is described at `last`.
pub(crate) fn clock_of(first: (u64, u64), last: (u64, u64)) -> Clock {
    let ((t0, n0), (t1, n1)) = (first, last);
    let tsc_hz = if t1 > t0 && n1 > n0 {
        (t1 - t0) as f64 * 1e9 / (n1 - n0) as f64
    } else {
        0.0
    };
    Clock {
        tsc_hz,
        pairs: vec![first, last],
        name: match crate::clock::name() {
            "mono" => String::new(),
            other => other.to_string(),
        },
    }
}

/// The trace's description of a task slot: its id is the slot number, its
/// parent the slot that created it.
pub(crate) fn task_info(t: &shm::TaskSlotCopy, slots: &[shm::TaskSlotCopy]) -> TaskInfo {
    let parent = slots
        .iter()
        .find(|p| p.slot == t.parent_slot && p.slot != t.slot);
    let origin = match (t.origin, parent) {
        // What the agent says, even when the parent is unknown (a thread
        // whose creator made no traced call before exec'ing, ...).
        (ORIGIN_THREAD, _) => TaskOrigin::Thread,
        (ORIGIN_FORK, _) => TaskOrigin::Fork,
        (ORIGIN_EXEC, Some(p)) if p.pid == t.pid => TaskOrigin::Exec,
        (ORIGIN_EXEC, Some(_)) => TaskOrigin::Spawn,
        (ORIGIN_EXEC, None) => TaskOrigin::Exec,
        (ORIGIN_ATTACH, _) => TaskOrigin::Attach,
        // The agent registers only the program it starts as ORIGIN_START
        // (the agent and this recorder come from the same binary).
        _ => TaskOrigin::Start,
    };
    TaskInfo {
        id: t.slot,
        origin,
        parent: parent.map(|p| p.slot),
        file: String::new(),
        tid: t.tid,
        pid: t.pid,
        ppid: t.ppid,
        parent_tid: parent.map(|p| p.tid),
        session: t.session,
        comm: t.comm.clone(),
        events: 0,
    }
}
