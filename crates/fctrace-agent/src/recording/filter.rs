//! Record-time filters and triggers: `-F`, `-N`, `-D`, `-T`, `--disable`
//! and `--signal` (the options come from the recorder in
//! `FCTRACE_OPTIONS`, see [`fctrace_options::Options::to_wire`]).
//!
//! Only when [`Options::affects_recording`] holds does the agent generate
//! the *filtered* variant of the common block (`x86_64::codegen`); without
//! options nothing here runs and the hot path is unchanged.
//!
//! Each function gets flag bits at instrumentation ([`flags_for`]). A
//! function without flags goes through the filtered fast path: it is
//! recorded while the thread's shadow-stack top lies below the thread's
//! `limit` word, else it passes straight through: no timestamp, no record,
//! no shadow entry, no exit hook. `limit` folds every condition into one
//! comparison: 0 when nothing may be recorded (tracing off, inside a `-N`
//! function, outside every `-F` function, `finish`), else the top at which
//! the depth limit is reached (`u64::MAX` without one). A thread also
//! compares the global switch word ([`GLOBAL`]: `global` triggers,
//! `--signal`, `finish`) with the value it last applied, and resyncs when
//! it changed.
//!
//! A flagged function (a `-F`/`-N` pattern, a trigger, `-A`/`-R`) goes to
//! [`flagged_entry`]. The frame of a `-F`/`-N` function, or of a visible
//! `depth=N` trigger or `-R` function, owns a *region*: its shadow entry
//! carries bits above the function id (`E_*`) saying what it changed, and
//! whether it was recorded. Its exit takes the slow path
//! ([`flagged_exit`]) which undoes the change; every other way a shadow
//! entry leaves the stack (longjmp, exceptions, thread exit, context
//! switches, a mismatched return) goes through [`unwound`], which does
//! the same, so tracing is never left wrongly off or on. A function whose
//! only flag is `-N` or `-F` has a generated entry and exit
//! (`arch::x86_64::codegen`) for the usual case, which make the same
//! shadow entries (`NOTRACE_ENTRY_BITS`, `FILTER_ENTRY_BITS`: the bits
//! live in `runtime::state`) and the same changes as these slow paths.
//!
//! Semantics (uftrace's): a call is recorded when tracing is on for its
//! thread at its entry, it is not inside (or itself) a `-N` function, it
//! is inside (or itself) a `-F` function if any `-F` is given, and its
//! level among the recorded calls open on its thread is within the depth
//! limit (`-D N`, or N levels from a `depth=N` trigger function, which is
//! level 1, for that function's duration). `trace_on`/`trace_off` switch
//! the calling thread (every thread with `global`) from the function's
//! entry on (the `trace_on` function itself is recorded, the `trace_off`
//! one is not); `finish` stops tracing for good (its function is not
//! recorded). A recorded call always gets its exit recorded.
//!
//! Where a `trace_on` trigger turns tracing on for the thread that hits
//! it, the calls open then (entered while it was off: not recorded) are
//! found by the stack walk of `backtrace` triggers and recorded as a chain
//! after the trigger function's entry; each gets a hidden shadow entry
//! ([`hook_open_calls`]) whose return records an end mark, so that the
//! display filters know them from there to their end.

use crate::recording::args;
use crate::runtime::buffer;
use crate::runtime::shm::Shm;
use crate::runtime::state::{
    FastDesc, PyCalls, ShadowEntry, ThreadState, B_FINISHED, B_NOFILTER, B_OFF, E_DEPTH, E_FASTRET,
    E_FILTER, E_HIDDEN, E_NOTRACE, E_OPENED, E_RETVAL, E_SLOW_EXIT, FASTRET_SHIFT, NEVER, NT_MASK,
    PREV_MASK, PREV_SHIFT, PY_CALLS_MAX, SHADOW_ENTRY_SIZE,
};
use fctrace_format::argval::MAX_BACKTRACE;
use fctrace_format::event::{EventKind, RawEvent, WITH_CALL_STEP};
use fctrace_options::{pattern::name_forms_at, Action, Options};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU8, Ordering};

// Per-function flags.
pub const F_FILTER: u64 = 1;
pub const F_NOTRACE: u64 = 2;
pub const F_TRIGGER: u64 = 4;
pub const F_ARGS: u64 = 8;
pub const F_RETVAL: u64 = 16;
/// A condition on its arguments (`-F FUNC@if:arg1==0`) decides, at each
/// call, whether its `-F`, `-N` and trigger flags apply ([`conds`]).
pub const F_COND: u64 = 32;
/// Bits 8..64: which triggers (by index) name the function.
const TRIGGER_SHIFT: u32 = 8;
const MAX_TRIGGERS: usize = 56;

/// The global switch: a generation (bits 2..31) and a state (bits 0..1).
pub static GLOBAL: AtomicU32 = AtomicU32::new(0);
/// Non-zero once `finish` happened: the generated exit records nothing
/// more (the calls still open end "not returned").
pub static FINISHED: AtomicU8 = AtomicU8::new(0);
const G_ON: u32 = 1;
const G_OFF: u32 = 2;
const G_FINISH: u32 = 3;

/// For `signal::fix_interrupted`: a signal interrupted the fast flagged
/// entry of a `depth=N` trigger function between its whole shadow entry
/// (whose `func` word is `word`) and the limit's store, or its generated
/// exit between the pop and the limit's store: the depth limit from
/// before the call is put back (the entry is then taken back by the
/// caller and starts over), and `block` and `limit` are made from the
/// state.
pub fn fix_depth(st: &mut ThreadState, word: u64) {
    if word & E_DEPTH != 0 {
        let p = (word >> PREV_SHIFT) & PREV_MASK;
        st.max = if p == PREV_MASK { u32::MAX } else { p as u32 };
    }
    recompute(st);
}

/// For `signal::fix_interrupted`: a signal interrupted the generated
/// `-F` entry or exit around its update of the count of open `-F`
/// regions. `uncount`: subtract one (the entry's increment is taken back,
/// or the exit's decrement not done yet is done); then `block` and
/// `limit` are made from the state again.
pub fn fix_filter_count(st: &mut ThreadState, uncount: bool) {
    if uncount {
        st.filt.fl = st.filt.fl.saturating_sub(1);
    }
    recompute(st);
}

struct Config {
    opts: Options,
    has_filters: bool,
    /// A trigger has the `backtrace` or the `trace_on` action: the stack
    /// is walked at some entries (a backtrace, or the calls open where
    /// tracing resumes), so the code ranges of functions are kept.
    walks: bool,
    depth: u32,
    specs: Option<&'static args::Specs>,
}

/// The options in force: published whole by [`init`] (at start-up, and
/// at each attach, every other thread stopped outside the agent); null
/// without options that affect recording. Replaced ones are leaked: a
/// reference taken from one must stay valid.
static CONFIG: AtomicPtr<Config> = AtomicPtr::new(std::ptr::null_mut());

