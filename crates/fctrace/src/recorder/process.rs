//! Process control: finding the program, starting it with the agent
//! preloaded, reaping it and every descendant, and passing signals on.

use anyhow::{bail, Result};
use fctrace_format::store::ExitStatus;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

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

static FORWARD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(_sig: libc::c_int) {
    // The terminal sends Ctrl-C to the program too: let it decide, and
    // keep recording until it ends.
}

extern "C" fn on_terminate(sig: libc::c_int) {
    FORWARD.store(sig, Ordering::Relaxed);
}

/// Keeps fctrace alive through Ctrl-C (the program gets it from the
/// terminal) and passes SIGTERM/SIGHUP on to the program. Handlers, not
/// SIG_IGN, so that the program does not inherit an ignored disposition.
pub fn install_signal_handlers() {
    for (sig, h) in [
        (libc::SIGINT, on_interrupt as extern "C" fn(libc::c_int)),
        (libc::SIGQUIT, on_interrupt),
        (libc::SIGTERM, on_terminate),
        (libc::SIGHUP, on_terminate),
    ] {
        // SAFETY: installs an async-signal-safe handler with a zeroed, valid sigaction.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = h as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A signal fctrace received that should go to the program.
pub fn take_forward() -> Option<i32> {
    match FORWARD.swap(0, Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

pub fn send_signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory effects.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
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
/// the name the user typed.
pub fn spawn(
    program: &Path,
    argv0: &OsStr,
    args: &[OsString],
    env: &[(String, String)],
) -> Result<Spawned> {
    let mut cmd = std::process::Command::new(program);
    cmd.arg0(argv0).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.spawn() {
        Ok(child) => Ok(Spawned { pid: child.id() }),
        Err(e) => bail!("{}: cannot run: {e}", program.display()),
    }
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

fn decode(status: i32) -> ExitStatus {
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
