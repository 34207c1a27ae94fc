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
}

impl EventKind {
    pub fn from_u8(v: u8) -> Option<EventKind> {
        Some(match v {
            0 => EventKind::Entry,
            1 => EventKind::Exit,
            2 => EventKind::Unwind,
            3 => EventKind::Lost,
            4 => EventKind::Signal,
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
}
