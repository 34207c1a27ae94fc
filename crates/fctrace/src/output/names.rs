//! Function names: from a task's session symbol table, demangled.

use fctrace_format::store::Trace;
use fctrace_format::symtab::SymTab;
use std::collections::HashMap;
use std::rc::Rc;

/// Name of a function id that the session's symbol table does not have.
pub fn unknown(func: u32) -> String {
    format!("<unknown #{func}>")
}

/// The name as the call tree prints it: demangled; C and Rust names get
/// `()` appended, C++ names already carry their parameter list (`foo(int)`,
/// `S::get() const`) and are printed as `c++filt` prints them.
pub fn call_name(raw: &str) -> String {
    let demangled = fctrace_symbols::demangle(raw);
    if raw.starts_with("_Z") && has_parameter_list(&demangled) {
        demangled
    } else {
        demangled + "()"
    }
}

/// Whether a demangled C++ name ends with a parameter list, possibly
/// followed by qualifiers (`const`, `&&`, `noexcept`, ...) and GCC clone
/// markers (`[clone .isra.0]`).
fn has_parameter_list(name: &str) -> bool {
    let Some(close) = name.rfind(')') else {
        return false;
    };
    let mut tail = &name[close + 1..];
    // Drop "[clone .xxx]" groups.
    let mut cleaned = String::new();
    while let Some(start) = tail.find("[clone ") {
        cleaned.push_str(&tail[..start]);
        match tail[start..].find(']') {
            Some(end) => tail = &tail[start + end + 1..],
            None => return false,
        }
    }
    cleaned.push_str(tail);
    cleaned.split_whitespace().all(|word| {
        matches!(
            word,
            "const" | "volatile" | "&" | "&&" | "noexcept" | "restrict" | "transaction_safe"
        )
    })
}

/// Caches the tree names of functions, per session (function ids are dense
/// indices of the session's symbol table: a vector per session).
pub struct CallNames<'t> {
    trace: &'t Trace,
    cache: HashMap<u32, Vec<Option<Rc<str>>>>,
}

impl<'t> CallNames<'t> {
    pub fn new(trace: &'t Trace) -> CallNames<'t> {
        CallNames {
            trace,
            cache: HashMap::new(),
        }
    }

    /// The tree name of function `func` of `session`, or `<unknown #id>`.
    pub fn get(&mut self, session: u32, func: u32) -> Rc<str> {
        let trace = self.trace;
        let names = self.cache.entry(session).or_default();
        let i = func as usize;
        if let Some(Some(name)) = names.get(i) {
            return name.clone();
        }
        let name: Rc<str> = Rc::from(match lookup(trace.sessions.get(&session), func) {
            Some(raw) => call_name(raw),
            None => unknown(func),
        });
        // Ids beyond the table (a corrupt trace) are not cached: no huge
        // vector for a stray id.
        if i < names.len() + 1_000_000 {
            if names.len() <= i {
                names.resize(i + 1, None);
            }
            names[i] = Some(name.clone());
        }
        name
    }
}

fn lookup(table: Option<&SymTab>, func: u32) -> Option<&str> {
    Some(table?.function(func)?.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_names() {
        assert_eq!(call_name("main"), "main()");
        assert_eq!(call_name("_Z3fooi"), "foo(int)");
        assert_eq!(call_name("_ZNK1S3getEv"), "S::get() const");
        assert_eq!(call_name("_Z3fooi.isra.0"), "foo(int) [clone .isra.0]");
        assert_eq!(
            call_name("_ZN3std2io5stdio6_print17h1234567890abcdefE"),
            "std::io::stdio::_print()"
        );
        assert_eq!(call_name("_Zbogus"), "_Zbogus()");
        assert_eq!(call_name(""), "()");
    }

    #[test]
    fn parameter_lists() {
        assert!(has_parameter_list("f(int)"));
        assert!(has_parameter_list("S::m() const &&"));
        assert!(has_parameter_list(
            "f(int) [clone .constprop.0] [clone .isra.1]"
        ));
        assert!(!has_parameter_list("<fn(i32) as T>::f"));
        assert!(!has_parameter_list("plain"));
    }
}
