//! The tracing options that both the CLI and the in-process agent
//! understand: which functions to show or hide (`-F`, `-N`, `-D`, `-C`,
//! `-t`, `--tid`), triggers (`-T`, `--disable`, `--signal`) and argument
//! specs (`-A`, `-R`, `-a`). The syntax is uftrace's where it has one.
//!
//! The CLI parses the user's options into [`Options`] (reporting errors
//! before anything runs), and hands them to the agent as text
//! ([`Options::to_wire`]); the agent parses them back with the same code
//! ([`Options::from_wire`]).

#![forbid(unsafe_code)]

pub mod action;
pub mod args;
pub mod display;
pub mod pattern;
pub mod spec;
pub mod uftrace;

pub use args::{ArgSpec, Format, Item, Source};
pub use display::{Demangle, TimePoint, TimeRange};
pub use pattern::{loc_shown, FuncPattern, LocFilter};
pub use spec::{
    known_signal_name, parse_signal, parse_tids, parse_time, signal_name, Action, SignalTrigger,
    Trigger,
};

/// Default cut of strings read through pointers, in bytes.
pub const DEFAULT_STRING_MAX: u32 = 64;

/// Every filter, trigger and argument option.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// `-F`: only these functions and what they call.
    pub filters: Vec<FuncPattern>,
    /// `-N`: not these functions nor what they call.
    pub notrace: Vec<FuncPattern>,
    /// `-C`: these functions with the chain of callers that led to them.
    pub callers: Vec<FuncPattern>,
    /// `--caller-tree`: `-C` shows what the functions call too (by
    /// default they are leaves, as uftrace shows them); display only, kept
    /// with the recording's `-C`.
    pub caller_tree: bool,
    /// `-D`: only this many levels of calls.
    pub depth: Option<u32>,
    /// `-t`: hide calls shorter than this (ns).
    pub time_filter: Option<u64>,
    /// `--tid`: only these threads.
    pub tids: Vec<u32>,
    /// `-T`.
    pub triggers: Vec<Trigger>,
    /// `-H`, `-T FUNC@hide`: these functions hidden, the calls they make
    /// shown in their place (display only: the agent records them).
    pub hide: Vec<FuncPattern>,
    /// `-P`/`-U`, in order: which functions the agent patches at all.
    pub patch: Vec<uftrace::PatchRule>,
    /// `-Z SIZE`: functions smaller than SIZE bytes are not patched.
    pub size_filter: Option<u64>,
    /// `-E PROVIDER:NAME`: the SDT probes recorded as events, matched on
    /// `provider:name` as function patterns are on names.
    pub events: Vec<FuncPattern>,
    /// uftrace's `-T FUNC@time=T` (`Some(T)`: while FUNC runs, itself
    /// included, the time filter is T) and `-T FUNC@trace` (`None`:
    /// FUNC's calls are shown whatever the time filter): display only.
    pub time_actions: Vec<(FuncPattern, Option<u64>)>,
    /// `FUNC@if:argN==V` on `-F`, `-N`, `-T`: conditions on arguments.
    pub conds: Vec<uftrace::Cond>,
    /// `--disable`: start with tracing off.
    pub disabled: bool,
    /// `--signal`.
    pub signals: Vec<SignalTrigger>,
    /// `-A` and `-R`.
    pub args: Vec<ArgSpec>,
    /// `-a`: arguments and return values from debug information and the
    /// built-in prototypes.
    pub auto_args: bool,
    /// Longest string shown, in bytes.
    pub string_max: u32,
    /// Display only (not sent to the agent, see [`display`]):
    /// `--show-runtime`: show the C runtime's calls around `main`.
    pub show_runtime: bool,
    /// `--no-libcall`: hide the calls into shared libraries.
    pub no_libcall: bool,
    /// `-r START~STOP`.
    pub time_range: Option<TimeRange>,
    /// `--demangle`.
    pub demangle: Demangle,
    /// `--srcline`: each function's source file and line (display only).
    pub srcline: bool,
    /// `--libname`: each function's name with its module's
    /// (`name@libfoo.so`; display only).
    pub libname: bool,
    /// `-L LOC`: only the functions whose source file matches one of these
    /// regular expressions are shown, the calls they make in place of the
    /// others (display only; `!LOC` leaves out the ones matching).
    pub loc_filters: Vec<String>,
}

