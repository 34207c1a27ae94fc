//! Process control: finding the program, starting it with the agent
//! preloaded, reaping it and every descendant, and passing signals on.

use anyhow::{bail, Result};
use fctrace_format::store::ExitStatus;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Finds the program as execvp would: a name with a slash is a path, a
/// bare name is looked up in PATH.
pub fn resolve_program(name: &OsStr) -> Result<PathBuf> {
    let shown = Path::new(name).display().to_string();
    let candidate = |p: &Path| -> Option<PathBuf> {
        let m = std::fs::metadata(p).ok()?;
        (m.is_file() && m.permissions().mode() & 0o111 != 0).then(|| p.to_path_buf())
    };
    if name.as_bytes().contains(&b'/') {
        let p = Path::new(name);
        let m = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{shown}: program not found")
            }
            Err(e) => bail!("{shown}: {e}"),
        };
        if m.is_dir() {
            bail!("{shown}: is a directory, not a program");
        }
        if m.permissions().mode() & 0o111 == 0 {
            bail!("{shown}: permission denied: the file is not executable");
        }
        return Ok(p.to_path_buf());
    }
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        if let Some(p) = candidate(&dir.join(name)) {
            return Ok(p);
        }
    }
    bail!("{shown}: program not found (not in PATH)")
}

/// The most `#!` scripts the kernel follows in one exec: a script's
/// interpreter may be a script too, up to 5 of them before the ELF file
/// (Linux's `exec_binprm`; beyond, exec fails with ELOOP).
const MAX_SCRIPT_LEVELS: usize = 5;

/// The kernel reads this much of a file for its `#!` line
/// (`BINPRM_BUF_SIZE`).
const SCRIPT_LINE_MAX: usize = 256;

/// What the kernel runs when `program` is executed: `program` itself,
/// or, for a `#!` script, the ELF interpreter at the end of its chain of
/// `#!` lines (each interpreter taken as is, relative to the current
/// directory if relative, as the kernel does; its optional argument does
/// not matter here). Errors say why the kernel would refuse it.
pub fn resolve_interpreter(program: &Path) -> Result<PathBuf> {
    let mut file = program.to_path_buf();
    for _ in 0..=MAX_SCRIPT_LEVELS {
        match script_interpreter(&file)? {
            None => return Ok(file),
            Some(interp) => {
                let shown = interp.display();
                let m = match std::fs::metadata(&interp) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                        "{}: bad interpreter: {shown} (in its #! line) not found",
                        file.display()
                    ),
                    Err(e) => bail!("{}: bad interpreter {shown}: {e}", file.display()),
                };
                if m.is_dir() || m.permissions().mode() & 0o111 == 0 {
                    bail!(
                        "{}: bad interpreter: {shown} (in its #! line) is not an executable file",
                        file.display()
                    );
                }
                file = interp;
            }
        }
    }
    bail!(
        "{}: too many levels of #! interpreters (the kernel follows {MAX_SCRIPT_LEVELS} scripts)",
        program.display()
    )
}

/// The interpreter named by `file`'s `#!` line, or `None` if it has none.
fn script_interpreter(file: &Path) -> Result<Option<PathBuf>> {
    use std::io::Read;
    let shown = file.display();
    let mut head = Vec::with_capacity(SCRIPT_LINE_MAX);
    std::fs::File::open(file)
        .and_then(|f| f.take(SCRIPT_LINE_MAX as u64).read_to_end(&mut head))
        .map_err(|e| anyhow::anyhow!("cannot read {shown}: {e}"))?;
    let Some(line) = head.strip_prefix(b"#!") else {
        return Ok(None);
    };
    let end = line.iter().position(|&b| b == b'\n');
    let line = &line[..end.unwrap_or(line.len())];
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let start = line.iter().position(|b| !is_space(b)).unwrap_or(line.len());
    let name = &line[start..];
    let len = name
        .iter()
        .position(|b| is_space(b) || *b == 0)
        .unwrap_or(name.len());
    if len == 0 {
        bail!("{shown}: its #! line names no interpreter");
    }
    if end.is_none() && len == name.len() && head.len() == SCRIPT_LINE_MAX {
        bail!("{shown}: its #! line is longer than the kernel reads ({SCRIPT_LINE_MAX} bytes)");
    }
    Ok(Some(PathBuf::from(OsStr::from_bytes(&name[..len]))))
}

