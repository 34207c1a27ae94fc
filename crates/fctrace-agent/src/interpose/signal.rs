//! Signals: marking handlers in the trace, showing fatal signals where they
//! happened, and keeping buffers safe when a signal lands in the hot path.
//!
//! * Handlers. The agent interposes every libc entry that installs a
//!   handler (`sigaction`, `__sigaction`, `signal`, `bsd_signal`,
//!   `ssignal`, `sysv_signal`, `__sysv_signal`, `sigset`: glibc's `signal`
//!   family calls its internal sigaction, not the exported one). For a
//!   program handler, the kernel is given the agent's [`signal_entry`]
//!   instead, with the program's flags and mask unchanged; a per-signal
//!   table keeps the program's handler. The entry records a `Signal` event
//!   (when the thread is traced and the agent is not busy on it), then
//!   *jumps* to the program's handler with the kernel's rdi/rsi/rdx/rax: the
//!   handler returns straight to the kernel's restorer, so backtraces taken
//!   in it, and unwinding through the signal frame, are unchanged. Queries
//!   (`sigaction`'s old action, `signal`'s return value) show the program's
//!   handler, never the entry.
//! * Fatal signals without a handler (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
//!   SIGABRT, SIGTRAP, SIGSYS) that keep their default action get an
//!   invisible agent handler (queries show the default action; a program
//!   handler replaces it). It records a `Signal` event, puts the default
//!   action back, and lets the signal take its effect: a fault raised by an
//!   instruction (SIGSEGV, SIGBUS, SIGILL, SIGFPE sent by the kernel)
//!   returns to re-execute it, everything else is raised again (it stays
//!   pending while the handler runs and is delivered at its return). The
//!   process dies by the same signal, with the same core dump.
//! * A signal that interrupts the common block between reserving an event
//!   slot (`xadd`) and writing it: if the handler's events then switch
//!   buffers, the interrupted write still goes to the old buffer after the
//!   handler returns. The old buffer is therefore *parked* instead of
//!   handed to the recorder, and handed over at the thread's next switch
//!   (in order, before the newer one).
//! * The trap fallback. A function no jump fits has a one-byte `int3` at
//!   its entry (`x86_64::patch::plan_trap`); the SIGTRAP it raises reaches
//!   the agent's entry (the marker, or the entry in front of the program's
//!   own SIGTRAP handler, or the entry kept while the program ignores
//!   SIGTRAP), which first asks [`agent_trap`]: an int3 of the agent's
//!   resumes at the function's stub, anything else goes on as any SIGTRAP
//!   would. While trap functions exist, SIGTRAP is never blocked: not in a
//!   handler's mask, not by `sigprocmask`/`pthread_sigmask`, and the
//!   program's SIGTRAP handler runs with SA_NODEFER (the kernel kills a
//!   thread whose int3 raises a blocked SIGTRAP); queries show what the
//!   program asked for.

use crate::interpose::forwarded;
use crate::recording::filter;
use crate::runtime::buffer::{self, PENDING};
use crate::runtime::shm;
use crate::runtime::state::{ShadowEntry, ThreadState, E_DEPTH, OFF_SHADOW_TOP, SHADOW_ENTRY_SIZE};
use crate::runtime::tls;
use fctrace_format::event::EventKind;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Signal numbers are 1..NSIG.
const NSIG: usize = 65;

/// [`ACTIONS`] value: the kernel's action is not the agent's entry.
const NONE: usize = 0;
/// [`ACTIONS`] value: the agent's fatal-signal marker is installed.
const MARKER: usize = 1;
/// [`ACTIONS`] value: a `--signal` trigger's entry is installed while the
/// program's disposition is SIG_DFL or SIG_IGN ([`PROG_DISP`]): the entry
/// switches tracing and returns, whatever that disposition.
const TMARK: usize = 2;

/// Per signal: the `--signal` actions (`TRIG_*` bits), 0 for none.
static TRIGGERS: [AtomicU8; NSIG] = [const { AtomicU8::new(0) }; NSIG];
/// Per signal under [`TMARK`]: the program's disposition (SIG_DFL, SIG_IGN).
static PROG_DISP: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
const TRIG_ON: u8 = 1;
const TRIG_OFF: u8 = 2;
const TRIG_FINISH: u8 = 4;

/// Per signal: `NONE`, `MARKER`, or the program's handler address (which
/// the kernel reaches through [`signal_entry`]).
static ACTIONS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(NONE) }; NSIG];
/// Per signal: the program's `sa_flags` for its handler.
static USER_FLAGS: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];
/// Per signal under the marker: the default action it hides (flags, first
/// mask word, restorer), as the kernel had it.
static ORIG_FLAGS: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];
static ORIG_MASK: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];
static ORIG_RESTORER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];

static ENABLED: AtomicBool = AtomicBool::new(false);

const FATAL: [i32; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
    libc::SIGSYS,
];

fn is_fatal(sig: i32) -> bool {
    FATAL.contains(&sig)
}

fn in_range(sig: i32) -> bool {
    sig >= 1 && (sig as usize) < NSIG
}

/// A program handler, as opposed to SIG_DFL, SIG_IGN, SIG_HOLD (2) or
/// SIG_ERR (-1).
fn is_user_handler(h: usize) -> bool {
    h > 2 && h != usize::MAX
}

// ---------------------------------------------------------------------------
// The entry the kernel calls
// ---------------------------------------------------------------------------

/// What the kernel runs for every signal whose program handler the agent
/// wraps. rdi = signal, rsi = siginfo, rdx = ucontext (x86_64 Linux sets
/// all three for every handler), rax = 0. `on_signal` returns the address
/// to continue at; the arguments are put back and the entry jumps there,
/// so the handler's return address is the kernel's restorer.
///
/// Naked: its stack use is exactly the kernel's frame, and the registers
/// it passes on are the kernel's, whatever the compiler would do.
#[unsafe(naked)]
extern "C" fn signal_entry() {
    core::arch::naked_asm!(
        "endbr64",
        "push rdi",
        "push rsi",
        "push rdx",
        "push rax",
        "sub rsp, 8", // 16-byte alignment for the call
        "call {on}",
        "mov r11, rax",
        "add rsp, 8",
        "pop rax",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "jmp r11",
        on = sym on_signal,
    );
}

/// Where the entry goes when there is no program handler to run: the
/// signal frame is the agent's alone (an int3 of the trap fallback, the
/// crash marker, a trigger), and so is the `rt_sigreturn` that ends it.
/// Returning to the kernel's restorer (`mov eax, 15; syscall`) with r8 and
/// r9 set to `fctrace_format::shm::KERNEL_TAG` marks that call for
/// `record -k` (rt_sigreturn reads no argument; it restores every register
/// from the frame).
#[unsafe(naked)]
extern "C" fn return_to_kernel() {
    core::arch::naked_asm!(
        "endbr64",
        "movabs r8, {t0}",
        "movabs r9, {t1}",
        "ret",
        t0 = const fctrace_format::shm::KERNEL_TAG[0],
        t1 = const fctrace_format::shm::KERNEL_TAG[1],
    );
}

fn entry_addr() -> usize {
    signal_entry as *const () as usize
}

