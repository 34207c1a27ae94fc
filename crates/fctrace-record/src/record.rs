//! Recording: start the program with the agent preloaded (or attach to a
//! running process), drain the agent's shared memory into a trace
//! directory until the program and all its descendants have ended (or
//! fctrace detaches).

use crate::facts::{clock_of, task_info, RunFacts};
use crate::flight::{Flight, RingOptions};
use crate::sink::Sink;
use crate::{attach, ends, kernel, process, shm};
use anyhow::{Context, Result};
use fctrace_format::shm::{
    Layout, FLAG_NEST_LIBCALL, ORIGIN_FORK, RECORDER_DEAD, RECORDER_DETACHING, RECORDER_DONE,
    RECORDER_STOPPED,
};
use fctrace_format::store::{ExitStatus, TaskInfo, TraceInfo, TraceWriter};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The agent, built from crates/fctrace-agent by build.rs.
static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fctrace_agent.so"));

pub struct Outcome {
    pub exit: Option<ExitStatus>,
    /// How a recording of an attached process ended (None: launched).
    pub attach: Option<AttachEnd>,
    /// What went wrong while recording and what was not recorded, to say
    /// on stderr at the end (also in the trace's warnings).
    pub notes: Vec<String>,
}

/// How the recording of an attached process ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AttachEnd {
    /// fctrace detached; the process runs on.
    Detached,
    /// Detaching failed (said in the notes, with the process's state).
    DetachFailed,
    /// The process ended while recorded (its status in `exit`, if known).
    Ended,
}

/// fctrace's own ending: as the program's for a launched one; attached,
/// a clean detach is a success and a failed one is not, and a process
/// that ended while recorded is ended as a launched program's (its code,
/// or the same signal; unknown: 1).
pub fn end_like(exit: Option<ExitStatus>, attach: Option<AttachEnd>) -> std::process::ExitCode {
    match attach {
        Some(AttachEnd::Detached) => std::process::ExitCode::SUCCESS,
        Some(AttachEnd::DetachFailed) => std::process::ExitCode::from(1),
        Some(AttachEnd::Ended) | None => process::exit_like(exit),
    }
}

/// Checks that the program can be traced at all; returns its path and
/// warnings to show.
fn preflight(command: &[OsString]) -> Result<(std::path::PathBuf, Vec<String>)> {
    let program = process::resolve_program(&command[0])?;
    // A #! script runs as the kernel runs it: its interpreter is traced,
    // and what that executes.
    let runs = process::resolve_interpreter(&program)?;
    let info = fctrace_symbols::read_headers(&runs).map_err(|e| anyhow::anyhow!("{e}"))?;
    info.check_traceable().map_err(|e| {
        if runs == program {
            anyhow::anyhow!("{}: {e}", program.display())
        } else {
            anyhow::anyhow!(
                "{}: its interpreter {}: {e}",
                program.display(),
                runs.display()
            )
        }
    })?;
    let mut warnings = Vec::new();
    // A stripped program's functions come from its debug file, if installed
    // (a script's interpreter is not the program: no warning about it).
    if runs == program
        && !info.has_symtab
        && !info.has_minidebuginfo
        && fctrace_symbols::debugfile::find_for_path(&program).is_none()
    {
        warnings.push(format!(
            "{}: stripped (no .symtab): functions its dynamic symbol table does not name \
             are found from its call frame information and named by address ({}+0x...)",
            program.display(),
            // As the agent names the module: by the file the link resolves to.
            fctrace_format::symtab::module_file_name(
                &std::fs::canonicalize(&program)
                    .unwrap_or_else(|_| program.clone())
                    .to_string_lossy()
            )
        ));
    }
    Ok((program, warnings))
}

/// What is recorded: a program fctrace starts, or a running process.
pub enum Target<'a> {
    /// The program and its arguments.
    Launch(&'a [OsString]),
    /// A process to attach to (`-p PID`), for this long at most
    /// (`--duration`; None: until it ends or fctrace is interrupted),
    /// tracing these of its threads (`--tid`; empty: all).
    Attach(u32, Option<std::time::Duration>, Vec<u32>),
}

/// The program a running process runs, and its command line.
fn attached_command(pid: u32) -> Result<(std::path::PathBuf, Vec<OsString>)> {
    use std::os::unix::ffi::OsStrExt;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("no such process: {pid}"))?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut args: Vec<OsString> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| std::ffi::OsStr::from_bytes(a).to_os_string())
        .collect();
    if args.is_empty() {
        args.push(exe.clone().into_os_string());
    }
    Ok((exe, args))
}

use fctrace_format::store::RECORDER_PID_FILE;

/// What to record, where and how: one recording's settings (the CLI
/// builds them from its options).
pub struct RecordSettings<'a> {
    /// The program to start, or the process to attach to.
    pub target: Target<'a>,
    /// The trace directory to write (an earlier trace there is kept aside).
    pub dir: &'a Path,
    /// `-l`: the agent also traces every function inside the shared
    /// libraries, not only the calls from the program into them.
    pub nest_libcall: bool,
    /// `-k`: the system calls of the traced tasks are recorded too (the
    /// kernel's tracepoints); the agent is told so.
    pub kernel: bool,
    /// `-K DEPTH`: the kernel functions under each system call, this many
    /// levels deep (the system calls are then recorded too, as with
    /// `kernel`).
    pub kernel_depth: Option<u32>,
    /// Filters, triggers and argument specs, for the agent.
    pub options: &'a fctrace_options::Options,
    /// `record --ring`: a flight recorder keeping the latest events only
    /// (None: every event is written).
    pub ring: Option<RingOptions>,
    /// The start-up cache's directory (None: `--no-cache`; see
    /// [`crate::startcache`]).
    pub cache: Option<PathBuf>,
}

