//! Stage 1, visibility (`-F`, `-N`, `-D`, `-T`): whether a call is shown,
//! decided at its entry, with the triggers, the chains recorded where
//! tracing resumed or fctrace attached, and backtraces.

use super::chain::{read_chain, read_end_mark, Chain};
use super::flags::{
    SessionFlags, Switch, FILTER, HIDE, NOTRACE, REC_FILTER, REC_NOTRACE, RESUMES, TRIGGER,
};
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, TaskEvents};
use fctrace_options::Action;
use std::collections::VecDeque;
use std::rc::Rc;

/// A backtrace to print before the entry of `func` at `tsc`.
pub(super) struct Note {
    pub(super) func: u32,
    pub(super) tsc: u64,
    pub(super) callers: Vec<u32>,
}

/// An open call of the task (every recorded one).
#[derive(Clone, Copy)]
pub(super) struct RawFrame {
    pub(super) func: u32,
    /// FILTER / NOTRACE bits this call opened.
    pub(super) opened: u8,
    pub(super) shown: bool,
    /// Entered before the task's events begin, not counted as a level of
    /// `-D` ([`Filter::start`]).
    pub(super) outer: bool,
    /// A [`HIDE`] function: not shown, what it calls is.
    pub(super) hide: bool,
    /// An outer call (of an attach chain, or open where tracing resumed)
    /// that the tree is told to open ([`Visibility::draw_opened`]).
    pub(super) drawn: bool,
    /// The depth limit before this call (restored at its exit).
    pub(super) saved_limit: u32,
}

/// The state of stage 1 a task starts in ([`Filter::start`]).
#[derive(Clone)]
pub(super) struct Start {
    pub(super) on: bool,
    pub(super) finished: bool,
    pub(super) notrace_open: u32,
    pub(super) filter_open: u32,
    pub(super) shown: u32,
    pub(super) limit: u32,
    pub(super) stack: Vec<RawFrame>,
}

/// Stage 1: `-F`, `-N`, `-D`, `-T`.
pub(super) struct Visibility {
    pub(super) flags: Rc<SessionFlags>,
    pub(super) triggers: Vec<fctrace_options::Trigger>,
    pub(super) has_filters: bool,
    pub(super) on: bool,
    pub(super) finished: bool,
    /// Open -N calls.
    pub(super) notrace_open: u32,
    /// Open -F calls.
    pub(super) filter_open: u32,
    /// Open shown calls.
    pub(super) shown: u32,
    /// Shown calls may be open while `shown < limit`.
    pub(super) limit: u32,
    pub(super) stack: Vec<RawFrame>,
    pub(super) global: Rc<Vec<(u64, Switch)>>,
    pub(super) global_next: usize,
    pub(super) backtraces: bool,
    pub(super) notes: VecDeque<Note>,
    /// The recording had `trace_on` triggers: its `Args` events may be end
    /// marks ([`Visibility::pull`]).
    pub(super) marks: bool,
    /// No entry or exit of the task read yet: its `Args` events may be
    /// attach chains.
    pub(super) at_start: bool,
    /// Inside a system call's events (`record -k`): whether they are
    /// shown (its values and return follow its entry).
    pub(super) in_syscall: Option<bool>,
    /// A history chain was read ([`EventSource::history`]).
    pub(super) history: bool,
    /// For the tree (without `-C`): the outer calls shown are passed on
    /// as chains for the tree to open ([`draw_opened`](Self::draw_opened)).
    pub(super) draws: bool,
    /// Outer calls to open before the next event passed on: those of an
    /// attach chain, and those open where tracing resumed (outermost
    /// first).
    pub(super) opened: [Vec<u32>; 2],
    /// The recording had `-F` patterns ([`REC_FILTER`]).
    pub(super) recorded_filters: bool,
}

impl Visibility {
    pub(super) fn snapshot(&self) -> Start {
        Start {
            on: self.on,
            finished: self.finished,
            notrace_open: self.notrace_open,
            filter_open: self.filter_open,
            shown: self.shown,
            limit: self.limit,
            stack: self.stack.clone(),
        }
    }

    pub(super) fn resume(&mut self, s: &Start) {
        self.on = s.on;
        self.finished = s.finished;
        self.notrace_open = s.notrace_open;
        self.filter_open = s.filter_open;
        self.shown = s.shown;
        self.limit = s.limit;
        self.stack = s.stack.clone();
        self.at_start = true;
    }

