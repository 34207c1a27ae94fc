//! `record -K DEPTH`: the kernel functions the traced tasks run, from
//! ftrace's function_graph tracer in a tracefs instance of fctrace's own.
//!
//! Every facility is looked for and what is missing is said: tracefs with
//! instances, the tracer in the instance's `available_tracers`, the
//! `mono` trace clock (CLOCK_MONOTONIC, the user events' timeline),
//! `max_graph_depth`, the tracer options that put the time, the thread
//! and the duration on each line (`funcgraph-abstime`, `funcgraph-proc`,
//! `funcgraph-duration`), `set_ftrace_pid` and `function-fork`. The
//! instance (`instances/fctrace-<pid>`) is removed at the end, also when
//! setting it up failed part way; a global `max_graph_depth` is put back.
//!
//! The instance's `trace_pipe` is read (non-blocking) at each drain of
//! the kernel's rings and parsed ([`Parser`]) into entries and exits of
//! kernel functions per thread. ftrace prints times in microseconds: an
//! entry (or a `}`) is recorded at the last nanosecond of its microsecond,
//! a leaf's exit at its entry plus its duration, and each thread's times
//! never go back (the lines of one thread are in order).

use fctrace_format::store::kernel::{KernelEvent, MAX_NAME};
use fctrace_options::pattern::FuncPattern;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where tracefs is mounted.
use crate::perf::TRACEFS;

/// The tracer options each line needs (absolute time, thread, duration).
const NEEDED_OPTIONS: [&str; 3] = ["funcgraph-abstime", "funcgraph-proc", "funcgraph-duration"];

/// Functions of the recording itself that run in the traced threads (the
/// perf tracepoint handlers and the BPF programs that copy paths): not
/// the program's work.
const NOT_TRACED: [&str; 5] = [
    "perf_trace_*",
    "perf_tp_event*",
    "perf_swevent_*",
    "bpf_*",
    "__bpf_*",
];

/// The trace buffer's size per CPU, at least (KiB).
const BUFFER_KB: u64 = 16384;

/// The system call tracepoints' callers: what runs below them is the
/// recording's (`-k`'s events), left out by the parser with everything
/// under them (instances of Linux 6.12 have no `set_graph_notrace`).
const RECORDING_CALLERS: [&str; 4] = [
    "syscall_trace_enter",
    "syscall_exit_work",
    "trace_call_bpf",
    "perf_syscall_*",
];

/// `name` is the recording's own work (a [`NOT_TRACED`] or
/// [`RECORDING_CALLERS`] pattern: a name, or a prefix and `*`).
fn recordings_own(name: &str) -> bool {
    // (`syscall_trace_enter.constprop.0`: the compiler's copy.)
    let name = name.split('.').next().unwrap_or(name);
    NOT_TRACED
        .iter()
        .chain(&RECORDING_CALLERS)
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *p,
        })
}

/// The function_graph tracer: a tracefs instance of fctrace's own, or the
/// top-level tracer where instances cannot run it (Linux 6.1).
pub struct FuncGraph {
    /// The instance's directory (removed at the end), or tracefs' root.
    dir: PathBuf,
    root: PathBuf,
    tracer: String,
    instance: bool,
    /// Global settings changed, put back at the end.
    saved: super::kstate::Saved,
    pipe: Option<std::fs::File>,
    parser: Parser,
    /// `FCTRACE_KERNEL_RAW=FILE`: the tracer's text as read, kept there
    /// too (for a bug report: what the parser was given).
    raw: Option<std::fs::File>,
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(value.as_bytes())
}

/// Removes the instances of fctrace recordings that were killed before
/// they could remove theirs (`fctrace-<pid>` of a process that is gone).
fn remove_stale_instances(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root.join("instances")) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("fctrace-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = write_file(&e.path().join("tracing_on"), "0");
            let _ = write_file(&e.path().join("current_tracer"), "nop");
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// The tracefs root that has instances, or why there is none.
fn tracefs_root() -> Result<&'static str, String> {
    crate::perf::mount_tracefs_if_needed();
    let mut seen = None;
    for root in TRACEFS {
        if Path::new(root).join("available_tracers").exists() {
            if Path::new(root).join("instances").is_dir() {
                return Ok(root);
            }
            seen = Some(root);
        }
    }
    Err(match seen {
        Some(root) => format!(
            "tracefs has no instances ({root}/instances: the kernel is older than 3.10), \
             which fctrace needs not to disturb the system's own tracing"
        ),
        None => "tracefs is not mounted or not readable here (/sys/kernel/tracing/\
                 available_tracers): mount -t tracefs nodev /sys/kernel/tracing"
            .to_string(),
    })
}

