//! Stages 2 and 3, callers (`-C`) and time (`-t`): a stage that holds
//! calls until it knows whether to show them.

use super::flags::{SessionFlags, CALLER};
use fctrace_format::event::EventKind;
use fctrace_format::store::Event;
use std::collections::VecDeque;
use std::rc::Rc;

/// What a [`Held`] stage waits for before showing a call.
#[derive(Clone, Copy)]
pub(super) enum Mode {
    /// `-C`: a call of a caller-filter function under it.
    Callers,
    /// `-t`: to have lasted this long (ns).
    Time(u64),
}

/// An open call (of the calls the stage receives).
pub(super) struct HeldFrame {
    pub(super) func: u32,
    pub(super) entry_ns: u64,
    /// Position of its entry in the stage's buffer (absolute), while held.
    pub(super) start: u64,
    /// `-C`: a call of a caller-filter function.
    pub(super) caller: bool,
    /// `-t`: how long it must last to be shown (0 for a `trace` function).
    pub(super) min_ns: u64,
    /// `-t`: how long the calls under it must last (a `time=T` function's
    /// T, else its caller's).
    pub(super) scope_ns: u64,
}

/// A stage that holds calls until it knows whether to show them (stages 2
/// and 3 of the module documentation).
pub(super) struct Held {
    pub(super) mode: Mode,
    pub(super) frames: Vec<HeldFrame>,
    /// `frames[..shown]` have been passed on; the others are held.
    pub(super) shown: usize,
    /// Events held since the entry of `frames[shown]`.
    pub(super) buf: VecDeque<Event>,
    /// Absolute position of `buf[0]`.
    pub(super) base: u64,
    /// `-C`: open calls of caller-filter functions among the shown ones.
    pub(super) in_caller: u32,
    /// The flags of the session's functions (`-C`'s callers, `-t`'s
    /// `time=` and `trace` actions).
    pub(super) callers: Option<Rc<SessionFlags>>,
    /// `-C` as uftrace has it: a caller-filter function is shown as a
    /// leaf, without what happens under it (`--caller-tree`: with it).
    pub(super) leaf: bool,
    /// Inside the shown call of such a leaf: the calls open under it.
    pub(super) under_leaf: Option<Vec<u32>>,
    /// Whether the `Data` events that follow are dropped with the event
    /// they belong to.
    pub(super) drop_data: bool,
}

impl Held {
    pub(super) fn new(mode: Mode, callers: Option<Rc<SessionFlags>>) -> Held {
        Held {
            mode,
            frames: Vec::new(),
            shown: 0,
            buf: VecDeque::new(),
            base: 0,
            in_caller: 0,
            callers,
            leaf: false,
            under_leaf: None,
            drop_data: false,
        }
    }

    /// Inside a leaf of `-C` (uftrace's meaning): whether `e` is dropped
    /// as part of what happens under it; the leaf's own exit ends it.
    fn hidden_under_leaf(&mut self, e: &Event) -> bool {
        let Some(hidden) = &mut self.under_leaf else {
            return false;
        };
        let drop = match e.kind {
            EventKind::Entry => {
                hidden.push(e.func);
                true
            }
            EventKind::Exit | EventKind::Unwind => {
                match hidden.iter().rposition(|&f| f == e.func) {
                    Some(j) => {
                        hidden.truncate(j);
                        true
                    }
                    None => {
                        // The leaf's own exit (or one further out).
                        self.under_leaf = None;
                        false
                    }
                }
            }
            EventKind::Args | EventKind::Retval => !hidden.is_empty(),
            EventKind::Data => self.drop_data,
            EventKind::Lost => false,
            _ => true,
        };
        self.drop_data = drop;
        drop
    }

    /// Passes on or holds an event, in order.
    #[inline]
    pub(super) fn emit(&mut self, e: Event, out: &mut VecDeque<Event>) {
        if self.shown < self.frames.len() {
            self.buf.push_back(e);
        } else {
            out.push_back(e);
        }
    }

    /// Shows the held calls `frames[shown..k]` with what is held under
    /// them up to the next held call.
    pub(super) fn show_upto(&mut self, k: usize, out: &mut VecDeque<Event>) {
        if k <= self.shown {
            return;
        }
        let end = match self.frames.get(k) {
            Some(f) => f.start,
            None => self.base + self.buf.len() as u64,
        };
        let n = (end - self.base) as usize;
        out.extend(self.buf.drain(..n));
        self.base = end;
        for f in &self.frames[self.shown..k] {
            if f.caller {
                self.in_caller += 1;
            }
        }
        self.shown = k;
    }

    /// Drops the held calls from `frames[j]` up (`j >= shown`) with
    /// everything held under them, but `Lost` marks.
    pub(super) fn drop_from(&mut self, j: usize) {
        if let Some(f) = self.frames.get(j) {
            let keep = (f.start - self.base) as usize;
            if self.buf.range(keep..).any(|e| e.kind == EventKind::Lost) {
                let lost: Vec<Event> = self
                    .buf
                    .drain(keep..)
                    .filter(|e| e.kind == EventKind::Lost)
                    .collect();
                self.buf.extend(lost);
            } else {
                self.buf.truncate(keep);
            }
            self.frames.truncate(j);
        }
    }