/// Signals fctrace received that should go to the program (bit N-1 for
/// signal N).
static FORWARD: AtomicU64 = AtomicU64::new(0);

/// Per signal: who sent the last one fctrace received (`si_code` in the
/// high 32 bits, `si_pid` in the low ones) and its `si_uid`.
static SENDER: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];
static SENDER_UID: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];

fn mark_forward(sig: libc::c_int, info: *const libc::siginfo_t) {
    if (1..=64).contains(&sig) {
        if !info.is_null() {
            // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO
            // handler; kill's fields are read for every code (zero when
            // the kernel sent it).
            let (code, pid, uid) = unsafe { ((*info).si_code, (*info).si_pid(), (*info).si_uid()) };
            SENDER[sig as usize].store(
                (code as u32 as u64) << 32 | pid as u32 as u64,
                Ordering::Relaxed,
            );
            SENDER_UID[sig as usize].store(uid as u64, Ordering::Relaxed);
        }
        FORWARD.fetch_or(1 << (sig - 1), Ordering::Relaxed);
    }
}

/// SIGINT, SIGQUIT. From the terminal (`si_code == SI_KERNEL`) the
/// program, in the same foreground process group, gets it too: let it
/// decide, and keep recording until it ends. Sent with kill() (SI_USER,
/// SI_QUEUE, SI_TKILL...): pass it on, so that `kill -INT <fctrace>` stops
/// the program as Ctrl-C would.
extern "C" fn on_interrupt(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let code = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        unsafe { (*info).si_code }
    };
    if code != libc::SI_KERNEL {
        mark_forward(sig, info);
    } else {
        TYPED.store(sig, Ordering::Relaxed);
    }
    if sig == libc::SIGINT {
        SNAPSHOT.store(sig, Ordering::Relaxed);
    }
}

/// SIGINT or SIGQUIT typed on fctrace's terminal (Ctrl-C, Ctrl-\\); 0: none.
/// Not passed on: a launched program, in the same foreground process
/// group, got it from the terminal too; an attached process did not, and
/// fctrace detaches from it.
static TYPED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The signal typed on fctrace's terminal (SIGINT, SIGQUIT) since the last
/// call, if one was.
pub fn take_typed_interrupt() -> Option<i32> {
    Some(TYPED.swap(0, Ordering::Relaxed)).filter(|&s| s != 0)
}

/// The signal that asked for a snapshot (SIGUSR2, or Ctrl-C's SIGINT), for
/// `record --ring`; 0: none.
static SNAPSHOT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_snapshot(sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    SNAPSHOT.store(sig, Ordering::Relaxed);
}

/// `record --ring`: SIGUSR2 asks fctrace for a snapshot (not passed on).
pub fn install_snapshot_signal() {
    // SAFETY: installs an async-signal-safe handler with a zeroed, valid sigaction.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_snapshot as Handler as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
}

/// The signal that asked for a snapshot (SIGUSR2, SIGINT) since the last
/// call, if one did.
pub fn take_snapshot_request() -> Option<i32> {
    Some(SNAPSHOT.swap(0, Ordering::Relaxed)).filter(|&s| s != 0)
}