/// One generated common block: its range, and the few instructions of its
/// shadow-stack updates that a signal must not split (see [`fix_interrupted`]).
struct Hot {
    lo: AtomicU64,
    hi: AtomicU64,
    /// `entry`: where it starts over after its three pushes (`retry`).
    retry: AtomicU64,
    /// `entry`: from the instruction after the `xadd` that reserves a
    /// shadow entry up to (excluded) the first one after its last store.
    push_lo: AtomicU64,
    push_hi: AtomicU64,
    /// `exit`: the two instructions after the slot's real return address is
    /// put back and up to the pop (included); and the one after the pop.
    pop_lo: AtomicU64,
    pop_store: AtomicU64,
    pop_next: AtomicU64,
    /// The same for the generated `-N` entry and exit (with filters;
    /// `x86_64::codegen::NotraceWindows`).
    n_restart: AtomicU64,
    n_push_lo: AtomicU64,
    n_push_hi: AtomicU64,
    n_pop: AtomicU64,
    n_pop_next: AtomicU64,
    n_close_lo: AtomicU64,
    n_close_hi: AtomicU64,
    x_tail: AtomicU64,
    /// The generated `-F` entry's and exit's windows (with filters;
    /// `x86_64::codegen::RegionWindows`).
    f_check: AtomicU64,
    f_push_lo: AtomicU64,
    f_counted: AtomicU64,
    f_open_hi: AtomicU64,
    f_pop_lo: AtomicU64,
    f_pop: AtomicU64,
    f_uncounted: AtomicU64,
    f_close_hi: AtomicU64,
    /// The fast flagged entry's and the fast `-R` exit's windows (with
    /// filters), as `entry`'s and `exit`'s.
    a_retry: AtomicU64,
    a_push_lo: AtomicU64,
    a_push_hi: AtomicU64,
    r_pop_lo: AtomicU64,
    r_pop_store: AtomicU64,
    r_pop_next: AtomicU64,
    d_hi: AtomicU64,
    d_close_lo: AtomicU64,
    d_close_hi: AtomicU64,
}

const MAX_HOT: usize = 256;
static HOT: [Hot; MAX_HOT] = [const {
    Hot {
        lo: AtomicU64::new(0),
        hi: AtomicU64::new(0),
        retry: AtomicU64::new(0),
        push_lo: AtomicU64::new(0),
        push_hi: AtomicU64::new(0),
        pop_lo: AtomicU64::new(0),
        pop_store: AtomicU64::new(0),
        pop_next: AtomicU64::new(0),
        n_restart: AtomicU64::new(0),
        n_push_lo: AtomicU64::new(0),
        n_push_hi: AtomicU64::new(0),
        n_pop: AtomicU64::new(0),
        n_pop_next: AtomicU64::new(0),
        n_close_lo: AtomicU64::new(0),
        n_close_hi: AtomicU64::new(0),
        x_tail: AtomicU64::new(0),
        f_check: AtomicU64::new(0),
        f_push_lo: AtomicU64::new(0),
        f_counted: AtomicU64::new(0),
        f_open_hi: AtomicU64::new(0),
        f_pop_lo: AtomicU64::new(0),
        f_pop: AtomicU64::new(0),
        f_uncounted: AtomicU64::new(0),
        f_close_hi: AtomicU64::new(0),
        a_retry: AtomicU64::new(0),
        a_push_lo: AtomicU64::new(0),
        a_push_hi: AtomicU64::new(0),
        r_pop_lo: AtomicU64::new(0),
        r_pop_store: AtomicU64::new(0),
        r_pop_next: AtomicU64::new(0),
        d_hi: AtomicU64::new(0),
        d_close_lo: AtomicU64::new(0),
        d_close_hi: AtomicU64::new(0),
    }
}; MAX_HOT];
static HOT_LEN: AtomicUsize = AtomicUsize::new(0);

/// Called for each common block (`x86_64::codegen`) as it is placed at
/// `at`: notes its range and finds, by decoding it, the instructions
/// [`fix_interrupted`] needs. If the code does not have the expected shape,
/// only the range is kept.
pub fn note_hot_code(at: u64, code: &[u8]) {
    use iced_x86::{Code, Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let i = HOT_LEN.load(Ordering::Relaxed);
    if i >= MAX_HOT {
        return;
    }
    let h = &HOT[i];
    h.lo.store(at, Ordering::Relaxed);
    h.hi.store(at + code.len() as u64, Ordering::Relaxed);
    let insns: Vec<iced_x86::Instruction> = Decoder::with_ip(64, code, at, DecoderOptions::NONE)
        .into_iter()
        .collect();
    let on_top = |x: &iced_x86::Instruction| {
        x.op0_kind() == OpKind::Memory
            && x.memory_base() == Register::R11
            && x.memory_index() == Register::None
            && x.memory_displacement64() == OFF_SHADOW_TOP as u64
            && x.op1_kind() == OpKind::Register
            && x.op1_register() == Register::RCX
    };
    // entry: push rcx; push rdx; push r11; retry: ...; xadd [r11], rcx;
    // ...three stores...; shl rax, KIND_BITS
    let xadd = insns
        .iter()
        .position(|x| x.mnemonic() == Mnemonic::Xadd && on_top(x));
    let shl = xadd.and_then(|k| {
        insns[k..]
            .iter()
            .position(|x| x.mnemonic() == Mnemonic::Shl)
            .map(|d| k + d)
    });
    let pushes_first = insns.len() > 3 && insns[..3].iter().all(|x| x.mnemonic() == Mnemonic::Push);
    // exit: mov rax, [rcx+16]; mov [r11], rcx (the pop); shl rax, ...
    let pop = insns
        .iter()
        .position(|x| x.code() == Code::Mov_rm64_r64 && on_top(x));
    if let (Some(x), Some(s), true, Some(p)) = (xadd, shl, pushes_first, pop) {
        if p >= 1 && p + 1 < insns.len() && insns[p + 1].mnemonic() == Mnemonic::Shl {
            h.retry.store(insns[3].ip(), Ordering::Relaxed);
            h.push_lo.store(insns[x].next_ip(), Ordering::Relaxed);
            h.push_hi.store(insns[s].ip(), Ordering::Relaxed);
            h.pop_lo.store(insns[p - 1].ip(), Ordering::Relaxed);
            h.pop_store.store(insns[p].ip(), Ordering::Relaxed);
            h.pop_next.store(insns[p + 1].ip(), Ordering::Relaxed);
        }
    }
    HOT_LEN.store(i + 1, Ordering::Release);
}

/// Notes the `-N` and `-F` entries' and exits' windows of the common
/// block at `at` (noted by [`note_hot_code`] just before).
pub fn note_region_windows(at: u64, w: &crate::arch::x86_64::codegen::RegionWindows) {
    if w.push_lo == 0 {
        return;
    }
    let n = HOT_LEN.load(Ordering::Acquire);
    if let Some(h) = HOT[..n]
        .iter()
        .rev()
        .find(|h| h.lo.load(Ordering::Relaxed) == at)
    {
        h.n_restart.store(w.restart, Ordering::Relaxed);
        h.n_pop.store(w.pop, Ordering::Relaxed);
        h.n_pop_next.store(w.pop_next, Ordering::Relaxed);
        h.n_close_lo.store(w.close_lo, Ordering::Relaxed);
        h.n_close_hi.store(w.close_hi, Ordering::Relaxed);
        h.x_tail.store(w.tail, Ordering::Relaxed);
        h.n_push_hi.store(w.push_hi, Ordering::Relaxed);
        h.f_check.store(w.f_check, Ordering::Relaxed);
        h.f_push_lo.store(w.f_push_lo, Ordering::Relaxed);
        h.f_counted.store(w.f_counted, Ordering::Relaxed);
        h.f_open_hi.store(w.f_open_hi, Ordering::Relaxed);
        h.f_pop_lo.store(w.f_pop_lo, Ordering::Relaxed);
        h.f_pop.store(w.f_pop, Ordering::Relaxed);
        h.f_uncounted.store(w.f_uncounted, Ordering::Relaxed);
        h.f_close_hi.store(w.f_close_hi, Ordering::Relaxed);
        h.a_retry.store(w.a_retry, Ordering::Relaxed);
        h.a_push_lo.store(w.a_push_lo, Ordering::Relaxed);
        h.a_push_hi.store(w.a_push_hi, Ordering::Relaxed);
        h.r_pop_lo.store(w.r_pop_lo, Ordering::Relaxed);
        h.r_pop_store.store(w.r_pop_store, Ordering::Relaxed);
        h.r_pop_next.store(w.r_pop_next, Ordering::Relaxed);
        h.d_hi.store(w.d_hi, Ordering::Relaxed);
        h.d_close_lo.store(w.d_close_lo, Ordering::Relaxed);
        h.d_close_hi.store(w.d_close_hi, Ordering::Relaxed);
        h.n_push_lo.store(w.push_lo, Ordering::Release);
    }
}

fn hot_block(rip: u64) -> Option<&'static Hot> {
    let n = HOT_LEN.load(Ordering::Acquire);
    HOT[..n]
        .iter()
        .find(|h| rip >= h.lo.load(Ordering::Relaxed) && rip < h.hi.load(Ordering::Relaxed))
}