    pub(super) fn push(&mut self, e: Event, out: &mut VecDeque<Event>) {
        if self.under_leaf.is_some() && self.hidden_under_leaf(&e) {
            return;
        }
        if let Mode::Time(_) = self.mode {
            if e.kind.is_call_step() && self.shown < self.frames.len() {
                let k = self.shown
                    + self.frames[self.shown..]
                        .iter()
                        .take_while(|f| e.ns.saturating_sub(f.entry_ns) >= f.min_ns)
                        .count();
                self.show_upto(k, out);
            }
        }
        match e.kind {
            EventKind::Entry => {
                let caller = match self.mode {
                    Mode::Callers => self.is_caller(e.func),
                    Mode::Time(_) => false,
                };
                let start = self.base + self.buf.len() as u64;
                let (min_ns, scope_ns) = self.thresholds(e.func);
                self.frames.push(HeldFrame {
                    func: e.func,
                    entry_ns: e.ns,
                    start,
                    caller,
                    min_ns,
                    scope_ns,
                });
                match self.mode {
                    Mode::Callers if caller || self.in_caller > 0 => {
                        self.buf.push_back(e);
                        self.show_upto(self.frames.len(), out);
                        if caller && self.leaf {
                            self.under_leaf = Some(Vec::new());
                            self.drop_data = false;
                        }
                    }
                    _ => self.buf.push_back(e),
                }
            }
            EventKind::Exit | EventKind::Unwind => {
                // rposition looks at the top first.
                let at = self.frames.iter().rposition(|f| f.func == e.func);
                if let Some(j) = at.filter(|&j| j >= self.shown) {
                    // A call that lasted long enough for its own time
                    // filter (`time=`, `trace`) while a caller held on
                    // longer for its own: shown, with its callers.
                    let f = &self.frames[j];
                    if matches!(self.mode, Mode::Time(_))
                        && e.ns.saturating_sub(f.entry_ns) >= f.min_ns
                    {
                        self.show_upto(j + 1, out);
                    }
                }
                match at {
                    Some(j) if j >= self.shown => self.drop_from(j),
                    Some(j) => {
                        self.drop_from(self.shown);
                        for f in self.frames.drain(j..) {
                            if f.caller {
                                self.in_caller -= 1;
                            }
                        }
                        self.shown = j;
                        out.push_back(e);
                    }
                    None => match self.mode {
                        Mode::Callers if self.in_caller == 0 => {}
                        _ => self.emit(e, out),
                    },
                }
            }
            EventKind::Lost => self.emit(e, out),
            _ => match self.mode {
                // Outside the calls shown by -C: only within held callers.
                Mode::Callers if self.frames.is_empty() => {}
                _ => self.emit(e, out),
            },
        }
    }

    /// A call entered before the task's events begin (outermost first):
    /// open, its entry not in the stream; shown at once if it or a call
    /// around it is a caller-filter function.
    pub(super) fn outer_call(&mut self, func: u32) {
        if let Some(hidden) = &mut self.under_leaf {
            hidden.push(func);
            return;
        }
        let caller = self.is_caller(func);
        let (_, scope_ns) = self.thresholds(func);
        self.frames.push(HeldFrame {
            func,
            entry_ns: 0,
            start: self.base + self.buf.len() as u64,
            caller,
            min_ns: 0,
            scope_ns,
        });
        if caller || self.in_caller > 0 {
            self.show_upto(self.frames.len(), &mut VecDeque::new());
        }
        if caller && self.leaf {
            self.under_leaf = Some(Vec::new());
        }
    }

    /// `-t`: how long a call of `func` entered now must last to be shown,
    /// and how long the calls under it must (`-t`'s time, a `time=T`
    /// action's T, 0 for a `trace` function itself).
    fn thresholds(&self, func: u32) -> (u64, u64) {
        let Mode::Time(t) = self.mode else {
            return (0, 0);
        };
        let inherited = self.frames.last().map_or(t, |f| f.scope_ns);
        let (time, always) = self
            .callers
            .as_ref()
            .and_then(|f| f.times.get(&func).copied())
            .unwrap_or((None, false));
        let scope = time.unwrap_or(inherited);
        (if always { 0 } else { scope }, scope)
    }

    pub(super) fn is_caller(&self, func: u32) -> bool {
        matches!(self.mode, Mode::Callers)
            && self
                .callers
                .as_ref()
                .is_some_and(|f| f.flags.get(func as usize).copied().unwrap_or(0) & CALLER != 0)
    }

    /// The task's events have ended.
    pub(super) fn finish(&mut self, out: &mut VecDeque<Event>) {
        match self.mode {
            // Never led to a call of a caller-filter function.
            Mode::Callers => self.drop_from(self.shown),
            // Never returned: shown.
            Mode::Time(_) => {}
        }
        self.show_upto(self.frames.len(), out);
        out.extend(self.buf.drain(..));
    }
}