/// SIGTERM, SIGHUP: always passed on.
extern "C" fn on_terminate(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    mark_forward(sig, info);
}

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Keeps fctrace alive through Ctrl-C (the program gets it from the
/// terminal) and passes signals sent to fctrace on to the program.
/// Handlers, not SIG_IGN, so that the program does not inherit an ignored
/// disposition.
pub fn install_signal_handlers() {
    for (sig, h) in [
        (libc::SIGINT, on_interrupt as Handler),
        (libc::SIGQUIT, on_interrupt),
        (libc::SIGTERM, on_terminate),
        (libc::SIGHUP, on_terminate),
    ] {
        // SAFETY: installs an async-signal-safe handler with a zeroed, valid sigaction.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = h as usize;
            sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// While a pager shows fctrace's output: Ctrl-C and Ctrl-\\ reach the
/// pager too (the same process group), which handles them; fctrace ignores
/// them and ends when the user quits the pager (its output pipe closes),
/// as git does. Dying instead would leave the pager without its parent,
/// fighting the shell for the terminal.
pub fn ignore_terminal_interrupts() {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: SIG_IGN is a valid disposition; no handler code runs.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// The signals fctrace received since the last call that should go to the
/// program, in signal-number order.
pub fn take_forward() -> Vec<i32> {
    let bits = FORWARD.swap(0, Ordering::Relaxed);
    (1..=64).filter(|s| bits & (1 << (s - 1)) != 0).collect()
}

/// Passes the signals fctrace received on to the program. Where the
/// agent runs in it, as `rt_sigqueueinfo` copies that carry the original
/// sender's pid, uid and `si_code` and the session's tag in `si_value`:
/// the agent gives the program's handler the original siginfo, and runs
/// it once for a signal sent to the whole process group (which reaches
/// the program directly too). A signal from the same sender within a
/// second of the last one fctrace passed on is not passed on again (a
/// sender that signals fctrace and then its group, as `timeout` does:
/// natively the two copies meet while pending). Elsewhere, with kill().
#[derive(Default)]
pub struct Forwarder {
    /// Per signal: the sender and time of the last copy passed on.
    last: std::collections::HashMap<i32, (u64, std::time::Instant)>,
}

/// Copies of one sender closer than this are one signal.
const SAME_SIGNAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Forwarder {
    pub fn forward(&mut self, pid: u32, sigs: &[i32], tag: u32) {
        for &sig in sigs {
            let sender = SENDER[sig as usize].load(Ordering::Relaxed);
            let uid = SENDER_UID[sig as usize].load(Ordering::Relaxed) as u32;
            let now = std::time::Instant::now();
            if let Some((s, at)) = self.last.get(&sig) {
                if *s == sender && sender as u32 != 0 && now.duration_since(*at) < SAME_SIGNAL {
                    continue;
                }
            }
            self.last.insert(sig, (sender, now));
            if !agent_in(pid) || !queue_signal(pid, sig, sender, uid, tag) {
                // SAFETY: kill(2) has no memory effects.
                unsafe { libc::kill(pid as libc::pid_t, sig) };
            }
        }
    }
}

/// Whether fctrace's agent is loaded in process `pid` (a program that
/// exec'd an untraced one has none).
fn agent_in(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.contains("fctrace-agent") || m.contains("fctrace_agent"))
}

/// `rt_sigqueueinfo(pid, sig)` with the original sender's fields.
fn queue_signal(pid: u32, sig: i32, sender: u64, uid: u32, tag: u32) -> bool {
    let code = (sender >> 32) as u32;
    // x86_64's siginfo_t: signo, errno, code, then (at 16) pid, uid,
    // value.
    let mut words = [0u32; 32];
    words[0] = sig as u32;
    words[2] = libc::SI_QUEUE as u32;
    words[4] = sender as u32;
    words[5] = uid;
    words[6] = code;
    words[7] = tag;
    // SAFETY: rt_sigqueueinfo reads a 128-byte siginfo from `words`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigqueueinfo,
            pid as libc::pid_t,
            sig,
            words.as_ptr(),
        )
    };
    r == 0
}

/// Ends fctrace the way the program ended, once the trace is written: with
/// its exit code, or, if a signal killed it, by the same signal (so that a
/// shell sees the same status: "Segmentation fault", a script stopped by
/// Ctrl-C...). fctrace itself dumps no core. Unknown ending: 1.
pub fn exit_like(exit: Option<ExitStatus>) -> std::process::ExitCode {
    use std::io::Write;
    match exit {
        None => std::process::ExitCode::from(1),
        Some(ExitStatus::Code(c)) => std::process::ExitCode::from(c as u8),
        Some(e @ ExitStatus::Signal { signal, .. }) => {
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            die_by_signal(signal);
            // A signal whose default action does not end a process.
            std::process::ExitCode::from(exit_code(&e))
        }
    }
}

/// Raises `sig` with its default action, unblocked, without a core dump.
/// Returns only if that does not end the process.
fn die_by_signal(sig: i32) {
    // SAFETY: setrlimit/signal/sigprocmask/raise with valid arguments; the
    // process is about to end and holds nothing that a signal could leave
    // half-done (the trace is written and closed, output flushed).
    unsafe {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// Orphaned descendants are re-parented to fctrace, so it can wait for
/// all of them (their traces are part of the recording).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

pub struct Spawned {
    pub pid: u32,
}

/// Starts the program with extra environment variables. Its argv[0] is
/// the name the user typed. Its environment is fctrace's own, in its own
/// order, with `extra` after it (the agent takes exactly those away again,
/// `LD_PRELOAD` included: the dynamic loader reads the last one).
/// `inherit`: close-on-exec descriptors of fctrace's that the program
/// gets, under the same numbers.
pub fn spawn(
    program: &Path,
    argv0: &OsStr,
    args: &[OsString],
    extra: &[(String, String)],
    inherit: &[i32],
) -> Result<Spawned> {
    use std::ffi::CString;
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| anyhow::anyhow!("a NUL byte in an argument"));
    let path = cstr(program.as_os_str().as_bytes())?;
    let mut argv = vec![cstr(argv0.as_bytes())?];
    for a in args {
        argv.push(cstr(a.as_bytes())?);
    }
    let mut envp = Vec::new();
    for (k, v) in std::env::vars_os() {
        let mut e = k.as_bytes().to_vec();
        e.push(b'=');
        e.extend_from_slice(v.as_bytes());
        envp.push(cstr(&e)?);
    }
    for (k, v) in extra {
        envp.push(cstr(format!("{k}={v}").as_bytes())?);
    }
    let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|c| c.as_ptr() as *mut _).collect();
    argv_p.push(std::ptr::null_mut());
    let mut envp_p: Vec<*mut libc::c_char> = envp.iter().map(|c| c.as_ptr() as *mut _).collect();
    envp_p.push(std::ptr::null_mut());
    let mut pid: libc::pid_t = 0;
    // SAFETY: posix_spawn with NUL-terminated arrays of C strings that
    // outlive the call, and attributes initialised and destroyed here. As
    // Rust's own spawning does, the child gets an empty signal mask and
    // SIGPIPE at its default action (fctrace's runtime ignores it).
    let r = unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut dfl: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut dfl);
        libc::sigaddset(&mut dfl, libc::SIGPIPE);
        libc::posix_spawnattr_setsigmask(&mut attr, &empty);
        libc::posix_spawnattr_setsigdefault(&mut attr, &dfl);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as _,
        );
        // dup2 of a descriptor onto itself clears its close-on-exec flag
        // in the child (glibc 2.29 and later, POSIX 2024).
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut actions);
        for &fd in inherit {
            libc::posix_spawn_file_actions_adddup2(&mut actions, fd, fd);
        }
        let r = libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions,
            &attr,
            argv_p.as_ptr(),
            envp_p.as_ptr(),
        );
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        r
    };
    if r != 0 {
        bail!(
            "{}: cannot run: {}",
            program.display(),
            std::io::Error::from_raw_os_error(r)
        );
    }
    Ok(Spawned { pid: pid as u32 })
}