/// The tracers `dir/available_tracers` lists.
fn tracers_in(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("available_tracers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Why the top-level tracer cannot be taken (in use by someone), if so.
fn top_level_in_use(root: &Path) -> Option<String> {
    if let Some(pid) = super::kstate::top_level_holder() {
        return Some(format!(
            "another fctrace (pid {pid}) is using the kernel's top-level tracer, which this \
             kernel's tracefs instances cannot replace; fctrace does not take it over"
        ));
    }
    let read = |f: &str| {
        std::fs::read_to_string(root.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let tracer = read("current_tracer");
    if tracer != "nop" {
        return Some(format!(
            "the kernel's top-level tracer is in use ({}/current_tracer is {tracer}), and this \
             kernel's tracefs instances cannot run function_graph; fctrace does not take it \
             over (echo nop > {}/current_tracer when it is no longer needed)",
            root.display(),
            root.display()
        ));
    }
    let events = read("set_event");
    if !events.is_empty() {
        return Some(format!(
            "the kernel's top-level trace buffer is in use (events enabled in {}/set_event: \
             {}), and this kernel's tracefs instances cannot run function_graph; fctrace does \
             not take it over",
            root.display(),
            events.lines().take(3).collect::<Vec<_>>().join(", ")
        ));
    }
    None
}

impl FuncGraph {
    /// Sets up function_graph, `depth` levels deep, in a new instance or
    /// the top-level tracer; tracing starts at [`FuncGraph::arm`] or
    /// [`FuncGraph::follow`]. The error says what is missing or in the
    /// way (what was changed is put back).
    pub fn open(depth: u32) -> Result<FuncGraph, String> {
        let root = tracefs_root()?;
        let me = std::process::id();
        remove_stale_instances(Path::new(root));
        for said in super::kstate::recover_stale() {
            eprintln!("fctrace: {said}");
        }
        // (Tests ask for a tracer the kernel refuses, to see the message.)
        let tracer =
            std::env::var("FCTRACE_KERNEL_TRACER").unwrap_or_else(|_| "function_graph".into());
        FuncGraph::open_in(Path::new(root), &format!("fctrace-{me}"), &tracer, depth)
    }

    /// As [`FuncGraph::open`], in tracefs `root`, instance `name`, with
    /// `tracer` (the tests try a tracer this kernel refuses).
    fn open_in(root: &Path, name: &str, tracer: &str, depth: u32) -> Result<FuncGraph, String> {
        let dir = root.join("instances").join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied) => {
                return Err(format!(
                    "this user may not create a tracefs instance ({}: {e}): run fctrace as root",
                    dir.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot create a tracefs instance ({}: {e})",
                    dir.display()
                ))
            }
        }
        // An instance without the tracer where the top level has it
        // (Linux 6.1): the top-level tracer, if nobody uses it.
        let in_instance = tracers_in(&dir).iter().any(|t| t == tracer);
        let top = !in_instance && tracers_in(root).iter().any(|t| t == tracer);
        if top {
            let _ = std::fs::remove_dir(&dir);
            if let Some(why) = top_level_in_use(root) {
                return Err(why);
            }
        }
        // From here on, dropping it removes the instance and puts back
        // what was changed.
        let mut g = FuncGraph {
            dir: if top { root.to_path_buf() } else { dir },
            root: root.to_path_buf(),
            tracer: tracer.to_string(),
            instance: !top,
            saved: super::kstate::Saved::new(top),
            pipe: None,
            parser: Parser::default(),
            raw: std::env::var_os("FCTRACE_KERNEL_RAW").and_then(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(p)
                    .ok()
            }),
        };
        g.set_up(root, tracer, depth)?;
        Ok(g)
    }

    /// Writes `value` to `path`: a global setting's old value is kept.
    /// (function_graph's own options, `funcgraph-*`, are one set for the
    /// top level and every instance.)
    fn set(&mut self, path: &Path, value: &str) -> std::io::Result<()> {
        let rel = path.strip_prefix(&self.dir).ok().map(Path::to_path_buf);
        let shared = rel
            .as_ref()
            .and_then(|r| r.strip_prefix("options").ok())
            .is_some_and(|o| o.to_string_lossy().starts_with("funcgraph-"));
        if self.instance && shared {
            let global = self.root.join(rel.unwrap());
            self.saved.change_shared(&global, path, value)
        } else if self.instance && rel.is_some() {
            write_file(path, value)
        } else {
            self.saved.change(path, value)
        }
    }

    fn set_up(&mut self, root: &Path, tracer: &str, depth: u32) -> Result<(), String> {
        let dir = self.dir.clone();
        let at = |f: &str| dir.join(f);
        let tracers = tracers_in(&self.dir);
        if !tracers.iter().any(|t| t == tracer) {
            // What could stand in for it, and whether this kernel has it.
            let kprobes = root.join("kprobe_events");
            let instead = if kprobes.exists() {
                "; fctrace does not use the kernel's kprobes in its place yet".to_string()
            } else {
                format!(
                    ", nor kprobes to use in its place ({} is missing: it needs \
                     CONFIG_KPROBE_EVENTS)",
                    kprobes.display()
                )
            };
            return Err(format!(
                "this kernel has no {tracer} tracer ({} lists {}; it needs \
                 CONFIG_FUNCTION_GRAPH_TRACER){instead}",
                at("available_tracers").display(),
                if tracers.is_empty() {
                    "none".to_string()
                } else {
                    tracers.join(", ")
                }
            ));
        }
        // Times on the user events' clock.
        let clocks = std::fs::read_to_string(at("trace_clock")).unwrap_or_default();
        if !clocks
            .split_whitespace()
            .any(|c| c.trim_matches(['[', ']']) == crate::clock::ftrace_name())
        {
            return Err(format!(
                "the trace clock {} (the recording's, --clock) is not offered ({} lists {}): \
                 kernel functions' times would not match the program's",
                crate::clock::ftrace_name(),
                at("trace_clock").display(),
                clocks.trim()
            ));
        }
        self.set(&at("tracing_on"), "0")
            .map_err(|e| format!("cannot write {}: {e}", at("tracing_on").display()))?;
        self.set(&at("trace_clock"), crate::clock::ftrace_name())
            .map_err(|e| format!("cannot set {}: {e}", at("trace_clock").display()))?;
        // A buffer that holds a few drains' worth under emulation (it is
        // read every few milliseconds).
        let size = std::fs::read_to_string(at("buffer_size_kb")).unwrap_or_default();
        let kb = super::kstate::buffer_kb(&size);
        if kb.is_some_and(|kb| kb < BUFFER_KB) {
            let _ = self.set(&at("buffer_size_kb"), &BUFFER_KB.to_string());
        }
        // The threads the traced ones create.
        if let Err(e) = self.set(&at("options/function-fork"), "1") {
            return Err(format!(
                "cannot follow the threads and processes the program creates ({}: {e}; \
                 the option exists since Linux 4.14)",
                at("options/function-fork").display()
            ));
        }
        // No thread yet (fctrace's own or the program's, at `arm`).
        let _ = self.set(&at("set_ftrace_pid"), &std::process::id().to_string());
        self.set_tracer(tracer)?;
        self.set_depth(root, depth)?;
        // The recording's own handlers are not the program's work (each
        // pattern where the kernel has such functions).
        let notrace = at("set_graph_notrace");
        if notrace.exists() {
            let _ = self.set(&notrace, &NOT_TRACED.join("\n"));
        }
        // Nothing of before in the buffer.
        let _ = write_file(&at("trace"), "");
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(at("trace_pipe"))
            .map_err(|e| format!("cannot read {}: {e}", at("trace_pipe").display()))?;
        self.pipe = Some(pipe);
        Ok(())
    }

    /// The tracer and the options each line needs.
    fn set_tracer(&mut self, tracer: &str) -> Result<(), String> {
        let dir = self.dir.clone();
        let at = |f: &str| dir.join(f);
        if let Err(e) = self.set(&at("current_tracer"), tracer) {
            let why = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => refusal_cause(),
                Some(libc::EBUSY) => ": another user of the tracer holds it".to_string(),
                _ => String::new(),
            };
            return Err(format!(
                "the kernel refuses the {tracer} tracer in {} ({}: {e}){why}",
                if self.instance {
                    "fctrace's tracefs instance"
                } else {
                    "tracefs' top level"
                },
                at("current_tracer").display()
            ));
        }
        // What each line must say: its time, its thread and the duration.
        let mut missing = Vec::new();
        for o in NEEDED_OPTIONS {
            if self.set(&at(&format!("options/{o}")), "1").is_err() {
                missing.push(o);
            }
        }
        if !missing.is_empty() {
            return Err(format!(
                "the {tracer} tracer lacks the options {} ({})",
                missing.join(", "),
                at("options").display()
            ));
        }
        // Kernel functions under system calls, not interrupts'; the name on
        // each `}`. (Optional: older kernels lack them.)
        let _ = self.set(&at("options/funcgraph-irqs"), "0");
        let _ = self.set(&at("options/funcgraph-tail"), "1");
        Ok(())
    }

    /// The depth: the instance's, or a global one, put back at the end.
    fn set_depth(&mut self, root: &Path, depth: u32) -> Result<(), String> {
        let depth_file = [
            self.dir.join("max_graph_depth"),
            root.join("max_graph_depth"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .ok_or_else(|| {
            format!(
                "the kernel cannot limit the depth of function_graph ({}/max_graph_depth: \
                     Linux 4.2 and later)",
                root.display()
            )
        })?;
        // One level more for the system call table's dispatcher where the
        // kernel traces it (6.12): the parser leaves it out.
        let kernel_depth = if depth > 0 && traces_dispatcher(root) {
            self.parser.depth = Some(depth as usize);
            depth + 1
        } else {
            depth
        };
        self.set(&depth_file, &kernel_depth.to_string())
            .map_err(|e| format!("cannot set {}: {e}", depth_file.display()))
    }

    /// Starts tracing the calling thread and what it creates from now on
    /// (the program fctrace is about to start); its own functions are
    /// left out. [`FuncGraph::follow`] then narrows it to the program.
    pub fn arm(&mut self) -> Result<(), String> {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        self.parser.ignore = Some(me as u32);
        self.follow(&[me])
    }

    /// Traces the threads `pids` (and what they create from now on), and
    /// starts.
    pub fn follow(&mut self, pids: &[i32]) -> Result<(), String> {
        let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
        let f = self.dir.join("set_ftrace_pid");
        self.set(&f, &list.join(" "))
            .map_err(|e| format!("cannot set {}: {e}", f.display()))?;
        let on = self.dir.join("tracing_on");
        self.set(&on, "1")
            .map_err(|e| format!("cannot write {}: {e}", on.display()))
    }

    /// Reads what the tracer has written; its entries and exits go into
    /// `out` with their threads and system calls ([`FuncEvent`]).
    pub fn read(&mut self, out: &mut Vec<FuncEvent>) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(raw) = &mut self.raw {
                        let _ = raw.write_all(&buf[..n]);
                    }
                    self.parser.feed(&buf[..n], out)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }

    /// Events the tracer lost (its buffer full) and returns it could not
    /// trace (overruns).
    /// How far in time the tracer's text has been read ([`Parser::newest`];
    /// 0: nothing yet).
    pub fn newest(&self) -> u64 {
        self.parser.newest
    }

    pub fn lost(&self) -> u64 {
        self.parser.lost + self.parser.overruns
    }

    /// `-F FUNC@kernel` (`only`) and `-N FUNC@kernel` (`hide`).
    pub fn filter(&mut self, only: Vec<FuncPattern>, hide: Vec<FuncPattern>) {
        self.parser.only = only;
        self.parser.hide = hide;
    }

    /// The tracer's name (function_graph but in tests).
    pub fn tracer(&self) -> &str {
        &self.tracer
    }

    /// Whether the top-level tracer is used (no instance could).
    pub fn top_level(&self) -> bool {
        !self.instance
    }
}

impl Drop for FuncGraph {
    fn drop(&mut self) {
        let _ = write_file(&self.dir.join("tracing_on"), "0");
        // (The tracer cannot be changed while its pipe is open.)
        self.pipe = None;
        if self.instance {
            let _ = write_file(&self.dir.join("current_tracer"), "nop");
        } else {
            // The top-level buffer left empty, as it was.
            let _ = write_file(&self.dir.join("current_tracer"), "nop");
            let _ = write_file(&self.dir.join("trace"), "");
        }
        self.saved.restore();
        if self.instance {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Whether the kernel can trace the [`DISPATCHER`] (it is in
/// `available_filter_functions`: Linux 6.12's is, 6.1's backport is built
/// without tracing).
fn traces_dispatcher(root: &Path) -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open(root.join("available_filter_functions")) else {
        return false;
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.split_whitespace().next() == Some(DISPATCHER))
}

/// What may forbid function tracing, as far as the kernel shows it.
fn refusal_cause() -> String {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/ftrace_enabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if enabled == "0" {
        return ": kernel.ftrace_enabled is 0 (sysctl kernel.ftrace_enabled=1)".to_string();
    }
    if let Ok(l) = std::fs::read_to_string("/sys/kernel/security/lockdown") {
        if let Some(mode) = l.split_whitespace().find(|w| w.starts_with('[')) {
            if mode != "[none]" {
                return format!(": the kernel is locked down ({})", l.trim());
            }
        }
    }
    format!(
        ": kernel.ftrace_enabled is {}, and no lockdown is shown; a security module or the \
         kernel's configuration forbids it",
        if enabled.is_empty() { "?" } else { &enabled }
    )
}

/// function_graph's text, as `trace_pipe` gives it with the columns
/// `funcgraph-abstime`, the CPU, `funcgraph-proc` and
/// `funcgraph-duration`:
///
/// ```text
///  3563.104573 |   1)    app-4251    |               |  __x64_sys_read() {
///  3563.104574 |   1)    app-4251    |   0.190 us    |    fdget_pos();
///  3563.104581 |   1)    app-4251    | + 12.140 us   |  } /* __x64_sys_read */
///  ------------------------------------------
///  1)    app-4251    =>   kworker-91
///  ------------------------------------------
/// CPU:1 [LOST 20 EVENTS]
///  (Overruns: 2)
/// ```
/// A thread's open functions, the time of its last event, the depth from
/// which its lines are left out (the recording's own work, `-N
/// FUNC@kernel`), the depth from which they are kept (`-F
/// FUNC@kernel`), and the system call of its open tree.
#[derive(Default)]
struct Thread {
    stack: Vec<Box<str>>,
    last: u64,
    hidden: Option<usize>,
    shown: Option<usize>,
    /// The system call whose tree is open ([`FuncEvent::syscall`]), and
    /// the trees begun ([`FuncEvent::tree`]).
    syscall: Option<u16>,
    tree: u64,
    /// Whether its open tree began in the thread's own code
    /// ([`FuncEvent::user`]).
    user: bool,
}

/// What every thread's lines are kept or left out by.
struct Rules<'a> {
    only: &'a [FuncPattern],
    hide: &'a [FuncPattern],
    depth: Option<usize>,
}

impl Thread {
    /// An entry (`name() {`) at `at`.
    fn enter(
        &mut self,
        tid: u32,
        at: u64,
        name: Box<str>,
        rules: &Rules,
        out: &mut Vec<FuncEvent>,
    ) {
        let depth = self.stack.len();
        // The dispatcher: on the stack (for its `}`), not shown.
        if depth == 0 && rules.depth.is_some() && &*name == DISPATCHER {
            self.stack.push(name);
            self.last = at;
            return;
        }
        let too_deep = rules
            .depth
            .is_some_and(|d| depth - usize::from(self.dispatched()) >= d);
        if self.hidden.is_none() && (too_deep || recordings_own(&name) || named(rules.hide, &name))
        {
            self.hidden = Some(depth);
        }
        if self.shown.is_none() && named(rules.only, &name) {
            self.shown = Some(depth);
        }
        if depth == usize::from(self.dispatched()) {
            self.syscall = syscall_number(&name);
            self.user = depth == 0 && user_root(&name);
            self.tree += 1;
        }
        self.stack.push(name.clone());
        self.last = at;
        if self.hidden.is_none() && (rules.only.is_empty() || self.shown.is_some()) {
            out.push(FuncEvent {
                tid,
                event: KernelEvent::FuncEntry { ns: at, name },
                syscall: self.syscall,
                tree: self.tree,
                user: self.user,
            });
        }
    }

    /// An exit (`}`) at `at`, after `dur` ns.
    fn exit(
        &mut self,
        tid: u32,
        at: u64,
        dur: Option<u64>,
        rules: &Rules,
        out: &mut Vec<FuncEvent>,
    ) {
        let dispatcher = self.stack.len() == 1 && rules.depth.is_some() && self.dispatched();
        // (The entry may predate the recording.)
        let Some(name) = self.stack.pop() else {
            return;
        };
        self.last = at;
        if dispatcher {
            return;
        }
        let visible = self.hidden.is_none() && (rules.only.is_empty() || self.shown.is_some());
        let depth = self.stack.len();
        if self.hidden == Some(depth) {
            self.hidden = None;
        }
        if self.shown == Some(depth) {
            self.shown = None;
        }
        let (syscall, tree, user) = (self.syscall, self.tree, self.user);
        if depth == usize::from(self.dispatched()) {
            self.syscall = None;
        }
        if !visible {
            return;
        }
        out.push(FuncEvent {
            tid,
            event: KernelEvent::FuncExit {
                ns: at,
                dur: dur.unwrap_or(0),
                name,
            },
            syscall,
            tree,
            user,
        });
    }

    /// A leaf (`name();`) at `at`, of `dur` ns.
    fn leaf(
        &mut self,
        tid: u32,
        at: u64,
        name: Box<str>,
        dur: u64,
        rules: &Rules,
        out: &mut Vec<FuncEvent>,
    ) {
        self.last = at + dur;
        let depth = self.stack.len();
        let too_deep = rules
            .depth
            .is_some_and(|d| depth - usize::from(self.dispatched()) >= d);
        if self.hidden.is_some() || too_deep || recordings_own(&name) || named(rules.hide, &name) {
            return;
        }
        if !rules.only.is_empty() && self.shown.is_none() && !named(rules.only, &name) {
            return;
        }
        let (syscall, user) = if depth == usize::from(self.dispatched()) {
            self.tree += 1;
            (syscall_number(&name), depth == 0 && user_root(&name))
        } else {
            (self.syscall, self.user)
        };
        let tree = self.tree;
        out.push(FuncEvent {
            tid,
            event: KernelEvent::FuncEntry {
                ns: at,
                name: name.clone(),
            },
            syscall,
            tree,
            user,
        });
        out.push(FuncEvent {
            tid,
            event: KernelEvent::FuncExit {
                ns: at + dur,
                dur,
                name,
            },
            syscall,
            tree,
            user,
        });
    }

    /// Whether its outermost open function is the [`DISPATCHER`].
    fn dispatched(&self) -> bool {
        self.stack.first().is_some_and(|f| &**f == DISPATCHER)
    }
}

/// The system call a kernel function is the entry of (`__x64_sys_read`:
/// `read`; the 32-bit and compat entries too).
fn syscall_of(name: &str) -> Option<&str> {
    [
        "__x64_sys_",
        "__ia32_sys_",
        "__x64_compat_sys_",
        "__ia32_compat_sys_",
    ]
    .iter()
    .find_map(|p| name.strip_prefix(p))
}

/// `name` matches one of `patterns`: `FUNC@kernel` a kernel function,
/// `NAME@[syscall]` the entry of a system call ([`syscall_of`]).
fn named(patterns: &[FuncPattern], name: &str) -> bool {
    patterns.iter().any(|p| {
        if p.module() == Some(SYSCALL_MODULE) {
            syscall_of(name).is_some_and(|s| p.matches_name(s))
        } else {
            p.matches_name(name)
        }
    })
}

/// The number of the system call whose entry `name` is, if known.
fn syscall_number(name: &str) -> Option<u16> {
    let call = syscall_of(name)?;
    fctrace_format::syscall_table::SYSCALL_NAMES
        .iter()
        .position(|n| *n == call)
        .map(|nr| nr as u16)
}

/// A kernel function's entry or exit, with its thread and the system
/// call whose tree it is in (the number of the `__x64_sys_NAME` at its
/// root, kept also when `-F`/`-N` leave the root out): ftrace's times are
/// microseconds, so the recorder ties the late ones to that call
/// (`kernel::tie_to_calls`).
pub struct FuncEvent {
    pub tid: u32,
    pub event: KernelEvent,
    pub syscall: Option<u16>,
    /// The thread's count of trees so far: the same for every event of
    /// one tree.
    pub tree: u64,
    /// The tree began while the thread ran its own code: a page fault's
    /// ([`USER_ROOTS`]).
    pub user: bool,
}

/// The roots of the trees of a page fault in the thread's own code (the
/// entry code before them is not traced).
const USER_ROOTS: [&str; 2] = ["do_user_addr_fault", "exc_page_fault"];

/// A tree rooted at `name` began in the thread's own code.
fn user_root(name: &str) -> bool {
    USER_ROOTS.contains(&name)
}

/// The module of system call patterns (`read@[syscall]`).
pub const SYSCALL_MODULE: &str = "[syscall]";

/// The system call table's dispatcher of Linux 6.9 and later (and of
/// backports that can trace it), between the entry code and
/// `__x64_sys_NAME`: left out, so that depths count from the system
/// call on every kernel.
pub const DISPATCHER: &str = "x64_sys_call";

#[derive(Default)]
pub struct Parser {
    /// A thread whose lines are left out (fctrace's own, until the
    /// program it starts narrows the pid filter).
    pub ignore: Option<u32>,
    /// A line not ended yet.
    partial: Vec<u8>,
    /// Per thread, the functions open and the time of its last event.
    threads: HashMap<u32, Thread>,
    /// `-F FUNC@kernel`: only these functions and what they call.
    pub only: Vec<FuncPattern>,
    /// `-N FUNC@kernel`: not these nor what they call.
    pub hide: Vec<FuncPattern>,
    /// `-K DEPTH` where the tracer goes one level deeper for the
    /// [`DISPATCHER`] (left out): lines deeper than DEPTH below the
    /// system call, or below the top elsewhere, are dropped.
    pub depth: Option<usize>,
    /// Events the tracer lost, and returns it could not trace.
    pub lost: u64,
    pub overruns: u64,
    /// Lines not understood.
    pub unknown: u64,
    /// The latest time of a line read (any thread's): the tracer's text
    /// has been read up to about there.
    pub newest: u64,
}

/// A line's parts.
struct Columns<'a> {
    /// The time (ns, the microsecond's start).
    us_ns: u64,
    tid: u32,
    /// The duration (ns), on exits and leaves.
    dur: Option<u64>,
    /// The function column.
    text: &'a str,
}

/// A line's parts: time, `CPU) comm-pid`, the duration and the
/// function.
fn columns(line: &str) -> Option<Columns<'_>> {
    let parts: Vec<&str> = line.split('|').collect();
    if parts.len() < 4 {
        return None;
    }
    // Absolute time: seconds.microseconds.
    let (secs, usecs) = parts[0].trim().split_once('.')?;
    let us_ns = secs.parse::<u64>().ok()? * 1_000_000_000 + usecs.parse::<u64>().ok()? * 1_000;
    // `CPU) comm-pid`: the pid after the last '-'.
    let proc = parts[1].split_once(')').map_or(parts[1], |(_, p)| p).trim();
    let tid: u32 = proc.rsplit_once('-')?.1.parse().ok()?;
    // `+ 12.140 us` (a mark for long ones), or empty.
    let d = parts[parts.len() - 2]
        .trim()
        .trim_start_matches(['+', '!', '#', '*', '@', '$', ' '])
        .trim();
    let dur = match d.strip_suffix("us") {
        Some(v) => {
            let (whole, frac) = v.trim().split_once('.').unwrap_or((v.trim(), "0"));
            let frac = format!("{frac:0<3}");
            Some(whole.parse::<u64>().ok()? * 1_000 + frac[..3].parse::<u64>().ok()?)
        }
        None if d.is_empty() => None,
        None => return None,
    };
    Some(Columns {
        us_ns,
        tid,
        dur,
        text: parts[parts.len() - 1],
    })
}

/// A function's name from `name() {`, `name(args);`, `name.cold();`.
fn function_name(text: &str) -> Option<Box<str>> {
    let name = text.split('(').next()?.trim();
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    let mut len = name.len().min(MAX_NAME);
    while !name.is_char_boundary(len) {
        len -= 1;
    }
    Some(name[..len].into())
}

impl Parser {
    /// Parses `bytes` (lines, the last maybe cut).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<FuncEvent>) {
        self.partial.extend_from_slice(bytes);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let whole: Vec<u8> = self.partial.drain(..=end).collect();
        for line in String::from_utf8_lossy(&whole).lines() {
            self.line(line, out);
        }
    }

    fn line(&mut self, line: &str, out: &mut Vec<FuncEvent>) {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.bytes().all(|b| b == b'-') {
            return;
        }
        // `CPU:1 [LOST 20 EVENTS]`
        if let Some(n) = t
            .split_once("[LOST ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse::<u64>().ok())
        {
            self.lost += n;
            return;
        }
        // `(Overruns: 2)`
        if let Some(n) = t
            .strip_prefix("(Overruns:")
            .and_then(|r| r.trim_end_matches(')').trim().parse::<u64>().ok())
        {
            self.overruns += n;
            return;
        }
        // `1)  app-4251  =>  kworker-91`: a CPU changing threads (each
        // line names its thread already).
        if t.contains("=>") && !t.contains('|') {
            return;
        }
        // Interrupts' arrows (funcgraph-irqs).
        if t.contains("==========>") || t.contains("<==========") {
            return;
        }
        let Some(Columns {
            us_ns,
            tid,
            dur,
            text,
        }) = columns(line)
        else {
            self.unknown += 1;
            return;
        };
        self.newest = self.newest.max(us_ns);
        if self.ignore == Some(tid) {
            return;
        }
        let text = text.trim();
        // Comments (trace_printk, events).
        if text.starts_with("/*") {
            return;
        }
        let t = self.threads.entry(tid).or_default();
        let rules = Rules {
            only: &self.only,
            hide: &self.hide,
            depth: self.depth,
        };
        // The microsecond's last nanosecond, never before the thread's last.
        let at = (us_ns + 999).max(t.last);
        if let Some(body) = text.strip_suffix('{') {
            let Some(name) = function_name(body) else {
                self.unknown += 1;
                return;
            };
            t.enter(tid, at, name, &rules, out);
        } else if text.starts_with('}') {
            t.exit(tid, at, dur, &rules, out);
        } else if text
            .split("/*")
            .next()
            .is_some_and(|b| b.trim_end().ends_with(';'))
        {
            let Some(name) = function_name(text) else {
                self.unknown += 1;
                return;
            };
            t.leaf(tid, at, name, dur.unwrap_or(0), &rules, out);
        } else {
            self.unknown += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Parser, Vec<FuncEvent>) {
        let mut p = Parser::default();
        let mut out = Vec::new();
        // Fed in pieces that cut lines.
        for chunk in text.as_bytes().chunks(37) {
            p.feed(chunk, &mut out);
        }
        (p, out)
    }

    fn shape(out: &[FuncEvent]) -> Vec<String> {
        out.iter()
            .map(|FuncEvent { tid, event, .. }| match event {
                KernelEvent::FuncEntry { ns, name } => format!("{tid} > {name} {ns}"),
                KernelEvent::FuncExit { ns, dur, name } => {
                    format!("{tid} < {name} {ns} {dur}")
                }
                e => format!("{e:?}"),
            })
            .collect()
    }

    /// The layout of Documentation/trace/ftrace.rst's function_graph
    /// examples, with funcgraph-abstime, the CPU, funcgraph-proc and
    /// funcgraph-duration: nested and leaf calls, the duration marks,
    /// `=>` context-switch blocks, lost events and overruns.
    #[test]
    fn function_graph_lines() {
        let text = "\
# tracer: function_graph
#
#     TIME        CPU  TASK/PID         DURATION                  FUNCTION CALLS
#      |          |     |    |           |   |                     |   |   |   |
 3563.104573 |   1)    app-4251    |               |  __x64_sys_read() {
 3563.104573 |   1)    app-4251    |               |    ksys_read() {
 3563.104574 |   1)    app-4251    |   0.190 us    |      __fdget_pos();
 3563.104575 |   1)    app-4251    |               |      vfs_read() {
 3563.104575 |   1)    app-4251    |   0.101 us    |        rw_verify_area();
 3563.104580 |   1)    app-4251    |   4.877 us    |      }
 3563.104581 |   1)    app-4251    | + 12.140 us   |    } /* ksys_read */
 ------------------------------------------
 1)    app-4251    =>  kworke-91    
 ------------------------------------------

 3563.104590 |   1)  kworke-91     |   0.300 us    |  process_one_work();
 3563.104600 |   0)  app thr-4252  |               |  __x64_sys_getppid() {
 3563.104601 |   0)  app thr-4252  |   0.095 us    |    __task_pid_nr_ns(); /* = 0x10a7 */
