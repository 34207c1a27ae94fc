//! The instrumentation session: the symbol table file it writes, the
//! modules and function ids handed out so far, the stub arenas, and
//! publishing the return sites and filter flags of new functions.

use crate::arch::x86_64::arena::Arena;
use crate::arch::x86_64::codegen::Params;
use fctrace_format::symtab::{self, FunctionLine, Module};
use std::io::Write;

/// The session's symbol table (`sessions/<id>.sym`). No descriptor is kept
/// across the program's code: the program may close it and get its number
/// back for a file of its own (a daemon closing every descriptor, ...), and
/// the next batch of lines would land there. Lines are collected in memory
/// and each batch opens the file, appends and closes it.
pub(super) struct SymFile {
    path: std::ffi::CString,
    shown: String,
    pending: Vec<u8>,
}

/// A batch this large is written out at once (a program may have hundreds
/// of thousands of functions).
const SYM_BATCH: usize = 1 << 18;

impl SymFile {
    /// Creates the file, private to the user whatever the umask (it names
    /// the program's functions and modules): it must not exist yet, and a
    /// symbolic link planted in its place is refused.
    pub(super) fn create(path: &str) -> Result<SymFile, String> {
        let c = std::ffi::CString::new(path).map_err(|_| format!("bad path {path}"))?;
        let err = |e: std::io::Error| format!("cannot create {path}: {e}");
        // SAFETY: open(2) with a valid C string; the descriptor is closed below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        // The mode given to open is masked by the umask only ever towards
        // fewer rights; set it exactly anyway (an ACL default may add some).
        // SAFETY: fchmod and close of the descriptor opened above.
        let r = unsafe { libc::fchmod(fd, 0o600) };
        let e = std::io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        if r != 0 {
            return Err(err(e));
        }
        Ok(SymFile {
            path: c,
            shown: path.to_string(),
            pending: Vec::with_capacity(SYM_BATCH),
        })
    }

    /// Appends the pending lines to the file: open, write, close.
    fn write_batch(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // SAFETY: open(2) with a valid C string; closed below.
        let fd = unsafe {
            libc::open(
                self.path.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}", self.shown),
            ));
        }
        let mut done = 0;
        let mut result = Ok(());
        while done < self.pending.len() {
            let rest = &self.pending[done..];
            // SAFETY: writes from a valid buffer to our own descriptor.
            let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                result = Err(e);
                break;
            }
            done += n as usize;
        }
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        self.pending.clear();
        result
    }
}

impl std::io::Write for SymFile {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(data);
        if self.pending.len() >= SYM_BATCH {
            self.write_batch()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_batch()
    }
}

/// CPython's evaluation loop, whose traced calls the Python functions'
/// events are placed in (`instrument::python`), and its function id once
/// a module that defines it is instrumented (`u32::MAX`: none).
pub(super) const PY_EVAL_FRAME: &str = "_PyEval_EvalFrameDefault";
pub(super) static PY_EVAL_ID: std::sync::atomic::AtomicU32 =
    std::sync::atomic::AtomicU32::new(u32::MAX);

pub(super) struct Session {
    out: SymFile,
    pub(super) modules: Vec<Module>,
    pub(super) params: Params,
    /// Per function id: the address its traced frames return to.
    pub(super) ret_sites: Vec<u64>,
    /// Per function id: its filter flags (`crate::recording::filter`), with filters.
    flags: Vec<u64>,
    /// Modules already written to the symbol table.
    written_modules: usize,
    /// The next function id (every smaller one is in the symbol table).
    pub(super) next_id: u32,
    /// Stub arenas: (module path, module base, arena base, arena size).
    pub(super) arenas: Vec<(String, u64, u64, usize)>,
    /// Attaching (`fctrace -p`): the instruction pointers of the process's
    /// threads, stopped while the start-up patches are written (none at a
    /// preloaded start, nor for libraries loaded later).
    pub(super) stopped: Vec<u64>,
    /// Arenas of unloaded libraries: (module path, module base, arena).
    pub(super) free_arenas: Vec<(String, u64, Arena)>,
    /// With -l: the real functions behind the agent's interposers (sorted),
    /// and the untraced ways into those patched so far: (entry, stub body).
    pub(super) forwarded: Vec<u64>,
    pub(super) forwarded_bodies: Vec<(u64, u64)>,
}

