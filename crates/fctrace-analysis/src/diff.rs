//! `fctrace report --diff OTHER`: per function, the statistics of two
//! traces and their differences (uftrace's `report --diff`).
//!
//! Functions are matched by the file name of the module that defines them
//! and their raw symbol, so two builds of a program at different paths
//! still compare. A difference is OTHER's value minus this trace's (the
//! base). A function called in only one trace has the other side empty
//! (its values count as 0 in the difference).

use super::duration::duration;
use super::names::module_file;
use super::report::FuncStats;
use super::sort::SortKey;
use fctrace_format::store::Trace;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{self, Write};

/// How the differences are shown (`--diff-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Sort by the size of the change (else increases first, then
    /// decreases).
    pub abs: bool,
    /// Show both traces' values, not only the change.
    pub full: bool,
    /// The change in percent of the base value.
    pub percent: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            abs: true,
            full: true,
            percent: false,
        }
    }
}

impl Policy {
    /// `abs`, `no-abs`, `full`, `compact`, `percent`, `no-percent`,
    /// separated by commas; the later wins.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let mut p = Policy::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "abs" => p.abs = true,
                "no-abs" => p.abs = false,
                "full" => p.full = true,
                "compact" => p.full = false,
                "percent" => p.percent = true,
                "no-percent" => p.percent = false,
                other => {
                    return Err(format!(
                        "unknown diff policy `{other}` (abs, no-abs, full, compact, percent, no-percent)"
                    ))
                }
            }
        }
        Ok(p)
    }
}

/// One function of either trace.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: String,
    pub symbol: String,
    pub module: String,
    pub base: Option<FuncStats>,
    pub other: Option<FuncStats>,
}

/// `(calls, total, self)` of a side, 0 when absent.
fn values(s: &Option<FuncStats>) -> [u64; 3] {
    s.as_ref()
        .map_or([0; 3], |f| [f.calls, f.total_ns, f.self_ns])
}

