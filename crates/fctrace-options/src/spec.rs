//! Filters, triggers, signals, times and thread lists: their syntax (as
//! uftrace's where it has one) and parsing.

use crate::action::UFTRACE_ONLY_ACTIONS;
pub use crate::action::{action_word, Action};
use crate::pattern::FuncPattern;

/// `-T FUNC@[MODULE,]ACTION[,ACTION...][,global]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// As the user wrote it.
    pub source: String,
    pub pattern: FuncPattern,
    pub actions: Vec<Action>,
    /// The actions switch tracing for every thread, not only for the
    /// thread that called the function.
    pub global: bool,
}

impl Trigger {
    pub fn parse(spec: &str) -> Result<Trigger, String> {
        let (func, rest) = spec.split_once('@').ok_or_else(|| {
            format!(
                "trigger `{spec}`: expected FUNC@ACTION[,ACTION...] (actions: trace_on, \
                 trace_off, depth=N, backtrace, finish, snapshot; add `global` to act on every thread)"
            )
        })?;
        let mut module = None;
        let mut actions = Vec::new();
        let mut global = false;
        for (i, item) in rest.split(',').enumerate() {
            let item = item.trim();
            if item == "global" {
                global = true;
                continue;
            }
            let name = item.split_once('=').map_or(item, |(n, _)| n);
            if let Some((_, instead)) = UFTRACE_ONLY_ACTIONS.iter().find(|&&(a, _)| a == name) {
                return Err(format!(
                    "trigger `{spec}`: `{item}` is a uftrace action that fctrace does not have \
                     ({instead}); fctrace's actions: trace_on, trace_off, depth=N, backtrace, \
                     finish, snapshot, global"
                ));
            }
            match Action::parse(item) {
                Some(a) => actions.push(a.map_err(|e| format!("trigger `{spec}`: {e}"))?),
                None if i == 0 && !item.is_empty() => module = Some(item),
                None => {
                    return Err(format!(
                        "trigger `{spec}`: unknown action `{item}` (actions: trace_on, \
                         trace_off, depth=N, backtrace, finish, snapshot, global)"
                    ))
                }
            }
        }
        if actions.is_empty() {
            return Err(match module {
                Some(m) => format!(
                    "trigger `{spec}`: `{m}` is not an action (trace_on, trace_off, depth=N, \
                     backtrace, finish, snapshot; a module, FUNC@MODULE,ACTION, comes before one)"
                ),
                None => format!("trigger `{spec}` has no action"),
            });
        }
        let pattern =
            FuncPattern::with_module(func, module).map_err(|e| format!("trigger `{spec}`: {e}"))?;
        Ok(Trigger {
            source: spec.to_string(),
            pattern,
            actions,
            global,
        })
    }
}

/// `--signal SIG@ACTION[,ACTION...]`: what a signal sent to the program
/// does (to every thread). Only `trace_on`, `trace_off` and `finish`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalTrigger {
    /// As the user wrote it.
    pub source: String,
    pub signal: i32,
    pub actions: Vec<Action>,
}

impl SignalTrigger {
    pub fn parse(spec: &str) -> Result<SignalTrigger, String> {
        let (sig, rest) = spec
            .split_once('@')
            .ok_or_else(|| format!("signal trigger `{spec}`: expected SIGNAL@ACTION"))?;
        let signal = parse_signal(sig).ok_or_else(|| {
            format!("signal trigger `{spec}`: `{sig}` is not a signal name or number")
        })?;
        if matches!(signal, 9 | 19) {
            return Err(format!(
                "signal trigger `{spec}`: SIGKILL and SIGSTOP cannot be caught"
            ));
        }
        let mut actions = Vec::new();
        for item in rest.split(',') {
            match Action::parse(item.trim()) {
                Some(Ok(a @ (Action::TraceOn | Action::TraceOff | Action::Finish))) => {
                    actions.push(a)
                }
                _ => {
                    return Err(format!(
                    "signal trigger `{spec}`: `{item}` is not one of trace_on, trace_off, finish"
                ))
                }
            }
        }
        Ok(SignalTrigger {
            source: spec.to_string(),
            signal,
            actions,
        })
    }
}