fn config() -> Option<&'static Config> {
    let p = CONFIG.load(Ordering::Acquire);
    // SAFETY: published configs are leaked, never mutated after
    // publication.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Per function id: its flags (published whole, like the return sites).
static FLAGS: AtomicPtr<Vec<u64>> = AtomicPtr::new(std::ptr::null_mut());

/// Sets the options up (before instrumentation). Returns whether the
/// filtered hot path is needed. A later `fctrace -p` calls it again with
/// its own options (every other thread stopped, none inside the agent or
/// generated code, which the detach unmapped): what the earlier ones set
/// goes (the options, the flag table, argument specs, the global switch
/// and `finish`).
pub fn init(opts: Options) -> bool {
    CONFIG.store(std::ptr::null_mut(), Ordering::Release);
    FLAGS.store(std::ptr::null_mut(), Ordering::Release);
    GLOBAL.store(0, Ordering::Release);
    FINISHED.store(0, Ordering::Release);
    args::uninstall();
    args::names::want(false);
    conds::reset();
    if !opts.affects_recording() {
        return false;
    }
    if opts.triggers.len() > MAX_TRIGGERS {
        crate::runtime::log::warn(&format!(
            "only the first {MAX_TRIGGERS} triggers are used ({} given)",
            opts.triggers.len()
        ));
    }
    let specs = args::Specs::from_options(&opts);
    let specs = (!specs.is_empty()).then(|| specs.install());
    let walks = opts.triggers.iter().any(|t| {
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Backtrace | Action::TraceOn))
    });
    if walks {
        backtrace::warm_up();
    }
    let cfg = Config {
        walks,
        has_filters: !opts.filters.is_empty(),
        depth: opts.depth.unwrap_or(u32::MAX),
        specs,
        opts,
    };
    CONFIG.store(Box::leak(Box::new(cfg)), Ordering::Release);
    true
}

/// Whether filtering is active in this process.
pub fn active() -> bool {
    config().is_some()
}

/// The flags of function `func` of the module at `module_path` whose
/// symbol is `raw` and whose module-and-address name is `at`
/// (`git+0x4a3f0`; empty when not known) (0 without filters); its
/// argument specs are bound to it.
pub fn flags_for(func: u32, module_path: &str, raw: &str, at: &str) -> u64 {
    let Some(cfg) = config() else { return 0 };
    let display = if raw.starts_with("_Z") || raw.starts_with("_R") {
        std::borrow::Cow::Owned(fctrace_symbols::demangle_in_process(raw))
    } else {
        std::borrow::Cow::Borrowed(raw)
    };
    let forms = name_forms_at(raw, &display, at);
    let o = &cfg.opts;
    let mut f = 0;
    if o.filters.iter().any(|p| p.matches(module_path, forms)) {
        f |= F_FILTER;
    }
    if o.notrace.iter().any(|p| p.matches(module_path, forms)) {
        f |= F_NOTRACE;
    }
    for (i, t) in o.triggers.iter().take(MAX_TRIGGERS).enumerate() {
        if t.pattern.matches(module_path, forms) {
            f |= F_TRIGGER | 1 << (TRIGGER_SHIFT + i as u32);
        }
    }
    let mask = o
        .conds
        .iter()
        .take(conds::MAX)
        .enumerate()
        .filter(|(_, c)| c.pattern.matches(module_path, forms))
        .fold(0u32, |m, (i, _)| m | 1 << i);
    if mask != 0 {
        f |= F_COND;
        conds::note(func, mask);
    }
    let (a, r) = match cfg.specs {
        Some(sp) => sp.bind(func, module_path, raw, &display, at),
        None => (false, false),
    };
    if a {
        f |= F_ARGS;
    }
    if r {
        f |= F_RETVAL;
    }
    f
}

/// The fast flagged entry's description of function `func` (with filter
/// `flags`), made once and never freed, or `None` when its calls take the
/// flagged entry's slow path. A call through the fast entry
/// (`arch::x86_64::codegen`) does in generated code what
/// [`flagged_entry`] would do, while nothing unusual is going on (the
/// agent not busy, the thread's state made, the global switch applied,
/// room on the shadow stack; else it hands over to the slow path):
///
/// - `-A` whose values are integers or pointers in argument registers
///   (`argN` for N <= 6 with the formats `i`, `u`, `x`, `c`, `p` or
///   none): the `Args` record and its payload, the bytes
///   [`args::on_entry`] writes, right after the `Entry`;
/// - `-R` with such a format: the frame's shadow entry carries
///   `E_FASTRET` and the value's header, so that the generated exit
///   records the `Retval` record (as [`flagged_exit`] would); another
///   `-R` still takes the slow exit;
/// - triggers whose every action is a per-thread `trace_on` or every one
///   a per-thread `trace_off`: the fast entry is taken only when the
///   action has nothing to do (tracing already on, already off for the
///   thread), so that the call is then an unflagged one; else the slow
///   path runs the trigger.
///
/// Other flags (`-F`, `-N`, other actions, global triggers, strings,
/// floats, `-a`) keep the slow path.
pub fn fast_desc(func: u32, flags: u64) -> Option<&'static FastDesc> {
    let cfg = config()?;
    if flags & (F_FILTER | F_NOTRACE | F_COND) != 0 || flags & (F_TRIGGER | F_ARGS | F_RETVAL) == 0
    {
        return None;
    }
    let mut d = FastDesc {
        id: func,
        ..FastDesc::default()
    };
    if flags & F_TRIGGER != 0 {
        let (mut on, mut off) = (false, false);
        let mut depth = None;
        for (i, t) in cfg.opts.triggers.iter().take(MAX_TRIGGERS).enumerate() {
            if flags & 1 << (TRIGGER_SHIFT + i as u32) == 0 {
                continue;
            }
            if t.global && t.actions.iter().any(|a| !matches!(a, Action::Depth(_))) {
                return None;
            }
            for a in &t.actions {
                match *a {
                    Action::TraceOn => on = true,
                    Action::TraceOff => off = true,
                    // (The last one counts, as in `flagged_entry`.)
                    Action::Depth(n) => depth = Some(n),
                    _ => return None,
                }
            }
        }
        (d.trig_mask, d.trig_want) = match (on, off) {
            (false, false) => (0, 0),
            (true, false) => (B_OFF, 0),
            (false, true) => (B_OFF, B_OFF),
            _ => return None,
        };
        if let Some(n) = depth {
            d.depth_mask = u64::MAX;
            d.depth = u64::from(n);
        }
    }
    let items = if flags & F_ARGS != 0 {
        cfg.specs?.fast_args(func)?
    } else {
        Vec::new()
    };
    d.shadow_word = func as u64;
    if d.depth_mask != 0 {
        // (The generated entry adds the depth limit from before the call.)
        d.shadow_word |= E_SLOW_EXIT | E_DEPTH;
    }
    if flags & F_RETVAL != 0 {
        d.shadow_word |= E_SLOW_EXIT | E_RETVAL;
        // (E_FASTRET's header would take E_DEPTH's bits.)
        match cfg.specs.and_then(|sp| sp.fast_retval(func)) {
            Some(hdr) if d.depth_mask == 0 => {
                d.shadow_word |= E_FASTRET | u64::from(hdr) << FASTRET_SHIFT;
            }
            _ => {}
        }
    }
    d.entry_word = RawEvent::new(EventKind::Entry, func, 0).word;
    d.want = RawEvent::SIZE as u32;
    if !items.is_empty() {
        // One `Args` record that is also the entry (`WITH_CALL_STEP`),
        // then its payload.
        let len = items.len() * 11;
        let n = len.div_ceil(RawEvent::SIZE);
        d.count = items.len() as u32;
        d.items[..items.len()].copy_from_slice(&items);
        d.want = ((1 + n) * RawEvent::SIZE) as u32;
        d.prov_word = RawEvent::with_payload(EventKind::Args, func, (n * RawEvent::SIZE) as u16, 0)
            .word
            | WITH_CALL_STEP;
        d.args_word =
            RawEvent::with_payload(EventKind::Args, func, len as u16, 0).word | WITH_CALL_STEP;
    }
    Some(Box::leak(Box::new(d)))
}

