//! `fctrace snapshot`: asks a running `fctrace record --ring` for a
//! snapshot (SIGUSR2 to it, found through its trace directory) and waits
//! until it is written.

use crate::cli::SnapshotArgs;
use anyhow::{anyhow, bail, Result};
use fctrace_format::store::Trace;
use fctrace_record::RECORDER_PID_FILE;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long to wait for the snapshot to appear.
const WAIT: Duration = Duration::from_secs(60);

/// The number of the last snapshot written in `dir` (0: none yet).
fn last_snapshot(dir: &Path) -> u32 {
    Trace::open(dir)
        .ok()
        .and_then(|t| t.info.snapshot.map(|s| s.number))
        .unwrap_or(0)
}

pub fn run(args: SnapshotArgs) -> Result<ExitCode> {
    let dir = &args.dir;
    let pid_path = dir.join(RECORDER_PID_FILE);
    let text = std::fs::read_to_string(&pid_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!(
                "{}: no flight recorder is recording there (no {RECORDER_PID_FILE}); start one \
                 with `fctrace record --ring SIZE -d {}`",
                dir.display(),
                dir.display()
            )
        } else {
            anyhow!("{}: {e}", pid_path.display())
        }
    })?;
    let pid: i32 = text.trim().parse().ok().filter(|&p| p > 0).ok_or_else(|| {
        anyhow!(
            "{}: not a process id: {:?}",
            pid_path.display(),
            text.trim()
        )
    })?;
    // It must be fctrace, not whatever process has that number now.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let is_fctrace = exe
        .as_ref()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("fctrace"));
    if !is_fctrace {
        bail!(
            "{}: the flight recorder that recorded there (process {pid}) has ended",
            dir.display()
        );
    }
    let before = last_snapshot(dir);
    let pid = rustix::process::Pid::from_raw(pid).expect("positive");
    rustix::process::kill_process(pid, rustix::process::Signal::USR2).map_err(|e| {
        anyhow!(
            "cannot signal the flight recorder (process {}): {e}",
            pid.as_raw_nonzero()
        )
    })?;
    if args.no_wait {
        eprintln!(
            "fctrace: asked process {} for a snapshot into {}",
            pid.as_raw_nonzero(),
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    loop {
        let now = last_snapshot(dir);
        if now > before {
            eprintln!("fctrace: snapshot {now} written to {}", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        if !Path::new(&format!("/proc/{}", pid.as_raw_nonzero())).exists() {
            bail!("the flight recorder ended before writing a snapshot");
        }
        if started.elapsed() > WAIT {
            bail!(
                "no snapshot appeared in {} within {} s",
                dir.display(),
                WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