    /// Tracing resumed with the calls of `chain` open (outermost first,
    /// as the agent walked the stack): those the task's events did not
    /// enter (entered while tracing was off) are added around the open
    /// calls it knows, as calls entered before its events
    /// ([`outer_call`](Self::outer_call): they count for `-F` and `-N`,
    /// not for `-D`, as in the agent). A chain cut to its innermost part
    /// keeps the known calls below it.
    #[cold]
    #[inline(never)]
    pub(super) fn open_calls(&mut self, chain: &[u32]) {
        let known = std::mem::take(&mut self.stack);
        let mut j = 0;
        for &func in chain {
            match known[j..].iter().position(|f| f.func == func) {
                Some(k) => {
                    self.stack.extend_from_slice(&known[j..=j + k]);
                    j += k + 1;
                }
                None => self.outer_call(func),
            }
        }
        self.stack.extend_from_slice(&known[j..]);
    }

    /// For the tree ([`draws`](Self::draws)): the outer calls shown (not
    /// [`HIDE`]) after the last call the tree has open (one whose entry
    /// it showed, or an outer call it opened) are to be opened before the
    /// next event passed on, as an attach chain (`attached`) or as calls
    /// entered while tracing was off; the calls before it cannot be put
    /// around lines already printed.
    #[cold]
    #[inline(never)]
    pub(super) fn draw_opened(&mut self, attached: bool) {
        if !self.draws {
            return;
        }
        let from = self
            .stack
            .iter()
            .rposition(|f| (!f.outer && f.shown) || f.drawn)
            .map_or(0, |k| k + 1);
        // Nor those the recording's -F/-N left out (as its own tree:
        // [`ChainChoice`]).
        let (mut in_filter, mut in_notrace) = (!self.recorded_filters, false);
        let flags = &self.flags.flags;
        let opened = &mut self.opened[usize::from(!attached)];
        for (k, f) in self.stack.iter_mut().enumerate() {
            let bits = flags.get(f.func as usize).copied().unwrap_or(0);
            in_filter |= bits & REC_FILTER != 0;
            in_notrace |= bits & REC_NOTRACE != 0;
            let recorded = in_filter && !in_notrace;
            if k >= from && recorded && f.outer && f.shown && !f.hide && !f.drawn {
                f.drawn = true;
                opened.push(f.func);
            }
        }
    }

    /// The payload events of the outer calls to open before `e` (an
    /// `Args` event with a chain payload, `fctrace_format::argval`, with
    /// `e`'s time and no function: the tree opens them), in order.
    #[cold]
    #[inline(never)]
    pub(super) fn take_opened(&mut self, e: &Event, out: &mut Vec<Event>) {
        for (k, funcs) in self.opened.iter_mut().enumerate() {
            for part in funcs.chunks(fctrace_format::argval::MAX_ATTACH_CHAIN) {
                let mut buf = vec![0u8; 4 + 4 * part.len()];
                let mut w = fctrace_format::argval::Writer::new(&mut buf);
                if k == 0 {
                    w.attach_chain(part);
                } else {
                    w.chain(part, false, true);
                }
                let len = w.len();
                out.push(Event {
                    kind: EventKind::Args,
                    func: u32::MAX,
                    ..*e
                });
                for bytes in buf[..len].chunks(16) {
                    let mut b = [0u8; 16];
                    b[..bytes.len()].copy_from_slice(bytes);
                    let word =
                        |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
                    out.push(Event {
                        kind: EventKind::Data,
                        func: bytes.len() as u32,
                        tsc: word(0),
                        ns: word(8),
                    });
                }
            }
            funcs.clear();
        }
    }

    /// A call entered before the task's events begin (outermost first).
    pub(super) fn outer_call(&mut self, func: u32) {
        let bits = self.bits(func);
        let shown = self.context_shown(bits);
        let opened = bits & (FILTER | NOTRACE);
        if opened & NOTRACE != 0 {
            self.notrace_open += 1;
        }
        if opened & FILTER != 0 {
            self.filter_open += 1;
        }
        self.stack.push(RawFrame {
            func,
            opened,
            shown,
            outer: true,
            hide: bits & HIDE != 0,
            drawn: false,
            saved_limit: self.limit,
        });
    }

    pub(super) fn apply(&mut self, s: Switch) {
        match s {
            Switch::On => self.on = true,
            Switch::Off => self.on = false,
            Switch::Finish => self.finished = true,
        }
    }