/// A signal interrupted the hot path in the middle of a shadow-stack
/// update: make the update whole before the handler runs, so that the
/// handler (a backtrace, an exception, a siglongjmp out of it) sees a
/// consistent shadow stack. In `entry`, between the reservation of an
/// entry and its last store, the reservation is undone and the entry path
/// restarts after the handler (its registers are scratch at that point);
/// in `exit`, between putting the real return address back and the pop,
/// the pop is completed. The generated `-N` and `-F` region entries and
/// exits have windows of their own (`x86_64::codegen::RegionWindows`).
/// All edit the context the kernel restores.
fn fix_interrupted(h: &Hot, st: &mut ThreadState, uc: *mut libc::ucontext_t) {
    let ent = SHADOW_ENTRY_SIZE as u64;
    // SAFETY: the kernel's ucontext for this delivery; the registers named
    // are the interrupted hot path's own (it saved the program's).
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        let rip = g[libc::REG_RIP as usize] as u64;
        let rcx = g[libc::REG_RCX as usize] as u64;
        let top = st.shadow_top as u64;
        // The shadow entry at rcx, reserved (or about to be popped) when
        // the signal came: the top is set to it and the code goes on at
        // `to` (the reservation undone, or the pop done).
        let mut top_to_rcx_then = |to: &AtomicU64| {
            if top == rcx + ent {
                st.shadow_top = rcx as *mut ShadowEntry;
                g[libc::REG_RIP as usize] = to.load(Ordering::Relaxed) as i64;
            }
        };
        let push_lo = h.push_lo.load(Ordering::Relaxed);
        if push_lo != 0 && rip >= push_lo && rip < h.push_hi.load(Ordering::Relaxed) {
            top_to_rcx_then(&h.retry);
            return;
        }
        // (The windows of the filtered variant are noted before n_push_lo.)
        let n_lo = h.n_push_lo.load(Ordering::Acquire);
        // Whether rip is in `lo..hi` of the filtered variant's code.
        let within = |lo: &AtomicU64, hi: &AtomicU64| {
            n_lo != 0 && rip >= lo.load(Ordering::Relaxed) && rip < hi.load(Ordering::Relaxed)
        };
        // The fast flagged entry and the fast -R exit: as `entry` and
        // `exit`.
        if within(&h.a_push_lo, &h.a_push_hi) {
            top_to_rcx_then(&h.a_retry);
            return;
        }
        if n_lo != 0
            && (rip == h.r_pop_lo.load(Ordering::Relaxed)
                || rip == h.r_pop_store.load(Ordering::Relaxed))
        {
            if top == rcx + ent {
                let e = rcx as *const ShadowEntry;
                g[libc::REG_RAX as usize] = (*e).func as i64;
                st.shadow_top = e as *mut ShadowEntry;
                g[libc::REG_RIP as usize] = h.r_pop_next.load(Ordering::Relaxed) as i64;
            }
            return;
        }
        // The -N entry: the same, restarting at its reservation (the
        // region is already counted); its exit: the pop.
        if within(&h.n_push_lo, &h.n_push_hi) {
            top_to_rcx_then(&h.n_restart);
            return;
        }
        if n_lo != 0 && rip == h.n_pop.load(Ordering::Relaxed) {
            top_to_rcx_then(&h.n_pop_next);
            return;
        }
        // Its depth limit (a depth trigger), the shadow entry whole: the
        // limit from before the call put back, the entry taken back, and
        // the checks again.
        if within(&h.a_push_hi, &h.d_hi) {
            if top == rcx + ent {
                let word = (*(rcx as *const ShadowEntry)).func;
                st.shadow_top = rcx as *mut ShadowEntry;
                filter::fix_depth(st, word);
                g[libc::REG_RIP as usize] = h.a_retry.load(Ordering::Relaxed) as i64;
            }
            return;
        }
        // The generated exit of a depth region, popped, its limit not yet
        // stored: made from the state (rax = the popped word; a -R
        // frame's, without E_DEPTH, only passes the first two
        // instructions, which change nothing).
        if within(&h.d_close_lo, &h.d_close_hi) && g[libc::REG_RAX as usize] as u64 & E_DEPTH != 0 {
            filter::fix_depth(st, g[libc::REG_RAX as usize] as u64);
            g[libc::REG_RIP as usize] = h.d_close_hi.load(Ordering::Relaxed) as i64;
            return;
        }
        // The -N exit, its region count down and its limit not yet
        // written: the limit is computed from the state now (the handler
        // may change the state; the store would then undo that) and the
        // exit goes on at its tail.
        if within(&h.n_close_lo, &h.n_close_hi) {
            filter::recompute(st);
            g[libc::REG_RIP as usize] = h.x_tail.load(Ordering::Relaxed) as i64;
            return;
        }
        // The -F entry, from its checks to the open region: everything
        // it did is undone (the region count, the shadow entry) and it
        // starts over at its checks, which see what the handler changed.
        if within(&h.f_check, &h.f_open_hi) {
            if rip >= h.f_push_lo.load(Ordering::Relaxed) {
                if top != rcx + ent {
                    return;
                }
                st.shadow_top = rcx as *mut ShadowEntry;
                if rip >= h.f_counted.load(Ordering::Relaxed) {
                    filter::fix_filter_count(st, true);
                }
            }
            g[libc::REG_RIP as usize] = h.f_check.load(Ordering::Relaxed) as i64;
            return;
        }
        // The -F exit, from the slot's store to the closed region: the
        // pop and the closing are completed.
        if within(&h.f_pop_lo, &h.f_close_hi) {
            if rip <= h.f_pop.load(Ordering::Relaxed) {
                // rcx = the top entry; the slot holds its real return
                // address again.
                if top != rcx + ent {
                    return;
                }
                let e = rcx as *const ShadowEntry;
                g[libc::REG_RAX as usize] = (*e).func as u32 as i64;
                st.shadow_top = e as *mut ShadowEntry;
            }
            let uncount = rip < h.f_uncounted.load(Ordering::Relaxed);
            filter::fix_filter_count(st, uncount);
            g[libc::REG_RIP as usize] = h.f_close_hi.load(Ordering::Relaxed) as i64;
            return;
        }
        let pop_lo = h.pop_lo.load(Ordering::Relaxed);
        if pop_lo != 0 && (rip == pop_lo || rip == h.pop_store.load(Ordering::Relaxed)) {
            // rcx = the top entry, already read; the slot holds its real
            // return address again.
            if top == rcx + ent {
                let e = rcx as *const ShadowEntry;
                g[libc::REG_RAX as usize] = (*e).func as i64;
                st.shadow_top = e as *mut ShadowEntry;
                g[libc::REG_RIP as usize] = h.pop_next.load(Ordering::Relaxed) as i64;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The trap fallback
// ---------------------------------------------------------------------------

/// A function entered through the trap fallback: the `int3` at `at`, its
/// stub, the stub's body (the relocated first instruction, then a jump to
/// the second) and return site (0 for an entry-only stub), and the base of
/// its module (whose traps go when it is unloaded). Or an SDT probe
/// (`-E`, `instrument/sdt.rs`): `event` is its function id (0: a
/// function's trap), the int3 took the probe's 1-byte `nop`, and the
/// program goes on right after it.
#[derive(Clone, Copy, Debug)]
pub struct Trap {
    pub at: u64,
    pub stub: u64,
    pub body: u64,
    pub ret_site: u64,
    pub module: u64,
    pub event: u32,
}

/// What a SIGTRAP was to the agent.
enum TrapHit {
    /// Not one of its int3s.
    No,
    /// A function's entry, sent to its stub.
    Entry,
    /// An SDT probe's (its function id): recorded, and the program goes
    /// on after the probe.
    Probe(u32),
}

/// The traps, sorted by address, read by the handler without a lock: a
/// new table replaces the old one, which is never freed (a handler on
/// another thread may still be reading it; tables change only at start-up
/// and at `dlopen`/`dlclose`).
static TRAPS: std::sync::atomic::AtomicPtr<Vec<Trap>> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
/// Writers of [`TRAPS`] (start-up, the dynamic linker's notifications).
static TRAPS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether any function uses the trap fallback (then SIGTRAP must reach
/// the agent, unblocked).
pub fn traps_active() -> bool {
    let p = TRAPS.load(Ordering::Acquire);
    // SAFETY: a published table is never freed.
    !p.is_null() && !unsafe { &*p }.is_empty()
}

fn replace_traps(f: impl FnOnce(&mut Vec<Trap>)) {
    let _g = TRAPS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let old = TRAPS.load(Ordering::Acquire);
    // SAFETY: a published table is never freed.
    let mut v = if old.is_null() {
        Vec::new()
    } else {
        // SAFETY: a published table is never freed, so `old` stays valid.
        unsafe { &*old }.clone()
    };
    f(&mut v);
    v.sort_by_key(|t| t.at);
    TRAPS.store(Box::into_raw(Box::new(v)), Ordering::Release);
}

/// Whether an int3 would reach a SIGTRAP handler that the agent's entry
/// does not stand in front of: one installed before the agent came
/// (attaching to a process that has one: a Go program has a handler for
/// every signal, and its handler kills the process at an int3 that is not
/// its own). The trap fallback is then not used.
pub fn trap_handler_foreign() -> bool {
    let _busy = tls::Busy::enter();
    // SAFETY: a zeroed sigaction is a valid value; query only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: SIGTRAP's current disposition is only read into `cur`, a valid sigaction.
    if unsafe { real_sigaction(libc::SIGTRAP, std::ptr::null(), &mut cur) } != 0 {
        return true;
    }
    is_user_handler(cur.sa_sigaction) && cur.sa_sigaction != entry_addr()
}

/// Adds traps; called before their int3s are written.
pub fn add_traps(traps: &[Trap]) {
    if traps.is_empty() {
        return;
    }
    replace_traps(|v| v.extend_from_slice(traps));
    if enabled() {
        // A library loaded later (dlopen) brings the first traps.
        ensure_trap_entry();
    }
}

/// Forgets the traps of the module loaded at `base` (it was unloaded).
pub fn drop_traps(base: u64) {
    let p = TRAPS.load(Ordering::Acquire);
    // SAFETY: a published table is never freed.
    if p.is_null() || !unsafe { &*p }.iter().any(|t| t.module == base) {
        return;
    }
    replace_traps(|v| v.retain(|t| t.module != base));
}

fn find_trap(at: u64) -> Option<&'static Trap> {
    let p = TRAPS.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: a published table is never freed nor changed.
    let v: &'static Vec<Trap> = unsafe { &*p };
    v.binary_search_by_key(&at, |t| t.at).ok().map(|i| &v[i])
}

/// The kernel's `si_code` for an int3 (and other traps it raises itself).
const SI_KERNEL: i32 = 0x80;

/// A SIGTRAP: if it is an int3 of the agent's, points the interrupted
/// context at the function's stub and returns true (the signal is then
/// the agent's alone: no event, no program handler). A branch back to the
/// entry from inside a traced call (a loop whose head is the first
/// instruction) is no call: the slot at the stack pointer then holds the
/// stub's return site, and the context goes to the stub's body instead.
/// Async-signal-safe: reads only.
fn agent_trap(uc: *mut c_void) -> TrapHit {
    if uc.is_null() {
        return TrapHit::No;
    }
    // SAFETY: the kernel passes a valid ucontext to the entry (x86_64
    // sets it for every handler). The siginfo is not read: the kernel
    // fills it only for SA_SIGINFO handlers, and the program's need not
    // be one. The address suffices: no instruction starts right after an
    // int3 of the agent's (it took the first byte of one), so no other
    // SIGTRAP can be raised there.
    unsafe {
        let g = &mut (*(uc as *mut libc::ucontext_t)).uc_mcontext.gregs;
        let rip = g[libc::REG_RIP as usize] as u64;
        let Some(t) = find_trap(rip.wrapping_sub(1)) else {
            return TrapHit::No;
        };
        // (The kernel left rip right after the int3: after the probe.)
        if t.event != 0 {
            return TrapHit::Probe(t.event);
        }
        let rsp = g[libc::REG_RSP as usize] as u64;
        // The function's entry: rsp points at a return address (a valid,
        // mapped stack slot).
        let slot = (rsp as *const u64).read();
        let to = if t.ret_site != 0 && slot == t.ret_site {
            t.body
        } else {
            t.stub
        };
        g[libc::REG_RIP as usize] = to as i64;
    }
    TrapHit::Entry
}

/// An SDT probe's hit (`-E`): an entry and an exit of its function id on
/// the thread, where calls are recorded (not in the agent's own work: a
/// probe of a library the agent calls).
fn record_probe(id: u32) {
    if tls::busy() != 0 {
        return;
    }
    let p = tls::state();
    if p.is_null() {
        return;
    }
    let Some(shm) = shm::get() else { return };
    let _busy = tls::Busy::enter();
    // SAFETY: the state belongs to this thread; the agent is not using it
    // (not busy), and the program was interrupted at a probe of its own
    // code, not in the agent's generated code.
    let st = unsafe { &mut *p };
    if filter::active() {
        if st.gen != filter::GLOBAL.load(Ordering::Acquire) {
            filter::resync(st);
        }
        if !filter::records_plain(st) {
            return;
        }
    }
    buffer::append(shm, st, EventKind::Entry, id);
    buffer::append(shm, st, EventKind::Exit, id);
}

/// While traps exist, SIGTRAP reaches the agent's entry whatever the
/// program set: the marker at the default action, the entry (as a
/// trigger-like mark keeping [`PROG_DISP`]) when it is ignored.
fn ensure_trap_entry() {
    if !traps_active() {
        return;
    }
    let _busy = tls::Busy::enter();
    // SAFETY: a zeroed sigaction is a valid value; query only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: SIGTRAP's current disposition is only read into `cur`, a valid sigaction.
    if unsafe { real_sigaction(libc::SIGTRAP, std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    if cur.sa_sigaction == libc::SIG_DFL {
        install_marker(libc::SIGTRAP);
    } else if cur.sa_sigaction == libc::SIG_IGN {
        set_trigger_disp(libc::SIGTRAP, libc::SIG_IGN);
    }
    // A mask is inherited through exec: a program started with SIGTRAP
    // blocked would die at its first trap.
    sigprocmask(libc::SIG_UNBLOCK, &TRAP_BIT, std::ptr::null_mut());
    // Handlers the program installed before the traps came (dlopen).
    for sig in 1..NSIG as i32 {
        if is_user_handler(ACTIONS[sig as usize].load(Ordering::Acquire)) {
            edit_installed_for_traps(sig);
        }
    }
}

/// Per signal: what the agent changed in the program's action for its
/// handler so that traps work (SIGTRAP taken out of its mask; for a
/// SIGTRAP handler, SA_NODEFER added and SA_RESETHAND emulated), undone in
/// what queries show.
static TRAP_EDITS: [AtomicU8; NSIG] = [const { AtomicU8::new(0) }; NSIG];
const EDIT_MASK: u8 = 1;
const EDIT_NODEFER: u8 = 2;
const EDIT_RESETHAND: u8 = 4;
/// SA_SIGINFO added for a signal fctrace passes on (`forwarded`): the
/// entry reads the siginfo the kernel then fills.
const EDIT_SIGINFO: u8 = 8;
const TRAP_BIT: u64 = 1 << (libc::SIGTRAP - 1);

/// Edits a program handler's action before it is installed, while traps
/// exist, and returns the edits: SIGTRAP out of its mask; for a SIGTRAP
/// handler, SA_NODEFER (the int3s of the functions it calls must be
/// delivered) and no SA_RESETHAND (the kernel would reset the action at
/// the agent's own traps: the entry does the reset when the program's
/// handler really runs).
fn edit_for_traps(sig: i32, act: &mut libc::sigaction) -> u8 {
    let mut e = 0;
    if traps_active() {
        let w = mask_word(act);
        if w & TRAP_BIT != 0 {
            set_mask_word(act, w & !TRAP_BIT);
            e |= EDIT_MASK;
        }
        if sig == libc::SIGTRAP && act.sa_flags & libc::SA_NODEFER == 0 {
            act.sa_flags |= libc::SA_NODEFER;
            e |= EDIT_NODEFER;
        }
        if sig == libc::SIGTRAP && act.sa_flags & libc::SA_RESETHAND != 0 {
            act.sa_flags &= !libc::SA_RESETHAND;
            e |= EDIT_RESETHAND;
        }
    }
    if forwarded::passed_on(sig) && act.sa_flags & libc::SA_SIGINFO == 0 {
        act.sa_flags |= libc::SA_SIGINFO;
        e |= EDIT_SIGINFO;
    }
    e
}

/// Undoes [`edit_for_traps`] in an old action shown to the program
/// (`edits`: the edits of the handler it describes).
fn unedit(old: &mut libc::sigaction, edits: u8) {
    if edits & EDIT_MASK != 0 {
        set_mask_word(old, mask_word(old) | TRAP_BIT);
    }
    if edits & EDIT_NODEFER != 0 {
        old.sa_flags &= !libc::SA_NODEFER;
    }
    if edits & EDIT_RESETHAND != 0 {
        old.sa_flags |= libc::SA_RESETHAND;
    }
    if edits & EDIT_SIGINFO != 0 {
        old.sa_flags &= !libc::SA_SIGINFO;
    }
}

/// Once the entry is installed for a program handler by the `signal`
/// family (which build their action inside libc), or when traps appear
/// after the program installed its handlers: edits the kernel's action as
/// [`edit_for_traps`] does.
fn edit_installed_for_traps(sig: i32) {
    if !traps_active() && !forwarded::passed_on(sig) {
        return;
    }
    // The agent's own calls (with -l, libc's sigaction is traced).
    let _busy = tls::Busy::enter();
    // SAFETY: a zeroed sigaction is a valid value; query, then the same
    // action with the edits.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        if real_sigaction(sig, std::ptr::null(), &mut cur) != 0 || cur.sa_sigaction != entry_addr()
        {
            return;
        }
        let e = edit_for_traps(sig, &mut cur);
        if e != 0 {
            TRAP_EDITS[sig as usize].fetch_or(e, Ordering::Relaxed);
            real_sigaction(sig, &cur, std::ptr::null_mut());
        }
    }
}

/// The program's SIGTRAP handler installed with SA_RESETHAND (emulated
/// while traps exist) has just been called: the action becomes the
/// default one, as the kernel would have made it, under the marker.
fn reset_trap_handler() {
    let _busy = tls::Busy::enter();
    let s = libc::SIGTRAP as usize;
    let edits = TRAP_EDITS[s].swap(0, Ordering::Relaxed);
    // SAFETY: a zeroed sigaction is a valid value; query only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: SIGTRAP's current disposition is only read into `cur`, a valid sigaction.
    if unsafe { real_sigaction(libc::SIGTRAP, std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    unedit(&mut cur, edits);
    cur.sa_sigaction = libc::SIG_DFL;
    put_marker(libc::SIGTRAP, &cur);
}

/// The program sets SIGTRAP to its default action while traps exist: the
/// kernel's action goes from the agent's entry (with the program's flags
/// and mask, for what queries show) to the marker, never through SIG_DFL
/// (another thread's trap in between would kill the process).
/// `install(entry)` makes the program's call with the entry as handler.
fn trap_default_via_marker(install: &mut dyn FnMut(usize) -> bool) -> bool {
    let _busy = tls::Busy::enter();
    if !install(entry_addr()) {
        return false;
    }
    // SAFETY: a zeroed sigaction is a valid value; query only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: SIGTRAP's current disposition is only read into `cur`, a valid sigaction.
    if unsafe { real_sigaction(libc::SIGTRAP, std::ptr::null(), &mut cur) } == 0 {
        cur.sa_sigaction = libc::SIG_DFL;
        TRAP_EDITS[libc::SIGTRAP as usize].store(0, Ordering::Relaxed);
        put_marker(libc::SIGTRAP, &cur);
    }
    true
}

/// The program's mask without SIGTRAP while traps exist (`how` as
/// sigprocmask's): the kernel kills a thread whose int3 raises a blocked
/// SIGTRAP.
fn unblock_trap(
    how: i32,
    set: *const libc::sigset_t,
    copy: &mut libc::sigset_t,
) -> *const libc::sigset_t {
    if set.is_null() || how == libc::SIG_UNBLOCK || !traps_active() {
        return set;
    }
    // SAFETY: the caller's set is valid; sigset_t is plain data.
    unsafe {
        *copy = *set;
        libc::sigdelset(copy, libc::SIGTRAP);
    }
    copy
}

type SigmaskFn = unsafe extern "C" fn(i32, *const libc::sigset_t, *mut libc::sigset_t) -> i32;

/// Calls `real` (sigprocmask or pthread_sigmask) with the program's mask
/// without SIGTRAP ([`unblock_trap`]).
///
/// # Safety
/// As sigprocmask(2); `real` is one of the two functions.
unsafe fn set_mask(
    real: SigmaskFn,
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: a zeroed sigset_t is valid; forwards valid pointers.
    unsafe {
        let mut copy: libc::sigset_t = std::mem::zeroed();
        let set = unblock_trap(how, set, &mut copy);
        real(how, set, old)
    }
}

/// # Safety
/// As sigprocmask(2).
#[unsafe(export_name = "sigprocmask")]
pub unsafe extern "C" fn fctrace_sigprocmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: forwards the caller's pointers to the real function.
    unsafe { set_mask(crate::real!("sigprocmask", SigmaskFn), how, set, old) }
}

/// # Safety
/// As pthread_sigmask(3).
#[unsafe(export_name = "pthread_sigmask")]
pub unsafe extern "C" fn fctrace_pthread_sigmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: as above.
    unsafe { set_mask(crate::real!("pthread_sigmask", SigmaskFn), how, set, old) }
}

/// The kernel flag glibc sets with its own restorer.
const SA_RESTORER: i32 = 0x0400_0000;

/// Records the signal for the calling thread, if it is traced and the
/// agent is not busy on it (a signal landing in the agent's own slow path
/// is not recorded; its handler's calls pass through untraced, as every
/// call made while the agent is busy does).
fn record(sig: i32, uc: *mut c_void) {
    if tls::busy() != 0 {
        return;
    }
    let p = tls::state();
    if p.is_null() {
        return;
    }
    let Some(shm) = shm::get() else { return };
    let _busy = tls::Busy::enter();
    // SAFETY: the state belongs to this thread; the agent is not using it
    // (not busy), and the interrupted hot path only holds reserved slots.
    let st = unsafe { &mut *p };
    if !uc.is_null() {
        let uc = uc as *mut libc::ucontext_t;
        // SAFETY: the kernel passes a valid ucontext to every handler.
        let rip = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] } as u64;
        if let Some(h) = hot_block(rip) {
            fix_interrupted(h, st, uc);
            // The interrupted code may hold shadow-stack addresses until
            // the handler returns (see `thread::grow_shadow`).
            st.sig_frame = st.sig_frame.max(uc as u64);
            st.park.fetch_or(PENDING, Ordering::AcqRel);
        }
    }

    if filter::active() {
        // Not shown where calls are not recorded (the fix-up above is
        // needed all the same).
        if st.gen != filter::GLOBAL.load(Ordering::Acquire) {
            filter::resync(st);
        }
        if !filter::records_plain(st) {
            return;
        }
    }
    buffer::append(shm, st, EventKind::Signal, sig as u32);
}

/// Called by [`signal_entry`] on the signal's stack; returns where to jump.
extern "C" fn on_signal(sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) -> usize {
    if !in_range(sig) {
        return return_to_kernel as *const () as usize;
    }
    if sig == libc::SIGTRAP {
        match agent_trap(uc) {
            TrapHit::No => {}
            TrapHit::Entry => return return_to_kernel as *const () as usize,
            TrapHit::Probe(id) => {
                record_probe(id);
                return return_to_kernel as *const () as usize;
            }
        }
    }
    let s = sig as usize;
    let action = ACTIONS[s].load(Ordering::Acquire);
    // A copy fctrace passed on gets its original siginfo back; the second
    // copy of a group kill does not reach the handler.
    if forwarded::passed_on(sig)
        && is_user_handler(action)
        && (USER_FLAGS[s].load(Ordering::Relaxed) & libc::SA_SIGINFO as u64 != 0
            || TRAP_EDITS[s].load(Ordering::Relaxed) & EDIT_SIGINFO != 0)
        // SAFETY: the kernel filled the siginfo (SA_SIGINFO).
        && !unsafe { forwarded::accept(sig, info) }
    {
        return return_to_kernel as *const () as usize;
    }
    let trig = TRIGGERS[s].load(Ordering::Relaxed);
    if trig != 0 {
        // One atomic update each: async-signal-safe.
        for (bit, a) in [
            (TRIG_OFF, fctrace_options::Action::TraceOff),
            (TRIG_ON, fctrace_options::Action::TraceOn),
            (TRIG_FINISH, fctrace_options::Action::Finish),
        ] {
            if trig & bit != 0 {
                filter::signal_action(a);
            }
        }
    }
    record(sig, uc);
    match action {
        // An int3 of the program's while it ignores SIGTRAP (the entry
        // kept for the agent's traps): the kernel would have reset the
        // action and killed the process.
        TMARK
            if sig == libc::SIGTRAP
                && !info.is_null()
                // SAFETY: the kernel's siginfo.
                && unsafe { (*info).si_code } == SI_KERNEL =>
        {
            fatal_default(sig, info);
            return_to_kernel as *const () as usize
        }
        // The program ignores the signal or leaves it at its default
        // action: the trigger is all it does.
        TMARK => return_to_kernel as *const () as usize,
        MARKER => {
            fatal_default(sig, info);
            return_to_kernel as *const () as usize
        }
        // Not expected (the entry is installed only with a table entry);
        // a vfork child that crashed may have cleared the shared table.
        // The safe reading: the default action.
        NONE => {
            fatal_default(sig, info);
            return_to_kernel as *const () as usize
        }
        h => {
            let flags = USER_FLAGS[s].load(Ordering::Relaxed);
            if sig == libc::SIGTRAP && TRAP_EDITS[s].load(Ordering::Relaxed) & EDIT_RESETHAND != 0 {
                reset_trap_handler();
            } else if flags & libc::SA_RESETHAND as u64 != 0 && is_fatal(sig) {
                // The kernel has just reset the action to SIG_DFL: keep a
                // crash by this signal visible.
                install_marker(sig);
            }
            h
        }
    }
}

/// The fatal-signal marker ran: restore the default action and let the
/// signal take its effect.
fn fatal_default(sig: i32, info: *mut libc::siginfo_t) {
    // The agent's own calls (traced libc functions with -l) stay out.
    let _busy = tls::Busy::enter();
    let s = sig as usize;
    // SAFETY: a zeroed sigaction is a valid value.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = libc::SIG_DFL;
    act.sa_flags = ORIG_FLAGS[s].load(Ordering::Relaxed) as i32 & !SA_RESTORER;
    set_mask_word(&mut act, ORIG_MASK[s].load(Ordering::Relaxed));
    ACTIONS[s].store(NONE, Ordering::Release);
    // SAFETY: sigaction with a valid action; async-signal-safe.
    unsafe { real_sigaction(sig, &act, std::ptr::null_mut()) };
    // SAFETY: the kernel passes a valid siginfo (the marker has SA_SIGINFO).
    let code = if info.is_null() {
        0
    } else {
        // SAFETY: `info` is non-null here and the kernel passed a valid siginfo.
        unsafe { (*info).si_code }
    };
    let faulting = matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
    );
    if faulting && code > 0 {
        // The instruction faults again, now with the default action.
        return;
    }
    // Sent (kill, raise, abort) or not re-executable (int3, seccomp):
    // raise it again; it is blocked until this handler returns.
    // SAFETY: plain system calls.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid() as libc::c_long,
            libc::gettid() as libc::c_long,
            sig as libc::c_long,
        );
    }
}

