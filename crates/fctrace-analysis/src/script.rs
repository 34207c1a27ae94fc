//! The events `fctrace script` hands to a script's driver: one JSON object
//! per line, every task's entries and exits in time order (as `replay
//! --flat` orders them), with the fields of uftrace's script context:
//!
//! ```text
//! {"kind":"entry","tid":4321,"depth":0,"timestamp":7505920537,"address":4198694,"name":"main","args":[1]}
//! {"kind":"exit","tid":4321,"depth":0,"timestamp":7505920999,"duration":462,"address":4198694,"name":"main","retval":0}
//! ```
//!
//! `args` is on an entry whose arguments were recorded, `retval` on an
//! exit whose return value was; each value is a number when the tree shows
//! it as a decimal integer, else the tree's text (`"hello"` with its
//! quotes, `0x7ffc...`, `RED`). A call that never returned in the trace
//! gets its exit where the tree ends it; an exit without a recorded entry
//! is left out.

use crate::args::format_value;
use crate::calls::{each_task, Open, Step, StepSink};
use crate::names::CallNames;
use fctrace_format::argval;
use fctrace_format::store::{StoreError, TaskInfo, Trace};
use fctrace_options::Options;
use serde_json::{json, Value};
use std::io::{self, Write};

/// One line before sorting: its time, task order, and JSON text.
struct Row {
    ns: u64,
    order: usize,
    text: String,
}

struct Sink<'t> {
    names: CallNames<'t>,
    rows: Vec<Row>,
    order: usize,
    tid: u32,
    session: u32,
    values: bool,
}

/// The values of an argument or return value payload, as the script gets
/// them (`None`: not recorded).
fn values(payload: Option<&Vec<u8>>) -> Option<Value> {
    let decoded = argval::decode(payload?).ok()?;
    let list = decoded
        .iter()
        .map(|v| {
            let mut s = String::new();
            format_value(v, &mut s);
            match s.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::from(s),
            }
        })
        .collect();
    Some(Value::Array(list))
}

impl Sink<'_> {
    fn row(&mut self, ns: u64, mut v: Value, func: u32) {
        let name = self.names.get(self.session, func);
        let addr = self.names.func_addr(self.session, func).unwrap_or(0);
        v["tid"] = json!(self.tid);
        v["timestamp"] = json!(ns);
        v["address"] = json!(addr);
        v["name"] = json!(name.bare());
        self.rows.push(Row {
            ns,
            order: self.order,
            text: v.to_string(),
        });
    }
}

impl StepSink for Sink<'_> {
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()> {
        self.order += 1;
        self.tid = task.tid;
        self.session = task.session;
        Ok(())
    }

    fn step(&mut self, step: &Step, stack: &[Open]) -> io::Result<()> {
        match step {
            Step::Enter { func, ns } => {
                let mut v = json!({"kind": "entry", "depth": stack.len().saturating_sub(1)});
                let args = stack.last().and_then(|o| o.args.as_ref());
                if let Some(args) = values(args.filter(|_| self.values)) {
                    v["args"] = args;
                }
                self.row(*ns, v, *func);
            }
            Step::Leave(call) => {
                let mut v = json!({"kind": "exit", "depth": call.depth,
                    "duration": call.duration_ns()});
                if let Some(Value::Array(mut r)) =
                    values(call.retval.as_ref().filter(|_| self.values))
                {
                    if !r.is_empty() {
                        v["retval"] = r.swap_remove(0);
                    }
                }
                self.row(call.end_ns, v, call.func);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Writes the entries and exits of `trace` that `options` show to `out`,
/// one JSON object a line in time order, with the recorded arguments and
/// return values when `values`; returns the read errors met.
pub fn write_events(
    trace: &Trace,
    options: &Options,
    values: bool,
    out: &mut dyn Write,
) -> io::Result<Vec<StoreError>> {
    let mut sink = Sink {
        names: CallNames::with_demangle(trace, options.demangle),
        rows: Vec::new(),
        order: 0,
        tid: 0,
        session: 0,
        values,
    };
    let pass = each_task(trace, options, "script", false, &mut sink)?;
    // Stable: a task's own events keep their order at equal times.
    sink.rows.sort_by_key(|r| (r.ns, r.order));
    let mut out = io::BufWriter::new(out);
    for row in &sink.rows {
        out.write_all(row.text.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(pass.errors)
}
