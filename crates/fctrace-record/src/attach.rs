//! Attaching to a running process (`-p PID`): ptrace stops every thread
//! of the process; one of them, stopped at a system-call boundary (where
//! it holds no lock of the C library or of the dynamic loader), loads the
//! agent with the process's own `dlopen` from a memfd made in the process,
//! while the other threads run on (a lock they hold is released as
//! usual). Then every thread is stopped again, and the same thread calls
//! the agent's attach entry, which finds the functions and patches them
//! while no other thread runs (it is told where each one stopped, so that
//! no patch cuts an instruction a thread is about to run). The thread's
//! registers are then put back as they were, system call included (an
//! interrupted `read` or `futex` is restarted by the kernel as after any
//! stop: no spurious EINTR), and fctrace detaches: from then on the agent
//! records in the process as when it was preloaded.
//!
//! The thread's work for fctrace is done with plain register changes:
//! a system call is one single-stepped `syscall` instruction of the C
//! library, a function call returns to address 0, whose fault ends it.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

type Regs = libc::user_regs_struct;

const ERESTARTSYS: i64 = 512;
const ERESTARTNOINTR: i64 = 513;
const ERESTARTNOHAND: i64 = 514;
const ERESTART_RESTARTBLOCK: i64 = 516;

/// System calls a thread can be stopped in (interrupted, or about to
/// enter) and then call `dlopen`: it holds no lock that `dlopen` takes.
/// Excluded are those the C library makes while holding one: memory
/// management (`malloc` grows and trims its heaps under its arena lock),
/// the loader's own file reads are indistinguishable from others, so a
/// program loading a library at that moment is a (rare) exception; and
/// process creation and exit.
const QUIET: &[i64] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_pwrite64,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_connect,
    libc::SYS_futex,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_msgrcv,
    libc::SYS_semtimedop,
    libc::SYS_lseek,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_sched_yield,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_getrusage,
    libc::SYS_ioctl,
];

/// How long fctrace waits for a thread of the process to reach a system
/// call (or the program's own code) where it can load the agent.
const QUIET_WAIT: Duration = Duration::from_secs(5);

/// How often, while waiting for a quiet system call, fctrace looks for a
/// thread running the program's own code instead.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The executable mappings of the program's own file (not of a library).
fn own_code(pid: i32) -> Vec<(u64, u64)> {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return Vec::new();
    };
    let exe = exe.to_string_lossy().into_owned();
    let exe = exe.trim_end_matches(" (deleted)");
    mappings(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.perms.contains('x') && m.path.trim_end_matches(" (deleted)") == exe)
        .map(|m| (m.start, m.end))
        .collect()
}

/// What the attach entry is given: the agent's variables (as a preloaded
/// agent finds them in its environment).
pub struct AttachConfig {
    pub vars: Vec<(String, String)>,
}

struct Thread {
    tid: i32,
    /// Stopped by fctrace (not running).
    stopped: bool,
    /// Signals that arrived while fctrace stopped the thread, sent again
    /// when it is let go.
    signals: Vec<i32>,
    /// Run under `PTRACE_SYSCALL`: its next system-call stop is an exit.
    in_syscall: bool,
}

/// The thread doing fctrace's work, and how to put it back.
struct Worker {
    index: usize,
    /// Its registers as the program left them, made ready to resume (a
    /// system call about to be entered is entered again).
    saved: Regs,
}

/// A process whose threads fctrace has seized.
struct Tracee {
    pid: i32,
    threads: Vec<Thread>,
    mem: File,
    worker: Option<Worker>,
    /// The stack the worker's function calls run on (its lowest address),
    /// mapped in the process for them; without it, below the worker's own
    /// stack pointer.
    call_stack: Option<u64>,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn ptrace(req: libc::c_uint, tid: i32, addr: u64, data: u64) -> std::io::Result<libc::c_long> {
    // SAFETY: ptrace requests on a thread fctrace traces; `addr`/`data` are
    // plain integers or point to fctrace's own buffers of the request's size.
    let r = unsafe {
        libc::ptrace(
            req,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        Err(errno())
    } else {
        Ok(r)
    }
}

fn get_regs(tid: i32) -> Result<Regs> {
    // SAFETY: a zeroed user_regs_struct is a valid value.
    let mut r: Regs = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut Regs as u64)
        .with_context(|| format!("cannot read the registers of thread {tid}"))?;
    Ok(r)
}

fn set_regs(tid: i32, r: &Regs) -> Result<()> {
    ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const Regs as u64)
        .with_context(|| format!("cannot set the registers of thread {tid}"))?;
    Ok(())
}

fn sig_info(tid: i32) -> Option<libc::siginfo_t> {
    // SAFETY: a zeroed siginfo_t is a valid value.
    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETSIGINFO, tid, 0, &mut si as *mut _ as u64).ok()?;
    Some(si)
}

/// How a waited-for thread stopped or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// `PTRACE_INTERRUPT`'s stop (or a group stop).
    Interrupt,
    /// At a system call's entry or exit (`PTRACE_SYSCALL`).
    Syscall,
    /// A signal is about to be delivered.
    Signal(i32),
    /// The thread is gone.
    Gone,
}

fn wait_tid(tid: i32, block: bool) -> Result<Option<Stop>> {
    let mut st = 0;
    loop {
        let flags = libc::__WALL | if block { 0 } else { libc::WNOHANG };
        // SAFETY: waitpid with a valid status pointer.
        let r = unsafe { libc::waitpid(tid, &mut st, flags) };
        if r == -1 {
            let e = errno();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(Some(Stop::Gone)),
                _ => return Err(e).context("waitpid"),
            }
        }
        if r == 0 {
            return Ok(None);
        }
        break;
    }
    if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
        return Ok(Some(Stop::Gone));
    }
    let sig = libc::WSTOPSIG(st);
    let event = (st >> 16) & 0xff;
    Ok(Some(if event == libc::PTRACE_EVENT_STOP {
        Stop::Interrupt
    } else if sig == libc::SIGTRAP | 0x80 {
        Stop::Syscall
    } else {
        Stop::Signal(sig)
    }))
}