fn set_mask_word(act: &mut libc::sigaction, w: u64) {
    // SAFETY: sigset_t is at least 8 bytes; its first word holds signals 1..64.
    unsafe { (&mut act.sa_mask as *mut libc::sigset_t as *mut u64).write(w) };
}

fn mask_word(act: &libc::sigaction) -> u64 {
    // SAFETY: as in set_mask_word.
    unsafe { (&act.sa_mask as *const libc::sigset_t as *const u64).read() }
}

// ---------------------------------------------------------------------------
// Installing
// ---------------------------------------------------------------------------

type SigactionFn =
    unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
type SignalFn = unsafe extern "C" fn(i32, usize) -> usize;

/// libc's sigaction (one lookup site, resolved at start-up so that a
/// signal handler never needs dlsym).
unsafe fn real_sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the real sigaction has this signature; the caller passes
    // valid pointers.
    unsafe { crate::real!("sigaction", SigactionFn)(sig, act, old) }
}

/// Puts the marker on `sig` if its action is the default one now.
fn install_marker(sig: i32) {
    let _busy = tls::Busy::enter();
    // SAFETY: a zeroed sigaction is a valid value.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: query only.
    if unsafe { real_sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    if cur.sa_sigaction != libc::SIG_DFL {
        return;
    }
    put_marker(sig, &cur);
}

/// Installs the marker on `sig`, hiding `orig` (a default action: what
/// queries show).
fn put_marker(sig: i32, orig: &libc::sigaction) {
    let _busy = tls::Busy::enter();
    let s = sig as usize;
    ORIG_FLAGS[s].store(orig.sa_flags as u32 as u64, Ordering::Relaxed);
    ORIG_MASK[s].store(mask_word(orig), Ordering::Relaxed);
    ORIG_RESTORER[s].store(
        orig.sa_restorer.map_or(0, |f| f as usize),
        Ordering::Relaxed,
    );
    // SAFETY: a zeroed sigaction is a valid value.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = entry_addr();
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    ACTIONS[s].store(MARKER, Ordering::Release);
    // SAFETY: installs the agent's entry with an empty mask.
    if unsafe { real_sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        ACTIONS[s].store(NONE, Ordering::Release);
    }
}

/// Detaching (`fctrace -p`): each marker gives way to the default action
/// it stood for, and each `--signal` trigger's entry to the program's
/// disposition (SIG_DFL or SIG_IGN; unless the program has put a handler
/// of its own over it since); the triggers go (a later attach gives its
/// own), and the traps are forgotten (their int3 bytes are gone).
pub fn detach() {
    let _busy = tls::Busy::enter();
    ENABLED.store(false, Ordering::Release);
    for t in &TRIGGERS {
        t.store(0, Ordering::Relaxed);
    }
    for s in 1..NSIG {
        let action = ACTIONS[s].load(Ordering::Acquire);
        if action != MARKER && action != TMARK {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid value; query only.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: the signal's current disposition is only read into `cur`, a valid sigaction.
        if unsafe { real_sigaction(s as i32, std::ptr::null(), &mut cur) } == 0
            && cur.sa_sigaction == entry_addr()
        {
            // SAFETY: a zeroed sigaction is a valid value.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = if action == TMARK {
                PROG_DISP[s].load(Ordering::Relaxed)
            } else {
                libc::SIG_DFL
            };
            act.sa_flags = ORIG_FLAGS[s].load(Ordering::Relaxed) as i32 & !SA_RESTORER;
            set_mask_word(&mut act, ORIG_MASK[s].load(Ordering::Relaxed));
            // SAFETY: sigaction with a valid action.
            unsafe { real_sigaction(s as i32, &act, std::ptr::null_mut()) };
        }
        ACTIONS[s].store(NONE, Ordering::Release);
    }
    replace_traps(|v| v.clear());
}

/// Called once the agent traces the program.
pub fn init() {
    // Resolve libc's functions now, outside any signal handler.
    // SAFETY: queries only.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        real_sigaction(libc::SIGSEGV, std::ptr::null(), &mut cur);
    }
    ENABLED.store(true, Ordering::Release);
    for sig in FATAL {
        install_marker(sig);
    }
    ensure_trap_entry();
}

