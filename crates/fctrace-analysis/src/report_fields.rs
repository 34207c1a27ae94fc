//! uftrace's shapes of `fctrace report`: the columns of `-f` (total,
//! total-avg, total-min, total-max, total-stdv, self, self-avg, self-min,
//! self-max, self-stdv, call, size; `--avg-total`, `--avg-self`), the sort
//! keys of `-s` (several, `-s call,total`), the task summary (`--task`)
//! and the csv format.
//!
//! A table of `-f` columns is `Total time   Self time       Calls  Function`
//! as uftrace prints it: each column 10 wide and 2 spaces apart, times
//! with their unit, `stdv` the relative standard deviation of the calls'
//! times (standard deviation over mean) in percent. In csv the header is
//! `#` and the titles separated by commas, times in nanoseconds.

use super::duration::Duration;
use super::filter::{EventSource, Filter};
use super::report::FuncStats;
use fctrace_format::event::EventKind;
use fctrace_format::store::{StoreError, Trace};
use std::cmp::Ordering;
use std::io::{self, Write};

/// A column of `report -f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    Total,
    TotalAvg,
    TotalMin,
    TotalMax,
    TotalStdv,
    SelfTime,
    SelfAvg,
    SelfMin,
    SelfMax,
    SelfStdv,
    Call,
    Size,
}

/// uftrace's names and titles, in the order of `-f all`.
const COLS: [(&str, Col, &str); 12] = [
    ("total", Col::Total, "Total time"),
    ("total-avg", Col::TotalAvg, "Total avg"),
    ("total-min", Col::TotalMin, "Total min"),
    ("total-max", Col::TotalMax, "Total max"),
    ("total-stdv", Col::TotalStdv, "Total stdv"),
    ("self", Col::SelfTime, "Self time"),
    ("self-avg", Col::SelfAvg, "Self avg"),
    ("self-min", Col::SelfMin, "Self min"),
    ("self-max", Col::SelfMax, "Self max"),
    ("self-stdv", Col::SelfStdv, "Self stdv"),
    ("call", Col::Call, "Calls"),
    ("size", Col::Size, "Size"),
];

/// A column's value for one function.
enum Val {
    Time(Option<u64>),
    Count(u64),
    Percent(f64),
}

/// Relative standard deviation in percent of `n` values summing to `sum`
/// whose squares sum to `sq`.
fn rsd(n: u64, sum: u64, sq: u128) -> f64 {
    if n == 0 || sum == 0 {
        return 0.0;
    }
    let n = n as f64;
    let mean = sum as f64 / n;
    let var = (sq as f64 / n - mean * mean).max(0.0);
    var.sqrt() / mean * 100.0
}

fn avg(sum: u64, n: u64) -> Option<u64> {
    (n > 0).then(|| ((u128::from(sum) + u128::from(n) / 2) / u128::from(n)) as u64)
}

impl Col {
    fn title(self) -> &'static str {
        COLS.iter().find(|c| c.1 == self).map_or("", |c| c.2)
    }

    fn value(self, f: &FuncStats) -> Val {
        match self {
            Col::Total => Val::Time(Some(f.total_ns)),
            Col::TotalAvg => Val::Time(f.avg_ns()),
            Col::TotalMin => Val::Time(f.min_ns),
            Col::TotalMax => Val::Time(f.max_ns),
            Col::TotalStdv => Val::Percent(rsd(f.returned, f.sum_ns, f.total_sq)),
            Col::SelfTime => Val::Time(Some(f.self_ns)),
            Col::SelfAvg => Val::Time(avg(f.self_ns, f.returned)),
            Col::SelfMin => Val::Time(f.self_min_ns),
            Col::SelfMax => Val::Time(f.self_max_ns),
            Col::SelfStdv => Val::Percent(rsd(f.returned, f.self_ns, f.self_sq)),
            Col::Call => Val::Count(f.calls),
            Col::Size => Val::Count(f.size),
        }
    }

    /// The value as a number to sort by.
    fn key(self, f: &FuncStats) -> f64 {
        match self.value(f) {
            Val::Time(t) => t.map_or(-1.0, |t| t as f64),
            Val::Count(n) => n as f64,
            Val::Percent(p) => p,
        }
    }
}

