//! `fctrace dump --chrome`: the Chrome trace-event JSON format, which
//! Perfetto UI (ui.perfetto.dev), `chrome://tracing` and speedscope open.
//!
//! ```text
//! {"displayTimeUnit":"ns","otherData":{"program":"./app","command":"./app 3"},"traceEvents":[
//! {"ph":"M","name":"process_name","pid":41,"tid":41,"args":{"name":"app"}},
//! {"ph":"M","name":"thread_name","pid":41,"tid":41,"args":{"name":"app"}},
//! {"ph":"X","name":"add","cat":"app","ts":81234.010,"dur":0.052,"pid":41,"tid":41,"args":{"args":"2, 3","retval":"5"}},
//! {"ph":"i","s":"t","name":"signal SIGUSR1","ts":81234.500,"pid":41,"tid":41},
//! ...
//! ]}
//! ```
//!
//! One complete (`X`) event per call, written when the call ends (so a
//! callee comes before its caller: the viewers sort by time), named by its
//! demangled function name, with the file name of the module that
//! defines it as its category. `ts` and `dur` are microseconds with three
//! decimals (nanoseconds exactly); `ts` is CLOCK_MONOTONIC. `args` holds
//! the call's arguments and return value as the tree prints them, when
//! recorded, and `end` for a call that did not return (`unwound`: its
//! frame vanished, by longjmp or an exception; `not returned`: it was
//! still running when a caller returned or the task ended). Signals,
//! lost events and exits without a recorded entry are instant (`i`)
//! events of their thread. The output is written as the trace is read:
//! memory does not grow with the trace.

use super::args::format_payload;
use super::calls::{each_task, End, Functions, IdCache, Open, Pass, Step, StepSink};
use super::names::module_file;
use fctrace_format::store::{TaskInfo, Trace};
use std::collections::HashSet;
use std::io::{self, Write};

/// Writes the calls of `trace` that the display filters of `options` show
/// as Chrome JSON to `out`.
pub fn write(
    trace: &Trace,
    options: &fctrace_options::Options,
    progress: bool,
    out: &mut impl Write,
) -> io::Result<Pass> {
    let mut head = Vec::new();
    head.extend_from_slice(b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"program\":");
    json_str(&mut head, &trace.info.program);
    head.extend_from_slice(b",\"command\":");
    json_str(&mut head, &trace.info.args.join(" "));
    head.extend_from_slice(b"},\"traceEvents\":[");
    out.write_all(&head)?;
    let mut sink = Chrome {
        trace,
        out,
        functions: Functions::demangled(options.demangle),
        rendered: Vec::new(),
        ids: IdCache::default(),
        pid_tid: Vec::new(),
        named_pids: HashSet::new(),
        session: 0,
        first: true,
        line: Vec::with_capacity(FLUSH_AT + 4096),
    };
    let pass = each_task(trace, options, "dump", progress, &mut sink)?;
    sink.out.write_all(&sink.line)?;
    sink.out.write_all(b"\n]}\n")?;
    Ok(pass)
}

struct Chrome<'t, 'o, W: Write> {
    trace: &'t Trace,
    out: &'o mut W,
    functions: Functions,
    /// By function index: `"name":"...","cat":"..."`.
    rendered: Vec<Vec<u8>>,
    /// By function id of the current session: the function index + 1 (0:
    /// not looked up yet).
    ids: IdCache,
    /// `,"pid":P,"tid":T` of the current task.
    pid_tid: Vec<u8>,
    /// Processes whose name was written.
    named_pids: HashSet<u32>,
    session: u32,
    first: bool,
    /// The lines not written yet (see [`Chrome::done`]).
    line: Vec<u8>,
}

/// The size of [`Chrome::line`] from which it is written out (the size
/// of dump's `BufWriter`: written past it, not copied into it).
const FLUSH_AT: usize = 1 << 20;

