//! The per-thread state's layout, and the words and bits the generated
//! code shares with the rest of the agent: offsets of [`ThreadState`]'s
//! fields, the slow path's reasons, and the filters' bits in a shadow
//! entry's `func` word and in the state's `block` word. Layouts only (no
//! code): the generated code (`arch::x86_64::codegen`), the filters
//! (`recording::filter`) and the rest read them from here.

use fctrace_format::shm::BufHeader;

/// One saved return: pushed at entry, popped at exit.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ShadowEntry {
    /// The caller's real return address.
    pub ret: u64,
    /// Stack address of the return-address slot (rsp at entry).
    pub slot: u64,
    /// Function id.
    pub func: u64,
}

pub const SHADOW_ENTRY_SIZE: usize = std::mem::size_of::<ShadowEntry>();

/// Entries of the shadow stack a thread uses after its thread-exit hook
/// (the thread library's last calls), kept in its state.
pub const EXIT_ENTRIES: usize = 15;

/// Offsets used by the generated assembly: keep in sync with
/// `arch::x86_64::codegen`.
pub const OFF_SHADOW_TOP: i32 = 0;
pub const OFF_SHADOW_END: i32 = 8;
pub const OFF_BUF: i32 = 16;

#[repr(C)]
pub struct ThreadState {
    pub shadow_top: *mut ShadowEntry,
    pub shadow_end: *mut ShadowEntry,
    pub buf: *mut BufHeader,
    pub shadow_base: *mut ShadowEntry,
    pub buf_index: u32,
    pub seq: u32,
    pub task_slot: u32,
    pub tid: u32,
    pub pid: u32,
    pub session: u32,
    /// While an unwinder runs (the thread's busy word is `BUSY_UNWINDING`):
    /// a stack address inside the agent's unwinder entry point. Calls whose
    /// slot lies above it come from frames the unwinder handed control
    /// back to (see `interpose::unwind`).
    pub unwind_sp: u64,
    /// The thread's chain of ucontext switches (`interpose::context`),
    /// allocated at its first `swapcontext`; null before. Opaque here: its
    /// type is the layer above's (a `*mut context::Chain`, same layout).
    pub contexts: *mut std::ffi::c_void,
    /// With filters (`recording::filter`): calls that are not flagged are
    /// recorded only while `shadow_top` is below this (0: none are).
    pub limit: u64,
    /// With filters: the global switch word this thread last applied.
    pub gen: u32,
    /// With filters: non-zero while nothing may be recorded: open `-N`
    /// regions (bits 0..24) and the `B_*` bits below.
    pub block: u32,
    /// With filters: shadow entries of calls that were not recorded
    /// (region owners).
    pub hidden: u64,
    /// With filters: the depth limit in recorded levels (`u32::MAX`: none).
    pub max: u32,
    /// With filters: the thread's filter state.
    pub filt: FilterState,
    /// The shadow stack's mapping and its length (0: the thread ended and
    /// uses `exit_stack`).
    pub shadow_map: u64,
    pub shadow_len: usize,
    /// The signal frame (its ucontext's address) of the last signal that
    /// interrupted this thread in generated code, while its handler may
    /// still run (0: none). Interrupted generated code may hold shadow
    /// stack addresses in registers: the shadow stack does not move then.
    pub sig_frame: u64,
    /// The shadow stack after the thread-exit hook; entry 0 is the spare
    /// entry below the base.
    pub exit_stack: [ShadowEntry; EXIT_ENTRIES + 1],
    /// The buffer a signal handler made this thread leave while an
    /// interrupted write into it was pending (`buffer::release_buffer`):
    /// bit 63 = the next buffer switch must park the old buffer; low 32
    /// bits = index + 1 of the parked buffer (0: none).
    pub park: std::sync::atomic::AtomicU64,
    /// Every state made, in a list (`runtime::thread::each_state`): the
    /// next one (null: the last).
    pub next: *mut ThreadState,
    /// 1 once its thread no longer uses it (after a detach), to be
    /// reused by a new thread's state.
    pub free: std::sync::atomic::AtomicU32,
    /// A thread that was running when `fctrace -p` attached, with traced
    /// calls open (`instrument::adopt`): those calls (outermost first),
    /// recorded as an attach chain before its first event, when its task
    /// is registered (`runtime::buffer`); null otherwise. Its buffer is
    /// then `shm::pending_buffer()`, which is always full.
    pub adopt: *mut Vec<u32>,
    /// Python functions entered on this thread and not yet left
    /// (`instrument::python`): a return with none open is one of a call
    /// made before fctrace's profile function was installed, not recorded.
    pub py_depth: u32,
    /// With filters: the open Python calls' region words
    /// (`recording::filter::python_entry`); allocated at the thread's first
    /// Python call, kept when the state is reused. Null before.
    pub py_calls: *mut PyCalls,
    /// With filters: recorded Python calls open on the thread (levels of
    /// the depth limit, as recorded native calls are).
    pub py_visible: u64,
    /// Where the thread's last Python event placed by a profile function
    /// ended in its buffer: (buffer index + 1) << 32 | offset; 0: none
    /// (`instrument::python`, with filters).
    pub py_mark: u64,
}

