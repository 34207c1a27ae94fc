//! System calls as strace prints them (`record -k`): names, arguments by
//! their type (descriptors, flags, modes, addresses), results with their
//! error names: `openat(AT_FDCWD, 0x5612..., O_RDONLY) = -1 ENOENT (No such
//! file or directory)`. Memory the arguments point to is not recorded:
//! strings and buffers show as addresses.

use fctrace_format::syscall_table::{ERRNO_NAMES, SYSCALL_NAMES};
use std::borrow::Cow;
use std::fmt::Write;

/// The module system calls are functions of (`report`, the filters'
/// `NAME@[syscall]`).
pub const SYSCALL_MODULE: &str = "[syscall]";

/// The module of kernel function patterns (`record -K`: `vfs_read@kernel`).
pub const KERNEL_MODULE: &str = "kernel";

/// The name of system call `nr` (`syscall_NNN` for a number Linux does not
/// define on x86_64).
pub fn name(nr: u32) -> Cow<'static, str> {
    match SYSCALL_NAMES.get(nr as usize) {
        Some(n) if !n.is_empty() => Cow::Borrowed(n),
        _ => Cow::Owned(format!("syscall_{nr}")),
    }
}

/// The number of the system call named `name`.
#[cfg(any(test, feature = "testutil"))]
pub fn number(name: &str) -> Option<u32> {
    SYSCALL_NAMES
        .iter()
        .position(|n| !n.is_empty() && *n == name)
        .map(|i| i as u32)
}

/// How an argument is shown.
#[derive(Clone, Copy)]
enum A {
    /// Signed decimal (descriptors, counts, pids).
    D,
    /// Unsigned decimal (sizes).
    U,
    /// An address: hex, `NULL` for 0.
    P,
    /// Hex.
    X,
    /// Octal (file modes).
    O,
    /// A directory descriptor: `AT_FDCWD` or decimal.
    At,
    /// open(2) flags.
    OpenFlags,
    /// O_CLOEXEC-like flags (pipe2, dup3, accept4...): `0` when none.
    FdFlags,
    /// mmap(2)/mprotect(2) protection.
    Prot,
    /// mmap(2) flags.
    MapFlags,
    /// A signal number.
    Sig,
    /// lseek(2)'s whence.
    Whence,
    /// clock ids.
    Clock,
}

use A::*;