/// Set once the program has installed a handler of its own.
static ANY_HANDLER: AtomicBool = AtomicBool::new(false);

/// Signals raised by the instruction that runs (never deferred: blocking
/// them would only turn a fault into a kill).
const SYNCHRONOUS: u64 = (1 << (libc::SIGSEGV - 1))
    | (1 << (libc::SIGBUS - 1))
    | (1 << (libc::SIGILL - 1))
    | (1 << (libc::SIGFPE - 1))
    | (1 << (libc::SIGTRAP - 1))
    | (1 << (libc::SIGSYS - 1));

/// While the agent's slow path runs on a thread (buffer switch, thread
/// start, shadow-stack repair), the program's asynchronous signals are
/// blocked, so that a handler never runs while the agent is busy (it would
/// go untraced): a signal arriving then is delivered when the slow path
/// returns, traced like any other. Costs two system calls per slow path,
/// only in programs that installed a handler.
pub struct DeferSignals(Option<u64>);

/// The system call itself, not libc's `syscall()`: with -l that function
/// is traced, and the slow path that calls this must not recurse into it.
/// r8 and r9, which rt_sigprocmask does not read, carry
/// `fctrace_format::shm::KERNEL_TAG`: with `record -k` the call is known as
/// the agent's without a mark around it (two system calls more at every
/// buffer switch).
fn sigprocmask(how: i32, set: *const u64, old: *mut u64) {
    let [t0, t1] = fctrace_format::shm::KERNEL_TAG;
    // SAFETY: rt_sigprocmask with the kernel's 8-byte sigset; pointers
    // valid or null; the kernel clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_rt_sigprocmask => _,
            in("rdi") how as i64,
            in("rsi") set,
            in("rdx") old,
            in("r10") 8usize,
            in("r8") t0,
            in("r9") t1,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
}