CPU:0 [LOST 20 EVENTS]
 3563.105601 |   0)  app thr-4252  | ! 1001.020 us |  }
 (Overruns: 2)
 3563.104700 |   1)    app-4251    | # 2127.000 us |  }
 3563.104701 |   1)    app-4251    |               |  /* sched_switch: prev=app */
 3563.104702 |   1)    app-4251    |   ==========> |
 3563.104703 |   1)    app-4251    |   <========== |
 3563.104704 |   1)    app-4251    |   0.100 us    |  }
";
        let (p, out) = parse(text);
        let s = 3_563_000_000_000u64;
        let us = |u: u64| (s + u * 1000 + 999).to_string();
        assert_eq!(
            shape(&out),
            [
                format!("4251 > __x64_sys_read {}", us(104_573)),
                format!("4251 > ksys_read {}", us(104_573)),
                format!("4251 > __fdget_pos {}", us(104_574)),
                format!("4251 < __fdget_pos {} 190", s + 104_574_999 + 190),
                format!("4251 > vfs_read {}", us(104_575)),
                format!("4251 > rw_verify_area {}", us(104_575)),
                format!("4251 < rw_verify_area {} 101", s + 104_575_999 + 101),
                format!("4251 < vfs_read {} 4877", us(104_580)),
                format!("4251 < ksys_read {} 12140", us(104_581)),
                format!("91 > process_one_work {}", us(104_590)),
                format!("91 < process_one_work {} 300", s + 104_590_999 + 300),
                format!("4252 > __x64_sys_getppid {}", us(104_600)),
                format!("4252 > __task_pid_nr_ns {}", us(104_601)),
                format!("4252 < __task_pid_nr_ns {} 95", s + 104_601_999 + 95),
                format!("4252 < __x64_sys_getppid {} 1001020", us(105_601)),
                format!("4251 < __x64_sys_read {} 2127000", us(104_700)),
            ]
        );
        // The last `}` has no entry left open: dropped.
        assert_eq!((p.lost, p.overruns, p.unknown), (20, 2, 0));
        assert!(p.partial.is_empty());
    }

    /// The recording's own work (the system call tracepoints' callers and
    /// what they run, perf's and BPF's functions) is left out with its
    /// subtree; fctrace's own thread (`ignore`) too.
    #[test]
    fn the_recordings_own_functions_are_left_out() {
        let text = "\
 5.000001 |   0)  a-7  |               |  syscall_trace_enter.constprop.0() {
 5.000001 |   0)  a-7  |               |    perf_syscall_enter() {
 5.000002 |   0)  a-7  |   0.300 us    |      __rcu_read_lock();
 5.000003 |   0)  a-7  |   1.000 us    |    }
 5.000004 |   0)  a-7  |   2.000 us    |  }
 5.000005 |   0)  a-7  |               |  ksys_read() {
 5.000006 |   0)  a-7  |   0.100 us    |    bpf_get_current_pid_tgid();
 5.000006 |   0)  f-9  |   0.100 us    |    fctrace_own();
 5.000007 |   0)  a-7  |   0.200 us    |    vfs_read();
 5.000008 |   0)  a-7  |   3.000 us    |  }