/// The names of signals 1 to 31 (Linux numbering), `SIGNALS[n - 1]`.
const SIGNALS: [&str; 31] = [
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

/// `SIGUSR1`, `USR1`, `usr1`, `10`, `SIGRTMIN+2` → the signal number.
pub fn parse_signal(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let up = s.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    if let Some(rest) = name.strip_prefix("RTMIN") {
        // glibc reserves 32 and 33: SIGRTMIN is 34.
        let off = if rest.is_empty() {
            0
        } else {
            rest.strip_prefix('+')?.parse::<i32>().ok()?
        };
        return (off <= 30).then_some(34 + off);
    }
    (1..)
        .zip(SIGNALS)
        .find(|&(_, full)| &full[3..] == name)
        .map(|(n, _)| n)
}

/// The name of standard signal `n` (`SIGUSR1`), if it has one: the one
/// signal-name table of fctrace (the CLI's output uses it too).
pub fn known_signal_name(n: i32) -> Option<&'static str> {
    let i = usize::try_from(n).ok()?.checked_sub(1)?;
    SIGNALS.get(i).copied()
}

/// The name of signal `n` (`SIGUSR1`, `SIGRTMIN+2`), or its number.
pub fn signal_name(n: i32) -> String {
    match known_signal_name(n) {
        Some(name) => name.to_string(),
        None if (34..=64).contains(&n) => format!("SIGRTMIN+{}", n - 34),
        None => n.to_string(),
    }
}

/// `500ns`, `10us`, `2ms`, `1.5s`, `1m`, or a bare number of nanoseconds.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: f64 = match unit {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        _ => {
            return Err(format!(
                "`{s}`: unknown time unit `{unit}` (use ns, us, ms, s or m)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a time such as 500ns, 10us or 2ms"))?;
    Ok((v * scale).round() as u64)
}

/// `1234,1240` → the thread ids.
pub fn parse_tids(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{p}` is not a thread id"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers() {
        let t = Trigger::parse("foo@trace_on").unwrap();
        assert_eq!(t.actions, vec![Action::TraceOn]);
        assert!(!t.global);
        assert!(t.pattern.matches_name("foo"));
        let t = Trigger::parse("foo@libx,depth=2,backtrace,global").unwrap();
        assert_eq!(t.actions, vec![Action::Depth(2), Action::Backtrace]);
        assert!(t.global);
        assert_eq!(t.pattern.module(), Some("libx"));
        assert!(Trigger::parse("foo").is_err());
        assert!(Trigger::parse("foo@").is_err());
        assert!(Trigger::parse("foo@bogus")
            .unwrap_err()
            .contains("`bogus` is not an action"));
        assert!(Trigger::parse("foo@depth=0").is_err());
        assert!(Trigger::parse("foo@trace_on,bogus").is_err());
        assert!(Trigger::parse("@trace_on").is_err());
        for bad in ["foo@read=pmu-cycle", "foo@callsite"] {
            let e = Trigger::parse(bad).unwrap_err();
            assert!(
                e.contains("uftrace action that fctrace does not have"),
                "{bad}: {e}"
            );
        }
        assert_eq!(action_word("depth=1"), Some("a trigger action"));
        assert_eq!(action_word("depth=x"), Some("a trigger action"));
        assert_eq!(action_word("notrace"), Some("a trigger action of uftrace"));
        assert_eq!(action_word("libc"), None);
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("SIGUSR1"), Some(10));
        assert_eq!(parse_signal("usr2"), Some(12));
        assert_eq!(parse_signal("15"), Some(15));
        assert_eq!(parse_signal("SIGRTMIN+2"), Some(36));
        assert_eq!(parse_signal("SIGNOPE"), None);
        assert_eq!(parse_signal("0"), None);
        assert_eq!(signal_name(10), "SIGUSR1");
        assert_eq!(signal_name(36), "SIGRTMIN+2");
        assert_eq!(known_signal_name(31), Some("SIGSYS"));
        assert_eq!(known_signal_name(0), None);
        assert_eq!(known_signal_name(32), None);
        let s = SignalTrigger::parse("SIGUSR1@trace_on").unwrap();
        assert_eq!((s.signal, s.actions), (10, vec![Action::TraceOn]));
        assert!(SignalTrigger::parse("SIGKILL@trace_on").is_err());
        assert!(SignalTrigger::parse("USR1@depth=3").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("500ns"), Ok(500));
        assert_eq!(parse_time("500"), Ok(500));
        assert_eq!(parse_time("10us"), Ok(10_000));
        assert_eq!(parse_time("2ms"), Ok(2_000_000));
        assert_eq!(parse_time("1.5s"), Ok(1_500_000_000));
        assert!(parse_time("2 parsecs").is_err());
        assert!(parse_time("ms").is_err());
        assert_eq!(parse_tids("1, 2,3"), Ok(vec![1, 2, 3]));
        assert!(parse_tids("1,x").is_err());
    }
}
