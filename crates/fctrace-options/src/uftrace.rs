//! uftrace's spellings that fctrace reads into its own options: trigger
//! actions that are filters (`-T FUNC@filter,depth=3`, `notrace`, `hide`,
//! `recover`, `color=`), actions after a filter's function
//! (`-F FUNC@depth=1`), `-P`/`-U` (which functions are patched at all),
//! and `--match glob`.

use crate::action::{action_word, Action, UFTRACE_OPTION_ACTIONS};
use crate::pattern::FuncPattern;
use crate::spec::Trigger;

/// What one `FUNC@[MODULE,]ACTION,...` of uftrace's asks for, split
/// between the agent's trigger (its `trace_on`, `depth=N`, ... actions)
/// and the filters it stands for.
#[derive(Debug)]
pub struct Expanded {
    /// FUNC (with its MODULE).
    pub pattern: FuncPattern,
    /// The trigger of the actions that are triggers, if any.
    pub trigger: Option<Trigger>,
    /// `filter`: as `-F FUNC`.
    pub filter: bool,
    /// `notrace`: as `-N FUNC`.
    pub notrace: bool,
    /// `hide`: as `-H FUNC` (the function hidden, its calls shown).
    pub hide: bool,
    /// `auto-args`: the function's arguments and return value, typed from
    /// the debug information (as `-A FUNC -R FUNC`).
    pub auto_args: bool,
    /// `if:argN OP VALUE`: the function's filters and triggers act only
    /// on the calls where the condition holds.
    pub cond: Option<(u8, CondOp, i64)>,
    /// `time=T`: the time filter while the function runs (display).
    pub time: Option<u64>,
    /// `trace`: the function's calls shown whatever the time filter.
    pub trace: bool,
    /// `color=NAME`: uftrace colours the function in its replay; fctrace
    /// does not (the caller says so).
    pub color: Option<String>,
}

/// The colours uftrace's `color=` takes.
const COLORS: &[&str] = &[
    "red", "green", "blue", "yellow", "magenta", "cyan", "bold", "gray",
];

/// Reads a trigger as uftrace writes it (`-T`, or what follows the `@`
/// of `-F`/`-N` when it holds an action).
pub fn expand(spec: &str) -> Result<Expanded, String> {
    let Some((func, rest)) = spec.split_once('@') else {
        // (Trigger::parse says what is expected.)
        return Err(Trigger::parse(spec).err().unwrap_or_default());
    };
    let mut e = Expanded {
        pattern: FuncPattern::with_module(func, None)
            .map_err(|err| format!("trigger `{spec}`: {err}"))?,
        trigger: None,
        filter: false,
        notrace: false,
        hide: false,
        auto_args: false,
        cond: None,
        time: None,
        trace: false,
        color: None,
    };
    let mut kept: Vec<&str> = Vec::new();
    for item in rest.split(',').map(str::trim) {
        let name = item.split_once('=').map_or(item, |(n, _)| n);
        match name {
            "filter" => e.filter = true,
            "notrace" => e.notrace = true,
            "hide" => e.hide = true,
            "auto-args" => e.auto_args = true,
            "trace" => e.trace = true,
            "time" => {
                let t = item.split_once('=').map_or("", |(_, t)| t);
                e.time = Some(
                    crate::spec::parse_time(t)
                        .map_err(|err| format!("trigger `{spec}`: `{item}`: {err}"))?,
                );
            }
            // uftrace's own words: fctrace puts return addresses back
            // itself wherever the program reads them.
            "recover" => {}
            "color" => {
                let c = item.split_once('=').map_or("", |(_, c)| c);
                if !COLORS.contains(&c) {
                    return Err(format!(
                        "trigger `{spec}`: `{item}`: the colours are {}",
                        COLORS.join(", ")
                    ));
                }
                e.color = Some(c.to_string());
            }
            _ if item.starts_with("if:") => {
                let expr = &item[3..];
                e.cond = Some(
                    parse_cond(expr).map_err(|err| format!("trigger `{spec}`: `{item}`: {err}"))?,
                );
            }
            _ => kept.push(item),
        }
    }
    let uses_words = e.filter
        || e.cond.is_some()
        || e.time.is_some()
        || e.trace
        || e.notrace
        || e.hide
        || e.auto_args
        || e.color.is_some()
        || kept.len() < count(rest);
    let is_action = |k: &str| Action::parse(k).is_some() || action_word(k).is_some();
    let has_action = kept.iter().any(|k| *k != "global" && is_action(k));
    if has_action || !uses_words {
        let kept = kept.join(",");
        let t = Trigger::parse(&format!("{func}@{kept}"))
            .map_err(|err| err.replace(&format!("`{func}@{kept}`"), &format!("`{spec}`")))?;
        e.pattern = t.pattern.clone();
        e.trigger = Some(t);
        return Ok(e);
    }
    // Only filter words: a module may come first.
    let first = rest.split(',').next().unwrap_or("").trim();
    let module = kept
        .first()
        .copied()
        .filter(|k| *k == first && *k != "global");
    if let Some(bad) = kept.iter().find(|k| **k != "global" && Some(**k) != module) {
        return Err(format!("trigger `{spec}`: unknown action `{bad}`"));
    }
    e.pattern =
        FuncPattern::with_module(func, module).map_err(|err| format!("trigger `{spec}`: {err}"))?;
    Ok(e)
}

