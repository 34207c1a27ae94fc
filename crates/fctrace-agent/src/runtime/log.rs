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
