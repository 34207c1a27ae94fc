//! One task's lines ([`TaskState`]): its open calls, leaves, returns,
//! signals, lost events, system calls and values, as the module
//! documentation of the tree describes them.

use super::frame::{
    kernel_signal_text, payload_word, Frame, ENTERED_BEFORE, ENTERED_OFF, ENTERED_WHILE_OFF,
    NOT_IN_HISTORY, NOT_RECORDED,
};
use super::sink::{Column, Sink};
use super::style::TreeSummary;
use crate::duration::Duration;
use crate::filter::EventSource;
use crate::names::{CallNames, TreeName};
use crate::progress::Progress;
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, TaskInfo};
use fctrace_options::known_signal_name as signal_name;

/// A kernel function's line before it is written: its duration, its
/// level below the first function, and its text (`[kernel] `, the name,
/// `() {`).
pub(super) type KernelLine = (Option<u64>, usize, &'static str, String, &'static str);
use std::io;
use std::rc::Rc;

/// The lines of one task.
pub(super) fn write_task<S: EventSource>(
    info: &TaskInfo,
    events: S,
    (out, names, summary, progress): &mut (
        &mut Sink,
        &mut CallNames,
        &mut TreeSummary,
        &mut Progress,
    ),
) -> io::Result<()> {
    let fields = out.fields.is_some();
    let mut task = TaskState::new(info, events, fields);
    task.advance(summary);
    write_task_lines(&mut task, &mut (out, names, summary, progress))
}

/// The lines of a task from its next event (in `head`) on.
pub(super) fn write_task_lines<S: EventSource>(
    task: &mut TaskState<S>,
    (out, names, summary, progress): &mut (
        &mut Sink,
        &mut CallNames,
        &mut TreeSummary,
        &mut Progress,
    ),
) -> io::Result<()> {
    while let Some(event) = task.head.take() {
        task.advance(summary);
        task.handle(event, out, names, summary)?;
        progress.update(summary.events);
    }
    task.finish(out)
}

/// What a parent keeps for its forked children not opened yet.
pub(super) struct ForkWatch {
    /// The functions whose exits begin those children.
    pub(super) funcs: Vec<u32>,
    /// `(function, entry time, the open calls with it)` at each entry of
    /// one of `funcs`, in time order.
    pub(super) snaps: Vec<(u32, u64, Rc<Vec<Frame>>)>,
    /// Children not opened yet.
    pub(super) pending: usize,
}

pub(super) struct TaskState<S> {
    /// `[  tid] | `
    pub(super) column: Column,
    pub(super) session: u32,
    pub(super) events: S,
    /// The next event (one of lookahead, for leaf detection).
    pub(super) head: Option<Event>,
    pub(super) stack: Vec<Frame>,
    /// A `Retval` met before the exit of a function that is not a leaf:
    /// `(func, value)`, shown on its closing line.
    pub(super) retval: Option<(u32, String)>,
    /// The forked children of this task not started yet ([`Merge`]).
    pub(super) forks: Option<Rc<std::cell::RefCell<ForkWatch>>>,
    /// The time of the last timed event read (the merge's key).
    pub(super) last_ns: u64,
    /// `forks` or `column.info` is set: one test per event for both.
    pub(super) extras: bool,
    /// The task began with a history chain: an exit without its entry is
    /// `(entry not in history)`.
    pub(super) history: bool,
}

impl<S: EventSource> TaskState<S> {
    pub(super) fn new(info: &TaskInfo, events: S, fields: bool) -> TaskState<S> {
        TaskState {
            column: if fields {
                Column::with_info(info)
            } else {
                Column::new(info.tid)
            },
            session: info.session,
            events,
            head: None,
            stack: Vec::new(),
            retval: None,
            forks: None,
            last_ns: 0,
            extras: fields,
            history: false,
        }
    }

    /// The time of the next event (payload events carry no time: that of
    /// the event before them).
    #[inline]
    pub(super) fn key(&mut self) -> u64 {
        if let Some(e) = self.head {
            if e.kind != EventKind::Data {
                self.last_ns = e.ns;
            }
        }
        self.last_ns
    }

