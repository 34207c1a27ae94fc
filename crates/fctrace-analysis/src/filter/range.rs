//! The `-r START~STOP` stage, after the others: the calls that run at
//! some time of the range, with their whole durations.

use fctrace_format::event::EventKind;
use fctrace_format::store::Event;
use std::collections::VecDeque;

/// `-r START~STOP` over the events the other stages show: a call is shown
/// when it runs at some time of the range (it was entered at or before
/// STOP and had not returned before START), with its whole duration; so
/// are the marks within the range and inside the calls shown. The calls
/// entered before START are held (their entries and values, memory one
/// per open call) until START (they are then shown: the calls open at
/// START) or their exits (they are dropped).
pub(super) struct Range {
    pub(super) start: u64,
    pub(super) stop: u64,
    /// An event at or after START was seen.
    pub(super) started: bool,
    /// Open calls: (function, shown). Before START, all held.
    pub(super) stack: Vec<(u32, bool)>,
    /// Before START: the events of each held call, from its entry.
    pub(super) held: Vec<Vec<Event>>,
    /// The task's events have ended.
    pub(super) done: bool,
}

impl Range {
    pub(super) fn new(start: u64, stop: u64) -> Range {
        Range {
            start,
            stop,
            started: false,
            stack: Vec::new(),
            held: Vec::new(),
            done: false,
        }
    }

    pub(super) fn push(&mut self, e: Event, out: &mut VecDeque<Event>) {
        let timed = e.kind.is_call_step();
        if timed && !self.started && e.ns >= self.start {
            // The calls open at START are shown.
            self.started = true;
            for h in self.held.drain(..) {
                out.extend(h);
            }
            for f in &mut self.stack {
                f.1 = true;
            }
        }
        if !self.started {
            match e.kind {
                EventKind::Entry => {
                    self.stack.push((e.func, false));
                    self.held.push(vec![e]);
                }
                EventKind::Exit | EventKind::Unwind => {
                    if let Some(j) = self.stack.iter().rposition(|f| f.0 == e.func) {
                        self.stack.truncate(j);
                        self.held.truncate(j);
                    }
                }
                _ => {
                    if let Some(h) = self.held.last_mut() {
                        if !timed {
                            h.push(e);
                        }
                    }
                }
            }
            return;
        }
        match e.kind {
            EventKind::Entry => {
                let shown = e.ns <= self.stop && self.stack.last().is_none_or(|f| f.1);
                self.stack.push((e.func, shown));
                if shown {
                    out.push_back(e);
                }
            }
            EventKind::Exit | EventKind::Unwind => {
                match self.stack.iter().rposition(|f| f.0 == e.func) {
                    Some(j) => {
                        let shown = self.stack[j].1;
                        self.stack.truncate(j);
                        if shown {
                            out.push_back(e);
                        }
                    }
                    // Entry not recorded: shown if it ends in the range.
                    None => {
                        if e.ns <= self.stop && self.stack.last().is_none_or(|f| f.1) {
                            out.push_back(e);
                        }
                    }
                }
            }
            _ => {
                let inside = match self.stack.last() {
                    Some(f) => f.1,
                    None => !timed || e.ns <= self.stop,
                };
                if inside && (!timed || e.ns <= self.stop || !self.stack.is_empty()) {
                    out.push_back(e);
                }
            }
        }
    }

    /// The task's events have ended (before START: nothing is shown).
    pub(super) fn finish(&mut self, _out: &mut VecDeque<Event>) {
        self.done = true;
        self.held.clear();
    }
}
