//! The reader's naming step: every function of a trace's symbol tables
//! that no symbol named at record time (a module-and-offset name,
//! `prog+0x1139`) gets the name its module's debug file gives that
//! address. The function keeps its id, module and address; only its
//! `name` changes (the raw, mangled symbol name, as the record-time
//! symbols would have had it, so readers demangle it as usual).

use crate::locate::{Finder, Found};
use crate::symbols::FuncNames;
use fctrace_format::store::Trace;
use fctrace_format::symtab::{FuncKind, SymTab};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

/// Where one module's function names come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Every function had its name at record time.
    RecordTime,
    /// `named` of its `unnamed` functions were named from this debug file.
    DebugFile {
        found: Found,
        named: usize,
        unnamed: usize,
    },
    /// A debug file was found but could not be read.
    Unreadable {
        path: PathBuf,
        error: String,
        unnamed: usize,
    },
    /// No debug file was found for its `unnamed` functions.
    NotFound { unnamed: usize },
}

/// One module of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleNaming {
    pub session: u32,
    pub module: u32,
    pub origin: Origin,
}

/// What the naming step did: per module, and the notes for the user.
#[derive(Debug, Default)]
pub struct Naming {
    pub modules: Vec<ModuleNaming>,
    pub notes: Vec<String>,
}

impl Naming {
    /// Where the names of module `module` of session `session` come from.
    pub fn origin(&self, session: u32, module: u32) -> Option<&Origin> {
        self.modules
            .iter()
            .find(|m| m.session == session && m.module == module)
            .map(|m| &m.origin)
    }
}

/// A debug file's names, shared by the sessions that load the same module.
type Looked = Option<(Found, Result<Rc<FuncNames>, String>)>;

/// Names the unnamed functions of every session of `trace`.
pub fn name_trace(trace: &mut Trace, finder: &mut Finder) -> Naming {
    let mut looked = HashMap::new();
    let mut naming = Naming::default();
    for table in trace.sessions.values_mut() {
        naming.modules.extend(name_in(table, finder, &mut looked));
    }
    naming.notes = finder.take_notes();
    naming
}

/// Names the unnamed functions of one symbol table.
pub fn name_symtab(table: &mut SymTab, finder: &mut Finder) -> Vec<ModuleNaming> {
    name_in(table, finder, &mut HashMap::new())
}

fn name_in(
    table: &mut SymTab,
    finder: &mut Finder,
    looked: &mut HashMap<String, Looked>,
) -> Vec<ModuleNaming> {
    let mut unnamed: Vec<Vec<usize>> = vec![Vec::new(); table.modules.len()];
    for (i, f) in table.functions.iter().enumerate() {
        let Some(m) = table.modules.get(f.module as usize) else {
            continue;
        };
        if f.kind == FuncKind::Function && f.is_unnamed(m) {
            unnamed[f.module as usize].push(i);
        }
    }
    let mut out = Vec::with_capacity(table.modules.len());
    for (mi, funcs) in unnamed.into_iter().enumerate() {
        let module = &table.modules[mi];
        let origin = if funcs.is_empty() {
            Origin::RecordTime
        } else {
            let key = if module.build_id.is_empty() {
                format!("path:{}", module.path)
            } else {
                format!("id:{}", module.build_id)
            };
            let entry = looked.entry(key).or_insert_with(|| {
                let found = finder.find(module)?;
                let names = FuncNames::read(&found.path).map(Rc::new);
                Some((found, names))
            });
            match entry {
                None => Origin::NotFound {
                    unnamed: funcs.len(),
                },
                Some((found, Err(error))) => Origin::Unreadable {
                    path: found.path.clone(),
                    error: error.clone(),
                    unnamed: funcs.len(),
                },
                Some((found, Ok(names))) => {
                    let mut named = 0;
                    for &i in &funcs {
                        let f = &mut table.functions[i];
                        if let Some(name) = names.name_at(f.addr) {
                            f.name = name;
                            named += 1;
                        }
                    }
                    Origin::DebugFile {
                        found: found.clone(),
                        named,
                        unnamed: funcs.len(),
                    }
                }
            }
        };
        out.push(ModuleNaming {
            session: table.session,
            module: mi as u32,
            origin,
        });
    }
    out
}