/// A fault raised by the instruction the thread runs: it is raised again
/// when the thread runs that instruction again, so it is not sent again.
fn is_fault(si: &libc::siginfo_t) -> bool {
    matches!(
        si.si_signo,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP | libc::SIGSYS
    ) && si.si_code > 0
}

fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let rd =
        std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid}"))?;
    let mut v: Vec<i32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

impl Tracee {
    /// Seizes every thread of `pid` and stops them all.
    fn seize(pid: i32) -> Result<Tracee> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| permission_error(pid, e))?;
        let mut t = Tracee {
            pid,
            threads: Vec::new(),
            mem,
            worker: None,
            call_stack: None,
        };
        t.stop_all()?;
        if t.threads.is_empty() {
            bail!("process {pid} has no threads left (it is ending)");
        }
        Ok(t)
    }

    /// Stops every thread but the worker, seizing threads that are new,
    /// until no new one appears.
    fn stop_all(&mut self) -> Result<()> {
        loop {
            let mut new = false;
            for tid in task_ids(self.pid)? {
                if self.threads.iter().any(|t| t.tid == tid) {
                    continue;
                }
                match ptrace(
                    libc::PTRACE_SEIZE,
                    tid,
                    0,
                    libc::PTRACE_O_TRACESYSGOOD as u64,
                ) {
                    Ok(_) => {}
                    // Ended meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) => return Err(permission_error(self.pid, e)),
                }
                new = true;
                self.threads.push(Thread {
                    tid,
                    stopped: false,
                    signals: Vec::new(),
                    in_syscall: false,
                });
            }
            let worker = self.worker.as_ref().map(|w| w.index);
            for i in 0..self.threads.len() {
                if self.threads[i].stopped || Some(i) == worker {
                    continue;
                }
                let tid = self.threads[i].tid;
                if ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0).is_err() {
                    self.threads[i].stopped = true; // gone: dropped below
                    self.threads[i].tid = -1;
                    continue;
                }
                self.wait_stopped(i)?;
            }
            self.forget_gone();
            if !new {
                return Ok(());
            }
        }
    }

    /// Waits until thread `i`, asked to stop (`PTRACE_INTERRUPT`), has
    /// stopped for it; signals that arrive meanwhile are kept to be sent
    /// again, system-call stops passed (so that no interrupt is left
    /// pending to stop the thread later, unseen).
    fn wait_stopped(&mut self, i: usize) -> Result<()> {
        let tid = self.threads[i].tid;
        loop {
            match wait_tid(tid, true)?.unwrap_or(Stop::Gone) {
                Stop::Interrupt => break,
                Stop::Syscall => {
                    if ptrace(libc::PTRACE_CONT, tid, 0, 0).is_err() {
                        self.threads[i].tid = -1;
                        break;
                    }
                }
                Stop::Gone => {
                    self.threads[i].tid = -1;
                    break;
                }
                Stop::Signal(_) => {
                    if let Some(si) = sig_info(tid) {
                        if !is_fault(&si) {
                            self.threads[i].signals.push(si.si_signo);
                        }
                    }
                    // On to the interrupt's stop, the signal held back.
                    if ptrace(libc::PTRACE_CONT, tid, 0, 0).is_err() {
                        self.threads[i].tid = -1;
                        break;
                    }
                }
            }
        }
        self.threads[i].stopped = true;
        Ok(())
    }

    fn forget_gone(&mut self) {
        let worker_tid = self.worker.as_ref().map(|w| self.threads[w.index].tid);
        self.threads.retain(|t| t.tid != -1);
        if let (Some(w), Some(tid)) = (self.worker.as_mut(), worker_tid) {
            if let Some(i) = self.threads.iter().position(|t| t.tid == tid) {
                w.index = i;
            }
        }
    }

    /// Lets every thread but the worker run.
    fn resume_others(&mut self) {
        let worker = self.worker.as_ref().map(|w| w.index);
        for (i, t) in self.threads.iter_mut().enumerate() {
            if Some(i) != worker && t.stopped && ptrace(libc::PTRACE_CONT, t.tid, 0, 0).is_ok() {
                t.stopped = false;
            }
        }
    }

    /// Picks the thread that does fctrace's work: with `quiet`, one
    /// stopped in (or, if none is, the first to enter) a quiet system call,
    /// the main thread first; else any. Every other thread is stopped on
    /// return.
    fn pick_worker(&mut self, quiet: bool) -> Result<()> {
        let mut order: Vec<usize> = (0..self.threads.len()).collect();
        order.sort_by_key(|&i| self.threads[i].tid != self.pid);
        if !quiet {
            // Any thread: the work needs no lock of the program's. One in
            // a system call first, which it then restarts.
            let i = order
                .iter()
                .copied()
                .find(|&i| get_regs(self.threads[i].tid).is_ok_and(|r| (r.orig_rax as i64) >= 0))
                .unwrap_or(order[0]);
            let saved = get_regs(self.threads[i].tid)?;
            self.worker = Some(Worker { index: i, saved });
            return Ok(());
        }
        for i in order {
            let r = get_regs(self.threads[i].tid)?;
            let nr = r.orig_rax as i64;
            let ret = -(r.rax as i64);
            let interrupted = nr >= 0
                && matches!(
                    ret,
                    ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK
                );
            if interrupted && QUIET.contains(&nr) {
                self.worker = Some(Worker { index: i, saved: r });
                return Ok(());
            }
        }
        // None is: the first to enter a quiet system call.
        for t in &mut self.threads {
            if ptrace(libc::PTRACE_SYSCALL, t.tid, 0, 0).is_ok() {
                t.stopped = false;
            }
        }
        let deadline = Instant::now() + QUIET_WAIT;
        let mut next_look = Instant::now() + LOOK_EVERY;
        while self.worker.is_none() {
            if Instant::now() > deadline {
                self.stop_all()?;
                bail!(
                    "no thread of process {} made a system call or ran the program's own code \
                     within {} s: fctrace loads its agent from a thread at one of those points",
                    self.pid,
                    QUIET_WAIT.as_secs()
                );
            }
            if Instant::now() > next_look {
                // Threads that only compute make no system call: one
                // stopped in the program's own code holds no lock of the
                // C library or the loader either.
                if self.stop_in_own_code()? {
                    break;
                }
                next_look = Instant::now() + LOOK_EVERY;
            }
            let mut idle = true;
            for i in 0..self.threads.len() {
                let tid = self.threads[i].tid;
                if tid == -1 || self.threads[i].stopped {
                    continue;
                }
                let Some(stop) = wait_tid(tid, false)? else {
                    continue;
                };
                idle = false;
                let mut sig = 0;
                match stop {
                    Stop::Gone => {
                        self.threads[i].tid = -1;
                        continue;
                    }
                    Stop::Syscall => {
                        let enter = !self.threads[i].in_syscall;
                        self.threads[i].in_syscall = enter;
                        if enter && self.worker.is_none() {
                            let r = get_regs(tid)?;
                            if QUIET.contains(&(r.orig_rax as i64)) {
                                // Enter it again once done: back to the
                                // `syscall` instruction, its number in rax.
                                let mut saved = r;
                                saved.rip -= 2;
                                saved.rax = r.orig_rax;
                                saved.orig_rax = u64::MAX;
                                self.threads[i].stopped = true;
                                self.worker = Some(Worker { index: i, saved });
                                continue;
                            }
                        }
                    }
                    Stop::Interrupt => {}
                    Stop::Signal(s) => sig = s as u64,
                }
                if ptrace(libc::PTRACE_SYSCALL, tid, 0, sig).is_err() {
                    self.threads[i].tid = -1;
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // Everyone else stops.
        let worker = self.worker.as_ref().map(|w| w.index);
        for i in 0..self.threads.len() {
            if Some(i) == worker || self.threads[i].stopped || self.threads[i].tid == -1 {
                continue;
            }
            let _ = ptrace(libc::PTRACE_INTERRUPT, self.threads[i].tid, 0, 0);
            self.wait_stopped(i)?;
        }
        self.forget_gone();
        self.stop_all()
    }

    /// Stops every thread; if one is in the program's own code (the
    /// executable's, not in a system call), it becomes the worker and the
    /// others stay stopped (true); else they all run on under
    /// `PTRACE_SYSCALL` (false).
    fn stop_in_own_code(&mut self) -> Result<bool> {
        for i in 0..self.threads.len() {
            if self.threads[i].stopped || self.threads[i].tid == -1 {
                continue;
            }
            let _ = ptrace(libc::PTRACE_INTERRUPT, self.threads[i].tid, 0, 0);
            self.wait_stopped(i)?;
        }
        self.forget_gone();
        let own = own_code(self.pid);
        let mut order: Vec<usize> = (0..self.threads.len()).collect();
        order.sort_by_key(|&i| self.threads[i].tid != self.pid);
        for i in order {
            let r = get_regs(self.threads[i].tid)?;
            if r.orig_rax as i64 == -1 && own.iter().any(|&(a, b)| r.rip >= a && r.rip < b) {
                self.worker = Some(Worker { index: i, saved: r });
                return Ok(true);
            }
        }
        for t in &mut self.threads {
            t.in_syscall = false;
            if ptrace(libc::PTRACE_SYSCALL, t.tid, 0, 0).is_ok() {
                t.stopped = false;
            }
        }
        Ok(false)
    }

    fn worker_tid(&self) -> i32 {
        self.threads[self.worker.as_ref().expect("worker").index].tid
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.mem
            .read_exact_at(buf, addr)
            .with_context(|| format!("cannot read the process's memory at {addr:#x}"))
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<()> {
        self.mem
            .write_all_at(buf, addr)
            .with_context(|| format!("cannot write the process's memory at {addr:#x}"))
    }

    /// Runs the worker from `regs` until it stops for fctrace (`done`),
    /// holding back other signals (sent again when it is let go).
    fn run_worker(
        &mut self,
        regs: &Regs,
        step: bool,
        done: impl Fn(&Regs, i32) -> bool,
    ) -> Result<Regs> {
        let tid = self.worker_tid();
        let index = self.worker.as_ref().expect("worker").index;
        set_regs(tid, regs)?;
        let req = if step {
            libc::PTRACE_SINGLESTEP
        } else {
            libc::PTRACE_CONT
        };
        ptrace(req, tid, 0, 0).context("cannot resume the thread")?;
        let mut first = true;
        loop {
            match wait_tid(tid, true)?.unwrap_or(Stop::Gone) {
                Stop::Gone => bail!("the process ended while fctrace was attaching"),
                Stop::Interrupt | Stop::Syscall => {}
                Stop::Signal(sig) => {
                    let r = get_regs(tid)?;
                    if done(&r, sig) {
                        return Ok(r);
                    }
                    // A worker taken at a system call's entry stop, its
                    // call skipped (`orig_rax` -1): the kernel reports the
                    // single step at that call's exit, before the first
                    // instruction ran (seen 1 attach in 10 to a program
                    // in usleep). Not a fault: step again from `regs`.
                    if std::mem::take(&mut first)
                        && step
                        && sig == libc::SIGTRAP
                        && r.rip == regs.rip
                    {
                        set_regs(tid, regs)?;
                        ptrace(req, tid, 0, 0).context("cannot resume the thread")?;
                        continue;
                    }
                    let si = sig_info(tid);
                    if let Some(si) = si.filter(|si| !is_fault(si)) {
                        self.threads[index].signals.push(si.si_signo);
                    } else {
                        bail!(
                            "the process faulted (signal {sig} at {:#x}) while loading the agent",
                            r.rip
                        );
                    }
                }
            }
            ptrace(req, tid, 0, 0).context("cannot resume the thread")?;
        }
    }

    /// A system call made by the worker; its result (negative: -errno).
    fn syscall(&mut self, gadget: u64, nr: i64, args: &[u64]) -> Result<i64> {
        let mut r = self.worker.as_ref().expect("worker").saved;
        r.rax = nr as u64;
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        r.rip = gadget;
        r.orig_rax = u64::MAX;
        let end = gadget + 2;
        let out = self.run_worker(&r, true, |r, sig| sig == libc::SIGTRAP && r.rip == end)?;
        Ok(out.rax as i64)
    }

    /// `len` bytes of fresh memory mapped by the worker (read-write), for
    /// what fctrace hands the agent; the caller unmaps them.
    fn scratch(&mut self, gadget: u64, len: u64) -> Result<u64> {
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let private = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let at = self.syscall(gadget, libc::SYS_mmap, &[0, len, rw, private, u64::MAX, 0])?;
        if (-4095..0).contains(&at) {
            bail!(
                "the process could not map memory for fctrace: {}",
                std::io::Error::from_raw_os_error(-at as i32)
            );
        }
        Ok(at as u64)
    }

    /// Maps the stack the worker's function calls run on. The worker may
    /// be a thread whose stack is small and surrounded by other data: a
    /// goroutine's (Go with cgo: a few KiB inside Go's heap, which
    /// `dlopen` and the agent's start-up overran, and Go died later in
    /// its stack allocator), a coroutine's, a green thread's.
    fn map_call_stack(&mut self, gadget: u64) -> Result<()> {
        self.call_stack = Some(self.scratch(gadget, CALL_STACK_LEN)?);
        Ok(())
    }

    /// Unmaps the stack of [`Tracee::map_call_stack`].
    fn unmap_call_stack(&mut self, gadget: u64) {
        if let Some(at) = self.call_stack.take() {
            let _ = self.syscall(gadget, libc::SYS_munmap, &[at, CALL_STACK_LEN]);
        }
    }

    /// A function called by the worker, on the call stack (else on its own
    /// stack, below the red zone), returning to address 0; its result.
    fn call(&mut self, func: u64, args: &[u64]) -> Result<u64> {
        let mut r = self.worker.as_ref().expect("worker").saved;
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        let top = self
            .call_stack
            .map_or(r.rsp - 4096, |at| at + CALL_STACK_LEN - 4096);
        let sp = (top & !0xf) - 8;
        self.write(sp, &0u64.to_le_bytes())?;
        r.rsp = sp;
        r.rip = func;
        r.rax = 0;
        r.orig_rax = u64::MAX;
        let out = self.run_worker(&r, false, |r, sig| sig == libc::SIGSEGV && r.rip == 0)?;
        Ok(out.rax)
    }

    /// Moves stopped thread `i` on by up to `n` instructions (it stops
    /// early at a system call that blocks: it is interrupted there).
    fn step(&mut self, i: usize, n: usize) -> Result<()> {
        let tid = self.threads[i].tid;
        // A signal that arrives is delivered at the next step (an int3 of
        // the agent's trap fallback among them).
        let mut deliver = 0u64;
        for _ in 0..n {
            ptrace(libc::PTRACE_SINGLESTEP, tid, 0, deliver).context("cannot step the thread")?;
            deliver = 0;
            let deadline = Instant::now() + Duration::from_millis(20);
            let stop = loop {
                if let Some(stop) = wait_tid(tid, false)? {
                    break stop;
                }
                if Instant::now() > deadline {
                    // Blocked: taken back at its system call.
                    let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
                    self.threads[i].stopped = false;
                    self.wait_stopped(i)?;
                    return Ok(());
                }
                std::thread::yield_now();
            };
            match stop {
                Stop::Gone => {
                    self.threads[i].tid = -1;
                    self.forget_gone();
                    return Ok(());
                }
                Stop::Signal(sig) => {
                    // The step's own trap: TRAP_TRACE, or TRAP_BRKPT, which
                    // kernels before 5.x reported for a step over a
                    // `syscall` instruction. Delivering it would kill the
                    // process (SIGTRAP's default action).
                    const TRAP_BRKPT: i32 = 1;
                    const TRAP_TRACE: i32 = 2;
                    let stepped = sig == libc::SIGTRAP
                        && sig_info(tid)
                            .is_some_and(|si| si.si_code == TRAP_TRACE || si.si_code == TRAP_BRKPT);
                    if !stepped {
                        deliver = sig as u64;
                    }
                }
                Stop::Interrupt | Stop::Syscall => {}
            }
        }
        // A signal met at the last step is sent again when the thread is
        // let go.
        if deliver != 0 {
            self.threads[i].signals.push(deliver as i32);
        }
        Ok(())
    }

    /// Puts every thread back as it was and lets the process go.
    fn release(&mut self) {
        if let Some(w) = self.worker.take() {
            let tid = self.threads[w.index].tid;
            if set_regs(tid, &w.saved).is_err() {
                eprintln!("fctrace: cannot restore the registers of thread {tid}");
            }
        }
        for t in &self.threads {
            if t.stopped {
                let _ = ptrace(libc::PTRACE_DETACH, t.tid, 0, 0);
            } else {
                // Running (PTRACE_SYSCALL): stop it to let it go.
                let _ = ptrace(libc::PTRACE_INTERRUPT, t.tid, 0, 0);
                let _ = wait_tid(t.tid, true);
                let _ = ptrace(libc::PTRACE_DETACH, t.tid, 0, 0);
            }
            for &sig in &t.signals {
                // SAFETY: tgkill(2) has no memory effects.
                unsafe { libc::syscall(libc::SYS_tgkill, self.pid, t.tid, sig) };
            }
        }
        self.threads.clear();
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        self.release();
    }
}

/// Says why a process cannot be traced through ptrace.
fn permission_error(pid: i32, e: std::io::Error) -> anyhow::Error {
    match e.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => anyhow!("no such process: {pid}"),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let owner = std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
            // SAFETY: as above.
            let me = unsafe { libc::geteuid() };
            if tracer_of(pid).is_some_and(|t| t != 0) {
                anyhow!(
                    "process {pid} is already traced by process {} (a debugger or another \
                     tracer): detach it first",
                    tracer_of(pid).unwrap_or(0)
                )
            } else if let Some(o) = owner.filter(|&o| o != me && !root) {
                // CAP_SYS_PTRACE passes ptrace's checks, not the file
                // permissions of /proc/PID/mem (mode 0600, the process's
                // user's), nor the process's own writing into fctrace's
                // trace directory.
                anyhow!(
                    "process {pid} belongs to another user (uid {o}): attach as that user \
                     (sudo -u '#{o}' fctrace -p {pid}) or as root; CAP_SYS_PTRACE alone is not \
                     enough (fctrace writes the process's memory through /proc/{pid}/mem, that \
                     user's file, and the process writes its part of the trace into fctrace's \
                     trace directory)"
                )
            } else if scope == Some(3) {
                anyhow!(
                    "attaching is disabled on this system (kernel.yama.ptrace_scope = 3, until \
                     reboot)"
                )
            } else if scope == Some(2) && !root {
                anyhow!(
                    "attaching needs root or CAP_SYS_PTRACE here (kernel.yama.ptrace_scope = 2)"
                )
            } else if scope == Some(1) && !root {
                anyhow!(
                    "permission denied: kernel.yama.ptrace_scope = 1 lets a process trace only \
                     its descendants; run fctrace as root, give it CAP_SYS_PTRACE, or allow it \
                     with `sysctl kernel.yama.ptrace_scope=0`"
                )
            } else {
                anyhow!("cannot attach to process {pid}: {e}")
            }
        }
        _ => anyhow!("cannot attach to process {pid}: {e}"),
    }
}

/// The tracer's pid from /proc/PID/status (0: none).
fn tracer_of(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One line of /proc/PID/maps.
struct Mapping {
    start: u64,
    end: u64,
    perms: String,
    offset: u64,
    path: String,
}

fn mappings(pid: i32) -> Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read the memory map of process {pid}"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, ' ');
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.next().unwrap_or("").trim_start().to_string();
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect())
}

