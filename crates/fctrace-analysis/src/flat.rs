//! `replay --flat`: one line per event instead of the tree, in uftrace's
//! flat shape, for looking at the raw order of a trace's events:
//!
//! ```text
//! [0] ==> 4321/0: ip (main), time (75059205379813)
//! [1] ==> 4321/1: ip (a), time (75059205380101)
//! [2] <== 4321/1: ip (a), time (75059205380544:443)
//! [3] XXX 4321: lost 12 records
//! ```
//!
//! An entry `==>` and an exit `<==` with the task's tid, the depth of the
//! call, the function and the time in nanoseconds (an exit's with the
//! call's duration after a colon); every task's events in time order.

use crate::filter::{EventSource, Filter};
use crate::names::CallNames;
use fctrace_format::event::EventKind;
use fctrace_format::store::{StoreError, Trace};
use fctrace_options::Options;
use std::io::{self, Write};

/// One line before numbering: its time, task order, and text after `[N] `.
struct Row {
    ns: u64,
    order: usize,
    text: String,
}

/// Writes the events of `trace` that `options` show, flat, to `out`;
/// returns the read errors met (the tasks they ended are cut there).
pub fn write_flat(
    trace: &Trace,
    options: &Options,
    out: &mut dyn Write,
) -> io::Result<Vec<StoreError>> {
    let mut filter = Filter::new(trace, options, false);
    let mut names = CallNames::with_options(trace, options);
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (order, info) in trace.info.tasks.iter().enumerate() {
        if filter.as_ref().is_some_and(|f| !f.wants_task(info)) {
            continue;
        }
        let events = match trace.task_events(info) {
            Ok(events) => events,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let mut source: Box<dyn EventSource> = match &mut filter {
            None => Box::new(events),
            Some(f) => Box::new(f.task(info, events)),
        };
        let mut stack: Vec<(u32, u64)> = Vec::new();
        while let Some(e) = source.next_event() {
            let tid = info.tid;
            let text = match e.kind {
                EventKind::Entry => {
                    let name = names.get(info.session, e.func);
                    let t = format!(
                        "==> {tid}/{}: ip ({}), time ({})",
                        stack.len(),
                        name.bare(),
                        e.ns
                    );
                    stack.push((e.func, e.ns));
                    t
                }
                EventKind::Exit | EventKind::Unwind => {
                    let Some(j) = stack.iter().rposition(|&(f, _)| f == e.func) else {
                        continue;
                    };
                    let entry_ns = stack[j].1;
                    stack.truncate(j);
                    let name = names.get(info.session, e.func);
                    format!(
                        "<== {tid}/{j}: ip ({}), time ({}:{})",
                        name.bare(),
                        e.ns,
                        e.ns.saturating_sub(entry_ns)
                    )
                }
                EventKind::Lost => format!("XXX {tid}: lost {} records", e.func),
                _ => continue,
            };
            rows.push(Row {
                ns: e.ns,
                order,
                text,
            });
        }
        errors.extend(source.take_error());
    }
    // Stable: a task's own events keep their order at equal times.
    rows.sort_by_key(|r| (r.ns, r.order));
    let mut out = io::BufWriter::new(out);
    for (n, row) in rows.iter().enumerate() {
        writeln!(out, "[{n}] {}", row.text)?;
    }
    out.flush()?;
    Ok(errors)
}
