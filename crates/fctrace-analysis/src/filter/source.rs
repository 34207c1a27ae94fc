//! The source of a task's events for the readers: the trait the tree,
//! the report and the calls read through, filtered or not.

use fctrace_format::store::{Event, StoreError, TaskEvents};

/// A task's events, filtered ([`FilteredEvents`]) or not ([`TaskEvents`]).
/// The readers are generic over it, so that the unfiltered loop is the
/// same code as without filters.
pub trait EventSource {
    /// The next event to show.
    fn next_event(&mut self) -> Option<Event>;

    /// The read error that ended the events, once they have all been read.
    fn take_error(&mut self) -> Option<StoreError>;

    /// For an `Entry` taken from [`next_event`](Self::next_event) (in
    /// order; the caller may look ahead in between): the function ids of
    /// the callers to print as a backtrace before it, outermost first.
    #[inline]
    fn backtrace(&mut self, _entry: &Event) -> Option<Vec<u32>> {
        None
    }

    /// Whether the calls open where the task's events begin, read by the
    /// source (not passed on), came from a history chain: their returns,
    /// shown without their entries, are `(entry not in history)`.
    #[inline]
    fn history(&self) -> bool {
        false
    }

    /// Whether the source chooses calls (`-F`, `-N`, `-D`, triggers...):
    /// it does not pass on the calls open where tracing resumed.
    fn chooses_calls(&self) -> bool {
        false
    }
}

impl EventSource for TaskEvents {
    #[inline(always)]
    fn next_event(&mut self) -> Option<Event> {
        TaskEvents::next_event(self)
    }

    #[inline]
    fn take_error(&mut self) -> Option<StoreError> {
        TaskEvents::take_error(self)
    }
}