/// The C library's load address and file in the process.
fn find_libc(pid: i32, maps: &[Mapping]) -> Result<(u64, String)> {
    let m = maps
        .iter()
        .find(|m| {
            m.offset == 0
                && std::path::Path::new(&m.path)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
        })
        .ok_or_else(|| {
            anyhow!(
                "process {pid} has no C library (glibc) loaded: a statically linked program \
                 cannot load fctrace's agent"
            )
        })?;
    Ok((m.start, m.path.clone()))
}

/// Checks that the process can be attached to at all, before stopping it.
pub fn preflight(pid: i32) -> Result<()> {
    let exe =
        std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| permission_error(pid, e))?;
    match run_state(pid).map_err(|e| permission_error(pid, e))? {
        'Z' | 'X' => bail!("process {pid} has ended (it is a zombie)"),
        'T' => bail!("process {pid} is stopped: continue it first (kill -CONT {pid})"),
        _ => {}
    }
    if let Some(t) = tracer_of(pid).filter(|&t| t != 0) {
        bail!(
            "process {pid} is already traced by process {t} (a debugger or another tracer): \
             detach it first"
        );
    }
    if pid as u32 == std::process::id() {
        bail!("fctrace cannot attach to itself");
    }
    // The program as the process sees it (its mount namespace).
    let file = format!("/proc/{pid}/exe");
    let info = fctrace_symbols::read_headers(std::path::Path::new(&file))
        .map_err(|e| anyhow!("{}: {e}", exe.display()))?;
    if !info.is_x86_64 {
        bail!(
            "{} (process {pid}) is ELF for {}: fctrace traces x86_64 programs only",
            exe.display(),
            info.machine
        );
    }
    if info.is_static {
        bail!(
            "{} (process {pid}) is statically linked: fctrace needs a dynamically linked \
             program (it loads its agent through the C library's dlopen)",
            exe.display()
        );
    }
    if info.is_musl() {
        bail!(
            "{} (process {pid}) is a musl program: fctrace's agent is built for glibc and \
             cannot be loaded into it; the process is left alone",
            exe.display()
        );
    }
    if mappings(pid)?
        .iter()
        .any(|m| m.path.starts_with("/memfd:fctrace-shm"))
    {
        bail!(
            "process {pid} is traced by fctrace already (another fctrace -p, or it was started \
             under fctrace)"
        );
    }
    Ok(())
}

