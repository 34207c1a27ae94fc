//! Display-only options: how `replay`, `report` and live mode show a
//! recorded trace. They never reach the agent (not in
//! [`Options::to_wire`](crate::Options::to_wire)): the trace holds every
//! call either way.

use crate::spec::parse_time;

/// `--demangle`: how C++ and Rust names are shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Demangle {
    /// As `c++filt` prints them (the default).
    #[default]
    Full,
    /// Without parameter types, template arguments or return type:
    /// `std::vector::push_back()` for
    /// `std::vector<int, std::allocator<int> >::push_back(int&&)`.
    Simple,
    /// The raw symbol names (`_ZNSt6vectorIiSaIiEE9push_backEOi`).
    No,
}

impl Demangle {
    pub fn parse(s: &str) -> Result<Demangle, String> {
        match s {
            "full" => Ok(Demangle::Full),
            "simple" => Ok(Demangle::Simple),
            "no" | "none" => Ok(Demangle::No),
            _ => Err(format!("`{s}`: use full, simple or no")),
        }
    }
}

/// One end of a `-r` range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimePoint {
    /// A timestamp, CLOCK_MONOTONIC nanoseconds (as `-f time` prints it:
    /// `SECONDS.NANOSECONDS`).
    Absolute(u64),
    /// Time since the trace's first event (as `-f elapsed` prints it:
    /// a number with a unit, `100ms`).
    Elapsed(u64),
}

/// `-r START~STOP`: only the calls running in that time range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub start: Option<TimePoint>,
    pub stop: Option<TimePoint>,
}

impl TimeRange {
    /// uftrace's syntax: `START~STOP`, either end may be left out
    /// (`~2s`, `100ms~`); each a timestamp `SECONDS.NANOSECONDS` (`-f
    /// time`) or an elapsed time with its unit (`-f elapsed`: `500us`,
    /// `1.5s`).
    pub fn parse(s: &str) -> Result<TimeRange, String> {
        let (a, b) = s
            .split_once('~')
            .ok_or_else(|| format!("`{s}`: a range is START~STOP (e.g. 100ms~2s)"))?;
        let point = |p: &str| -> Result<Option<TimePoint>, String> {
            let p = p.trim();
            if p.is_empty() {
                return Ok(None);
            }
            if p.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
                return parse_timestamp(p).map(|ns| Some(TimePoint::Absolute(ns)));
            }
            parse_time(p).map(|ns| Some(TimePoint::Elapsed(ns)))
        };
        let r = TimeRange {
            start: point(a)?,
            stop: point(b)?,
        };
        if r.start.is_none() && r.stop.is_none() {
            return Err(format!("`{s}`: give a start, a stop or both"));
        }
        Ok(r)
    }
}

/// `SECONDS.NANOSECONDS` (up to 9 digits after the point; a bare number is
/// seconds) into nanoseconds.
fn parse_timestamp(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is neither a timestamp (12345.678901234) nor a time with a unit");
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 9 || frac.contains('.') || (secs.is_empty() && frac.is_empty()) {
        return Err(bad());
    }
    let secs: u64 = if secs.is_empty() {
        0
    } else {
        secs.parse().map_err(|_| bad())?
    };
    let mut ns: u64 = 0;
    for (i, c) in frac.bytes().enumerate() {
        ns += u64::from(c - b'0') * 10u64.pow(8 - i as u32);
    }
    secs.checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(ns))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use TimePoint::*;
        assert_eq!(
            TimeRange::parse("100ms~2s"),
            Ok(TimeRange {
                start: Some(Elapsed(100_000_000)),
                stop: Some(Elapsed(2_000_000_000))
            })
        );
        assert_eq!(
            TimeRange::parse("1234.5~"),
            Ok(TimeRange {
                start: Some(Absolute(1_234_500_000_000)),
                stop: None
            })
        );
        assert_eq!(
            TimeRange::parse("~75059.205379813"),
            Ok(TimeRange {
                start: None,
                stop: Some(Absolute(75_059_205_379_813))
            })
        );
        assert!(TimeRange::parse("~").is_err());
        assert!(TimeRange::parse("100ms").is_err());
        assert!(TimeRange::parse("1.2.3~").is_err());
        assert!(TimeRange::parse("1.0123456789~").is_err());
        assert!(TimeRange::parse("10parsecs~").is_err());
    }

    #[test]
    fn demangle_styles() {
        assert_eq!(Demangle::parse("simple"), Ok(Demangle::Simple));
        assert_eq!(Demangle::parse("no"), Ok(Demangle::No));
        assert!(Demangle::parse("half").is_err());
    }
}