";
        let mut p = Parser {
            ignore: Some(9),
            ..Parser::default()
        };
        let mut out = Vec::new();
        p.feed(text.as_bytes(), &mut out);
        let names: Vec<String> = shape(&out)
            .iter()
            .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            names,
            [
                "7 > ksys_read",
                "7 > vfs_read",
                "7 < vfs_read",
                "7 < ksys_read"
            ]
        );
        assert_eq!(p.unknown, 0);
    }

    /// `-F vfs_read@kernel` keeps vfs_read's subtrees only (and a leaf
    /// vfs_read); `-N rw_verify_area@kernel` hides that one and its
    /// subtree.
    #[test]
    fn kernel_filters_keep_and_hide_subtrees() {
        let text = "\
 5.000001 |   0)  a-7  |               |  ksys_read() {
 5.000002 |   0)  a-7  |   0.300 us    |    __fdget_pos();
 5.000003 |   0)  a-7  |               |    vfs_read() {
 5.000004 |   0)  a-7  |               |      rw_verify_area() {
 5.000004 |   0)  a-7  |   0.100 us    |        security_file_permission();
 5.000005 |   0)  a-7  |   1.000 us    |      }
 5.000006 |   0)  a-7  |   0.200 us    |      eventfd_read();
 5.000007 |   0)  a-7  |   4.000 us    |    }
 5.000008 |   0)  a-7  |   5.000 us    |  }
 5.000009 |   0)  a-7  |   0.100 us    |  vfs_read();
 5.000010 |   0)  a-7  |   0.100 us    |  vfs_write();
