//! `fctrace dump` without a format flag: the trace's events as text, one
//! line each, task after task, for reading a trace closely (support,
//! bug reports) and for `grep`/`awk`:
//!
//! ```text
//! # tid time_ns event depth function values
//! 4242 81234010422 entry 0 main
//! 4242 81234010480 entry 1 add args: 2, 3
//! 4242 81234010532 exit 1 add retval: 5
//! 4242 81234010600 signal 1 SIGUSR1
//! 4242 81234011000 exit 0 main
//! ```
//!
//! `event` is `entry`; `open` (a call already running where the task's
//! recorded events begin: an attach or history chain names it; the time
//! is that point); `exit` (returned), `unwind` (its frame vanished:
//! longjmp, exception) or `noreturn` (still open when a caller returned
//! or the task ended: the time is when that was seen); `orphan-exit` (an
//! exit whose entry was not recorded); `signal` (its name follows); `lost`
//! (the number of lost events follows). `depth` is the number of calls
//! open around the call (0: outermost). Times are CLOCK_MONOTONIC
//! nanoseconds.

use super::args::format_payload;
use super::calls::{each_task, End, Functions, Open, Pass, Step, StepSink};
use fctrace_format::store::{TaskInfo, Trace};
use std::io::{self, Write};

/// Writes the events of `trace` that the display filters of `options`
/// show as text lines to `out`.
pub fn write(
    trace: &Trace,
    options: &fctrace_options::Options,
    progress: bool,
    out: &mut impl Write,
) -> io::Result<Pass> {
    out.write_all(b"# tid time_ns event depth function values\n")?;
    let mut sink = Events {
        trace,
        out,
        functions: Functions::demangled(options.demangle),
        session: 0,
        tid: String::new(),
        line: Vec::with_capacity(256),
    };
    each_task(trace, options, "dump", progress, &mut sink)
}

struct Events<'t, 'o, W: Write> {
    trace: &'t Trace,
    out: &'o mut W,
    functions: Functions,
    session: u32,
    /// The current task's tid, as text.
    tid: String,
    line: Vec<u8>,
}

impl<W: Write> Events<'_, '_, W> {
    /// Writes `tid time event depth` then `what` (function `func`'s name
    /// when `what` is `None`), and `label: values` when there are values.
    fn line(
        &mut self,
        ns: u64,
        event: &str,
        depth: usize,
        what: Result<u32, &str>,
        values: Option<(&str, &[u8])>,
    ) -> io::Result<()> {
        let what = match what {
            Ok(func) => {
                let i = self.functions.index(self.trace, self.session, func);
                self.functions.list[i].name.as_str()
            }
            Err(text) => text,
        };
        let l = &mut self.line;
        l.clear();
        let mut b = itoa::Buffer::new();
        l.extend_from_slice(self.tid.as_bytes());
        l.push(b' ');
        l.extend_from_slice(b.format(ns).as_bytes());
        l.push(b' ');
        l.extend_from_slice(event.as_bytes());
        l.push(b' ');
        l.extend_from_slice(b.format(depth).as_bytes());
        l.push(b' ');
        l.extend_from_slice(what.as_bytes());
        if let Some((label, payload)) = values {
            l.push(b' ');
            l.extend_from_slice(label.as_bytes());
            l.extend_from_slice(b": ");
            l.extend_from_slice(format_payload(payload).as_bytes());
        }
        l.push(b'\n');
        self.out.write_all(l)
    }
}

impl<W: Write> StepSink for Events<'_, '_, W> {
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()> {
        self.session = task.session;
        self.tid = task.tid.to_string();
        Ok(())
    }

    fn step(&mut self, step: &Step, stack: &[Open]) -> io::Result<()> {
        match step {
            Step::Enter { func, ns } => {
                let top = stack.last();
                let args = top.and_then(|o| o.args.as_deref());
                let event = if top.is_some_and(|o| !o.entry_recorded) {
                    "open"
                } else {
                    "entry"
                };
                self.line(
                    *ns,
                    event,
                    stack.len().saturating_sub(1),
                    Ok(*func),
                    args.map(|a| ("args", a)),
                )
            }
            Step::Leave(call) => {
                let event = match call.end {
                    End::Returned => "exit",
                    End::Unwound => "unwind",
                    End::NotReturned => "noreturn",
                };
                let retval = call.retval.as_deref().map(|r| ("retval", r));
                self.line(call.end_ns, event, call.depth, Ok(call.func), retval)
            }
            Step::Unmatched { func, ns, .. } => {
                self.line(*ns, "orphan-exit", stack.len(), Ok(*func), None)
            }
            Step::Signal { signal, ns } => {
                let name = fctrace_options::known_signal_name(*signal as i32)
                    .map_or_else(|| signal.to_string(), str::to_string);
                self.line(*ns, "signal", stack.len(), Err(&name), None)
            }
            Step::Lost { count, ns } => {
                self.line(*ns, "lost", stack.len(), Err(&count.to_string()), None)
            }
        }
    }
}

/// `dump --debug`: every event of each task as stored, before the calls
/// are paired: `tid kind func tsc ns`, a `Data` event's payload bytes in
/// hex instead (`tid data 16: 01 00 ...`), task after task (`--tid`
/// chooses the tasks; the other filters do not apply).
pub fn write_raw(
    trace: &Trace,
    options: &fctrace_options::Options,
    out: &mut dyn Write,
) -> io::Result<Vec<fctrace_format::store::StoreError>> {
    use fctrace_format::event::EventKind;
    writeln!(out, "# tid kind func tsc ns (data: length: bytes)")?;
    let mut errors = Vec::new();
    for info in &trace.info.tasks {
        if !options.tids.is_empty() && !options.tids.contains(&info.tid) {
            continue;
        }
        let mut events = match trace.task_events(info) {
            Ok(events) => events,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let tid = info.tid;
        while let Some(e) = events.next_event() {
            if e.kind == EventKind::Data {
                let (bytes, n) = e.data_bytes();
                let hex: Vec<String> = bytes[..n].iter().map(|b| format!("{b:02x}")).collect();
                writeln!(out, "{tid} data {n}: {}", hex.join(" "))?;
            } else {
                writeln!(out, "{tid} {:?} {} {:#x} {}", e.kind, e.func, e.tsc, e.ns)?;
            }
        }
        errors.extend(events.take_error());
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::*;

    #[test]
    fn one_line_per_event() {
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            10,
            vec![
                ev(Entry, 1, 0),
                ev(Entry, 2, 10),
                ev(Signal, 10, 15),
                ev(Unwind, 2, 20),
                ev(Exit, 3, 25),
                ev(Lost, 4, 30),
            ],
        )]);
        let mut out = Vec::new();
        write(&trace, &Default::default(), false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let shape: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                vec![f[0], f[2], f[3]]
            })
            .collect();
        assert_eq!(
            shape,
            [
                ["10", "entry", "0"],
                ["10", "entry", "1"],
                ["10", "signal", "2"],
                ["10", "unwind", "1"],
                ["10", "orphan-exit", "1"],
                ["10", "lost", "1"],
                ["10", "noreturn", "0"],
            ],
            "{text}"
        );
        assert!(text.contains(" signal 2 SIGUSR1\n"), "{text}");
    }
}
