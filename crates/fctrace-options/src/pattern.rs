//! Function patterns: `FUNC` or `FUNC@MODULE`, where FUNC is a name, a
//! module and an address (`git+0x4a3f0`: the function at that ELF address
//! of the module whose file name is `git`, named or not), or a regular
//! expression when it contains a regular-expression character (as in
//! uftrace: the expression may match anywhere in the name, so `^ns::`
//! matches every function of namespace `ns`).

use regex::Regex;
use std::fmt;

/// Characters that make a pattern a regular expression.
const REGEX_CHARS: &[char] = &[
    '.', '^', '$', '*', '+', '?', '(', ')', '[', ']', '{', '}', '|', '\\',
];

/// A pattern naming functions, optionally limited to one module.
#[derive(Clone)]
pub struct FuncPattern {
    /// As the user wrote it (with its `@MODULE`).
    text: String,
    matcher: Matcher,
    module: Option<String>,
}

#[derive(Clone)]
enum Matcher {
    Exact(String),
    Regex(Regex),
    /// A module's file name and an address in it.
    At(String, u64),
}

/// A module-and-address name (`git+0x4a3f0`, `libc.so.6+0x1f`) split into
/// the module's file name and the address; `None` for any other name
/// (the shape fctrace-format's `split_module_offset` reads).
fn split_at(name: &str) -> Option<(&str, u64)> {
    let (module, hex) = name.rsplit_once("+0x")?;
    if module.is_empty() || hex.is_empty() || hex.len() > 16 {
        return None;
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((module, u64::from_str_radix(hex, 16).ok()?))
}

impl fmt::Debug for FuncPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FuncPattern({:?})", self.text)
    }
}

impl PartialEq for FuncPattern {
    fn eq(&self, other: &FuncPattern) -> bool {
        self.text == other.text
    }
}

impl FuncPattern {
    /// Parses `FUNC` or `FUNC@MODULE`.
    pub fn parse(text: &str) -> Result<FuncPattern, String> {
        let (func, module) = match text.rsplit_once('@') {
            Some((f, m)) => (f, Some(m)),
            None => (text, None),
        };
        if let Some(m) = module {
            if m.is_empty() {
                return Err(format!("`{text}`: the module after `@` is empty"));
            }
            if let Some(what) = crate::action::action_word(m) {
                return Err(format!(
                    "`{text}`: `{m}` is {what}, not a module (FUNC@MODULE limits FUNC to one \
                     library or the executable); for an action when {func} is called use \
                     -T '{func}@{m}'"
                ));
            }
        }
        FuncPattern::with_module(func, module).map(|mut p| {
            p.text = text.to_string();
            p
        })
    }

