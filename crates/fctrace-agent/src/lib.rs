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

mod alloc;
mod args;
mod context;
mod filter;
mod instrument;
mod interpose;
mod process;
mod shm;
mod signal;
mod thread;
mod tls;
mod unwind;
mod x86_64;

use std::sync::atomic::{AtomicU32, Ordering};

static SESSION: AtomicU32 = AtomicU32::new(0);

pub(crate) fn session() -> u32 {
    SESSION.load(Ordering::Relaxed)
}

/// Prints a message and stops the program: used only where continuing
/// would corrupt it.
pub(crate) fn fatal(msg: &str) -> ! {
    let line = format!("fctrace agent: fatal: {msg}\n");
    // SAFETY: write(2) of a valid buffer.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    std::process::abort()
}

pub(crate) fn warn(msg: &str) {
    let line = format!("fctrace: {msg}\n");
    // SAFETY: write(2) of a valid buffer.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// A buffer to write into once the recorder is gone, so that the program
/// can finish: its contents are discarded.
pub(crate) fn scratch_buffer() -> *mut fctrace_format::shm::BufHeader {
    use std::sync::atomic::AtomicPtr;
    static SCRATCH: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
    let size = shm::get()
        .map(|s| s.layout.buf_size as usize)
        .unwrap_or(65536);
    let mut p = SCRATCH.load(Ordering::Acquire);
    if p.is_null() {
        p = Box::leak(vec![0u8; size].into_boxed_slice()).as_mut_ptr();
        SCRATCH.store(p, Ordering::Release);
    }
    let h = p as *mut fctrace_format::shm::BufHeader;
    // SAFETY: the scratch buffer is at least a header long; pos is atomic.
    unsafe {
        (*h).pos.store(
            fctrace_format::shm::BUF_HEADER_SIZE as u64,
            Ordering::Relaxed,
        )
    };
    h
}

/// The configuration the recorder passes through the environment. These
/// variables are removed before the program's own code runs.
struct Config {
    shm: String,
    dir: String,
    /// The path the agent was preloaded from (first in `LD_PRELOAD`).
    agent: String,
    /// Set if a traced process exec'd or spawned this program: the slot of
    /// the task that did (u32::MAX if it is unknown).
    parent: Option<u32>,
    /// Filters, triggers and argument specs (`Options::to_wire`), if any.
    options: String,
}

pub(crate) const ENV_SHM: &str = "FCTRACE_SHM";
pub(crate) const ENV_DIR: &str = "FCTRACE_DIR";
pub(crate) const ENV_PRELOAD: &str = "FCTRACE_LD_PRELOAD";
pub(crate) const ENV_OPTIONS: &str = "FCTRACE_OPTIONS";

fn take_config() -> Option<Config> {
    let shm = std::env::var(ENV_SHM).ok()?;
    let dir = std::env::var(ENV_DIR).unwrap_or_default();
    let agent = std::env::var("LD_PRELOAD")
        .ok()
        .and_then(|v| {
            v.split([':', ' '])
                .find(|s| !s.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_default();
    // Set (to a slot, or "-" if unknown) when a traced process exec'd this.
    let parent = std::env::var(process::ENV_PARENT)
        .ok()
        .map(|v| v.parse().unwrap_or(u32::MAX));
    // Give the program back the environment it was started with.
    let options = std::env::var(ENV_OPTIONS).unwrap_or_default();
    let orig_preload = std::env::var_os(ENV_PRELOAD);
    // SAFETY: the constructor runs before any other thread of the program exists.
    unsafe {
        std::env::remove_var(ENV_SHM);
        std::env::remove_var(ENV_DIR);
        std::env::remove_var(ENV_PRELOAD);
        std::env::remove_var(ENV_OPTIONS);
        std::env::remove_var(process::ENV_PARENT);
        match orig_preload {
            Some(v) if !v.is_empty() && v != "\0" => std::env::set_var("LD_PRELOAD", v),
            _ => std::env::remove_var("LD_PRELOAD"),
        }
    }
    Some(Config {
        shm,
        dir,
        agent,
        parent,
        options,
    })
}

extern "C" fn agent_init() {
    let _busy = tls::Busy::enter();
    process::resolve_early();
    // Everything the set-up allocates is freed inside this call, while the
    // thread is marked busy, so that none of it is traced (-l).
    setup();
}

fn setup() {
    let Some(cfg) = take_config() else { return };
    match std::panic::catch_unwind(|| start(&cfg)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn(&format!("cannot trace this program: {e}")),
        Err(_) => warn("internal error while setting up tracing; the program runs untraced"),
    }
}

fn start(cfg: &Config) -> Result<(), String> {
    if !x86_64::codegen::has_xsave() {
        return Err("this CPU lacks xsave".into());
    }
    let options = fctrace_options::Options::from_wire(&cfg.options)
        .map_err(|e| format!("bad options from the recorder: {e}"))?;
    let signal_triggers = options.signals.clone();
    filter::init(options);
    let shm = shm::Shm::open(&cfg.shm)?;
    let sid = shm.header().next_session.fetch_add(1, Ordering::Relaxed);
    SESSION.store(sid, Ordering::Relaxed);
    let nest = shm.header().flags & fctrace_format::shm::FLAG_NEST_LIBCALL != 0;
    instrument::instrument_process(shm, sid, &cfg.dir, nest)?;
    let (parent, origin) = match cfg.parent {
        Some(p) => (p, fctrace_format::shm::ORIGIN_EXEC),
        None => (u32::MAX, fctrace_format::shm::ORIGIN_START),
    };
    if thread::init_thread(shm, sid, parent, origin).is_none() {
        return Err("cannot register the main thread".into());
    }
    process::init(&cfg.shm, &cfg.dir, &cfg.agent, &cfg.options);
    signal::init();
    signal::init_triggers(&signal_triggers);
    // SAFETY: registers plain extern "C" handlers.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
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
    alloc::ALLOC.after_fork_child();
    if let Some(shm) = shm::get() {
        thread::after_fork_child(shm);
    }
    tls::set_busy(tls::busy().saturating_sub(1));
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = agent_init;