";
        let pattern = |p: &str| FuncPattern::parse(p).unwrap();
        let mut p = Parser {
            only: vec![pattern("vfs_read@kernel")],
            hide: vec![pattern("rw_verify_area@kernel")],
            ..Parser::default()
        };
        let mut out = Vec::new();
        p.feed(text.as_bytes(), &mut out);
        let names: Vec<String> = shape(&out)
            .iter()
            .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            names,
            [
                "7 > vfs_read",
                "7 > eventfd_read",
                "7 < eventfd_read",
                "7 < vfs_read",
                "7 > vfs_read",
                "7 < vfs_read",
            ]
        );
    }

    /// `-F read@[syscall]` keeps what system call read's entry runs (on
    /// 6.1 `__x64_sys_read` at the top, on 6.12 below the dispatcher);
    /// `-N write@[syscall]` hides what write's runs.
    #[test]
    fn system_calls_as_starting_points() {
        let text = "\
 5.000001 |   0)  a-7  |               |  __x64_sys_read() {
 5.000002 |   0)  a-7  |   0.300 us    |    ksys_read();
 5.000003 |   0)  a-7  |   1.000 us    |  }
 5.000004 |   0)  a-7  |               |  x64_sys_call() {
 5.000005 |   0)  a-7  |               |    __x64_sys_read() {
 5.000006 |   0)  a-7  |   0.100 us    |      ksys_read();
 5.000007 |   0)  a-7  |   1.000 us    |    }
 5.000008 |   0)  a-7  |   2.000 us    |  }
 5.000009 |   0)  a-7  |   0.100 us    |  __x64_sys_write();
 5.000010 |   0)  a-7  |   0.100 us    |  __x64_sys_readv();
