//! The end of an attached process, which is not fctrace's child (its
//! parent reaps it, and may do so at once): its exit status comes from
//! the kernel's process events connector (netlink `NETLINK_CONNECTOR`,
//! `CN_IDX_PROC`), which reports every thread's exit with the code its
//! parent's `wait` will see. Opened before the process runs traced; read
//! at every round of the recording loop (events of other processes are
//! thrown away), so nothing is missed while fctrace listens. Needs
//! CAP_NET_ADMIN; without it (or without the connector) the zombie's
//! `/proc/PID/stat` is read, which only works until the parent reaps it.

use super::process::decode;
use fctrace_format::store::ExitStatus;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// `struct nlmsghdr`, then `struct cn_msg` (id: idx, val; seq, ack, len,
/// flags).
const NLMSG_LEN: usize = 16;
const CN_MSG_LEN: usize = 20;

/// Listens for the exits of the threads of one process.
pub struct EndWatch {
    pid: i32,
    sock: Option<OwnedFd>,
    /// The exit status of its main thread (the thread group leader), once
    /// it exited: the process's own, as its parent's `wait` sees it,
    /// unless the leader left with `pthread_exit` (0) and another thread
    /// ended the process with `exit` or a fatal signal later (`group`).
    leader: Option<i32>,
    /// The last non-zero exit status of another thread: only a group exit
    /// (`exit`, a fatal signal) gives a thread one; threads that ended on
    /// their own have 0, and their events may come after the leader's.
    group: Option<i32>,
    /// Why the connector cannot be used, if it cannot.
    pub unavailable: Option<String>,
}

impl EndWatch {
    pub fn new(pid: i32) -> EndWatch {
        match open() {
            Ok(fd) => EndWatch {
                pid,
                sock: Some(fd),
                leader: None,
                group: None,
                unavailable: None,
            },
            Err(e) => EndWatch {
                pid,
                sock: None,
                leader: None,
                group: None,
                unavailable: Some(e.to_string()),
            },
        }
    }

    /// Reads every event queued (never blocks).
    pub fn poll(&mut self) {
        let Some(fd) = self.sock.as_ref().map(|s| s.as_raw_fd()) else {
            return;
        };
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: recv into a local buffer of the given length.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n <= 0 {
                if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    // Events were dropped (a busy system): go on.
                    continue;
                }
                return;
            }
            self.take(&buf[..n as usize]);
        }
    }

    fn take(&mut self, mut msg: &[u8]) {
        let u32_at = |b: &[u8], at: usize| -> u32 {
            b.get(at..at + 4)
                .map_or(0, |w| u32::from_ne_bytes(w.try_into().unwrap()))
        };
        while msg.len() >= NLMSG_LEN {
            let len = (u32_at(msg, 0) as usize).max(NLMSG_LEN);
            let body = &msg[NLMSG_LEN..len.min(msg.len())];
            // proc_event: what, cpu, timestamp_ns; then exit's process_pid,
            // process_tgid, exit_code.
            let ev = body.get(CN_MSG_LEN..).unwrap_or(&[]);
            if u32_at(body, 0) == CN_IDX_PROC
                && u32_at(ev, 0) == PROC_EVENT_EXIT
                && u32_at(ev, 20) as i32 == self.pid
            {
                let code = u32_at(ev, 24) as i32;
                if u32_at(ev, 16) as i32 == self.pid {
                    self.leader = Some(code);
                } else if code != 0 {
                    self.group = Some(code);
                }
            }
            msg = &msg[len.next_multiple_of(4).min(msg.len())..];
        }
    }

    /// The wait status the events give, once the leader's came.
    fn wait_status(&self) -> Option<i32> {
        self.leader
            .map(|l| if l == 0 { self.group.unwrap_or(0) } else { l })
    }

    /// The process's exit status once it has ended (`wait_status`, as its
    /// parent's `wait` sees it). The event is
    /// sent a moment after the process becomes a zombie, so it is waited
    /// for (a second at most); without the connector, the zombie's status.
    pub fn status(&mut self) -> Option<ExitStatus> {
        if self.sock.is_none() {
            return zombie_status(self.pid);
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            self.poll();
            if self.leader.is_some() && !thread_left(self.pid) {
                return self.wait_status().map(decode);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self
                    .wait_status()
                    .map(decode)
                    .or_else(|| zombie_status(self.pid));
            }
            let mut p = libc::pollfd {
                fd: self.sock.as_ref().map_or(-1, |s| s.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as i32) };
        }
    }
}

fn open() -> std::io::Result<OwnedFd> {
    // SAFETY: socket/bind/send with valid, local arguments; the descriptor
    // is owned from here on.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_CONNECTOR,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let big: libc::c_int = 4 << 20;
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&big as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        if libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let mut msg = Vec::with_capacity(NLMSG_LEN + CN_MSG_LEN + 4);
        let total = (NLMSG_LEN + CN_MSG_LEN + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        for w in [CN_IDX_PROC, CN_VAL_PROC, 0, 0] {
            msg.extend_from_slice(&w.to_ne_bytes());
        }
        msg.extend_from_slice(&4u16.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        if libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// Whether a thread of `pid` has not yet gone through its exit (a
/// zombie leader whose other threads still run, or one still exiting).
fn thread_left(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                    let st = s.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
                    !matches!(st, Some('Z' | 'X'))
                })
            })
        })
        .unwrap_or(false)
}

/// The zombie's exit status (field 52 of /proc/PID/stat), if its parent
/// has not reaped it yet.
fn zombie_status(pid: i32) -> Option<ExitStatus> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if !matches!(fields.first(), Some(&"Z")) {
        return None;
    }
    // Field 3 is the state; field 52 the exit code.
    fields.get(52 - 3)?.parse().ok().map(decode)
}

/// What process `pid` is doing now, for a failed detach: ended, stopped,
/// or running.
pub fn state_of(pid: i32) -> &'static str {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    match stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()) {
        None | Some('Z' | 'X') => "dead",
        Some('T' | 't') => "stopped",
        Some(_) => "running",
    }
}