    /// The `-f` columns of the lines `event` makes: its time and module.
    #[cold]
    #[inline(never)]
    pub(super) fn line_info(&mut self, event: &Event, names: &CallNames) {
        let Some(info) = &self.column.info else {
            return;
        };
        if event.kind == EventKind::Data {
            return;
        }
        info.ns.set(event.ns);
        let module = match event.kind {
            EventKind::Entry | EventKind::Exit | EventKind::Unwind => {
                info.addr.set(names.func_addr(self.session, event.func));
                names.module_file(self.session, event.func)
            }
            _ => {
                info.addr.set(None);
                ""
            }
        };
        let mut m = info.module.borrow_mut();
        m.clear();
        m.push_str(module);
    }

    /// At the entry of a function whose exit begins a forked child: the
    /// calls open with it, for the child.
    #[cold]
    #[inline(never)]
    pub(super) fn watch_fork(&mut self, event: &Event, names: &mut CallNames) {
        let Some(w) = &self.forks else {
            return;
        };
        let mut w = w.borrow_mut();
        if !w.funcs.contains(&event.func) {
            return;
        }
        let mut stack = self.stack.clone();
        stack.push(Frame {
            func: u64::from(event.func),
            name: names.get(self.session, event.func),
            entry_ns: event.ns,
        });
        w.snaps.push((event.func, event.ns, Rc::new(stack)));
    }

    /// Reads the next event into `head`; a read error ends the task.
    #[inline(always)]
    pub(super) fn advance(&mut self, summary: &mut TreeSummary) {
        self.head = self.events.next_event();
        match self.head {
            Some(_) => summary.events += 1,
            None => summary.errors.extend(self.events.take_error()),
        }
    }

    // Inlined into both loops (task by task, by time): a call per event
    // costs about a tenth of replay's time.
    #[inline(always)]
    pub(super) fn handle(
        &mut self,
        event: Event,
        out: &mut Sink,
        names: &mut CallNames,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        if self.extras {
            self.line_info(&event, names);
        }
        let column = &self.column;
        let depth = self.stack.len();
        match event.kind {
            EventKind::Entry => self.entry(event, out, names, summary),
            EventKind::Exit | EventKind::Unwind => self.exit(event, out, names),
            EventKind::Signal => {
                let sig = i32::try_from(event.func).unwrap_or(i32::MAX);
                let number = event.func.to_string();
                let name = signal_name(sig).unwrap_or(&number);
                out.line(None, column, depth, &["/* signal ", name, " */"])
            }
            EventKind::Lost => {
                summary.lost_in_streams += u64::from(event.func);
                let count = event.func.to_string();
                out.line(None, column, depth, &["... ", &count, " events lost ..."])
            }
            EventKind::Retval => {
                let text = self.take_values(summary);
                self.retval = Some((event.func, text));
                Ok(())
            }
            EventKind::Args => {
                // Without its entry: the calls open when fctrace attached
                // (an attach chain) or where a flight recorder's history
                // begins (a history chain, in a task of any origin), else
                // not expected and skipped.
                let bytes = self.take_payload(summary);
                if let Some(chain) = fctrace_format::argval::decode_backtrace(&bytes) {
                    if chain.attached {
                        self.open_attached(chain, out, names)?;
                    } else if chain.end {
                        self.close_resumed(event, out)?;
                    } else if chain.resume {
                        // The calls a display filter chose, open where
                        // tracing resumed: all of them open here.
                        self.open_calls(&chain.funcs, ENTERED_WHILE_OFF, ENTERED_OFF, out, names)?;
                    }
                }
                Ok(())
            }
            EventKind::Data => Ok(()),
            EventKind::Syscall
            | EventKind::SyscallExit
            | EventKind::OffCpu
            | EventKind::PageFault
            | EventKind::KernelSignal
            | EventKind::KernelEntry
            | EventKind::KernelExit => self.kernel_event(event, out, summary),
        }
    }