/// A function's runtime address in a library mapped at `base`, from its
/// file as the process sees it.
fn symbol(pid: i32, path: &str, base: u64, names: &[&str]) -> Result<u64> {
    let file = format!("/proc/{pid}/root{path}");
    let info = fctrace_symbols::read_file(std::path::Path::new(&file))
        .map_err(|e| anyhow!("{path}: {e}"))?;
    for n in names {
        if let Some(f) = info.functions_named(n).next() {
            return Ok(base + f.addr);
        }
    }
    bail!("{path} has no {}: cannot load fctrace's agent", names[0])
}

/// A `syscall` instruction in the executable mappings of the C library.
fn syscall_gadget(t: &Tracee, maps: &[Mapping], libc_path: &str) -> Result<u64> {
    for m in maps
        .iter()
        .filter(|m| m.path == libc_path && m.perms.contains('x'))
    {
        let len = (m.end - m.start).min(4 << 20) as usize;
        let mut buf = vec![0u8; len];
        t.read(m.start, &mut buf)?;
        if let Some(i) = buf.windows(2).position(|w| w == [0x0f, 0x05]) {
            return Ok(m.start + i as u64);
        }
    }
    bail!("no system call instruction found in {libc_path}")
}

/// Where the agent is mapped in the process (its memfd's name), if loaded.
fn agent_base(maps: &[Mapping]) -> Option<u64> {
    maps.iter()
        .find(|m| m.offset == 0 && m.path.starts_with("/memfd:fctrace-agent"))
        .map(|m| m.start)
}