impl DeferSignals {
    pub fn new() -> DeferSignals {
        if !ANY_HANDLER.load(Ordering::Relaxed) {
            return DeferSignals(None);
        }
        let set = !SYNCHRONOUS;
        let mut old = 0u64;
        sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        DeferSignals(Some(old))
    }
}

impl Drop for DeferSignals {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}

fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Rewrites an old action the kernel returned so that it shows what the
/// program installed: `prev` is the table's value before the call,
/// `edits` the [`TRAP_EDITS`] of that action.
fn translate_old(old: &mut libc::sigaction, sig: i32, prev: usize, edits: u8) {
    if old.sa_sigaction != entry_addr() {
        return;
    }
    let s = sig as usize;
    match prev {
        MARKER | NONE => {
            old.sa_sigaction = libc::SIG_DFL;
            old.sa_flags = ORIG_FLAGS[s].load(Ordering::Relaxed) as u32 as i32;
            set_mask_word(old, ORIG_MASK[s].load(Ordering::Relaxed));
            let r = ORIG_RESTORER[s].load(Ordering::Relaxed);
            // SAFETY: the restorer the kernel had for this signal (or none).
            old.sa_restorer =
                (r != 0).then(|| unsafe { std::mem::transmute::<usize, extern "C" fn()>(r) });
        }
        TMARK => old.sa_sigaction = PROG_DISP[s].load(Ordering::Relaxed),
        h => {
            old.sa_sigaction = h;
            unedit(old, edits);
        }
    }
}