    /// An entry: a leaf (`name();`, its exit is the next event), a call
    /// with its values, or an opening line; after its backtrace, and the
    /// calls open where tracing resumed.
    #[inline(always)]
    fn entry(
        &mut self,
        event: Event,
        out: &mut Sink,
        names: &mut CallNames,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        if self.extras {
            self.watch_fork(&event, names);
        }
        let mut note = self.events.backtrace(&event);
        // A backtrace recorded by the agent (an `Args` payload right
        // after the entry) wins over the one rebuilt from the calls.
        let mut taken_args = None;
        if matches!(self.head, Some(e) if e.kind == EventKind::Args && e.func == event.func) {
            match self.take_backtrace_or_args(summary) {
                // The calls open where tracing resumed, entered
                // while it was off: opened before this entry.
                Ok(bt) if bt.resume => {
                    if !self.events.chooses_calls() {
                        self.open_resumed(&bt.funcs, out, names)?;
                    }
                }
                Ok(bt) => {
                    let mut callers = bt.funcs;
                    if bt.cut {
                        callers.insert(0, u32::MAX);
                    }
                    note = Some(callers);
                }
                Err(args) => taken_args = Some(args),
            }
        }
        if let Some(callers) = note {
            self.backtrace_line(&callers, out, names)?;
        }
        let name = names.get(self.session, event.func);
        if let Some(args) = taken_args {
            return self.entry_with_values(event, name, out, summary, Some(args));
        }
        let column = &self.column;
        let depth = self.stack.len();
        let leaf_exit = match self.head {
            Some(next)
                if next.func == event.func
                    && matches!(next.kind, EventKind::Exit | EventKind::Unwind) =>
            {
                Some(next)
            }
            _ => None,
        };
        match leaf_exit {
            Some(exit) => {
                let dur = exit.ns.saturating_sub(event.ns);
                if name.event {
                    // An SDT probe's hit: uftrace's event line.
                    out.text_line(None, column, depth, name.leaf_line())?;
                } else if exit.kind == EventKind::Exit {
                    out.text_line(Some(dur), column, depth, name.leaf_line())?;
                } else {
                    out.line(Some(dur), column, depth, &[&name.name, "; (unwound)"])?;
                }
                self.advance(summary);
                Ok(())
            }
            None => {
                // Not a leaf as far as the next event says: it may
                // be the call's values.
                if let Some(Event {
                    kind: EventKind::Args | EventKind::Retval,
                    func,
                    ..
                }) = self.head
                {
                    if func == event.func {
                        return self.entry_with_values(event, name, out, summary, None);
                    }
                }
                out.text_line(None, column, depth, name.open_line())?;
                self.stack.push(Frame {
                    func: u64::from(event.func),
                    name,
                    entry_ns: event.ns,
                });
                Ok(())
            }
        }
    }

    /// An exit or unwind: the closing line of its call (the calls above
    /// it closed as not returned), or of a call whose entry is not in the
    /// trace.
    #[inline(always)]
    fn exit(&mut self, event: Event, out: &mut Sink, names: &mut CallNames) -> io::Result<()> {
        let column = &self.column;
        let depth = self.stack.len();
        let j = match self.stack.last() {
            Some(top) if top.func == u64::from(event.func) => Some(depth - 1),
            _ => self
                .stack
                .iter()
                .rposition(|f| f.func == u64::from(event.func)),
        };
        match j {
            Some(j) => {
                while self.stack.len() > j + 1 {
                    self.close_not_returned(out)?;
                }
                let Some(frame) = self.stack.pop() else {
                    return Ok(());
                };
                if frame.without_entry() {
                    return self.close_unrecorded(event, frame, j, out);
                }
                let dur = event.ns.saturating_sub(frame.entry_ns);
                let retval = match self.retval.take() {
                    Some((f, text)) if u64::from(f) == frame.func => Some(text),
                    _ => None,
                };
                if let Some(text) = retval {
                    // uftrace's shape: `} = 6; /* measure */`.
                    let end = if event.kind == EventKind::Exit {
                        " */"
                    } else {
                        " */ (unwound)"
                    };
                    out.line(
                        Some(dur),
                        &self.column,
                        j,
                        &["} = ", &text, "; /* ", frame.name.bare(), end],
                    )
                } else if event.kind == EventKind::Exit {
                    out.text_line(Some(dur), &self.column, j, frame.name.close_line())
                } else {
                    out.line(
                        Some(dur),
                        &self.column,
                        j,
                        &["} /* ", frame.name.bare(), " */ (unwound)"],
                    )
                }
            }
            None => {
                let name = names.get(self.session, event.func);
                // In a task that begins with a history chain: a
                // call it names, through display filters (they
                // keep the chain), or one entered before it.
                let why = if self.history || self.events.history() {
                    " */ (entry not in history)"
                } else {
                    " */ (entry not recorded)"
                };
                out.line(None, column, depth, &["} /* ", name.bare(), why])
            }
        }
    }