/// Records `settings.target` into `settings.dir`, in phases: the trace
/// directory (`prepare`), the shared memory and the agent's environment
/// (`shared_memory`), the program started or the process attached, with
/// the kernel's events (`start`), the recording itself (`drain`), and what
/// the trace and fctrace say of it (`conclude`).
pub fn record(settings: RecordSettings<'_>) -> Result<Outcome> {
    let RecordSettings {
        target,
        dir,
        nest_libcall,
        kernel: syscalls,
        kernel_depth,
        options,
        ring,
        cache,
    } = settings;
    if ring.is_some() && (syscalls || kernel_depth.is_some()) {
        anyhow::bail!(
            "--ring keeps function events only: the kernel's (-k, -K) are not kept in the \
             ring; record them without --ring"
        );
    }
    // A kernel thread: its kernel functions only.
    if let Target::Attach(pid, duration, _) = target {
        if let Some(comm) = crate::kthread::kernel_thread(pid) {
            let (_, kfilters) = kernel::KernelFilters::split(options);
            let notes = crate::kthread::record_kernel_thread(
                pid,
                &comm,
                kernel_depth,
                &kfilters,
                duration,
                dir,
            )?;
            return Ok(Outcome {
                exit: None,
                attach: Some(AttachEnd::Detached),
                notes,
            });
        }
    }
    let prepared = prepare(target, dir, ring)?;
    crate::startcache::offer(&prepared.abs_dir, cache.as_deref());
    let flags = if nest_libcall { FLAG_NEST_LIBCALL } else { 0 }
        | if syscalls {
            fctrace_format::shm::FLAG_KERNEL
        } else {
            0
        };
    // `-F FUNC@kernel`, `-N FUNC@kernel`: the kernel functions', not the
    // agent's.
    let (options, kfilters) = kernel::KernelFilters::split(options);
    if !kfilters.is_empty() && kernel_depth.is_none() {
        if kfilters.patterns().contains("@[syscall]") {
            anyhow::bail!(
                "{}: at record time, a system call filter chooses the kernel functions \
                 recorded (those it runs) and needs -K DEPTH; to show only these system \
                 calls, give it to replay or report",
                kfilters.patterns()
            );
        }
        anyhow::bail!(
            "{}: a filter of kernel functions needs -K DEPTH (they are recorded with -K only)",
            kfilters.patterns()
        );
    }
    let memory = shared_memory(&prepared, flags, &options)?;
    let mut rec = start(
        prepared,
        memory,
        syscalls || kernel_depth.is_some(),
        kernel_depth.map(|d| (d, kfilters.clone())),
    )?;
    // -K: the kernel functions of the program's threads (those it creates
    // from now on followed by the kernel).
    if let (Some(depth), Some(k)) = (kernel_depth, rec.kernel.as_mut()) {
        if let Some(w) = k.trace_functions(depth, &kfilters, &threads_of(rec.child_pid)) {
            eprintln!("fctrace: {w}");
            rec.warnings.push(w);
        }
    }
    let drained = drain(&mut rec)?;
    let trace = rec.abs_dir.clone();
    let outcome = conclude(rec, drained);
    crate::startcache::install(&trace, cache.as_deref());
    Ok(outcome)
}

/// What the recording knows before the shared memory exists.
struct Prepared<'a> {
    target: Target<'a>,
    /// The program run (an attached process's executable).
    program: PathBuf,
    /// Its command line.
    command: Vec<OsString>,
    /// Said on stderr as they come, and kept in the trace.
    warnings: Vec<String>,
    /// Why the dynamic loader ignores LD_PRELOAD for the launched program
    /// (it then runs untraced).
    secure_exec: Option<String>,
    writer: TraceWriter,
    /// The trace directory, absolute.
    abs_dir: PathBuf,
    ring: Option<RingOptions>,
}

/// First phase: the target checked (a program fctrace can trace, a process
/// it can attach to), the trace directory created (`--ring`: fctrace's
/// pid in it, and the snapshot signal handled).
fn prepare<'a>(target: Target<'a>, dir: &Path, ring: Option<RingOptions>) -> Result<Prepared<'a>> {
    let (program, command, mut warnings) = match target {
        Target::Launch(command) => {
            let (program, warnings) = preflight(command)?;
            (program, command.to_vec(), warnings)
        }
        Target::Attach(pid, _, ref tids) => {
            attach::preflight(pid as i32)?;
            if let Some(t) = tids
                .iter()
                .find(|t| !std::path::Path::new(&format!("/proc/{pid}/task/{t}")).exists())
            {
                anyhow::bail!("--tid {t}: no such thread in process {pid}");
            }
            let (program, command) = attached_command(pid)?;
            (program, command, Vec::new())
        }
    };
    let secure_exec = match target {
        Target::Launch(_) => process::secure_exec_reason(&program),
        Target::Attach(..) => None,
    };
    if let Some(why) = &secure_exec {
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
    if let Some((old, replaced)) = writer.kept_earlier() {
        eprintln!(
            "fctrace: kept the earlier trace as {}{}",
            old.display(),
            if *replaced {
                " (replacing the older one there)"
            } else {
                ""
            }
        );
    }
    let abs_dir = std::fs::canonicalize(writer.dir()).context("trace directory")?;
    if let Some(r) = ring {
        writer.set_ring(r.size);
        write_pid_file(&abs_dir.join(RECORDER_PID_FILE))?;
        process::install_snapshot_signal();
    }
    Ok(Prepared {
        target,
        program,
        command,
        warnings,
        secure_exec,
        writer,
        abs_dir,
        ring,
    })
}