/// The arguments of the system calls fctrace knows by name; others show
/// their six registers in hex.
fn signature(name: &str) -> Option<&'static [A]> {
    Some(match name {
        "read" | "write" => &[D, P, U],
        "pread64" | "pwrite64" => &[D, P, U, D],
        "readv" | "writev" => &[D, P, D],
        "open" => &[P, OpenFlags, O],
        "openat" => &[At, P, OpenFlags, O],
        "creat" => &[P, O],
        "close" | "fsync" | "fdatasync" | "dup" => &[D],
        "dup2" => &[D, D],
        "dup3" => &[D, D, FdFlags],
        "stat" | "lstat" => &[P, P],
        "fstat" => &[D, P],
        "newfstatat" => &[At, P, P, X],
        "statx" => &[At, P, X, X, P],
        "access" => &[P, O],
        "faccessat" | "faccessat2" => &[At, P, O, X],
        "lseek" => &[D, D, Whence],
        "mmap" => &[P, U, Prot, MapFlags, D, U],
        "mprotect" => &[P, U, Prot],
        "munmap" => &[P, U],
        "brk" => &[P],
        "madvise" => &[P, U, D],
        "mremap" => &[P, U, U, X, P],
        "rt_sigaction" => &[Sig, P, P, U],
        "rt_sigprocmask" => &[D, P, P, U],
        "rt_sigreturn" => &[],
        "ioctl" => &[D, X, X],
        "pipe" => &[P],
        "pipe2" => &[P, FdFlags],
        "select" => &[D, P, P, P, P],
        "poll" => &[P, U, D],
        "ppoll" => &[P, U, P, P, U],
        "nanosleep" => &[P, P],
        "clock_nanosleep" => &[Clock, D, P, P],
        "clock_gettime" | "clock_getres" => &[Clock, P],
        "gettimeofday" => &[P, P],
        "getpid" | "getppid" | "gettid" | "getuid" | "geteuid" | "getgid" | "getegid"
        | "sched_yield" | "fork" | "vfork" | "pause" | "sync" | "setsid" | "getpgrp" => &[],
        "exit" | "exit_group" => &[D],
        "kill" => &[D, Sig],
        "tgkill" => &[D, D, Sig],
        "tkill" => &[D, Sig],
        "wait4" => &[D, P, X, P],
        "execve" => &[P, P, P],
        "execveat" => &[At, P, P, P, X],
        "clone" => &[X, P, P, P, X],
        "clone3" => &[P, U],
        "futex" => &[P, D, D, P, P, D],
        "set_tid_address" => &[P],
        "set_robust_list" => &[P, U],
        "arch_prctl" => &[X, P],
        "prctl" => &[D, X, X, X, X],
        "getrandom" => &[P, U, X],
        "rseq" => &[P, U, X, X],
        "prlimit64" => &[D, D, P, P],
        "getcwd" => &[P, U],
        "chdir" | "rmdir" | "unlink" => &[P],
        "fchdir" => &[D],
        "mkdir" => &[P, O],
        "mkdirat" => &[At, P, O],
        "unlinkat" => &[At, P, X],
        "rename" | "link" | "symlink" => &[P, P],
        "renameat" | "renameat2" => &[At, P, At, P, X],
        "readlink" => &[P, P, U],
        "readlinkat" => &[At, P, P, U],
        "getdents64" => &[D, P, U],
        "fcntl" => &[D, D, X],
        "socket" => &[D, D, D],
        "connect" | "bind" => &[D, P, U],
        "accept" => &[D, P, P],
        "accept4" => &[D, P, P, X],
        "listen" => &[D, D],
        "sendto" => &[D, P, U, X, P, U],
        "recvfrom" => &[D, P, U, X, P, P],
        "sendmsg" | "recvmsg" => &[D, P, X],
        "shutdown" => &[D, D],
        "epoll_create1" => &[X],
        "epoll_ctl" => &[D, D, D, P],
        "epoll_wait" => &[D, P, D, D],
        "epoll_pwait" => &[D, P, D, D, P, U],
        "eventfd2" => &[U, X],
        "umask" => &[O],
        "chmod" => &[P, O],
        "fchmod" => &[D, O],
        "truncate" => &[P, D],
        "ftruncate" => &[D, D],
        "uname" | "sysinfo" => &[P],
        "memfd_create" => &[P, X],
        "sched_getaffinity" | "sched_setaffinity" => &[D, U, P],
        _ => return None,
    })
}

/// `name(args)` of a call of system call `nr` with these registers, and
/// the path it was given when the kernel copied it (shown quoted, as
/// strace does, in place of its address).
pub fn call_text(nr: u32, args: &[u64; 6], path: Option<&[u8]>) -> String {
    let path_at = fctrace_format::store::kernel::path_arg(nr);
    let name = name(nr);
    let mut s = String::with_capacity(48);
    s.push_str(&name);
    s.push('(');
    // open's mode only when it creates a file (as strace).
    let creates = |flags: u64| flags & 0o100 != 0 || flags & 0o20200000 == 0o20200000;
    let sig = signature(&name).map(|sig| match &*name {
        "open" if !creates(args[1]) => &sig[..2],
        "openat" if !creates(args[2]) => &sig[..3],
        _ => sig,
    });
    match sig {
        Some(sig) => {
            for (i, (&a, kind)) in args.iter().zip(sig).enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                match path {
                    Some(p) if Some(i) == path_at => quoted(&mut s, p),
                    _ => arg(&mut s, *kind, a),
                }
            }
        }
        None => {
            for (i, &a) in args.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                let _ = write!(s, "{a:#x}");
            }
        }
    }
    s.push(')');
    s
}

/// `"bytes"`, escaped as strace escapes strings.
fn quoted(s: &mut String, bytes: &[u8]) {
    s.push('"');
    for &b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    s.push('"');
}