    /// An entry followed by its argument values and maybe (a leaf) its
    /// return value: `add(2, 3) = 5;` or `greet("world") {`.
    #[cold]
    #[inline(never)]
    pub(super) fn entry_with_values(
        &mut self,
        event: Event,
        name: Rc<TreeName>,
        out: &mut Sink,
        summary: &mut TreeSummary,
        taken_args: Option<String>,
    ) -> io::Result<()> {
        let depth = self.stack.len();
        let mut call = name.name.clone();
        let args = match taken_args {
            Some(a) => Some(a),
            None if matches!(self.head, Some(e) if e.kind == EventKind::Args && e.func == event.func) =>
            {
                self.advance(summary);
                Some(self.take_values(summary))
            }
            None => None,
        };
        if let Some(args) = args {
            // A C++ name's parameter list gives way to the values.
            let bare = fctrace_options::pattern::without_params(name.bare());
            call = format!("{bare}({args})");
        }
        let mut ret = None;
        if matches!(self.head, Some(e) if e.kind == EventKind::Retval && e.func == event.func) {
            self.advance(summary);
            ret = Some(self.take_values(summary));
        }
        match self.head {
            Some(next)
                if next.func == event.func
                    && matches!(next.kind, EventKind::Exit | EventKind::Unwind) =>
            {
                let dur = next.ns.saturating_sub(event.ns);
                self.advance(summary);
                let ret = ret.map(|r| format!(" = {r}")).unwrap_or_default();
                let end = if next.kind == EventKind::Exit {
                    ";"
                } else {
                    "; (unwound)"
                };
                out.line(Some(dur), &self.column, depth, &[&call, &ret, end])
            }
            _ => {
                if let Some(r) = ret {
                    self.retval = Some((event.func, r));
                }
                out.line(None, &self.column, depth, &[&call, " {"])?;
                self.stack.push(Frame {
                    func: u64::from(event.func),
                    name,
                    entry_ns: event.ns,
                });
                Ok(())
            }
        }
    }

    /// The values of the payload whose `Data` events start at `head`.
    pub(super) fn take_values(&mut self, summary: &mut TreeSummary) -> String {
        let bytes = self.take_payload(summary);
        crate::args::format_payload(&bytes)
    }

    /// The bytes of the payload whose `Data` events start at `head`.
    pub(super) fn take_payload(&mut self, summary: &mut TreeSummary) -> Vec<u8> {
        let mut bytes = Vec::new();
        while let Some(e) = self.head {
            if e.kind != EventKind::Data {
                break;
            }
            crate::args::push_data(&e, &mut bytes);
            self.advance(summary);
        }
        bytes
    }

    /// Takes the `Args` event at `head` and its payload: a recorded
    /// backtrace, or else the argument values (formatted).
    #[cold]
    #[inline(never)]
    pub(super) fn take_backtrace_or_args(
        &mut self,
        summary: &mut TreeSummary,
    ) -> Result<fctrace_format::argval::Backtrace, String> {
        self.advance(summary);
        let bytes = self.take_payload(summary);
        fctrace_format::argval::decode_backtrace(&bytes)
            .ok_or_else(|| crate::args::format_payload(&bytes))
    }

    /// `/* backtrace: main > a > b */` (a `backtrace` trigger).
    pub(super) fn backtrace_line(
        &self,
        callers: &[u32],
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        let mut text = String::from("/* backtrace: ");
        for (i, &f) in callers.iter().enumerate() {
            if i > 0 {
                text.push_str(" > ");
            }
            if f == u32::MAX {
                // Outer callers left out of a recorded backtrace.
                text.push_str("...");
            } else {
                text.push_str(names.get(self.session, f).bare());
            }
        }
        if callers.is_empty() {
            text.push_str("(none)");
        }
        text.push_str(" */");
        out.line(None, &self.column, self.stack.len(), &[&text])
    }