/// The shared memory and what the agent is told.
struct Memory {
    mem: shm::SharedMemory,
    /// Watches an attached process's end (from before it runs traced).
    end_watch: Option<ends::EndWatch>,
    /// An attached process, stopped until it runs traced.
    attaching: Option<attach::Attaching>,
    /// The agent's file, kept open while the recording lasts.
    agent_fd: OwnedFd,
    /// Its path for fctrace (and the kernel's events).
    agent_path: String,
    /// The agent's variables (`LD_PRELOAD` last).
    env: Vec<(String, String)>,
    /// Descriptors the launched program inherits.
    inherited: Vec<i32>,
    /// The options as the agent reads them (`FCTRACE_OPTIONS`).
    wire: String,
}

/// Second phase: the shared memory (attaching: the process stopped, the
/// memory a file of its own making), the agent's file, and the variables
/// the agent reads.
fn shared_memory(
    p: &Prepared<'_>,
    flags: u32,
    options: &fctrace_options::Options,
) -> Result<Memory> {
    // Attaching: the process is stopped from here until it runs traced;
    // the shared memory is a file of its own making.
    // Its end is watched from before it runs traced.
    let end_watch = match p.target {
        Target::Attach(pid, ..) => Some(ends::EndWatch::new(pid as i32)),
        Target::Launch(_) => None,
    };
    let mut attaching = match p.target {
        Target::Attach(pid, ..) => Some(attach::begin(pid as i32)?),
        Target::Launch(_) => None,
    };
    let (mem, shm_path) = match attaching.as_mut() {
        Some(a) => {
            let (fd, path) = a.shared_file()?;
            (shm::SharedMemory::create_in(fd, layout(), flags)?, path)
        }
        None => {
            let mem = shm::SharedMemory::create(layout(), flags)?;
            let path = mem.path();
            (mem, path)
        }
    };
    let (agent_fd, mut agent_path) = shm::agent_file(AGENT)?;
    // For profiling fctrace itself: an agent loaded from a file has symbols
    // that perf and gdb can resolve (the embedded one is a memfd).
    let agent_from_file = std::env::var_os("FCTRACE_AGENT_PATH");
    if let Some(p) = &agent_from_file {
        agent_path = p.to_string_lossy().into_owned();
    }

    // fctrace with file capabilities (`setcap cap_perfmon+ep`) run by an
    // ordinary user: the program cannot open /proc/<fctrace>/fd/N (fctrace
    // is not dumpable, and has capabilities the program lacks), so it gets
    // the agent and the memory as inherited descriptors instead, which
    // the agent closes before the program's code runs.
    let pass_fds = matches!(p.target, Target::Launch(_)) && process::own_fds_closed_to_children();
    let (shm_path, agent_path_for_child, inherited) = if pass_fds {
        let fd_path = |fd: i32| format!("/proc/self/fd/{fd}");
        let agent = match agent_from_file {
            Some(_) => agent_path.clone(),
            None => fd_path(agent_fd.as_raw_fd()),
        };
        let fds = vec![mem.raw_fd(), agent_fd.as_raw_fd()];
        (fd_path(mem.raw_fd()), agent, fds)
    } else {
        (shm_path, agent_path.clone(), Vec::new())
    };
    let mut env = vec![
        ("FCTRACE_SHM".to_string(), shm_path),
        (
            "FCTRACE_DIR".to_string(),
            p.abs_dir.to_string_lossy().into_owned(),
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
    // if any, stays where it was). A sanitizer runtime the program needs
    // comes before the agent (`process::preload_list`).
    let preload = process::preload_list(
        &agent_path_for_child,
        &std::env::var("LD_PRELOAD").unwrap_or_default(),
        &p.program,
    );
    env.push(("LD_PRELOAD".into(), preload));
    Ok(Memory {
        mem,
        end_watch,
        attaching,
        agent_fd,
        agent_path,
        env,
        inherited,
        wire,
    })
}

/// A recording under way: what its phases share once the program runs.
struct Recording<'a> {
    target: Target<'a>,
    program: PathBuf,
    command: Vec<OsString>,
    warnings: Vec<String>,
    secure_exec: Option<String>,
    abs_dir: PathBuf,
    ring: Option<RingOptions>,
    /// The program's (or attached process's) pid.
    child_pid: u32,
    /// -k, -K: the kernel's events (None: not asked for, unavailable, or
    /// closed at the detach).
    kernel: Option<kernel::Kernel>,
    /// The tasks of the kernel's events' threads.
    routes: kernel::Routes,
    /// -k with -p: what the kernel lost, its events closed before detaching.
    ended_kernel: Option<u64>,
    end_watch: Option<ends::EndWatch>,
    /// Stopped (dropped) before the shared memory is unmapped.
    heartbeat: Option<shm::Heartbeat>,
    _agent_fd: OwnedFd,
    mem: shm::SharedMemory,
    writer: TraceWriter,
    start_unix_ns: u64,
    /// The clock pair taken when the recording started.
    first: (u64, u64),
    wire: String,
}

/// Third phase: fctrace's signal handling, the heartbeat, the kernel's
/// events (`-k`, `-K`: refused or unavailable, said, and the functions
/// recorded anyway), then the program started, or the attached process
/// running traced.
fn start<'a>(
    p: Prepared<'a>,
    m: Memory,
    kernel_wanted: bool,
    kernel_depth: Option<(u32, kernel::KernelFilters)>,
) -> Result<Recording<'a>> {
    let Prepared {
        target,
        program,
        command,
        mut warnings,
        secure_exec,
        writer,
        abs_dir,
        ring,
    } = p;
    let Memory {
        mem,
        mut end_watch,
        attaching,
        agent_fd,
        agent_path,
        env,
        inherited,
        wire,
    } = m;
    process::install_signal_handlers();
    if let Target::Launch(_) = target {
        process::become_subreaper();
    }
    let heartbeat = mem.start_heartbeat()?;
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let first = shm::clock_pair();
    let sessions = abs_dir.join("sessions");
    // -k: the kernel's events, opened on this thread just before it starts
    // the program (which inherits them). Attaching: opened once the agent
    // runs (below).
    let mut kernel = None;
    let interrupts = kernel_depth.is_some();
    if kernel_wanted && matches!(target, Target::Launch(_)) {
        kernel = open_kernel(
            kernel::Kernel::open_for_launch(interrupts).map(Some),
            &agent_path,
            &sessions,
            &mut warnings,
        );
        // -K: the tracer set up before the program starts (its first
        // system calls are traced too).
        if let (Some((depth, filters)), Some(k)) = (kernel_depth, kernel.as_mut()) {
            if let Some(w) = k.prepare_functions(depth, &filters) {
                eprintln!("fctrace: {w}");
                warnings.push(w);
            }
        }
    }
    let child_pid = match target {
        Target::Launch(_) => {
            process::spawn(&program, &command[0], &command[1..], &env, &inherited)?.pid
        }
        Target::Attach(pid, duration, ref tids) => {
            let attached = Attached {
                pid,
                tids,
                env: &env,
                agent_path: &agent_path,
            };
            let watch = end_watch.as_mut().expect("watching an attached process");
            let threads = attached.run_traced(attaching.expect("attaching"), watch)?;
            if kernel_wanted {
                // Its threads' system calls from here to the detach (not
                // fctrace's work of attaching and detaching).
                let opened =
                    kernel::Kernel::open_for_threads(pid, &threads_of(pid), interrupts).map(Some);
                kernel = open_kernel(opened, &agent_path, &sessions, &mut warnings);
            }
            // As strace says it: the process runs traced from here on.
            let until = match duration {
                Some(d) => format!("for {:?} at most, or until it ends or Ctrl-C", d),
                None => "until it ends or Ctrl-C".to_string(),
            };
            eprintln!("fctrace: process {pid} attached ({threads} threads); recording {until}");
            pid
        }
    };
    Ok(Recording {
        target,
        program,
        command,
        warnings,
        secure_exec,
        abs_dir,
        ring,
        child_pid,
        kernel,
        routes: kernel::Routes::default(),
        ended_kernel: None,
        end_watch,
        heartbeat: Some(heartbeat),
        _agent_fd: agent_fd,
        mem,
        writer,
        start_unix_ns,
        first,
        wire,
    })
}

