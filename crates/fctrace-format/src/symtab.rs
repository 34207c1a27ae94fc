//! The session symbol table: which functions one process image (a
//! "session": the program as started, or as replaced by `exec`) has, with
//! the function ids its events use.
//!
//! The agent writes it (it alone knows what it instrumented, and why some
//! function could not be); the readers use it to name events. It is a
//! line-oriented text file, `sessions/<session id>.sym` in the trace
//! directory; see docs/format.md for the grammar.

/// How a traced function is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuncKind {
    /// A function defined by a module, patched at its entry.
    Function,
    /// A PLT entry of the main executable: a call into a shared library,
    /// named by the imported symbol.
    Plt,
    /// A GOT-called import (`call *sym@GOTPCREL(%rip)`, no PLT), named by
    /// the imported symbol.
    Got,
    /// A Python function (a CPython code object), named `module.qualname`;
    /// its module line is the source file (base 0) and its `addr` the line
    /// where it is defined (`co_firstlineno`), its size 0.
    Python,
    /// An SDT probe (`record -E`), named `provider:name`; its `addr` the
    /// probe's address in the module, its size 0. Each hit is an entry
    /// and an exit at the same time, shown as uftrace shows an event:
    /// `/* provider:name */`.
    Sdt,
}

/// Whether the function is traced, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FuncStatus {
    Traced,
    /// Traced like `Traced`, through the trap fallback: its entry is a
    /// one-byte `int3` that the agent's SIGTRAP handler sends to its stub
    /// (no jump fits it), so each call costs a signal delivery.
    TracedTrap,
    /// Traced, but only its calls are seen: it returns twice (setjmp,
    /// vfork) so its return cannot be captured. Its exit is recorded at the
    /// same time as its entry.
    EntryOnly,
    /// Not traced; the reason is a short human-readable phrase without tabs
    /// or newlines.
    NotTraced(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Index in [`SymTab::modules`].
    pub index: u32,
    /// Load address (the value added to the ELF virtual addresses).
    pub base: u64,
    /// Path as the dynamic linker reports it; the main executable's full path.
    pub path: String,
    /// The module's GNU build-id (`NT_GNU_BUILD_ID`), lower-case hex;
    /// empty when the file has none. Readers find the debug file by it.
    pub build_id: String,
    /// The file name its `.gnu_debuglink` section names (empty when none),
    /// and that section's CRC-32 of the debug file.
    pub debuglink: String,
    pub debuglink_crc: u32,
}

impl Module {
    /// A module known by its index, base and path only (no build-id, no
    /// debug link).
    pub fn new(index: u32, base: u64, path: impl Into<String>) -> Module {
        Module {
            index,
            base,
            path: path.into(),
            build_id: String::new(),
            debuglink: String::new(),
            debuglink_crc: 0,
        }
    }

    /// The module's file name (the last component of its path), as it
    /// begins the name of its unnamed functions.
    pub fn file_name(&self) -> &str {
        module_file_name(&self.path)
    }
}

/// The last component of a module path.
pub fn module_file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The stable name of a function that no symbol names: the module's file
/// name and the function's ELF virtual address in it, `git+0x4a3f0` (the
/// address `nm`, `addr2line -e` and gdb use for that file; for a
/// position-independent file it is also the offset from its load base).
pub fn unnamed_function_name(module_path: &str, addr: u64) -> String {
    format!("{}+{addr:#x}", module_file_name(module_path))
}