    /// Tracing resumed for the thread at an entry (without `-F`/`-N`),
    /// with the calls of `chain` open (outermost first, as the agent walked the stack): those
    /// the tree has not open (entered while tracing was off) are opened,
    /// `name() { /* entered while tracing was off */`, after the last one
    /// it has open (a call it has open is found in the chain in order; the
    /// calls of the chain before it that it has not are not drawn: they
    /// cannot be put around lines already printed).
    #[cold]
    #[inline(never)]
    pub(super) fn open_resumed(
        &mut self,
        chain: &[u32],
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        let mut j = 0;
        for frame in &self.stack {
            match chain[j..].iter().position(|&f| u64::from(f) == frame.func) {
                Some(k) => j += k + 1,
                None => break,
            }
        }
        let shown = out
            .choice
            .shown(names.trace().sessions.get(&self.session), chain);
        let opened: Vec<u32> = (j..chain.len())
            .filter(|&i| shown[i])
            .map(|i| chain[i])
            .collect();
        self.open_calls(&opened, ENTERED_WHILE_OFF, ENTERED_OFF, out, names)
    }

    /// An attach chain (or a history chain) without display filters (or
    /// the calls a display filter chose of one): its calls shown
    /// ([`ChainChoice`](crate::filter::ChainChoice)) open the task,
    /// `name() { /* entered before the trace began */`; those of a history
    /// chain have no opening line.
    #[cold]
    #[inline(never)]
    pub(super) fn open_attached(
        &mut self,
        chain: fctrace_format::argval::Backtrace,
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        self.history |= chain.history;
        if chain.history {
            for f in chain.funcs {
                let name = names.get(self.session, f);
                self.stack.push(Frame {
                    func: u64::from(f),
                    name,
                    entry_ns: NOT_IN_HISTORY,
                });
            }
            return Ok(());
        }
        let funcs = if self.events.chooses_calls() {
            chain.funcs
        } else {
            let shown = out
                .choice
                .shown(names.trace().sessions.get(&self.session), &chain.funcs);
            (chain.funcs.iter().zip(shown))
                .filter_map(|(&f, shown)| shown.then_some(f))
                .collect()
        };
        self.open_calls(&funcs, ENTERED_BEFORE, NOT_RECORDED, out, names)
    }

    /// Opens the calls of `funcs` (outermost first), whose entries were
    /// not recorded: `name` then `text` at its depth (`entry_ns`: why).
    pub(super) fn open_calls(
        &mut self,
        funcs: &[u32],
        text: &str,
        entry_ns: u64,
        out: &mut Sink,
        names: &mut CallNames,
    ) -> io::Result<()> {
        for &f in funcs {
            let name = names.get(self.session, f);
            let depth = self.stack.len();
            out.line(None, &self.column, depth, &[&name.name, text])?;
            self.stack.push(Frame {
                func: u64::from(f),
                name,
                entry_ns,
            });
        }
        Ok(())
    }

    /// The end mark of a call open where tracing resumed (it returned or
    /// was unwound): the innermost such call of its function is closed,
    /// `} /* name */ (entry not recorded)`, the calls above it as not
    /// returned. An end mark of a call the tree did not open is skipped.
    #[cold]
    #[inline(never)]
    pub(super) fn close_resumed(&mut self, event: Event, out: &mut Sink) -> io::Result<()> {
        let func = u64::from(event.func);
        let Some(j) = self
            .stack
            .iter()
            .rposition(|f| f.func == func && f.entry_ns == ENTERED_OFF)
        else {
            return Ok(());
        };
        while self.stack.len() > j + 1 {
            self.close_not_returned(out)?;
        }
        match self.stack.pop() {
            Some(frame) => self.close_unrecorded(event, frame, j, out),
            None => Ok(()),
        }
    }