impl Session {
    /// A session that writes its symbol table to `out` (its header
    /// written), with the common blocks' `params`; `stopped`: attaching,
    /// where the stopped threads are; `forwarded`: with -l, the real
    /// functions behind the agent's interposers.
    pub(super) fn new(
        out: SymFile,
        params: Params,
        stopped: &[u64],
        forwarded: Vec<u64>,
    ) -> Session {
        Session {
            out,
            modules: Vec::new(),
            params,
            ret_sites: Vec::new(),
            flags: Vec::new(),
            written_modules: 0,
            next_id: 0,
            arenas: Vec::new(),
            free_arenas: Vec::new(),
            stopped: stopped.to_vec(),
            forwarded,
            forwarded_bodies: Vec::new(),
        }
    }

    /// The index of the module `path` loaded at `base` (0: any base, for
    /// the libraries the program's imports resolve to). A library loaded
    /// again at another base after `dlclose` is a module of its own.
    pub(super) fn module_index(&mut self, path: &str, base: u64) -> Result<u32, String> {
        if let Some(m) = self
            .modules
            .iter()
            .find(|m| m.path == path && (base == 0 || m.base == base))
        {
            return Ok(m.index);
        }
        let m = Module::new(self.modules.len() as u32, base, path);
        self.modules.push(m);
        Ok(self.modules.len() as u32 - 1)
    }

    /// Records the build-id and debug link of module `index` (from its
    /// file's analysis), unless its line is written already.
    pub(super) fn set_debug_ids(&mut self, index: u32, info: &fctrace_symbols::ElfInfo) {
        if (index as usize) < self.written_modules {
            return;
        }
        let Some(m) = self.modules.get_mut(index as usize) else {
            return;
        };
        if let Some(id) = &info.build_id {
            m.build_id = id.iter().map(|b| format!("{b:02x}")).collect();
        }
        if let Some((name, crc)) = &info.debuglink {
            m.debuglink = name.clone();
            m.debuglink_crc = *crc;
        }
    }

    /// Writes the lines of the modules not written yet.
    pub(super) fn write_new_modules(&mut self) -> Result<(), String> {
        for m in &self.modules[self.written_modules..] {
            symtab::write_module(&mut self.out, m).map_err(|e| e.to_string())?;
        }
        self.written_modules = self.modules.len();
        Ok(())
    }

    /// Notes the filter flags of function `id` (at `addr` in its module,
    /// when known) and returns them.
    pub(super) fn note_flags(
        &mut self,
        id: u32,
        module_path: &str,
        name: &str,
        addr: Option<u64>,
    ) -> u64 {
        if !crate::recording::filter::active() {
            return 0;
        }
        let at = addr.map_or(String::new(), |a| {
            symtab::unnamed_function_name(module_path, a)
        });
        let f = crate::recording::filter::flags_for(id, module_path, name, &at);
        if f == 0 {
            return 0;
        }
        if self.flags.len() <= id as usize {
            self.flags.resize(id as usize + 1, 0);
        }
        self.flags[id as usize] = f;
        f
    }

    /// Writes one function's line.
    pub(super) fn write_line(&mut self, line: &FunctionLine) -> Result<(), String> {
        symtab::write_function_line(&mut self.out, line).map_err(|e| e.to_string())
    }

    /// Writes the new modules' lines and every pending line out now.
    pub(super) fn flush(&mut self) -> Result<(), String> {
        self.write_new_modules()?;
        self.out.flush().map_err(|e| e.to_string())
    }
}

