//! `record -k`: the traced tasks' system calls, from the kernel's
//! `raw_syscalls:sys_enter` and `sys_exit` tracepoints through
//! `perf_event_open`.
//!
//! One event per tracepoint and CPU is opened on fctrace's own thread
//! before it starts the program, disabled, inherited by the processes and
//! threads it creates and enabled when they execute a program
//! (`enable_on_exec`): the program is recorded from its first system call
//! after `execve`, and so are every thread and child it creates; fctrace
//! itself is not (its own events stay disabled). Timestamps are
//! CLOCK_MONOTONIC (`use_clockid`), the user events' timeline. Each CPU's
//! samples go into one ring buffer, which the recorder drains as it drains
//! the shared memory; the samples of each thread are put in time order
//! (a thread moves between CPUs) and written with its task's events
//! (`fctrace_format::store::kernel`). Samples the kernel could not write
//! (a full ring) are counted and reported, apart from the user events.
//!
//! What the kernel does not allow is said precisely: no tracefs (where the
//! tracepoints' ids are), `perf_event_paranoid` or missing capabilities.

use crate::perf::{
    open_plain_tracepoint, perf_open, permission_message, tracepoint_id, PerfEventAttr,
    FLAG_CONTEXT_SWITCH, FLAG_DISABLED, FLAG_ENABLE_ON_EXEC, FLAG_INHERIT, FLAG_SAMPLE_ID_ALL,
    FLAG_USE_CLOCKID, PERF_COUNT_SW_BPF_OUTPUT, PERF_EVENT_IOC_ID, PERF_EVENT_IOC_SET_OUTPUT,
    PERF_RECORD_LOST, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_SAMPLE, PERF_RECORD_SWITCH, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, TRACEFS,
};
use anyhow::{bail, Result};
use fctrace_format::store::kernel::{KernelEvent, MAX_PATH};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Data pages of each CPU's ring buffer, tried in turn (8 MiB down to
/// 128 KiB: perf limits the memory an ordinary user may lock).
const RING_PAGES: [usize; 4] = [2048, 512, 128, 32];
/// Samples are written in time order once this much older than the drain
/// that read them (a sample being written on another CPU meanwhile is
/// older than the drain that follows).
const SETTLE_NS: u64 = 20_000_000;

/// With `-K`, how far before the latest line read of the tracer's text
/// the kernel's events are written (its per-CPU buffers are merged as
/// they are read: a line can come a little after later ones).
const FTRACE_MARGIN_NS: u64 = 2_000_000;

/// Samples of threads without a task kept for a later round, at most.
const MAX_KEPT: usize = 1 << 20;

/// `-K`: why kernel functions are not recorded, said as a warning.
fn kernel_functions_note(why: &str) -> String {
    format!("-K: kernel functions are not recorded: {why}; system calls are recorded as with -k")
}

/// `-F FUNC@kernel` and `-N FUNC@kernel` at record time: kernel functions
/// recorded only under the first ones, and not under the second; the same
/// with `NAME@[syscall]`, under system call NAME's entry (the
/// function_graph parser applies them: 6.12's instances have no
/// `set_graph_function`).
#[derive(Clone, Default)]
pub struct KernelFilters {
    pub only: Vec<fctrace_options::pattern::FuncPattern>,
    pub hide: Vec<fctrace_options::pattern::FuncPattern>,
}

impl KernelFilters {
    /// The options without their `@kernel` and `@[syscall]` patterns, and
    /// those.
    pub fn split(options: &fctrace_options::Options) -> (fctrace_options::Options, KernelFilters) {
        let mut rest = options.clone();
        // (`NAME@[syscall]`: the kernel functions under those system calls.)
        let kernel = |p: &fctrace_options::pattern::FuncPattern| {
            matches!(
                p.module(),
                Some("kernel") | Some(super::kgraph::SYSCALL_MODULE)
            )
        };
        let filters = KernelFilters {
            only: rest.filters.iter().filter(|p| kernel(p)).cloned().collect(),
            hide: rest.notrace.iter().filter(|p| kernel(p)).cloned().collect(),
        };
        rest.filters.retain(|p| !kernel(p));
        rest.notrace.retain(|p| !kernel(p));
        (rest, filters)
    }

    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.hide.is_empty()
    }

    /// The patterns as written, for messages.
    pub fn patterns(&self) -> String {
        let all: Vec<&str> = self
            .only
            .iter()
            .chain(&self.hide)
            .map(|p| p.as_str())
            .collect();
        all.join(", ")
    }
}

/// One CPU's ring buffer: the event that owns it, its CPU, its mapping.
struct Ring {
    fd: i32,
    cpu: i32,
    base: *mut u8,
    len: usize,
    page: usize,
}