/// The kernel's events as opened (`Ok(None)`: not yet), their notes said
/// and kept; the agent's own loading left out of them. Refused or
/// unavailable: said, and the functions are recorded anyway.
fn open_kernel(
    opened: Result<Option<kernel::Kernel>>,
    agent_path: &str,
    sessions: &Path,
    warnings: &mut Vec<String>,
) -> Option<kernel::Kernel> {
    match opened {
        Ok(k) => {
            for n in k.iter().flat_map(|k| &k.notes) {
                eprintln!("fctrace: {n}");
                warnings.push(n.clone());
            }
            k.map(|mut k| {
                k.leave_out_agent_loading(agent_path, AGENT, sessions);
                k
            })
        }
        Err(e) => {
            let w = format!("{e:#}; recording the functions only");
            eprintln!("fctrace: {w}");
            warnings.push(w);
            None
        }
    }
}

/// The threads of process `pid` now.
fn threads_of(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process being attached to (`-p`), and what its agent is told.
struct Attached<'s> {
    pid: u32,
    /// `--tid`: the threads to trace (empty: all).
    tids: &'s [u32],
    env: &'s [(String, String)],
    agent_path: &'s str,
}

impl Attached<'_> {
    /// Loads and starts the agent in the stopped process, which then runs
    /// traced; returns its number of threads. A process that died while
    /// fctrace attached is said so, with how it ended.
    fn run_traced(
        &self,
        attaching: attach::Attaching,
        watch: &mut ends::EndWatch,
    ) -> Result<usize> {
        let pid = self.pid;
        // The agent's variables as a preloaded agent finds them; the
        // agent file (for programs the process executes) is fctrace's.
        let mut vars: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| k != "LD_PRELOAD")
            .cloned()
            .collect();
        vars.push(("FCTRACE_AGENT".into(), self.agent_path.to_string()));
        if !self.tids.is_empty() {
            // As the process's threads know their ids (its own PID
            // namespace's numbers).
            let own: Vec<String> = self
                .tids
                .iter()
                .map(|&t| attach::own_tid(pid as i32, t as i32).to_string())
                .collect();
            vars.push(("FCTRACE_TIDS".into(), own.join(",")));
        }
        attaching
            .finish(AGENT, &attach::AttachConfig { vars })
            .map_err(|e| match ends::state_of(pid as i32) {
                "dead" => e.context(format!(
                    "process {pid} died while fctrace attached to it ({})",
                    ending_text(watch.status())
                )),
                state => e.context(format!("process {pid} is {state}")),
            })
    }
}