/// Publishes the flags of every function id (a new table; old ones are
/// never freed, another thread may still read one).
pub fn set_flags(v: Vec<u64>) {
    FLAGS.store(Box::leak(Box::new(v)), Ordering::Release);
}

fn func_flags(func: u32) -> u64 {
    let p = FLAGS.load(Ordering::Acquire);
    if p.is_null() {
        return 0;
    }
    // SAFETY: published tables are leaked, never mutated after publication.
    unsafe { &*p }.get(func as usize).copied().unwrap_or(0)
}

/// Switches every thread (each applies it at its next traced call).
fn global_switch(state: u32) {
    if state == G_FINISH {
        FINISHED.store(1, Ordering::Release);
    }
    let mut old = GLOBAL.load(Ordering::Acquire);
    loop {
        if old & 3 == G_FINISH {
            return;
        }
        let gen = ((old >> 2).wrapping_add(1)) & 0x1FFF_FFFF;
        match GLOBAL.compare_exchange_weak(
            old,
            gen << 2 | state,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return,
            Err(v) => old = v,
        }
    }
}

/// A `--signal` action: async-signal-safe (one atomic update).
pub fn signal_action(a: Action) {
    match a {
        Action::TraceOn => global_switch(G_ON),
        Action::TraceOff => global_switch(G_OFF),
        Action::Finish => global_switch(G_FINISH),
        _ => {}
    }
}

/// Applies the global switch word to this thread (and the options, at
/// its first traced call).
pub fn resync(st: &mut ThreadState) {
    let Some(cfg) = config() else { return };
    let g = GLOBAL.load(Ordering::Acquire);
    if st.gen == NEVER {
        st.filt.off = cfg.opts.disabled;
        st.max = cfg.depth;
        st.block = 0;
        st.hidden = 0;
    }
    match g & 3 {
        G_ON => st.filt.off = false,
        G_OFF => st.filt.off = true,
        G_FINISH => st.filt.finished = true,
        _ => {}
    }
    st.gen = g;
    recompute(st);
}

fn depth_entries(st: &ThreadState) -> u64 {
    (st.shadow_top as u64 - st.shadow_base as u64) / SHADOW_ENTRY_SIZE as u64
}

/// Recorded calls open on the thread (Python ones too).
fn vdepth(st: &ThreadState) -> u64 {
    depth_entries(st).saturating_sub(st.hidden) + st.py_visible
}

/// Whether a call made now (not flagged as -F/-N) would be recorded
/// (`block` as [`recompute`] makes it).
fn open(st: &ThreadState) -> bool {
    st.block == 0
}

/// Recomputes the thread's `block` bits and `limit` word from its state.
pub fn recompute(st: &mut ThreadState) {
    let Some(cfg) = config() else { return };
    let f = &st.filt;
    let mut b = st.block & NT_MASK;
    if f.off {
        b |= B_OFF;
    }
    if f.finished {
        b |= B_FINISHED;
    }
    if cfg.has_filters && f.fl == 0 {
        b |= B_NOFILTER;
    }
    st.block = b;
    st.limit = if !open(st) {
        0
    } else if st.max == u32::MAX {
        u64::MAX
    } else {
        // Linear in the top while only recorded calls push and pop (the
        // generated exit leaves it alone), so it stays right as they do:
        // the top at which the depth limit is reached, below the top when
        // the thread is already deeper.
        let v = vdepth(st) as i64;
        let top = st.shadow_top as i64;
        (top + (st.max as i64 - v) * SHADOW_ENTRY_SIZE as i64).max(0) as u64
    };
}

/// Whether a plain (unflagged) call made now is recorded (for calls the
/// agent records outside the hot path).
pub fn records_plain(st: &ThreadState) -> bool {
    !active() || (st.shadow_top as u64) < st.limit
}

/// The entry of a flagged function: `slot` is the stack address of its
/// return address. Returns 0 when the call is traced (its return is
/// taken over), 1 to let it run untouched.
///
/// # Safety
/// Called by `instrument::slow_path` on the thread whose state `st` is, with
/// the registers the generated code saved.
pub unsafe fn flagged_entry(
    shm: &Shm,
    st: &mut ThreadState,
    func: u32,
    slot: u64,
    xsave: *const u8,
    gprs: *const u64,
) -> u64 {
    let Some(cfg) = config() else { return 1 };
    if st.gen != GLOBAL.load(Ordering::Acquire) {
        resync(st);
    }
    if st.filt.finished {
        return 1;
    }
    let mut flags = func_flags(func);
    if flags & F_COND != 0 {
        // SAFETY: as for `entry_regs` below (the caller's registers).
        let regs = unsafe { entry_regs(slot, xsave, gprs) };
        if !conds::hold(cfg, func, st.pid, &regs) {
            // This call is an ordinary one: its filters and triggers
            // (trigger bits from TRIGGER_SHIFT up) do not act.
            flags &= (1 << TRIGGER_SHIFT) - 1;
            flags &= !(F_FILTER | F_NOTRACE | F_TRIGGER);
        }
    }
    let was_off = st.filt.off;
    let Some((depth, backtrace)) = fire_triggers(cfg, st, flags) else {
        return 1;
    };
    let v = vdepth(st);
    recompute(st);
    let visible = visible_now(st, flags, v);
    let region = flags & (F_FILTER | F_NOTRACE) != 0
        || (visible && (depth.is_some() || flags & F_RETVAL != 0));
    // (The state is recomputed above; nothing changed it since.)
    if !visible && !region {
        return 1;
    }
    if st.shadow_top >= st.shadow_end && !crate::runtime::thread::grow_shadow(st) {
        shm.add_lost(if visible { 2 } else { 0 });
        return 1;
    }
    // Tracing resumed for the thread at this entry (a `trace_on`
    // trigger): the calls open now, entered while it was off, are
    // recorded so that replay-time -F/-N know them (one walk serves a
    // `backtrace` too).
    let resumed = was_off && !st.filt.off;
    // The callers, walked before the function's own shadow entry exists
    // (its slot still holds the real return address).
    let mut chain = [0u32; MAX_BACKTRACE];
    let mut slots = [0u64; MAX_BACKTRACE];
    let callers = if visible && (backtrace || resumed) {
        // SAFETY: `slot` is the return-address slot of the call being
        // entered and `gprs` the registers the generated code saved.
        unsafe { backtrace::walk(st, slot, gprs, &mut chain, &mut slots) }
    } else {
        None
    };
    if let Some((n, _)) = callers.filter(|_| resumed) {
        hook_open_calls(st, slot, &chain[..n], &slots[..n]);
    }
    // SAFETY: `slot` is the function's return-address slot on this
    // thread's stack.
    let ret = unsafe { (slot as *const u64).read() };
    let mut word = region_word(st, func, flags, visible, region);
    if visible {
        word |= visible_bits(st, flags, depth, v);
    }
    // SAFETY: below shadow_end (checked); signals are deferred in the slow
    // path, so the entry is whole before it is published.
    unsafe {
        st.shadow_top.write(ShadowEntry {
            ret,
            slot,
            func: word,
        });
        st.shadow_top = st.shadow_top.add(1);
    }
    if visible {
        buffer::append(shm, st, EventKind::Entry, func);
        if let Some((n, cut)) = callers {
            record_chain(st, func, &chain[..n], cut, !backtrace);
        }
        if flags & F_ARGS != 0 {
            // SAFETY: the generated code saved the general registers in
            // this order and the extended state in FXSAVE's legacy layout
            // (xsave's area starts with it).
            let regs = unsafe { entry_regs(slot, xsave, gprs) };
            args::on_entry(st, func, &regs);
        }
    }
    recompute(st);
    0
}