    /// The return (or unwinding) of a call open when fctrace attached,
    /// at depth `j`: `} /* name */ (entry not recorded)`, no duration; of
    /// one open where a flight recorder's history begins: `(entry not in
    /// history)`.
    #[cold]
    #[inline(never)]
    pub(super) fn close_unrecorded(
        &mut self,
        event: Event,
        frame: Frame,
        j: usize,
        out: &mut Sink,
    ) -> io::Result<()> {
        let unwound = if event.kind == EventKind::Unwind {
            " (unwound)"
        } else {
            ""
        };
        let why = if frame.entry_ns == NOT_IN_HISTORY {
            " */ (entry not in history)"
        } else {
            " */ (entry not recorded)"
        };
        match self.retval.take() {
            Some((f, text)) if u64::from(f) == frame.func => out.line(
                None,
                &self.column,
                j,
                &["} = ", &text, "; /* ", frame.name.bare(), why, unwound],
            ),
            _ => out.line(
                None,
                &self.column,
                j,
                &["} /* ", frame.name.bare(), why, unwound],
            ),
        }
    }

    /// A kernel event (`record -k`) at the current depth: a system call,
    /// time off the CPU, page faults. With calls chosen at record time,
    /// those outside every recorded call are not shown (a call with its
    /// return).
    #[cold]
    #[inline(never)]
    pub(super) fn kernel_event(
        &mut self,
        event: Event,
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        let depth = self.stack.len();
        let bytes = self.take_payload(summary);
        if depth == 0 && out.kernel_in_calls_only {
            // With the kernel functions it ran.
            while matches!(self.head, Some(n) if matches!(n.kind, EventKind::KernelEntry | EventKind::KernelExit))
            {
                self.advance(summary);
                self.take_payload(summary);
            }
            if event.kind == EventKind::Syscall
                && matches!(self.head, Some(n) if n.kind == EventKind::SyscallExit && n.func == event.func)
            {
                self.advance(summary);
                self.take_payload(summary);
            }
            return Ok(());
        }
        match event.kind {
            EventKind::Syscall | EventKind::SyscallExit => {
                self.syscall(event, depth, &bytes, out, summary)
            }
            EventKind::KernelSignal => {
                let text = kernel_signal_text(event.func, &bytes);
                out.line(None, &self.column, depth, &[&text])
            }
            EventKind::KernelEntry | EventKind::KernelExit => {
                self.kernel_functions(event, bytes, depth, out, summary)
            }
            _ => self.kernel_note(event, depth, &bytes, out, summary),
        }
    }

    /// Kernel functions (`record -K`) from `first` on, while they follow,
    /// from `depth`: `[kernel] vfs_read() {`, `[kernel] rw_verify_area();`
    /// and `} /* [kernel] vfs_read */` with their durations.
    pub(super) fn kernel_functions(
        &mut self,
        first: Event,
        first_bytes: Vec<u8>,
        depth: usize,
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        let lines = self.kernel_lines(first, first_bytes, &out.kernel, summary);
        self.write_kernel_lines(&lines, depth, out)
    }

    /// Writes `lines` ([`TaskState::kernel_lines`]) from `depth`.
    pub(super) fn write_kernel_lines(
        &mut self,
        lines: &[KernelLine],
        depth: usize,
        out: &mut Sink,
    ) -> io::Result<()> {
        for (dur, level, pre, name, post) in lines {
            out.line(*dur, &self.column, depth + level, &[pre, name, post])?;
        }
        Ok(())
    }