/// Publishes the return sites of every function id (a new table, read
/// atomically by other threads) and completes the session's symbol table
/// (the functions' lines are written as their modules are instrumented).
pub(super) fn publish(s: &mut Session) -> Result<(), String> {
    let mut sites = s.ret_sites.clone();
    sites.resize(s.next_id as usize, 0);
    crate::runtime::frames::set_ret_sites(sites);
    if crate::recording::filter::active() {
        let mut flags = s.flags.clone();
        flags.resize(s.next_id as usize, 0);
        crate::recording::filter::set_flags(flags);
    }
    crate::recording::filter::publish_ranges();
    crate::recording::args::names::publish();
    crate::recording::filter::conds::publish();
    s.write_new_modules()?;
    s.out.flush().map_err(|e| e.to_string())?;
    Ok(())
}

/// A fork child's first function of its own (a Python function first met
/// there, a library it loads with -l): the parent's symbol table cannot
/// take it, as the parent hands out the same ids from the same counter.
/// The child moves to session `sid` (a table of its own, `pid`'s) whose
/// `forked` line says that the function ids and module indexes it knew at
/// the fork are those of the parent's session `parent` (readers take them
/// from there: nothing is copied, a fork-per-request server costs a few
/// lines per child); the child's lines not written yet at the fork follow
/// (the parent writes its own copy of them too). Every event the child
/// recorded before names only functions of that part.
pub(super) fn move_to_child_session(
    s: &mut Session,
    parent: u32,
    sid: u32,
    pid: u32,
) -> Result<(), String> {
    let parent_path = s.out.path.to_string_lossy().into_owned();
    let dir = parent_path
        .rsplit_once('/')
        .map(|(d, _)| d)
        .ok_or("bad symbol table path")?;
    let exe = s
        .modules
        .first()
        .map(|m| m.path.clone())
        .unwrap_or_default();
    let mut text = Vec::with_capacity(s.out.pending.len() + 256);
    symtab::write_header(&mut text, sid, pid, &exe).map_err(|e| e.to_string())?;
    writeln!(
        text,
        "forked\t{parent}\t{}\t{}",
        s.next_id, s.written_modules
    )
    .map_err(|e| e.to_string())?;
    // (Whole lines: a batch is cut only after a newline.)
    text.extend_from_slice(&s.out.pending);
    let mut out = SymFile::create(&format!("{dir}/{sid}.sym"))?;
    out.pending = text;
    out.flush().map_err(|e| e.to_string())?;
    s.out = out;
    Ok(())
}

#[cfg(test)]
mod tests {
    use fctrace_format::symtab::SymTab;

    /// A fork child's table names the parent's functions and modules it
    /// does not repeat once completed from the parent's.
    #[test]
    fn a_fork_childs_table_reads_its_parents_functions() {
        let parent = SymTab::parse(
            "fctrace-symtab 1\nsession\t3\npid\t100\nexe\t/bin/py\n\
             module\t0\t0x1000\t/bin/py\nfunc\t0\t0\t0x10\t4\tfn\ttraced\ta\n\
             func\t1\t0\t0x20\t4\tfn\ttraced\tb\n\
             module\t1\t0x2000\t/lib/x.so\nfunc\t2\t1\t0x4\t0\tfn\ttraced\tlater\n",
        )
        .unwrap();
        let mut child = SymTab::parse(
            "fctrace-symtab 1\nsession\t7\npid\t200\nexe\t/bin/py\nforked\t3\t2\t1\n\
             func\t1\t0\t0x20\t4\tfn\ttraced\tb\n\
             module\t1\t0x0\t/app.py\nfunc\t2\t1\t0x9\t0\tpy\ttraced\tmine\n",
        )
        .unwrap();
        assert_eq!(child.forked.as_ref().map(|f| f.parent), Some(3));
        assert!(child.inherit(&parent));
        let names: Vec<&str> = child.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "mine"]);
        let paths: Vec<&str> = child.modules.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["/bin/py", "/app.py"]);
        // Without its parent's table, the inherited part stays blank.
        let mut orphan = SymTab::parse(
            "fctrace-symtab 1\nsession\t8\npid\t201\nexe\t/bin/py\nforked\t3\t2\t1\n",
        )
        .unwrap();
        assert!(!orphan.inherit(&SymTab::default()));
        assert_eq!(orphan.functions.len(), 2);
    }
}
