//! fctrace's own notes on stderr, apart from the program's output.

/// The program's stderr from fctrace's: without fctrace's own notes
/// (lines beginning `fctrace: `: a stripped program, events lost, ...).
pub fn without_fctrace_notes(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("fctrace: "))
        .map(|l| format!("{l}\n"))
        .collect()
}