/// `-f FIELD,...`: uftrace's column names, `all`, or `none`.
pub fn parse_cols(spec: &str) -> Result<Vec<Col>, String> {
    let spec = spec.trim();
    match spec {
        "none" => return Ok(Vec::new()),
        "all" => return Ok(COLS.iter().map(|c| c.1).collect()),
        _ => {}
    }
    let mut cols = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(c) = COLS.iter().find(|c| c.0 == name) else {
            let known: Vec<&str> = COLS.iter().map(|c| c.0).collect();
            return Err(format!(
                "unknown field `{name}` (fields: {}, all or none)",
                known.join(", ")
            ));
        };
        if !cols.contains(&c.1) {
            cols.push(c.1);
        }
    }
    if cols.is_empty() {
        return Err(format!("`{spec}` names no field"));
    }
    Ok(cols)
}

/// `--avg-total` and `--avg-self`: whose average, min, max and stdv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvgOf {
    Total,
    SelfTime,
}

/// The columns of `--avg-total` / `--avg-self`.
pub fn avg_cols(of: AvgOf) -> Vec<Col> {
    match of {
        AvgOf::Total => vec![Col::TotalAvg, Col::TotalMin, Col::TotalMax, Col::TotalStdv],
        AvgOf::SelfTime => vec![Col::SelfAvg, Col::SelfMin, Col::SelfMax, Col::SelfStdv],
    }
}

/// A sort key of `-s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Col(Col),
    /// The function's name (ascending).
    Func,
}

/// `-s KEY,...`: uftrace's keys (a column name, `func`; with
/// `--avg-total`/`--avg-self` also `avg`, `min`, `max`), and fctrace's
/// `calls` (as `call`) and `time` (as `total`).
pub fn parse_keys(spec: &str, avg: Option<AvgOf>) -> Result<Vec<Key>, String> {
    let mut keys = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let key = match (name, avg) {
            ("func", _) => Key::Func,
            ("calls", _) => Key::Col(Col::Call),
            ("time", _) => Key::Col(Col::Total),
            ("avg", Some(AvgOf::Total)) => Key::Col(Col::TotalAvg),
            ("min", Some(AvgOf::Total)) => Key::Col(Col::TotalMin),
            ("max", Some(AvgOf::Total)) => Key::Col(Col::TotalMax),
            ("avg", Some(AvgOf::SelfTime)) => Key::Col(Col::SelfAvg),
            ("min", Some(AvgOf::SelfTime)) => Key::Col(Col::SelfMin),
            ("max", Some(AvgOf::SelfTime)) => Key::Col(Col::SelfMax),
            _ => match COLS.iter().find(|c| c.0 == name) {
                Some(c) => Key::Col(c.1),
                None => {
                    return Err(format!(
                        "unknown sort key `{name}` (keys: total, total-avg, total-min, \
                         total-max, total-stdv, self, self-avg, self-min, self-max, \
                         self-stdv, call, size, func; avg, min, max with --avg-total \
                         or --avg-self)"
                    ))
                }
            },
        };
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(format!("`{spec}` names no sort key"));
    }
    Ok(keys)
}

/// Sorts by `keys` in turn (numbers largest first, names in order); ties
/// by name and module.
pub fn sort_by(functions: &mut [FuncStats], keys: &[Key]) {
    functions.sort_by(|a, b| {
        let mut o = Ordering::Equal;
        for k in keys {
            o = o.then_with(|| match k {
                Key::Col(c) => c.key(b).total_cmp(&c.key(a)),
                Key::Func => a.name.cmp(&b.name),
            });
        }
        o.then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
}

/// The table of `cols` (then the function's name), as text or csv.
pub fn write_table(
    out: &mut dyn Write,
    functions: &[FuncStats],
    cols: &[Col],
    csv: bool,
) -> io::Result<()> {
    let titles: Vec<&str> = cols.iter().map(|c| c.title()).collect();
    write_head(out, &titles, "Function", csv)?;
    for f in functions {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match (c.value(f), csv) {
                (Val::Time(t), false) => t.map_or("-".to_string(), |t| Duration(t).painted()),
                (Val::Time(t), true) => t.map_or(String::new(), |t| t.to_string()),
                (Val::Count(n), _) => n.to_string(),
                (Val::Percent(p), false) => format!("{p:.2}%"),
                (Val::Percent(p), true) => format!("{p:.2}"),
            })
            .collect();
        write_row(out, &cells, &f.name, csv)?;
    }
    Ok(())
}

fn write_head(out: &mut dyn Write, titles: &[&str], last: &str, csv: bool) -> io::Result<()> {
    if csv {
        let mut line = String::from("#");
        for t in titles {
            line.push_str(t);
            line.push(',');
        }
        return writeln!(out, "{line}{last}");
    }
    let mut head = String::new();
    let mut rule = String::new();
    for t in titles {
        head.push_str(&format!("  {t:>10}"));
        rule.push_str(&format!("  {}", "=".repeat(10.max(t.len()))));
    }
    writeln!(out, "{head}  {last}")?;
    writeln!(out, "{rule}  {}", "=".repeat(20))
}

fn write_row(out: &mut dyn Write, cells: &[String], last: &str, csv: bool) -> io::Result<()> {
    if csv {
        let mut line = String::new();
        for c in cells {
            line.push_str(c);
            line.push(',');
        }
        return writeln!(out, "{line}{last}");
    }
    let mut line = String::new();
    for c in cells {
        line.push_str(&format!("  {c:>10}"));
    }
    writeln!(out, "{line}  {last}")
}

/// A row of `report --task`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TaskStats {
    /// The task's id in the trace, and its parent's.
    pub id: u32,
    pub parent: Option<u32>,
    /// Created by fork, exec or spawn (a process), not as a thread.
    pub process: bool,
    /// The times of its first and last events (its lifetime as traced).
    pub first_ns: u64,
    pub last_ns: u64,
    pub tid: u32,
    pub comm: String,
    /// The durations of the task's outermost calls, summed.
    pub total_ns: u64,
    /// The self times of all its calls, summed.
    pub self_ns: u64,
    /// Its calls (entries).
    pub calls: u64,
}