/// Open Python calls kept for their exits.
pub const PY_CALLS_MAX: usize = 2048;

/// With filters, per thread: the word of each open Python call, innermost
/// last (a shadow entry's `func` word: the function id, and the `E_*`
/// bits of what its entry changed); `over`: calls opened beyond
/// `PY_CALLS_MAX` (neither recorded nor regions).
#[repr(C)]
pub struct PyCalls {
    pub len: u32,
    pub over: u32,
    pub words: [u64; PY_CALLS_MAX],
}

pub const OFF_LIMIT: i32 = std::mem::offset_of!(ThreadState, limit) as i32;
pub const OFF_GEN: i32 = std::mem::offset_of!(ThreadState, gen) as i32;
pub const OFF_BLOCK: i32 = std::mem::offset_of!(ThreadState, block) as i32;
pub const OFF_HIDDEN: i32 = std::mem::offset_of!(ThreadState, hidden) as i32;
pub const OFF_MAX: i32 = std::mem::offset_of!(ThreadState, max) as i32;
/// The count of open `-F` regions ([`FilterState`]), which the
/// generated `-F` entry and exit update.
pub const OFF_FL: i32 = (std::mem::offset_of!(ThreadState, filt) + FL_OFFSET) as i32;

// The reasons the generated code passes to the slow path
// (`instrument::slow_path`).
pub const SLOW_INIT: u64 = 1;
pub const SLOW_FULL: u64 = 2;
pub const SLOW_MISMATCH: u64 = 3;
pub const SLOW_UNWINDING: u64 = 4;
/// With filters: the global switch word changed; apply it.
pub const SLOW_RESYNC: u64 = 5;
/// With filters: the entry of a flagged function.
pub const SLOW_FLAGGED_ENTRY: u64 = 6;
/// With filters: the exit of a frame whose shadow entry asks for one.
pub const SLOW_FLAGGED_EXIT: u64 = 7;
/// The shadow stack is full: grow it (non-zero if it grew).
pub const SLOW_GROW: u64 = 8;

// ---- Filter state (`recording::filter` keeps it; the generated code reads
// and updates some of it) ---------------------------------------------------

/// `ThreadState::gen` of a thread that has not applied the options yet.
pub const NEVER: u32 = u32::MAX;

// Bits of a shadow entry's `func` word above the function id. Bit 32 is
// tested by the generated exit code (`test byte [entry+20], 1`).
pub const E_SLOW_EXIT: u64 = 1 << 32;
pub const E_HIDDEN: u64 = 1 << 33;
pub const E_FILTER: u64 = 1 << 34;
pub const E_NOTRACE: u64 = 1 << 35;
pub const E_DEPTH: u64 = 1 << 36;
pub const E_RETVAL: u64 = 1 << 37;
/// A hidden frame open where tracing resumed (`recording::filter::hook_open_calls`): its
/// return (or unwinding) is recorded as an end mark.
pub const E_OPENED: u64 = 1 << 38;
/// Bits 40..62: the depth limit before a `depth=N` region.
pub const PREV_SHIFT: u32 = 40;
pub const PREV_MASK: u64 = (1 << 22) - 1;

/// `ThreadState::block`: the open `-N` regions are counted in bits 0..24
/// (the generated `-N` entry and exit add and subtract 1); these bits are
/// kept by `recording::filter::recompute` from the [`FilterState`].
pub const NT_MASK: u32 = (1 << 24) - 1;
pub const B_OFF: u32 = 1 << 24;
pub const B_FINISHED: u32 = 1 << 25;
/// Outside every `-F` function (with `-F` given): tested by the
/// generated `-F` entry.
pub const B_NOFILTER: u32 = 1 << 26;
/// The `func` word bits (above 32) of a `-N` region entry made by the
/// generated `-N` entry: its exit is generated too.
pub const NOTRACE_ENTRY_BITS: u64 = E_SLOW_EXIT | E_HIDDEN | E_NOTRACE;
/// The `func` word bits (above 32) of a recorded `-F` region entry of a
/// `-F`-only function (made by `recording::filter::flagged_entry` or by the generated `-F`
/// entry): its exit is generated.
pub const FILTER_ENTRY_BITS: u64 = E_SLOW_EXIT | E_FILTER;

/// A thread's filter state (with [`ThreadState::limit`], `gen`, `block`,
/// `hidden` and `max`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FilterState {
    /// Open `-F` regions (the generated `-F` entry and exit add and
    /// subtract 1, at [`FL_OFFSET`]).
    pub fl: u32,
    /// Tracing switched off for this thread.
    pub off: bool,
    /// `finish` seen.
    pub finished: bool,
}

