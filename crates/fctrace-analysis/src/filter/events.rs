//! A task's events through the filter stages ([`FilteredEvents`]): the
//! light stage alone, or stages 1 to 3 ([`FullEvents`]), then `-r`.

use super::held::Held;
use super::light::Light;
use super::range::Range;
use super::source::EventSource;
use super::visibility::Visibility;
use fctrace_format::store::{Event, StoreError, TaskEvents};
use std::collections::VecDeque;

impl EventSource for FilteredEvents {
    #[inline(always)]
    fn next_event(&mut self) -> Option<Event> {
        FilteredEvents::next_event(self)
    }

    fn take_error(&mut self) -> Option<StoreError> {
        if !self.out.is_empty() {
            return None;
        }
        match &mut self.inner {
            Inner::Light(l) => l.src.take_error(),
            Inner::Full(f) if f.out.is_empty() && f.done => f.src.take_error(),
            Inner::Full(_) => None,
        }
    }

    #[inline]
    fn backtrace(&mut self, entry: &Event) -> Option<Vec<u32>> {
        match &mut self.inner {
            Inner::Light(_) => None,
            Inner::Full(f) => f.backtrace(entry),
        }
    }

    fn chooses_calls(&self) -> bool {
        matches!(self.inner, Inner::Full(_))
    }

    fn history(&self) -> bool {
        match &self.inner {
            // Chains go through to the tree.
            Inner::Light(_) => false,
            Inner::Full(f) => f.vis.history,
        }
    }
}

/// A task's events through the filter stages.
pub struct FilteredEvents {
    pub(super) inner: Inner,
    /// `-r`, after the other stages.
    pub(super) range: Option<Range>,
    /// Events the range stage let through, not yet taken.
    pub(super) out: VecDeque<Event>,
}

pub(super) enum Inner {
    /// Only [`HIDE`] functions to hide.
    Light(Light),
    /// Stages 1 to 3.
    Full(Box<FullEvents>),
}

impl FilteredEvents {
    #[inline(always)]
    pub fn next_event(&mut self) -> Option<Event> {
        if let (None, Inner::Light(l)) = (&self.range, &mut self.inner) {
            return l.next_event();
        }
        self.next_slow()
    }

    #[inline(never)]
    pub(super) fn next_slow(&mut self) -> Option<Event> {
        let Some(range) = &mut self.range else {
            return match &mut self.inner {
                Inner::Light(l) => l.next_event(),
                Inner::Full(f) => f.next_event(),
            };
        };
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            let e = match &mut self.inner {
                Inner::Light(l) => l.next_event(),
                Inner::Full(f) => f.next_event(),
            };
            match e {
                Some(e) => range.push(e, &mut self.out),
                None if range.done => return None,
                None => range.finish(&mut self.out),
            }
        }
    }
}

/// A task's events through stages 1 to 3.
pub(super) struct FullEvents {
    pub(super) src: TaskEvents,
    /// Events read ahead of the entry of a trigger function (its chain
    /// payload), not yet through stage 1 ([`Visibility::pull`]).
    pub(super) ahead: VecDeque<Event>,
    pub(super) done: bool,
    /// Events ready to be shown.
    pub(super) out: VecDeque<Event>,
    /// Between the callers stage and the time stage.
    pub(super) mid: VecDeque<Event>,
    pub(super) vis: Visibility,
    pub(super) callers: Option<Held>,
    pub(super) time: Option<Held>,
}

impl FullEvents {
    pub(super) fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            match self.vis.pull(&mut self.src, &mut self.ahead) {
                Some((e, chain)) => {
                    if let Some(e) = self.vis.push_with(e, chain.as_ref()) {
                        if self.vis.opened.iter().any(|o| !o.is_empty()) {
                            let mut before = Vec::new();
                            self.vis.take_opened(&e, &mut before);
                            for o in before {
                                self.stages(o);
                            }
                            self.stages(e);
                            continue;
                        }
                        if self.callers.is_none() && self.time.is_none() {
                            // `out` is empty: straight through.
                            return Some(e);
                        }
                        self.stages(e);
                    }
                }
                None => self.end(),
            }
        }
    }

    /// The task's events have ended: what the stages hold goes out.
    #[cold]
    #[inline(never)]
    pub(super) fn end(&mut self) {
        self.done = true;
        if let Some(c) = &mut self.callers {
            match &mut self.time {
                None => c.finish(&mut self.out),
                Some(t) => {
                    c.finish(&mut self.mid);
                    while let Some(m) = self.mid.pop_front() {
                        t.push(m, &mut self.out);
                    }
                }
            }
        }
        if let Some(t) = &mut self.time {
            t.finish(&mut self.out);
        }
    }

    #[inline(never)]
    pub(super) fn stages(&mut self, e: Event) {
        match (&mut self.callers, &mut self.time) {
            (None, None) => self.out.push_back(e),
            (Some(c), None) => c.push(e, &mut self.out),
            (None, Some(t)) => t.push(e, &mut self.out),
            (Some(c), Some(t)) => {
                c.push(e, &mut self.mid);
                while let Some(m) = self.mid.pop_front() {
                    t.push(m, &mut self.out);
                }
            }
        }
    }

    pub(super) fn backtrace(&mut self, entry: &Event) -> Option<Vec<u32>> {
        let notes = &mut self.vis.notes;
        // Notes of entries hidden by a later stage are older.
        while notes.front().is_some_and(|n| n.tsc < entry.tsc) {
            notes.pop_front();
        }
        match notes.front() {
            Some(n) if n.tsc == entry.tsc && n.func == entry.func => {
                notes.pop_front().map(|n| n.callers)
            }
            _ => None,
        }
    }
}
