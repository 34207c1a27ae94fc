//! The light stage: only the calls of hidden functions (the C runtime,
//! `--no-libcall`) go, with a flag test per event; the only stage when no
//! option follows the calls.

use super::flags::{SessionFlags, HIDE};
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, TaskEvents};
use std::rc::Rc;

/// The events of a task without the calls of [`HIDE`] functions (their
/// entries, exits and values; what happens inside them is shown): the
/// only stage when no option follows the calls ([`per_call`]).
pub(super) struct Light {
    pub(super) src: TaskEvents,
    pub(super) flags: Rc<SessionFlags>,
    /// The `Data` events read belong to a hidden function's values.
    pub(super) payload_hidden: bool,
}

impl Light {
    #[inline(always)]
    pub(super) fn next_event(&mut self) -> Option<Event> {
        let e = self.src.next_event()?;
        // Entries and exits (nearly every event) go through with one test;
        // the others go to `skip`, which keeps `payload_hidden`.
        let hidden = match e.kind {
            EventKind::Entry | EventKind::Exit | EventKind::Unwind => {
                self.flags.flags.get(e.func as usize).copied().unwrap_or(0) & HIDE != 0
            }
            _ => true,
        };
        if hidden {
            self.skip(e)
        } else {
            Some(e)
        }
    }

    /// `e` is hidden, or a mark or value: the next event to show from it.
    #[cold]
    #[inline(never)]
    pub(super) fn skip(&mut self, mut e: Event) -> Option<Event> {
        loop {
            let hidden = match e.kind {
                EventKind::Data => self.payload_hidden,
                EventKind::Entry
                | EventKind::Exit
                | EventKind::Unwind
                | EventKind::Args
                | EventKind::Retval => {
                    let h = self.flags.flags.get(e.func as usize).copied().unwrap_or(0) & HIDE != 0;
                    self.payload_hidden = h;
                    h
                }
                _ => {
                    self.payload_hidden = false;
                    false
                }
            };
            if !hidden {
                return Some(e);
            }
            e = self.src.next_event()?;
        }
    }
}
