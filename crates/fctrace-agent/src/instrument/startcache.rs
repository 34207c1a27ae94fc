//! The start-up cache on the agent's side: a module's analysis and patch
//! plans read from the cache directory instead of being made again, when
//! an entry there is for this very file, this agent and these options;
//! else made as before and handed to the recorder (a file in the trace
//! directory's `cache/new`), which checks it and installs it. The agent
//! never writes the cache directory itself (the program may run as
//! another user, in a sandbox, with another HOME). Format and checks:
//! `fctrace_symbols::startcache`; docs/engine.md, "The start-up cache".

use super::loaded::Loaded;
use super::module_file::{loaded_build_id, with_analysis, MappedFile};
use crate::arch::x86_64::patch::Plan;
use fctrace_symbols::startcache::{self, Key, Reader, Writer};
use fctrace_symbols::{ElfInfo, FuncRef};
use std::sync::Mutex;

/// Where entries are read and handed over, and the agent's identity.
#[derive(Clone)]
struct Config {
    /// The cache directory (read only).
    dir: String,
    /// The trace directory's `cache/new`, where new entries go.
    out: String,
    /// The agent's own build-id.
    agent: Vec<u8>,
}

/// Set by [`init`] at each start (None: no cache, `--no-cache`).
static CONFIG: Mutex<Option<Config>> = Mutex::new(None);

/// The name, in the trace directory, of the file in which the recorder
/// gives the cache directory (absent: no cache), and of the directory
/// where the agent leaves new entries.
pub const DIR_FILE: &str = "cache/dir";
pub const NEW_DIR: &str = "cache/new";

/// Reads the cache directory the recorder chose for the trace at
/// `trace_dir`; `agent`: the agent's own module (its build-id is part of
/// every key). Without either, the cache is not used.
pub(super) fn init(trace_dir: &str, agent: Option<&Loaded>) {
    let config = (|| {
        let dir = std::fs::read_to_string(format!("{trace_dir}/{DIR_FILE}")).ok()?;
        let dir = dir.trim_end_matches('\n').to_string();
        let agent = loaded_build_id(agent?)?.to_vec();
        (!dir.is_empty()).then(|| Config {
            dir,
            out: format!("{trace_dir}/{NEW_DIR}"),
            agent,
        })
    })();
    *CONFIG.lock().unwrap_or_else(|e| e.into_inner()) = config;
}

fn config() -> Option<Config> {
    CONFIG.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Each function's size, its plan (or why it has none) and where the
/// bytes its plan moves start in `moved`.
#[derive(Default)]
pub(super) struct Plans {
    pub(super) list: Vec<(u64, Result<Plan, String>, usize)>,
    pub(super) moved: Vec<u8>,
}

impl Plans {
    /// The instructions the plan of function `k` moves.
    pub(super) fn moved_of(&self, k: usize) -> &[u8] {
        match &self.list[k] {
            (_, Ok(p), at) if p.moved_count != 0 => &self.moved[*at..*at + p.moved_len],
            _ => &[],
        }
    }
}

/// What the cache gives a module: its plans (an entry was found), or the
/// entry to fill and hand over once they are made, or nothing.
pub(super) enum Cached {
    Hit(Plans),
    Miss(Option<Pending>),
}

/// A new entry: its key and the analysis, the plans to come.
pub(super) struct Pending {
    key: Key,
    out: String,
    payload: Writer,
}

/// The options that change a module's analysis or plans, as key bits.
fn variant(use_debug_file: bool, imports: bool, is_main: bool) -> u32 {
    use_debug_file as u32
        | (imports as u32) << 1
        | (is_main as u32) << 2
        | (crate::interpose::signal::trap_handler_foreign() as u32) << 3
}

/// The key of module `m` as it is now, if the cache may be used for it:
/// its file on disk is the one mapped (same device and inode), and no
/// `-P`/`-U`/`-Z` selects functions (their plans depend on it).
fn key_of(
    c: &Config,
    m: &Loaded,
    use_debug_file: bool,
    imports: bool,
    is_main: bool,
) -> Option<Key> {
    if crate::recording::select::active() {
        return None;
    }
    let mut key = Key::of_file(&m.path)?;
    let mapped = crate::runtime::maps::mappings()
        .into_iter()
        .find(|x| x.start >= m.lo && x.start < m.hi && x.path.is_some())?;
    if (mapped.dev, mapped.inode) != (key.dev, key.ino) {
        return None;
    }
    key.agent = c.agent.clone();
    key.build_id = loaded_build_id(m).map(<[u8]>::to_vec).unwrap_or_default();
    key.variant = variant(use_debug_file, imports, is_main);
    if use_debug_file {
        key.debug = debug_identity(&m.path)?;
    }
    Some(key)
}

/// The identity of the separate debug file the analysis of the file at
/// `path` would take names from (zeros: none).
fn debug_identity(path: &str) -> Option<[u64; 4]> {
    let file = MappedFile::map(path).ok()?;
    let Some(found) =
        fctrace_symbols::debugfile::find_symbols(std::path::Path::new(path), file.bytes())
    else {
        return Some([0; 4]);
    };
    let k = Key::of_file(&found.to_string_lossy())?;
    Some([k.dev, k.ino, k.size, k.mtime_ns as u64])
}

/// Runs `f` on the analysis of module `m` (as `with_analysis` makes it)
/// and what the cache has for it: read from a valid entry (then its plans
/// too), else made, with a [`Pending`] entry for `f` to complete.
pub(super) fn with_module_analysis<R>(
    m: &Loaded,
    use_debug_file: bool,
    imports: bool,
    is_main: bool,
    f: impl FnOnce(&ElfInfo, &[FuncRef], &mut Cached) -> Result<R, String>,
) -> Result<R, String> {
    let config = config();
    let key = config
        .as_ref()
        .and_then(|c| key_of(c, m, use_debug_file, imports, is_main));
    if let (Some(c), Some(key)) = (&config, &key) {
        // (No error is formatted here: see `MappedFile::map`.)
        if let Ok(file) = MappedFile::map(&format!("{}/{}", c.dir, key.file_name())) {
            if let Some((info, funcs, plans)) = read_entry(file.bytes(), key, m) {
                return f(&info, &funcs, &mut Cached::Hit(plans));
            }
        }
    }
    with_analysis(&m.path, use_debug_file, imports, |info, funcs| {
        let pending = config.zip(key).map(|(c, key)| {
            let mut payload = Writer::default();
            startcache::encode_analysis(info, funcs, &mut payload);
            Pending {
                key,
                out: c.out,
                payload,
            }
        });
        f(info, funcs, &mut Cached::Miss(pending))
    })
}

/// The analysis and plans of an entry's bytes, if it is whole, for `key`
/// and fits module `m` (every patch inside its loaded span).
#[allow(clippy::type_complexity)]
fn read_entry<'a>(
    file: &'a [u8],
    key: &Key,
    m: &Loaded,
) -> Option<(ElfInfo, Vec<FuncRef<'a>>, Plans)> {
    let (found, payload) = startcache::open(file)?;
    if found != *key {
        return None;
    }
    let mut r = Reader::new(payload);
    let (info, funcs) = startcache::decode_analysis(&mut r)?;
    let plans = decode_plans(&mut r, m, funcs.len())?;
    r.done().then_some((info, funcs, plans))
}