/// The offset of the agent's entry point `name` in its file (the file
/// is read once).
fn agent_entry(agent: &[u8], name: &str) -> Result<u64> {
    static ENTRIES: std::sync::OnceLock<Vec<(String, u64)>> = std::sync::OnceLock::new();
    let entries = ENTRIES.get_or_init(|| {
        fctrace_symbols::analyze(agent)
            .map(|i| {
                i.functions
                    .iter()
                    .filter(|f| f.name.starts_with("fctrace_agent_"))
                    .map(|f| (f.name.clone(), f.addr))
                    .collect()
            })
            .unwrap_or_default()
    });
    entries
        .iter()
        .find(|(n, _)| n == name)
        .map(|e| e.1)
        .ok_or_else(|| anyhow!("this fctrace's agent has no {name}"))
}

/// Scratch memory the worker maps for fctrace's work: the agent's path,
/// its configuration, the stopped threads' instruction pointers, a buffer
/// for its error.
const SCRATCH_LEN: u64 = 1 << 20;
/// The stack the worker's calls (`dlopen`, the agent's entries) run on.
const CALL_STACK_LEN: u64 = 8 << 20;

/// An attach in progress: every thread of the process stopped, one of them
/// (at a quiet system call) ready to work for fctrace. Dropped without
/// `finish`, it lets the process go as it was.
pub struct Attaching {
    t: Tracee,
    gadget: u64,
    scratch: u64,
    dlopen: u64,
    dlerror: Option<u64>,
    /// The shared memory's descriptor in the process, once made.
    shared_fd: Option<u64>,
    /// Blocks Ctrl-C until the process is let go.
    _hold: HoldInterrupts,
}