";
        let pattern = |p: &str| FuncPattern::parse(p).unwrap();
        let run = |only: &[&str], hide: &[&str]| {
            let mut p = Parser {
                only: only.iter().map(|s| pattern(s)).collect(),
                hide: hide.iter().map(|s| pattern(s)).collect(),
                ..Parser::default()
            };
            let mut out = Vec::new();
            p.feed(text.as_bytes(), &mut out);
            let names: Vec<String> = shape(&out)
                .iter()
                .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
                .collect();
            names
        };
        let read = [
            "7 > __x64_sys_read",
            "7 > ksys_read",
            "7 < ksys_read",
            "7 < __x64_sys_read",
        ];
        assert_eq!(run(&["read@[syscall]"], &[]), [read, read].concat());
        assert_eq!(
            run(&[], &["read.*@[syscall]", "write@[syscall]"]),
            ["7 > x64_sys_call", "7 < x64_sys_call"]
        );
    }

    /// Where the tracer goes one level deeper for the system call table's
    /// dispatcher (6.12), the dispatcher is left out and DEPTH counts from
    /// the system call: `-K 1` shows `__x64_sys_read` as a leaf, as on
    /// 6.1; elsewhere (a page fault) lines below DEPTH are dropped.
    #[test]
    fn depth_counts_from_the_system_call() {
        let text = "\
 5.000004 |   0)  a-7  |               |  x64_sys_call() {
 5.000005 |   0)  a-7  |   0.100 us    |    __x64_sys_read();
 5.000008 |   0)  a-7  |   2.000 us    |  }
 5.000009 |   0)  a-7  |               |  exc_page_fault() {
 5.000010 |   0)  a-7  |   0.100 us    |    do_user_addr_fault();
 5.000011 |   0)  a-7  |   2.000 us    |  }