/// Whether a program fctrace starts cannot open fctrace's own
/// descriptors through /proc/<fctrace>/fd: fctrace gained capabilities
/// from its file (it is then not dumpable), or holds capabilities while
/// not root (the kernel lets a process open another's descriptors only
/// if it has all of that one's capabilities).
pub fn own_fds_closed_to_children() -> bool {
    // SAFETY: prctl and geteuid with integer arguments only.
    let (dumpable, euid) = unsafe {
        (
            libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0),
            libc::geteuid(),
        )
    };
    let permitted = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapPrm:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0);
    dumpable != 1 || (euid != 0 && permitted != 0)
}

/// Result of one non-blocking reaping round.
pub enum Reaped {
    /// A process ended; `Some` for the program itself.
    Some(Option<ExitStatus>),
    /// Children remain, none ended now.
    Running,
    /// No children at all any more.
    NoChildren,
}

/// A wait status (`waitpid`'s, or the exit code the kernel reports for a
/// process) as the trace keeps it.
pub fn decode(status: i32) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signal {
            signal: libc::WTERMSIG(status),
            core: libc::WCOREDUMP(status),
        }
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    }
}

pub fn reap_one(main: u32, block: bool) -> Reaped {
    let mut status = 0;
    // SAFETY: waitpid writes the status integer only.
    let r = unsafe { libc::waitpid(-1, &mut status, if block { 0 } else { libc::WNOHANG }) };
    if r == 0 {
        return Reaped::Running;
    }
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Reaped::Running;
        }
        return Reaped::NoChildren;
    }
    if r as u32 == main {
        Reaped::Some(Some(decode(status)))
    } else {
        Reaped::Some(None)
    }
}