/// A sampling event of `kind` and `config` (every occurrence, with its
/// identifier, thread, CLOCK_MONOTONIC time and raw record).
fn sampled(kind: u32, config: u64, flags: u64) -> PerfEventAttr {
    PerfEventAttr {
        kind,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        sample_period: 1,
        sample_type: PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
        flags: flags | FLAG_USE_CLOCKID,
        clockid: crate::clock::kernel_id(),
        ..Default::default()
    }
}

/// The flags of a tracepoint event on the threads followed: inherited by
/// those they create, and with `on_exec` enabled only when the launched
/// program executes.
fn followed(on_exec: bool) -> u64 {
    FLAG_INHERIT
        | FLAG_SAMPLE_ID_ALL
        | if on_exec {
            FLAG_DISABLED | FLAG_ENABLE_ON_EXEC
        } else {
            0
        }
}

/// Event `fd`'s identifier (what its samples carry); with `ring`, its
/// samples go into that event's ring buffer.
fn event_id(fd: i32, ring: Option<i32>) -> Result<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes the event's id into `id`;
    // SET_OUTPUT points its samples at another event's ring (same CPU).
    unsafe {
        libc::ioctl(fd, PERF_EVENT_IOC_ID as _, &mut id as *mut u64);
        if let Some(r) = ring {
            if libc::ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT as _, r) != 0 {
                bail!(
                    "-k: cannot share the kernel's ring buffer: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    Ok(id)
}

/// The kernel events being recorded.
pub struct Kernel {
    fds: Vec<i32>,
    rings: Vec<Ring>,
    enter_ids: Vec<u64>,
    exit_ids: Vec<u64>,
    /// Samples read, not yet written: (tid, event).
    pending: Vec<(u32, KernelEvent)>,
    /// Samples in order, of threads no task had yet.
    kept: Vec<(u32, KernelEvent)>,
    /// Threads inside the agent's set-up, and those whose next `close`
    /// return is a mark's.
    in_agent: std::collections::HashSet<u32>,
    mark_exit: std::collections::HashSet<u32>,
    /// Per thread inside a call the agent tagged: its number.
    tagged_exit: HashMap<u32, u16>,
    /// Samples the kernel could not write.
    pub lost: u64,
    /// Kernel functions' events the tracer lost.
    pub lost_functions: u64,
    /// Samples of threads no task of the trace had (written nowhere).
    pub untasked: u64,
    /// Kernel function entries and system call entries written.
    func_events: u64,
    call_events: u64,
    /// The function tracer could not be set up (said).
    funcs_refused: bool,
    fault_ids: Vec<u64>,
    signal_ids: Vec<u64>,
    /// `-K`: the interrupt tracepoints' events (id, class, whether the
    /// entry's), and per thread the interrupts entered and not left yet.
    irq_ids: Vec<(u64, u16, bool)>,
    irq_open: HashMap<u32, Vec<(u16, u32, u64)>>,
    /// `-K`: kernel functions (ftrace's function_graph tracer), and
    /// their trees tied to the system calls they ran in.
    funcs: Option<super::kgraph::FuncGraph>,
    ties: super::ktie::Ties,
    /// Per process, where fctrace's agent is mapped.
    agent_ranges: HashMap<u32, Vec<(u64, u64)>>,
    /// The BPF output events' ids, and the programs.
    string_ids: Vec<u64>,
    strings: Option<super::bpf::Strings>,
    /// Per process, where fctrace's shared memory is mapped.
    shm_ranges: HashMap<u32, Vec<(u64, u64)>>,
    /// What is not recorded, said once.
    pub notes: Vec<String>,
    /// The dynamic loader's loading of the agent in new programs.
    agent_load: Option<super::kload::AgentLoad>,
}

impl Kernel {
    /// Opens the events on the calling thread, disabled until a process it
    /// starts executes a program. Call just before starting it.
    /// With `interrupts` (`-K`), the interrupts that run while a thread
    /// is on its CPU too.
    pub fn open_for_launch(interrupts: bool) -> Result<Kernel> {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        let mut k = Kernel::open(&[0], true, me)?;
        if interrupts {
            k.open_interrupts(&[0], true);
        }
        Ok(k)
    }

    /// Opens the events on the threads `tids` of a running process (and
    /// those they create from now on), enabled at once (`fctrace -p`,
    /// once the agent runs; closed before detaching).
    pub fn open_for_threads(pid: u32, tids: &[i32], interrupts: bool) -> Result<Kernel> {
        // threads x CPUs x 4 descriptors (system call entry and exit, page faults, signals): as many as the hard limit allows.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
        let mut k = Kernel::open(tids, false, pid)?;
        if interrupts {
            k.open_interrupts(tids, false);
        }
        Ok(k)
    }

    /// `-K`: the interrupts that run on a thread's CPU while it is there
    /// (each class's entry and exit tracepoints, [`INTERRUPT_POINTS`]),
    /// into each CPU's ring. What cannot be opened is said and left out;
    /// the rest is recorded as before.
    fn open_interrupts(&mut self, targets: &[i32], on_exec: bool) {
        let mut points = Vec::new();
        for (class, (group, entry, exit)) in INTERRUPT_POINTS.iter().enumerate() {
            if let (Ok(a), Ok(b)) = (tracepoint_id(group, entry), tracepoint_id(group, exit)) {
                points.push((a, class as u16, true));
                points.push((b, class as u16, false));
            }
        }
        if points.is_empty() {
            self.notes.push(
                "-K: this kernel has none of the interrupt tracepoints (irq, irq_vectors): \
                 interrupts inside system calls are not marked"
                    .to_string(),
            );
            return;
        }
        let rings: Vec<(i32, i32)> = self.rings.iter().map(|r| (r.cpu, r.fd)).collect();
        let mut opened = Vec::new();
        for &(cpu, ring) in &rings {
            for &(tp, class, entry) in &points {
                for &pid in targets {
                    let attr = sampled(PERF_TYPE_TRACEPOINT, tp, followed(on_exec));
                    let fd = match perf_open(&attr, pid, cpu, -1) {
                        Ok(fd) => fd,
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) && !on_exec => continue,
                        Err(e) => {
                            for fd in opened {
                                // SAFETY: descriptors opened above, used nowhere else.
                                unsafe { libc::close(fd) };
                            }
                            self.notes.push(format!(
                                "-K: interrupts inside system calls are not marked: {}",
                                permission_message(&e)
                            ));
                            self.irq_ids.clear();
                            return;
                        }
                    };
                    opened.push(fd);
                    match event_id(fd, Some(ring)) {
                        Ok(id) => self.irq_ids.push((id, class, entry)),
                        Err(e) => {
                            for fd in opened {
                                // SAFETY: as above.
                                unsafe { libc::close(fd) };
                            }
                            self.notes.push(format!(
                                "-K: interrupts inside system calls are not marked: {e:#}"
                            ));
                            self.irq_ids.clear();
                            return;
                        }
                    }
                }
            }
        }
        self.fds.extend(opened);
    }

    /// An interrupt tracepoint's sample (`id` one of [`Kernel::irq_ids`])
    /// of thread `tid` at `ns`, `num` its first field: an entry is kept
    /// open, the exit of the one open last makes the event.
    fn interrupt(&mut self, tid: u32, ns: u64, class: u16, entry: bool, num: u32) {
        let open = self.irq_open.entry(tid).or_default();
        if entry {
            // (A thread's interrupts nest at most a few deep.)
            if open.len() < 8 {
                open.push((class, num, ns));
            }
            return;
        }
        // The exit of the last one of its class (one whose exit was lost
        // is dropped with it).
        let Some(at) = open.iter().rposition(|o| o.0 == class) else {
            return;
        };
        let (class, num, start) = open[at];
        open.truncate(at);
        self.pending.push((
            tid,
            KernelEvent::Interrupt {
                ns: start,
                dur: ns.saturating_sub(start),
                class,
                num,
            },
        ));
    }

    /// Leaves out the dynamic loader's loading of the agent (preloaded
    /// from `path`; `agent`: its bytes) in each new program (`sessions`:
    /// the trace's sessions directory).
    pub fn leave_out_agent_loading(&mut self, path: &str, agent: &[u8], sessions: &Path) {
        self.agent_load = Some(super::kload::AgentLoad::new(path, agent, sessions));
    }

    /// `follow`: the process whose system calls' paths the BPF program
    /// copies (launching: fctrace itself, for its children only).
    fn open(targets: &[i32], on_exec: bool, follow: u32) -> Result<Kernel> {
        let enter = tracepoint_id("raw_syscalls", "sys_enter")?;
        let exit = tracepoint_id("raw_syscalls", "sys_exit")?;
        // Page faults where the kernel has the tracepoint (x86).
        let fault = tracepoint_id("exceptions", "page_fault_user");
        let mut notes = Vec::new();
        if let Err(e) = &fault {
            notes.push(format!("{e:#}: page faults are not recorded"));
        }
        // Signals as the kernel delivers them.
        let signal = tracepoint_id("signal", "signal_deliver");
        if let Err(e) = &signal {
            notes.push(format!(
                "{e:#}: signals are not recorded from the kernel's side"
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let mut k = Kernel {
            fds: Vec::new(),
            rings: Vec::new(),
            enter_ids: Vec::new(),
            exit_ids: Vec::new(),
            pending: Vec::new(),
            kept: Vec::new(),
            in_agent: Default::default(),
            mark_exit: Default::default(),
            tagged_exit: Default::default(),
            lost: 0,
            lost_functions: 0,
            untasked: 0,
            func_events: 0,
            call_events: 0,
            funcs_refused: false,
            fault_ids: Vec::new(),
            signal_ids: Vec::new(),
            irq_ids: Vec::new(),
            irq_open: HashMap::new(),
            funcs: None,
            ties: Default::default(),
            agent_ranges: HashMap::new(),
            string_ids: Vec::new(),
            strings: None,
            agent_load: None,
            shm_ranges: HashMap::new(),
            notes,
        };
        let mut tps = vec![(enter, 0), (exit, 1)];
        if let Ok(f) = fault {
            tps.push((f, 2));
        }
        if let Ok(s) = signal {
            tps.push((s, 3));
        }
        for cpu in 0..ncpu {
            let mut ring_fd = -1;
            for (&(tp, ids), &pid) in tps.iter().flat_map(|t| targets.iter().map(move |p| (t, p))) {
                // The entry's event also reports the thread's switches off
                // and back on a CPU (with its id and time).
                let attr = sampled(
                    PERF_TYPE_TRACEPOINT,
                    tp,
                    followed(on_exec) | if ids == 0 { FLAG_CONTEXT_SWITCH } else { 0 },
                );
                let fd = match perf_open(&attr, pid, cpu, -1) {
                    Ok(fd) => fd,
                    // A CPU that is offline: nothing runs there.
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) && cpu > 0 => continue,
                    // A thread that has ended meanwhile.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && !on_exec => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) => bail!(
                        "-k: not enough file descriptors for {} threads' events ({e}): raise \
                         the limit (ulimit -n)",
                        targets.len()
                    ),
                    Err(e) => bail!("{}", permission_message(&e)),
                };
                k.fds.push(fd);
                let id = event_id(fd, (ring_fd >= 0).then_some(ring_fd))?;
                match ids {
                    0 => k.enter_ids.push(id),
                    1 => k.exit_ids.push(id),
                    2 => k.fault_ids.push(id),
                    _ => k.signal_ids.push(id),
                }
                if ring_fd < 0 {
                    let mut mapped = None;
                    let mut err = None;
                    for pages in RING_PAGES {
                        let len = page * (pages + 1);
                        // SAFETY: maps the event's ring buffer (its header
                        // page and data pages), shared with the kernel;
                        // checked.
                        let base = unsafe {
                            libc::mmap(
                                std::ptr::null_mut(),
                                len,
                                libc::PROT_READ | libc::PROT_WRITE,
                                libc::MAP_SHARED,
                                fd,
                                0,
                            )
                        };
                        if base != libc::MAP_FAILED {
                            mapped = Some((base, len));
                            break;
                        }
                        err = Some(std::io::Error::last_os_error());
                    }
                    let Some((base, len)) = mapped else {
                        bail!(
                            "-k: cannot map the kernel's ring buffer ({}): the locked memory \
                             allowed to perf (kernel.perf_event_mlock_kb) may be too small",
                            err.map(|e| e.to_string()).unwrap_or_default()
                        );
                    };
                    k.rings.push(Ring {
                        fd,
                        cpu,
                        base: base as *mut u8,
                        len,
                        page,
                    });
                    ring_fd = fd;
                }
            }
        }
        // The paths system calls are given, copied by a BPF program.
        if let Err(e) = k.load_strings(on_exec, follow) {
            k.notes
                .push(format!("-k: paths are shown as addresses: {e:#}"));
        }
        Ok(k)
    }

    /// Loads `super::bpf`'s programs: a BPF output event per CPU, its
    /// samples into the CPU's ring.
    fn load_strings(&mut self, children_only: bool, follow: u32) -> Result<()> {
        let fork = tracepoint_id("sched", "sched_process_fork")?;
        let root = TRACEFS
            .iter()
            .find(|r| std::path::Path::new(&format!("{r}/events")).exists())
            .copied()
            .unwrap_or(TRACEFS[0]);
        let mut outputs = Vec::new();
        let rings: Vec<(i32, i32)> = self.rings.iter().map(|r| (r.fd, r.cpu)).collect();
        for (ring_fd, cpu) in rings {
            let attr = sampled(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_BPF_OUTPUT, 0);
            let fd = perf_open(&attr, -1, cpu, -1)
                .map_err(|e| anyhow::anyhow!("a BPF output event: {e}"))?;
            self.fds.push(fd);
            self.string_ids.push(event_id(fd, Some(ring_fd))?);
            outputs.push((cpu as u32, fd));
        }
        let strings = super::bpf::Strings::load(&outputs, root, fork)?;
        // A tracepoint's programs run wherever it fires: attached once, to
        // events of fctrace's own thread that nothing inherits (an
        // inherited copy takes the program away from the tracepoint when
        // its process ends).
        let enter = open_plain_tracepoint(tracepoint_id("raw_syscalls", "sys_enter")?)?;
        self.fds.push(enter);
        let exit = open_plain_tracepoint(tracepoint_id("raw_syscalls", "sys_exit")?)?;
        self.fds.push(exit);
        strings.attach(enter, exit)?;
        strings.follow(follow, children_only)?;
        self.strings = Some(strings);
        Ok(())
    }

    /// `-K DEPTH` before launching: sets up the kernel's function tracer
    /// (slow: seconds under emulation) and starts it on the calling thread,
    /// which the program started next inherits. What the kernel lacks or
    /// refuses is returned as a note.
    pub fn prepare_functions(&mut self, depth: u32, filters: &KernelFilters) -> Option<String> {
        self.funcs_refused = true;
        let mut g = match super::kgraph::FuncGraph::open(depth) {
            Ok(g) => g,
            Err(why) => return Some(kernel_functions_note(&why)),
        };
        g.filter(filters.only.clone(), filters.hide.clone());
        if let Err(why) = g.arm() {
            return Some(kernel_functions_note(&why));
        }
        self.funcs_refused = false;
        self.funcs = Some(g);
        None
    }

    /// `-K DEPTH`: records the kernel functions the threads `pids` run
    /// (and those they create from then on), `depth` levels deep (the
    /// tracer set up now, or by [`Kernel::prepare_functions`]). What the
    /// kernel lacks or refuses is returned as a note; the rest is recorded
    /// as before.
    pub fn trace_functions(
        &mut self,
        depth: u32,
        filters: &KernelFilters,
        pids: &[i32],
    ) -> Option<String> {
        let mut g = match self.funcs.take() {
            // (Said already.)
            None if self.funcs_refused => return None,
            Some(g) => g,
            None => match super::kgraph::FuncGraph::open(depth) {
                Ok(mut g) => {
                    g.filter(filters.only.clone(), filters.hide.clone());
                    g
                }
                Err(why) => return Some(kernel_functions_note(&why)),
            },
        };
        if let Err(why) = g.follow(pids) {
            return Some(kernel_functions_note(&why));
        }
        self.funcs = Some(g);
        None
    }

    /// `-K` and nothing recorded although system calls were: why, to be
    /// said (a silent failure otherwise).
    pub fn functions_missing(&self) -> Option<String> {
        let g = self.funcs.as_ref()?;
        if self.func_events > 0 || self.call_events == 0 {
            return None;
        }
        Some(format!(
            "-K: the kernel's {} tracer ({}) recorded no kernel function of the program, \
             although it made {} system calls",
            g.tracer(),
            if g.top_level() {
                "tracefs' top level"
            } else {
                "fctrace's tracefs instance"
            },
            self.call_events
        ))
    }

    /// Reads what the rings hold; writes the samples old enough to be in
    /// order through `write(tid, event)` (all of them when `last`).
    pub fn drain(&mut self, last: bool, write: &mut dyn FnMut(u32, &KernelEvent) -> bool) {
        let now = crate::clock::kernel_now_ns();
        let old = self.pending.len();
        // The tracer's text first, then the rings: a function's return
        // read from the text is followed within microseconds by its
        // system call's return in a ring, so that return is read too and
        // its tree tied inside it. (Read the other way round, a short
        // call's return could be missed by the rings and its functions,
        // a microsecond late, sorted after it: seen once on 6.1 in ld.so's
        // first read, and under later calls on 6.12.)
        let mut funcs = Vec::new();
        if let Some(g) = &mut self.funcs {
            g.read(&mut funcs);
        }
        for i in 0..self.rings.len() {
            self.read_ring(i);
        }
        if let Some(g) = &mut self.funcs {
            self.ties.note(&self.pending[old..]);
            self.ties.tie(&mut funcs);
            self.pending
                .extend(funcs.into_iter().map(|f| (f.tid, f.event)));
            self.lost_functions = g.lost();
        }
        let limit = if last {
            u64::MAX
        } else {
            // With -K, not past what the tracer's text was read up to
            // (less a margin: its CPUs' buffers are merged as read): a
            // system call written before its kernel functions are read
            // would leave them to sort under a later call (the recorder
            // fell behind the tracer by more than SETTLE_NS under
            // emulation).
            let read_to = self
                .funcs
                .as_ref()
                .map(|g| g.newest())
                .filter(|&n| n != 0)
                .map_or(u64::MAX, |n| n.saturating_sub(FTRACE_MARGIN_NS));
            now.saturating_sub(SETTLE_NS).min(read_to)
        };
        if self.kept.is_empty() && self.pending.iter().all(|(_, e)| e.ns() > limit) {
            return;
        }
        // Stable: a thread's samples of one CPU keep their order.
        self.pending.sort_by_key(|(_, e)| e.ns());
        let n = self.pending.partition_point(|(_, e)| e.ns() <= limit);
        // The agent's set-up in each new program, between its marks, is
        // not the program's (a thread's samples are in its time order
        // here).
        let mut ready = std::mem::take(&mut self.kept);
        for (tid, e) in self.pending.drain(..n) {
            use fctrace_format::shm::{KERNEL_MARK_BEGIN, KERNEL_MARK_END};
            const CLOSE: u16 = 3;
            const RT_SIGRETURN: u16 = 15;
            // A new program's events until the agent's first mark: the
            // loader's loading of the agent is not the program's.
            let mut e = e;
            if let Some(load) = &mut self.agent_load {
                if matches!(e, KernelEvent::Enter { nr: CLOSE, args, .. } if args[0] == KERNEL_MARK_BEGIN)
                {
                    load.agent_started(tid, &mut ready);
                }
                match load.hold(tid, e, &mut ready) {
                    Some(back) => e = back,
                    None => continue,
                }
            }
            match e {
                KernelEvent::Enter {
                    nr: CLOSE, args, ..
                } if args[0] == KERNEL_MARK_BEGIN || args[0] == KERNEL_MARK_END => {
                    if args[0] == KERNEL_MARK_BEGIN {
                        self.in_agent.insert(tid);
                    } else {
                        self.in_agent.remove(&tid);
                    }
                    self.mark_exit.insert(tid);
                }
                KernelEvent::Exit { nr: CLOSE, .. } if self.mark_exit.remove(&tid) => {}
                // A call the agent tagged (its slow path's rt_sigprocmask):
                // the call and its return. (An rt_sigreturn it tagged is
                // kept: readers drop it with the signal delivery whose
                // frame it ends, `store::kernel`.)
                KernelEvent::Enter { nr, args, .. }
                    if nr != RT_SIGRETURN && fctrace_format::shm::kernel_tagged(&args) =>
                {
                    self.tagged_exit.insert(tid, nr);
                }
                KernelEvent::Exit { nr, .. } if self.tagged_exit.get(&tid) == Some(&nr) => {
                    self.tagged_exit.remove(&tid);
                }
                // (Its kernel functions, -K.)
                _ if self.tagged_exit.contains_key(&tid) => {}
                _ if self.in_agent.contains(&tid) => {}
                // The kernel functions of a mark's own close.
                KernelEvent::FuncEntry { .. } | KernelEvent::FuncExit { .. }
                    if self.mark_exit.contains(&tid) => {}
                _ => {
                    if let (Some(load), KernelEvent::Exit { nr, ret: 0, .. }) =
                        (&mut self.agent_load, &e)
                    {
                        if *nr == EXECVE || *nr == EXECVEAT {
                            load.start(tid);
                        }
                    }
                    ready.push((tid, e))
                }
            }
        }
        if let (true, Some(load)) = (last, &mut self.agent_load) {
            load.flush(&mut ready);
        }
        // A thread no task has yet (before the agent registers it) keeps
        // its samples for a later round, until the last.
        let mut kept = Vec::new();
        let offset = crate::clock::kernel_offset();
        for (tid, e) in ready {
            let put = |e: &KernelEvent| {
                let mut e = e.clone();
                e.set_ns(e.ns() + offset);
                e
            };
            let written = if offset == 0 {
                write(tid, &e)
            } else {
                write(tid, &put(&e))
            };
            if written {
                match e {
                    KernelEvent::FuncEntry { .. } => self.func_events += 1,
                    KernelEvent::Enter { .. } => self.call_events += 1,
                    _ => {}
                }
                continue;
            }
            if last {
                // The end of a context switch into another thread is
                // traced as the switched-out thread's (ftrace's pid filter
                // changes at the switch): not a system call event lost.
                if !matches!(
                    e,
                    KernelEvent::FuncEntry { .. } | KernelEvent::FuncExit { .. }
                ) {
                    self.untasked += 1;
                }
            } else {
                kept.push((tid, e));
            }
        }
        // (Bounded: samples of threads that never get a task, an untraced
        // program's, are dropped beyond this and counted.)
        if kept.len() > MAX_KEPT {
            self.untasked += (kept.len() - MAX_KEPT) as u64;
            kept.truncate(MAX_KEPT);
        }
        self.kept = kept;
    }

    fn read_ring(&mut self, i: usize) {
        let r = &self.rings[i];
        // SAFETY: the ring's header page (struct perf_event_mmap_page):
        // data_head at 1024, data_tail at 1032, read and written as the
        // kernel's protocol says (acquire the head, release the tail).
        let (head_p, tail_p) = unsafe {
            (
                &*(r.base.add(1024) as *const AtomicU64),
                &*(r.base.add(1032) as *const AtomicU64),
            )
        };
        let head = head_p.load(Ordering::Acquire);
        let mut tail = tail_p.load(Ordering::Relaxed);
        let size = (r.len - r.page) as u64;
        // SAFETY: the data pages follow the header page.
        let data = unsafe { std::slice::from_raw_parts(r.base.add(r.page), size as usize) };
        let mut rec = Vec::with_capacity(128);
        while tail < head {
            let at = |off: u64| data[((tail + off) % size) as usize];
            let hdr: Vec<u8> = (0..8).map(at).collect();
            let kind = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
            let misc = u16::from_le_bytes([hdr[4], hdr[5]]);
            let len = u16::from_le_bytes([hdr[6], hdr[7]]) as u64;
            if len < 8 || tail + len > head {
                break;
            }
            rec.clear();
            rec.extend((8..len).map(at));
            self.record(kind, misc, &rec);
            tail += len;
        }
        tail_p.store(tail, Ordering::Release);
    }

    fn record(&mut self, kind: u32, misc: u16, b: &[u8]) {
        let u64_at = |o: usize| {
            b.get(o..o + 8)
                .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap()))
        };
        match kind {
            PERF_RECORD_LOST => self.lost += u64_at(8),
            PERF_RECORD_SWITCH if b.len() >= 24 => {
                // sample_id trailer: pid/tid, time, identifier.
                let t = b.len() - 24;
                let tid = (u64_at(t) >> 32) as u32;
                let ns = u64_at(t + 8);
                let e = if misc & PERF_RECORD_MISC_SWITCH_OUT != 0 {
                    KernelEvent::Out {
                        ns,
                        preempted: misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
                    }
                } else {
                    KernelEvent::In { ns }
                };
                self.pending.push((tid, e));
            }
            PERF_RECORD_SAMPLE => {
                // identifier, pid/tid, time, raw size, raw.
                let id = u64_at(0);
                let tid = (u64_at(8) >> 32) as u32;
                let ns = u64_at(16);
                let raw = &b[b.len().min(28)..];
                let field = |o: usize| {
                    raw.get(o..o + 8)
                        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap()))
                };
                if self.string_ids.contains(&id) {
                    // super::bpf's record: nr, copied length (with its
                    // NUL; <= 0: failed), bytes.
                    let nr = raw
                        .get(0..4)
                        .map_or(0, |w| u32::from_le_bytes(w.try_into().unwrap()));
                    let got = raw
                        .get(4..8)
                        .map_or(0, |w| i32::from_le_bytes(w.try_into().unwrap()));
                    let body = raw.get(8..).unwrap_or(&[]);
                    let len = (got.max(1) as usize - 1).min(body.len()).min(MAX_PATH);
                    if got > 0 && nr <= u16::MAX as u32 {
                        self.pending.push((
                            tid,
                            KernelEvent::Path {
                                ns,
                                nr: nr as u16,
                                bytes: body[..len].into(),
                            },
                        ));
                    }
                    return;
                }
                if let Some(&(_, class, entry)) = self.irq_ids.iter().find(|i| i.0 == id) {
                    let num = raw
                        .get(8..12)
                        .map_or(0, |w| u32::from_le_bytes(w.try_into().unwrap()));
                    self.interrupt(tid, ns, class, entry, num);
                    return;
                }
                if self.fault_ids.contains(&id) {
                    // A fault on fctrace's shared memory is the agent's
                    // writing of events, not the program's.
                    let pid = u64_at(8) as u32;
                    if self.in_shared_memory(pid, field(8)) {
                        return;
                    }
                    self.pending.push((
                        tid,
                        KernelEvent::Fault {
                            ns,
                            addr: field(8),
                            ip: field(16),
                        },
                    ));
                    return;
                }
                if self.signal_ids.contains(&id) {
                    // sig, errno, code (i32 at 8, 12, 16), sa_handler,
                    // sa_flags (at 24, 32).
                    let i32_at = |o: usize| field(o) as u32 as i32;
                    let (sig, errno, code) = (i32_at(8), i32_at(12), i32_at(16));
                    let (handler, flags) = (field(24), field(32));
                    let pid = u64_at(8) as u32;
                    if !(1..=u16::MAX as i32).contains(&sig)
                        || self.agents_signal(pid, sig, handler, flags)
                    {
                        return;
                    }
                    self.pending.push((
                        tid,
                        KernelEvent::Signal {
                            ns,
                            sig: sig as u16,
                            code,
                            errno,
                            handler,
                            flags,
                        },
                    ));
                    return;
                }
                let nr = field(8) as i64;
                if !(0..=u16::MAX as i64).contains(&nr) {
                    return;
                }
                let nr = nr as u16;
                let e = if self.enter_ids.contains(&id) {
                    let mut args = [0u64; 6];
                    for (k, a) in args.iter_mut().enumerate() {
                        *a = field(16 + 8 * k);
                    }
                    KernelEvent::Enter { nr, ns, args }
                } else if self.exit_ids.contains(&id) {
                    // A new program: what it needs, while it is there.
                    if let (Some(load), EXECVE | EXECVEAT, 0) =
                        (&mut self.agent_load, nr, field(16))
                    {
                        load.executed(tid);
                    }
                    KernelEvent::Exit {
                        nr,
                        ns,
                        ret: field(16) as i64,
                    }
                } else {
                    return;
                };
                self.pending.push((tid, e));
            }
            _ => {}
        }
    }
}

