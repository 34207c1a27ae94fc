//! The fctrace agent: a shared object preloaded into the traced program.
//!
//! Its constructor runs before the program's own initialisers: it maps the
//! recorder's shared memory, finds the functions of the program (and with
//! `-l` of its shared libraries), patches each entry with a jump to a stub,
//! and writes the session's symbol table into the trace directory. From
//! then on the generated stubs record every call into per-thread buffers.
//!
//! All unsafe code of fctrace's in-process side lives in this crate; each
//! block says why it is sound. Failures never harm the program: if the
//! agent cannot set itself up, it says so on stderr and leaves the program
//! untraced.
//!
//! The code is in layers, each using only the ones below it (docs/engine.md,
//! "Code layout"): `runtime` < `recording` < `interpose` < `instrument`,
//! and `arch` (which uses `runtime` only). This file holds the constructor
//! and the start-up wiring.

mod arch;
mod instrument;
mod interpose;
mod recording;
mod runtime;

use interpose::process::{self, ENV_DIR, ENV_OPTIONS, ENV_SHM};
use interpose::{signal, unwind};
use recording::filter;
use runtime::log::warn;
use runtime::{alloc, shm, thread, tls};

use std::sync::atomic::Ordering;

/// The configuration the recorder passes through the environment. These
/// variables are removed before the program's own code runs.
struct Config {
    shm: String,
    dir: String,
    /// The path the agent was preloaded from (first in `LD_PRELOAD`, or
    /// second after a sanitizer runtime).
    agent: String,
    /// Set if a traced process exec'd or spawned this program: the slot of
    /// the task that did (u32::MAX if it is unknown).
    parent: Option<u32>,
    /// Filters, triggers and argument specs (`Options::to_wire`), if any.
    options: String,
    /// `FCTRACE_NO_PYTHON` (set, not `0`): an embedded CPython is left
    /// alone (`instrument::python`).
    no_python: bool,
    /// `FCTRACE_PYTHON_PROFILE` (set, not `0`): CPython's functions are
    /// traced through a profile function even where its frame evaluation
    /// function would see them all.
    python_profile: bool,
}

unsafe extern "C" {
    static mut environ: *mut *mut std::ffi::c_char;
}

/// Reads the agent's variables and takes them out of the environment, so
/// that the program sees the one it would see without fctrace: the
/// recorder (or the agent's exec interposers) put them after the
/// program's own, `FCTRACE_*` and the last `LD_PRELOAD` (the one the
/// dynamic loader used; a `LD_PRELOAD` of the user's own stays where it
/// was). The array is edited directly, not through `unsetenv`, which the
/// program may define itself (bash does, working on its shell variables).
/// Their text is also cut from the end of the process's environment area,
/// which `/proc/<pid>/environ` shows.
fn take_config() -> Option<Config> {
    // SAFETY: the constructor runs before any other thread of the program
    // exists; `environ` is the process's NULL-terminated array of C strings.
    unsafe {
        let env = environ;
        if env.is_null() {
            return None;
        }
        let mut n = 0;
        while !(*env.add(n)).is_null() {
            n += 1;
        }
        let text = |i: usize| std::ffi::CStr::from_ptr(*env.add(i)).to_bytes();
        if !(0..n).any(|i| text(i).starts_with(b"FCTRACE_SHM=")) {
            return None;
        }
        let last_preload = (0..n).rev().find(|&i| text(i).starts_with(b"LD_PRELOAD="));
        let ours: Vec<bool> = (0..n)
            .map(|i| text(i).starts_with(b"FCTRACE_") || Some(i) == last_preload)
            .collect();
        let value = |key: &str| -> Option<String> {
            (0..n).filter(|&i| ours[i]).find_map(|i| {
                text(i)
                    .strip_prefix(key.as_bytes())
                    .and_then(|r| r.strip_prefix(b"="))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            })
        };
        let cfg = Config {
            shm: value(ENV_SHM)?,
            dir: value(ENV_DIR).unwrap_or_default(),
            // First, unless a sanitizer runtime comes before it.
            agent: value("LD_PRELOAD")
                .and_then(|v| {
                    v.split([':', ' '])
                        .filter(|s| !s.is_empty())
                        .find(|s| !fctrace_symbols::sanitizer::is_runtime(s.as_bytes()))
                        .map(str::to_string)
                })
                .unwrap_or_default(),
            // Set (to a slot, or "-" if unknown) when a traced process
            // exec'd this.
            parent: value(process::ENV_PARENT).map(|v| v.parse().unwrap_or(u32::MAX)),
            options: value(ENV_OPTIONS).unwrap_or_default(),
            no_python: value("FCTRACE_NO_PYTHON").is_some_and(|v| !v.is_empty() && v != "0"),
            python_profile: value("FCTRACE_PYTHON_PROFILE")
                .is_some_and(|v| !v.is_empty() && v != "0"),
        };
        let mut removed = Vec::new();
        let mut w = 0;
        for (r, &is_ours) in ours.iter().enumerate() {
            let p = *env.add(r);
            if is_ours {
                removed.push((p as u64, text(r).len() + 1));
            } else {
                *env.add(w) = p;
                w += 1;
            }
        }
        for k in w..=n {
            *env.add(k) = std::ptr::null_mut();
        }
        let kept: Vec<(u64, usize)> = (0..w)
            .map(|i| (*env.add(i) as u64, text(i).len() + 1))
            .collect();
        hide_environment_tail(&removed, &kept);
        Some(cfg)
    }
}