    /// The lines of the kernel functions from `first` on, while they
    /// follow: each with its duration, its level below the first, its
    /// text; those `shown` (`-F`/`-N FUNC@kernel`) lets through.
    pub(super) fn kernel_lines(
        &mut self,
        first: Event,
        first_bytes: Vec<u8>,
        shown: &super::style::KernelShown,
        summary: &mut TreeSummary,
    ) -> Vec<KernelLine> {
        // The name after a function event's values (an exit's duration).
        let name_of = |b: &[u8], at: usize| -> String {
            let n = b
                .get(at..at + 2)
                .map_or(0, |l| u16::from_le_bytes([l[0], l[1]]) as usize);
            String::from_utf8_lossy(b.get(at + 2..at + 2 + n).unwrap_or(&[])).into_owned()
        };
        let named = |ps: &[fctrace_options::pattern::FuncPattern], n: &str| {
            ps.iter().any(|p| p.matches_name(n))
        };
        let mut lines = Vec::new();
        // The open functions, each shown or not; the depths from which
        // they are hidden (-N) and shown (-F).
        let mut open: Vec<(String, bool)> = Vec::new();
        let (mut hidden, mut only) = (None, None);
        let level = |open: &[(String, bool)]| open.iter().filter(|(_, v)| *v).count();
        let mut next = Some((first, first_bytes));
        while let Some((e, bytes)) = next.take() {
            if e.kind == EventKind::KernelEntry {
                let name = name_of(&bytes, 0);
                let d = open.len();
                if hidden.is_none() && named(&shown.hide, &name) {
                    hidden = Some(d);
                }
                if only.is_none() && named(&shown.only, &name) {
                    only = Some(d);
                }
                let visible = hidden.is_none() && (shown.only.is_empty() || only.is_some());
                // A leaf: its exit right after.
                if matches!(self.head, Some(h) if h.kind == EventKind::KernelExit) {
                    self.advance(summary);
                    let exit = self.take_payload(summary);
                    let dur = payload_word(&exit, 0);
                    if visible {
                        lines.push((Some(dur), level(&open), "[kernel] ", name, "();"));
                    }
                    hidden = hidden.filter(|&h| h != d);
                    only = only.filter(|&o| o != d);
                } else {
                    if visible {
                        lines.push((None, level(&open), "[kernel] ", name.clone(), "() {"));
                    }
                    open.push((name, visible));
                }
            } else if let Some((name, visible)) = open.pop() {
                let d = open.len();
                if visible {
                    let dur = payload_word(&bytes, 0);
                    // Nothing shown under it (-N FUNC@kernel): a leaf.
                    match lines.last_mut() {
                        Some(l) if l.4 == "() {" && l.1 == level(&open) => {
                            *l = (Some(dur), l.1, "[kernel] ", name, "();");
                        }
                        _ => lines.push((Some(dur), level(&open), "} /* [kernel] ", name, " */")),
                    }
                }
                hidden = hidden.filter(|&h| h != d);
                only = only.filter(|&o| o != d);
            }
            if let Some(h) = self.head {
                if matches!(h.kind, EventKind::KernelEntry | EventKind::KernelExit) {
                    self.advance(summary);
                    next = Some((h, self.take_payload(summary)));
                }
            }
        }
        // Not returned when its events end.
        while let Some((name, visible)) = open.pop() {
            if visible {
                let end = " */ (not returned)";
                lines.push((None, level(&open), "} /* [kernel] ", name, end));
            }
        }
        lines
    }

    /// A system call (`record -k`), at the current depth: one line
    /// `read(3, 0x7ffd..., 512) = 512` with its duration, when its return
    /// follows; `= ?` without one (`exit_group`, or the task's events
    /// end); `<... read resumed> = 512` for a return whose entry was not
    /// recorded (the `execve` that started the program).
    pub(super) fn syscall(
        &mut self,
        event: Event,
        depth: usize,
        bytes: &[u8],
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        let word = payload_word;
        if event.kind == EventKind::SyscallExit {
            let ret = word(bytes, 0) as i64;
            let name = crate::syscalls::name(event.func);
            let result = crate::syscalls::result_text(event.func, ret);
            return out.line(
                None,
                &self.column,
                depth,
                &["<... ", &name, " resumed> = ", &result],
            );
        }
        let mut args = [0u64; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = word(bytes, i);
        }
        // The path it was given, after the arguments: length, bytes.
        let path = bytes.get(48..50).and_then(|l| {
            let n = u16::from_le_bytes([l[0], l[1]]) as usize;
            bytes.get(50..50 + n)
        });
        let call = crate::syscalls::call_text(event.func, &args, path);
        // The kernel functions it ran (-K): `read(...) {`, them, `} = R`.
        let mut nested = false;
        if let Some(first) = self.head.filter(|h| h.kind == EventKind::KernelEntry) {
            self.advance(summary);
            let b = self.take_payload(summary);
            let lines = self.kernel_lines(first, b, &out.kernel, summary);
            // (None left by -F/-N FUNC@kernel: a line of its own.)
            if !lines.is_empty() {
                out.line(None, &self.column, depth, &[&call, " {"])?;
                self.write_kernel_lines(&lines, depth + 1, out)?;
                nested = true;
            }
        }
        match self.head {
            Some(next) if next.kind == EventKind::SyscallExit && next.func == event.func => {
                self.advance(summary);
                let ret_bytes = self.take_payload(summary);
                let ret = word(&ret_bytes, 0) as i64;
                let result = crate::syscalls::result_text(event.func, ret);
                let dur = next.ns.saturating_sub(event.ns);
                // The time the thread spent off the CPU in it, and the
                // interrupts it took (-K).
                let off = call_notes(
                    word(&ret_bytes, 1),
                    word(&ret_bytes, 2),
                    word(&ret_bytes, 3),
                );
                if nested {
                    let name = crate::syscalls::name(event.func);
                    return out.line(
                        Some(dur),
                        &self.column,
                        depth,
                        &["} = ", &result, " /* ", &name, " */", &off],
                    );
                }
                out.line(
                    Some(dur),
                    &self.column,
                    depth,
                    &[&call, " = ", &result, &off],
                )
            }
            _ if nested => out.line(None, &self.column, depth, &["} = ?"]),
            _ => out.line(None, &self.column, depth, &[&call, " = ?"]),
        }
    }