/// The tracepoints of each interrupt class
/// (`fctrace_format::store::kernel::INTERRUPT_CLASSES`, in its order):
/// group, entry, exit. (Not irq_work's: the kernel refuses perf its
/// exit's samples, perf's own wake-ups run there.)
const INTERRUPT_POINTS: [(&str, &str, &str); 5] = [
    ("irq_vectors", "local_timer_entry", "local_timer_exit"),
    ("irq", "irq_handler_entry", "irq_handler_exit"),
    ("irq", "softirq_entry", "softirq_exit"),
    ("irq_vectors", "reschedule_entry", "reschedule_exit"),
    ("irq_vectors", "call_function_entry", "call_function_exit"),
];

const EXECVE: u16 = 59;
const EXECVEAT: u16 = 322;

/// The address ranges process `pid` maps from files whose name contains
/// one of `names`.
fn mapped_ranges(pid: u32, names: &[&str]) -> Vec<(u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n)))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// Signals whose delivery is the agent's work, not the program's (the
/// kernel does not say who handles them: by the handler's address, in the
/// agent, and what the agent's handlers are for). (An int3 of the trap
/// fallback is known by the tagged `rt_sigreturn` that ends its frame,
/// `store::kernel`.)
/// The agent's marker on a crash signal the program leaves at its default
/// action: SA_SIGINFO | SA_ONSTACK | SA_RESTART, and glibc's SA_RESTORER.
const MARKER_FLAGS: u64 = 0x4 | 0x0800_0000 | 0x1000_0000 | 0x0400_0000;
const CRASH_SIGNALS: [i32; 7] = [4, 5, 6, 7, 8, 11, 31];

