//! The event record, as the agent writes it into shared memory.
//!
//! An event is 16 bytes: a packed word (function id and kind) and the raw
//! timestamp-counter value. The agent's hot path writes these with plain
//! stores; everything else in fctrace reads them through this module.

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A function was entered.
    Entry = 0,
    /// A function returned normally.
    Exit = 1,
    /// A function's frame vanished without returning (longjmp, exception
    /// unwinding, thread exit): the time is when the agent noticed.
    Unwind = 2,
    /// `func` holds a count of events that were lost at this point.
    Lost = 3,
    /// A signal was delivered to the task: `func` holds the signal number.
    /// The handler's calls (if it is traced) follow, nested under the
    /// function the signal interrupted; a fatal signal without a handler
    /// is the task's last event.
    Signal = 4,
    /// The argument values of the function whose `Entry` is just before
    /// (same `func`). In a shared-memory buffer the record is followed by
    /// [`RawEvent::payload_records`] records holding the payload bytes
    /// (see [`crate::argval`]); decoded, it is followed by `Data` events.
    Args = 5,
    /// The return value of the function whose `Exit` follows (same
    /// `func`), with a payload as for `Args`.
    Retval = 6,
    /// Decoded events only (never in a buffer or a file): up to 16 bytes of
    /// the payload of the `Args`/`Retval` before it. `func` is the number of
    /// bytes used (1..=16); `tsc` holds bytes 0..8 and `ns` bytes 8..16,
    /// little-endian. See [`crate::store::Event::data_bytes`].
    Data = 7,
    /// Decoded events only, from a task's kernel events (`record -k`,
    /// `crate::store::kernel`): a system call entered; `func` is its
    /// number, `Data` events follow with its 6 arguments (u64 each) and,
    /// when the kernel copied the path it was given, its length (u16) and
    /// bytes.
    Syscall = 8,
    /// Decoded events only: a system call returned; `func` is its number,
    /// `Data` events follow with its result (i64), the time the thread
    /// spent off the CPU during the call (u64 ns) and, when the call was
    /// entered too and interrupts ran on its CPU meanwhile (`record -K`),
    /// how many and how long (u64, u64 ns).
    SyscallExit = 9,
    /// Decoded events only, from a task's kernel events: the thread was
    /// off the CPU outside a system call; one `Data` event follows with
    /// the time (u64 ns) and 1 if it was preempted (runnable), 0 if it
    /// blocked (u64).
    OffCpu = 10,
    /// Decoded events only: a page fault of the thread; one `Data` event
    /// follows with the faulting address and the instruction's (u64 each).
    PageFault = 11,
    /// Decoded events only: the kernel delivered a signal to the thread
    /// (`signal:signal_deliver`); `func` is its number, 2 `Data` events
    /// follow with its `si_code` (i64), `si_errno` (i64), the handler the
    /// kernel ran it with (u64: 0 the default action, 1 ignored) and that
    /// action's flags (u64).
    KernelSignal = 12,
    /// Decoded events only: a kernel function was entered (`record -K`,
    /// ftrace's function_graph tracer); `func` is 0, `Data` events follow
    /// with its name's length (u16) and bytes.
    KernelEntry = 13,
    /// Decoded events only: the kernel function entered last returned;
    /// `Data` events follow with its duration (u64 ns), its name's length
    /// (u16) and bytes.
    KernelExit = 14,
}

impl EventKind {
    /// Whether the event is a step of the task's calls with a time of its
    /// own (a call entered or ended, a signal, lost events): not the
    /// values that follow an event (`Args`, `Retval`, `Data`), nor the
    /// kernel's events merged in.
    pub fn is_call_step(self) -> bool {
        matches!(
            self,
            EventKind::Entry
                | EventKind::Exit
                | EventKind::Unwind
                | EventKind::Signal
                | EventKind::Lost
        )
    }

    pub fn from_u8(v: u8) -> Option<EventKind> {
        Some(match v {
            0 => EventKind::Entry,
            1 => EventKind::Exit,
            2 => EventKind::Unwind,
            3 => EventKind::Lost,
            4 => EventKind::Signal,
            5 => EventKind::Args,
            6 => EventKind::Retval,
            7 => EventKind::Data,
            _ => return None,
        })
    }
}

/// Number of low bits of [`RawEvent::word`] that hold the kind.
pub const KIND_BITS: u32 = 8;

/// One event as stored in a shared-memory buffer. `repr(C)`, 16 bytes; the
/// agent's assembly writes `word` at offset 0 and `tsc` at offset 8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RawEvent {
    /// `(func << KIND_BITS) | kind`
    pub word: u64,
    /// Raw timestamp counter (`rdtsc`).
    pub tsc: u64,
}

impl RawEvent {
    pub const SIZE: usize = 16;

    pub fn new(kind: EventKind, func: u32, tsc: u64) -> RawEvent {
        RawEvent {
            word: ((func as u64) << KIND_BITS) | kind as u64,
            tsc,
        }
    }
    /// The kind, or `None` for a record that is not a valid event (for
    /// example one that was reserved but never written).
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8((self.word & ((1 << KIND_BITS) - 1)) as u8)
    }
    /// The function id (index into the session's symbol table), or the
    /// count for [`EventKind::Lost`].
    pub fn func(&self) -> u32 {
        (self.word >> KIND_BITS) as u32
    }

    /// An `Args` or `Retval` record announcing `len` payload bytes (at most
    /// [`MAX_PAYLOAD`]); the payload records follow it in the buffer.
    pub fn with_payload(kind: EventKind, func: u32, len: u16, tsc: u64) -> RawEvent {
        RawEvent {
            word: (u64::from(len) << PAYLOAD_LEN_SHIFT)
                | ((func as u64) << KIND_BITS)
                | kind as u64,
            tsc,
        }
    }
    /// Payload bytes announced by an `Args`/`Retval` record.
    pub fn payload_len(&self) -> usize {
        (self.word >> PAYLOAD_LEN_SHIFT) as u16 as usize
    }
    /// Whether this `Args`/`Retval` record is also the call's `Entry`/`Exit`
    /// ([`WITH_CALL_STEP`]).
    pub fn with_call_step(&self) -> bool {
        self.word & WITH_CALL_STEP != 0
    }
    /// Records after this one that hold its payload.
    pub fn payload_records(&self) -> usize {
        self.payload_len().div_ceil(RawEvent::SIZE)
    }
}

/// Bit of [`RawEvent::word`] where an `Args`/`Retval` record's payload
/// length (16 bits) starts: above the 32-bit function id.
pub const PAYLOAD_LEN_SHIFT: u32 = KIND_BITS + 32;
/// Bit of an `Args` record's word: the record is also the `Entry` of its
/// function, at its time (the entry comes first); of a `Retval` record:
/// also the `Exit`, at its time (the exit comes after). The agent's
/// generated code writes a call with integer arguments and return value
/// so: a record less each way. Buffers only (never in a file).
pub const WITH_CALL_STEP: u64 = 1 << 56;

/// Largest payload of one `Args`/`Retval` record, in bytes.
pub const MAX_PAYLOAD: usize = 4096;
