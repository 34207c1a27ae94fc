//! Durations as the tree, the report and the graph show them: a
//! 10-character column, as uftrace prints it, its unit coloured when
//! colour is on ([`crate::term`]).

use crate::term;

/// A duration as a 10-character column, as uftrace prints it: `{:7.3}` of
/// the value in the smallest of `us`, `ms`, `s ` that keeps it below 1000,
/// a space and the 2-character unit. Sub-microsecond durations are shown
/// in microseconds (`  0.210 us`: the 3 decimals are nanoseconds).
/// Examples: `  0.210 us`, `  5.774 us`, ` 12.500 ms`, `  1.500 s `. Only
/// durations of 1000 s or more are wider.
pub fn duration(ns: u64) -> String {
    Duration(ns).to_string()
}

/// [`duration`] as a `Display` value (writes without allocating; ignores
/// width and fill flags).
#[derive(Clone, Copy, Debug)]
pub struct Duration(pub u64);

impl Duration {
    /// Appends the column to `out`: the same text as `Display`, without the
    /// formatting machinery for the common case (below a millisecond, where
    /// the three decimals are exactly the nanoseconds).
    /// When colour is on ([`term::colour`](crate::term::colour)), the unit of a duration of a
    /// millisecond or more is coloured; below that it never is, so the
    /// common path does not even look.
    #[inline]
    pub fn push_to(self, out: &mut Vec<u8>) {
        let ns = self.0;
        if ns <= 999_999 {
            // `{:7.3}` of the microseconds without the leading space the
            // caller's format puts before it: `III.FFF us`, the integer
            // part right-aligned.
            let (int, frac) = ((ns / 1000) as usize, (ns % 1000) as usize);
            let i = &THREE_DIGITS.aligned[int];
            let f = &THREE_DIGITS.padded[frac];
            out.extend_from_slice(&[i[0], i[1], i[2], b'.', f[0], f[1], f[2], b' ', b'u', b's']);
        } else {
            self.push_long(out);
        }
    }

    /// A millisecond or more: the column through `Display`, with its unit
    /// in colour when colour is on: `ms` green, `s` yellow, red from a
    /// minute on (the unit's trailing space stays outside). Out of line,
    /// as rare as it is slow.
    #[inline(never)]
    fn push_long(self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(out, "{self}");
        if !term::colour() {
            return;
        }
        let unit = out.len() - 2;
        let (colour, text, after) = match &out[unit..] {
            b"us" => (None, "us", ""),
            b"ms" => (Some(term::GREEN), "ms", ""),
            _ if self.0 >= 60_000_000_000 => (Some(term::RED), "s", " "),
            _ => (Some(term::YELLOW), "s", " "),
        };
        out.truncate(unit);
        if let Some(colour) = colour {
            out.extend_from_slice(colour.as_bytes());
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(term::RESET.as_bytes());
        } else {
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(after.as_bytes());
    }

    /// The column as text, coloured when colour is on ([`term::colour`](crate::term::colour)).
    pub fn painted(self) -> String {
        if !term::colour() {
            return duration(self.0);
        }
        let mut v = Vec::with_capacity(24);
        self.push_to(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }
}

/// The numbers 0 to 999 in three columns: right-aligned with spaces
/// (`  7`) and zero-padded (`007`).
struct ThreeDigits {
    aligned: [[u8; 3]; 1000],
    padded: [[u8; 3]; 1000],
}

static THREE_DIGITS: ThreeDigits = {
    let mut t = ThreeDigits {
        aligned: [[b' '; 3]; 1000],
        padded: [[b'0'; 3]; 1000],
    };
    let mut n = 0;
    while n < 1000 {
        let d = [(n / 100) as u8, (n / 10 % 10) as u8, (n % 10) as u8];
        t.padded[n] = [b'0' + d[0], b'0' + d[1], b'0' + d[2]];
        t.aligned[n] = t.padded[n];
        if n < 100 {
            t.aligned[n][0] = b' ';
        }
        if n < 10 {
            t.aligned[n][1] = b' ';
        }
        n += 1;
    }
    t
};

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(f64, &str); 2] = [(1e3, "us"), (1e6, "ms")];
        let ns = self.0 as f64;
        for (div, unit) in UNITS {
            let v = ns / div;
            // Below 999.9995 the value prints with at most 3 integer digits.
            if v < 999.9995 {
                return write!(f, "{v:7.3} {unit}");
            }
        }
        write!(f, "{:7.3} s ", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_to_writes_what_display_writes() {
        let mut values: Vec<u64> = (0..2_000).collect();
        values.extend((0..2_000).map(|k| k * 499 + 7));
        values.extend([
            9_999,
            10_000,
            99_999,
            100_000,
            999_499,
            999_500,
            999_999,
            1_000_000,
            1_000_500,
            999_999_499,
            999_999_500,
            12_345_678_901,
            u64::MAX,
        ]);
        for ns in values {
            let mut v = Vec::new();
            Duration(ns).push_to(&mut v);
            assert_eq!(String::from_utf8(v).unwrap(), duration(ns), "{ns}");
        }
    }

    #[test]
    fn coloured_units() {
        term::set_colour(true);
        let painted = |ns: u64| Duration(ns).painted();
        assert_eq!(painted(999_999), "999.999 us");
        assert_eq!(painted(2_113_000), "  2.113 \x1b[32mms\x1b[0m");
        assert_eq!(painted(999_999_499), "999.999 \x1b[32mms\x1b[0m");
        assert_eq!(painted(999_999_500), "  1.000 \x1b[33ms\x1b[0m ");
        assert_eq!(painted(59_999_999_999), " 60.000 \x1b[33ms\x1b[0m ");
        assert_eq!(painted(60_000_000_000), " 60.000 \x1b[91ms\x1b[0m ");
        term::set_colour(false);
        assert_eq!(painted(2_113_000), "  2.113 ms");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0), "  0.000 us");
        assert_eq!(duration(120), "  0.120 us");
        assert_eq!(duration(999), "  0.999 us");
        assert_eq!(duration(1000), "  1.000 us");
        assert_eq!(duration(5_774), "  5.774 us");
        assert_eq!(duration(999_999), "999.999 us");
        assert_eq!(duration(1_000_000), "  1.000 ms");
        assert_eq!(duration(12_500_000), " 12.500 ms");
        assert_eq!(duration(999_999_600), "  1.000 s ");
        assert_eq!(duration(12_345_678_901), " 12.346 s ");
        for ns in [
            0,
            1,
            999,
            1000,
            999_999,
            12_345_678,
            999_999_999,
            999_999_000_000,
        ] {
            assert_eq!(duration(ns).len(), 10, "{ns}");
        }
        assert_eq!(duration(1_000_000_000_000), "1000.000 s ");
    }
}