/// How the recording ended, and what its sink counted.
#[derive(Default)]
struct Drained {
    exit: Option<ExitStatus>,
    attach_end: Option<AttachEnd>,
    /// When the program started running traced.
    started: Option<std::time::Instant>,
    /// fctrace detached, this long after the recording started.
    detached: Option<std::time::Duration>,
    /// Why detaching (from the process or a child it forked) failed.
    detach_failure: Option<String>,
    /// fctrace detached on a Ctrl-C (SIGINT).
    interrupted: bool,
    /// What stopped the trace's writing.
    failure: Option<String>,
    /// Events the sink dropped after a failure, gave no task, found damaged.
    dropped: u64,
    untabled: u64,
    damaged: u64,
    /// Records given to the writer.
    records: u64,
    /// The flight recorder (`--ring`), at work until the end.
    flight: Option<Flight>,
}

/// Fourth phase: the shared memory (and the kernel's events) drained into
/// the trace until the program and its descendants have ended, or fctrace
/// detaches from the attached process; then what is left, flushed. From
/// here on the program runs: whatever goes wrong, fctrace waits for it to
/// end, writes what it can and ends as it did.
fn drain(rec: &mut Recording<'_>) -> Result<Drained> {
    let facts = RunFacts {
        program: &rec.program,
        command: &rec.command,
        start_unix_ns: rec.start_unix_ns,
        first: rec.first,
        wire: &rec.wire,
    };
    let mut d = Drained {
        flight: rec.ring.map(Flight::new),
        ..Default::default()
    };
    let mem = &rec.mem;
    let routes = &mut rec.routes;
    let mut sink = Sink {
        writer: &mut rec.writer,
        failure: None,
        dropped: 0,
        untabled: 0,
        damaged: 0,
        records: 0,
    };
    let mut last_reclaim = std::time::Instant::now();
    let mut last_foreign = std::time::Instant::now();
    let started = std::time::Instant::now();
    d.started = Some(started);
    let mut forwarder = process::Forwarder::default();
    let tag = {
        let h = mem.header();
        fctrace_format::shm::forward_tag(h.recorder_pid, h.recorder_pidns)
    };
    loop {
        let busy = mem.drain_some(&mut |t, ev| sink.take(mem, t, ev))?;
        if let Some(k) = &mut rec.kernel {
            routes.new_round();
            k.drain(false, &mut |tid, e| sink.take_kernel(mem, routes, tid, e));
        }
        if sink.failure.is_some() && mem.recording() {
            mem.set_state(RECORDER_STOPPED);
        }
        // Dead threads' buffers: every 20 ms; those of other PID
        // namespaces (a search through /proc) every second, or at once
        // when agents wait for buffers.
        let waiting = mem.waiters() > 0;
        if waiting || last_reclaim.elapsed() > std::time::Duration::from_millis(20) {
            let foreign = last_foreign.elapsed() > std::time::Duration::from_secs(1)
                || (waiting && last_foreign.elapsed() > std::time::Duration::from_millis(20));
            mem.reclaim_dead(foreign, &mut |t, ev| sink.take(mem, t, ev))?;
            last_reclaim = std::time::Instant::now();
            if foreign {
                last_foreign = last_reclaim;
            }
        }
        if let Some(flight) = d.flight.as_mut() {
            flight.poll(mem, &mut sink, &facts, &rec.warnings);
        }
        if let Target::Attach(pid, duration, _) = rec.target {
            let watch = rec
                .end_watch
                .as_mut()
                .expect("watching an attached process");
            watch.poll();
            if !attach::alive(pid as i32) {
                d.exit = watch.status();
                d.attach_end = Some(AttachEnd::Ended);
                break;
            }
            // Ctrl-C (typed on fctrace's terminal, which the process,
            // in another process group, does not get; or sent with kill),
            // SIGTERM, SIGHUP end the recording, not the process: fctrace
            // detaches; so does the end of --duration.
            let forwarded = process::take_forward();
            let typed = process::take_typed_interrupt();
            d.interrupted = forwarded.contains(&libc::SIGINT) || typed == Some(libc::SIGINT);
            if !forwarded.is_empty()
                || typed.is_some()
                || duration.is_some_and(|d| started.elapsed() >= d)
            {
                // The recording ends here: threads stop handing buffers
                // over or waiting for free ones (the agent's code is then
                // quickly left, which detaching waits for).
                mem.set_state(RECORDER_DETACHING);
                // The kernel's events end here too: detaching is
                // fctrace's work, not the program's.
                if let Some(mut k) = rec.kernel.take() {
                    routes.new_round();
                    k.drain(true, &mut |tid, e| sink.take_kernel(mem, routes, tid, e));
                    rec.ended_kernel = Some(k.lost);
                }
                detach(mem, &mut sink, pid, watch, &mut d);
                break;
            }
            if !busy {
                process::sleep_briefly();
            }
            continue;
        }
        forwarder.forward(rec.child_pid, &process::take_forward(), tag);
        match process::reap_one(rec.child_pid, false) {
            process::Reaped::Some(Some(st)) => d.exit = Some(st),
            process::Reaped::Some(None) => {}
            process::Reaped::NoChildren => break,
            process::Reaped::Running => {
                if !busy {
                    process::sleep_briefly();
                }
            }
        }
    }
    if mem.recording() {
        mem.set_state(RECORDER_DONE);
    }
    drop(rec.heartbeat.take());
    mem.drain_orphans(&mut |t, ev| sink.take(mem, t, ev))?;
    if let Some(k) = &mut rec.kernel {
        routes.new_round();
        k.drain(true, &mut |tid, e| sink.take_kernel(mem, routes, tid, e));
    }
    if sink.failure.is_none() {
        if let Err(e) = sink.writer.flush() {
            sink.fail(&e);
        }
    }
    d.failure = sink.failure.take();
    d.dropped = sink.dropped;
    d.untabled = sink.untabled;
    d.damaged = sink.damaged;
    d.records = sink.records;
    Ok(d)
}