impl Kernel {
    /// Whether `addr` lies in fctrace's shared memory as process `pid`
    /// maps it (its memory map read once per process).
    fn in_shared_memory(&mut self, pid: u32, addr: u64) -> bool {
        let ranges = self
            .shm_ranges
            .entry(pid)
            .or_insert_with(|| mapped_ranges(pid, &["memfd:fctrace-shm"]));
        ranges.iter().any(|&(lo, hi)| (lo..hi).contains(&addr))
    }

    /// Whether a signal delivered to process `pid` is the agent's own: the
    /// delivery to its marker of a crash signal the program left at its
    /// default action (raised again by the marker, or faulted
    /// again: that second delivery, to the default action, is the one a
    /// run without fctrace has). The process's memory map tells where the
    /// agent is, when it is still there at the drain (a process that
    /// crashes at once is gone: readers then recognise the marker's
    /// delivery by what follows it, `store::kernel`).
    fn agents_signal(&mut self, pid: u32, sig: i32, handler: u64, flags: u64) -> bool {
        if handler <= 1 {
            return false;
        }
        let ranges = self
            .agent_ranges
            .entry(pid)
            .or_insert_with(|| mapped_ranges(pid, &["fctrace-agent", "fctrace_agent"]));
        if ranges.is_empty() {
            // Read again at the next (the agent loads after the exec).
            self.agent_ranges.remove(&pid);
            return false;
        }
        if !ranges.iter().any(|&(lo, hi)| (lo..hi).contains(&handler)) {
            return false;
        }
        CRASH_SIGNALS.contains(&sig) && flags == MARKER_FLAGS
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        for r in &self.rings {
            // SAFETY: the mapping made in `open_for_launch`, no longer read.
            unsafe { libc::munmap(r.base as *mut libc::c_void, r.len) };
        }
        for &fd in &self.fds {
            // SAFETY: descriptors this struct opened.
            unsafe { libc::close(fd) };
        }
    }
}

/// Which task a thread's samples go to: the task of the trace that has its
/// thread id (the latest registered, as an exec makes a new task with the
/// same thread id).
#[derive(Default)]
pub struct Routes {
    by_tid: HashMap<u32, (u32, u32)>,
    /// The task table was read since the last [`Routes::new_round`].
    refreshed: bool,
}

impl Routes {
    /// Lets the next unknown thread read the task table again.
    pub fn new_round(&mut self) {
        self.refreshed = false;
    }

    /// The (task id, tid) of `tid`, if a task has it; `refresh` gives the
    /// task table's (id, tid) pairs when `tid` is not known yet.
    pub fn task_of(
        &mut self,
        tid: u32,
        refresh: &mut dyn FnMut() -> Vec<(u32, u32)>,
    ) -> Option<(u32, u32)> {
        if let Some(&t) = self.by_tid.get(&tid) {
            return Some(t);
        }
        if self.refreshed {
            return None;
        }
        self.refreshed = true;
        for (id, t) in refresh() {
            self.by_tid.insert(t, (id, t));
        }
        self.by_tid.get(&tid).copied()
    }
}