/// Splits a module-and-offset name (`git+0x4a3f0`) into the module's file
/// name and the address; `None` for any other name. Symbol names never
/// have this shape (a mangled name has no `+`; a demangled
/// `operator+` is not followed by `0x` and hex digits to the end).
pub fn split_module_offset(name: &str) -> Option<(&str, u64)> {
    let (module, hex) = name.rsplit_once("+0x")?;
    if module.is_empty() || hex.is_empty() || hex.len() > 16 {
        return None;
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((module, u64::from_str_radix(hex, 16).ok()?))
}

impl Function {
    /// Whether the function has no symbol name: its name is the
    /// module-and-offset name [`unnamed_function_name`] gives it.
    pub fn is_unnamed(&self, module: &Module) -> bool {
        split_module_offset(&self.name)
            .is_some_and(|(file, addr)| addr == self.addr && file == module.file_name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Function id: the index in [`SymTab::functions`].
    pub id: u32,
    /// The module whose code holds the function: for `Plt`/`Got` imports,
    /// the module that defines the imported function (the library), or the
    /// main executable if it could not be resolved.
    pub module: u32,
    /// ELF virtual address of the entry within the module that holds the
    /// code (for `Plt` the PLT entry in the executable, for `Got` the GOT
    /// slot in the executable).
    pub addr: u64,
    pub size: u64,
    pub kind: FuncKind,
    pub status: FuncStatus,
    /// The raw (mangled) symbol name.
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymTab {
    /// Session id, unique within one trace.
    pub session: u32,
    /// pid of the process that started the session.
    pub pid: u32,
    /// The program (path of the main executable) of the session.
    pub exe: String,
    pub modules: Vec<Module>,
    pub functions: Vec<Function>,
    /// A fork child's own session (its `forked` line): the functions and
    /// modules below its counts are its parent's, taken from the parent's
    /// table by [`SymTab::inherit`] (until then, those the child's file
    /// does not repeat are blank).
    pub forked: Option<Forked>,
}

/// What a fork child's table takes from its parent's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forked {
    /// The parent's session.
    pub parent: u32,
    /// Function ids and module indexes below these are the parent's.
    pub functions: u32,
    pub modules: u32,
    /// Those the child's file does not define, still blank.
    pub blank_functions: Vec<u32>,
    pub blank_modules: Vec<u32>,
}

use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt;
use std::io::{self, Write};

/// Major version of the symbol table text format written by this crate.
/// A reader accepts any minor version of its own major version and refuses
/// a newer major version.
pub const SYMTAB_VERSION: u32 = 1;

/// Keyword of the first line: `fctrace-symtab <version>`.
pub const SYMTAB_MAGIC: &str = "fctrace-symtab";

impl FuncKind {
    /// The word used in the text format: `fn`, `plt`, `got`, `py` or
    /// `sdt`.
    pub fn as_str(self) -> &'static str {
        match self {
            FuncKind::Function => "fn",
            FuncKind::Plt => "plt",
            FuncKind::Got => "got",
            FuncKind::Python => "py",
            FuncKind::Sdt => "sdt",
        }
    }

    fn parse(s: &str) -> Option<FuncKind> {
        Some(match s {
            "fn" => FuncKind::Function,
            "plt" => FuncKind::Plt,
            "got" => FuncKind::Got,
            "py" => FuncKind::Python,
            "sdt" => FuncKind::Sdt,
            _ => return None,
        })
    }
}

impl fmt::Display for FuncKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FuncStatus {
    /// Whether events are recorded for the function (`Traced`,
    /// `TracedTrap` or `EntryOnly`).
    pub fn is_traced(&self) -> bool {
        !matches!(self, FuncStatus::NotTraced(_))
    }
}

impl fmt::Display for FuncStatus {
    /// The text-format spelling, unescaped: `traced`, `entry-only` or
    /// `notrace:<reason>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FuncStatus::Traced => f.write_str("traced"),
            FuncStatus::TracedTrap => f.write_str("traced-trap"),
            FuncStatus::EntryOnly => f.write_str("entry-only"),
            FuncStatus::NotTraced(reason) => write!(f, "notrace:{reason}"),
        }
    }
}

impl SymTab {
    /// The function with this id, if the table has it.
    pub fn function(&self, id: u32) -> Option<&Function> {
        self.functions.get(id as usize)
    }

    /// The module with this index, if the table has it.
    pub fn module(&self, index: u32) -> Option<&Module> {
        self.modules.get(index as usize)
    }