/// The kernel's view of the memory layout (`prctl(PR_SET_MM_MAP)`).
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: *mut u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// Cuts the removed variables' text (`removed`: address and length with
/// the NUL) from the end of the environment area that the kernel shows as
/// `/proc/<pid>/environ`, when it is all there, after every variable the
/// program keeps (`kept`), and zeroes it. Without the kernel's consent
/// (`PR_SET_MM_MAP` needs CONFIG_CHECKPOINT_RESTORE) the area stays as it is.
fn hide_environment_tail(removed: &[(u64, usize)], kept: &[(u64, usize)]) {
    let Some(cut) = removed.iter().map(|r| r.0).min() else {
        return;
    };
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the command name, which may hold spaces: field 3 first.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return;
    };
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    let field = |n: usize| f.get(n - 3).copied().unwrap_or(0);
    let (env_start, env_end) = (field(50), field(51));
    let inside = |&(a, l): &(u64, usize)| a >= env_start && a + l as u64 <= env_end;
    if env_end == 0
        || !removed.iter().all(inside)
        || removed.iter().map(|r| r.0 + r.1 as u64).max() != Some(env_end)
        || removed.iter().map(|r| r.1 as u64).sum::<u64>() != env_end - cut
        || kept
            .iter()
            .any(|&(a, l)| inside(&(a, l)) && a + l as u64 > cut)
    {
        return;
    }
    // SAFETY: brk(0) only reports the current break.
    let brk = unsafe { libc::syscall(libc::SYS_brk, 0) } as u64;
    let map = MmMap {
        start_code: field(26),
        end_code: field(27),
        start_data: field(45),
        end_data: field(46),
        start_brk: field(47),
        brk,
        start_stack: field(28),
        arg_start: field(48),
        arg_end: field(49),
        env_start,
        env_end: cut,
        auxv: std::ptr::null_mut(),
        auxv_size: 0,
        exe_fd: u32::MAX,
    };
    const PR_SET_MM: i32 = 35;
    const PR_SET_MM_MAP: u64 = 14;
    // SAFETY: the kernel reads the structure; every field is the current
    // value but env_end, moved back over text nothing refers to any more.
    let r = unsafe {
        libc::prctl(
            PR_SET_MM,
            PR_SET_MM_MAP,
            &map as *const MmMap,
            std::mem::size_of::<MmMap>(),
            0,
        )
    };
    if r == 0 {
        // SAFETY: the removed variables' text, in the stack's environment
        // area, no longer referred to.
        unsafe { std::ptr::write_bytes(cut as *mut u8, 0, (env_end - cut) as usize) };
    }
}

extern "C" fn agent_init() {
    // Before anything that makes a system call (the allocator's first
    // mapping, reading the environment into strings).
    let traced = traced_by_environment();
    if traced {
        // (Nothing is patched yet.) One span: the set-up's own spans
        // nest in it.
        tls::set_mark_depth(1);
        tls::kernel_mark(fctrace_format::shm::KERNEL_MARK_BEGIN);
    }
    {
        // A message the program's sanitizer runtime or another library's
        // constructor left for `dlerror()` stays for the program.
        let _kept = runtime::dlerror::Kept::new();
        agent_setup();
    }
    if traced {
        // Still the agent's (with -l, libc's `syscall` is traced now).
        let _quiet = tls::Busy::quiet();
        tls::set_mark_depth(0);
        tls::kernel_mark(fctrace_format::shm::KERNEL_MARK_END);
    }
}

