//! Trigger actions (what a trigger or a signal does) and the words of
//! uftrace's that fctrace refuses with what to use instead: below both
//! the function patterns (which refuse an action where a module belongs)
//! and the trigger specifications.

/// What a trigger or a signal does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start recording.
    TraceOn,
    /// Stop recording (the calls underneath are not recorded either).
    TraceOff,
    /// Record only N levels of calls from this function down (this
    /// function being level 1).
    Depth(u32),
    /// Record the chain of calls that led to this function.
    Backtrace,
    /// Stop tracing for good and let the program run on untraced.
    Finish,
    /// A flight recorder (`record --ring`) writes a snapshot of the
    /// recent history (each thread's, up to this call).
    Snapshot,
}

impl Action {
    /// Parses one action name (`trace_on`, `trace-on`, `trace_off`,
    /// `depth=N`, `backtrace`, `finish`); `None` if it is not one.
    pub fn parse(s: &str) -> Option<Result<Action, String>> {
        Some(Ok(match s {
            // (`trace-on`, `traceon`: uftrace's other spellings.)
            "trace_on" | "trace-on" | "traceon" => Action::TraceOn,
            "trace_off" | "trace-off" | "traceoff" => Action::TraceOff,
            "backtrace" => Action::Backtrace,
            "finish" => Action::Finish,
            "snapshot" => Action::Snapshot,
            _ => {
                let n = s.strip_prefix("depth=")?;
                return Some(match n.parse::<u32>() {
                    Ok(d) if d > 0 => Ok(Action::Depth(d)),
                    _ => Err(format!("`{s}`: the depth must be a number of at least 1")),
                });
            }
        }))
    }
}

impl Action {
    /// The action as `parse` reads it back (`depth=3`).
    pub fn spelling(&self) -> String {
        match self {
            Action::TraceOn => "trace_on".to_string(),
            Action::TraceOff => "trace_off".to_string(),
            Action::Depth(n) => format!("depth={n}"),
            Action::Backtrace => "backtrace".to_string(),
            Action::Finish => "finish".to_string(),
            Action::Snapshot => "snapshot".to_string(),
        }
    }
}

/// Actions of uftrace's triggers that fctrace does not have, with what to
/// use instead (the others, `filter`, `notrace`, `hide`, `trace`,
/// `recover`, `color=`, are read by `crate::uftrace`).
pub(crate) const UFTRACE_ONLY_ACTIONS: &[(&str, &str)] = &[
    ("read", "fctrace does not read counters"),
    (
        "size",
        "-Z SIZE leaves the functions smaller than SIZE bytes unpatched",
    ),
    (
        "callsite",
        "fctrace records no line tables; -T FUNC@backtrace records the callers",
    ),
    ("clear", "fctrace has no run-time control of a recording"),
];

/// uftrace's trigger words that [`crate::uftrace`] reads into other options.
pub(crate) const UFTRACE_OPTION_ACTIONS: &[&str] = &[
    "filter",
    "notrace",
    "hide",
    "recover",
    "color",
    "auto-args",
    "time",
    "trace",
];

/// What `word` is if it is a trigger action (or one of uftrace's): used
/// to refuse it where a module is expected (`-F f@depth=1`), with the
/// reason.
pub fn action_word(word: &str) -> Option<&'static str> {
    let name = word.split_once('=').map_or(word, |(n, _)| n);
    if Action::parse(word).is_some() || name == "depth" {
        return Some("a trigger action");
    }
    if word == "global" {
        return Some("a trigger option");
    }
    (UFTRACE_ONLY_ACTIONS.iter().any(|&(a, _)| a == name)
        || UFTRACE_OPTION_ACTIONS.contains(&name)
        || word.starts_with("if:"))
    .then_some("a trigger action of uftrace")
}