/// Stops process `pid` for attaching (it passed `preflight`).
pub fn begin(pid: i32) -> Result<Attaching> {
    let maps = mappings(pid)?;
    let (libc_base, libc_path) = find_libc(pid, &maps)?;
    let dlopen = symbol(
        pid,
        &libc_path,
        libc_base,
        &["dlopen", "__libc_dlopen_mode"],
    )?;
    let dlerror = symbol(pid, &libc_path, libc_base, &["dlerror"]).ok();
    // No Ctrl-C between the first stop and the last restored register:
    // the process would be left in the middle of fctrace's work.
    let hold = HoldInterrupts::new();
    let mut t = Tracee::seize(pid)?;
    let gadget = syscall_gadget(&t, &maps, &libc_path)?;
    t.pick_worker(true)?;
    let scratch = t.scratch(gadget, SCRATCH_LEN)?;
    if let Err(e) = t.map_call_stack(gadget) {
        let _ = t.syscall(gadget, libc::SYS_munmap, &[scratch, SCRATCH_LEN]);
        return Err(e);
    }
    Ok(Attaching {
        t,
        gadget,
        scratch,
        dlopen,
        dlerror,
        shared_fd: None,
        _hold: hold,
    })
}

impl Attaching {
    /// A memory file made by the process itself, for the shared memory:
    /// fctrace's descriptor of it, and its path as the process sees it
    /// (`/proc/self/fd/N`: a path of fctrace's could be out of its reach,
    /// in another PID or mount namespace). Closed in the process once the
    /// agent has mapped it.
    pub fn shared_file(&mut self) -> Result<(std::os::fd::OwnedFd, String)> {
        let pid = self.t.pid;
        self.t.write(self.scratch, b"fctrace-shm\0")?;
        let fd = self.t.syscall(
            self.gadget,
            libc::SYS_memfd_create,
            &[self.scratch, libc::MFD_CLOEXEC as u64],
        )?;
        if fd < 0 {
            bail!(
                "the process could not create a memory file for fctrace: {}",
                std::io::Error::from_raw_os_error(-fd as i32)
            );
        }
        self.shared_fd = Some(fd as u64);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))
            .with_context(|| format!("cannot open process {pid}'s memory file"))?;
        Ok((file.into(), format!("/proc/self/fd/{fd}")))
    }

    /// Loads the agent (unless an earlier attach did) and starts it with
    /// `cfg`; the process runs on, traced. Returns its number of threads.
    pub fn finish(mut self, agent: &[u8], cfg: &AttachConfig) -> Result<usize> {
        let entry_offset = agent_entry(agent, "fctrace_agent_attach")?;
        let config = config_bytes(cfg);
        if config.len() as u64 + 8192 > SCRATCH_LEN {
            bail!("the options are too long to hand to the agent");
        }
        let (gadget, scratch) = (self.gadget, self.scratch);
        let (dlopen, dlerror) = (self.dlopen, self.dlerror);
        load_and_start(
            &mut self.t,
            gadget,
            scratch,
            dlopen,
            dlerror,
            entry_offset,
            &config,
            agent,
        )?;
        Ok(self.t.threads.len())
    }
}

impl Drop for Attaching {
    fn drop(&mut self) {
        if let Some(fd) = self.shared_fd.take() {
            let _ = self.t.syscall(self.gadget, libc::SYS_close, &[fd]);
        }
        let _ = self
            .t
            .syscall(self.gadget, libc::SYS_munmap, &[self.scratch, SCRATCH_LEN]);
        self.t.unmap_call_stack(self.gadget);
        self.t.release();
    }
}

