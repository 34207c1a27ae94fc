//! Text renderings of a trace, shared by live mode and the `replay`,
//! `report` and `info` commands.
//!
//! - [`tree`]: the call tree (`replay`, live mode).
//! - [`report`]: per-function statistics.
//! - [`names`]: how functions are named.

pub mod names;
pub mod report;
pub mod tree;

#[cfg(test)]
pub(crate) mod testutil;

use std::io;

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

/// Whether an error is a closed output pipe (`fctrace replay | head`): the
/// reader went away, which is not a failure of fctrace.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Prints a warning on stderr, as every fctrace warning.
pub fn warn(message: &str) {
    eprintln!("fctrace: warning: {message}");
}

/// The name of a standard signal (`SIGSEGV`), `None` for other numbers.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|s| s.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn broken_pipe_detection() {
        let e = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&e));
        assert!(is_broken_pipe(&e.context("writing")));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