    /// `/* off-CPU 1.002 ms (blocked) */` (or `(preempted)`: runnable,
    /// waiting for a CPU) for time the thread spent off the CPU outside a
    /// system call; `/* 3 page faults */` for the page faults in a row
    /// (`record -k`).
    pub(super) fn kernel_note(
        &mut self,
        event: Event,
        depth: usize,
        bytes: &[u8],
        out: &mut Sink,
        summary: &mut TreeSummary,
    ) -> io::Result<()> {
        if event.kind == EventKind::OffCpu {
            let word = |i: usize| payload_word(bytes, i);
            let how = if word(1) != 0 { "preempted" } else { "blocked" };
            let text = format!(
                "/* off-CPU {} ({how}) */",
                Duration(word(0)).to_string().trim()
            );
            return out.line(None, &self.column, depth, &[&text]);
        }
        let mut n = 1u64;
        while matches!(self.head, Some(e) if e.kind == EventKind::PageFault) {
            self.advance(summary);
            self.take_payload(summary);
            n += 1;
        }
        let text = if n == 1 {
            "/* 1 page fault */".to_string()
        } else {
            format!("/* {n} page faults */")
        };
        out.line(None, &self.column, depth, &[&text])
    }

    pub(super) fn close_not_returned(&mut self, out: &mut Sink) -> io::Result<()> {
        self.close_open(out, " */ (not returned)")
    }

    /// Closes the frame on top with `} /* name` and `end`.
    pub(super) fn close_open(&mut self, out: &mut Sink, end: &str) -> io::Result<()> {
        if let Some(frame) = self.stack.pop() {
            let depth = self.stack.len();
            out.line(
                None,
                &self.column,
                depth,
                &["} /* ", frame.name.bare(), end],
            )?;
        }
        Ok(())
    }

    /// The task's events have ended: close what is still open.
    pub(super) fn finish(&mut self, out: &mut Sink) -> io::Result<()> {
        while !self.stack.is_empty() {
            let end = out.open_at_end;
            self.close_open(out, end)?;
        }
        Ok(())
    }
}

/// What a system call's line says after its result: ` /* off-CPU 1.2 ms */`
/// for the time the thread spent off the CPU in it, ` /* 2 interrupts
/// 5.1 us */` for the interrupts that ran on its CPU meanwhile (`record
/// -K`: their time is in the call's and its kernel functions' durations).
fn call_notes(off: u64, irqs: u64, irq_ns: u64) -> String {
    let mut s = String::new();
    if off != 0 {
        s += &format!(" /* off-CPU {} */", Duration(off).to_string().trim());
    }
    if irqs != 0 {
        let what = if irqs == 1 { "interrupt" } else { "interrupts" };
        s += &format!(
            " /* {irqs} {what} {} */",
            Duration(irq_ns).to_string().trim()
        );
    }
    s
}
