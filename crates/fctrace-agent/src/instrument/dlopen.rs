//! Libraries loaded and unloaded at run time (`dlopen`, `dlclose`), with
//! -l: a hook on the dynamic linker's notification function instruments
//! the new ones and forgets those that are gone (their arenas reused).

use super::loaded::{forget_spans, loaded_modules, read_code, Loaded};
use super::modules::{instrument_library, is_instrumentable_lib};
use super::session::{publish, Session};
use super::stubs::protect;
use crate::arch::x86_64::arena::Arena;
use crate::runtime::{journal, loader};
use std::sync::atomic::Ordering;

/// A library that was instrumented (or found not instrumentable).
pub(super) struct Known {
    base: u64,
    /// Its loaded segments' range.
    lo: u64,
    hi: u64,
    path: String,
    /// The first bytes of one patched entry, as patched: a library unloaded
    /// and loaded again at the same address has them unpatched.
    probe: Option<(u64, [u8; 8])>,
}

impl Known {
    pub(super) fn new(m: &Loaded, entries: &[u64]) -> Known {
        let probe = entries
            .iter()
            .find(|&&a| a >= m.lo && a + 8 <= m.hi)
            .map(|&a| (a, read_probe(a)));
        Known {
            base: m.base,
            lo: m.lo,
            hi: m.hi,
            path: m.path.clone(),
            probe,
        }
    }

    /// Whether `m` (a module loaded now) is still the object this was made
    /// from.
    fn is(&self, m: &Loaded) -> bool {
        if self.base != m.base || self.path != m.path {
            return false;
        }
        match self.probe {
            Some((a, bytes)) => a >= m.lo && a + 8 <= m.hi && safe_read8(a) == Some(bytes),
            None => true,
        }
    }
}

/// Reads 8 bytes that may be unmapped or inaccessible (another file
/// loaded at the same address may have a gap there) without faulting.
fn safe_read8(a: u64) -> Option<[u8; 8]> {
    let mut b = [0u8; 8];
    let local = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: a as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads this process's memory through the kernel, which checks
    // the source range; the destination is our own buffer.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(b)
}

fn read_probe(a: u64) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(read_code(a, 8));
    b
}

/// What instrumenting libraries later needs from the start-up.
struct Runtime {
    s: Session,
    known: Vec<Known>,
    me: String,
    interp: Option<String>,
    /// The process whose session this is: a fork child shares the parent's
    /// symbol table file but not its id counter, so it adds nothing to it
    /// (it moves to a session of its own first: [`own_session`]).
    pid: u32,
    /// A fork child that could not have a session of its own.
    refused: u32,
}

static RUNTIME: std::sync::Mutex<Option<Runtime>> = std::sync::Mutex::new(None);

/// After the start-up: keeps the session (its symbol table grows with
/// the functions of an embedded Python interpreter, `instrument::python`)
/// and, with -l (`nest`), hooks the dynamic linker's notification
/// (`modules`: the objects loaded then) and keeps the libraries
/// instrumented so far for it.
pub(super) fn follow(
    modules: &[Loaded],
    s: Session,
    known: Vec<Known>,
    me: &str,
    interp: Option<String>,
    pid: u32,
    nest: bool,
) {
    let hooked = if nest {
        install_load_hook(modules, &interp)
    } else {
        Ok(())
    };
    if let Err(e) = hooked {
        crate::runtime::log::warn(&format!(
            "libraries loaded later (dlopen) will not be traced: {e}"
        ));
    }
    let mut rt = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    *rt = Some(Runtime {
        s,
        known,
        me: me.to_string(),
        interp,
        pid,
        refused: 0,
    });
}

/// Runs `f` on the session kept after the start-up (None before it ends,
/// and in a fork child that could not have a session of its own).
pub(super) fn with_session<R>(f: impl FnOnce(&mut Session) -> R) -> Option<R> {
    let mut guard = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = guard.as_mut()?;
    own_session(rt).then(|| f(&mut rt.s))
}

/// Whether this process may add to the session: the one that started it,
/// or a fork child once it moved to a session of its own (a fork child
/// shares its parent's symbol table file but not its id counter), which
/// happens here, at the child's first need.
fn own_session(rt: &mut Runtime) -> bool {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    if me == rt.pid {
        return true;
    }
    if me == rt.refused {
        return false;
    }
    let Some(shm) = crate::runtime::shm::get() else {
        return false;
    };
    let sid = shm.header().next_session.fetch_add(1, Ordering::Relaxed);
    let parent = crate::runtime::shm::session();
    match super::session::move_to_child_session(&mut rt.s, parent, sid, me) {
        Ok(()) => {
            crate::runtime::thread::move_process_to_session(shm, sid);
            rt.pid = me;
            true
        }
        Err(e) => {
            crate::runtime::log::warn(&format!(
                "process {me} (forked): functions and libraries it meets from now on are not \
                 traced: {e}"
            ));
            rt.refused = me;
            false
        }
    }
}

/// Detaching (`fctrace -p`): the instrumentation's state is dropped (its
/// code is gone: `runtime::journal::undo`); no function has a return site.
pub fn detach() {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner()).take();
    crate::runtime::frames::set_ret_sites(Vec::new());
}

