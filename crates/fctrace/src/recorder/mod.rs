//! Recording: start the program with the agent preloaded, drain the
//! agent's shared memory into a trace directory until the program and all
//! its descendants have ended.

mod process;
mod shm;

use crate::cli::TraceOptions;
use anyhow::{Context, Result};
use fctrace_format::event::RawEvent;
use fctrace_format::shm::{Layout, FLAG_NEST_LIBCALL, ORIGIN_EXEC, ORIGIN_FORK, ORIGIN_THREAD};
use fctrace_format::store::{Clock, ExitStatus, TaskInfo, TaskOrigin, TraceInfo, TraceWriter};
use std::ffi::OsString;
use std::path::Path;

pub use process::exit_like;

/// The agent, built from crates/fctrace-agent by build.rs.
static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fctrace_agent.so"));

pub struct Outcome {
    pub exit: Option<ExitStatus>,
    /// Events that could not be recorded (also in the trace's info).
    pub lost_events: u64,
}

/// Checks that the program can be traced at all; returns its path and
/// warnings to show.
fn preflight(command: &[OsString]) -> Result<(std::path::PathBuf, Vec<String>)> {
    let program = process::resolve_program(&command[0])?;
    let info = fctrace_symbols::read_headers(&program).map_err(|e| anyhow::anyhow!("{e}"))?;
    info.check_traceable()
        .map_err(|e| anyhow::anyhow!("{}: {e}", program.display()))?;
    let mut warnings = Vec::new();
    if !info.has_symtab {
        warnings.push(format!(
            "{}: stripped (no .symtab): only functions named in its dynamic symbol table are traced",
            program.display()
        ));
    }
    Ok((program, warnings))
}

pub fn record(
    command: &[OsString],
    dir: &Path,
    opts: &TraceOptions,
    options: &fctrace_options::Options,
) -> Result<Outcome> {
    let (program, mut warnings) = preflight(command)?;
    if let Some(why) = process::secure_exec_reason(&program) {
        warnings.insert(
            0,
            format!(
                "{} is {why}: the dynamic loader ignores LD_PRELOAD for it, so it runs untraced",
                program.display()
            ),
        );
    }
    for w in &warnings {
        eprintln!("fctrace: {w}");
    }
    let mut writer = TraceWriter::create(dir)?;
    let abs_dir = std::fs::canonicalize(writer.dir()).context("trace directory")?;
    let flags = if opts.nest_libcall {
        FLAG_NEST_LIBCALL
    } else {
        0
    };
    let mem = shm::SharedMemory::create(Layout::DEFAULT, flags)?;
    let (_agent_fd, mut agent_path) = shm::agent_file(AGENT)?;
    // For profiling fctrace itself: an agent loaded from a file has symbols
    // that perf and gdb can resolve (the embedded one is a memfd).
    if let Some(p) = std::env::var_os("FCTRACE_AGENT_PATH") {
        agent_path = p.to_string_lossy().into_owned();
    }

    let mut env = vec![
        ("FCTRACE_SHM".to_string(), mem.path()),
        (
            "FCTRACE_DIR".to_string(),
            abs_dir.to_string_lossy().into_owned(),
        ),
    ];
    // Filters, triggers and argument specs for the agent (which removes
    // the variable before the program runs, and passes it on to programs
    // it executes).
    let wire = if options.is_empty() {
        String::new()
    } else {
        options.to_wire()
    };
    if !wire.is_empty() {
        env.push(("FCTRACE_OPTIONS".to_string(), wire.clone()));
    }
    // Last: the dynamic loader takes the last LD_PRELOAD of the
    // environment, and the agent removes exactly this one (the user's own,
    // if any, stays where it was).
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(orig) if !orig.is_empty() => format!("{agent_path}:{orig}"),
        _ => agent_path.clone(),
    };
    env.push(("LD_PRELOAD".into(), preload));

    process::install_signal_handlers();
    process::become_subreaper();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let first = shm::clock_pair();
    let child = process::spawn(&program, &command[0], &command[1..], &env)?;

    // Streams are keyed by task slot: an exec keeps the tid but is a new
    // task (new slot), and tids can be reused.
    let mut sink = |task: shm::TaskKey, ev: &[RawEvent]| -> Result<()> {
        writer.append_task(task.slot, task.tid, ev)?;
        Ok(())
    };
    let mut exit = None;
    let mut last_reclaim = std::time::Instant::now();
    loop {
        let mut busy = false;
        while mem.drain_one(&mut sink)? {
            busy = true;
        }
        if last_reclaim.elapsed() > std::time::Duration::from_millis(20) {
            mem.reclaim_dead(&mut sink)?;
            last_reclaim = std::time::Instant::now();
        }
        for sig in process::take_forward() {
            process::send_signal(child.pid, sig);
        }
        match process::reap_one(child.pid, false) {
            process::Reaped::Some(Some(st)) => exit = Some(st),
            process::Reaped::Some(None) => {}
            process::Reaped::NoChildren => break,
            process::Reaped::Running => {
                if !busy {
                    process::sleep_briefly();
                }
            }
        }
    }
    mem.set_recorder_gone();
    mem.drain_orphans(&mut sink)?;
    let last = shm::clock_pair();

    let slots = mem.tasks();
    let tasks: Vec<TaskInfo> = slots.iter().map(|t| task_info(t, &slots)).collect();
    let (t0, n0) = first;
    let (t1, n1) = last;
    let tsc_hz = if t1 > t0 && n1 > n0 {
        (t1 - t0) as f64 * 1e9 / (n1 - n0) as f64
    } else {
        0.0
    };
    let lost = mem.lost_events();
    let mut warnings = warnings;
    for w in process::untraced_executions(&abs_dir.join("sessions")) {
        eprintln!("fctrace: {w}");
        warnings.push(w);
    }
    if lost > 0 {
        warnings.push(format!("{lost} events were lost"));
    }
    if tasks.is_empty() {
        warnings.push("no task was traced: the agent did not start in the program".into());
    }
    let info = TraceInfo {
        program: std::fs::canonicalize(&program)
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned(),
        args: command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        start_unix_ns,
        exit,
        tasks,
        clock: Clock {
            tsc_hz,
            pairs: vec![first, last],
        },
        lost_events: lost,
        warnings,
        options: wire,
        ..Default::default()
    };
    writer.finish(info)?;
    Ok(Outcome {
        exit,
        lost_events: lost,
    })
}

/// The trace's description of a task slot: its id is the slot number, its
/// parent the slot that created it.
fn task_info(t: &shm::TaskSlotCopy, slots: &[shm::TaskSlotCopy]) -> TaskInfo {
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