/// The result as strace shows it: `-1 ENOENT (No such file or directory)`
/// for an error, an address in hex for the calls that return one, else
/// decimal.
pub fn result_text(nr: u32, ret: i64) -> String {
    if (-4095..0).contains(&ret) {
        let e = (-ret) as i32;
        // The kernel's own codes for a call a signal interrupted (never
        // seen by the program: it restarts, or gets EINTR), as strace
        // shows them.
        let internal = match e {
            512 => Some(("ERESTARTSYS", "To be restarted if SA_RESTART is set")),
            513 => Some(("ERESTARTNOINTR", "To be restarted")),
            514 => Some(("ERESTARTNOHAND", "To be restarted if no handler")),
            515 => Some(("ENOIOCTLCMD", "No ioctl command")),
            516 => Some(("ERESTART_RESTARTBLOCK", "Interrupted by signal")),
            _ => None,
        };
        if let Some((ename, text)) = internal {
            return format!("? {ename} ({text})");
        }
        let ename = ERRNO_NAMES
            .get(e as usize)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("errno {e}"), |n| n.to_string());
        let text = std::io::Error::from_raw_os_error(e).to_string();
        let text = text
            .strip_suffix(&format!(" (os error {e})"))
            .unwrap_or(&text)
            .to_string();
        return format!("-1 {ename} ({text})");
    }
    match &*name(nr) {
        "mmap" | "brk" | "mremap" => format!("{ret:#x}"),
        "umask" => format!("0{ret:o}"),
        _ => ret.to_string(),
    }
}

/// An error number's name (`EPERM`), or the number.
pub fn errno_name(e: i32) -> String {
    ERRNO_NAMES
        .get(e.max(0) as usize)
        .filter(|n| !n.is_empty())
        .map_or_else(|| e.to_string(), |n| n.to_string())
}

/// strace's name for a signal's `si_code` (`SI_TKILL`, `SEGV_MAPERR`,
/// `CLD_EXITED`), or the number.
pub fn si_code_name(sig: i32, code: i32) -> String {
    let general = match code {
        0 => Some("SI_USER"),
        0x80 => Some("SI_KERNEL"),
        -1 => Some("SI_QUEUE"),
        -2 => Some("SI_TIMER"),
        -3 => Some("SI_MESGQ"),
        -4 => Some("SI_ASYNCIO"),
        -5 => Some("SI_SIGIO"),
        -6 => Some("SI_TKILL"),
        -7 => Some("SI_DETHREAD"),
        -60 => Some("SI_ASYNCNL"),
        _ => None,
    };
    if let Some(n) = general {
        return n.to_string();
    }
    let specific: &[&str] = match sig {
        libc::SIGILL => &[
            "ILL_ILLOPC",
            "ILL_ILLOPN",
            "ILL_ILLADR",
            "ILL_ILLTRP",
            "ILL_PRVOPC",
            "ILL_PRVREG",
            "ILL_COPROC",
            "ILL_BADSTK",
            "ILL_BADIADDR",
        ],
        libc::SIGFPE => &[
            "FPE_INTDIV",
            "FPE_INTOVF",
            "FPE_FLTDIV",
            "FPE_FLTOVF",
            "FPE_FLTUND",
            "FPE_FLTRES",
            "FPE_FLTINV",
            "FPE_FLTSUB",
            "FPE_FLTUNK",
            "FPE_CONDTRAP",
        ],
        libc::SIGSEGV => &[
            "SEGV_MAPERR",
            "SEGV_ACCERR",
            "SEGV_BNDERR",
            "SEGV_PKUERR",
            "SEGV_ACCADI",
            "SEGV_ADIDERR",
            "SEGV_ADIPERR",
            "SEGV_MTEAERR",
            "SEGV_MTESERR",
            "SEGV_CPERR",
        ],
        libc::SIGBUS => &[
            "BUS_ADRALN",
            "BUS_ADRERR",
            "BUS_OBJERR",
            "BUS_MCEERR_AR",
            "BUS_MCEERR_AO",
        ],
        libc::SIGTRAP => &[
            "TRAP_BRKPT",
            "TRAP_TRACE",
            "TRAP_BRANCH",
            "TRAP_HWBKPT",
            "TRAP_UNK",
            "TRAP_PERF",
        ],
        libc::SIGCHLD => &[
            "CLD_EXITED",
            "CLD_KILLED",
            "CLD_DUMPED",
            "CLD_TRAPPED",
            "CLD_STOPPED",
            "CLD_CONTINUED",
        ],
        libc::SIGIO => &[
            "POLL_IN", "POLL_OUT", "POLL_MSG", "POLL_ERR", "POLL_PRI", "POLL_HUP",
        ],
        libc::SIGSYS => &["SYS_SECCOMP", "SYS_USER_DISPATCH"],
        _ => &[],
    };
    match usize::try_from(code)
        .ok()
        .and_then(|c| specific.get(c.wrapping_sub(1)))
    {
        Some(n) => n.to_string(),
        None => code.to_string(),
    }
}

