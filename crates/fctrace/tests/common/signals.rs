//! Every test binary starts with the default action for each signal,
//! whatever it inherited: run as a background job (`cmd &` in a script,
//! `nohup`, some CI runners) it would inherit SIGINT and SIGQUIT ignored
//! (SIGHUP with nohup), and so would the programs the tests start, natively
//! and under fctrace alike: a test that stops a program with Ctrl-C's
//! SIGINT would then wait for it forever.

extern "C" fn default_signal_actions() {
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

/// Run by the C runtime before main (the test harness's threads).
#[used]
#[link_section = ".init_array"]
static DEFAULT_SIGNAL_ACTIONS: extern "C" fn() = default_signal_actions;