/// fctrace detaches from process `pid` (and the processes it forked while
/// traced); how that went, in `d`.
fn detach(
    mem: &shm::SharedMemory,
    sink: &mut Sink<'_>,
    pid: u32,
    watch: &mut ends::EndWatch,
    d: &mut Drained,
) {
    let started = d.started.expect("the recording started");
    let mut between = || {
        let _ = mem.drain_some(&mut |t, ev| sink.take(mem, t, ev));
    };
    match attach::detach(pid as i32, AGENT, &mut between) {
        Ok(()) => {
            d.attach_end = Some(AttachEnd::Detached);
            d.detached = Some(started.elapsed());
            // The processes it forked while traced hold the
            // agent too (not those that exec'd since: a
            // preloaded agent of theirs cannot be detached).
            for child in forked_children(mem, pid) {
                if let Err(e) = attach::detach(child as i32, AGENT, &mut between) {
                    if attach::alive(child as i32) {
                        d.attach_end = Some(AttachEnd::DetachFailed);
                        d.detach_failure = Some(format!(
                            "{e:#}; process {child} is {}",
                            ends::state_of(child as i32)
                        ));
                    }
                }
            }
        }
        Err(e) => {
            d.attach_end = Some(AttachEnd::DetachFailed);
            let (what, status) = after_failed_detach(pid as i32, watch);
            d.exit = status;
            d.detach_failure = Some(format!("{e:#}; {what}"));
        }
    }
}