impl Options {
    /// No filter, trigger or argument at all: everything is recorded
    /// (the display-only options do not count).
    pub fn is_empty(&self) -> bool {
        let d = Options {
            string_max: self.string_max,
            caller_tree: self.caller_tree,
            show_runtime: self.show_runtime,
            no_libcall: self.no_libcall,
            time_range: self.time_range,
            demangle: self.demangle,
            srcline: self.srcline,
            libname: self.libname,
            loc_filters: self.loc_filters.clone(),
            ..Options::default()
        };
        *self == d
    }

    /// Whether the agent has anything to do beyond recording every call.
    pub fn affects_recording(&self) -> bool {
        !self.filters.is_empty()
            || !self.notrace.is_empty()
            || self.depth.is_some()
            || !self.triggers.is_empty()
            || self.disabled
            || !self.signals.is_empty()
            || !self.args.is_empty()
            || self.auto_args
            || !self.conds.is_empty()
            || !self.events.is_empty()
    }

    /// The options as lines of text, one option per line, for the agent.
    pub fn to_wire(&self) -> String {
        let mut w = String::new();
        let mut line = |k: &str, v: &str| {
            w.push_str(k);
            w.push(' ');
            w.push_str(v);
            w.push('\n');
        };
        for p in &self.filters {
            line("F", p.as_str());
        }
        for p in &self.notrace {
            line("N", p.as_str());
        }
        for p in &self.callers {
            line("C", p.as_str());
        }
        if self.caller_tree {
            line("caller-tree", "1");
        }
        if let Some(d) = self.depth {
            line("D", &d.to_string());
        }
        if let Some(t) = self.time_filter {
            line("t", &t.to_string());
        }
        for t in &self.tids {
            line("tid", &t.to_string());
        }
        for t in &self.triggers {
            line("T", &t.source);
        }
        for p in &self.hide {
            line("H", p.as_str());
        }
        for r in &self.patch {
            line(if r.patch { "P" } else { "U" }, r.pattern.as_str());
        }
        if let Some(z) = self.size_filter {
            line("Z", &z.to_string());
        }
        for e in &self.events {
            line("E", e.as_str());
        }
        for (p, t) in &self.time_actions {
            let t = t.map_or("trace".to_string(), |t| t.to_string());
            line("TT", &format!("{t} {}", p.as_str()));
        }
        for c in &self.conds {
            line("I", &format!("{} {}", c.expr(), c.pattern.as_str()));
        }
        if self.disabled {
            line("disable", "1");
        }
        for s in &self.signals {
            line("signal", &s.source);
        }
        for a in &self.args {
            line("A", &a.source);
        }
        if self.auto_args {
            line("auto-args", "1");
        }
        line("string-max", &self.string_max.to_string());
        w
    }