    /// Parses a symbol table file.
    ///
    /// A last line without its newline is ignored (the writer may have died
    /// in the middle of it). `module` and `func` lines may come in any
    /// order; they are placed by index/id, which must be dense from 0.
    /// Unknown record keywords and extra trailing fields are ignored (a later
    /// minor version may add them); a newer major version is refused.
    pub fn parse(text: &str) -> Result<SymTab, SymTabError> {
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end + 1],
            None => "",
        };
        let mut lines = complete
            .split_terminator('\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l));

        let (_, first) = lines.next().ok_or_else(|| {
            SymTabError::file("the symbol table is empty (no complete line)".to_string())
        })?;
        parse_version_line(first)?;

        let mut session: Option<(usize, u32)> = None;
        let mut pid: Option<(usize, u32)> = None;
        let mut exe: Option<(usize, String)> = None;
        let mut modules: BTreeMap<u32, (usize, Module)> = BTreeMap::new();
        let mut functions: BTreeMap<u32, (usize, Function)> = BTreeMap::new();
        let mut forked: Option<(usize, Forked)> = None;

        for (no, line) in lines {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let p = LineParser {
                no,
                fields: &fields,
            };
            match fields[0] {
                "session" => set_once(&mut session, no, p.u32_field(1, "session id")?, "session")?,
                "pid" => set_once(&mut pid, no, p.u32_field(1, "pid")?, "pid")?,
                "exe" => set_once(&mut exe, no, p.string_field(1, "exe path")?, "exe")?,
                "forked" => {
                    let f = Forked {
                        parent: p.u32_field(1, "parent session")?,
                        functions: p.u32_field(2, "inherited functions")?,
                        modules: p.u32_field(3, "inherited modules")?,
                        ..Forked::default()
                    };
                    set_once(&mut forked, no, f, "forked")?;
                }
                "module" => {
                    let mut module = Module::new(
                        p.u32_field(1, "module index")?,
                        p.hex_field(2, "module base address")?,
                        p.string_field(3, "module path")?,
                    );
                    p.debug_fields(&mut module)?;
                    insert_unique(&mut modules, module.index, no, module, "module index")?;
                }
                "func" => {
                    let kind_text = p.field(5, "function kind")?;
                    let kind = FuncKind::parse(kind_text).ok_or_else(|| {
                        SymTabError::at(
                            no,
                            format!(
                                "unknown function kind {kind_text:?} (expected fn, plt, got or py)"
                            ),
                        )
                    })?;
                    let function = Function {
                        id: p.u32_field(1, "function id")?,
                        module: p.u32_field(2, "module index")?,
                        addr: p.hex_field(3, "function address")?,
                        size: p.u64_field(4, "function size")?,
                        kind,
                        status: p.status_field(6)?,
                        name: p.string_field(7, "function name")?,
                    };
                    insert_unique(&mut functions, function.id, no, function, "function id")?;
                }
                _ => {} // a record of a later minor version
            }
        }

        let session = session
            .ok_or_else(|| SymTabError::file("missing `session` line".to_string()))?
            .1;
        let pid = pid
            .ok_or_else(|| SymTabError::file("missing `pid` line".to_string()))?
            .1;
        let exe = exe
            .ok_or_else(|| SymTabError::file("missing `exe` line".to_string()))?
            .1;
        let forked = forked.map(|(_, mut f)| {
            f.blank_modules = blank_below(&mut modules, f.modules, |i| Module::new(i, 0, ""));
            f.blank_functions = blank_below(&mut functions, f.functions, |id| Function {
                id,
                module: 0,
                addr: 0,
                size: 0,
                kind: FuncKind::Function,
                status: FuncStatus::Traced,
                name: String::new(),
            });
            f
        });
        let modules = make_dense(modules, "module index")?;
        for (no, f) in functions.values() {
            if f.module as usize >= modules.len() {
                return Err(SymTabError::at(
                    *no,
                    format!(
                        "function {} refers to module {}, which is not defined",
                        f.id, f.module
                    ),
                ));
            }
        }
        let functions = make_dense(functions, "function id")?;
        Ok(SymTab {
            session,
            pid,
            exe,
            modules,
            functions,
            forked,
        })
    }

    /// A fork child's table ([`Forked`]) completed from its parent's:
    /// its blank functions and modules are the parent's. False when the
    /// parent's table lacks some (they stay blank).
    pub fn inherit(&mut self, parent: &SymTab) -> bool {
        let Some(f) = self.forked.as_mut() else {
            return true;
        };
        let mut complete = true;
        for i in std::mem::take(&mut f.blank_modules) {
            match parent.modules.get(i as usize) {
                Some(m) => self.modules[i as usize] = m.clone(),
                None => complete = false,
            }
        }
        for id in std::mem::take(&mut f.blank_functions) {
            match parent.functions.get(id as usize) {
                Some(p) => self.functions[id as usize] = p.clone(),
                None => complete = false,
            }
        }
        complete
    }
}

/// Fills the keys below `count` that `map` lacks with `blank(key)` (line
/// 0); returns them.
fn blank_below<T>(
    map: &mut BTreeMap<u32, (usize, T)>,
    count: u32,
    blank: impl Fn(u32) -> T,
) -> Vec<u32> {
    let missing: Vec<u32> = (0..count).filter(|k| !map.contains_key(k)).collect();
    for &k in &missing {
        map.insert(k, (0, blank(k)));
    }
    missing
}

fn parse_version_line(line: &str) -> Result<(), SymTabError> {
    let not_symtab = || {
        SymTabError::at(
            1,
            format!(
                "not an fctrace symbol table (the first line must be `{SYMTAB_MAGIC} <version>`)"
            ),
        )
    };
    let mut words = line.split(' ');
    if words.next() != Some(SYMTAB_MAGIC) {
        return Err(not_symtab());
    }
    let version = words.next().ok_or_else(not_symtab)?;
    if words.next().is_some() {
        return Err(not_symtab());
    }
    let major_text = version.split_once('.').map_or(version, |(major, _)| major);
    let major: u32 = major_text
        .parse()
        .map_err(|_| SymTabError::at(1, format!("invalid symbol table version {version:?}")))?;
    if major > SYMTAB_VERSION {
        return Err(SymTabError::at(
            1,
            format!(
                "symbol table format version {version} is newer than this fctrace supports \
                 ({SYMTAB_VERSION}); use a newer fctrace to read this trace"
            ),
        ));
    }
    if major == 0 {
        return Err(SymTabError::at(
            1,
            format!("unsupported symbol table format version {version}"),
        ));
    }
    Ok(())
}