/// The shared part of every interposer that installs a disposition.
/// `call(new)` makes the real call with `new` in place of the program's
/// handler and returns the old handler (or SIG_ERR); `flags` are the
/// flags the program's handler gets (for SA_RESETHAND).
fn install_with(
    sig: i32,
    handler: usize,
    flags: u64,
    call: &mut dyn FnMut(usize) -> usize,
) -> usize {
    if !enabled() || !in_range(sig) {
        return call(handler);
    }
    let s = sig as usize;
    if is_user_handler(handler) {
        USER_FLAGS[s].store(flags, Ordering::Relaxed);
        ANY_HANDLER.store(true, Ordering::Relaxed);
        let prev = ACTIONS[s].swap(handler, Ordering::AcqRel);
        let old = call(entry_addr());
        if old == usize::MAX {
            ACTIONS[s].store(prev, Ordering::Release);
            return old;
        }
        TRAP_EDITS[s].store(0, Ordering::Relaxed);
        edit_installed_for_traps(sig);
        return translate_handler(old, prev, sig);
    }
    if keeps_entry(sig, handler) {
        return set_trigger_disp(sig, handler);
    }
    if sig == libc::SIGTRAP && handler == libc::SIG_DFL && traps_active() {
        let prev = ACTIONS[s].load(Ordering::Acquire);
        let mut old = usize::MAX;
        trap_default_via_marker(&mut |entry| {
            old = call(entry);
            old != usize::MAX
        });
        if old == usize::MAX {
            return old;
        }
        return translate_handler(old, prev, sig);
    }
    let prev = ACTIONS[s].load(Ordering::Acquire);
    let old = call(handler);
    if old == usize::MAX {
        return old;
    }
    if handler == libc::SIG_DFL && is_fatal(sig) {
        install_marker(sig);
    } else if handler != 2 {
        let _ = ACTIONS[s].compare_exchange(prev, NONE, Ordering::AcqRel, Ordering::Relaxed);
    }
    translate_handler(old, prev, sig)
}

fn translate_handler(old: usize, prev: usize, sig: i32) -> usize {
    if old != entry_addr() {
        return old;
    }
    match prev {
        MARKER | NONE => libc::SIG_DFL,
        TMARK => PROG_DISP[sig as usize].load(Ordering::Relaxed),
        h => h,
    }
}

/// The program sets SIG_DFL or SIG_IGN (`handler`) for a `--signal`
/// trigger's signal: the trigger's entry stays (or comes back), the
/// disposition is kept for queries. Returns the previous handler as the
/// program would see it.
fn set_trigger_disp(sig: i32, handler: usize) -> usize {
    let s = sig as usize;
    let prev = ACTIONS[s].load(Ordering::Acquire);
    let old = match prev {
        MARKER | NONE => libc::SIG_DFL,
        TMARK => PROG_DISP[s].load(Ordering::Relaxed),
        h => h,
    };
    PROG_DISP[s].store(handler, Ordering::Relaxed);
    if prev != TMARK {
        install_trigger_entry(sig);
    }
    old
}

/// Installs the agent's entry for a trigger signal the program does not
/// handle (invisible: queries show [`PROG_DISP`]).
fn install_trigger_entry(sig: i32) {
    let _busy = tls::Busy::enter();
    let s = sig as usize;
    // SAFETY: a zeroed sigaction is a valid value.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = entry_addr();
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    ACTIONS[s].store(TMARK, Ordering::Release);
    // SAFETY: installs the agent's entry with an empty mask.
    unsafe { real_sigaction(sig, &act, std::ptr::null_mut()) };
}