/// A column of `report --task -f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskCol {
    Total,
    SelfTime,
    Tid,
    Func,
}

/// `report --task -f FIELD,...`: total, self, tid, func, or none; the
/// default is uftrace's.
pub fn parse_task_cols(spec: Option<&str>) -> Result<Vec<TaskCol>, String> {
    let Some(spec) = spec else {
        return Ok(vec![
            TaskCol::Total,
            TaskCol::SelfTime,
            TaskCol::Tid,
            TaskCol::Func,
        ]);
    };
    if spec.trim() == "none" {
        return Ok(Vec::new());
    }
    spec.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| match n {
            "total" => Ok(TaskCol::Total),
            "self" => Ok(TaskCol::SelfTime),
            "tid" => Ok(TaskCol::Tid),
            "func" => Ok(TaskCol::Func),
            _ => Err(format!(
                "unknown task field `{n}` (fields: total, self, tid, func, or none)"
            )),
        })
        .collect()
}

/// The statistics of each task the display filters of `options` show,
/// the longest first; the read errors met.
pub fn aggregate_tasks(
    trace: &Trace,
    options: &fctrace_options::Options,
) -> (Vec<TaskStats>, Vec<StoreError>) {
    let mut filter = Filter::new(trace, options, false);
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for info in &trace.info.tasks {
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
        let mut row = TaskStats {
            id: info.id,
            parent: info.parent,
            process: !matches!(info.origin, fctrace_format::store::TaskOrigin::Thread),
            tid: info.tid,
            comm: info.comm.clone(),
            ..TaskStats::default()
        };
        // (function, entry time, time of its children)
        let mut stack: Vec<(u32, u64, u64)> = Vec::new();
        while let Some(e) = source.next_event() {
            if e.kind.is_call_step() {
                if row.first_ns == 0 {
                    row.first_ns = e.ns;
                }
                row.last_ns = row.last_ns.max(e.ns);
            }
            match e.kind {
                EventKind::Entry => {
                    row.calls += 1;
                    stack.push((e.func, e.ns, 0));
                }
                EventKind::Exit | EventKind::Unwind => {
                    let Some(j) = stack.iter().rposition(|f| f.0 == e.func) else {
                        continue;
                    };
                    stack.truncate(j + 1);
                    let Some((_, entry, children)) = stack.pop() else {
                        continue;
                    };
                    let dur = e.ns.saturating_sub(entry);
                    row.self_ns += dur.saturating_sub(children);
                    match stack.last_mut() {
                        Some(parent) => parent.2 += dur,
                        None => row.total_ns += dur,
                    }
                }
                _ => {}
            }
        }
        errors.extend(source.take_error());
        rows.push(row);
    }
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.tid.cmp(&b.tid)));
    (rows, errors)
}