/// Whether the environment names fctrace's shared memory, read without
/// allocating.
fn traced_by_environment() -> bool {
    // SAFETY: the constructor runs before the program's threads exist;
    // `environ` is a NULL-terminated array of C strings.
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return false;
        }
        while !(*p).is_null() {
            if std::ffi::CStr::from_ptr(*p)
                .to_bytes()
                .starts_with(b"FCTRACE_SHM=")
            {
                return true;
            }
            p = p.add(1);
        }
    }
    false
}

fn agent_setup() {
    let _busy = tls::Busy::enter();
    process::resolve_early();
    // Everything the set-up allocates is freed inside this call, while the
    // thread is marked busy, so that none of it is traced (-l).
    setup();
}

fn setup() {
    let Some(cfg) = take_config() else { return };
    match std::panic::catch_unwind(|| start(&cfg, None)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn(&format!("cannot trace this program: {e}")),
        Err(_) => warn("internal error while setting up tracing; the program runs untraced"),
    }
}

/// The entry point that `fctrace -p` calls in the process it attaches to
/// (through ptrace, on one of its threads, after loading the agent with
/// `dlopen`; every other thread of the process is stopped meanwhile).
/// `config`: the variables a preloaded agent reads from its environment,
/// `NAME=value` strings one after the other, each NUL-terminated, and an
/// empty one at the end. `threads`: the process's threads (this one too,
/// as it was when stopped), `n_words` words: per thread its id, TLS base,
/// instruction pointer (no patch may cut an instruction one of them is
/// about to run), and its frames (`instrument::adopt::parse`): the calls
/// they are in become their first traced calls. Returns 0, or -1 with the
/// reason in `err` (NUL-terminated, truncated to `err_len`).
///
/// # Safety
/// `config` is such a list; `threads` holds `n_words` words; `err` has
/// room for `err_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fctrace_agent_attach(
    config: *const std::ffi::c_char,
    threads: *const u64,
    n_words: usize,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    let _busy = tls::Busy::enter();
    // SAFETY: the caller's list of NUL-terminated strings, ended by an
    // empty one.
    let vars = unsafe {
        let mut vars = Vec::new();
        let mut p = config;
        while !p.is_null() && *p != 0 {
            let s = std::ffi::CStr::from_ptr(p);
            vars.push(s.to_string_lossy().into_owned());
            p = p.add(s.to_bytes().len() + 1);
        }
        vars
    };
    // SAFETY: the caller's array of `n_words` words.
    let words =
        unsafe { std::slice::from_raw_parts(threads, if threads.is_null() { 0 } else { n_words }) };
    let Some(stopped) = instrument::adopt::parse(words) else {
        return fail(err, err_len, "bad list of threads from fctrace");
    };
    let rips: Vec<u64> = stopped.iter().map(|t| t.rip).collect();
    let value = |key: &str| {
        vars.iter()
            .find_map(|v| v.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .map(str::to_string)
    };
    let result = match value(ENV_SHM) {
        None => Err("no shared memory named".to_string()),
        // (A preloaded agent has a session: it is not marked attached.)
        Some(_) if shm::session() != 0 || shm::set_attached() => {
            Err("the agent is already tracing this process".to_string())
        }
        Some(shm) => {
            let cfg = Config {
                shm,
                dir: value(ENV_DIR).unwrap_or_default(),
                agent: value("FCTRACE_AGENT").unwrap_or_default(),
                parent: None,
                options: value(ENV_OPTIONS).unwrap_or_default(),
                // (Attached, Python functions are set up apart.)
                no_python: true,
                python_profile: false,
            };
            shm::set_attach_tids(
                value("FCTRACE_TIDS")
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|t| t.parse().ok())
                    .collect(),
            );
            // (Each attach brings its own options: `start` sets them up
            // anew, whatever an earlier attach gave.)
            let r = match std::panic::catch_unwind(|| {
                start(&cfg, Some(&rips))?;
                instrument::adopt::adopt(&stopped);
                Ok(())
            }) {
                Ok(r) => r,
                Err(_) => Err("internal error while setting up tracing".to_string()),
            };
            // Nothing of a failed start stays.
            if r.is_err() {
                teardown();
            }
            r
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => fail(err, err_len, &e),
    }
}

