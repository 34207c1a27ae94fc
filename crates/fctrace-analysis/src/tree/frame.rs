//! An open call of the tree ([`Frame`]), the texts of the calls whose
//! entries were not recorded, and of a signal the kernel sent.

use crate::names::TreeName;
use fctrace_options::known_signal_name as signal_name;
use std::rc::Rc;

#[derive(Clone)]
pub(super) struct Frame {
    /// The function id, widened: a frame without padding bytes is stored
    /// whole (a 4-byte id and padding made a slow partial copy).
    pub(super) func: u64,
    pub(super) name: Rc<TreeName>,
    /// [`NOT_RECORDED`] for a call open when fctrace attached,
    /// [`NOT_IN_HISTORY`] for one open where a flight recorder's history
    /// begins.
    pub(super) entry_ns: u64,
}

/// The `i`-th 64-bit word of a kernel event's payload (0 if it is short).
/// A signal the kernel delivered, as strace prints it: `--- SIGUSR1
/// {si_signo=SIGUSR1, si_code=SI_TKILL} ---`, and the action when it is
/// not a handler (`/* default action: terminate */`, `/* ignored */`).
pub(super) fn kernel_signal_text(sig: u32, bytes: &[u8]) -> String {
    let sig = i32::try_from(sig).unwrap_or(i32::MAX);
    let number = sig.to_string();
    let name = signal_name(sig).unwrap_or(&number);
    let code = payload_word(bytes, 0) as i64 as i32;
    let errno = payload_word(bytes, 1) as i64 as i32;
    let handler = payload_word(bytes, 2);
    let mut text = format!(
        "--- {name} {{si_signo={name}, si_code={}",
        crate::syscalls::si_code_name(sig, code)
    );
    if errno != 0 {
        text.push_str(&format!(
            ", si_errno={}",
            crate::syscalls::errno_name(errno)
        ));
    }
    text.push_str("} ---");
    match handler {
        0 => {
            text.push_str(" /* default action: ");
            text.push_str(crate::syscalls::default_action(sig));
            text.push_str(" */");
        }
        1 => text.push_str(" /* ignored */"),
        _ => {}
    }
    text
}

pub(super) fn payload_word(b: &[u8], i: usize) -> u64 {
    b.get(8 * i..8 * i + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap()))
}

/// `Frame::entry_ns` of a call whose entry was not recorded: open when
/// fctrace attached (an attach chain, `fctrace_format::argval`).
pub(super) const NOT_RECORDED: u64 = u64::MAX;

/// `Frame::entry_ns` of a call open where the kept history of a flight
/// recorder's snapshot begins (a history chain: its entry was dropped).
pub(super) const NOT_IN_HISTORY: u64 = u64::MAX - 1;

/// `Frame::entry_ns` of a call open where tracing resumed for the thread
/// (a `trace_on` trigger), entered while it was off: its entry was not
/// recorded; its return is an end mark (`fctrace_format::argval`).
pub(super) const ENTERED_OFF: u64 = u64::MAX - 2;

/// The opening line of a call open when fctrace attached: `main() {
/// /* entered before the trace began */`.
pub(super) const ENTERED_BEFORE: &str = " { /* entered before the trace began */";

/// The opening line of a call open where tracing resumed, entered while
/// it was off: `main() { /* entered while tracing was off */`.
pub(super) const ENTERED_WHILE_OFF: &str = " { /* entered while tracing was off */";

impl Frame {
    /// A call of a chain (attach, history, or where tracing resumed): no
    /// entry recorded, no duration.
    pub(super) fn without_entry(&self) -> bool {
        self.entry_ns >= ENTERED_OFF
    }
}
