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

use crate::shm::{self, Shm};
use crate::thread::{self, ThreadState};
use crate::tls;
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

/// Where the entry goes when there is no program handler to run.
#[unsafe(naked)]
extern "C" fn return_to_kernel() {
    core::arch::naked_asm!("endbr64", "ret");
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
            && x.memory_displacement64() == crate::thread::OFF_SHADOW_TOP as u64
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
pub fn note_region_windows(at: u64, w: &crate::x86_64::codegen::RegionWindows) {
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
    let ent = crate::thread::SHADOW_ENTRY_SIZE as u64;
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
                st.shadow_top = rcx as *mut crate::thread::ShadowEntry;
                g[libc::REG_RIP as usize] = to.load(Ordering::Relaxed) as i64;
            }
        };
        let push_lo = h.push_lo.load(Ordering::Relaxed);
        if push_lo != 0 && rip >= push_lo && rip < h.push_hi.load(Ordering::Relaxed) {
            top_to_rcx_then(&h.retry);
            return;
        }
        // The -N entry: the same, restarting at its reservation (the
        // region is already counted); its exit: the pop.
        let n_lo = h.n_push_lo.load(Ordering::Acquire);
        if n_lo != 0 && rip >= n_lo && rip < h.n_push_hi.load(Ordering::Relaxed) {
            top_to_rcx_then(&h.n_restart);
            return;
        }
        if n_lo != 0 && rip == h.n_pop.load(Ordering::Relaxed) {
            top_to_rcx_then(&h.n_pop_next);
            return;
        }
        // The -N exit, its region count down and its limit not yet
        // written: the limit is computed from the state now (the handler
        // may change the state; the store would then undo that) and the
        // exit goes on at its tail.
        if n_lo != 0
            && rip >= h.n_close_lo.load(Ordering::Relaxed)
            && rip < h.n_close_hi.load(Ordering::Relaxed)
        {
            crate::filter::recompute(st);
            g[libc::REG_RIP as usize] = h.x_tail.load(Ordering::Relaxed) as i64;
            return;
        }
        // The -F entry, from its checks to the open region: everything
        // it did is undone (the region count, the shadow entry) and it
        // starts over at its checks, which see what the handler changed.
        if n_lo != 0
            && rip >= h.f_check.load(Ordering::Relaxed)
            && rip < h.f_open_hi.load(Ordering::Relaxed)
        {
            if rip >= h.f_push_lo.load(Ordering::Relaxed) {
                if top != rcx + ent {
                    return;
                }
                st.shadow_top = rcx as *mut crate::thread::ShadowEntry;
                if rip >= h.f_counted.load(Ordering::Relaxed) {
                    crate::filter::fix_filter_count(st, true);
                }
            }
            g[libc::REG_RIP as usize] = h.f_check.load(Ordering::Relaxed) as i64;
            return;
        }
        // The -F exit, from the slot's store to the closed region: the
        // pop and the closing are completed.
        if n_lo != 0
            && rip >= h.f_pop_lo.load(Ordering::Relaxed)
            && rip < h.f_close_hi.load(Ordering::Relaxed)
        {
            if rip <= h.f_pop.load(Ordering::Relaxed) {
                // rcx = the top entry; the slot holds its real return
                // address again.
                if top != rcx + ent {
                    return;
                }
                let e = rcx as *const crate::thread::ShadowEntry;
                g[libc::REG_RAX as usize] = (*e).func as u32 as i64;
                st.shadow_top = e as *mut crate::thread::ShadowEntry;
            }
            let uncount = rip < h.f_uncounted.load(Ordering::Relaxed);
            crate::filter::fix_filter_count(st, uncount);
            g[libc::REG_RIP as usize] = h.f_close_hi.load(Ordering::Relaxed) as i64;
            return;
        }
        let pop_lo = h.pop_lo.load(Ordering::Relaxed);
        if pop_lo != 0 && (rip == pop_lo || rip == h.pop_store.load(Ordering::Relaxed)) {
            // rcx = the top entry, already read; the slot holds its real
            // return address again.
            if top == rcx + ent {
                let e = rcx as *const crate::thread::ShadowEntry;
                g[libc::REG_RAX as usize] = (*e).func as i64;
                st.shadow_top = e as *mut crate::thread::ShadowEntry;
                g[libc::REG_RIP as usize] = h.pop_next.load(Ordering::Relaxed) as i64;
            }
        }
    }
}

/// Per task slot: bit 63 = the next buffer switch must park the old
/// buffer; low 32 bits = index + 1 of the parked buffer (0: none).
const PARK_SLOTS: usize = 32768;
static PARK: [AtomicU64; PARK_SLOTS] = [const { AtomicU64::new(0) }; PARK_SLOTS];
const PENDING: u64 = 1 << 63;

/// The kernel flag glibc sets with its own restorer.
const SA_RESTORER: i32 = 0x0400_0000;

/// Hands the thread's current buffer to the recorder (it is full), or
/// parks it when a signal handler may have interrupted a write into it;
/// a buffer parked earlier is handed over first, so the recorder gets a
/// thread's buffers in order. Called by `thread::switch_buffer`.
pub fn release_buffer(shm: &Shm, st: &ThreadState) {
    let idx = st.buf_index;
    let Some(cell) = PARK.get(st.task_slot as usize) else {
        shm.release(idx);
        return;
    };
    let v = cell.swap(0, Ordering::AcqRel);
    let parked = (v & 0xffff_ffff) as u32;
    if parked != 0 {
        shm.release(parked - 1);
    }
    if v & PENDING != 0 {
        cell.store(idx as u64 + 1, Ordering::Release);
    } else {
        shm.release(idx);
    }
}