impl<W: Write> Chrome<'_, '_, W> {
    /// The index in `rendered` of function `func` of the current session.
    fn name(&mut self, func: u32) -> usize {
        if let Some(x) = self.ids.get(func) {
            return x;
        }
        let x = self.functions.index(self.trace, self.session, func);
        while self.rendered.len() < self.functions.list.len() {
            let f = &self.functions.list[self.rendered.len()];
            let mut r = b"\"name\":".to_vec();
            json_str(&mut r, &f.name);
            r.extend_from_slice(b",\"cat\":");
            json_str(&mut r, module_file(&f.module));
            self.rendered.push(r);
        }
        self.ids.set(func, x);
        x
    }

    /// A line was added to `line`: it goes out with the lines before it
    /// once they fill [`FLUSH_AT`] bytes (one copy of each line, composed
    /// in place, instead of a copy into the writer's buffer per line).
    fn done(&mut self) -> io::Result<()> {
        if self.line.len() >= FLUSH_AT {
            self.out.write_all(&self.line)?;
            self.line.clear();
        }
        Ok(())
    }

    /// Starts an event line: the separator and `{"ph":"<ph>",`.
    fn start(&mut self, ph: &str) {
        if !self.first {
            self.line.push(b',');
        }
        self.first = false;
        self.line.extend_from_slice(b"\n{\"ph\":\"");
        self.line.extend_from_slice(ph.as_bytes());
        self.line.extend_from_slice(b"\",");
    }

    /// An instant event of the current thread.
    fn instant(&mut self, name: &str, ns: u64) -> io::Result<()> {
        self.start("i");
        self.line.extend_from_slice(b"\"s\":\"t\",\"name\":");
        json_str(&mut self.line, name);
        self.line.extend_from_slice(b",\"ts\":");
        micros(&mut self.line, ns);
        self.line.extend_from_slice(&self.pid_tid);
        self.line.push(b'}');
        self.done()
    }

    /// A metadata event naming the current process or thread.
    fn metadata(&mut self, what: &str, name: &str) -> io::Result<()> {
        self.start("M");
        self.line.extend_from_slice(b"\"name\":");
        json_str(&mut self.line, what);
        self.line.extend_from_slice(&self.pid_tid);
        self.line.extend_from_slice(b",\"args\":{\"name\":");
        json_str(&mut self.line, name);
        self.line.extend_from_slice(b"}}");
        self.done()
    }
}

impl<W: Write> StepSink for Chrome<'_, '_, W> {
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()> {
        if task.session != self.session || self.ids.is_empty() {
            self.session = task.session;
            self.ids.clear();
        }
        self.pid_tid.clear();
        self.pid_tid.extend_from_slice(b",\"pid\":");
        self.pid_tid
            .extend_from_slice(itoa::Buffer::new().format(task.pid).as_bytes());
        self.pid_tid.extend_from_slice(b",\"tid\":");
        self.pid_tid
            .extend_from_slice(itoa::Buffer::new().format(task.tid).as_bytes());
        let program = module_file(&self.trace.info.program).to_string();
        if self.named_pids.insert(task.pid) {
            let name = if task.comm.is_empty() {
                program.clone()
            } else {
                task.comm.clone()
            };
            self.metadata("process_name", &format!("{name} {}", task.pid))?;
        }
        let name = if task.comm.is_empty() {
            format!("tid {}", task.tid)
        } else {
            task.comm.clone()
        };
        self.metadata("thread_name", &name)
    }