fn set_once<T: PartialEq>(
    slot: &mut Option<(usize, T)>,
    no: usize,
    value: T,
    what: &str,
) -> Result<(), SymTabError> {
    match slot {
        Some((first, old)) if *old != value => Err(SymTabError::at(
            no,
            format!("`{what}` given a second time with a different value (first on line {first})"),
        )),
        Some(_) => Ok(()),
        None => {
            *slot = Some((no, value));
            Ok(())
        }
    }
}

fn insert_unique<T: PartialEq>(
    map: &mut BTreeMap<u32, (usize, T)>,
    key: u32,
    no: usize,
    value: T,
    what: &str,
) -> Result<(), SymTabError> {
    match map.entry(key) {
        Entry::Vacant(v) => {
            v.insert((no, value));
            Ok(())
        }
        Entry::Occupied(o) if o.get().1 == value => Ok(()),
        Entry::Occupied(o) => Err(SymTabError::at(
            no,
            format!(
                "{what} {key} defined a second time, differently (first on line {})",
                o.get().0
            ),
        )),
    }
}

fn make_dense<T>(map: BTreeMap<u32, (usize, T)>, what: &str) -> Result<Vec<T>, SymTabError> {
    let mut out = Vec::with_capacity(map.len());
    for (expected, (key, (no, value))) in map.into_iter().enumerate() {
        if key as usize != expected {
            return Err(SymTabError::at(
                no,
                format!("{what} {key} is defined but {what} {expected} is missing (they must be dense from 0)"),
            ));
        }
        out.push(value);
    }
    Ok(out)
}

struct LineParser<'a> {
    no: usize,
    fields: &'a [&'a str],
}

impl<'a> LineParser<'a> {
    fn field(&self, i: usize, what: &str) -> Result<&'a str, SymTabError> {
        self.fields.get(i).copied().ok_or_else(|| {
            SymTabError::at(
                self.no,
                format!("`{}` line has no {what} (field {})", self.fields[0], i + 1),
            )
        })
    }

    fn u32_field(&self, i: usize, what: &str) -> Result<u32, SymTabError> {
        let text = self.field(i, what)?;
        text.parse()
            .map_err(|_| SymTabError::at(self.no, format!("invalid {what} {text:?}")))
    }

    fn u64_field(&self, i: usize, what: &str) -> Result<u64, SymTabError> {
        let text = self.field(i, what)?;
        text.parse()
            .map_err(|_| SymTabError::at(self.no, format!("invalid {what} {text:?}")))
    }

    fn hex_field(&self, i: usize, what: &str) -> Result<u64, SymTabError> {
        let text = self.field(i, what)?;
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SymTabError::at(
                self.no,
                format!("invalid {what} {text:?} (expected hexadecimal)"),
            ));
        }
        u64::from_str_radix(digits, 16)
            .map_err(|_| SymTabError::at(self.no, format!("{what} {text:?} is out of range")))
    }

    /// The optional fields 5 to 7 of a `module` line (minor version 1.1):
    /// build-id, debug link name, debug link CRC; `-` for none.
    fn debug_fields(&self, module: &mut Module) -> Result<(), SymTabError> {
        let present = |i: usize| self.fields.get(i).is_some_and(|f| *f != "-");
        if present(4) {
            let id = self.fields[4];
            if id.len() % 2 == 1 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(SymTabError::at(
                    self.no,
                    format!("invalid build-id {id:?} (expected hexadecimal bytes)"),
                ));
            }
            module.build_id = id.to_ascii_lowercase();
        }
        if present(5) {
            module.debuglink = self.string_field(5, "debug link")?;
        }
        if present(6) {
            module.debuglink_crc = self.hex_field(6, "debug link CRC")? as u32;
        }
        Ok(())
    }

    fn string_field(&self, i: usize, what: &str) -> Result<String, SymTabError> {
        let text = self.field(i, what)?;
        unescape(text).map_err(|msg| SymTabError::at(self.no, format!("{what}: {msg}")))
    }

    fn status_field(&self, i: usize) -> Result<FuncStatus, SymTabError> {
        let text = self.field(i, "function status")?;
        match text {
            "traced" => Ok(FuncStatus::Traced),
            "traced-trap" => Ok(FuncStatus::TracedTrap),
            "entry-only" => Ok(FuncStatus::EntryOnly),
            _ => match text.strip_prefix("notrace:") {
                Some(reason) => Ok(FuncStatus::NotTraced(unescape(reason).map_err(|msg| {
                    SymTabError::at(self.no, format!("function status: {msg}"))
                })?)),
                None => Err(SymTabError::at(
                    self.no,
                    format!(
                        "unknown function status {text:?} (expected traced, traced-trap, entry-only or notrace:<reason>)"
                    ),
                )),
            },
        }
    }
}