/// Runs the triggers of a flagged function's entry (`flags`): its depth
/// limit (`depth=N`) and whether it asks for a backtrace; `None` when
/// tracing is finished (then nothing is recorded).
fn fire_triggers(cfg: &Config, st: &mut ThreadState, flags: u64) -> Option<(Option<u32>, bool)> {
    let mut depth = None;
    let mut backtrace = false;
    if flags & F_TRIGGER == 0 {
        return Some((None, false));
    }
    let mut switched = false;
    for (i, t) in cfg.opts.triggers.iter().take(MAX_TRIGGERS).enumerate() {
        if flags & 1 << (TRIGGER_SHIFT + i as u32) == 0 {
            continue;
        }
        for a in &t.actions {
            match *a {
                Action::TraceOn if t.global => {
                    global_switch(G_ON);
                    switched = true;
                }
                Action::TraceOn => st.filt.off = false,
                Action::TraceOff if t.global => {
                    global_switch(G_OFF);
                    switched = true;
                }
                Action::TraceOff => st.filt.off = true,
                Action::Finish => {
                    global_switch(G_FINISH);
                    switched = true;
                }
                Action::Depth(n) => depth = Some(n),
                Action::Backtrace => backtrace = true,
                Action::Snapshot => {
                    if let Some(shm) = crate::runtime::shm::get() {
                        shm.request_snapshot();
                    }
                }
            }
        }
    }
    if switched {
        resync(st);
    }
    if st.filt.finished {
        recompute(st);
        return None;
    }
    Some((depth, backtrace))
}

/// Whether a flagged function's call entered now, at recorded level `v`,
/// is recorded (the state recomputed just before).
fn visible_now(st: &ThreadState, flags: u64, v: u64) -> bool {
    let visible = open(st) || (flags & F_FILTER != 0 && !st.filt.off && st.block & NT_MASK == 0);
    visible && flags & F_NOTRACE == 0 && v < st.max as u64
}

/// The entry of a Python function (`instrument::python`) with filters:
/// the same decisions as a native function's ([`flagged_entry`] for a
/// flagged one, the `limit` for another), and the same regions (`-F`,
/// `-N`, `depth=N`); its word kept on the thread's Python calls for its
/// exit ([`python_exit`]). A trigger's backtrace is not recorded for
/// it. Has its entry written by `write` (and its `-A` values by `args`)
/// and returns true when it is recorded.
pub fn python_entry(
    st: &mut ThreadState,
    func: u32,
    flags: u64,
    write: impl FnOnce(&mut ThreadState, EventKind, u32),
    args: impl FnOnce(&mut ThreadState),
) -> bool {
    let Some(cfg) = config() else { return false };
    if st.gen != GLOBAL.load(Ordering::Acquire) {
        resync(st);
    }
    if st.py_calls.is_null() {
        // The thread's first Python call with filters (once per state).
        // Made in place, zeroed (16 KiB: not through the stack of the
        // thread, which may be small).
        let layout = std::alloc::Layout::new::<PyCalls>();
        // SAFETY: a non-zero-sized layout; all zero bytes are an empty
        // `PyCalls`; never freed (kept with the state).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<PyCalls>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        st.py_calls = p;
    }
    // SAFETY: the thread's own, allocated above or before.
    let calls = unsafe { &mut *st.py_calls };
    if calls.len as usize >= PY_CALLS_MAX {
        calls.over += 1;
        return false;
    }
    let push = |st: &mut ThreadState, word: u64| {
        // SAFETY: as above; room checked.
        let calls = unsafe { &mut *st.py_calls };
        calls.words[calls.len as usize] = word;
        calls.len += 1;
    };
    let hidden = func as u64 | E_HIDDEN;
    if st.filt.finished {
        push(st, hidden);
        return false;
    }
    let Some((depth, _)) = fire_triggers(cfg, st, flags) else {
        push(st, hidden);
        return false;
    };
    let v = vdepth(st);
    recompute(st);
    let visible = visible_now(st, flags, v);
    let region = flags & (F_FILTER | F_NOTRACE) != 0 || (visible && depth.is_some());
    let mut word = open_region(st, func, flags, region);
    if visible {
        word |= visible_bits(st, flags, depth, v);
        st.py_visible += 1;
        write(st, EventKind::Entry, func);
        if flags & F_ARGS != 0 {
            args(st);
        }
    } else {
        word |= E_HIDDEN;
    }
    push(st, word);
    recompute(st);
    visible
}

/// The exit of a Python function entered through [`python_entry`]:
/// records it (an `Unwind` if `unwound`; before a return, its `-R` value,
/// written by `retval`) when its entry was recorded, and ends its region.
pub fn python_exit(
    st: &mut ThreadState,
    unwound: bool,
    write: impl FnOnce(&mut ThreadState, EventKind, u32),
    retval: impl FnOnce(&mut ThreadState, u32),
) {
    // SAFETY: the thread's own (null: no Python call entered with filters).
    let Some(calls) = (unsafe { st.py_calls.as_mut() }) else {
        return;
    };
    if calls.over > 0 {
        calls.over -= 1;
        return;
    }
    if calls.len == 0 {
        return;
    }
    calls.len -= 1;
    let word = calls.words[calls.len as usize];
    if word & E_HIDDEN == 0 {
        st.py_visible = st.py_visible.saturating_sub(1);
        if FINISHED.load(Ordering::Relaxed) == 0 {
            let kind = if unwound {
                EventKind::Unwind
            } else {
                if word & E_RETVAL != 0 {
                    retval(st, word as u32);
                }
                EventKind::Exit
            };
            write(st, kind, word as u32);
        }
    }
    // (A hidden Python call has no shadow entry: `hidden` counts those.)
    release(st, word & !E_HIDDEN);
    recompute(st);
}