fn signed(a: u64, b: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Row {
    /// OTHER minus base: `[calls, total_ns, self_ns]`.
    pub fn diff(&self) -> [i64; 3] {
        let (a, b) = (values(&self.base), values(&self.other));
        [signed(a[0], b[0]), signed(a[1], b[1]), signed(a[2], b[2])]
    }
}

/// The rows of both traces' functions, in no particular order.
pub fn pair(base: Vec<FuncStats>, other: Vec<FuncStats>) -> Vec<Row> {
    let key = |f: &FuncStats| (module_file(&f.module).to_string(), f.symbol.clone());
    let mut rows: Vec<Row> = Vec::with_capacity(base.len().max(other.len()));
    let mut at: HashMap<(String, String), usize> = HashMap::new();
    for f in base {
        at.insert(key(&f), rows.len());
        rows.push(Row {
            name: f.name.clone(),
            symbol: f.symbol.clone(),
            module: f.module.clone(),
            base: Some(f),
            other: None,
        });
    }
    for f in other {
        match at.get(&key(&f)) {
            Some(&i) if rows[i].other.is_none() => rows[i].other = Some(f),
            _ => rows.push(Row {
                name: f.name.clone(),
                symbol: f.symbol.clone(),
                module: f.module.clone(),
                base: None,
                other: Some(f),
            }),
        }
    }
    rows
}

/// Largest change of `key` first (by size, or increases first without
/// `abs`); ties by name.
pub fn sort(rows: &mut [Row], key: SortKey, policy: Policy) {
    let k = match key {
        SortKey::Calls => 0,
        SortKey::Total => 1,
        SortKey::SelfTime => 2,
    };
    rows.sort_by(|a, b| {
        let (x, y) = (a.diff()[k], b.diff()[k]);
        let primary = if policy.abs {
            y.unsigned_abs().cmp(&x.unsigned_abs()).then(y.cmp(&x))
        } else {
            y.cmp(&x)
        };
        primary
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
}

/// [`sort`] by one column of the `full` table: 0 this trace's values,
/// 1 the other's (largest first), 2 the change (`report --sort-column`).
pub fn sort_column(rows: &mut [Row], key: SortKey, policy: Policy, column: u8) {
    if column >= 2 {
        return sort(rows, key, policy);
    }
    let value = |r: &Row| -> u64 {
        let side = if column == 0 { &r.base } else { &r.other };
        side.as_ref().map_or(0, |f| match key {
            SortKey::Calls => f.calls,
            SortKey::Total => f.total_ns,
            SortKey::SelfTime => f.self_ns,
        })
    };
    rows.sort_by(|a, b| {
        value(b)
            .cmp(&value(a))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
}

/// A signed duration: `+1.250 us`, `-3.000 ms`, `+0.000 us`.
fn signed_duration(d: i64) -> String {
    let sign = if d < 0 { '-' } else { '+' };
    format!("{sign}{}", duration(d.unsigned_abs()).trim_start())
}

fn percent(base: u64, d: i64) -> String {
    if base == 0 {
        if d == 0 { "+0.00%" } else { "new" }.to_string()
    } else {
        format!("{:+.2}%", d as f64 * 100.0 / base as f64)
    }
}

fn change(kind: usize, base: u64, d: i64, policy: Policy) -> String {
    if policy.percent {
        percent(base, d)
    } else if kind == 0 {
        format!("{d:+}")
    } else {
        signed_duration(d)
    }
}

/// A description of a trace for the header: its directory and command.
pub struct Side<'a> {
    pub dir: &'a std::path::Path,
    pub trace: &'a Trace,
}

fn command(t: &Trace) -> String {
    if t.info.args.is_empty() {
        t.info.program.clone()
    } else {
        t.info.args.join(" ")
    }
}

/// The columns `report -f` may give with `--diff`: 0 calls, 1 total time,
/// 2 self time (uftrace's `call`, `total`, `self`), in its order.
pub fn columns(names: Option<&[&str]>) -> Result<Vec<usize>, String> {
    let Some(names) = names else {
        return Ok(DEFAULT_COLUMNS.to_vec());
    };
    names
        .iter()
        .map(|n| match *n {
            "call" => Ok(0),
            "total" => Ok(1),
            "self" => Ok(2),
            other => Err(format!(
                "with --diff, -f takes total, self and call (not `{other}`)"
            )),
        })
        .collect()
}

/// Total time, self time, calls.
pub const DEFAULT_COLUMNS: [usize; 3] = [1, 2, 0];

/// The text table, its columns `order` ([`columns`]).
pub fn write_text(
    out: &mut dyn Write,
    (base, other): (&Side, &Side),
    rows: &[Row],
    policy: Policy,
    order: &[usize],
) -> io::Result<()> {
    writeln!(out, "#\n# fctrace report --diff")?;
    writeln!(
        out,
        "#  [0] base:  {}  ({})",
        base.dir.display(),
        command(base.trace)
    )?;
    writeln!(
        out,
        "#  [1] other: {}  ({})",
        other.dir.display(),
        command(other.trace)
    )?;
    writeln!(out, "#  differences: [1] - [0]\n#")?;
    let titles = ["Calls", "Total time", "Self time"];
    let col = if policy.full { 34 } else { 15 };
    let mut head = String::from(" ");
    let mut rule = String::from(" ");
    for &k in order {
        let t = if policy.full {
            format!("{} (base, other, diff)", titles[k])
        } else {
            format!("{} diff", titles[k])
        };
        head.push_str(&format!(" {t:>col$}"));
        rule.push_str(&format!(" {}", "=".repeat(col)));
    }
    writeln!(out, "{head}  Function")?;
    writeln!(out, "{rule}  {}", "=".repeat(20))?;
    let side = |s: &Option<FuncStats>, k: usize| -> String {
        match s {
            None => "-".to_string(),
            Some(f) => match k {
                0 => f.calls.to_string(),
                1 => duration(f.total_ns),
                _ => duration(f.self_ns),
            },
        }
    };
    // A name two modules have is shown with its module.
    let mut modules_of: HashMap<&str, &str> = HashMap::new();
    let mut ambiguous: std::collections::HashSet<&str> = Default::default();
    for r in rows {
        match modules_of.insert(&r.name, module_file(&r.module)) {
            Some(m) if m != module_file(&r.module) => {
                ambiguous.insert(&r.name);
            }
            _ => {}
        }
    }
    for r in rows {
        let d = r.diff();
        let b = values(&r.base);
        let mut line = String::from(" ");
        for &k in order {
            let c = change(k, b[k], d[k], policy);
            if policy.full {
                line.push_str(&format!(
                    " {:>10} {:>10} {:>12}",
                    side(&r.base, k),
                    side(&r.other, k),
                    c
                ));
            } else {
                line.push_str(&format!(" {c:>15}"));
            }
        }
        let name = if ambiguous.contains(r.name.as_str()) {
            format!("{}@{}", r.name, module_file(&r.module))
        } else {
            r.name.clone()
        };
        writeln!(out, "{line}  {name}")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonSide<'a> {
    dir: String,
    program: &'a str,
    args: &'a [String],
    events: u64,
    lost_events: u64,
}

#[derive(Serialize)]
struct JsonStats {
    calls: u64,
    total_ns: u64,
    self_ns: u64,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    name: &'a str,
    symbol: &'a str,
    module: &'a str,
    base: Option<JsonStats>,
    other: Option<JsonStats>,
    diff: JsonStats2,
}

#[derive(Serialize)]
struct JsonStats2 {
    calls: i64,
    total_ns: i64,
    self_ns: i64,
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    base: JsonSide<'a>,
    other: JsonSide<'a>,
    functions: Vec<JsonRow<'a>>,
}

/// The JSON document: `{"base": SIDE, "other": SIDE, "functions": [{"name",
/// "symbol", "module", "base": STATS|null, "other": STATS|null, "diff":
/// {"calls", "total_ns", "self_ns"}}]}` where SIDE is `{"dir", "program",
/// "args", "events", "lost_events"}` and STATS `{"calls", "total_ns",
/// "self_ns"}`; diff is other minus base (a missing side counts 0),
/// functions in the table's order.
pub fn write_json(
    out: &mut dyn Write,
    base: &Side,
    other: &Side,
    lost: [u64; 2],
    rows: &[Row],
) -> io::Result<()> {
    fn side<'a>(s: &Side<'a>, lost: u64) -> JsonSide<'a> {
        JsonSide {
            dir: s.dir.display().to_string(),
            program: &s.trace.info.program,
            args: &s.trace.info.args,
            events: s.trace.info.events,
            lost_events: s.trace.info.lost_events.max(lost),
        }
    }
    let stats = |s: &Option<FuncStats>| {
        s.as_ref().map(|f| JsonStats {
            calls: f.calls,
            total_ns: f.total_ns,
            self_ns: f.self_ns,
        })
    };
    let doc = JsonDiff {
        base: side(base, lost[0]),
        other: side(other, lost[1]),
        functions: rows
            .iter()
            .map(|r| {
                let d = r.diff();
                JsonRow {
                    name: &r.name,
                    symbol: &r.symbol,
                    module: &r.module,
                    base: stats(&r.base),
                    other: stats(&r.other),
                    diff: JsonStats2 {
                        calls: d[0],
                        total_ns: d[1],
                        self_ns: d[2],
                    },
                }
            })
            .collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(symbol: &str, module: &str, calls: u64, total: u64, self_ns: u64) -> FuncStats {
        FuncStats {
            name: symbol.into(),
            symbol: symbol.into(),
            module: module.into(),
            calls,
            total_ns: total,
            self_ns,
            ..FuncStats::default()
        }
    }

    #[test]
    fn pairs_by_module_file_and_symbol_and_sorts_by_change() {
        let base = vec![
            f("main", "/a/prog", 1, 1000, 100),
            f("leaf", "/a/prog", 10, 500, 500),
            f("gone", "/a/prog", 2, 50, 50),
        ];
        let other = vec![
            f("main", "/b/prog", 1, 2500, 100),
            f("leaf", "/b/prog", 25, 1250, 1250),
            f("new", "/b/prog", 3, 30, 30),
            f("leaf", "/lib/libx.so", 1, 1, 1),
        ];
        let mut rows = pair(base, other);
        assert_eq!(rows.len(), 5);
        sort(&mut rows, SortKey::Calls, Policy::default());
        let order: Vec<(&str, [i64; 3])> =
            rows.iter().map(|r| (r.symbol.as_str(), r.diff())).collect();
        assert_eq!(
            order,
            vec![
                ("leaf", [15, 750, 750]),
                ("new", [3, 30, 30]),
                ("gone", [-2, -50, -50]),
                ("leaf", [1, 1, 1]),
                ("main", [0, 1500, 0]),
            ]
        );
        sort(&mut rows, SortKey::Total, Policy::parse("no-abs").unwrap());
        let order: Vec<&str> = rows.iter().map(|r| r.symbol.as_str()).collect();
        assert_eq!(order, ["main", "leaf", "new", "leaf", "gone"]);
        assert!(Policy::parse("abs,bogus").is_err());
        assert_eq!(
            Policy::parse("compact,percent").unwrap(),
            Policy {
                abs: true,
                full: false,
                percent: true
            }
        );
        assert_eq!(signed_duration(-1500), "-1.500 us");
        assert_eq!(percent(10, 15), "+150.00%");
        assert_eq!(percent(0, 3), "new");
    }
}