    /// The next event of `src` (after those read ahead before, in
    /// `ahead`), with, for the entry of a trigger function, the calls open
    /// where tracing resumed at it, when the agent recorded them (a chain
    /// payload right after the entry: `fctrace_format::argval`). The
    /// events read to find it are kept in `ahead`, in order.
    pub(super) fn pull(
        &mut self,
        src: &mut TaskEvents,
        ahead: &mut VecDeque<Event>,
    ) -> Option<(Event, Option<Chain>)> {
        // The last event read ahead is the one after what was looked at
        // (the events before it belong to an entry or a mark already
        // looked at): it is looked at as one read now, its following
        // events being still in `src`.
        let (e, fresh) = match ahead.pop_front() {
            Some(e) => (e, ahead.is_empty()),
            None => (src.next_event()?, true),
        };
        if !matches!(e.kind, EventKind::Args | EventKind::Data) {
            self.at_start = false;
        }
        match e.kind {
            EventKind::Entry if self.bits(e.func) & (TRIGGER | RESUMES) != 0 => {
                // A backtrace recorded where the recording's trace_on
                // function resumed tracing is that chain too.
                let resumes = self.bits(e.func) & RESUMES != 0;
                let chain = read_chain(e.func, src, ahead).map(|mut c| {
                    c.resume |= resumes;
                    c
                });
                Some((e, chain))
            }
            EventKind::Args if fresh && (self.marks || self.at_start) => {
                Some((e, read_end_mark(src, ahead)))
            }
            _ => Some((e, None)),
        }
    }

    /// The event if it is shown; `chain`: for an entry, the calls open
    /// where tracing resumed at it, as the agent found them on the stack.
    pub(super) fn push_with(&mut self, e: Event, chain: Option<&Chain>) -> Option<Event> {
        if self.finished {
            return (e.kind == EventKind::Lost).then_some(e);
        }
        let was_on = self.on;
        if e.kind.is_call_step() {
            while let Some(&(ns, s)) = self.global.get(self.global_next) {
                if ns > e.ns {
                    break;
                }
                self.apply(s);
                self.global_next += 1;
            }
            if self.finished {
                return (e.kind == EventKind::Lost).then_some(e);
            }
        }
        // A system call's values and return go with it.
        match (e.kind, self.in_syscall) {
            (
                EventKind::Data
                | EventKind::SyscallExit
                | EventKind::KernelEntry
                | EventKind::KernelExit,
                Some(shown),
            ) => {
                return shown.then_some(e);
            }
            (EventKind::Data, None) => {}
            _ => self.in_syscall = None,
        }
        match e.kind {
            EventKind::Syscall => {
                // Shown where the call it is in is (its own -F/-N
                // `NAME@[syscall]` aside).
                let bits = self
                    .flags
                    .syscalls
                    .get(e.func as usize)
                    .copied()
                    .unwrap_or(0);
                let around = match self.stack.last() {
                    Some(top) if top.hide => self
                        .stack
                        .iter()
                        .rev()
                        .find(|f| !f.hide)
                        .map_or_else(|| self.context_shown(0), |f| f.shown),
                    Some(top) => top.shown,
                    None => self.context_shown(0),
                };
                let shown = bits & NOTRACE == 0
                    && self.on
                    && (around || bits & FILTER != 0 && self.notrace_open == 0);
                self.in_syscall = Some(shown);
                shown.then_some(e)
            }
            EventKind::Entry => self.entry(e, chain.filter(|c| c.resume || !was_on)),
            EventKind::Args if chain.is_some_and(|c| c.attached) => {
                // The calls open when fctrace attached: outer calls for
                // the filters (those the task's start already counts, from
                // their exits, are kept). Those shown open the tree (not
                // those of a history chain); their returns are shown
                // where they come.
                if let Some(c) = chain {
                    self.open_calls(&c.funcs);
                    self.history |= c.history;
                    if !c.history {
                        self.draw_opened(true);
                    }
                }
                None
            }
            EventKind::Args if chain.is_some_and(|c| c.end) => {
                // The end of a call open where tracing resumed: its
                // frame (and any left above it) is gone; shown as its
                // return when the tree opened it.
                if let Some(j) = self.stack.iter().rposition(|f| f.func == e.func) {
                    let drawn = self.stack[j].drawn;
                    while self.stack.len() > j {
                        self.pop();
                    }
                    if drawn {
                        return Some(Event {
                            kind: EventKind::Exit,
                            ..e
                        });
                    }
                }
                None
            }
            EventKind::Exit | EventKind::Unwind => {
                // rposition looks at the top first.
                match self.stack.iter().rposition(|f| f.func == e.func) {
                    Some(j) => {
                        let shown = self.stack[j].shown;
                        while self.stack.len() > j {
                            self.pop();
                        }
                        shown.then_some(e)
                    }
                    // Entry not recorded: shown where a call of it would be.
                    None => {
                        let bits = self.bits(e.func);
                        (bits & HIDE == 0 && self.context_shown(bits)).then_some(e)
                    }
                }
            }
            EventKind::Lost => Some(e),
            // A signal from the kernel's side, kernel functions outside a
            // system call: with their values, where the call they came in
            // is shown.
            EventKind::KernelSignal | EventKind::KernelEntry => {
                let shown = match self.stack.last() {
                    Some(top) if top.hide => match self.stack.iter().rev().find(|f| !f.hide) {
                        Some(f) => f.shown,
                        None => self.context_shown(0),
                    },
                    Some(top) => top.shown,
                    None => self.context_shown(0),
                };
                self.in_syscall = Some(shown);
                shown.then_some(e)
            }
            // Signal marks, arguments and return values belong to the call
            // they came in.
            _ => match self.stack.last() {
                Some(top) if top.hide => {
                    // A hidden call's values are hidden; a mark in it
                    // belongs to where its calls are shown.
                    if matches!(
                        e.kind,
                        EventKind::Args | EventKind::Retval | EventKind::Data
                    ) {
                        return None;
                    }
                    match self.stack.iter().rev().find(|f| !f.hide) {
                        Some(f) => f.shown.then_some(e),
                        None => self.context_shown(0).then_some(e),
                    }
                }
                Some(top) => top.shown.then_some(e),
                None => self.context_shown(0).then_some(e),
            },
        }
    }