/// # Safety
/// `gprs` holds 10 saved registers (`instrument::slow_path`), `xsave` an
/// xsave or fxsave area (xmm0..7 at offset 160 in both).
unsafe fn entry_regs(slot: u64, xsave: *const u8, gprs: *const u64) -> args::EntryRegs {
    // SAFETY: as the caller guarantees.
    unsafe {
        let g = |i: usize| gprs.add(i).read();
        let mut xmm = [[0u8; 16]; 8];
        for (i, x) in xmm.iter_mut().enumerate() {
            std::ptr::copy_nonoverlapping(xsave.add(160 + 16 * i), x.as_mut_ptr(), 16);
        }
        args::EntryRegs {
            rdi: g(5),
            rsi: g(6),
            rdx: g(7),
            rcx: g(8),
            r8: g(4),
            r9: g(3),
            rsp: slot,
            xmm,
        }
    }
}

/// A call of `func` open on a thread when fctrace attached (its entry
/// not seen), given to its new state outermost first
/// (`instrument::adopt`): the `func` word of its shadow entry, with the
/// filters' bits and the thread's filter state updated as its entry would
/// have (`-F`/`-N` regions, `-D`, `-R`; triggers do not fire); `None` if
/// the call would be neither recorded nor a region (no entry then).
pub fn adopted_call(st: &mut ThreadState, func: u32) -> Option<u64> {
    if !active() {
        return Some(func as u64);
    }
    if st.gen == NEVER {
        resync(st);
    }
    if st.filt.finished {
        return None;
    }
    let flags = func_flags(func);
    let v = vdepth(st);
    recompute(st);
    let visible = open(st) || (flags & F_FILTER != 0 && !st.filt.off && st.block & NT_MASK == 0);
    let visible = visible && flags & F_NOTRACE == 0 && v < st.max as u64;
    let retval = visible && flags & F_RETVAL != 0;
    let region = flags & (F_FILTER | F_NOTRACE) != 0 || retval;
    if !visible && !region {
        return None;
    }
    let word = region_word(st, func, flags, visible, region);
    Some(if retval { word | E_RETVAL } else { word })
}

/// The shadow entry's `func` word of a call of `func` (its filter
/// `flags`), shown or not (`visible`), a region or not; updates the
/// thread's counts of hidden entries and open `-F`/`-N` regions as its
/// entry opens them.
fn region_word(st: &mut ThreadState, func: u32, flags: u64, visible: bool, region: bool) -> u64 {
    let mut word = open_region(st, func, flags, region);
    if !visible {
        word |= E_HIDDEN;
        st.hidden += 1;
    }
    word
}

/// The bits a recorded call's word gets beyond its region's: a
/// `depth=N` limit from its level `v` (the limit before kept in the
/// word), its `-R`.
fn visible_bits(st: &mut ThreadState, flags: u64, depth: Option<u32>, v: u64) -> u64 {
    let mut word = 0;
    if let Some(n) = depth {
        word |= E_DEPTH | (st.max as u64).min(PREV_MASK) << PREV_SHIFT;
        // It only ever narrows the limit (-D, an outer depth=N).
        st.max = st.max.min((v + n as u64).min(PREV_MASK - 1) as u32);
    }
    if flags & F_RETVAL != 0 {
        word |= E_RETVAL;
    }
    word
}

/// The `-F`/`-N` region a call of `func` opens (its `-F` and `-N` counts
/// raised): its word's bits, with [`E_SLOW_EXIT`] when it is a `region`.
fn open_region(st: &mut ThreadState, func: u32, flags: u64, region: bool) -> u64 {
    let mut word = func as u64;
    if region {
        word |= E_SLOW_EXIT;
    }
    if flags & F_FILTER != 0 {
        word |= E_FILTER;
        st.filt.fl += 1;
    }
    if flags & F_NOTRACE != 0 {
        word |= E_NOTRACE;
        st.block += 1;
    }
    word
}

/// Ends [`adopted_call`]'s updates (once every call is pushed).
pub fn adopted_calls_done(st: &mut ThreadState) {
    if active() {
        recompute(st);
    }
}

/// Tracing resumed with the calls of `chain` open (outermost first), whose
/// return-address slots are `slots`: each that the shadow stack does not
/// hold (entered while tracing was off) gets a hidden entry there and its
/// return is taken over, and each hidden one it holds (a `-F`/`-N` region
/// entered while off) is marked, so that their returns are recorded as
/// end marks ([`record_end`]): replay-time `-F`/`-N` know when they end.
/// Only where tracing resumes, never on the hot path. A frame whose
/// function has no return site, or beyond the shadow stack's room, is
/// left as it is; so is every frame when the slots are not in stack order
/// (frames on another stack: a handler on `sigaltstack`), where an entry's
/// place in the shadow stack would be unclear.
fn hook_open_calls(st: &mut ThreadState, entered: u64, chain: &[u32], slots: &[u64]) {
    // SAFETY: [base, top) holds this thread's entries.
    let entries = unsafe { std::slice::from_raw_parts(st.shadow_base, depth_entries(st) as usize) };
    let known = slots.iter().copied().filter(|&x| x != 0).chain([entered]);
    if !decreasing(known) || !decreasing(entries.iter().map(|e| e.slot)) {
        return;
    }
    for (&func, &slot) in chain.iter().zip(slots) {
        // (Callers' slots lie above the slot of the call being entered.)
        if slot <= entered || slot % 8 != 0 {
            continue;
        }
        let n = depth_entries(st) as usize;
        // SAFETY: [base, top) holds this thread's entries; signals are
        // deferred in the slow path.
        let entries = unsafe { std::slice::from_raw_parts_mut(st.shadow_base, n) };
        // Entries are in stack order: outer frames (higher slots) first.
        let at = entries.partition_point(|e| e.slot > slot);
        if let Some(e) = entries.get_mut(at).filter(|e| e.slot == slot) {
            if e.func & E_HIDDEN != 0 && e.func & E_SLOW_EXIT != 0 {
                e.func |= E_OPENED;
            }
            continue;
        }
        let site = crate::runtime::frames::ret_site(func as u64);
        if site == 0 || st.shadow_top >= st.shadow_end {
            continue;
        }
        // SAFETY: `slot` is the return-address slot of a frame open on
        // this thread's stack (the walk found it); the entries above `at`
        // move up by one, within the shadow stack (room checked).
        unsafe {
            let p = slot as *mut u64;
            let ret = p.read();
            if ret == site {
                continue;
            }
            let base = st.shadow_base.add(at);
            std::ptr::copy(base, base.add(1), n - at);
            base.write(ShadowEntry {
                ret,
                slot,
                func: func as u64 | E_SLOW_EXIT | E_HIDDEN | E_OPENED,
            });
            st.shadow_top = st.shadow_top.add(1);
            st.hidden += 1;
            p.write(site);
        }
    }
}