/// What a signal's default action does (signal(7)).
pub fn default_action(sig: i32) -> &'static str {
    match sig {
        libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH => "ignore",
        libc::SIGCONT => "continue",
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => "stop",
        libc::SIGQUIT
        | libc::SIGILL
        | libc::SIGTRAP
        | libc::SIGABRT
        | libc::SIGBUS
        | libc::SIGFPE
        | libc::SIGSEGV
        | libc::SIGXCPU
        | libc::SIGXFSZ
        | libc::SIGSYS => "core",
        _ => "terminate",
    }
}

/// Whether `ret` is an error result.
pub fn is_error(ret: i64) -> bool {
    (-4095..0).contains(&ret)
}

/// One system call's totals over a trace (`report -k`).
#[derive(Default, Clone)]
pub struct Summary {
    pub nr: u32,
    pub calls: u64,
    pub errors: u64,
    /// Time inside the calls that returned, ns.
    pub ns: u64,
}

/// Every task's system calls, summed per system call (streaming: memory
/// grows with the number of distinct system calls only); and the read
/// errors met.
pub fn summarize(
    trace: &fctrace_format::store::Trace,
) -> (Vec<Summary>, Vec<fctrace_format::store::StoreError>) {
    use fctrace_format::event::EventKind;
    let mut by: std::collections::BTreeMap<u32, Summary> = Default::default();
    let mut errors = Vec::new();
    for task in &trace.info.tasks {
        let mut events = match trace.task_events(task) {
            Ok(e) => e,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        // The entry being waited for: (number, time).
        let mut open: Option<(u32, u64)> = None;
        let mut ret: Option<(u32, u64)> = None;
        while let Some(e) = events.next_event() {
            match e.kind {
                EventKind::Syscall => {
                    let s = by.entry(e.func).or_default();
                    s.nr = e.func;
                    s.calls += 1;
                    open = Some((e.func, e.ns));
                    ret = None;
                }
                EventKind::SyscallExit => {
                    ret = open
                        .take()
                        .filter(|o| o.0 == e.func)
                        .map(|o| (o.0, e.ns - o.1.min(e.ns)));
                }
                EventKind::Data => {
                    // The result's bytes come right after its return.
                    if let Some((nr, dur)) = ret.take() {
                        let (b, _) = e.data_bytes();
                        let r = i64::from_le_bytes(b[..8].try_into().unwrap());
                        let s = by.entry(nr).or_default();
                        s.ns += dur;
                        s.errors += u64::from(is_error(r));
                    }
                }
                _ => ret = None,
            }
        }
        errors.extend(events.take_error());
    }
    (by.into_values().collect(), errors)
}

/// The `strace -c` table: `% time`, seconds, usecs/call, calls, errors,
/// syscall; by time (`-s total`/`self`) or calls (`-s calls`), and a total.
pub fn write_summary(
    out: &mut impl std::io::Write,
    rows: &[Summary],
    sort: super::sort::SortKey,
) -> std::io::Result<()> {
    let mut rows = rows.to_vec();
    match sort {
        super::sort::SortKey::Calls => {
            rows.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.nr.cmp(&b.nr)))
        }
        _ => rows.sort_by(|a, b| {
            b.ns.cmp(&a.ns)
                .then(b.calls.cmp(&a.calls))
                .then(a.nr.cmp(&b.nr))
        }),
    }
    let total_ns: u64 = rows.iter().map(|r| r.ns).sum();
    writeln!(
        out,
        "% time     seconds  usecs/call     calls    errors syscall"
    )?;
    writeln!(
        out,
        "------ ----------- ----------- --------- --------- ----------------"
    )?;
    let line = |out: &mut dyn std::io::Write, ns: u64, calls: u64, errors: u64, name: &str| {
        let pct = if total_ns > 0 {
            100.0 * ns as f64 / total_ns as f64
        } else {
            0.0
        };
        let usecs = (ns / 1000).checked_div(calls).unwrap_or(0);
        let errs = if errors > 0 {
            errors.to_string()
        } else {
            String::new()
        };
        writeln!(
            out,
            "{pct:6.2} {:11.6} {usecs:11} {calls:9} {errs:>9} {name}",
            ns as f64 / 1e9
        )
    };
    for r in &rows {
        line(out, r.ns, r.calls, r.errors, &name(r.nr))?;
    }
    writeln!(
        out,
        "------ ----------- ----------- --------- --------- ----------------"
    )?;
    let calls = rows.iter().map(|r| r.calls).sum();
    let errors = rows.iter().map(|r| r.errors).sum();
    line(out, total_ns, calls, errors, "total")
}