#[allow(clippy::too_many_arguments)]
fn load_and_start(
    t: &mut Tracee,
    gadget: u64,
    scratch: u64,
    dlopen: u64,
    dlerror: Option<u64>,
    entry_offset: u64,
    config: &[u8],
    agent: &[u8],
) -> Result<()> {
    let pid = t.pid;
    // Loaded by an earlier fctrace -p (and detached since): the same
    // copy serves again.
    let base = match agent_base(&mappings(pid)?) {
        Some(base) if same_agent(t, base, agent)? => base,
        Some(_) => bail!(
            "process {pid} holds the agent of another fctrace version (an earlier \
             fctrace -p): this one cannot use it"
        ),
        None => load_agent(t, gadget, scratch, dlopen, dlerror, agent)?,
    };
    start_agent(t, gadget, scratch, base + entry_offset, config)
}

/// Whether the agent loaded at `base` is this fctrace's (its first
/// segment, with its symbol tables, is the same).
fn same_agent(t: &Tracee, base: u64, agent: &[u8]) -> Result<bool> {
    let maps = mappings(t.pid)?;
    let Some(first) = maps.iter().find(|m| m.start == base) else {
        return Ok(false);
    };
    let len = ((first.end - first.start) as usize).min(agent.len());
    let mut loaded = vec![0u8; len];
    t.read(base, &mut loaded)?;
    Ok(loaded == agent[..len])
}

/// Loads the agent's bytes with the process's `dlopen`; where it is.
fn load_agent(
    t: &mut Tracee,
    gadget: u64,
    scratch: u64,
    dlopen: u64,
    dlerror: Option<u64>,
    agent: &[u8],
) -> Result<u64> {
    let pid = t.pid;
    // The agent's bytes, in a memfd of the process's own (a file of
    // fctrace's could be out of its reach: another user, another mount
    // namespace); closed once loaded.
    t.write(scratch, b"fctrace-agent\0")?;
    let fd = t.syscall(
        gadget,
        libc::SYS_memfd_create,
        &[scratch, libc::MFD_CLOEXEC as u64],
    )?;
    if fd < 0 {
        bail!(
            "the process could not create a memory file for the agent: {}",
            std::io::Error::from_raw_os_error(-fd as i32)
        );
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, agent));
    let path = format!("/proc/self/fd/{fd}\0");
    t.write(scratch, path.as_bytes())?;
    let loaded = match written {
        Err(e) => Err(anyhow!(
            "cannot write the agent into the process's memory file: {e}"
        )),
        Ok(()) => {
            // dlopen with the other threads running: a lock one of them
            // holds (malloc's, the loader's) is released as usual.
            t.resume_others();
            let handle = t.call(dlopen, &[scratch, libc::RTLD_NOW as u64]);
            t.stop_all().and(handle)
        }
    };
    let _ = t.syscall(gadget, libc::SYS_close, &[fd as u64]);
    if loaded? == 0 {
        let why = match dlerror {
            Some(f) => match t.call(f, &[])? {
                0 => String::new(),
                p => {
                    let mut buf = vec![0u8; 512];
                    t.read(p, &mut buf)?;
                    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    format!(": {}", String::from_utf8_lossy(&buf[..n]))
                }
            },
            None => String::new(),
        };
        bail!("the process could not load fctrace's agent{why}");
    }
    agent_base(&mappings(pid)?)
        .ok_or_else(|| anyhow!("the agent is not mapped in process {pid} after loading it"))
}