/// The entry point that `fctrace` calls to detach from a process it
/// attached to (`-p`), on one of its threads while every other one is
/// stopped. `threads`: per thread of the process (this one included, as
/// it was when stopped), three words: thread id, instruction pointer and
/// TLS base (`fs`). Returns 2 + i without changing anything if thread i
/// of the list is in the agent's code or in generated code (fctrace moves
/// it on a few instructions and calls again); else puts the program back as it was: every
/// traced frame's return address, every byte of code and GOT word the
/// agent wrote, the signal actions it took; hands each thread's last
/// events to the recorder; unmaps the generated code, the shadow stacks
/// and the shared memory; and returns 0. -1: `err` says what could not be
/// undone (NUL-terminated, truncated to `err_len`).
///
/// # Safety
/// `threads` holds `3 * n` words, of the process's threads, stopped (but
/// this one); `err` has room for `err_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fctrace_agent_detach(
    threads: *const u64,
    n: usize,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    // SAFETY: the caller's array of 3 * n words.
    let list =
        unsafe { std::slice::from_raw_parts(threads, if threads.is_null() { 0 } else { 3 * n }) };
    let off = tls::offset();
    // The busy words first: this thread's is still as it was when stopped.
    for (i, t) in list.chunks_exact(3).enumerate() {
        let fs = t[2];
        let busy = if fs == 0 {
            0
        } else {
            // SAFETY: the thread's static TLS block, which holds the
            // agent's words at `off` from its thread pointer (it exists:
            // the agent was loaded before it was stopped, or the thread
            // was made since).
            unsafe { ((fs as i64 + off + 8) as *const u64).read_volatile() }
        };
        if busy != 0 && busy != tls::BUSY_UNTRACED {
            return 2 + i as i32;
        }
    }
    let _busy = tls::Busy::enter();
    if let Some(i) = list
        .chunks_exact(3)
        .position(|t| runtime::journal::inside(t[1]) || runtime::frames::in_agent(t[1]))
    {
        return 2 + i as i32;
    }
    let Some(shm) = shm::get() else {
        return fail(err, err_len, "the agent is not tracing this process");
    };
    if !shm::attached() {
        return fail(
            err,
            err_len,
            "the process was started under fctrace (its agent preloaded): it cannot be detached",
        );
    }
    // The stubs go: the agent's forwarding enters real functions at their
    // entries again.
    runtime::real::clear_bypasses(0, u64::MAX);
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    // Each stopped thread's state, found through its own TLS word (not its
    // id, which may be another PID namespace's number): its frames' return
    // addresses back, its last events handed over, its words cleared (a
    // thread left untraced may be traced at a later attach).
    for t in list.chunks_exact(3).filter(|t| t[2] != 0) {
        let word = (t[2] as i64 + off) as *mut u64;
        // SAFETY: the stopped thread's TLS words, as above; a non-null
        // state word points to one of the agent's states (never freed).
        unsafe {
            if word.add(1).read_volatile() == tls::BUSY_UNTRACED {
                word.add(1).write_volatile(0);
            }
            let st = word.read_volatile() as *mut runtime::state::ThreadState;
            if let Some(st) = st.as_mut() {
                runtime::frames::restore_all(st);
                runtime::buffer::release_parked(shm, st);
                if st.buf == shm.buffer(st.buf_index) {
                    shm.release(st.buf_index);
                }
                st.buf = shm::scratch_buffer();
            }
            word.write_volatile(0);
            word.add(2).write_volatile(0);
        }
    }
    // Every state (of threads that ended too): shadow stack unmapped, free
    // for reuse.
    thread::each_state(|st| {
        if st.pid != me {
            return;
        }
        if st.shadow_len != 0 {
            // SAFETY: the shadow stack's mapping, no longer used: its
            // thread is stopped outside the agent, or gone.
            unsafe { libc::munmap(st.shadow_map as *mut libc::c_void, st.shadow_len) };
            st.shadow_map = 0;
            st.shadow_len = 0;
        }
        if !st.adopt.is_null() {
            // SAFETY: made by `Box::into_raw` (`instrument::adopt`), owned
            // by the state, never recorded (the thread made no event).
            drop(unsafe { Box::from_raw(st.adopt) });
            st.adopt = std::ptr::null_mut();
        }
        st.free.store(1, Ordering::Release);
    });
    let failed = teardown();
    if failed > 0 {
        return fail(
            err,
            err_len,
            &format!("{failed} code patches could not be undone"),
        );
    }
    0
}