/// Whether the values are in strictly decreasing order.
fn decreasing(v: impl Iterator<Item = u64>) -> bool {
    let mut last = u64::MAX;
    for x in v {
        if x >= last {
            return false;
        }
        last = x;
    }
    true
}

/// The end mark of a call open where tracing resumed, entered while it
/// was off (no entry recorded): an `Args` event of `func` whose payload
/// is a chain of `func` alone with the end flag (`fctrace_format::argval`;
/// the tree skips it, the display filters end the call there).
fn record_end(st: &mut ThreadState, func: u32) {
    buffer::emit(st, EventKind::Args, func, 8, |w| {
        w.end_mark(func);
    });
}

/// Records the callers of `func` (outermost first) as an `Args` event of
/// `func` whose payload is a chain (`fctrace_format::argval`): a
/// backtrace, or with `resume` the calls open where tracing resumed;
/// right after its `Entry` and before its own arguments.
fn record_chain(st: &mut ThreadState, func: u32, callers: &[u32], cut: bool, resume: bool) {
    buffer::emit(st, EventKind::Args, func, 4 + 4 * callers.len(), |w| {
        w.chain(callers, cut, resume);
    });
}

/// Set when attaching (`fctrace -p`): the functions' code ranges are kept
/// for the calls open then (`instrument::adopt`), walks or not.
static RANGES_WANTED: AtomicBool = AtomicBool::new(false);

pub fn want_ranges() {
    RANGES_WANTED.store(true, Ordering::Relaxed);
}

/// Whether the functions' code ranges are kept.
fn ranges_on() -> bool {
    RANGES_WANTED.load(Ordering::Relaxed) || config().is_some_and(|c| c.walks)
}

/// Drops the functions' code ranges (detaching: no thread runs the
/// agent's code).
pub fn forget_ranges() {
    backtrace::forget_ranges();
}

/// The traced function whose code holds `pc` (noted by [`note_range`] or
/// [`note_import_range`] and published), and its first address.
pub fn func_at(pc: u64) -> Option<(u32, u64)> {
    backtrace::func_at(pc)
}

/// Notes that the code of function `id` spans `[addr, addr + size)` (for
/// the stack walks of `backtrace` and `trace_on` triggers, and the calls
/// open when attaching; nothing without them).
pub fn note_range(id: u32, addr: u64, size: u64) {
    if ranges_on() && size > 0 {
        backtrace::note_range(id, addr, size);
    }
}

/// Notes the code of the library function at `target` that the import
/// traced as function `id` calls (its symbol's extent, if the library
/// exports it with a size), so that its frames are named in backtraces
/// as the calls recorded for it are.
pub fn note_import_range(id: u32, target: u64) {
    if !ranges_on() || crate::runtime::frames::in_agent(target) {
        return;
    }
    unsafe extern "C" {
        fn dladdr1(
            addr: *const std::ffi::c_void,
            info: *mut libc::Dl_info,
            extra: *mut *mut std::ffi::c_void,
            flags: i32,
        ) -> i32;
    }
    const RTLD_DL_SYMENT: i32 = 1;
    // SAFETY: a zeroed Dl_info is valid for dladdr1 to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut sym: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables and writes `info`
    // and `sym` (a pointer to the symbol's Elf64_Sym, which stays mapped
    // with its library).
    let size = unsafe {
        if dladdr1(target as *const _, &mut info, &mut sym, RTLD_DL_SYMENT) == 0
            || sym.is_null()
            || info.dli_saddr as u64 != target
        {
            return;
        }
        (*(sym as *const libc::Elf64_Sym)).st_size
    };
    if size > 0 {
        backtrace::note_range(id, target, size);
    }
}

/// Publishes the ranges noted so far.
pub fn publish_ranges() {
    if ranges_on() {
        backtrace::publish_ranges();
    }
}

/// Conditions on arguments (`FUNC@if:arg1==0`): which of them name each
/// function (noted at instrumentation, published with the flags, read
/// without a lock), and whether they hold at a call.
pub mod conds {
    use super::Config;
    use crate::recording::args::{self, EntryRegs};
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::Mutex;

    /// Conditions used at most (a bit each).
    pub const MAX: usize = 32;
    /// (function id, the bits of its conditions), sorted when published.
    type Table = Vec<(u32, u32)>;
    static PENDING: Mutex<Table> = Mutex::new(Vec::new());
    static TABLE: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());

    /// Forgets the conditions of earlier options (a later attach).
    pub fn reset() {
        PENDING.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // (The old table is leaked: a thread may still be reading it.)
        TABLE.store(std::ptr::null_mut(), Ordering::Release);
    }

    pub fn note(func: u32, mask: u32) {
        PENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((func, mask));
    }

    /// Publishes the conditions noted so far (old tables leaked: another
    /// thread may be reading one).
    pub fn publish() {
        let mut v = PENDING.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if v.is_empty() {
            return;
        }
        v.sort_unstable();
        TABLE.store(Box::leak(Box::new(v)), Ordering::Release);
    }

    /// Whether every condition naming `func` holds for the call whose
    /// argument registers are `regs` (in process `pid`). An argument that
    /// cannot be read fails it.
    pub(super) fn hold(cfg: &Config, func: u32, pid: u32, regs: &EntryRegs) -> bool {
        let p = TABLE.load(Ordering::Acquire);
        if p.is_null() {
            return true;
        }
        // SAFETY: published tables are leaked, never mutated.
        let v = unsafe { &*p };
        let Ok(i) = v.binary_search_by_key(&func, |e| e.0) else {
            return true;
        };
        let mask = v[i].1;
        cfg.opts
            .conds
            .iter()
            .take(MAX)
            .enumerate()
            .filter(|(k, _)| mask & 1 << k != 0)
            .all(|(_, c)| args::int_arg(pid, regs, c.arg).is_some_and(|x| c.holds(x)))
    }
}

/// The stack walk of `backtrace` triggers.
///
/// The real stack is walked with libgcc's `_Unwind_Backtrace` (DWARF call
/// frame information), so that callers the filters hid (no shadow entry)
/// are found too. The walk cannot start in the slow path itself: the
/// generated code that called it has no unwind information. So it goes in
/// two steps: a first walk over the agent's own frames stops at the
/// generated code and reads the program's callee-saved registers there
/// (rbx is in the saved registers, the generated code changes no other);
/// then [`fctrace_bt_walk`] calls the unwinder with those registers loaded
/// and unwind information saying that its caller is the traced function's
/// caller: its canonical frame address is the traced function's slot + 8,
/// stored in its frame. Traced frames' slots hold their real return
/// addresses during the walk (`runtime::frames::restore_all`); signals are deferred
/// in the slow path. Each frame's address is mapped to the instrumented
/// function containing it; frames of other code (libraries not traced,
/// the agent) are left out.
mod backtrace {
    use super::MAX_BACKTRACE;
    use crate::runtime::state::ThreadState;
    use std::ffi::c_void;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::Mutex;