/// A comparison of uftrace's conditions (`if:arg1==0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondOp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `&`: some bit in common.
    And,
}

/// The operators, longest first (as they are looked for).
const COND_OPS: [(&str, CondOp); 7] = [
    ("==", CondOp::Eq),
    ("!=", CondOp::Ne),
    (">=", CondOp::Ge),
    ("<=", CondOp::Le),
    (">", CondOp::Gt),
    ("<", CondOp::Lt),
    ("&", CondOp::And),
];

/// A condition on an integer argument: the functions `pattern` names
/// have their filters and triggers act only on the calls where argument
/// `arg` (1-based: rdi, rsi, rdx, rcx, r8, r9, then the stack), as a
/// signed 64-bit integer, compares with `value` as `op` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub pattern: FuncPattern,
    pub arg: u8,
    pub op: CondOp,
    pub value: i64,
}

impl Cond {
    /// `arg1==0` as written.
    pub fn expr(&self) -> String {
        let op = COND_OPS
            .iter()
            .find(|(_, o)| *o == self.op)
            .map_or("==", |(s, _)| s);
        format!("arg{}{op}{}", self.arg, self.value)
    }

    /// Whether the condition holds for an argument of bits `v`.
    pub fn holds(&self, v: u64) -> bool {
        let x = v as i64;
        match self.op {
            CondOp::Eq => x == self.value,
            CondOp::Ne => x != self.value,
            CondOp::Gt => x > self.value,
            CondOp::Ge => x >= self.value,
            CondOp::Lt => x < self.value,
            CondOp::Le => x <= self.value,
            CondOp::And => x & self.value != 0,
        }
    }
}

/// `argN OP VALUE` (VALUE decimal, or hex with 0x, maybe negative).
pub fn parse_cond(expr: &str) -> Result<(u8, CondOp, i64), String> {
    let syntax =
        || "expected argN==VALUE (operators ==, !=, >, >=, <, <=, &), e.g. if:arg1==0".to_string();
    let rest = expr.trim().strip_prefix("arg").ok_or_else(syntax)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let arg: u8 = rest[..digits].parse().map_err(|_| syntax())?;
    if arg == 0 || arg > crate::args::MAX_INT_ARG {
        return Err(format!(
            "arguments are arg1 to arg{}",
            crate::args::MAX_INT_ARG
        ));
    }
    let rest = &rest[digits..];
    let (op_text, op) = COND_OPS
        .iter()
        .find(|(t, _)| rest.starts_with(t))
        .copied()
        .ok_or_else(syntax)?;
    let v = rest[op_text.len()..].trim();
    let (neg, v) = match v.strip_prefix('-') {
        Some(v) => (true, v),
        None => (false, v),
    };
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).map(|n| n as i64),
        None => v.parse::<i64>(),
    }
    .map_err(|_| format!("`{v}` is not a number"))?;
    Ok((arg, op, if neg { n.wrapping_neg() } else { n }))
}

/// Items in `rest`.
fn count(rest: &str) -> usize {
    rest.split(',').count()
}

/// Whether `spec` (of `-F`, `-N`, `-H`) carries trigger actions after its
/// `@` (`a@depth=1`, `a@libx,depth=1`), not only a module.
pub fn has_actions(spec: &str) -> bool {
    spec.split_once('@').is_some_and(|(_, rest)| {
        rest.split(',').any(|i| {
            let i = i.trim();
            let name = i.split_once('=').map_or(i, |(n, _)| n);
            Action::parse(i).is_some()
                || action_word(i).is_some()
                || UFTRACE_OPTION_ACTIONS.contains(&name)
        })
    })
}

/// `-P FUNC` (true) or `-U FUNC` (false), in the order given: a function
/// is patched when the last rule that matches it is a `-P`; without any
/// `-P`, every function not matched by a `-U` is.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchRule {
    pub patch: bool,
    pub pattern: FuncPattern,
}

/// Whether the function with name forms `names` in `module` is patched
/// under `rules`.
pub fn patched<'a>(
    rules: &[PatchRule],
    module: &str,
    names: impl IntoIterator<Item = &'a str> + Clone,
) -> bool {
    let mut verdict = !rules.iter().any(|r| r.patch);
    for r in rules {
        if r.pattern.matches(module, names.clone()) {
            verdict = r.patch;
        }
    }
    verdict
}