    /// Parses what [`to_wire`](Self::to_wire) wrote.
    pub fn from_wire(text: &str) -> Result<Options, String> {
        let mut o = Options {
            string_max: DEFAULT_STRING_MAX,
            ..Options::default()
        };
        for l in text.lines().filter(|l| !l.is_empty()) {
            let (k, v) = l
                .split_once(' ')
                .ok_or_else(|| format!("bad option line `{l}`"))?;
            match k {
                "F" => o.filters.push(FuncPattern::parse(v)?),
                "N" => o.notrace.push(FuncPattern::parse(v)?),
                "C" => o.callers.push(FuncPattern::parse(v)?),
                "caller-tree" => o.caller_tree = true,
                "D" => o.depth = Some(v.parse().map_err(|_| format!("bad depth `{v}`"))?),
                "t" => o.time_filter = Some(v.parse().map_err(|_| format!("bad time `{v}`"))?),
                "tid" => o
                    .tids
                    .push(v.parse().map_err(|_| format!("bad tid `{v}`"))?),
                "T" => o.triggers.push(Trigger::parse(v)?),
                "H" => o.hide.push(FuncPattern::parse(v)?),
                "P" | "U" => o.patch.push(uftrace::PatchRule {
                    patch: k == "P",
                    pattern: FuncPattern::parse(v)?,
                }),
                "TT" => {
                    let (t, pat) = v
                        .split_once(' ')
                        .ok_or_else(|| format!("bad time action `{v}`"))?;
                    let t = match t {
                        "trace" => None,
                        t => Some(t.parse().map_err(|_| format!("bad time `{t}`"))?),
                    };
                    o.time_actions.push((FuncPattern::parse(pat)?, t));
                }
                "I" => {
                    let (expr, pat) = v
                        .split_once(' ')
                        .ok_or_else(|| format!("bad condition `{v}`"))?;
                    let (arg, op, value) = uftrace::parse_cond(expr)?;
                    o.conds.push(uftrace::Cond {
                        pattern: FuncPattern::parse(pat)?,
                        arg,
                        op,
                        value,
                    });
                }
                "Z" => o.size_filter = Some(v.parse().map_err(|_| format!("bad size `{v}`"))?),
                "E" => o.events.push(FuncPattern::parse(v)?),
                "disable" => o.disabled = true,
                "signal" => o.signals.push(SignalTrigger::parse(v)?),
                "A" => o.args.push(ArgSpec::parse(v)?),
                "auto-args" => o.auto_args = true,
                "string-max" => {
                    o.string_max = v.parse().map_err(|_| format!("bad string length `{v}`"))?
                }
                _ => return Err(format!("unknown option line `{l}`")),
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip() {
        let o = Options {
            filters: vec![FuncPattern::parse("main").unwrap()],
            notrace: vec![FuncPattern::parse("^std::").unwrap()],
            callers: vec![FuncPattern::parse("free@libc").unwrap()],
            caller_tree: true,
            depth: Some(3),
            time_filter: Some(1500),
            tids: vec![10, 11],
            triggers: vec![Trigger::parse("foo@depth=2,backtrace,global").unwrap()],
            hide: vec![FuncPattern::parse("^std::").unwrap()],
            patch: vec![
                uftrace::PatchRule {
                    patch: true,
                    pattern: FuncPattern::parse(".").unwrap(),
                },
                uftrace::PatchRule {
                    patch: false,
                    pattern: FuncPattern::parse("a").unwrap(),
                },
            ],
            size_filter: Some(100),
            time_actions: vec![
                (FuncPattern::parse("a").unwrap(), Some(1000)),
                (FuncPattern::parse("^b").unwrap(), None),
            ],
            conds: vec![uftrace::Cond {
                pattern: FuncPattern::parse("main@app").unwrap(),
                arg: 1,
                op: uftrace::CondOp::Ne,
                value: -3,
            }],
            disabled: true,
            signals: vec![SignalTrigger::parse("SIGUSR1@trace_on").unwrap()],
            args: vec![
                ArgSpec::parse("add@arg1,arg2/x").unwrap(),
                ArgSpec::parse("add@retval").unwrap(),
            ],
            auto_args: true,
            string_max: 80,
            ..Options::default()
        };
        assert!(!o.is_empty());
        assert!(o.affects_recording());
        assert_eq!(Options::from_wire(&o.to_wire()), Ok(o));
        let empty = Options {
            string_max: DEFAULT_STRING_MAX,
            ..Options::default()
        };
        assert!(empty.is_empty());
        assert!(!empty.affects_recording());
        assert_eq!(Options::from_wire(&empty.to_wire()), Ok(empty));
        assert!(Options::from_wire("X 1").is_err());
    }
}