/// Last phase: what was lost and why (notes, also kept in the trace), how
/// the recording ended (warnings), the trace's info written (or the
/// flight recorder's last snapshot).
fn conclude(mut rec: Recording<'_>, mut d: Drained) -> Outcome {
    let last = shm::clock_pair();
    let slots = rec.mem.tasks();
    let tasks: Vec<TaskInfo> = slots.iter().map(|t| task_info(t, &slots)).collect();
    let sessions = rec.abs_dir.join("sessions");
    for w in process::skipped_code(&sessions)
        .into_iter()
        .chain(process::untraced_executions(&sessions))
    {
        eprintln!("fctrace: {w}");
        rec.warnings.push(w);
    }
    if let Some(after) = d.detached {
        let w = format!(
            "detached from process {} after {:.3} s: it runs on untraced, \
             its code as before; calls in progress then have no end in the trace",
            rec.child_pid,
            after.as_secs_f64()
        );
        eprintln!("fctrace: {w}");
        rec.warnings.push(w);
    }
    let (mut notes, lost) = loss_notes(&rec, &mut d);
    // In the trace, marked so that replay and report can say why events
    // are missing (`TraceInfo::loss_reasons`).
    rec.warnings.extend(
        notes
            .iter()
            .filter(|n| !n.ends_with(TOTAL_LOST))
            .map(|n| format!("{}{n}", fctrace_format::store::LOSS_MARK)),
    );
    ending_warnings(&mut rec, &d, tasks.is_empty());
    let facts = RunFacts {
        program: &rec.program,
        command: &rec.command,
        start_unix_ns: rec.start_unix_ns,
        first: rec.first,
        wire: &rec.wire,
    };
    let mut info = TraceInfo {
        exit: d.exit,
        tasks,
        clock: clock_of(rec.first, last),
        lost_events: lost,
        warnings: std::mem::take(&mut rec.warnings),
        detached: d.detached.is_some(),
        kernel_events: rec.writer.kernel_counts().0,
        ..facts.base_info()
    };
    // A program fctrace started and reaped: what it used.
    if !matches!(rec.target, Target::Attach(..)) && d.exit.is_some() {
        if let Some(u) = process::children_usage() {
            info.facts.extend(crate::facts::usage_facts(&u));
        }
    }
    if let Some(mut flight) = d.flight.take() {
        // The last moments: when the program died by a signal, at its
        // exit if asked, when fctrace detached or lost the program.
        let reason = match (&rec.target, d.exit) {
            (Target::Attach(..), _) if d.detached.is_some() => Some("detach".to_string()),
            (Target::Attach(..), _) => Some("end".to_string()),
            (_, Some(ExitStatus::Signal { signal, .. })) => {
                Some(fctrace_options::spec::signal_name(signal))
            }
            (_, Some(ExitStatus::Code(_))) if flight.opts.at_exit => Some("exit".to_string()),
            (_, Some(ExitStatus::Code(_))) => None,
            (_, None) => Some("end".to_string()),
        };
        let _ = std::fs::remove_file(rec.abs_dir.join(RECORDER_PID_FILE));
        match flight.finish(&mut rec.writer, info, reason, (d.records, d.interrupted)) {
            Err(e) => notes.push(e),
            Ok(()) if flight.written == 0 => notes.push(format!(
                "--ring: the program exited normally: no snapshot was written \
                 (--snapshot-at-exit writes one); {} holds none",
                rec.abs_dir.display()
            )),
            Ok(()) => {}
        }
    } else if let Err(e) = rec.writer.finish(info) {
        // The program has ended: a trace that cannot be finished is said
        // so, and fctrace still ends as the program did.
        notes.push(format!(
            "{e}: the trace has no info.json and cannot be read"
        ));
    }
    Outcome {
        exit: d.exit,
        notes,
        attach: d.attach_end,
    }
}

/// What went wrong and what was not recorded, said at the end (`notes`),
/// and the number of events lost in all.
fn loss_notes(rec: &Recording<'_>, d: &mut Drained) -> (Vec<String>, u64) {
    let mem = &rec.mem;
    let stored = rec.writer.events_written();
    let dropped = rec.writer.dropped_events() + d.dropped;
    let (untabled, damaged_events) = (d.untabled, d.damaged);
    // Written by the program too if it scribbled over the shared memory:
    // the agents' own counts are then unknown.
    let damaged = mem.damaged() > 0
        || damaged_events > 0
        || (mem.state() > RECORDER_DEAD && mem.state() != RECORDER_DETACHING);
    let (agent_lost, untraced) = if damaged {
        (0, 0)
    } else {
        (mem.lost_events(), mem.untraced_threads())
    };
    let lost = agent_lost
        .saturating_add(dropped)
        .saturating_add(untabled)
        .saturating_add(damaged_events);
    let mut notes = Vec::new();
    if let Some(f) = d.detach_failure.take() {
        notes.push(f);
    }
    if let Some(f) = &d.failure {
        notes.push(format!(
            "{f} after {stored} events; the program ran on untraced ({dropped} events not written)"
        ));
    }
    if untabled > 0 {
        notes.push(format!(
            "{untabled} events of threads beyond the task table ({} tasks) were not recorded",
            mem.layout.task_slots
        ));
    }
    if damaged {
        notes.push(format!(
            "the shared memory was damaged (the program wrote into it?): {} bad values, \
             {damaged_events} events dropped; what the agents counted \
             as lost is unknown",
            mem.damaged(),
        ));
    } else if mem.state() == RECORDER_DEAD {
        notes.push(
            "an agent took the recorder for dead (no heartbeat for a second): \
             the rest of the program ran untraced"
                .into(),
        );
    }
    if agent_lost > 0 {
        notes.push(format!(
            "{agent_lost} events could not be recorded by the agent (a shadow stack full, \
             or written after recording stopped)"
        ));
    }
    if untraced > 0 {
        notes.push(format!(
            "{untraced} threads ran untraced (no memory for their shadow stack, or started \
             after recording stopped): their calls are not counted"
        ));
    }
    if lost > 0 {
        notes.push(format!("{lost}{TOTAL_LOST}"));
    }
    kernel_notes(rec, &mut notes);
    (notes, lost)
}

/// What the kernel's events (`-k`, `-K`) lost, as notes.
fn kernel_notes(rec: &Recording<'_>, notes: &mut Vec<String>) {
    if let Some(w) = rec.kernel.as_ref().and_then(|k| k.functions_missing()) {
        notes.push(w);
    }
    if let Some(k) = rec.kernel.as_ref().filter(|k| k.untasked > 0) {
        notes.push(format!(
            "{} system call events of threads that made no traced call (no task in the trace) \
             were not recorded",
            k.untasked
        ));
    }
    if let Some(k) = rec.kernel.as_ref().filter(|k| k.lost_functions > 0) {
        notes.push(format!(
            "{} kernel function events were lost by ftrace (its buffer was full, or returns \
             it could not trace); system calls and functions are not affected",
            k.lost_functions
        ));
    }
    if let Some(kernel_lost) = rec.kernel.as_ref().map(|k| k.lost).or(rec.ended_kernel) {
        let (_, dropped) = rec.writer.kernel_counts();
        if kernel_lost > 0 || dropped > 0 {
            notes.push(format!(
                "{} system call events were lost by the kernel (its ring buffers were full) \
                 or not written; the functions' events are not affected",
                kernel_lost + dropped
            ));
        }
    }
}