    type Callback = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;
    type BacktraceFn = unsafe extern "C" fn(Callback, *mut c_void) -> i32;
    type GetFn = unsafe extern "C" fn(*mut c_void) -> u64;
    type GetGrFn = unsafe extern "C" fn(*mut c_void, i32) -> u64;
    type GetCfaFn = unsafe extern "C" fn(*mut c_void) -> u64;

    /// `_URC_NO_REASON`: go on walking; anything else stops.
    const GO_ON: i32 = 0;
    const STOP: i32 = 5;

    fn unwind_backtrace() -> BacktraceFn {
        // SAFETY: libgcc's _Unwind_Backtrace has this C signature.
        unsafe { crate::real!("_Unwind_Backtrace", BacktraceFn) }
    }
    fn get_ip() -> GetFn {
        // SAFETY: _Unwind_GetIP(struct _Unwind_Context *) -> _Unwind_Ptr.
        unsafe { crate::real!("_Unwind_GetIP", GetFn) }
    }
    fn get_gr() -> GetGrFn {
        // SAFETY: _Unwind_GetGR(struct _Unwind_Context *, int) -> _Unwind_Word.
        unsafe { crate::real!("_Unwind_GetGR", GetGrFn) }
    }
    fn get_cfa() -> GetCfaFn {
        // SAFETY: _Unwind_GetCFA(struct _Unwind_Context *) -> _Unwind_Word.
        unsafe { crate::real!("_Unwind_GetCFA", GetCfaFn) }
    }

    unsafe extern "C" fn nothing(_ctx: *mut c_void, _arg: *mut c_void) -> i32 {
        STOP
    }

    /// Resolves the unwinder's functions and runs it once, at start-up,
    /// so that no first-use work (symbol lookup, libgcc's set-up) happens
    /// in the middle of a traced call.
    pub fn warm_up() {
        get_ip();
        get_gr();
        get_cfa();
        crate::runtime::frames::in_agent(0);
        // SAFETY: a callback that stops at once.
        unsafe { unwind_backtrace()(nothing, std::ptr::null_mut()) };
    }

    /// (start, end, id), sorted by start once published.
    type Ranges = Vec<(u64, u64, u32)>;
    static PENDING: Mutex<Ranges> = Mutex::new(Vec::new());
    static RANGES: AtomicPtr<Ranges> = AtomicPtr::new(std::ptr::null_mut());

    pub fn note_range(id: u32, addr: u64, size: u64) {
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        p.push((addr, addr + size, id));
    }

