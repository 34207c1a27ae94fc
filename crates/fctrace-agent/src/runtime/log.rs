//! Messages on stderr.

/// Prints a message and stops the program: used only where continuing
/// would corrupt it.
pub(crate) fn fatal(msg: &str) -> ! {
    let line = format!("fctrace agent: fatal: {msg}\n");
    // SAFETY: write(2) of a valid buffer.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    std::process::abort()
}

pub(crate) fn warn(msg: &str) {
    let line = format!("fctrace: {msg}\n");
    // SAFETY: write(2) of a valid buffer.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// The trace directory of the current session, for [`note`].
static TRACE_DIR: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Sets the trace directory that [`note`] writes into (each session's
/// start, attached or preloaded).
pub(crate) fn set_trace_dir(dir: &str) {
    let mut d = TRACE_DIR.lock().unwrap_or_else(|e| e.into_inner());
    d.clear();
    d.push_str(dir);
}

/// Something the recorder reports once at the end, on fctrace's own
/// stderr and in the trace's warnings (what `fctrace info` lists): a line
/// `pid<TAB>message` in `sessions/skipped`. On the program's stderr when
/// there is no trace directory. Not for the hot path (it allocates).
pub(crate) fn note(msg: &str) {
    use std::io::Write;
    let dir = TRACE_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let written = !dir.is_empty()
        && std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(format!("{dir}/sessions/skipped"))
            .and_then(|mut f| {
                // SAFETY: getpid has no preconditions.
                let pid = unsafe { libc::getpid() };
                f.write_all(format!("{pid}\t{msg}\n").as_bytes())
            })
            .is_ok();
    if !written {
        warn(msg);
    }
}