/// Offset of the count of open `-F` regions in [`FilterState`].
pub const FL_OFFSET: usize = std::mem::offset_of!(FilterState, fl);

/// A shadow entry's `func` word bit: a `-R` frame whose return value the
/// generated exit records (`arch::x86_64::codegen`, the fast flagged
/// entry and exit); bits 40..63 then hold the value's header (the
/// argval `INT` tag, its format and its size in bytes), precomputed.
/// Only with [`E_SLOW_EXIT`] and [`E_RETVAL`] (never with `E_DEPTH`,
/// whose bits 40..61 it would share).
pub const E_FASTRET: u64 = 1 << 39;
/// The low byte of `func >> 32` of such a frame.
pub const FASTRET_BITS: u8 = ((E_SLOW_EXIT | E_RETVAL | E_FASTRET) >> 32) as u8;
/// Where the header of the return value lies in the word.
pub const FASTRET_SHIFT: u32 = 40;

/// Values one fast flagged entry records at most.
pub const FAST_ITEMS: usize = 8;

/// One integer argument the fast flagged entry records.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FastItem {
    /// The argument register: 0..5 for rdi, rsi, rdx, rcx, r8, r9.
    pub reg: u8,
    pub _pad: [u8; 3],
    /// The argval header: `TAG_INT | format << 8 | size << 16`.
    pub hdr: u32,
    /// The bits of the value kept (its size).
    pub mask: u64,
}

/// What the *fast flagged entry* (`arch::x86_64::codegen`) of one
/// function does, precomputed at instrumentation
/// (`recording::filter::fast_desc`); its stub passes its address in rax.
/// Made once, never freed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FastDesc {
    /// The function id.
    pub id: u32,
    /// Bytes reserved in the buffer: the `Entry`, and with arguments the
    /// `Args` record and its payload records.
    pub want: u32,
    /// The `Entry` record's word.
    pub entry_word: u64,
    /// The shadow entry's `func` word.
    pub shadow_word: u64,
    /// The `Args` record's word while its payload is written (announcing
    /// every reserved payload record) and once it is.
    pub prov_word: u64,
    pub args_word: u64,
    /// The trigger condition: the call takes the fast entry only while
    /// `block & trig_mask == trig_want` (a `trace_on` that finds tracing
    /// on, a `trace_off` that finds it off: nothing to do).
    pub trig_mask: u32,
    pub trig_want: u32,
    /// Arguments recorded (0: no `Args` record).
    pub count: u32,
    pub _pad: u32,
    /// A `depth=N` trigger: all ones (else 0), and N. The call's shadow
    /// entry then keeps the depth limit from before it (`E_DEPTH`), the
    /// limit becomes at most N levels from the call, and the generated
    /// exit puts it back.
    pub depth_mask: u64,
    pub depth: u64,
    pub items: [FastItem; FAST_ITEMS],
}

pub const FD_ID: i32 = std::mem::offset_of!(FastDesc, id) as i32;
pub const FD_WANT: i32 = std::mem::offset_of!(FastDesc, want) as i32;
pub const FD_ENTRY_WORD: i32 = std::mem::offset_of!(FastDesc, entry_word) as i32;
pub const FD_SHADOW_WORD: i32 = std::mem::offset_of!(FastDesc, shadow_word) as i32;
pub const FD_PROV_WORD: i32 = std::mem::offset_of!(FastDesc, prov_word) as i32;
pub const FD_ARGS_WORD: i32 = std::mem::offset_of!(FastDesc, args_word) as i32;
pub const FD_TRIG_MASK: i32 = std::mem::offset_of!(FastDesc, trig_mask) as i32;
pub const FD_TRIG_WANT: i32 = std::mem::offset_of!(FastDesc, trig_want) as i32;
pub const FD_COUNT: i32 = std::mem::offset_of!(FastDesc, count) as i32;
pub const FD_DEPTH_MASK: i32 = std::mem::offset_of!(FastDesc, depth_mask) as i32;
pub const FD_DEPTH: i32 = std::mem::offset_of!(FastDesc, depth) as i32;
/// The low byte of `func >> 32` of a `depth=N` region made by the fast
/// flagged entry (`E_SLOW_EXIT | E_DEPTH`, nothing else), whose exit is
/// generated.
pub const DEPTH_BITS: u8 = ((E_SLOW_EXIT | E_DEPTH) >> 32) as u8;
/// Offset of the shadow stack's base (the generated code computes depths).
pub const OFF_SHADOW_BASE: i32 = std::mem::offset_of!(ThreadState, shadow_base) as i32;
pub const FD_ITEMS: i32 = std::mem::offset_of!(FastDesc, items) as i32;
pub const FI_SIZE: i32 = std::mem::size_of::<FastItem>() as i32;
pub const FI_HDR: i32 = std::mem::offset_of!(FastItem, hdr) as i32;
pub const FI_MASK: i32 = std::mem::offset_of!(FastItem, mask) as i32;
