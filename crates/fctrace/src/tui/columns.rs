//! The report view's columns and sort keys (`tui --report -f FIELDS -s
//! KEYS`, uftrace's names) and the parsing of `-f` lists (`+FIELD`
//! appends to the defaults, `none` shows none), for the graph's fields
//! too.

use super::model::FuncRow;
use std::cmp::Ordering;

/// A column of the report view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    Total,
    TotalAvg,
    TotalMin,
    TotalMax,
    SelfTime,
    SelfAvg,
    SelfMin,
    SelfMax,
    Call,
    Size,
}

/// Every column: uftrace's report field name and the header.
pub const COLS: [(Col, &str, &str); 10] = [
    (Col::Total, "total", "TOTAL"),
    (Col::TotalAvg, "total-avg", "TOTAL-AVG"),
    (Col::TotalMin, "total-min", "TOTAL-MIN"),
    (Col::TotalMax, "total-max", "TOTAL-MAX"),
    (Col::SelfTime, "self", "SELF"),
    (Col::SelfAvg, "self-avg", "SELF-AVG"),
    (Col::SelfMin, "self-min", "SELF-MIN"),
    (Col::SelfMax, "self-max", "SELF-MAX"),
    (Col::Call, "call", "CALLS"),
    (Col::Size, "size", "SIZE"),
];

/// The report's columns when not chosen (uftrace's `total,self,call`).
pub const DEFAULT_COLS: [Col; 3] = [Col::Total, Col::SelfTime, Col::Call];

/// A column's value for one function.
pub enum Value {
    Time(Option<u64>),
    Count(u64),
}

fn avg(sum: u64, n: u64) -> Option<u64> {
    (n > 0).then(|| ((u128::from(sum) + u128::from(n) / 2) / u128::from(n)) as u64)
}

impl Col {
    pub fn header(self) -> &'static str {
        COLS.iter().find(|c| c.0 == self).map_or("", |c| c.2)
    }

    /// Its value for `r`, whose function is `size` bytes long.
    pub fn value(self, r: &FuncRow, size: u64) -> Value {
        match self {
            Col::Total => Value::Time(Some(r.total_ns)),
            Col::TotalAvg => Value::Time(avg(r.sum_ns, r.returned)),
            Col::TotalMin => Value::Time(r.min_ns),
            Col::TotalMax => Value::Time(r.max_ns),
            Col::SelfTime => Value::Time(Some(r.self_ns)),
            Col::SelfAvg => Value::Time(avg(r.self_ns, r.returned)),
            Col::SelfMin => Value::Time(r.self_min_ns),
            Col::SelfMax => Value::Time(r.self_max_ns),
            Col::Call => Value::Count(r.calls),
            Col::Size => Value::Count(size),
        }
    }

    fn number(self, r: &FuncRow, size: u64) -> i128 {
        match self.value(r, size) {
            Value::Time(t) => t.map_or(-1, i128::from),
            Value::Count(n) => i128::from(n),
        }
    }
}

/// A sort key of the report: a column (largest first) or the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Col(Col),
    Func,
}

/// How `a` and `b` compare under `keys`, then by name.
pub fn compare(keys: &[Key], a: (&FuncRow, u64, &str), b: (&FuncRow, u64, &str)) -> Ordering {
    keys.iter()
        .map(|k| match k {
            Key::Col(c) => c.number(b.0, b.1).cmp(&c.number(a.0, a.1)),
            Key::Func => a.2.cmp(b.2),
        })
        .find(|o| o.is_ne())
        .unwrap_or_else(|| a.2.cmp(b.2))
}

/// A `-f` list of names found by `find`: `none`, names separated by
/// commas, or `+NAME,...` appended to `defaults`.
pub fn parse_list<T: Copy + PartialEq>(
    spec: &str,
    defaults: &[T],
    find: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let spec = spec.trim();
    if spec == "none" {
        return Ok(Vec::new());
    }
    let (mut out, rest) = match spec.strip_prefix('+') {
        Some(rest) => (defaults.to_vec(), rest),
        None => (Vec::new(), spec),
    };
    for name in rest.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let v = find(name)?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() && !spec.is_empty() {
        return Err(format!("no field in `{spec}`"));
    }
    Ok(out)
}

/// `tui --report -f`'s columns.
pub fn parse_report_cols(spec: &str) -> Result<Vec<Col>, String> {
    parse_list(spec, &DEFAULT_COLS, |name| {
        if name.ends_with("-stdv") {
            return Err(format!(
                "the TUI's report has no `{name}` (the calls' times are not kept per call \
                 there); `fctrace report -f {name}` shows it"
            ));
        }
        COLS.iter()
            .find(|c| c.1 == name)
            .map(|c| c.0)
            .ok_or_else(|| {
                let known: Vec<&str> = COLS.iter().map(|c| c.1).collect();
                format!(
                    "unknown report field `{name}` (fields: {}, or none)",
                    known.join(", ")
                )
            })
    })
}

/// `tui --report -s`'s keys: the report's fields and `func`.
pub fn parse_keys(spec: &str) -> Result<Vec<Key>, String> {
    let keys = parse_list(spec, &[], |name| {
        if name == "func" {
            return Ok(Key::Func);
        }
        COLS.iter()
            .find(|c| c.1 == name)
            .map(|c| Key::Col(c.0))
            .ok_or_else(|| {
                let known: Vec<&str> = COLS.iter().map(|c| c.1).collect();
                format!(
                    "unknown sort key `{name}` (keys: {}, func)",
                    known.join(", ")
                )
            })
    })?;
    if keys.is_empty() {
        return Err("no sort key given".into());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_as_uftrace_reads_them() {
        assert_eq!(parse_report_cols("none").unwrap(), []);
        assert_eq!(
            parse_report_cols("+size,total-max").unwrap(),
            [
                Col::Total,
                Col::SelfTime,
                Col::Call,
                Col::Size,
                Col::TotalMax
            ]
        );
        assert_eq!(
            parse_report_cols("call,self-avg").unwrap(),
            [Col::Call, Col::SelfAvg]
        );
        assert!(parse_report_cols("total-stdv")
            .unwrap_err()
            .contains("fctrace report -f total-stdv"));
        assert!(parse_report_cols("bogus").is_err());
        assert_eq!(
            parse_keys("call,func").unwrap(),
            [Key::Col(Col::Call), Key::Func]
        );
        assert!(parse_keys("").is_err());
    }

    #[test]
    fn keys_in_turn_then_the_name() {
        let row = |calls, total_ns| FuncRow {
            calls,
            total_ns,
            ..FuncRow::default()
        };
        let (a, b) = (row(3, 10), row(3, 20));
        let keys = [Key::Col(Col::Call), Key::Col(Col::Total)];
        assert_eq!(
            compare(&keys, (&a, 0, "a"), (&b, 0, "b")),
            Ordering::Greater
        );
        assert_eq!(
            compare(&[Key::Func], (&a, 0, "a"), (&b, 0, "b")),
            Ordering::Less
        );
        assert_eq!(
            compare(&[Key::Col(Col::Call)], (&a, 0, "x"), (&a, 0, "y")),
            Ordering::Less
        );
    }
}
