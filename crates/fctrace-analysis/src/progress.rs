//! What a pass over a trace says on the way: the progress line of a long
//! pass, warnings, and whether an error is only a closed output pipe.

use std::io;

/// A progress line on stderr for long passes over a trace: shown only when
/// `enabled` (stderr is a terminal that is not also receiving the output)
/// and the pass has taken more than a second; erased when done.
pub struct Progress {
    label: &'static str,
    total: u64,
    next_check: u64,
    start: std::time::Instant,
    last_draw: std::time::Instant,
    enabled: bool,
    shown: bool,
}

impl Progress {
    /// `total`: the events the pass will read (info.json's count).
    pub fn new(label: &'static str, total: u64, enabled: bool) -> Progress {
        Progress {
            label,
            total,
            next_check: 1 << 16,
            start: std::time::Instant::now(),
            last_draw: std::time::Instant::now(),
            enabled,
            shown: false,
        }
    }

    /// Whether stderr is a terminal (and, when the pass prints its output
    /// as it goes, stdout is not: the lines would mix).
    pub fn wanted(output_streams: bool) -> bool {
        use std::io::IsTerminal;
        io::stderr().is_terminal() && !(output_streams && io::stdout().is_terminal())
    }

    /// `done` events read so far; cheap unless it is time to redraw.
    #[inline]
    pub fn update(&mut self, done: u64) {
        if done >= self.next_check {
            self.redraw(done);
        }
    }

    fn redraw(&mut self, done: u64) {
        self.next_check = done + (1 << 18);
        if !self.enabled
            || self.start.elapsed() < std::time::Duration::from_secs(1)
            || (self.shown && self.last_draw.elapsed() < std::time::Duration::from_millis(200))
        {
            return;
        }
        self.last_draw = std::time::Instant::now();
        let pct = (done.min(self.total) * 100)
            .checked_div(self.total)
            .map_or_else(|| "?".to_string(), |p| format!("{p}%"));
        eprint!(
            "\r{}: {pct} ({} of {} events)\x1b[K",
            self.label, done, self.total
        );
        self.shown = true;
    }

    /// Erases the line, if it was shown.
    pub fn finish(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
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

/// Prints a warning on stderr, as every fctrace warning (quietly nothing
/// when stderr is gone: a pager the user quit).
pub fn warn(message: &str) {
    use std::io::Write as _;
    let _ = writeln!(io::stderr().lock(), "fctrace: warning: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipe_detection() {
        let e = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&e));
        assert!(is_broken_pipe(&e.context("writing")));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