/// `--match glob`: the function part of `spec` (up to its `@`) turned from
/// a glob (`*`, `?`, `[...]`, anchored at both ends) into the regular
/// expression fctrace reads; a name without glob characters stays a name.
pub fn glob_spec(spec: &str) -> String {
    let (func, rest) = match spec.split_once('@') {
        Some((f, r)) => (f, Some(r)),
        None => (spec, None),
    };
    let func = if func.contains(['*', '?', '[']) || func.contains(REGEXY) {
        let mut re = String::from("^");
        let mut in_class = false;
        for c in func.chars() {
            match c {
                '[' if !in_class => {
                    in_class = true;
                    re.push('[');
                }
                ']' if in_class => {
                    in_class = false;
                    re.push(']');
                }
                _ if in_class => re.push(c),
                '*' => re.push_str(".*"),
                '?' => re.push('.'),
                c if REGEXY.contains(&c) => {
                    re.push('\\');
                    re.push(c);
                }
                c => re.push(c),
            }
        }
        re.push('$');
        re
    } else {
        func.to_string()
    };
    match rest {
        Some(r) => format!("{func}@{r}"),
        None => func,
    }
}

/// Characters that are plain in a glob but special in a regular
/// expression.
const REGEXY: &[char] = &['.', '^', '$', '+', '(', ')', '{', '}', '|', '\\'];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_depth() {
        let e = expand("main@filter,depth=3").unwrap();
        assert!(e.filter && !e.notrace && !e.hide);
        assert_eq!(e.trigger.unwrap().actions, vec![Action::Depth(3)]);
        let e = expand("b@notrace").unwrap();
        assert!(e.notrace && e.trigger.is_none());
        assert!(e.pattern.matches_name("b"));
        let e = expand("b@libx,hide").unwrap();
        assert!(e.hide);
        assert_eq!(e.pattern.module(), Some("libx"));
        let e = expand("a@depth=1").unwrap();
        assert_eq!(e.trigger.unwrap().actions, vec![Action::Depth(1)]);
        let e = expand("a@trace-on,recover,color=red").unwrap();
        assert_eq!(e.color.as_deref(), Some("red"));
        assert_eq!(e.trigger.unwrap().actions, vec![Action::TraceOn]);
        assert!(expand("a@color=pink").is_err());
        let e = expand("main@filter,if:arg1==1").unwrap();
        assert!(e.filter && e.trigger.is_none());
        assert_eq!(e.cond, Some((1, CondOp::Eq, 1)));
        let e = expand("f@if:arg2>=-0x10,depth=1").unwrap();
        assert_eq!(e.cond, Some((2, CondOp::Ge, -16)));
        assert_eq!(e.trigger.unwrap().actions, vec![Action::Depth(1)]);
        assert!(expand("a@if:arg0==1,filter").is_err());
        assert!(expand("a@if:x==1,filter").is_err());
        assert!(expand("a@if:arg1~1,filter").is_err());
        assert!(expand("a@if:arg1==z,filter").is_err());
        let c = Cond {
            pattern: FuncPattern::parse("a").unwrap(),
            arg: 1,
            op: CondOp::And,
            value: 6,
        };
        assert!(c.holds(2) && !c.holds(1));
        assert_eq!(c.expr(), "arg1&6");
        assert_eq!(parse_cond(&c.expr()), Ok((1, CondOp::And, 6)));
        assert!(expand("a@filter,bogus").is_err());
        assert!(expand("a@libx,filter,bogus").is_err());
        assert!(expand("a@bogus").unwrap_err().contains("not an action"));
        let e = expand("a@time=1us,trace").unwrap();
        assert_eq!((e.time, e.trace), (Some(1000), true));
        assert!(e.trigger.is_none());
        assert!(expand("a@time=1parsec").is_err());
        assert!(expand("a@read=pmu-cycle")
            .unwrap_err()
            .contains("fctrace does not have"));
        assert!(has_actions("a@depth=1"));
        assert!(has_actions("a@libx,filter"));
        assert!(!has_actions("a@libx"));
        assert!(!has_actions("a"));
    }

    #[test]
    fn patch_rules() {
        let r = |p: bool, s: &str| PatchRule {
            patch: p,
            pattern: FuncPattern::parse(s).unwrap(),
        };
        assert!(patched(&[], "/x", ["a"]));
        assert!(patched(&[r(true, "a")], "/x", ["a"]));
        assert!(!patched(&[r(true, "a")], "/x", ["b"]));
        assert!(!patched(&[r(false, "a")], "/x", ["a"]));
        assert!(patched(&[r(false, "a")], "/x", ["b"]));
        assert!(!patched(&[r(true, "."), r(false, "a")], "/x", ["a"]));
        assert!(patched(&[r(false, "a"), r(true, ".")], "/x", ["a"]));
    }

    #[test]
    fn globs() {
        assert_eq!(glob_spec("main"), "main");
        assert_eq!(glob_spec("foo*"), "^foo.*$");
        assert_eq!(glob_spec("f?o@libx"), "^f.o$@libx");
        assert_eq!(glob_spec("a.part*"), "^a\\.part.*$");
        assert_eq!(glob_spec("[ab]x"), "^[ab]x$");
        let p = FuncPattern::parse(&glob_spec("ma*")).unwrap();
        assert!(p.matches_name("main") && !p.matches_name("xmain"));
    }
}