    fn step(&mut self, step: &Step, _stack: &[Open]) -> io::Result<()> {
        match step {
            Step::Enter { .. } => Ok(()),
            Step::Leave(call) => {
                let x = self.name(call.func);
                self.start("X");
                let line = &mut self.line;
                line.extend_from_slice(&self.rendered[x]);
                line.extend_from_slice(b",\"ts\":");
                micros(line, call.start_ns);
                line.extend_from_slice(b",\"dur\":");
                micros(line, call.duration_ns());
                line.extend_from_slice(&self.pid_tid);
                let end = match call.end {
                    End::Returned => None,
                    End::Unwound => Some("unwound"),
                    End::NotReturned => Some("not returned"),
                };
                if call.args.is_some() || call.retval.is_some() || end.is_some() {
                    line.extend_from_slice(b",\"args\":{");
                    let mut sep = "";
                    for (key, payload) in [("args", &call.args), ("retval", &call.retval)] {
                        if let Some(p) = payload {
                            line.extend_from_slice(sep.as_bytes());
                            json_str(line, key);
                            line.push(b':');
                            json_str(line, &format_payload(p));
                            sep = ",";
                        }
                    }
                    if let Some(end) = end {
                        line.extend_from_slice(sep.as_bytes());
                        line.extend_from_slice(b"\"end\":");
                        json_str(line, end);
                    }
                    line.push(b'}');
                }
                line.push(b'}');
                self.done()
            }
            Step::Unmatched { func, ns, .. } => {
                let x = self.name(*func);
                self.start("i");
                self.line.extend_from_slice(b"\"s\":\"t\",");
                self.line.extend_from_slice(&self.rendered[x]);
                self.line.extend_from_slice(b",\"ts\":");
                micros(&mut self.line, *ns);
                self.line.extend_from_slice(&self.pid_tid);
                self.line
                    .extend_from_slice(b",\"args\":{\"note\":\"exit without a recorded entry\"}}");
                self.done()
            }
            Step::Signal { signal, ns } => {
                let name = match fctrace_options::known_signal_name(*signal as i32) {
                    Some(s) => format!("signal {s}"),
                    None => format!("signal {signal}"),
                };
                self.instant(&name, *ns)
            }
            Step::Lost { count, ns } => self.instant(&format!("lost {count} events"), *ns),
        }
    }
}

/// Appends `s` as a JSON string.
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends nanoseconds as microseconds with three decimals.
fn micros(out: &mut Vec<u8>, ns: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(ns / 1000).as_bytes());
    let frac = (ns % 1000) as u16;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::*;

    #[test]
    fn micros_keep_every_nanosecond() {
        let mut v = Vec::new();
        for ns in [0, 7, 999, 1000, 1_234_567, 123_456_789_012_345] {
            v.clear();
            micros(&mut v, ns);
            let text = String::from_utf8(v.clone()).unwrap();
            let (int, frac) = text.split_once('.').unwrap();
            assert_eq!(frac.len(), 3, "{text}");
            assert_eq!(
                int.parse::<u64>().unwrap() * 1000 + frac.parse::<u64>().unwrap(),
                ns
            );
        }
    }

    #[test]
    fn one_complete_event_per_call_and_instants() {
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            10,
            vec![
                ev(Entry, 1, 1000),
                ev(Entry, 2, 1500),
                ev(Signal, 10, 1600),
                ev(Exit, 2, 2500),
                ev(Lost, 3, 2600),
                ev(Exit, 1, 4000),
                ev(Entry, 2, 5000),
            ],
        )]);
        let mut out = Vec::new();
        let pass = write(&trace, &Default::default(), false, &mut out).unwrap();
        assert_eq!(pass.lost_in_streams, 3);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let xs: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(xs.len(), 3, "{events:?}");
        let x = |i: usize, key: &str| xs[i][key].as_f64().unwrap();
        // The inner call first: written as it ends.
        assert_eq!((x(0, "ts"), x(0, "dur")), (1.5, 1.0));
        assert_eq!((x(1, "ts"), x(1, "dur")), (1.0, 3.0));
        assert_eq!(xs[2]["args"]["end"], "not returned");
        assert_eq!(xs[0]["tid"], 10);
        let instants: Vec<_> = events
            .iter()
            .filter(|e| e["ph"] == "i")
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(instants, ["signal SIGUSR1", "lost 3 events"]);
        assert!(events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "thread_name"));
    }
}