fn unescape(text: &str) -> Result<String, String> {
    if !text.contains('\\') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => return Err(format!("invalid escape sequence \\{other} in {text:?}")),
            None => return Err(format!("unfinished escape sequence at the end of {text:?}")),
        }
    }
    Ok(out)
}

/// Writes `s` with `\`, tab, newline and carriage return escaped, without
/// allocating.
fn write_escaped(w: &mut impl Write, s: &str) -> io::Result<()> {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            _ => continue,
        };
        w.write_all(&bytes[start..i])?;
        w.write_all(esc)?;
        start = i + 1;
    }
    w.write_all(&bytes[start..])
}

/// Writes the first lines of a symbol table: the version line and the
/// `session`, `pid` and `exe` records.
///
/// None of the `write_*` functions allocates; each writes its line(s) with
/// several `write_all` calls, so an agent that wants a crash to cut the file
/// only between lines should give a buffered writer and flush it after each
/// call. Writers shared between threads must be serialized by the caller.
pub fn write_header(w: &mut impl Write, session: u32, pid: u32, exe: &str) -> io::Result<()> {
    write!(
        w,
        "{SYMTAB_MAGIC} {SYMTAB_VERSION}\nsession\t{session}\npid\t{pid}\nexe\t"
    )?;
    write_escaped(w, exe)?;
    w.write_all(b"\n")
}

/// Writes one `module` line.
pub fn write_module(w: &mut impl Write, module: &Module) -> io::Result<()> {
    write!(w, "module\t{}\t{:#x}\t", module.index, module.base)?;
    write_escaped(w, &module.path)?;
    if module.build_id.is_empty() && module.debuglink.is_empty() {
        return w.write_all(b"\n");
    }
    let build_id = if module.build_id.is_empty() {
        "-"
    } else {
        &module.build_id
    };
    write!(w, "\t{build_id}\t")?;
    if module.debuglink.is_empty() {
        w.write_all(b"-\t-\n")
    } else {
        write_escaped(w, &module.debuglink)?;
        writeln!(w, "\t{:#x}", module.debuglink_crc)
    }
}

/// The fields of one `func` line, borrowed (what [`write_function_line`]
/// writes without the caller building a [`Function`]).
#[derive(Clone, Copy, Debug)]
pub struct FunctionLine<'a> {
    pub id: u32,
    pub module: u32,
    pub addr: u64,
    pub size: u64,
    pub kind: FuncKind,
    pub status: &'a FuncStatus,
    pub name: &'a str,
}

/// Writes one `func` line.
pub fn write_function(w: &mut impl Write, function: &Function) -> io::Result<()> {
    write_function_line(
        w,
        &FunctionLine {
            id: function.id,
            module: function.module,
            addr: function.addr,
            size: function.size,
            kind: function.kind,
            status: &function.status,
            name: &function.name,
        },
    )
}

/// A line being assembled on the stack.
struct LineBuf {
    buf: [u8; 160],
    n: usize,
}

impl LineBuf {
    /// Appends `bytes` (callers keep within the buffer: the fixed fields
    /// take at most 5 + 3 × 20 + 2 + 3 + 6 + 11 bytes).
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.n..self.n + bytes.len()].copy_from_slice(bytes);
        self.n += bytes.len();
    }

    /// Appends `v` in base `RADIX` (10 or 16, lower case), digit by digit
    /// in place (no copy of a digit buffer: there are several numbers on
    /// each of hundreds of thousands of lines).
    #[inline]
    fn put_number<const RADIX: u64>(&mut self, v: u64) {
        let mut len = 1;
        let mut rest = v / RADIX;
        while rest != 0 {
            len += 1;
            rest /= RADIX;
        }
        let mut v = v;
        for i in (self.n..self.n + len).rev() {
            self.buf[i] = b"0123456789abcdef"[(v % RADIX) as usize];
            v /= RADIX;
        }
        self.n += len;
    }

    fn room(&self) -> usize {
        self.buf.len() - self.n
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.n]
    }
}

