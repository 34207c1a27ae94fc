//! Every test binary starts with the default action for each signal,
//! whatever it inherited: run as a background job (`cmd &` in a script,
//! `nohup`, some CI runners) it would inherit SIGINT and SIGQUIT ignored
//! (SIGHUP with nohup), and so would the programs the tests start, natively
//! and under fctrace alike: a test that stops a program with Ctrl-C's
//! SIGINT would then wait for it forever.
//!
//! Each test binary's `main.rs` puts [`default_signal_actions`] in its
//! `.init_array` (the C runtime runs it before main, before the test
//! harness's threads): a static of this library nothing refers to would not
//! be linked into the binary.

/// Sets the default action for every signal the process inherited ignored.
pub extern "C" fn default_signal_actions() {
    for sig in 1..32 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: reads the action of a valid signal number into a zeroed
        // sigaction of ours.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a null new action only reads.
        let read = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
        if read == 0 && old.sa_sigaction == libc::SIG_IGN {
            // SAFETY: sets the default action of a valid signal number,
            // before main, with no other thread yet.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
}