/// Hands over a buffer parked by [`release_buffer`], if any (before the
/// thread's current buffer is handed over outside a switch: exec).
pub fn release_parked(shm: &Shm, st: &ThreadState) {
    if let Some(cell) = PARK.get(st.task_slot as usize) {
        let parked = (cell.swap(0, Ordering::AcqRel) & 0xffff_ffff) as u32;
        if parked != 0 {
            shm.release(parked - 1);
        }
    }
}

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
            if let Some(cell) = PARK.get(st.task_slot as usize) {
                cell.fetch_or(PENDING, Ordering::AcqRel);
            }
        }
    }

    if crate::filter::active() {
        // Not shown where calls are not recorded (the fix-up above is
        // needed all the same).
        if st.gen != crate::filter::GLOBAL.load(Ordering::Acquire) {
            crate::filter::resync(st);
        }
        if !crate::filter::records_plain(st) {
            return;
        }
    }
    thread::append(shm, st, EventKind::Signal, sig as u32);
}

/// Called by [`signal_entry`] on the signal's stack; returns where to jump.
extern "C" fn on_signal(sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) -> usize {
    if !in_range(sig) {
        return return_to_kernel as *const () as usize;
    }
    let s = sig as usize;
    let action = ACTIONS[s].load(Ordering::Acquire);
    let trig = TRIGGERS[s].load(Ordering::Relaxed);
    if trig != 0 {
        // One atomic update each: async-signal-safe.
        for (bit, a) in [
            (TRIG_OFF, fctrace_options::Action::TraceOff),
            (TRIG_ON, fctrace_options::Action::TraceOn),
            (TRIG_FINISH, fctrace_options::Action::Finish),
        ] {
            if trig & bit != 0 {
                crate::filter::signal_action(a);
            }
        }
    }
    record(sig, uc);
    match action {
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
            if flags & libc::SA_RESETHAND as u64 != 0 && is_fatal(sig) {
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
    let s = sig as usize;
    // SAFETY: a zeroed sigaction is a valid value.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: query only.
    if unsafe { real_sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    if cur.sa_sigaction != libc::SIG_DFL {
        return;
    }
    ORIG_FLAGS[s].store(cur.sa_flags as u32 as u64, Ordering::Relaxed);
    ORIG_MASK[s].store(mask_word(&cur), Ordering::Relaxed);
    ORIG_RESTORER[s].store(cur.sa_restorer.map_or(0, |f| f as usize), Ordering::Relaxed);
    // SAFETY: as above.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = entry_addr();
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    ACTIONS[s].store(MARKER, Ordering::Release);
    // SAFETY: installs the agent's entry with an empty mask.
    if unsafe { real_sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        ACTIONS[s].store(NONE, Ordering::Release);
    }
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
fn sigprocmask(how: i32, set: *const u64, old: *mut u64) {
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
/// program installed: `prev` is the table's value before the call.
fn translate_old(old: &mut libc::sigaction, sig: i32, prev: usize) {
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
        h => old.sa_sigaction = h,
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
        return translate_handler(old, prev, sig);
    }
    if is_trigger(sig) && (handler == libc::SIG_DFL || handler == libc::SIG_IGN) {
        return set_trigger_disp(sig, handler);
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
    for t in list {
        if !in_range(t.signal) || is_fatal(t.signal) {
            crate::warn(&format!(
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
        unsafe { real_sigaction(t.signal, std::ptr::null(), &mut cur) };
        let disp = if cur.sa_sigaction == libc::SIG_IGN {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        PROG_DISP[s].store(disp, Ordering::Relaxed);
        install_trigger_entry(t.signal);
    }
}

fn is_trigger(sig: i32) -> bool {
    TRIGGERS[sig as usize].load(Ordering::Relaxed) != 0
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
    if act.is_null() {
        let prev = ACTIONS[s].load(Ordering::Acquire);
        // SAFETY: query with the caller's output pointer.
        let r = unsafe { real_sigaction(sig, act, old) };
        if r == 0 && !old.is_null() {
            // SAFETY: the kernel filled *old.
            translate_old(unsafe { &mut *old }, sig, prev);
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
        // SAFETY: the program's action with the agent's entry as handler.
        let r = unsafe { real_sigaction(sig, &new, old) };
        if r != 0 {
            ACTIONS[s].store(prev, Ordering::Release);
        } else if !old.is_null() {
            // SAFETY: the kernel filled *old.
            translate_old(unsafe { &mut *old }, sig, prev);
        }
        return r;
    }
    if is_trigger(sig) && (handler == libc::SIG_DFL || handler == libc::SIG_IGN) {
        if !old.is_null() {
            let prev = ACTIONS[s].load(Ordering::Acquire);
            // SAFETY: query with the caller's output pointer.
            if unsafe { real_sigaction(sig, std::ptr::null(), old) } == 0 {
                // SAFETY: the kernel filled *old.
                translate_old(unsafe { &mut *old }, sig, prev);
            }
        }
        set_trigger_disp(sig, handler);
        return 0;
    }
    let prev = ACTIONS[s].load(Ordering::Acquire);
    // SAFETY: the caller's arguments, unchanged.
    let r = unsafe { real_sigaction(sig, act, old) };
    if r != 0 {
        return r;
    }
    if !old.is_null() {
        // SAFETY: the kernel filled *old.
        translate_old(unsafe { &mut *old }, sig, prev);
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