pub fn sleep_briefly() {
    std::thread::sleep(std::time::Duration::from_micros(200));
}

/// The exit code fctrace gives for the program's ending (128+N for a signal).
pub fn exit_code(e: &ExitStatus) -> u8 {
    match *e {
        ExitStatus::Code(c) => c as u8,
        ExitStatus::Signal { signal, .. } => (128 + signal) as u8,
    }
}

/// Why the dynamic loader will not load the agent into `program`: it runs
/// with other credentials ("secure execution": set-user-ID or
/// set-group-ID to someone else, or file capabilities for a user other
/// than root), so `LD_PRELOAD` is ignored; None when it will be traced.
/// Set-ID bits do nothing on a nosuid file system or with no_new_privs.
pub fn secure_exec_reason(program: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(program).ok()?;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let name_of = |id: u32, user: bool| -> String {
        let file = if user { "/etc/passwd" } else { "/etc/group" };
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next()?;
                    (f.nth(1)?.parse::<u32>().ok()? == id).then(|| name.to_string())
                })
            })
            .unwrap_or_else(|| id.to_string())
    };
    let reason = if m.mode() & libc::S_ISUID != 0 && m.uid() != uid {
        format!("set-user-ID {}", name_of(m.uid(), true))
    } else if m.mode() & libc::S_ISGID != 0 && m.mode() & libc::S_IXGRP != 0 && m.gid() != gid {
        format!("set-group-ID {}", name_of(m.gid(), false))
    } else if uid != 0 && has_file_capabilities(program) {
        "has file capabilities".to_string()
    } else {
        return None;
    };
    let c = std::ffi::CString::new(program.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs/prctl with a valid path and a local out-parameter.
    unsafe {
        let mut fs: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut fs) == 0 && fs.f_flag & libc::ST_NOSUID != 0 {
            return None;
        }
        if libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 {
            return None;
        }
    }
    Some(reason)
}

fn has_file_capabilities(program: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(program.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: getxattr with a valid path and a null buffer asks only the size.
    unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        ) > 0
    }
}