/// Writes one `func` line from its fields.
pub fn write_function_line(w: &mut impl Write, function: &FunctionLine) -> io::Result<()> {
    // Without the formatting machinery: an agent writes one line per
    // function of every module it instruments (hundreds of thousands).
    // Most lines are assembled here and written with one call.
    let mut line = LineBuf {
        buf: [0; 160],
        n: 0,
    };
    line.put(b"func\t");
    line.put_number::<10>(u64::from(function.id));
    line.put(b"\t");
    line.put_number::<10>(u64::from(function.module));
    line.put(b"\t0x");
    line.put_number::<16>(function.addr);
    line.put(b"\t");
    line.put_number::<10>(function.size);
    line.put(b"\t");
    line.put(function.kind.as_str().as_bytes());
    line.put(b"\t");
    match function.status {
        FuncStatus::Traced => line.put(b"traced\t"),
        FuncStatus::TracedTrap => line.put(b"traced-trap\t"),
        FuncStatus::EntryOnly => line.put(b"entry-only\t"),
        FuncStatus::NotTraced(reason) => {
            w.write_all(line.bytes())?;
            w.write_all(b"notrace:")?;
            write_escaped(w, reason)?;
            w.write_all(b"\t")?;
            write_escaped(w, function.name)?;
            return w.write_all(b"\n");
        }
    }
    let name = function.name.as_bytes();
    let plain = !name
        .iter()
        .any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'));
    if plain && name.len() < line.room() {
        line.put(name);
        line.put(b"\n");
        return w.write_all(line.bytes());
    }
    w.write_all(line.bytes())?;
    write_escaped(w, function.name)?;
    w.write_all(b"\n")
}

/// Writes a whole symbol table: header, modules, functions.
pub fn write_symtab(w: &mut impl Write, table: &SymTab) -> io::Result<()> {
    write_header(w, table.session, table.pid, &table.exe)?;
    for module in &table.modules {
        write_module(w, module)?;
    }
    for function in &table.functions {
        write_function(w, function)?;
    }
    Ok(())
}

/// Why a symbol table could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymTabError {
    /// 1-based line number, or 0 for an error about the whole file (such as
    /// a missing record).
    pub line: usize,
    pub message: String,
}

impl SymTabError {
    fn at(line: usize, message: String) -> SymTabError {
        SymTabError { line, message }
    }
    fn file(message: String) -> SymTabError {
        SymTabError { line: 0, message }
    }
}