";
        let mut p = Parser {
            depth: Some(1),
            ..Parser::default()
        };
        let mut out = Vec::new();
        p.feed(text.as_bytes(), &mut out);
        let names: Vec<String> = shape(&out)
            .iter()
            .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            names,
            [
                "7 > __x64_sys_read",
                "7 < __x64_sys_read",
                "7 > exc_page_fault",
                "7 < exc_page_fault"
            ]
        );
    }

    /// Each event says the system call of its tree (the root's
    /// `__x64_sys_NAME`, under 6.12's dispatcher too, kept where `-F`
    /// leaves the root out) and the tree's number; a page fault's tree
    /// has no system call.
    #[test]
    fn trees_say_their_system_call() {
        let text = "\
 5.000001 |   0)  a-7  |               |  __x64_sys_read() {
 5.000002 |   0)  a-7  |               |    vfs_read() {
 5.000003 |   0)  a-7  |   0.100 us    |      rw_verify_area();
 5.000004 |   0)  a-7  |   2.000 us    |    }
 5.000005 |   0)  a-7  |   3.000 us    |  }
 5.000006 |   0)  a-7  |               |  x64_sys_call() {
 5.000007 |   0)  a-7  |   0.100 us    |    __x64_sys_close();
 5.000008 |   0)  a-7  |   2.000 us    |  }
 5.000009 |   0)  a-7  |               |  exc_page_fault() {
 5.000010 |   0)  a-7  |   0.100 us    |    do_user_addr_fault();
 5.000011 |   0)  a-7  |   2.000 us    |  }