/// Calls the agent's attach entry (`entry`) with `config` and the list of
/// the stopped threads: where each is, and its frames
/// (`super::stacks`), which the agent takes as the calls in progress.
fn start_agent(t: &mut Tracee, gadget: u64, scratch: u64, entry: u64, config: &[u8]) -> Result<()> {
    let pid = t.pid;
    let worker = t.worker.as_ref().map(|w| w.index);
    // Every other thread is stopped: where, and in which calls? The
    // worker as the program left it, last.
    let mut regs = Vec::new();
    for (i, th) in t.threads.iter().enumerate() {
        if Some(i) != worker {
            regs.push((th.tid, get_regs(th.tid)?));
        }
    }
    if let Some(w) = &t.worker {
        regs.push((t.threads[w.index].tid, w.saved));
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read the memory map of process {pid}"))?;
    let mut words: Vec<u64> = Vec::new();
    {
        let mem = &t.mem;
        let mut word = |a: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            mem.read_exact_at(&mut b, a).ok()?;
            Some(u64::from_le_bytes(b))
        };
        let mut bytes = |a: u64, n: usize| -> Option<Vec<u8>> {
            let mut b = vec![0u8; n];
            mem.read_exact_at(&mut b, a).ok()?;
            Some(b)
        };
        let mut stacks = super::stacks::Stacks::new(pid, &maps, &mut word, &mut bytes);
        for (tid, r) in &regs {
            let frames = stacks.walk(r);
            words.extend([
                own_tid(pid, *tid) as u64,
                r.fs_base,
                r.rip,
                frames.len() as u64,
            ]);
            words.extend(frames.iter().flatten());
        }
    }
    let err_at = scratch + 4096;
    let err_len = 4096u64;
    let cfg_at = scratch + 8192;
    t.write(cfg_at, config)?;
    t.write(err_at, &[0])?;
    // The list in memory of its own, as long as it is.
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let len = (bytes.len() as u64).next_multiple_of(4096).max(4096);
    let list = t.scratch(gadget, len)?;
    let r = t
        .write(list, &bytes)
        .and_then(|()| t.call(entry, &[cfg_at, list, words.len() as u64, err_at, err_len]));
    let _ = t.syscall(gadget, libc::SYS_munmap, &[list, len]);
    let r = r?;
    if r as i32 != 0 {
        let mut buf = vec![0u8; err_len as usize];
        t.read(err_at, &mut buf)?;
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        bail!(
            "the agent could not start in process {pid}: {}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    Ok(())
}

/// `NAME=value` strings, each NUL-terminated, and an empty one.
fn config_bytes(cfg: &AttachConfig) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in &cfg.vars {
        v.extend_from_slice(k.as_bytes());
        v.push(b'=');
        v.extend_from_slice(val.as_bytes());
        v.push(0);
    }
    v.push(0);
    v
}

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT for its lifetime (they are
/// taken when it ends).
struct HoldInterrupts(libc::sigset_t);

impl HoldInterrupts {
    fn new() -> HoldInterrupts {
        // SAFETY: sigset operations on local values; pthread_sigmask with
        // valid pointers.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            HoldInterrupts(old)
        }
    }
}

impl Drop for HoldInterrupts {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// Process `pid`'s state letter (`R`, `S`, `T`, `Z`, ...: /proc/PID/stat).
fn run_state(pid: i32) -> std::io::Result<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // After the command name, which may hold spaces and parentheses.
    Ok(stat
        .rsplit_once(") ")
        .and_then(|(_, r)| r.chars().next())
        .unwrap_or('?'))
}

/// Whether process `pid` still runs (a zombie has ended).
pub fn alive(pid: i32) -> bool {
    run_state(pid).is_ok_and(|c| c != 'Z' && c != 'X')
}

/// How long fctrace tries to find every thread of the process outside the
/// agent's code when detaching.
const DETACH_WAIT: Duration = Duration::from_secs(10);

/// Detaches from process `pid`: every thread stopped outside the agent's
/// code and its generated code (else let go for a moment, `between` run,
/// and tried again), one of them calls the agent's detach entry, which
/// puts the program's code, return addresses and signal actions back and
/// hands the last events over. The agent's library stays loaded (unused;
/// a later attach takes it up again).
pub fn detach(pid: i32, agent: &[u8], between: &mut dyn FnMut()) -> Result<()> {
    let entry_offset = agent_entry(agent, "fctrace_agent_detach")?;
    let deadline = Instant::now() + DETACH_WAIT;
    loop {
        let maps = mappings(pid)?;
        let base = agent_base(&maps)
            .ok_or_else(|| anyhow!("fctrace's agent is not loaded in process {pid}"))?;
        let (_, libc_path) = find_libc(pid, &maps)?;
        let r = {
            let _hold = HoldInterrupts::new();
            let mut t = Tracee::seize(pid)?;
            let gadget = syscall_gadget(&t, &maps, &libc_path)?;
            t.pick_worker(false)?;
            // A thread inside the agent's code is moved on a few
            // instructions at a time (it leaves a stub in some dozens),
            // a few hundred times; then every thread runs for a moment.
            let mut r = t.map_call_stack(gadget).map(|()| Err(None));
            for _ in 0..if r.is_ok() { 400 } else { 0 } {
                r = call_detach(&mut t, gadget, base + entry_offset);
                match r {
                    Ok(Err(Some(Inside::Thread(i))))
                        if Some(i) != t.worker.as_ref().map(|w| w.index) =>
                    {
                        t.step(i, 64)?;
                    }
                    _ => break,
                }
            }
            t.unmap_call_stack(gadget);
            t.release();
            r?.map_err(|e| match e {
                Some(Inside::Why(w)) => Some(w),
                _ => None,
            })
        };
        match r {
            Ok(()) => return Ok(()),
            Err(None) if Instant::now() < deadline => {
                between();
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(None) => bail!(
                "could not detach from process {pid}: a thread stayed inside fctrace's code for \
                 {} s",
                DETACH_WAIT.as_secs()
            ),
            Err(Some(e)) => bail!("detaching from process {pid}: {e}"),
        }
    }
}

/// Thread `tid`'s id in its own PID namespace (what it calls its tid):
/// the last of the `NSpid:` numbers of its status.
pub fn own_tid(pid: i32, tid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|v| v.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(tid)
}

/// Why a try to detach did not.
enum Inside {
    /// Thread i (of `Tracee::threads`) runs the agent's code.
    Thread(usize),
    /// The agent could not undo everything.
    Why(String),
}

/// One try: Ok(Ok) detached, Ok(Err(None)) the worker is inside the
/// agent.
fn call_detach(
    t: &mut Tracee,
    gadget: u64,
    entry: u64,
) -> Result<std::result::Result<(), Option<Inside>>> {
    let worker = t.worker.as_ref().map(|w| w.index);
    let mut words = Vec::new();
    for (i, th) in t.threads.iter().enumerate() {
        let r = match (Some(i) == worker, &t.worker) {
            (true, Some(w)) => w.saved,
            _ => get_regs(th.tid)?,
        };
        let tid = own_tid(t.pid, th.tid);
        words.extend_from_slice(&[tid as u64, r.rip, r.fs_base]);
    }
    let len = (4096 + words.len() * 8).next_multiple_of(4096) as u64;
    let scratch = t.scratch(gadget, len)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let err_at = scratch;
    let arr = scratch + 4096;
    let result = (|| -> Result<_> {
        t.write(err_at, &[0])?;
        t.write(arr, &bytes)?;
        let r = t.call(entry, &[arr, t.threads.len() as u64, err_at, 4096])? as i32;
        Ok(match r {
            0 => Ok(()),
            1 => Err(None),
            i if i >= 2 => Err(Some(Inside::Thread(i as usize - 2))),
            _ => {
                let mut buf = vec![0u8; 4096];
                t.read(err_at, &mut buf)?;
                let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                Err(Some(Inside::Why(
                    String::from_utf8_lossy(&buf[..n]).into_owned(),
                )))
            }
        })
    })();
    let _ = t.syscall(gadget, libc::SYS_munmap, &[scratch, len]);
    result
}