/// What attaching set up, undone (threads' states aside): code and GOT
/// words, generated code, signal actions, the shared memory. Returns the
/// writes that could not be undone.
fn teardown() -> usize {
    instrument::python::detach();
    let failed = runtime::journal::undo();
    unwind::detach();
    interpose::context::detach();
    signal::detach();
    process::detach();
    instrument::dlopen::detach();
    instrument::sanitizer::detach();
    filter::forget_ranges();
    shm::close();
    failed
}

/// Writes `msg` into the caller's buffer; -1.
fn fail(err: *mut u8, err_len: usize, msg: &str) -> i32 {
    if !err.is_null() && err_len > 0 {
        let n = msg.len().min(err_len - 1);
        // SAFETY: the caller's buffer of `err_len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), err, n);
            *err.add(n) = 0;
        }
    }
    -1
}

/// Starts tracing. `attaching`: loaded into a running process, whose other
/// threads are stopped at these instruction pointers; None: preloaded.
fn start(cfg: &Config, attaching: Option<&[u64]>) -> Result<(), String> {
    let options = fctrace_options::Options::from_wire(&cfg.options)
        .map_err(|e| format!("bad options from the recorder: {e}"))?;
    let signal_triggers = options.signals.clone();
    recording::select::init(&options);
    instrument::sdt::init(&options);
    filter::init(options);
    let shm = shm::Shm::open(&cfg.shm)?;
    if !shm.recording() {
        // A program started after the recorder stopped (or died) runs
        // untraced, and quietly: its output is its own.
        shm.note_untraced_thread();
        return Ok(());
    }
    let sid = shm.header().next_session.fetch_add(1, Ordering::Relaxed);
    shm::set_session(sid);
    let nest = shm.header().flags & fctrace_format::shm::FLAG_NEST_LIBCALL != 0;
    // (An earlier attach's `-k` may have set it.)
    tls::KERNEL_MARKS.store(
        shm.header().flags & fctrace_format::shm::FLAG_KERNEL != 0,
        Ordering::Relaxed,
    );
    if attaching.is_some() {
        filter::want_ranges();
        for e in instrument::imports::bind_interposers() {
            warn(&format!("attaching: {e}"));
        }
        unwind::redirect_unwinder(attaching.unwrap_or(&[]));
        interpose::context::redirect_switches(attaching.unwrap_or(&[]));
    }
    instrument::start::instrument_process(shm, sid, &cfg.dir, nest, attaching.unwrap_or(&[]))?;
    instrument::sanitizer::install(attaching.unwrap_or(&[]));
    let (parent, origin) = match cfg.parent {
        Some(p) => (p, fctrace_format::shm::ORIGIN_EXEC),
        None => (u32::MAX, fctrace_format::shm::ORIGIN_START),
    };
    // Attaching, every thread (this one too) registers at its first
    // traced call.
    if attaching.is_none() && thread::init_thread(shm, sid, parent, origin).is_none() {
        return Err("cannot register the main thread".into());
    }
    unwind::watch_thread_exit();
    runtime::buffer::set_on_adopted(unwind::watch_thread_exit);
    process::init(&cfg.shm, &cfg.dir, &cfg.agent, &cfg.options);
    signal::init();
    signal::init_triggers(&signal_triggers);
    // An embedded CPython's functions (attached: through the frame
    // evaluation function only, where the version allows it).
    if attaching.is_none() && !cfg.no_python {
        instrument::python::prepare(cfg.python_profile);
    } else if attaching.is_some() {
        instrument::python::attach();
    }
    // Once, however many times fctrace attaches.
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers plain extern "C" handlers.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    });
    Ok(())
}

// Nothing is recorded while fork runs; the child then becomes a task of
// its own.
extern "C" fn fork_prepare() {
    tls::set_busy(tls::busy() + 1);
}

extern "C" fn fork_parent() {
    tls::set_busy(tls::busy().saturating_sub(1));
}

extern "C" fn fork_child() {
    // (Its system calls are the agent's, for `record -k`: a new thread
    // for the recorder, so the mark is made whatever spans the forking
    // thread had open, which stay open in the child and end there.)
    let marks = tls::KERNEL_MARKS.load(Ordering::Relaxed);
    let open = tls::mark_depth();
    if marks {
        tls::kernel_mark(fctrace_format::shm::KERNEL_MARK_BEGIN);
        tls::set_mark_depth(open + 1);
    }
    alloc::ALLOC.after_fork_child();
    if let Some(shm) = shm::get() {
        thread::after_fork_child(shm);
    }
    if marks {
        tls::mark_end();
    }
    tls::set_busy(tls::busy().saturating_sub(1));
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = agent_init;
