//! The terminal's colours.
//!
//! Colour is one switch for the command's thread ([`set_colour`], read by
//! the renderings when they start), decided by the command from `--color` and
//! where its output goes. Durations are coloured as
//! uftrace colours them: only the unit, green for milliseconds, yellow for
//! seconds, red from a minute on; shorter durations are never coloured, so
//! the common path of the tree (a duration below a millisecond) is the
//! same with colour on or off. Markers (signals, lost events, unwound,
//! never-returned and unmatched frames) have their own colours.

use std::cell::Cell;

/// Green: a duration of a millisecond or more (its unit).
pub const GREEN: &str = "\x1b[32m";
/// Yellow: a duration of a second or more (its unit); unwound frames.
pub const YELLOW: &str = "\x1b[33m";
/// Bright red: a duration of a minute or more (its unit); lost events,
/// frames never returned from or whose entry was not recorded.
pub const RED: &str = "\x1b[91m";
/// Magenta: a signal.
pub const MAGENTA: &str = "\x1b[35m";
/// Back to the terminal's default.
pub const RESET: &str = "\x1b[0m";

thread_local! {
    static COLOUR: Cell<bool> = const { Cell::new(false) };
}

/// Turns colour on or off for every rendering that starts afterwards on
/// this thread.
pub fn set_colour(on: bool) {
    COLOUR.set(on);
}

/// Whether output is coloured.
#[inline]
pub fn colour() -> bool {
    COLOUR.get()
}

/// `text` in `colour` when colour is on.
pub fn paint(text: &str, colour: &str) -> String {
    if self::colour() {
        format!("{colour}{text}{RESET}")
    } else {
        text.to_string()
    }
}