";
        let mut p = Parser {
            depth: Some(3),
            only: vec![
                FuncPattern::parse("vfs_read@kernel").unwrap(),
                FuncPattern::parse("__x64_sys_close@kernel").unwrap(),
                FuncPattern::parse("exc_page_fault@kernel").unwrap(),
            ],
            ..Parser::default()
        };
        let mut out = Vec::new();
        p.feed(text.as_bytes(), &mut out);
        let tags: Vec<(String, Option<u16>, u64)> = out
            .iter()
            .map(|f| {
                let name = match &f.event {
                    KernelEvent::FuncEntry { name, .. } => format!("> {name}"),
                    KernelEvent::FuncExit { name, .. } => format!("< {name}"),
                    e => format!("{e:?}"),
                };
                (name, f.syscall, f.tree)
            })
            .collect();
        let want = [
            ("> vfs_read", Some(0), 1),
            ("> rw_verify_area", Some(0), 1),
            ("< rw_verify_area", Some(0), 1),
            ("< vfs_read", Some(0), 1),
            ("> __x64_sys_close", Some(3), 2),
            ("< __x64_sys_close", Some(3), 2),
            ("> exc_page_fault", None, 3),
            ("> do_user_addr_fault", None, 3),
            ("< do_user_addr_fault", None, 3),
            ("< exc_page_fault", None, 3),
        ];
        let want: Vec<(String, Option<u16>, u64)> = want
            .iter()
            .map(|(n, s, t)| (n.to_string(), *s, *t))
            .collect();
        assert_eq!(tags, want);
        // (The page fault's tree began in the thread's own code.)
        let user: Vec<bool> = out.iter().map(|f| f.user).collect();
        assert_eq!(user, [[false; 6].as_slice(), &[true; 4]].concat());
    }

    /// A thread's times never go back (a leaf's exit lies past the next
    /// line's microsecond), and cut lines wait for their end.
    #[test]
    fn times_of_a_thread_stay_in_order() {
        let mut p = Parser::default();
        let mut out = Vec::new();
        p.feed(
            b" 10.000001 |   0)  a-7  |   0.600 us    |  f();\n 10.000001 |   0)  a-7  |   0.200 us    |  g();\n 10.0000",
            &mut out,
        );
        assert_eq!(out.len(), 4);
        let times: Vec<u64> = out.iter().map(|f| f.event.ns()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        p.feed(b"02 |   0)  a-7  |   0.100 us    |  h();\n", &mut out);
        assert_eq!(out.len(), 6);
        assert_eq!(out[4].event.ns(), 10_000_002_999);
    }

    /// Setting up on this machine: the message says what is missing, and
    /// no instance is left behind. A tracer the kernel lists but refuses
    /// (here `function`, EPERM) gives a clear message too.
    #[test]
    fn facilities_are_detected() {
        let e = match FuncGraph::open(2) {
            Ok(_) => return, // A kernel that has it all.
            Err(e) => e,
        };
        let root = match tracefs_root() {
            Ok(r) => r,
            Err(r) => {
                assert_eq!(e, r);
                return;
            }
        };
        eprintln!("function_graph: {e}");
        let me = std::process::id();
        assert!(!Path::new(root)
            .join(format!("instances/fctrace-{me}"))
            .exists());
        let tracers = std::fs::read_to_string(format!("{root}/available_tracers")).unwrap();
        if !tracers.split_whitespace().any(|t| t == "function_graph") {
            assert!(
                e.starts_with("this kernel has no function_graph tracer (")
                    && e.contains("available_tracers lists")
                    && e.contains("CONFIG_FUNCTION_GRAPH_TRACER")
                    && (Path::new(root).join("kprobe_events").exists()
                        || e.ends_with(&format!(
                            ", nor kprobes to use in its place ({root}/kprobe_events is \
                             missing: it needs CONFIG_KPROBE_EVENTS)"
                        ))),
                "{e}"
            );
        }
        // A listed tracer the kernel refuses.
        if tracers.split_whitespace().any(|t| t == "function") {
            let name = format!("fctrace-test-{me}");
            match FuncGraph::open_in(Path::new(root), &name, "function", 2) {
                Ok(_) => {}
                Err(e) => {
                    eprintln!("function: {e}");
                    assert!(
                        e.contains("the kernel refuses the function tracer")
                            || e.contains("max_graph_depth")
                            || e.contains("options"),
                        "{e}"
                    );
                    if e.contains("refuses") {
                        assert!(e.contains("current_tracer"), "{e}");
                    }
                }
            }
            assert!(!Path::new(root).join("instances").join(&name).exists());
        }
    }
}