/// The warnings on how the recording ended: an attached process that
/// ended while recorded, a recording with no task (said as loudly as the
/// end of a launched program is shown).
fn ending_warnings(rec: &mut Recording<'_>, d: &Drained, no_task: bool) {
    let started = d.started.expect("the recording started");
    if let (Target::Attach(pid, ..), Some(AttachEnd::Ended)) = (&rec.target, d.attach_end) {
        let w = format!(
            "process {pid} ended while recorded, after {:.3} s: {}",
            started.elapsed().as_secs_f64(),
            ending_text(d.exit)
        );
        let w = match (
            d.exit,
            rec.end_watch.as_ref().and_then(|e| e.unavailable.as_ref()),
        ) {
            (None, Some(why)) => format!(
                "{w} (the kernel's process events, which need CAP_NET_ADMIN, are not \
                 available: {why}; and its parent reaped it before fctrace read its status)"
            ),
            _ => w,
        };
        eprintln!("fctrace: {w}");
        rec.warnings.push(w);
    }
    match &rec.target {
        _ if !no_task => {}
        Target::Attach(pid, ..) => {
            let w = format!(
                "no traced call ran in process {pid} while attached ({:.1} s): nothing recorded",
                started.elapsed().as_secs_f64()
            );
            eprintln!("fctrace: {w}");
            rec.warnings.push(w);
        }
        Target::Launch(_) if rec.secure_exec.is_some() => rec
            .warnings
            .push("no task was traced: the agent did not start in the program".into()),
        Target::Launch(_) => {
            // Said, not shown as an empty tree of a program that made no
            // calls (fctrace still ends as the program did).
            let w = format!(
                "no call of {} was recorded: fctrace's agent did not start in it (the dynamic \
                 loader did not load it; its message, if any, is above)",
                rec.program.display()
            );
            eprintln!("fctrace: {w}");
            rec.warnings.push(w);
        }
    }
}

/// After a failed detach: what the process does now, said plainly, and
/// its exit status if it has ended.
fn after_failed_detach(pid: i32, watch: &mut ends::EndWatch) -> (String, Option<ExitStatus>) {
    match ends::state_of(pid) {
        "dead" => {
            let status = watch.status();
            let how = status.map_or_else(
                || "its exit status is unknown".to_string(),
                |s| ending_text(Some(s)),
            );
            (format!("process {pid} is dead ({how})"), status)
        }
        "stopped" => (
            format!(
                "process {pid} is stopped (hung: it does not run; kill -CONT {pid} resumes it)"
            ),
            None,
        ),
        _ => (
            format!("process {pid} is running, with fctrace's agent in it, tracing off"),
            None,
        ),
    }
}

/// How an attached process ended, as `info` says it.
fn ending_text(exit: Option<ExitStatus>) -> String {
    match exit {
        None => "its exit status is unknown".to_string(),
        Some(ExitStatus::Code(c)) => format!("exited with code {c}"),
        Some(ExitStatus::Signal { signal, core }) => format!(
            "killed by signal {signal} ({}){}",
            fctrace_options::spec::signal_name(signal),
            if core { ", core dumped" } else { "" }
        ),
    }
}

/// Writes `path` (new, private) with this process's id.
fn write_pid_file(path: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    writeln!(f, "{}", std::process::id())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The live processes `pid` forked while fctrace was attached to it (each
/// one's last program image a fork's, not an exec's), when the task table's
/// numbers are fctrace's (not another PID namespace's).
fn forked_children(mem: &shm::SharedMemory, pid: u32) -> Vec<u32> {
    if attach::own_tid(pid as i32, pid as i32) != pid as i32 {
        return Vec::new();
    }
    let tasks = mem.tasks();
    let mut pids: Vec<u32> = tasks
        .iter()
        .filter(|t| t.pid != pid && t.origin == ORIGIN_FORK)
        .map(|t| t.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|&p| {
        let last = tasks
            .iter()
            .filter(|t| t.pid == p)
            .max_by_key(|t| t.session);
        last.is_some_and(|t| t.origin == ORIGIN_FORK) && attach::alive(p as i32)
    });
    pids
}

/// How the note on the number of lost events ends (it is not repeated in
/// the trace's warnings).
const TOTAL_LOST: &str = " events were lost in all";

/// The shared memory's layout: the default, or with
/// `FCTRACE_TASK_SLOTS=N` a smaller task table and `FCTRACE_BUFFERS=N`
/// fewer buffers (a power of two): to test a full table without starting a
/// million threads, and a recorder that falls behind.
fn layout() -> Layout {
    let mut l = Layout::DEFAULT;
    if let Some(n) = std::env::var("FCTRACE_BUFFERS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        l.buf_count = n.clamp(2, Layout::DEFAULT.buf_count).next_power_of_two();
    }
    if let Some(n) = std::env::var("FCTRACE_TASK_SLOTS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        l.task_slots = n.clamp(1, Layout::DEFAULT.task_slots);
    }
    l
}