/// The task summary: `Total time   Self time     TID   Num funcs  Task name`.
pub fn write_tasks(
    out: &mut dyn Write,
    tasks: &[TaskStats],
    cols: &[TaskCol],
    csv: bool,
) -> io::Result<()> {
    if csv {
        let titles: Vec<&str> = cols.iter().map(|c| task_title(*c)).collect();
        write_head(out, &titles, "Task name", true)?;
    } else {
        let mut head = String::new();
        let mut rule = String::new();
        for c in cols {
            let w = task_width(*c);
            head.push_str(&format!("  {:>w$}", task_title(*c)));
            rule.push_str(&format!("  {}", "=".repeat(w)));
        }
        writeln!(out, "{head}  Task name")?;
        writeln!(out, "{rule}  {}", "=".repeat(20))?;
    }
    for t in tasks {
        let mut line = String::new();
        for c in cols {
            let cell = match (c, csv) {
                (TaskCol::Total, false) => Duration(t.total_ns).painted(),
                (TaskCol::SelfTime, false) => Duration(t.self_ns).painted(),
                (TaskCol::Total, true) => t.total_ns.to_string(),
                (TaskCol::SelfTime, true) => t.self_ns.to_string(),
                (TaskCol::Tid, _) => t.tid.to_string(),
                (TaskCol::Func, _) => t.calls.to_string(),
            };
            if csv {
                line.push_str(&cell);
                line.push(',');
            } else {
                let w = task_width(*c);
                line.push_str(&format!("  {cell:>w$}"));
            }
        }
        if csv {
            writeln!(out, "{line}{}", t.comm)?;
        } else {
            writeln!(out, "{line}  {}", t.comm)?;
        }
    }
    Ok(())
}

/// `graph --task`: the tasks as the tree of who created whom, uftrace's
/// shape: the lifetime of each as traced (first to last event), the time
/// in its traced calls, its tid and name; a process created below its
/// parent with `+----`, a thread with `+-`.
pub fn write_task_graph(out: &mut dyn Write, tasks: &[TaskStats]) -> io::Result<()> {
    writeln!(out, "========== TASK GRAPH ==========")?;
    writeln!(out, "# TOTAL TIME   SELF TIME     TID     TASK NAME")?;
    let known: std::collections::HashSet<u32> = tasks.iter().map(|t| t.id).collect();
    let mut by_id: Vec<&TaskStats> = tasks.iter().collect();
    by_id.sort_by_key(|t| t.id);
    // (task, lead before its name, indent of its children)
    let mut stack: Vec<(&TaskStats, String, String)> = by_id
        .iter()
        .rev()
        .filter(|t| t.parent.is_none_or(|p| !known.contains(&p)))
        .map(|t| (*t, String::new(), " ".to_string()))
        .collect();
    let blank = " ".repeat(35);
    while let Some((t, lead, indent)) = stack.pop() {
        if t.process && !lead.is_empty() {
            writeln!(out, "{blank}:{indent} |")?;
        }
        writeln!(
            out,
            "  {:>10}  {:>10}  [{:>6}] : {lead}{}",
            Duration(t.last_ns.saturating_sub(t.first_ns)).painted(),
            Duration(t.total_ns).painted(),
            t.tid,
            t.comm
        )?;
        for c in by_id.iter().rev().filter(|c| c.parent == Some(t.id)) {
            let (l, more) = if c.process {
                ("+----", "      ")
            } else {
                ("+-", "   ")
            };
            stack.push((c, format!("{indent}{l}"), format!("{indent}{more}")));
        }
    }
    Ok(())
}

/// `report --task --format json`: `[{"tid", "comm", "total_ns",
/// "self_ns", "calls"}, ...]`.
pub fn write_tasks_json(out: &mut dyn Write, tasks: &[TaskStats]) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, tasks).map_err(io::Error::other)?;
    writeln!(out)
}

fn task_title(c: TaskCol) -> &'static str {
    match c {
        TaskCol::Total => "Total time",
        TaskCol::SelfTime => "Self time",
        TaskCol::Tid => "TID",
        TaskCol::Func => "Num funcs",
    }
}

fn task_width(c: TaskCol) -> usize {
    match c {
        TaskCol::Tid => 6,
        _ => 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_standard_deviation() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, standard deviation 2.
        let v = [2u64, 4, 4, 4, 5, 5, 7, 9];
        let sq: u128 = v.iter().map(|&x| u128::from(x * x)).sum();
        assert!((rsd(8, 40, sq) - 40.0).abs() < 1e-9);
        assert_eq!(rsd(1, 7, 49), 0.0);
    }

    #[test]
    fn fields_and_keys() {
        assert_eq!(
            parse_cols("total,self-min,call").unwrap(),
            [Col::Total, Col::SelfMin, Col::Call]
        );
        assert_eq!(parse_cols("all").unwrap().len(), 12);
        assert!(parse_cols("bogus").unwrap_err().contains("total-avg"));
        assert_eq!(
            parse_keys("call,total", None).unwrap(),
            [Key::Col(Col::Call), Key::Col(Col::Total)]
        );
        assert_eq!(
            parse_keys("avg", Some(AvgOf::SelfTime)).unwrap(),
            [Key::Col(Col::SelfAvg)]
        );
        assert!(parse_keys("avg", None).is_err());
    }
}