/// `--signal` triggers: their signals get the agent's entry now (after
/// [`init`]); a handler the program installs later runs after the
/// trigger, a disposition it sets (SIG_DFL, SIG_IGN) is kept for queries
/// while the trigger stays.
pub fn init_triggers(list: &[fctrace_options::SignalTrigger]) {
    // An earlier attach's triggers go (each attach gives its own).
    for t in &TRIGGERS {
        t.store(0, Ordering::Relaxed);
    }
    for t in list {
        if !in_range(t.signal) || is_fatal(t.signal) {
            crate::runtime::log::warn(&format!(
                "--signal {}: this signal cannot be a trigger",
                t.source
            ));
            continue;
        }
        let mut bits = 0;
        for a in &t.actions {
            bits |= match a {
                fctrace_options::Action::TraceOn => TRIG_ON,
                fctrace_options::Action::TraceOff => TRIG_OFF,
                fctrace_options::Action::Finish => TRIG_FINISH,
                _ => 0,
            };
        }
        let s = t.signal as usize;
        TRIGGERS[s].fetch_or(bits, Ordering::Relaxed);
        // An ignored signal stays ignored for the program (an exec'd
        // program inherits SIG_IGN).
        // SAFETY: a zeroed sigaction is a valid value; query only.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: the signal's current disposition is only read into `cur`, a valid sigaction.
        unsafe { real_sigaction(t.signal, std::ptr::null(), &mut cur) };
        if keep_handler(t.signal, &cur) {
            continue;
        }
        ORIG_FLAGS[s].store(cur.sa_flags as u32 as u64, Ordering::Relaxed);
        ORIG_MASK[s].store(mask_word(&cur), Ordering::Relaxed);
        let disp = if cur.sa_sigaction == libc::SIG_IGN {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        PROG_DISP[s].store(disp, Ordering::Relaxed);
        install_trigger_entry(t.signal);
    }
}

/// For a `--signal` trigger on `sig`, whose action is `cur`: when the
/// program handles the signal already (attaching: it installed its
/// handler before; or an earlier attach saw it install one), its handler
/// is kept, reached through the agent's entry after the trigger (as one
/// installed while traced is). Whether it did.
fn keep_handler(sig: i32, cur: &libc::sigaction) -> bool {
    let s = sig as usize;
    if cur.sa_sigaction == entry_addr() {
        return is_user_handler(ACTIONS[s].load(Ordering::Acquire));
    }
    if !is_user_handler(cur.sa_sigaction) {
        return false;
    }
    let _busy = tls::Busy::enter();
    // The program's own action installed again through the interposer's
    // path (signal::init ran: the agent is enabled), as if it set it now.
    // SAFETY: a valid action, no old one asked for.
    unsafe { sigaction_impl(sig, cur, std::ptr::null_mut()) };
    true
}

fn is_trigger(sig: i32) -> bool {
    TRIGGERS[sig as usize].load(Ordering::Relaxed) != 0
}

/// Whether setting `handler` (SIG_DFL, SIG_IGN) keeps the agent's entry in
/// place, the disposition kept for queries ([`set_trigger_disp`]): for a
/// `--signal` trigger, and for SIGTRAP ignored while traps exist.
fn keeps_entry(sig: i32, handler: usize) -> bool {
    (is_trigger(sig) && (handler == libc::SIG_DFL || handler == libc::SIG_IGN))
        || (sig == libc::SIGTRAP && handler == libc::SIG_IGN && traps_active())
}

/// # Safety
/// As sigaction(2).
#[unsafe(export_name = "sigaction")]
pub unsafe extern "C" fn fctrace_sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: forwards the caller's pointers, or a copy of its action.
    unsafe { sigaction_impl(sig, act, old) }
}

/// # Safety
/// As sigaction(2).
#[unsafe(export_name = "__sigaction")]
pub unsafe extern "C" fn fctrace_dunder_sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: as above.
    unsafe { sigaction_impl(sig, act, old) }
}

unsafe fn sigaction_impl(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if !enabled() || !in_range(sig) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real_sigaction(sig, act, old) };
    }
    let s = sig as usize;
    let edits = TRAP_EDITS[s].load(Ordering::Relaxed);
    if act.is_null() {
        let prev = ACTIONS[s].load(Ordering::Acquire);
        // SAFETY: query with the caller's output pointer.
        let r = unsafe { real_sigaction(sig, act, old) };
        if r == 0 && !old.is_null() {
            // SAFETY: the kernel filled *old.
            translate_old(unsafe { &mut *old }, sig, prev, edits);
        }
        return r;
    }
    // SAFETY: the caller passes a valid action.
    let mut new = unsafe { *act };
    let handler = new.sa_sigaction;
    if is_user_handler(handler) {
        USER_FLAGS[s].store(new.sa_flags as u32 as u64, Ordering::Relaxed);
        ANY_HANDLER.store(true, Ordering::Relaxed);
        let prev = ACTIONS[s].swap(handler, Ordering::AcqRel);
        new.sa_sigaction = entry_addr();
        TRAP_EDITS[s].store(edit_for_traps(sig, &mut new), Ordering::Relaxed);
        // SAFETY: the program's action with the agent's entry as handler.
        let r = unsafe { real_sigaction(sig, &new, old) };
        if r != 0 {
            ACTIONS[s].store(prev, Ordering::Release);
            TRAP_EDITS[s].store(edits, Ordering::Relaxed);
        } else if !old.is_null() {
            // SAFETY: the kernel filled *old.
            translate_old(unsafe { &mut *old }, sig, prev, edits);
        }
        return r;
    }
    if keeps_entry(sig, handler) {
        if !old.is_null() {
            let prev = ACTIONS[s].load(Ordering::Acquire);
            // SAFETY: query with the caller's output pointer.
            if unsafe { real_sigaction(sig, std::ptr::null(), old) } == 0 {
                // SAFETY: the kernel filled *old.
                translate_old(unsafe { &mut *old }, sig, prev, edits);
            }
        }
        set_trigger_disp(sig, handler);
        return 0;
    }
    let prev = ACTIONS[s].load(Ordering::Acquire);
    if sig == libc::SIGTRAP && handler == libc::SIG_DFL && traps_active() {
        let mut r = -1;
        trap_default_via_marker(&mut |entry| {
            new.sa_sigaction = entry;
            // SAFETY: the program's action with the agent's entry.
            r = unsafe { real_sigaction(sig, &new, old) };
            r == 0
        });
        if r == 0 && !old.is_null() {
            // SAFETY: the kernel filled *old.
            translate_old(unsafe { &mut *old }, sig, prev, edits);
        }
        return r;
    }
    // SAFETY: the caller's arguments, unchanged.
    let r = unsafe { real_sigaction(sig, act, old) };
    if r != 0 {
        return r;
    }
    if !old.is_null() {
        // SAFETY: the kernel filled *old.
        translate_old(unsafe { &mut *old }, sig, prev, edits);
    }
    if handler == libc::SIG_DFL && is_fatal(sig) {
        install_marker(sig);
    } else {
        let _ = ACTIONS[s].compare_exchange(prev, NONE, Ordering::AcqRel, Ordering::Relaxed);
    }
    r
}

macro_rules! signal_interposer {
    ($($rust:ident = $name:literal, $flags:expr;)*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(export_name = $name)]
        pub unsafe extern "C" fn $rust(sig: i32, handler: usize) -> usize {
            let mut call = |h: usize| {
                // SAFETY: the real function of the same C signature.
                unsafe { crate::real!($name, SignalFn)(sig, h) }
            };
            install_with(sig, handler, $flags as u64, &mut call)
        }
    )*};
}

// The flags each installs (glibc): BSD semantics restart system calls
// (unless siginterrupt said otherwise); System V ones reset the handler.
signal_interposer! {
    fctrace_signal = "signal", libc::SA_RESTART;
    fctrace_bsd_signal = "bsd_signal", libc::SA_RESTART;
    fctrace_ssignal = "ssignal", libc::SA_RESTART;
    fctrace_sysv_signal = "sysv_signal", libc::SA_RESETHAND | libc::SA_NODEFER;
    fctrace_dunder_sysv_signal = "__sysv_signal", libc::SA_RESETHAND | libc::SA_NODEFER;
    fctrace_sigset = "sigset", 0;
}