    #[inline]
    pub(super) fn bits(&self, func: u32) -> u8 {
        self.flags.flags.get(func as usize).copied().unwrap_or(0)
    }

    /// Whether a call with these flags would be shown, depth aside.
    pub(super) fn context_shown(&self, bits: u8) -> bool {
        self.on
            && self.notrace_open == 0
            && bits & NOTRACE == 0
            && (!self.has_filters || self.filter_open > 0 || bits & FILTER != 0)
    }

    /// `resumed`: the chain recorded at this entry when tracing resumed
    /// there (in the recording, or for this display's triggers).
    pub(super) fn entry(&mut self, e: Event, resumed: Option<&Chain>) -> Option<Event> {
        let bits = self.bits(e.func);
        let saved_limit = self.limit;
        let mut backtrace = false;
        if bits & TRIGGER != 0 {
            backtrace = self.trigger(e.func);
            if self.finished {
                return None;
            }
        }
        if let Some(chain) = resumed.filter(|c| c.resume || self.on) {
            self.open_calls(&chain.funcs);
        }
        let hide = bits & HIDE != 0;
        let shown = !hide && self.context_shown(bits) && self.shown < saved_limit.min(self.limit);
        // The tree opens them before this entry when it shows it (the
        // agent records them only then).
        if shown && resumed.is_some() {
            self.draw_opened(false);
        }
        if shown && backtrace && self.backtraces {
            self.notes.push_back(Note {
                func: e.func,
                tsc: e.tsc,
                callers: self.stack.iter().map(|f| f.func).collect(),
            });
        }
        let opened = bits & (FILTER | NOTRACE);
        if opened & NOTRACE != 0 {
            self.notrace_open += 1;
        }
        if opened & FILTER != 0 {
            self.filter_open += 1;
        }
        if shown {
            self.shown += 1;
        }
        self.stack.push(RawFrame {
            func: e.func,
            opened,
            shown,
            outer: false,
            hide,
            drawn: false,
            saved_limit,
        });
        shown.then_some(e)
    }

    /// Applies the triggers of `func` at its entry; whether one asks for
    /// a backtrace.
    #[inline(never)]
    pub(super) fn trigger(&mut self, func: u32) -> bool {
        let mut backtrace = false;
        let flags = self.flags.clone();
        for &i in flags.triggers.get(&func).into_iter().flatten() {
            for k in 0..self.triggers[i].actions.len() {
                match self.triggers[i].actions[k] {
                    Action::TraceOn => self.on = true,
                    Action::TraceOff => self.on = false,
                    Action::Finish => self.finished = true,
                    Action::Depth(n) => {
                        self.limit = self.limit.min(self.shown.saturating_add(n));
                    }
                    Action::Backtrace => backtrace = true,
                    // A recording's action: nothing to do in a reader.
                    Action::Snapshot => {}
                }
            }
        }
        backtrace
    }

    pub(super) fn pop(&mut self) {
        if let Some(f) = self.stack.pop() {
            if f.opened & NOTRACE != 0 {
                self.notrace_open -= 1;
            }
            if f.opened & FILTER != 0 {
                self.filter_open -= 1;
            }
            if f.shown && !f.outer {
                self.shown -= 1;
            }
            self.limit = f.saved_limit;
        }
    }
}
