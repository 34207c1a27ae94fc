//! Function names: from a task's session symbol table, demangled.

use fctrace_format::store::Trace;
use fctrace_format::symtab::{FuncStatus, SymTab};
use fctrace_options::Demangle;
use std::collections::{HashMap, HashSet};
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

/// [`call_name`] as `--demangle` asks: `full` is [`call_name`], `simple`
/// the name without parameters, template arguments and return type
/// (`std::vector::push_back()`), `no` the raw symbol (`_Z3fooi()`).
pub fn call_name_with(raw: &str, how: Demangle) -> String {
    match how {
        Demangle::Full => call_name(raw),
        Demangle::Simple => fctrace_symbols::demangle_simple(raw) + "()",
        Demangle::No => format!("{raw}()"),
    }
}

/// The name `report` shows (without `()`), as `--demangle` asks.
pub fn report_name(raw: &str, how: Demangle) -> String {
    match how {
        Demangle::Full => fctrace_symbols::demangle(raw),
        Demangle::Simple => fctrace_symbols::demangle_simple(raw),
        Demangle::No => raw.to_string(),
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

/// A name shown with the module that defines it, for a name two modules
/// have (uftrace-like `malloc@libc.so.6`): `malloc()` of
/// `/lib/x86_64-linux-gnu/libc.so.6` is `malloc@libc.so.6()`, a C++
/// `f(int)` is `f(int)@libx.so`.
pub fn with_module(name: &str, module_path: &str) -> String {
    let file = module_file(module_path);
    match name.strip_suffix("()") {
        Some(bare) => format!("{bare}@{file}()"),
        None => format!("{name}@{file}"),
    }
}

/// The file name of a module path.
pub fn module_file(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The ids of the functions of `table` whose symbol name a function of
/// another module of the table has too (only functions that can appear in
/// a trace: the traced ones).
pub fn ambiguous_functions(table: &SymTab) -> HashSet<u32> {
    let mut modules_of: HashMap<&str, (u32, bool)> = HashMap::new();
    for f in &table.functions {
        if matches!(f.status, FuncStatus::NotTraced(_)) {
            continue;
        }
        modules_of
            .entry(f.name.as_str())
            .and_modify(|(m, shared)| *shared |= *m != f.module)
            .or_insert((f.module, false));
    }
    table
        .functions
        .iter()
        .filter(|f| {
            !matches!(f.status, FuncStatus::NotTraced(_))
                && modules_of.get(f.name.as_str()).is_some_and(|&(_, s)| s)
        })
        .map(|f| f.id)
        .collect()
}

/// Line texts are stored padded to a multiple of this many bytes (so that
/// they can be copied in whole pieces of this size: see
/// [`TreeName::open_line`]).
pub const PIECE: usize = 16;

/// A function's name as the call tree prints it, with the ends of its
/// lines ready to copy.
pub struct TreeName {
    /// [`call_name`], or `<unknown #id>`.
    pub name: String,
    /// `name {\n`, `name;\n` and `} /* bare */\n`, each padded to a
    /// multiple of [`PIECE`] bytes.
    text: Vec<u8>,
    /// `(start, len)` of each in `text`.
    open: (usize, usize),
    leaf: (usize, usize),
    close: (usize, usize),
    /// An SDT probe's (`record -E`): its leaf line is uftrace's event
    /// comment, `/* provider:name */`, shown without a duration.
    pub event: bool,
}

impl TreeName {
    pub fn new(name: String) -> TreeName {
        TreeName::with_source(name, None)
    }

    /// A name whose open and leaf lines end with a comment saying where
    /// the function is defined (`--srcline`): `main() { /* calc.c:26 */`.
    pub fn with_source(name: String, source: Option<&str>) -> TreeName {
        let note = source.map_or(String::new(), |s| format!(" /* {s} */"));
        let mut text = Vec::new();
        let mut add = |parts: &[&str]| {
            let start = text.len();
            for p in parts {
                text.extend_from_slice(p.as_bytes());
            }
            let len = text.len() - start;
            text.resize(start + len.div_ceil(PIECE).max(1) * PIECE, b' ');
            (start, len)
        };
        let open = add(&[&name, " {", &note, "\n"]);
        let leaf = add(&[&name, ";", &note, "\n"]);
        let close = add(&["} /* ", bare(&name), " */\n"]);
        TreeName {
            name,
            text,
            open,
            leaf,
            close,
            event: false,
        }
    }

    /// An SDT probe's name (`provider:name`): every line is uftrace's
    /// event comment, `/* provider:name */`.
    pub fn event(name: String) -> TreeName {
        let mut text = format!("/* {name} */\n").into_bytes();
        let len = text.len();
        text.resize(len.div_ceil(PIECE) * PIECE, b' ');
        TreeName {
            name,
            text,
            open: (0, len),
            leaf: (0, len),
            close: (0, len),
            event: true,
        }
    }

    /// The closing-line name: without the `()` appended for C/Rust names.
    pub fn bare(&self) -> &str {
        bare(&self.name)
    }

    fn piece(&self, (start, len): (usize, usize)) -> (&[u8], usize) {
        let end = start + len.div_ceil(PIECE).max(1) * PIECE;
        (&self.text[start..end], len)
    }

    /// `name {` and a newline: the text, padded to whole [`PIECE`]s, and
    /// its length.
    pub fn open_line(&self) -> (&[u8], usize) {
        self.piece(self.open)
    }

    /// `name;` and a newline, as [`open_line`](Self::open_line).
    pub fn leaf_line(&self) -> (&[u8], usize) {
        self.piece(self.leaf)
    }

    /// `} /* bare */` and a newline, as [`open_line`](Self::open_line).
    pub fn close_line(&self) -> (&[u8], usize) {
        self.piece(self.close)
    }
}

/// The closing-line name: without the `()` appended for C/Rust names.
pub fn bare(name: &str) -> &str {
    name.strip_suffix("()").unwrap_or(name)
}

/// Caches the tree names of functions, per session (function ids are dense
/// indices of the session's symbol table: a vector per session, the one of
/// the session last asked for at hand).
pub struct CallNames<'t> {
    trace: &'t Trace,
    /// The other sessions' vectors.
    cache: HashMap<u32, Vec<Option<Rc<TreeName>>>>,
    session: u32,
    names: Vec<Option<Rc<TreeName>>>,
    /// Per session, [`ambiguous_functions`].
    ambiguous: HashMap<u32, HashSet<u32>>,
    demangle: Demangle,
    /// `--srcline`, `--libname`.
    srcline: bool,
    libname: bool,
}

impl<'t> CallNames<'t> {
    /// The trace whose functions are named.
    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// Names as `--demangle=full` (the other readers' way in).
    #[allow(dead_code)]
    pub fn new(trace: &'t Trace) -> CallNames<'t> {
        CallNames::with_demangle(trace, Demangle::Full)
    }

    /// Names demangled as `--demangle` asks ([`call_name_with`]).
    pub fn with_demangle(trace: &'t Trace, demangle: Demangle) -> CallNames<'t> {
        CallNames {
            trace,
            cache: HashMap::new(),
            session: 0,
            names: Vec::new(),
            ambiguous: HashMap::new(),
            demangle,
            srcline: false,
            libname: false,
        }
    }

    /// Names as `options` ask: `--demangle`, `--srcline` (the tree's
    /// lines say where each function is defined), `--libname` (every
    /// name with its module's).
    pub fn with_options(trace: &'t Trace, options: &fctrace_options::Options) -> CallNames<'t> {
        CallNames {
            srcline: options.srcline,
            libname: options.libname,
            ..CallNames::with_demangle(trace, options.demangle)
        }
    }

    /// The file name of the module of function `func` of `session` (`""`
    /// if unknown).
    pub fn module_file(&self, session: u32, func: u32) -> &'t str {
        self.trace
            .sessions
            .get(&session)
            .and_then(|t| t.module(t.function(func)?.module))
            .map_or("", |m| module_file(&m.path))
    }

    /// The address of function `func` of `session` in its process: its
    /// module's load address plus its address in the file (a PLT or GOT
    /// import: its entry in the executable).
    pub fn func_addr(&self, session: u32, func: u32) -> Option<u64> {
        let table = self.trace.sessions.get(&session)?;
        let f = table.function(func)?;
        let module = match f.kind {
            fctrace_format::symtab::FuncKind::Function => table.module(f.module)?,
            _ => table.modules.iter().find(|m| m.path == table.exe)?,
        };
        Some(module.base.wrapping_add(f.addr))
    }

    /// The tree name of function `func` of `session` (`<unknown #id>` for
    /// one the session's symbol table does not have).
    #[inline]
    pub fn get(&mut self, session: u32, func: u32) -> Rc<TreeName> {
        if session == self.session {
            if let Some(Some(name)) = self.names.get(func as usize) {
                return name.clone();
            }
        }
        self.get_slow(session, func)
    }

    #[cold]
    fn get_slow(&mut self, session: u32, func: u32) -> Rc<TreeName> {
        if session != self.session {
            let names = self.cache.remove(&session).unwrap_or_default();
            let old = std::mem::replace(&mut self.names, names);
            self.cache.insert(self.session, old);
            self.session = session;
        }
        let names = &mut self.names;
        let i = func as usize;
        if let Some(Some(name)) = names.get(i) {
            return name.clone();
        }
        let table = self.trace.sessions.get(&session);
        if let Some(f) = table
            .and_then(|t| t.function(func))
            .filter(|f| f.kind == fctrace_format::symtab::FuncKind::Sdt)
        {
            let name = Rc::new(TreeName::event(f.name.clone()));
            if i < names.len() + 1_000_000 {
                if names.len() <= i {
                    names.resize(i + 1, None);
                }
                names[i] = Some(name.clone());
            }
            return name;
        }
        let name = match lookup(table, func) {
            Some(raw) => {
                let ambiguous = self
                    .ambiguous
                    .entry(session)
                    .or_insert_with(|| table.map(ambiguous_functions).unwrap_or_default());
                let module = table
                    .and_then(|t| t.module(t.function(func)?.module))
                    .map(|m| m.path.as_str());
                let name = call_name_with(raw, self.demangle);
                match module {
                    Some(m) if self.libname || ambiguous.contains(&func) => with_module(&name, m),
                    _ => name,
                }
            }
            None => unknown(func),
        };
        let source = match self.srcline {
            true => crate::srclines::text(self.trace, session, func),
            false => None,
        };
        let name = Rc::new(TreeName::with_source(name, source.as_deref()));
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
    fn line_texts() {
        for name in [
            "main()",
            "S::get() const",
            "",
            "a_rather_long_function_name_of_40_chars()",
        ] {
            let t = TreeName::new(name.to_string());
            for ((text, len), want) in [
                (t.open_line(), format!("{name} {{\n")),
                (t.leaf_line(), format!("{name};\n")),
                (t.close_line(), format!("}} /* {} */\n", bare(name))),
            ] {
                assert_eq!(&text[..len], want.as_bytes());
                assert_eq!(text.len() % PIECE, 0);
                assert!(text.len() >= len && text.len() < len + PIECE);
            }
        }
    }

    #[test]
    fn names_with_their_module() {
        assert_eq!(
            with_module("malloc()", "/lib/x86_64-linux-gnu/libc.so.6"),
            "malloc@libc.so.6()"
        );
        assert_eq!(with_module("f(int)", "/usr/lib/libx.so"), "f(int)@libx.so");
        assert_eq!(with_module("main()", "prog"), "main@prog()");
        assert_eq!(
            bare(&with_module("malloc()", "/l/libc.so.6")),
            "malloc@libc.so.6"
        );
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