    pub fn forget_ranges() {
        PENDING.lock().unwrap_or_else(|e| e.into_inner()).clear();
        PENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shrink_to_fit();
        let p = RANGES.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: leaked by `publish_ranges`; no thread reads it (the
            // caller's promise).
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// Publishes a new table (old ones are leaked: another thread may be
    /// reading one).
    pub fn publish_ranges() {
        let mut v = PENDING.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_unstable();
        RANGES.store(Box::leak(Box::new(v)), Ordering::Release);
    }

    pub fn func_at(pc: u64) -> Option<(u32, u64)> {
        let p = RANGES.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: published tables are leaked, never mutated.
        let v = unsafe { &*p };
        let i = v.partition_point(|r| r.0 <= pc);
        let &(lo, hi, id) = v.get(i.checked_sub(1)?)?;
        (lo..hi).contains(&pc).then_some((id, lo))
    }

    /// First walk: the callee-saved registers (rbp, r12..r15) of the first
    /// frame outside the agent (the generated code that called the slow
    /// path).
    struct Regs {
        found: bool,
        vals: [u64; 5],
    }

    unsafe extern "C" fn regs_frame(ctx: *mut c_void, data: *mut c_void) -> i32 {
        // SAFETY: data is the Regs of `walk`, alive during the walk; ctx
        // the unwinder's context of this frame.
        unsafe {
            let r = &mut *(data as *mut Regs);
            let ip = get_ip()(ctx);
            if ip == 0 || crate::runtime::frames::in_agent(ip) {
                return GO_ON;
            }
            for (k, reg) in [6, 12, 13, 14, 15].into_iter().enumerate() {
                r.vals[k] = get_gr()(ctx, reg);
            }
            r.found = true;
        }
        STOP
    }

    /// Second walk: the functions of the program's frames, innermost
    /// first.
    struct Chain<'a> {
        out: &'a mut [u32; MAX_BACKTRACE],
        /// The return-address slot of each frame: the canonical frame
        /// address of the frame above it, minus 8 (at a frame, the
        /// unwinder's CFA is the one of the frame that returns into it).
        slots: &'a mut [u64; MAX_BACKTRACE],
        /// The frame whose slot the next frame gives.
        pending: Option<usize>,
        n: usize,
        cut: bool,
    }

    unsafe extern "C" fn chain_frame(ctx: *mut c_void, data: *mut c_void) -> i32 {
        // SAFETY: as in regs_frame.
        unsafe {
            let c = &mut *(data as *mut Chain);
            let ip = get_ip()(ctx);
            if ip == 0 {
                return STOP;
            }
            if let Some(k) = c.pending.take() {
                c.slots[k] = get_cfa()(ctx).saturating_sub(8);
            }
            // A return address: the call is the byte before.
            if let Some((id, _)) = func_at(ip - 1) {
                if c.n == MAX_BACKTRACE {
                    c.cut = true;
                    return STOP;
                }
                c.out[c.n] = id;
                c.slots[c.n] = 0;
                c.pending = Some(c.n);
                c.n += 1;
            }
        }
        GO_ON
    }

    unsafe extern "C" {
        /// `fctrace_bt_walk(cfa, regs, unwind_backtrace, callback, arg)`.
        fn fctrace_bt_walk(
            cfa: u64,
            regs: *const u64,
            walker: BacktraceFn,
            f: Callback,
            arg: *mut c_void,
        ) -> i32;
    }

    // Calls `walker(f, arg)` with rbx, rbp, r12..r15 loaded from `regs`;
    // its unwind information says that the canonical frame address is the
    // value stored at its stack pointer (`cfa`), so that the return
    // address is at `cfa - 8` and the caller's registers are the ones
    // loaded. Nothing unwinds through it otherwise.
    std::arch::global_asm!(
        ".pushsection .text.fctrace_bt_walk,\"ax\",@progbits",
        ".p2align 4",
        ".globl fctrace_bt_walk",
        ".hidden fctrace_bt_walk",
        ".type fctrace_bt_walk,@function",
        "fctrace_bt_walk:",
        ".cfi_startproc",
        "push rbp",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbp, -16",
        "push rbx",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbx, -24",
        "push r12",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r12, -32",
        "push r13",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r13, -40",
        "push r14",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r14, -48",
        "push r15",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r15, -56",
        "sub rsp, 8",
        ".cfi_adjust_cfa_offset 8",
        "mov [rsp], rdi",
        "mov rax, rdx",
        "mov rdi, rcx",
        "mov rbx, [rsi]",
        "mov rbp, [rsi + 8]",
        "mov r12, [rsi + 16]",
        "mov r13, [rsi + 24]",
        "mov r14, [rsi + 32]",
        "mov r15, [rsi + 40]",
        "mov rsi, r8",
        ".cfi_remember_state",
        // DW_CFA_def_cfa_expression { DW_OP_breg7 (rsp) 0; DW_OP_deref }
        ".cfi_escape 0x0f, 0x03, 0x77, 0x00, 0x06",
        ".cfi_same_value rbx",
        ".cfi_same_value rbp",
        ".cfi_same_value r12",
        ".cfi_same_value r13",
        ".cfi_same_value r14",
        ".cfi_same_value r15",
        "call rax",
        ".cfi_restore_state",
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        "pop r15",
        ".cfi_adjust_cfa_offset -8",
        "pop r14",
        ".cfi_adjust_cfa_offset -8",
        "pop r13",
        ".cfi_adjust_cfa_offset -8",
        "pop r12",
        ".cfi_adjust_cfa_offset -8",
        "pop rbx",
        ".cfi_adjust_cfa_offset -8",
        "pop rbp",
        ".cfi_adjust_cfa_offset -8",
        "ret",
        ".cfi_endproc",
        ".size fctrace_bt_walk, .-fctrace_bt_walk",
        ".popsection",
    );

    /// The instrumented functions on the stack of the call being entered
    /// at `slot`, outermost first in `out`: (count, whether outer ones
    /// were left out); `None` if the walk could not start (nothing is
    /// recorded then: replay rebuilds the chain from the recorded calls).
    ///
    /// # Safety
    /// In the slow path (busy, signals deferred) of the entry whose return
    /// slot is `slot`, before its shadow entry is pushed; `gprs` as saved
    /// by the generated code (rbx first).
    pub unsafe fn walk(
        st: &ThreadState,
        slot: u64,
        gprs: *const u64,
        out: &mut [u32; MAX_BACKTRACE],
        slots: &mut [u64; MAX_BACKTRACE],
    ) -> Option<(usize, bool)> {
        if RANGES.load(Ordering::Acquire).is_null() {
            return None;
        }
        let mut r = Regs {
            found: false,
            vals: [0; 5],
        };
        // SAFETY: the callback only reads the context; `r` outlives the walk.
        unsafe { unwind_backtrace()(regs_frame, &mut r as *mut Regs as *mut c_void) };
        if !r.found {
            return None;
        }
        // SAFETY: gprs[0] is the saved rbx.
        let rbx = unsafe { gprs.read() };
        let regs = [rbx, r.vals[0], r.vals[1], r.vals[2], r.vals[3], r.vals[4]];
        let mut c = Chain {
            out,
            slots,
            pending: None,
            n: 0,
            cut: false,
        };
        crate::runtime::frames::restore_all(st);
        // SAFETY: the trampoline above, with the traced call's frame
        // address and registers; the callback only reads the context and
        // writes `c`, alive during the walk.
        unsafe {
            fctrace_bt_walk(
                slot + 8,
                regs.as_ptr(),
                unwind_backtrace(),
                chain_frame,
                &mut c as *mut Chain as *mut c_void,
            )
        };
        crate::runtime::frames::hijack_all(st);
        let (n, cut) = (c.n, c.cut);
        out[..n].reverse();
        slots[..n].reverse();
        Some((n, cut))
    }
}

/// The exit of a frame whose shadow entry has `E_SLOW_EXIT` (the top
/// one, whose slot is `slot`: the generated code checked it).
///
/// # Safety
/// Called by `instrument::slow_path` from the generated exit, whose saved
/// rax and rdx lie at `slot - 8` and `slot - 24`.
pub unsafe fn flagged_exit(shm: &Shm, st: &mut ThreadState, slot: u64, xsave: *const u8) {
    // SAFETY: the top entry exists (its slot matched); the slot is on this
    // thread's stack.
    let e = unsafe {
        let e = *st.shadow_top.sub(1);
        (slot as *mut u64).write(e.ret);
        st.shadow_top = st.shadow_top.sub(1);
        e
    };
    let func = e.func as u32;
    if e.func & E_HIDDEN == 0 && FINISHED.load(Ordering::Relaxed) == 0 {
        if e.func & E_RETVAL != 0 {
            // SAFETY: the exit's saved registers and xsave area.
            let regs = unsafe {
                let mut r = args::ExitRegs {
                    rax: ((slot - 8) as *const u64).read(),
                    rdx: ((slot - 24) as *const u64).read(),
                    xmm0: [0; 16],
                    xmm1: [0; 16],
                };
                std::ptr::copy_nonoverlapping(xsave.add(160), r.xmm0.as_mut_ptr(), 16);
                std::ptr::copy_nonoverlapping(xsave.add(176), r.xmm1.as_mut_ptr(), 16);
                r
            };
            args::on_exit(st, func, &regs);
        }
        buffer::append(shm, st, EventKind::Exit, func);
    } else if e.func & E_OPENED != 0 && FINISHED.load(Ordering::Relaxed) == 0 {
        record_end(st, func);
    }
    release(st, e.func);
}

/// Undoes what the region of a popped shadow entry changed.
fn release(st: &mut ThreadState, word: u64) {
    if word & E_SLOW_EXIT == 0 {
        return;
    }
    if word & E_HIDDEN != 0 {
        st.hidden = st.hidden.saturating_sub(1);
    }
    if word & E_FILTER != 0 {
        st.filt.fl = st.filt.fl.saturating_sub(1);
    }
    if word & E_NOTRACE != 0 && st.block & NT_MASK != 0 {
        st.block -= 1;
    }
    if word & E_DEPTH != 0 {
        let p = (word >> PREV_SHIFT) & PREV_MASK;
        st.max = if p == PREV_MASK { u32::MAX } else { p as u32 };
    }
    recompute(st);
}

/// A shadow entry (its `func` word) was popped because its frame is gone
/// without returning: records its `Unwind` exit if the call was recorded,
/// and ends its region.
pub fn unwound(shm: &Shm, st: &mut ThreadState, word: u64) {
    if !active() || (word & E_HIDDEN == 0 && FINISHED.load(Ordering::Relaxed) == 0) {
        buffer::append(shm, st, EventKind::Unwind, word as u32);
    } else if word & E_OPENED != 0 && FINISHED.load(Ordering::Relaxed) == 0 {
        record_end(st, word as u32);
    }
    if active() {
        release(st, word);
    }
}