    /// A pattern for FUNC, limited to MODULE if given.
    pub fn with_module(func: &str, module: Option<&str>) -> Result<FuncPattern, String> {
        if func.is_empty() {
            return Err("an empty function name".to_string());
        }
        let matcher = if let Some((file, addr)) = split_at(func) {
            Matcher::At(file.to_string(), addr)
        } else if func.contains(REGEX_CHARS) {
            Matcher::Regex(
                Regex::new(func)
                    .map_err(|e| format!("`{func}` is not a valid regular expression: {e}"))?,
            )
        } else {
            Matcher::Exact(func.to_string())
        };
        let text = match module {
            Some(m) => format!("{func}@{m}"),
            None => func.to_string(),
        };
        Ok(FuncPattern {
            text,
            matcher,
            module: module.map(str::to_string),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it is a regular expression (else an exact name).
    pub fn is_regex(&self) -> bool {
        matches!(self.matcher, Matcher::Regex(_))
    }

    /// The module it is limited to, if any.
    pub fn module(&self) -> Option<&str> {
        self.module.as_deref()
    }

    /// Whether a function called `name` matches (its module aside).
    /// Give it every form of the name you have (symbol, demangled, the
    /// demangled name without its parameter list) through
    /// [`matches_names`](Self::matches_names).
    pub fn matches_name(&self, name: &str) -> bool {
        match &self.matcher {
            Matcher::Exact(n) => n == name,
            Matcher::Regex(r) => r.is_match(name),
            Matcher::At(file, addr) => split_at(name) == Some((file.as_str(), *addr)),
        }
    }

    /// Whether any of the names matches.
    pub fn matches_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        names.into_iter().any(|n| self.matches_name(n))
    }

    /// Whether a function of the module at `path` can match: always when
    /// the pattern names no module; else when MODULE is the module's path,
    /// its file name, or its file name up to a `.` or `-` (`libc` matches
    /// `/lib/x86_64-linux-gnu/libc.so.6`, `app` matches `/usr/bin/app`).
    pub fn matches_module(&self, path: &str) -> bool {
        let Some(m) = &self.module else {
            return true;
        };
        if path == m {
            return true;
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        file == m
            || (file.starts_with(m.as_str())
                && matches!(file.as_bytes().get(m.len()), Some(b'.') | Some(b'-')))
    }

    /// Both: the module and any of the names.
    pub fn matches<'a>(&self, module_path: &str, names: impl IntoIterator<Item = &'a str>) -> bool {
        self.matches_module(module_path) && self.matches_names(names)
    }
}

/// The name forms a pattern is matched against, for a symbol `raw` whose
/// display name (demangled) is `display`: the raw name, the display name,
/// and the display name without its parameter list (`ns::f(int) const`
/// gives `ns::f`).
pub fn name_forms<'a>(raw: &'a str, display: &'a str) -> [&'a str; 3] {
    [raw, display, without_params(display)]
}

/// [`name_forms`] and the function's module-and-address name `at`
/// (`git+0x4a3f0`, as fctrace-format's `unnamed_function_name` makes it),
/// which a pattern of that shape matches, whether a symbol names the
/// function or not.
pub fn name_forms_at<'a>(raw: &'a str, display: &'a str, at: &'a str) -> [&'a str; 4] {
    [raw, display, without_params(display), at]
}

