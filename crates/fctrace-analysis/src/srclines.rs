//! Where the functions of a trace are defined (`--srcline`, `-L`): the
//! source file and line of each function, read from its module's DWARF
//! (fctrace-symbols' `srcline`) when a reader first asks, once per module
//! file.

use fctrace_format::store::Trace;
use fctrace_format::symtab::{FuncKind, SymTab};
use fctrace_symbols::srcline::{SrcLine, SrcLines};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

thread_local! {
    /// The source locations of each module file read so far.
    static MODULES: RefCell<HashMap<String, Rc<SrcLines>>> = RefCell::new(HashMap::new());
}

/// The source locations of the functions of the module file at `path`
/// (none when it cannot be read or has no debug information).
pub fn of_module(path: &str) -> Rc<SrcLines> {
    MODULES.with(|m| {
        m.borrow_mut()
            .entry(path.to_string())
            .or_insert_with(|| {
                let root = Path::new(fctrace_symbols::debugfile::DEBUG_ROOT);
                Rc::new(
                    fctrace_symbols::srcline::srclines_of_file_in(Path::new(path), root)
                        .unwrap_or_default(),
                )
            })
            .clone()
    })
}

/// Where function `func` of `table` is defined (`None`: a PLT or GOT
/// entry, or no debug information for it). A Python function's is in its
/// symbol table line: its module is the source file, its address the line.
pub fn of_function(table: &SymTab, func: u32) -> Option<SrcLine> {
    let f = table.function(func)?;
    of_entry(f.kind, &table.module(f.module)?.path, f.addr)
}

/// Where the function of kind `kind` at `addr` of the module file
/// `module` is defined (as [`of_function`]).
pub fn of_entry(kind: FuncKind, module: &str, addr: u64) -> Option<SrcLine> {
    match kind {
        FuncKind::Python => Some(SrcLine {
            file: module.to_string(),
            line: addr,
        }),
        FuncKind::Function => of_module(module).get(&addr).cloned(),
        FuncKind::Plt | FuncKind::Got | FuncKind::Sdt => None,
    }
}

/// `FILE:LINE` of function `func` of `session` of `trace`.
pub fn text(trace: &Trace, session: u32, func: u32) -> Option<String> {
    let l = of_function(trace.sessions.get(&session)?, func)?;
    Some(format!("{}:{}", l.file, l.line))
}
