//! One event as a reader gets it from a task file ([`Event`]).

use crate::event::EventKind;

/// One decoded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// Function id in the task's session symbol table, or for
    /// [`EventKind::Lost`] the number of events lost.
    pub func: u32,
    /// Raw timestamp counter value, as recorded.
    pub tsc: u64,
    /// `tsc` converted to CLOCK_MONOTONIC nanoseconds ([`Trace::tsc_to_ns`](super::Trace::tsc_to_ns)).
    pub ns: u64,
}

impl Event {
    /// For a [`EventKind::Data`] event: its bytes of the payload.
    pub fn data_bytes(&self) -> ([u8; 16], usize) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.tsc.to_le_bytes());
        b[8..].copy_from_slice(&self.ns.to_le_bytes());
        (b, (self.func as usize).min(16))
    }
}
