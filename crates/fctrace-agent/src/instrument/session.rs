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
/// The child moves to session `sid` (a table of its own, `pid`'s): the
/// parent's table as it was at the fork (every line whose function id or
/// module index the child knows, its lines not written yet at the fork
/// included, whichever of the two wrote them), with a `forked` line after
/// its header naming the parent's session. Every event the child recorded before names only
/// functions of that part, so the new table reads them all.
pub(super) fn move_to_child_session(s: &mut Session, sid: u32, pid: u32) -> Result<(), String> {
    let parent = s.out.path.to_string_lossy().into_owned();
    let dir = parent
        .rsplit_once('/')
        .map(|(d, _)| d)
        .ok_or("bad symbol table path")?;
    let path = format!("{dir}/{sid}.sym");
    let written = std::fs::read(&parent).map_err(|e| format!("cannot read {parent}: {e}"))?;
    let known = (s.next_id, s.written_modules as u32);
    let text = child_table(&written, &s.out.pending, (sid, pid), known)?;
    let mut out = SymFile::create(&path)?;
    out.pending = text;
    out.flush().map_err(|e| e.to_string())?;
    s.out = out;
    Ok(())
}

/// The text of a fork child's own table ([`move_to_child_session`]):
/// the parent's table as `written` to its file, then the child's `pending`
/// lines, keeping the function ids below `known.0` and the module indexes
/// below `known.1` once each, under the header of session `sid.0`, process
/// `sid.1`, with a `forked` line naming the parent's session.
fn child_table(
    written: &[u8],
    pending: &[u8],
    (sid, pid): (u32, u32),
    known: (u32, u32),
) -> Result<Vec<u8>, String> {
    let mut parent_session = None;
    let mut seen_funcs = std::collections::HashSet::new();
    let mut seen_modules = std::collections::HashSet::new();
    let mut text = Vec::with_capacity(written.len() + pending.len() + 256);
    // Only whole lines: the parent may be writing the last one now.
    for line in whole_lines(written).chain(whole_lines(pending)) {
        let mut fields = line.splitn(3, |&b| b == b'\t');
        let key = fields.next().unwrap_or_default();
        let second = fields.next();
        let number = || {
            std::str::from_utf8(second.unwrap_or_default())
                .ok()
                .and_then(|n| n.parse::<u32>().ok())
        };
        let keep = match key {
            b"session" => {
                parent_session = number();
                writeln!(text, "session\t{sid}").map_err(|e| e.to_string())?;
                false
            }
            b"pid" => {
                writeln!(text, "pid\t{pid}").map_err(|e| e.to_string())?;
                false
            }
            b"forked" => false,
            b"exe" => {
                text.extend_from_slice(line);
                let from = parent_session.ok_or("the parent's symbol table has no session line")?;
                writeln!(text, "\nforked\t{from}").map_err(|e| e.to_string())?;
                false
            }
            b"func" => number().is_some_and(|id| id < known.0 && seen_funcs.insert(id)),
            b"module" => number().is_some_and(|i| i < known.1 && seen_modules.insert(i)),
            _ => true,
        };
        if keep {
            text.extend_from_slice(line);
            text.push(b'\n');
        }
    }
    if parent_session.is_none() {
        return Err("the parent's symbol table has no session line".into());
    }
    Ok(text)
}

/// The lines of `bytes` that end with a newline (without it).
fn whole_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes[..end]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::child_table;

    /// A fork child's table: the parent's lines known at the fork once
    /// each (its own unwritten copy of line 2 too), the parent's later
    /// lines and a cut last line left out, its own header.
    #[test]
    fn a_fork_childs_table_is_its_parents_at_the_fork() {
        let written = b"fctrace-symtab 1\nsession\t3\npid\t100\nexe\t/bin/py\n\
module\t0\t0x1000\t/bin/py\nfunc\t0\t0\t0x10\t4\tfn\ttraced\ta\n\
func\t1\t0\t0x20\t4\tfn\ttraced\tb\nfunc\t2\t0\t0x30\t4\tfn\ttraced\tc\n\
module\t1\t0x2000\t/lib/x.so\nfunc\t3\t1\t0x4\t0\tpy\ttraced\tparent.lat";
        let pending = b"func\t2\t0\t0x30\t4\tfn\ttraced\tc\n";
        let text = child_table(written, pending, (7, 200), (3, 1)).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "fctrace-symtab 1\nsession\t7\npid\t200\nexe\t/bin/py\nforked\t3\n\
module\t0\t0x1000\t/bin/py\nfunc\t0\t0\t0x10\t4\tfn\ttraced\ta\n\
func\t1\t0\t0x20\t4\tfn\ttraced\tb\nfunc\t2\t0\t0x30\t4\tfn\ttraced\tc\n"
        );
        assert!(child_table(b"fctrace-symtab 1\n", b"", (7, 200), (0, 0)).is_err());
    }
}