/// `ns::f(int) const` → `ns::f`; a name without parameters is unchanged.
/// Template arguments before the parameter list are kept
/// (`f<int>(int)` → `f<int>`).
pub fn without_params(name: &str) -> &str {
    // The parameter list is the last top-level `( ... )` group.
    let bytes = name.as_bytes();
    let mut depth_angle = 0i32;
    let mut depth_paren = 0i32;
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth_angle += 1,
            b'>' => depth_angle -= 1,
            b'(' => {
                // `operator()` names its operator with a `()`.
                if depth_paren == 0 && depth_angle <= 0 && !name[..i].ends_with("operator") {
                    start = Some(i);
                }
                depth_paren += 1;
            }
            b')' => depth_paren -= 1,
            _ => {}
        }
    }
    match start {
        Some(s) if s > 0 => &name[..s],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_regex() {
        let p = FuncPattern::parse("main").unwrap();
        assert!(!p.is_regex());
        assert!(p.matches_name("main"));
        assert!(!p.matches_name("main2"));
        assert!(!p.matches_name("xmain"));
        let r = FuncPattern::parse("^ns::").unwrap();
        assert!(r.is_regex());
        assert!(r.matches_name("ns::f"));
        assert!(!r.matches_name("other::ns::f"));
        let r = FuncPattern::parse("alloc").unwrap();
        assert!(!r.matches_name("malloc"));
        let r = FuncPattern::parse("a.*c").unwrap();
        assert!(r.matches_name("malloc"), "a regex matches anywhere");
        assert!(FuncPattern::parse("f(").is_err());
        assert!(FuncPattern::parse("").is_err());
        assert!(FuncPattern::parse("f@").is_err());
    }

    #[test]
    fn actions_are_not_modules() {
        for bad in [
            "f@depth=1",
            "f@trace_on",
            "f@backtrace",
            "f@filter",
            "f@global",
        ] {
            let e = FuncPattern::parse(bad).unwrap_err();
            assert!(
                e.contains("not a module") && e.contains("-T 'f@"),
                "{bad}: {e}"
            );
        }
        assert!(FuncPattern::parse("f@libdepth").is_ok());
    }

    #[test]
    fn modules() {
        let p = FuncPattern::parse("malloc@libc").unwrap();
        assert_eq!(p.module(), Some("libc"));
        assert!(p.matches("/lib/x86_64-linux-gnu/libc.so.6", ["malloc"]));
        assert!(!p.matches("/usr/bin/app", ["malloc"]));
        assert!(!p.matches("/lib/libcrypt.so.1", ["malloc"]));
        assert!(FuncPattern::parse("f@libc.so.6")
            .unwrap()
            .matches_module("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(FuncPattern::parse("f@/usr/bin/app")
            .unwrap()
            .matches_module("/usr/bin/app"));
        assert!(FuncPattern::parse("f").unwrap().matches_module("/any"));
    }

    #[test]
    fn module_and_address() {
        let p = FuncPattern::parse("git+0x4a3f0").unwrap();
        assert!(!p.is_regex());
        assert!(p.matches_name("git+0x4a3f0"));
        assert!(p.matches_name("git+0x4A3F0"));
        assert!(p.matches_name("git+0x04a3f0"));
        assert!(!p.matches_name("git+0x4a3f"));
        assert!(!p.matches_name("gzip+0x4a3f0"));
        assert!(!p.matches_name("main"));
        let forms = name_forms_at("main", "main", "git+0x4a3f0");
        assert!(p.matches("/usr/bin/git", forms));
        let l = FuncPattern::parse("libc.so.6+0x1f").unwrap();
        assert!(l.matches_name("libc.so.6+0x1f"));
        assert!(!l.matches_name("libcXso.6+0x1f"), "not a regex");
        assert!(FuncPattern::parse("a+").unwrap().is_regex());
    }

    #[test]
    fn params_are_cut() {
        assert_eq!(without_params("ns::f(int) const"), "ns::f");
        assert_eq!(without_params("f<int>(int)"), "f<int>");
        assert_eq!(without_params("A::operator()(int)"), "A::operator()");
        assert_eq!(without_params("plain"), "plain");
        assert_eq!(
            without_params("(anonymous namespace)::g()"),
            "(anonymous namespace)::g"
        );
        let p = FuncPattern::parse("ns::f").unwrap();
        assert!(p.matches_names(name_forms("_ZN2ns1fEi", "ns::f(int)")));
    }
}

/// A `-L LOC` filter: a regular expression on a function's source file
/// (`!LOC`: the functions whose file does not match it).
#[derive(Clone, Debug)]
pub struct LocFilter {
    negate: bool,
    re: Regex,
}

impl LocFilter {
    pub fn parse(text: &str) -> Result<LocFilter, String> {
        let (negate, re) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let re = Regex::new(re).map_err(|e| format!("`{text}`: {e}"))?;
        Ok(LocFilter { negate, re })
    }

    /// Whether `!LOC`.
    pub fn negated(&self) -> bool {
        self.negate
    }

    /// Whether the expression matches `file`.
    pub fn matches(&self, file: &str) -> bool {
        self.re.is_match(file)
    }
}

/// Whether a function defined in `file` (`None`: no debug information)
/// is shown under the `-L` filters `filters` (none: every function): it
/// matches one of those without `!` (when there are such: a function
/// without a file then matches none) and none of those with `!`.
pub fn loc_shown(filters: &[LocFilter], file: Option<&str>) -> bool {
    let mut positive = filters.iter().filter(|f| !f.negate).peekable();
    let Some(file) = file else {
        return positive.peek().is_none();
    };
    let wanted = positive.peek().is_none() || positive.any(|f| f.matches(file));
    wanted && !filters.iter().any(|f| f.negate && f.matches(file))
}

#[cfg(test)]
mod loc_tests {
    use super::*;

    #[test]
    fn loc_filters_choose_files() {
        let f = |v: &[&str]| -> Vec<LocFilter> {
            v.iter().map(|t| LocFilter::parse(t).unwrap()).collect()
        };
        assert!(loc_shown(&[], None));
        assert!(loc_shown(&f(&["main.c$"]), Some("src/main.c")));
        assert!(!loc_shown(&f(&["main.c$"]), Some("src/lib.c")));
        assert!(!loc_shown(&f(&["main.c$"]), None));
        assert!(loc_shown(&f(&["!lib"]), Some("src/main.c")));
        assert!(!loc_shown(&f(&["!lib"]), Some("src/lib.c")));
        assert!(loc_shown(&f(&["!lib"]), None));
        assert!(!loc_shown(&f(&["src", "!lib"]), Some("src/lib.c")));
        assert!(LocFilter::parse("(").is_err());
        assert!(LocFilter::parse("!a").unwrap().negated());
    }
}