impl fmt::Display for SymTabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for SymTabError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SymTab {
        SymTab {
            session: 2,
            pid: 4321,
            exe: "/home/me/my prog\twith\\odd\nname".to_string(),
            modules: vec![
                Module::new(0, 0x5555_5555_4000, "/home/me/my prog\twith\\odd\nname"),
                Module::new(1, 0x7fff_f7d8_0000, "/lib/x86_64-linux-gnu/libc.so.6"),
            ],
            functions: vec![
                Function {
                    id: 0,
                    module: 0,
                    addr: 0x1139,
                    size: 42,
                    kind: FuncKind::Function,
                    status: FuncStatus::Traced,
                    name: "main".to_string(),
                },
                Function {
                    id: 1,
                    module: 1,
                    addr: 0x4010,
                    size: 16,
                    kind: FuncKind::Plt,
                    status: FuncStatus::EntryOnly,
                    name: "_setjmp".to_string(),
                },
                Function {
                    id: 2,
                    module: 1,
                    addr: 0x3ff0,
                    size: 8,
                    kind: FuncKind::Got,
                    status: FuncStatus::NotTraced("too short: 3 bytes\t\\x".to_string()),
                    name: "operator new(unsigned long) with spaces".to_string(),
                },
                Function {
                    id: 3,
                    module: 0,
                    addr: u64::MAX,
                    size: u64::MAX,
                    kind: FuncKind::Function,
                    status: FuncStatus::NotTraced(String::new()),
                    name: "\\n\n\r\\".to_string(),
                },
            ],
            forked: None,
        }
    }

    fn text_of(t: &SymTab) -> String {
        let mut out = Vec::new();
        write_symtab(&mut out, t).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn round_trip_with_escapes() {
        let t = sample();
        let text = text_of(&t);
        // One line per record: escapes keep tabs/newlines out of the fields.
        assert_eq!(text.lines().count(), 4 + 2 + 4);
        assert!(text.starts_with("fctrace-symtab 1\nsession\t2\npid\t4321\nexe\t"));
        assert!(text.contains("module\t1\t0x7ffff7d80000\t/lib/x86_64-linux-gnu/libc.so.6\n"));
        assert!(text.contains("func\t1\t1\t0x4010\t16\tplt\tentry-only\t_setjmp\n"));
        assert_eq!(SymTab::parse(&text).unwrap(), t);
    }

    #[test]
    fn python_function_round_trip() {
        let mut t = sample();
        t.modules.push(Module::new(2, 0, "/srv/app/handlers.py"));
        t.functions.push(Function {
            id: t.functions.len() as u32,
            module: 2,
            addr: 24,
            size: 0,
            kind: FuncKind::Python,
            status: FuncStatus::Traced,
            name: "app.handlers.Parser.parse".to_string(),
        });
        let text = text_of(&t);
        assert!(text.contains("module\t2\t0x0\t/srv/app/handlers.py\n"));
        assert!(text.contains("\t0x18\t0\tpy\ttraced\tapp.handlers.Parser.parse\n"));
        assert_eq!(SymTab::parse(&text).unwrap(), t);
    }

    #[test]
    fn build_id_and_debug_link_round_trip() {
        let mut t = sample();
        t.modules[0].build_id = "93ac61ec0a".into();
        t.modules[1].debuglink = "libc\tx.debug".into();
        t.modules[1].debuglink_crc = 0xdead_beef;
        let text = text_of(&t);
        assert!(text.contains("\t93ac61ec0a\t-\t-\n"));
        assert!(text.contains("libc.so.6\t-\tlibc\\tx.debug\t0xdeadbeef\n"));
        assert_eq!(SymTab::parse(&text).unwrap(), t);
        let odd = text.replace("93ac61ec0a", "93ac6");
        assert!(SymTab::parse(&odd)
            .unwrap_err()
            .to_string()
            .contains("build-id"));
    }

    #[test]
    fn module_offset_names() {
        assert_eq!(
            unnamed_function_name("/usr/bin/git", 0x4a3f0),
            "git+0x4a3f0"
        );
        assert_eq!(split_module_offset("git+0x4a3f0"), Some(("git", 0x4a3f0)));
        assert_eq!(
            split_module_offset("libc.so.6+0x1f"),
            Some(("libc.so.6", 0x1f))
        );
        for not in [
            "main",
            "+0x10",
            "git+0x",
            "git+0x4g",
            "operator+",
            "a+0x10 b",
        ] {
            assert_eq!(split_module_offset(not), None, "{not}");
        }
        let m = Module::new(0, 0, "/usr/bin/git");
        let f = |name: &str, addr| Function {
            id: 0,
            module: 0,
            addr,
            size: 1,
            kind: FuncKind::Function,
            status: FuncStatus::Traced,
            name: name.into(),
        };
        assert!(f("git+0x10", 0x10).is_unnamed(&m));
        assert!(!f("git+0x10", 0x11).is_unnamed(&m));
        assert!(!f("gzip+0x10", 0x10).is_unnamed(&m));
        assert!(!f("main", 0x10).is_unnamed(&m));
    }

    #[test]
    fn exact_text() {
        let t = SymTab {
            session: 0,
            pid: 7,
            exe: "/bin/a b".into(),
            modules: vec![Module::new(0, 0x1000, "/bin/a b")],
            functions: vec![Function {
                id: 0,
                module: 0,
                addr: 0x10,
                size: 3,
                kind: FuncKind::Function,
                status: FuncStatus::NotTraced("too short".into()),
                name: "f".into(),
            }],
            forked: None,
        };
        assert_eq!(
            text_of(&t),
            "fctrace-symtab 1\nsession\t0\npid\t7\nexe\t/bin/a b\n\
             module\t0\t0x1000\t/bin/a b\n\
             func\t0\t0\t0x10\t3\tfn\tnotrace:too short\tf\n"
        );
    }

    #[test]
    fn truncated_last_line_is_ignored() {
        let t = sample();
        let text = text_of(&t);
        // Cut inside the last func line: that function is dropped.
        let cut = &text[..text.len() - 3];
        let parsed = SymTab::parse(cut).unwrap();
        assert_eq!(parsed.functions, t.functions[..3].to_vec());
        // Cut inside the escaped "\\" of the last line: still ignored.
        let cut = &text[..text.len() - 2];
        assert_eq!(SymTab::parse(cut).unwrap().functions.len(), 3);
        // Every prefix either parses or gives a clear error; none panics.
        for end in 0..text.len() {
            if text.is_char_boundary(end) {
                let _ = SymTab::parse(&text[..end]);
            }
        }
        // A garbled last line without newline is not an error either.
        let garbled = format!("{text}func\tx\ty");
        assert_eq!(SymTab::parse(&garbled).unwrap(), t);
    }

    #[test]
    fn ids_out_of_order_and_late_modules() {
        let text = "fctrace-symtab 1\nsession\t1\npid\t9\nexe\t/p\n\
            func\t2\t1\t0x30\t1\tfn\ttraced\tc\n\
            module\t0\t0x0\t/p\n\
            func\t0\t0\t10\t1\tfn\ttraced\ta\n\
            # a comment\n\
            \n\
            module\t1\t7f00\t/lib/l.so\n\
            func\t1\t0\t0x20\t1\tfn\ttraced\tb\n\
            func\t1\t0\t0x20\t1\tfn\ttraced\tb\n\
            newthing\tignored\n";
        let t = SymTab::parse(text).unwrap();
        let names: Vec<_> = t.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.functions[0].addr, 0x10);
        assert_eq!(t.modules[1].base, 0x7f00);
        assert_eq!(t.function(2).unwrap().module, 1);
        assert!(t.function(3).is_none());
    }

    #[test]
    fn minor_version_accepted_newer_major_rejected() {
        let body = "session\t1\npid\t9\nexe\t/p\n";
        assert!(SymTab::parse(&format!("fctrace-symtab 1.4\n{body}")).is_ok());
        let e = SymTab::parse(&format!("fctrace-symtab 2\n{body}")).unwrap_err();
        assert_eq!(e.line, 1);
        let msg = e.to_string();
        assert!(msg.contains("newer"), "{msg}");
        assert!(msg.starts_with("line 1: "), "{msg}");
    }

    #[test]
    fn errors_have_line_numbers() {
        let head = "fctrace-symtab 1\nsession\t1\npid\t9\nexe\t/p\nmodule\t0\t0\t/p\n";
        let cases = [
            ("func\t0\t0\t0x10\t1\tfn\ttraced\n", 6, "no function name"),
            ("func\t0\t0\tzz\t1\tfn\ttraced\tf\n", 6, "hexadecimal"),
            ("func\t0\t0\t0x1\t1\tfoo\ttraced\tf\n", 6, "function kind"),
            ("func\t0\t0\t0x1\t1\tfn\tmaybe\tf\n", 6, "function status"),
            ("func\t0\t0\t0x1\t1\tfn\ttraced\tf\\q\n", 6, "escape"),
            (
                "func\t0\t0\t0x1\t1\tfn\ttraced\tf\\\n",
                6,
                "unfinished escape",
            ),
            ("func\t0\t5\t0x1\t1\tfn\ttraced\tf\n", 6, "module 5"),
            (
                "func\t1\t0\t0x1\t1\tfn\ttraced\tf\n",
                6,
                "function id 0 is missing",
            ),
            (
                "func\t0\t0\t0x1\t1\tfn\ttraced\tf\nfunc\t0\t0\t0x1\t1\tfn\ttraced\tg\n",
                7,
                "second time",
            ),
            ("session\t2\n", 6, "second time"),
            ("pid\t-1\n", 6, "invalid pid"),
        ];
        for (tail, line, needle) in cases {
            let e = SymTab::parse(&format!("{head}{tail}")).unwrap_err();
            assert_eq!(e.line, line, "{tail:?}: {e}");
            assert!(e.to_string().contains(needle), "{tail:?}: {e}");
        }
        let e = SymTab::parse("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = SymTab::parse("hello\n").unwrap_err();
        assert!(e.to_string().contains("not an fctrace symbol table"), "{e}");
        let e = SymTab::parse("fctrace-symtab 1\nsession\t1\npid\t9\n").unwrap_err();
        assert_eq!(e.to_string(), "missing `exe` line");
    }

    #[test]
    fn trap_fallback_status_round_trips() {
        let mut t = sample();
        t.functions[0].status = FuncStatus::TracedTrap;
        let text = text_of(&t);
        assert!(text.contains("\ttraced-trap\tmain\n"), "{text}");
        assert_eq!(SymTab::parse(&text).unwrap(), t);
        assert!(FuncStatus::TracedTrap.is_traced());
    }

    #[test]
    fn incremental_writes_concatenate() {
        let t = sample();
        let mut out = Vec::new();
        write_header(&mut out, t.session, t.pid, &t.exe).unwrap();
        write_module(&mut out, &t.modules[0]).unwrap();
        write_function(&mut out, &t.functions[3]).unwrap();
        write_function(&mut out, &t.functions[0]).unwrap();
        // dlopen later: a new module and its functions are appended.
        write_module(&mut out, &t.modules[1]).unwrap();
        write_function(&mut out, &t.functions[2]).unwrap();
        write_function(&mut out, &t.functions[1]).unwrap();
        assert_eq!(
            SymTab::parse(std::str::from_utf8(&out).unwrap()).unwrap(),
            t
        );
    }
}