/// The programs the agent saw executed that run untraced for the same
/// reason, or because they are musl programs (reason `musl`: the agent
/// leaves them alone) (`sessions/untraced` in the trace, written by the
/// agent's exec interposers: `pid<TAB>path<TAB>reason` lines), as
/// warnings.
pub fn untraced_executions(sessions: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(sessions.join("untraced")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let (pid, path, why) = (f.next()?, f.next()?, f.next()?);
            Some(if why == "musl" {
                format!(
                    "process {pid} executed {path}, a musl program: fctrace's agent (built for \
                     glibc) cannot be loaded into it, so it ran untraced, as without fctrace"
                )
            } else {
                format!(
                    "process {pid} executed {path} ({why}): the dynamic loader ignores LD_PRELOAD for it, so it ran untraced"
                )
            })
        })
        .collect()
}

/// The `LD_PRELOAD` the program is started with: the agent, then the
/// user's own list (`user`). A sanitizer runtime must come first (ASan
/// refuses to start otherwise, "ASan runtime does not come first in
/// initial library list"): the user's own first entry if it names one,
/// else, when the user preloads nothing, the runtime the program needs
/// (its `DT_NEEDED` soname, which the loader resolves as it would for the
/// program). A user's list that starts with something else keeps its
/// order behind the agent, so the program starts as it would without
/// fctrace (or fails the same way).
pub fn preload_list(agent: &str, user: &str, program: &Path) -> String {
    use fctrace_symbols::sanitizer;
    let (first, rest) = sanitizer::split_first(user.as_bytes());
    if !first.is_empty() && sanitizer::is_runtime(first) {
        let first = String::from_utf8_lossy(first);
        let rest = String::from_utf8_lossy(rest);
        return if rest.is_empty() {
            format!("{first}:{agent}")
        } else {
            format!("{first}:{agent}:{rest}")
        };
    }
    if !first.is_empty() {
        return format!("{agent}:{user}");
    }
    let mut name = [0u8; 128];
    match needed_sanitizer(program, &mut name) {
        Some(n) => format!("{}:{agent}", String::from_utf8_lossy(&name[..n])),
        None => agent.to_string(),
    }
}

/// The sanitizer runtime `program` names in its `DT_NEEDED` entries.
fn needed_sanitizer(program: &Path, out: &mut [u8]) -> Option<usize> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(program).ok()?;
    fctrace_symbols::sanitizer::needed_runtime(|at, buf| f.read_exact_at(buf, at).is_ok(), out)
}

/// What the agents left uninstrumented and why (`sessions/skipped` in
/// the trace, `pid<TAB>message` lines written as modules are
/// instrumented: Go code, the JVM, V8), each message once.
pub fn skipped_code(sessions: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(sessions.join("skipped")).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .filter_map(|l| l.split_once('\t').map(|(_, msg)| msg.to_string()))
        .filter(|msg| seen.insert(msg.clone()))
        .collect()
}

/// What the recorder's waited-for children used (`getrusage(2)`,
/// `RUSAGE_CHILDREN`): the traced program and the descendants it waited
/// for, once they were reaped.
pub(crate) struct ChildUsage {
    pub(crate) max_rss_kb: i64,
    pub(crate) major_faults: i64,
    pub(crate) minor_faults: i64,
    pub(crate) voluntary_switches: i64,
    pub(crate) involuntary_switches: i64,
    pub(crate) user_us: i64,
    pub(crate) system_us: i64,
}

/// The usage of the recorder's reaped children; `None` if the kernel
/// refuses.
pub(crate) fn children_usage() -> Option<ChildUsage> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a struct rusage into the buffer given,
    // which is one, and zeroed (a valid rusage) before the call.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: zeroed above and filled by a successful getrusage.
    let ru = unsafe { ru.assume_init() };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    Some(ChildUsage {
        max_rss_kb: ru.ru_maxrss,
        major_faults: ru.ru_majflt,
        minor_faults: ru.ru_minflt,
        voluntary_switches: ru.ru_nvcsw,
        involuntary_switches: ru.ru_nivcsw,
        user_us: us(ru.ru_utime),
        system_us: us(ru.ru_stime),
    })
}