/// The same as JSON: `{"syscalls": [{"name", "number", "calls",
/// "errors", "total_ns"}]}`, by number.
pub fn write_summary_json(out: &mut impl std::io::Write, rows: &[Summary]) -> std::io::Result<()> {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": name(r.nr),
                "number": r.nr,
                "calls": r.calls,
                "errors": r.errors,
                "total_ns": r.ns,
            })
        })
        .collect();
    serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "syscalls": list }))?;
    writeln!(out)
}

fn flags(s: &mut String, v: u64, names: &[(u64, &str)], zero: &str) {
    let mut rest = v;
    let mut first = true;
    for &(bit, n) in names {
        if bit != 0 && rest & bit == bit {
            if !first {
                s.push('|');
            }
            s.push_str(n);
            first = false;
            rest &= !bit;
        }
    }
    if rest != 0 || first {
        if !first {
            s.push('|');
        }
        if first && rest == 0 {
            s.push_str(zero);
        } else {
            let _ = write!(s, "{rest:#x}");
        }
    }
}

fn arg(s: &mut String, kind: A, v: u64) {
    match kind {
        D => {
            let _ = write!(s, "{}", v as i64 as i32 as i64);
        }
        U => {
            let _ = write!(s, "{v}");
        }
        P if v == 0 => s.push_str("NULL"),
        X if v == 0 => s.push('0'),
        P | X => {
            let _ = write!(s, "{v:#x}");
        }
        O => {
            let _ = write!(s, "0{:o}", v & 0o7777);
        }
        At if v as i32 == -100 => s.push_str("AT_FDCWD"),
        At => {
            let _ = write!(s, "{}", v as i32);
        }
        OpenFlags => {
            let acc = match v & 3 {
                0 => "O_RDONLY",
                1 => "O_WRONLY",
                2 => "O_RDWR",
                _ => "O_ACCMODE",
            };
            s.push_str(acc);
            const OF: &[(u64, &str)] = &[
                (0o100, "O_CREAT"),
                (0o200, "O_EXCL"),
                (0o400, "O_NOCTTY"),
                (0o1000, "O_TRUNC"),
                (0o2000, "O_APPEND"),
                (0o4000, "O_NONBLOCK"),
                (0o4010000, "O_SYNC"),
                (0o10000, "O_DSYNC"),
                (0o20000, "O_ASYNC"),
                (0o40000, "O_DIRECT"),
                (0o200000, "O_DIRECTORY"),
                (0o400000, "O_NOFOLLOW"),
                (0o1000000, "O_NOATIME"),
                (0o2000000, "O_CLOEXEC"),
                (0o10000000, "O_PATH"),
                (0o20200000, "O_TMPFILE"),
                (0o100000, "O_LARGEFILE"),
            ];
            let rest = v & !3;
            if rest != 0 {
                s.push('|');
                flags(s, rest, OF, "");
            }
        }
        FdFlags => flags(
            s,
            v,
            &[
                (0o2000000, "O_CLOEXEC"),
                (0o4000, "O_NONBLOCK"),
                (0o40000, "O_DIRECT"),
            ],
            "0",
        ),
        Prot => flags(
            s,
            v,
            &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")],
            "PROT_NONE",
        ),
        MapFlags => {
            let kind = match v & 0xf {
                1 => "MAP_SHARED",
                2 => "MAP_PRIVATE",
                3 => "MAP_SHARED_VALIDATE",
                _ => "",
            };
            s.push_str(kind);
            let rest = v & !0xf;
            if rest != 0 {
                if !kind.is_empty() {
                    s.push('|');
                }
                flags(
                    s,
                    rest,
                    &[
                        (0x10, "MAP_FIXED"),
                        (0x20, "MAP_ANONYMOUS"),
                        (0x100, "MAP_GROWSDOWN"),
                        (0x800, "MAP_DENYWRITE"),
                        (0x1000, "MAP_EXECUTABLE"),
                        (0x2000, "MAP_LOCKED"),
                        (0x4000, "MAP_NORESERVE"),
                        (0x8000, "MAP_POPULATE"),
                        (0x10000, "MAP_NONBLOCK"),
                        (0x20000, "MAP_STACK"),
                        (0x40000, "MAP_HUGETLB"),
                        (0x100000, "MAP_FIXED_NOREPLACE"),
                    ],
                    "",
                );
            } else if kind.is_empty() {
                let _ = write!(s, "{v:#x}");
            }
        }
        Sig => match fctrace_options::known_signal_name(v as i32) {
            Some(n) => s.push_str(n),
            None => {
                let _ = write!(s, "{}", v as i32);
            }
        },
        Whence => s.push_str(match v {
            0 => "SEEK_SET",
            1 => "SEEK_CUR",
            2 => "SEEK_END",
            3 => "SEEK_DATA",
            4 => "SEEK_HOLE",
            _ => "?",
        }),
        Clock => s.push_str(match v {
            0 => "CLOCK_REALTIME",
            1 => "CLOCK_MONOTONIC",
            2 => "CLOCK_PROCESS_CPUTIME_ID",
            3 => "CLOCK_THREAD_CPUTIME_ID",
            4 => "CLOCK_MONOTONIC_RAW",
            7 => "CLOCK_BOOTTIME",
            _ => "?",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_shapes() {
        let openat = number("openat").unwrap();
        assert_eq!(openat, 257);
        assert_eq!(
            call_text(
                openat,
                &[(-100i64) as u64, 0x5000, 0o2000000, 0, 0, 0],
                None
            ),
            "openat(AT_FDCWD, 0x5000, O_RDONLY|O_CLOEXEC)"
        );
        assert_eq!(
            result_text(openat, -2),
            "-1 ENOENT (No such file or directory)"
        );
        assert_eq!(
            call_text(0, &[3, 0x7ffd0000, 512, 9, 9, 9], None),
            "read(3, 0x7ffd0000, 512)"
        );
        assert_eq!(result_text(0, 512), "512");
        // A call a signal interrupted, as strace shows it.
        let pause = number("pause").unwrap();
        assert_eq!(
            result_text(pause, -514),
            "? ERESTARTNOHAND (To be restarted if no handler)"
        );
        assert_eq!(
            result_text(0, -512),
            "? ERESTARTSYS (To be restarted if SA_RESTART is set)"
        );
        let mmap = number("mmap").unwrap();
        assert_eq!(
            call_text(mmap, &[0, 4096, 3, 0x22, u64::MAX, 0], None),
            "mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)"
        );
        assert_eq!(result_text(mmap, 0x7f00_0000_0000), "0x7f0000000000");
        assert_eq!(
            call_text(openat, &[3, 0x5000, 0o101, 0o644, 0, 0], None),
            "openat(3, 0x5000, O_WRONLY|O_CREAT, 0644)"
        );
        assert_eq!(
            call_text(
                openat,
                &[(-100i64) as u64, 0x5000, 0, 0, 0, 0],
                Some(b"/tmp/a \"b\"\n")
            ),
            "openat(AT_FDCWD, \"/tmp/a \\\"b\\\"\\n\", O_RDONLY)"
        );
        assert_eq!(name(9999), "syscall_9999");
        assert_eq!(
            call_text(number("getpid").unwrap(), &[1; 6], None),
            "getpid()"
        );
    }
}