impl Pending {
    /// Completes the entry with the module's plans (`base`: the module's
    /// load address, taken off every address) and leaves it for the
    /// recorder. A failure only means no entry: the cache is an
    /// optimisation.
    pub(super) fn finish(mut self, plans: &Plans, base: u64) {
        encode_plans(&mut self.payload, plans, base);
        let bytes = startcache::seal(&self.key, &self.payload.0);
        let _ = std::fs::create_dir_all(&self.out);
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let name = self.key.file_name();
        let part = format!("{}/{pid}.{name}.part", self.out);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&part)?;
            f.write_all(&bytes)?;
            std::fs::rename(&part, format!("{}/{pid}.{name}", self.out))
        };
        if write().is_err() {
            let _ = std::fs::remove_file(&part);
        }
    }
}

/// Appends the plans, addresses relative to `base`.
fn encode_plans(w: &mut Writer, plans: &Plans, base: u64) {
    w.u32(plans.list.len() as u32);
    for (k, (size, plan, _)) in plans.list.iter().enumerate() {
        w.u64(*size);
        match plan {
            Err(why) => {
                w.u8(0);
                w.str(why);
            }
            Ok(p) => {
                w.u8(1);
                w.u64(p.patch_at.wrapping_sub(base));
                w.u32(p.patch_len as u32);
                w.u64(p.moved_at.wrapping_sub(base));
                w.u32(p.moved_len as u32);
                w.u32(p.moved_count as u32);
                w.u8(p.verbatim as u8 | (p.trap as u8) << 1);
                for a in [p.resume, p.trampoline] {
                    w.u8(a.is_some() as u8);
                    w.u64(a.map_or(0, |a| a.wrapping_sub(base)));
                }
                w.bytes(plans.moved_of(k));
            }
        }
    }
}

/// The longest a patch or the instructions it moves may be (a function's
/// code is planned 4 KiB at most; the instructions moved may run up to a
/// branch inside them: python3.11 has a plan that moves 128 bytes).
const MAX_PATCH: usize = 4096;

/// The plans [`encode_plans`] wrote, rebased onto module `m`, if they are
/// `n` and each lies in the module's span.
fn decode_plans(r: &mut Reader, m: &Loaded, n: usize) -> Option<Plans> {
    if r.u32()? as usize != n {
        return None;
    }
    let inside =
        |a: u64, len: usize| a >= m.lo && a.checked_add(len as u64).is_some_and(|e| e <= m.hi);
    let mut plans = Plans {
        list: Vec::with_capacity(n),
        moved: Vec::with_capacity(n * 8),
    };
    for _ in 0..n {
        let size = r.u64()?;
        let at = plans.moved.len();
        let plan = match r.u8()? {
            0 => Err(r.str()?.to_string()),
            1 => {
                let patch_at = m.base.wrapping_add(r.u64()?);
                let patch_len = r.u32()? as usize;
                let moved_at = m.base.wrapping_add(r.u64()?);
                let moved_len = r.u32()? as usize;
                let moved_count = r.u32()? as usize;
                let bits = r.u8()?;
                let mut opt = || -> Option<Option<u64>> {
                    let some = r.flag()?;
                    let a = m.base.wrapping_add(r.u64()?);
                    Some(some.then_some(a))
                };
                let (resume, trampoline) = (opt()?, opt()?);
                let moved = r.bytes()?;
                let ok = bits <= 3
                    && patch_len <= MAX_PATCH
                    && moved_len <= MAX_PATCH
                    && inside(patch_at, patch_len)
                    && trampoline.is_none_or(|t| inside(t, 5))
                    && (moved_count == 0
                        || (moved.len() == moved_len && inside(moved_at, moved_len)));
                if !ok {
                    return None;
                }
                plans.moved.extend_from_slice(moved);
                Ok(Plan {
                    patch_at,
                    patch_len,
                    moved_at,
                    moved_len,
                    moved_count,
                    verbatim: bits & 1 != 0,
                    resume,
                    trampoline,
                    trap: bits & 2 != 0,
                })
            }
            _ => return None,
        };
        plans.list.push((size, plan, at));
    }
    Some(plans)
}