/// Makes the dynamic linker's notification function (`_r_debug.r_brk`,
/// `_dl_debug_state`, where debuggers put a breakpoint) jump to
/// [`on_link_map_change`]. It is called once the objects of a `dlopen`
/// are mapped, before they are relocated and their constructors run, and
/// once the objects of a `dlclose` are unmapped.
fn install_load_hook(modules: &[Loaded], interp: &Option<String>) -> Result<(), String> {
    // SAFETY: _r_debug is the dynamic linker's initialised structure.
    let brk = unsafe { (*loader::r_debug()).r_brk };
    let ld = modules
        .iter()
        .find(|m| Some(&m.path) == interp.as_ref() && (m.lo..m.hi).contains(&brk))
        .or_else(|| modules.iter().find(|m| (m.lo..m.hi).contains(&brk)))
        .ok_or("the dynamic linker's notification function is in no module")?;
    if brk + 32 > ld.hi {
        return Err("unexpected notification function".into());
    }
    let code = read_code(brk, 32);
    // [endbr64] ret, then at least 4 bytes of padding to hold a jmp rel32.
    let at = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        4
    } else {
        0
    };
    if code[at] != 0xc3 {
        return Err("the notification function is not a bare return".into());
    }
    let mut dec = iced_x86::Decoder::with_ip(64, &code[at + 1..], brk + at as u64 + 1, 0);
    let mut covered = 0usize;
    while covered < 4 {
        let i = dec.decode();
        if i.is_invalid()
            || !matches!(
                i.mnemonic(),
                iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Int3
            )
        {
            return Err("no padding after the notification function".into());
        }
        covered += i.len();
    }
    let mut arena = Arena::near(ld.lo, ld.hi, 4096).ok_or("no free address space near ld.so")?;
    let mut tramp = vec![0xff, 0x25, 0, 0, 0, 0];
    tramp.extend_from_slice(&(on_link_map_change as *const () as u64).to_le_bytes());
    let t = arena.put(&tramp);
    arena.seal();
    let from = brk + at as u64;
    let rel = t as i64 - (from as i64 + 5);
    let rel = i32::try_from(rel).map_err(|_| "trampoline out of reach")?;
    let mut jmp = [0xe9, 0, 0, 0, 0];
    jmp[1..].copy_from_slice(&rel.to_le_bytes());
    let end = from + jmp.len() as u64;
    protect(
        from,
        end,
        libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
    )?;
    journal::before_write(from, jmp.len());
    // SAFETY: the bytes were made writable above; they are padding after
    // the notification function, which nothing runs.
    unsafe { std::ptr::copy_nonoverlapping(jmp.as_ptr(), from as *mut u8, jmp.len()) };
    protect(from, end, libc::PROT_READ | libc::PROT_EXEC)
}

/// The dynamic linker changed its list of objects (it holds its load lock:
/// calls are serialised). Instruments the libraries new to the base
/// namespace and forgets those that are gone.
extern "C" fn on_link_map_change() {
    let _busy = crate::runtime::tls::Busy::enter();
    // SAFETY: reading the state field of the dynamic linker's structure.
    if unsafe { (*loader::r_debug()).r_state } != loader::RT_CONSISTENT {
        return;
    }
    forget_spans();
    let _ = std::panic::catch_unwind(|| {
        let mut guard = match RUNTIME.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(rt) = guard.as_mut() {
            sync_modules(rt);
        }
    });
}

fn sync_modules(rt: &mut Runtime) {
    if !own_session(rt) {
        return;
    }
    let modules = loaded_modules();
    let (kept, gone): (Vec<Known>, Vec<Known>) = std::mem::take(&mut rt.known)
        .into_iter()
        .partition(|k| modules.iter().any(|m| k.is(m)));
    rt.known = kept;
    for k in gone {
        // Its int3s are gone with it (another object may be loaded there),
        // and the ways into its functions.
        crate::interpose::signal::drop_traps(k.base);
        crate::runtime::real::clear_bypasses(k.lo, k.hi);
        let s = &mut rt.s;
        let mut i = 0;
        while i < s.arenas.len() {
            if s.arenas[i].0 == k.path && s.arenas[i].1 == k.base {
                let (path, base, at, size) = s.arenas.swap_remove(i);
                let arena = Arena {
                    base: at,
                    size,
                    used: 0,
                };
                s.free_arenas.push((path, base, arena));
            } else {
                i += 1;
            }
        }
    }
    let mut changed = false;
    for m in modules.iter().skip(1) {
        if !is_instrumentable_lib(m, &rt.me, &rt.interp)
            || rt
                .known
                .iter()
                .any(|k| k.base == m.base && k.path == m.path)
        {
            continue;
        }
        let entries = match instrument_library(&mut rt.s, m) {
            Ok(e) => e,
            Err(e) => {
                crate::runtime::log::warn(&format!("{}: {e}", m.path));
                Vec::new()
            }
        };
        if let Err(e) = super::sdt::patch_probes(&mut rt.s, m) {
            crate::runtime::log::warn(&format!("-E: {}: {e}", m.path));
        }
        rt.known.push(Known::new(m, &entries));
        changed = true;
    }
    if changed {
        if let Err(e) = publish(&mut rt.s) {
            crate::runtime::log::warn(&format!("cannot write the symbol table: {e}"));
        }
    }
}
