//! `record -K DEPTH -p PID` where PID is a kernel thread (a kworker,
//! ksoftirqd, rcu_preempt: `PF_KTHREAD` in its `/proc/PID/stat` flags).
//! It has no user side: no ptrace, no agent. Its kernel functions are
//! recorded through the function_graph tracer with the thread in
//! `set_ftrace_pid` until Ctrl-C, SIGTERM, `--duration` or its end, and
//! written as the kernel events of one task, the thread.

use crate::kernel::KernelFilters;
use anyhow::{bail, Context, Result};
use fctrace_format::store::{TaskInfo, TaskOrigin, TraceInfo, TraceWriter};
use std::path::Path;
use std::time::{Duration, Instant};

/// `PF_KTHREAD` (include/linux/sched.h): the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// How often the tracer's pipe is read.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// Process `pid`'s name, if it is a kernel thread.
pub fn kernel_thread(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: the flags are the 7th field after comm.
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let flags: u64 = rest.split_whitespace().nth(6)?.parse().ok()?;
    (flags & PF_KTHREAD != 0).then_some(comm)
}

/// Records kernel thread `pid` (named `comm`) into `dir`: its kernel
/// functions, `depth` levels deep, through `filters`, for `duration` at
/// most or until Ctrl-C or SIGTERM; the notes to say at the end.
pub fn record_kernel_thread(
    pid: u32,
    comm: &str,
    depth: Option<u32>,
    filters: &KernelFilters,
    duration: Option<Duration>,
    dir: &Path,
) -> Result<Vec<String>> {
    let Some(depth) = depth else {
        bail!(
            "process {pid} ({comm}) is a kernel thread: it has no user side to trace (no \
             program, no ptrace); record its kernel functions with -K DEPTH"
        );
    };
    let mut g = crate::kgraph::FuncGraph::open(depth)
        .map_err(|why| anyhow::anyhow!("-K: kernel thread {pid} ({comm}): {why}"))?;
    g.filter(filters.only.clone(), filters.hide.clone());
    crate::process::install_signal_handlers();
    let mut writer = TraceWriter::create(dir)?;
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let first = crate::shm::clock_pair();
    // (The task's events file, none but the kernel's; its symbol table,
    // empty.)
    writer.append_task(0, pid, &[])?;
    let table = fctrace_format::symtab::SymTab {
        pid,
        exe: format!("[{comm}]"),
        ..Default::default()
    };
    let mut text = Vec::new();
    fctrace_format::symtab::write_symtab(&mut text, &table)?;
    let sym = writer.sessions_dir().join("0.sym");
    std::fs::write(&sym, text).with_context(|| format!("cannot write {}", sym.display()))?;
    g.follow(&[pid as i32])
        .map_err(|why| anyhow::anyhow!("-K: kernel thread {pid} ({comm}): {why}"))?;
    let until = match duration {
        Some(d) => format!("for {d:?} at most, or until Ctrl-C"),
        None => "until Ctrl-C".to_string(),
    };
    eprintln!(
        "fctrace: process {pid} ({comm}) is a kernel thread: no user side to trace (no \
         ptrace, no agent); recording its kernel functions {until}"
    );
    let started = Instant::now();
    let mut events: Vec<crate::kgraph::FuncEvent> = Vec::new();
    let mut written = 0u64;
    loop {
        let stop = crate::process::take_typed_interrupt().is_some()
            || !crate::process::take_forward().is_empty()
            || duration.is_some_and(|d| started.elapsed() >= d)
            || !Path::new(&format!("/proc/{pid}")).exists();
        g.read(&mut events);
        // (The pid filter's other threads: the end of a switch into them.)
        let offset = crate::clock::kernel_offset();
        for f in events.drain(..).filter(|f| f.tid == pid) {
            let mut e = f.event;
            e.set_ns(e.ns() + offset);
            writer.append_kernel(0, f.tid, &e)?;
            written += 1;
        }
        if stop {
            break;
        }
        std::thread::sleep(DRAIN_EVERY);
    }
    let lost = g.lost();
    drop(g);
    let mut notes = Vec::new();
    if lost > 0 {
        notes.push(format!(
            "-K: the kernel's tracer lost {lost} events (its buffer was full)"
        ));
    }
    if written == 0 {
        notes.push(format!(
            "-K: kernel thread {pid} ({comm}) ran no traced kernel function while recorded"
        ));
    }
    let info = TraceInfo {
        program: format!("[{comm}]"),
        args: vec![format!("[{comm}]")],
        start_unix_ns,
        tasks: vec![TaskInfo {
            id: 0,
            origin: TaskOrigin::Attach,
            tid: pid,
            pid,
            comm: comm.to_string(),
            ..Default::default()
        }],
        clock: crate::facts::clock_of(first, crate::shm::clock_pair()),
        warnings: notes.clone(),
        detached: true,
        kernel_events: writer.kernel_counts().0,
        ..Default::default()
    };
    writer.finish(info).context("cannot write the trace")?;
    Ok(notes)
}
