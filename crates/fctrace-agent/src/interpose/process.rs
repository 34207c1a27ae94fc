//! New programs and new tasks: `exec`, `posix_spawn`, `system`, `popen`,
//! `vfork` and thread creation.
//!
//! The agent removes its variables from the environment before the program
//! runs, so a program that `exec`s gets an environment without them. The
//! agent therefore defines the exec family, `posix_spawn`/`posix_spawnp`,
//! `system` and `popen` itself and passes the real functions an environment with
//! the agent's variables (and `LD_PRELOAD`) put back, plus the task slot of
//! the thread that asked (`FCTRACE_PARENT`): the new program image starts
//! its own session, and its first task names that slot as its parent.
//!
//! These interposers may run in the child of `vfork` (or of the `CLONE_VM`
//! child of a spawn), which shares the parent's memory: they allocate
//! nothing from the heap (the environment is composed on the stack, or in
//! a private mapping when it is very large) and leave the thread's state
//! alone unless the process is the one that owns it.
//!
//! `pthread_create` is interposed to learn each thread's creator: the new
//! thread starts in a small trampoline that notes the parent's slot and
//! jumps (not calls) to the real start routine, so the thread's stack and
//! backtraces are as without fctrace.

use crate::interpose::unwind;
use crate::real;
use crate::runtime::{alloc, buffer, shm, thread, tls};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The variables the recorder (or a traced process, for a program it
/// executes) passes the agent; taken out of the environment at start-up.
pub(crate) const ENV_SHM: &str = "FCTRACE_SHM";
pub(crate) const ENV_DIR: &str = "FCTRACE_DIR";
pub(crate) const ENV_OPTIONS: &str = "FCTRACE_OPTIONS";
pub const ENV_PARENT: &str = "FCTRACE_PARENT";

/// What a new program image needs to be traced, as `KEY=value` strings.
struct Inject {
    /// The shared memory's path (`/proc/<recorder>/fd/N`).
    shm_path: Vec<u8>,
    dir: Vec<u8>,
    /// The agent's path, first in the new `LD_PRELOAD`.
    agent: Vec<u8>,
    /// `FCTRACE_OPTIONS=...` (filters, triggers: `crate::recording::filter`), empty
    /// when there are none.
    opts: Vec<u8>,
    /// Descriptors of the agent file and the shared memory, for a program
    /// executed where those paths do not lead (a new mount namespace with
    /// its own /proc): handed to it as `/proc/self/fd/N`.
    kept: [Kept; 2],
    /// The trace directory.
    dir_path: Vec<u8>,
}

/// A close-on-exec descriptor the agent keeps, and the file it must still
/// be when used (the program may have closed it and reused its number).
#[derive(Clone, Copy)]
struct Kept {
    fd: c_int,
    dev: u64,
    ino: u64,
}

impl Kept {
    /// Opens `path` on a high descriptor number, close-on-exec.
    fn open(path: &str) -> Option<Kept> {
        let c = std::ffi::CString::new(path).ok()?;
        // SAFETY: open/fcntl/fstat/close on a descriptor of our own.
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let mut lim: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            let top = lim.rlim_cur.min(65536) as c_int;
            let mut high = if top > 64 {
                libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top - 32)
            } else {
                -1
            };
            if high < 0 {
                high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
            }
            libc::close(fd);
            if high < 0 {
                return None;
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(high, &mut st) != 0 {
                libc::close(high);
                return None;
            }
            Some(Kept {
                fd: high,
                dev: st.st_dev,
                ino: st.st_ino,
            })
        }
    }

    /// A new inheritable descriptor of the file, if the kept one is still
    /// it.
    fn dup_inheritable(&self) -> Option<c_int> {
        if self.fd < 0 {
            return None;
        }
        let _busy = tls::Busy::enter();
        // SAFETY: fstat into a local; F_DUPFD makes a new descriptor the
        // caller closes (or the exec passes on).
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(self.fd, &mut st) != 0 || st.st_dev != self.dev || st.st_ino != self.ino
            {
                return None;
            }
            let d = libc::fcntl(self.fd, libc::F_DUPFD, 3);
            (d >= 0).then_some(d)
        }
    }
}

const NO_KEPT: Kept = Kept {
    fd: -1,
    dev: 0,
    ino: 0,
};

/// How to trace programs this process executes (null: untraced, or
/// detached); replaced at each attach (`fctrace -p`), freed at a detach.
static INJECT: std::sync::atomic::AtomicPtr<Inject> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

fn inject() -> Option<&'static Inject> {
    // SAFETY: set to a leaked Box, freed only by `detach` while no other
    // thread runs the agent's code.
    unsafe { INJECT.load(std::sync::atomic::Ordering::Acquire).as_ref() }
}

/// Detaching: programs executed from now on are not traced; the kept
/// descriptors are closed.
pub fn detach() {
    let p = INJECT.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::AcqRel);
    if p.is_null() {
        return;
    }
    // SAFETY: the Box `init` leaked; no other thread runs the agent's code
    // (the caller's precondition).
    let inj = unsafe { Box::from_raw(p) };
    for k in inj.kept {
        if k.fd >= 0 {
            // SAFETY: the agent's own descriptor, if it is still that file.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(k.fd, &mut st) == 0 && st.st_dev == k.dev && st.st_ino == k.ino {
                    libc::close(k.fd);
                }
            }
        }
    }
}

/// The descriptor number of a `/proc/self/fd/N` path.
fn self_fd(path: &str) -> Option<c_int> {
    path.strip_prefix("/proc/self/fd/")?.parse().ok()
}

/// Remembers how to trace programs this process executes. `agent` is the
/// path the agent was preloaded from. A program started in a new mount
/// namespace got both files as inherited descriptors (`/proc/self/fd/N`):
/// they are closed here, the program does not see them.
pub fn init(shm_path: &str, dir: &str, agent: &str, opts: &str) {
    let kept = [
        Kept::open(agent).unwrap_or(NO_KEPT),
        Kept::open(shm_path).unwrap_or(NO_KEPT),
    ];
    for p in [agent, shm_path] {
        if let Some(fd) = self_fd(p) {
            // SAFETY: the descriptor the exec'ing agent passed on for us;
            // nothing of the program has run yet.
            unsafe { libc::close(fd) };
        }
    }
    let new = Box::leak(Box::new(Inject {
        shm_path: shm_path.as_bytes().to_vec(),
        dir: format!("{}={dir}", ENV_DIR).into_bytes(),
        agent: agent.as_bytes().to_vec(),
        opts: if opts.is_empty() {
            Vec::new()
        } else {
            format!("{}={opts}", ENV_OPTIONS).into_bytes()
        },
        kept,
        dir_path: dir.as_bytes().to_vec(),
    }));
    let old = INJECT.swap(new, std::sync::atomic::Ordering::AcqRel);
    debug_assert!(old.is_null());
}

/// Whether `path` (a NUL-free byte string) names an existing file here.
fn reachable(path: &[u8]) -> bool {
    let mut buf = [0u8; 256];
    if path.len() >= buf.len() {
        return true;
    }
    buf[..path.len()].copy_from_slice(path);
    // The agent's own question (with -l, libc's stat is traced).
    let _busy = tls::Busy::enter();
    // SAFETY: a NUL-terminated path in a local buffer; stat into a local.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(buf.as_ptr().cast(), &mut st) == 0
    }
}

/// The paths a new program finds the agent and the shared memory at: the
/// usual ones, or, where they do not lead, inheritable descriptors made
/// for it (closed by `Paths::close` if it does not start).
struct Paths {
    /// Descriptor numbers in decimal, when descriptors are passed.
    fds: Option<[c_int; 2]>,
}

impl Paths {
    fn choose(inj: &Inject) -> Paths {
        if reachable(&inj.agent) && reachable(&inj.shm_path) {
            return Paths { fds: None };
        }
        let Some(a) = inj.kept[0].dup_inheritable() else {
            return Paths { fds: None };
        };
        let Some(s) = inj.kept[1].dup_inheritable() else {
            // SAFETY: the descriptor made just above.
            unsafe { libc::close(a) };
            return Paths { fds: None };
        };
        Paths { fds: Some([a, s]) }
    }

    fn close(&self) {
        if let Some(fds) = self.fds {
            for fd in fds {
                // SAFETY: descriptors `choose` made for a new program.
                unsafe { libc::close(fd) };
            }
        }
    }
}

// ---------------------------------------------------------------- scratch

/// Bytes composed on the stack when they fit, else in a private mapping
/// (only for unusually large environments; it is unmapped if the exec
/// fails, and vanishes with the old image if it succeeds).
fn with_scratch<R>(need: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    const STACK: usize = 16 * 1024;
    if need <= STACK {
        let mut buf = [0u8; STACK];
        return f(&mut buf[..]);
    }
    let p = alloc::map(need);
    if p.is_null() {
        return f(&mut []);
    }
    // SAFETY: the mapping is `need` bytes, ours alone until unmapped below.
    let r = f(unsafe { std::slice::from_raw_parts_mut(p, need) });
    let _busy = tls::Busy::enter();
    // SAFETY: unmapping the mapping made above; nothing refers to it any more.
    unsafe { libc::munmap(p.cast(), need) };
    r
}

/// A bump allocator over a scratch buffer: pointer arrays and strings.
struct Bump<'a> {
    buf: &'a mut [u8],
    used: usize,
}

impl Bump<'_> {
    fn take(&mut self, len: usize, align: usize) -> Option<*mut u8> {
        let base = self.buf.as_mut_ptr() as usize;
        let start = (base + self.used).next_multiple_of(align) - base;
        if start + len > self.buf.len() {
            return None;
        }
        self.used = start + len;
        // SAFETY: within the buffer.
        Some(unsafe { self.buf.as_mut_ptr().add(start) })
    }

    /// A NUL-terminated string made of `parts`.
    fn string(&mut self, parts: &[&[u8]]) -> Option<*const c_char> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let p = self.take(len + 1, 1)?;
        let mut o = 0;
        for part in parts {
            // SAFETY: `p` has len + 1 bytes; the parts fill exactly len.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), p.add(o), part.len()) };
            o += part.len();
        }
        // SAFETY: the last byte of the reservation.
        unsafe { *p.add(len) = 0 };
        Some(p as *const c_char)
    }
}

/// The entries of a NULL-terminated string array.
///
/// # Safety
/// `v` is null or a valid NULL-terminated array of C strings.
unsafe fn entries<'a>(v: *const *const c_char) -> impl Iterator<Item = &'a [u8]> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if v.is_null() {
            return None;
        }
        // SAFETY: the caller promises a NULL-terminated array.
        let p = unsafe { *v.add(i) };
        if p.is_null() {
            return None;
        }
        i += 1;
        // SAFETY: each entry is a C string.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    })
}

fn is_ours(entry: &[u8]) -> bool {
    entry.starts_with(b"FCTRACE_")
}

/// The program an exec or spawn starts, to find the sanitizer runtime it
/// needs (`read_image`).
#[derive(Clone, Copy)]
enum Image {
    /// A path; searched in PATH (as execvp does) if the flag is set.
    Path(*const c_char, bool),
    /// An open file (`fexecve`).
    Fd(c_int),
    /// A path relative to a directory descriptor (`execveat`; an empty
    /// path is the descriptor itself).
    At(c_int, *const c_char),
}

/// Calls `f` with a descriptor of the program `image` (open for reading,
/// closed afterwards if opened here). Allocates nothing (a vfork child may
/// run this).
fn with_image<R>(image: Image, f: impl FnOnce(c_int) -> Option<R>) -> Option<R> {
    // The agent's own work (with -l, libc's open and pread are traced).
    let _busy = tls::Busy::enter();
    let mut found = [0u8; 4096];
    // SAFETY: open/close with the program's C strings and a local buffer;
    // a descriptor opened here is closed here.
    unsafe {
        let (fd, own) = match image {
            Image::Fd(fd) => (fd, false),
            Image::At(dir, p) if !p.is_null() && *p == 0 => (dir, false),
            Image::At(dir, p) => (libc::openat(dir, p, libc::O_RDONLY | libc::O_CLOEXEC), true),
            Image::Path(file, search) => {
                let p = find_program(file, search, &mut found);
                if p.is_null() {
                    return None;
                }
                (libc::open(p, libc::O_RDONLY | libc::O_CLOEXEC), true)
            }
        };
        if fd < 0 {
            return None;
        }
        let r = f(fd);
        if own {
            libc::close(fd);
        }
        r
    }
}

/// `read_at` for the readers of `fctrace_symbols`: `buf` filled from `fd`
/// at `at`.
fn read_fd(fd: c_int, at: u64, buf: &mut [u8]) -> bool {
    // SAFETY: pread into a buffer of its length.
    unsafe {
        libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), at as libc::off_t) == buf.len() as isize
    }
}

/// What the agent must know of the program `image` an exec starts, read
/// from one descriptor of it: whether musl's dynamic loader starts it
/// (it cannot load the agent, a glibc library, and would end the program
/// with status 127 before its code runs), and the sanitizer runtime it
/// names in its `DT_NEEDED` entries (`fctrace_symbols::sanitizer`), its
/// length in `sanitizer`. Allocates nothing (a vfork child may run this).
fn read_image(image: Image, sanitizer: &mut [u8; 128]) -> (bool, Option<usize>) {
    let mut interp = [0u8; 256];
    with_image(image, |fd| {
        let read = |at, buf: &mut [u8]| read_fd(fd, at, buf);
        let musl = fctrace_symbols::loader::interpreter(read, &mut interp)
            .is_some_and(|n| fctrace_symbols::loader::is_musl(&interp[..n]));
        Some((
            musl,
            fctrace_symbols::sanitizer::needed_runtime(read, sanitizer),
        ))
    })
    .unwrap_or((false, None))
}

/// Calls `f` with `envp` plus the agent's variables; with `envp` itself
/// when the agent is not set up (or the environment cannot be composed).
///
/// # Safety
/// `envp` is null or a valid environment array.
unsafe fn with_env<R>(
    envp: *const *const c_char,
    image: Image,
    f: impl FnOnce(*const *const c_char) -> R,
) -> R {
    let Some(inj) = inject() else {
        return f(envp);
    };
    // The agent's variables are gone from the program's environment: a
    // program that passes its own `FCTRACE_SHM` is another fctrace, which
    // records what it runs into a trace of its own (fctrace tracing
    // fctrace). That program is its, with its agent: not traced here.
    // With `LD_TRACE_LOADED_OBJECTS` (`ldd`), the dynamic loader only lists
    // the objects it would load: it runs no program, and would list the
    // agent and its libraries too.
    // SAFETY: the caller's environment array.
    if unsafe { entries(envp) }
        .any(|e| e.starts_with(b"FCTRACE_SHM=") || e.starts_with(b"LD_TRACE_LOADED_OBJECTS="))
    {
        return f(envp);
    }
    // A musl program runs as it would without fctrace, untraced (said in
    // the trace): musl's loader cannot load the agent.
    let mut san_name = [0u8; 128];
    let (musl, needed_san) = read_image(image, &mut san_name);
    if musl {
        note_musl(image);
        return f(envp);
    }
    let parent = parent_slot();
    let mut count = 0usize;
    let mut bytes = 0usize;
    let mut user_preload: Option<&[u8]> = None;
    // SAFETY: the caller's environment array.
    for e in unsafe { entries(envp) } {
        count += 1;
        bytes += e.len();
        if let Some(v) = e.strip_prefix(b"LD_PRELOAD=") {
            user_preload = Some(v);
        }
    }
    let preload_len = user_preload.map_or(0, |v| v.len());
    // A sanitizer runtime comes before the agent (ASan checks that its
    // runtime is first): the user's first entry if it is one, else, when
    // the user preloads nothing, the one the new program needs.
    let (user_first, user_rest) =
        fctrace_symbols::sanitizer::split_first(user_preload.unwrap_or(b""));
    let san: &[u8] = if fctrace_symbols::sanitizer::is_runtime(user_first) {
        user_first
    } else if user_first.is_empty() {
        needed_san.map_or(b"", |n| &san_name[..n])
    } else {
        b""
    };
    let user_rest: &[u8] = if san.is_empty() {
        user_preload.unwrap_or(b"")
    } else if user_first.is_empty() {
        b""
    } else {
        user_rest
    };
    let paths = Paths::choose(inj);
    let mut fd_digits = [[0u8; 20]; 2];
    let [agent_fd, shm_fd] = fd_digits.each_mut();
    let (agent_path, shm_path): (&[&[u8]], &[&[u8]]) = match paths.fds {
        Some([a, s]) => (
            &[
                b"/proc/self/fd/",
                fctrace_format::digits::decimal(a as u64, agent_fd),
            ],
            &[
                b"/proc/self/fd/",
                fctrace_format::digits::decimal(s as u64, shm_fd),
            ],
        ),
        None => (&[&inj.agent], &[&inj.shm_path]),
    };
    let need = (count + 8) * 8
        + 64
        + 32
        + inj.shm_path.len()
        + inj.dir.len()
        + inj.opts.len()
        + inj.agent.len()
        + 2 * preload_len
        + san.len()
        + 128
        + 16 * 4;
    let _ = bytes;
    let r = with_scratch(need, |buf| {
        let mut b = Bump { buf, used: 0 };
        let Some(arr) = b.take((count + 8) * 8, 8) else {
            return f(envp);
        };
        let arr = arr as *mut *const c_char;
        let mut n = 0;
        let mut push = |p: *const c_char| {
            // SAFETY: the array has room for count + 8 pointers, and at most
            // count + 7 are pushed before the final NULL.
            unsafe { *arr.add(n) = p };
            n += 1;
        };
        // SAFETY: the caller's environment array; entries are copied as pointers.
        let mut i = 0;
        if !envp.is_null() {
            loop {
                // SAFETY: NULL-terminated array.
                let p = unsafe { *envp.add(i) };
                if p.is_null() {
                    break;
                }
                i += 1;
                // SAFETY: a C string of the environment.
                if !is_ours(unsafe { CStr::from_ptr(p) }.to_bytes()) {
                    push(p);
                }
            }
        }
        let mut digits = [0u8; 20];
        let parent_s = parent.map(|s| fctrace_format::digits::decimal(u64::from(s), &mut digits));
        let made = (|| {
            let mut shm_parts: [&[u8]; 4] = [ENV_SHM.as_bytes(), b"=", b"", b""];
            shm_parts[2..2 + shm_path.len()].copy_from_slice(shm_path);
            let shm = b.string(&shm_parts)?;
            let dir = b.string(&[&inj.dir])?;
            let opts = if inj.opts.is_empty() {
                None
            } else {
                Some(b.string(&[&inj.opts])?)
            };
            // Last (the loader takes the last one; the new image's agent
            // removes it): the program's own LD_PRELOAD stays in place.
            let mut pre: [&[u8]; 7] = [b"LD_PRELOAD=", san, b"", b"", b"", b"", b""];
            if !san.is_empty() {
                pre[2] = b":";
            }
            pre[3..3 + agent_path.len()].copy_from_slice(agent_path);
            if !user_rest.is_empty() {
                pre[5] = b":";
                pre[6] = user_rest;
            }
            let preload = b.string(&pre)?;
            // "-": exec'd by a thread the agent has no state for.
            let par = b.string(&[ENV_PARENT.as_bytes(), b"=", parent_s.unwrap_or(b"-")])?;
            Some((shm, dir, opts, preload, par))
        })();
        let Some((shm, dir, opts, preload, par)) = made else {
            return f(envp);
        };
        push(shm);
        push(dir);
        if let Some(o) = opts {
            push(o);
        }
        push(par);
        push(preload);
        push(std::ptr::null());
        f(arr as *const *const c_char)
    });
    // The program did not start (or was spawned, with its own copies).
    paths.close();
    r
}

/// The task slot of the calling thread, when it has agent state.
fn parent_slot() -> Option<u32> {
    let p = tls::state();
    // SAFETY: a non-null state belongs to this thread (or, in a vfork
    // child, to the suspended parent thread: only read here).
    (!p.is_null()).then(|| unsafe { (*p).task_slot })
}

extern "C" {
    static mut environ: *const *const c_char;
}

fn current_environ() -> *const *const c_char {
    // SAFETY: reading the libc global; the program may change it only as
    // it always could.
    unsafe { environ }
}

// ------------------------------------------------- set-ID programs

/// Why the dynamic loader will ignore `LD_PRELOAD` for the program in
/// `path` (a NUL-terminated path): it runs with other credentials
/// ("secure execution": set-user-ID or set-group-ID to someone else, or
/// file capabilities for a user other than root), unless the file system
/// is mounted nosuid or the process has no_new_privs.
fn secure_exec_reason(path: *const c_char) -> Option<&'static [u8]> {
    // The agent's own question (with -l, libc's stat is traced).
    let _busy = tls::Busy::enter();
    // SAFETY: system calls with a valid path and local out-parameters.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(path, &mut st) != 0 {
            return None;
        }
        let (uid, gid) = (libc::getuid(), libc::getgid());
        let reason: &'static [u8] = if st.st_mode & libc::S_ISUID != 0 && st.st_uid != uid {
            b"set-user-ID"
        } else if st.st_mode & libc::S_ISGID != 0
            && st.st_mode & libc::S_IXGRP != 0
            && st.st_gid != gid
        {
            b"set-group-ID"
        } else if uid != 0
            && libc::getxattr(
                path,
                c"security.capability".as_ptr(),
                std::ptr::null_mut(),
                0,
            ) > 0
        {
            b"file capabilities"
        } else {
            return None;
        };
        // (glibc takes the flags from statfs: no allocation)
        let mut fs: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path, &mut fs) == 0 && fs.f_flag & libc::ST_NOSUID != 0 {
            return None;
        }
        if libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 {
            return None;
        }
        Some(reason)
    }
}

/// The program `file` names, searched in PATH as execvp does when it has
/// no slash, written NUL-terminated into `buf`; null if not found.
fn find_program(file: *const c_char, search: bool, buf: &mut [u8; 4096]) -> *const c_char {
    if file.is_null() {
        return std::ptr::null();
    }
    // SAFETY: the program's C string.
    let name = unsafe { CStr::from_ptr(file) }.to_bytes();
    if !search || name.contains(&b'/') {
        return file;
    }
    // SAFETY: the process's environment array.
    let path = unsafe { entries(current_environ()) }
        .find_map(|e| e.strip_prefix(b"PATH="))
        .unwrap_or(b"/bin:/usr/bin");
    for dir in path.split(|&c| c == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let len = dir.len() + 1 + name.len();
        if len >= buf.len() {
            continue;
        }
        buf[..dir.len()].copy_from_slice(dir);
        buf[dir.len()] = b'/';
        buf[dir.len() + 1..len].copy_from_slice(name);
        buf[len] = 0;
        // SAFETY: a NUL-terminated path in buf.
        if unsafe { libc::access(buf.as_ptr().cast(), libc::X_OK) } == 0 {
            return buf.as_ptr().cast();
        }
    }
    std::ptr::null()
}

/// Before a program is executed: if the dynamic loader will not load the
/// agent into it, note it in the trace (`sessions/untraced`, a line
/// `pid<TAB>path<TAB>reason`), which the recorder reports. Allocates
/// nothing (a vfork child may run this).
fn note_untraced(file: *const c_char, search: bool) {
    if inject().is_none() {
        return;
    }
    // The agent's own work (with -l, libc's access and stat are traced).
    let _busy = tls::Busy::enter();
    let mut found = [0u8; 4096];
    let path = find_program(file, search, &mut found);
    if path.is_null() {
        return;
    }
    let Some(reason) = secure_exec_reason(path) else {
        return;
    };
    // SAFETY: a C string (the program's, or composed in `found`).
    note_untraced_line(unsafe { CStr::from_ptr(path) }.to_bytes(), reason);
}

/// A musl program is executed: noted in the trace as `note_untraced` does
/// (reason `musl`). Allocates nothing.
fn note_musl(image: Image) {
    let _busy = tls::Busy::enter();
    let mut found = [0u8; 4096];
    let shown: &[u8] = match image {
        Image::Path(file, search) => {
            let p = find_program(file, search, &mut found);
            if p.is_null() {
                return;
            }
            // SAFETY: a C string (the program's, or composed in `found`).
            unsafe { CStr::from_ptr(p) }.to_bytes()
        }
        // SAFETY: the program's C string.
        Image::At(_, p) if !p.is_null() && unsafe { *p } != 0 => {
            // SAFETY: the same C string, checked non-null and non-empty above.
            unsafe { CStr::from_ptr(p) }.to_bytes()
        }
        _ => b"(a program given by its file descriptor)",
    };
    note_untraced_line(shown, b"musl");
}

/// Appends `pid<TAB>shown<TAB>reason` to the trace's `sessions/untraced`.
/// Allocates nothing.
fn note_untraced_line(shown: &[u8], reason: &[u8]) {
    let Some(inj) = inject() else { return };
    let mut name = [0u8; 4096];
    let tail: &[u8] = b"/sessions/untraced\0";
    if inj.dir_path.len() + tail.len() > name.len() {
        return;
    }
    name[..inj.dir_path.len()].copy_from_slice(&inj.dir_path);
    name[inj.dir_path.len()..inj.dir_path.len() + tail.len()].copy_from_slice(tail);
    let mut line = [0u8; 4200];
    let mut digits = [0u8; 20];
    // SAFETY: getpid has no preconditions.
    let pid = fctrace_format::digits::decimal(unsafe { libc::getpid() } as u64, &mut digits);
    let mut n = 0;
    for part in [pid, b"\t", shown, b"\t", reason, b"\n"] {
        let take = part.len().min(line.len() - n);
        line[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    // SAFETY: open/write/close with local buffers; the file is created
    // private, never through a symbolic link.
    unsafe {
        let fd = libc::open(
            name.as_ptr().cast(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        );
        if fd >= 0 {
            libc::write(fd, line.as_ptr().cast(), n);
            libc::close(fd);
        }
    }
}

// ---------------------------------------------------------- around exec

/// Before the process image is replaced: nothing is recorded on this
/// thread, and its buffer goes to the recorder now (if this process owns
/// the state: a vfork child shares its parent's and leaves it alone).
/// Returns whether `after_failed_exec` must take a buffer again.
fn before_exec() -> bool {
    tls::set_busy(tls::busy() + 1);
    let p = tls::state();
    let Some(shm) = shm::get() else { return false };
    if p.is_null() {
        return false;
    }
    // SAFETY: the state is this thread's; pid compared before any write.
    let st = unsafe { &mut *p };
    // (Its system calls are the agent's, for `record -k`.)
    let _marked = tls::Marked::span();
    // SAFETY: getpid has no preconditions (a system call: right in a vfork child).
    if unsafe { libc::getpid() } as u32 != st.pid {
        return false;
    }
    buffer::flush_buffer(shm, st);
    true
}

/// The exec failed and the program goes on.
fn after_failed_exec(flushed: bool) {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if flushed {
        let _marked = tls::Marked::span();
        if let (Some(shm), p) = (shm::get(), tls::state()) {
            if !p.is_null() {
                // SAFETY: this thread's state.
                let st = unsafe { &mut *p };
                if !buffer::take_next_buffer(shm, st) {
                    st.buf = shm::scratch_buffer();
                }
            }
        }
    }
    tls::set_busy(tls::busy().saturating_sub(1));
    // SAFETY: errno is thread-local; restoring the exec's error for the caller.
    unsafe { *libc::__errno_location() = errno };
}

type Argv = *const *const c_char;

fn exec_with(envp: Argv, image: Image, f: impl FnOnce(Argv) -> c_int) -> c_int {
    // SAFETY: envp comes from the program as an environment array.
    unsafe {
        with_env(envp, image, |e| {
            let flushed = before_exec();
            let r = f(e);
            after_failed_exec(flushed);
            r
        })
    }
}

type ExecveFn = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
type ExecveatFn = unsafe extern "C" fn(c_int, *const c_char, Argv, Argv, c_int) -> c_int;

/// # Safety
/// As execve(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    note_untraced(path, false);
    // SAFETY: forwarding to the real function of the same C signature.
    exec_with(envp, Image::Path(path, false), |e| unsafe {
        real!("execve", ExecveFn)(path, argv, e)
    })
}

/// # Safety
/// As execv(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    note_untraced(path, false);
    // SAFETY: execv(p, a) is execve(p, a, environ).
    exec_with(current_environ(), Image::Path(path, false), |e| unsafe {
        real!("execve", ExecveFn)(path, argv, e)
    })
}

/// # Safety
/// As execvp(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    note_untraced(file, true);
    // SAFETY: execvp(f, a) is execvpe(f, a, environ).
    exec_with(current_environ(), Image::Path(file, true), |e| unsafe {
        real!("execvpe", ExecveFn)(file, argv, e)
    })
}

/// # Safety
/// As execvpe(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    note_untraced(file, true);
    // SAFETY: forwarding to the real function of the same C signature.
    exec_with(envp, Image::Path(file, true), |e| unsafe {
        real!("execvpe", ExecveFn)(file, argv, e)
    })
}

/// # Safety
/// As fexecve(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    // SAFETY: forwarding to the real function of the same C signature.
    exec_with(envp, Image::Fd(fd), |e| unsafe {
        real!("fexecve", FexecveFn)(fd, argv, e)
    })
}

/// # Safety
/// As execveat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarding to the real function of the same C signature.
    exec_with(envp, Image::At(dirfd, path), |e| unsafe {
        real!("execveat", ExecveatFn)(dirfd, path, argv, e, flags)
    })
}

// The variadic execl family: an assembly entry stores the six argument
// registers next to the caller's stack arguments and passes both areas to
// `execl_common`, which collects the argument list (and execle's envp).
// Which entry: 0 execl, 1 execlp, 2 execle.
const EXECLP: u64 = 1;
const EXECLE: u64 = 2;

macro_rules! execl_entry {
    ($name:ident, $which:literal) => {
        /// The variadic exec: see `execl_common`.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() {
            core::arch::naked_asm!(
                // [rsp] = return address, [rsp+8..] = stack arguments.
                "sub rsp, 56",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp + 64]",
                concat!("mov ecx, ", $which),
                "call {common}",
                "add rsp, 56",
                "ret",
                common = sym execl_common,
            );
        }
    };
}

execl_entry!(execl, 0);
execl_entry!(execlp, 1);
execl_entry!(execle, 2);

/// The argument at position `i` (0 = argv[0]) of an execl-style list.
///
/// # Safety
/// `regs` holds the 5 register arguments after the path, `stack` the
/// caller's stack arguments; `i` is within the list the caller passed.
unsafe fn vararg(
    regs: *const *const c_char,
    stack: *const *const c_char,
    i: usize,
) -> *const c_char {
    // SAFETY: see the function's contract.
    unsafe {
        if i < 5 {
            *regs.add(i)
        } else {
            *stack.add(i - 5)
        }
    }
}

/// # Safety
/// Called only by the assembly entries above with the caller's arguments.
unsafe extern "C" fn execl_common(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    which: u64,
) -> c_int {
    // SAFETY: the list is NULL-terminated, as execl(3) requires.
    let argc = (0..)
        .find(|&i| unsafe { vararg(regs, stack, i) }.is_null())
        .unwrap_or(0);
    let envp = if which == EXECLE {
        // SAFETY: execle's environment follows the terminating NULL.
        unsafe { vararg(regs, stack, argc + 1) as Argv }
    } else {
        current_environ()
    };
    with_scratch((argc + 1) * 8 + 16, |buf| {
        let mut b = Bump { buf, used: 0 };
        let Some(arr) = b.take((argc + 1) * 8, 8) else {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::E2BIG };
            return -1;
        };
        let arr = arr as *mut *const c_char;
        for i in 0..=argc {
            // SAFETY: arr has argc + 1 entries; the list has argc + 1 (with NULL).
            unsafe { *arr.add(i) = vararg(regs, stack, i) };
        }
        let argv = arr as Argv;
        note_untraced(path, which == EXECLP);
        // SAFETY: forwarding to the real exec of the matching vector form.
        exec_with(envp, Image::Path(path, which == EXECLP), |e| unsafe {
            if which == EXECLP {
                real!("execvpe", ExecveFn)(path, argv, e)
            } else {
                real!("execve", ExecveFn)(path, argv, e)
            }
        })
    })
}

// ---------------------------------------------------------------- spawn

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const c_void,
    *const c_void,
    Argv,
    Argv,
) -> c_int;

/// The spawn's child shares this thread's memory until it execs: nothing
/// is recorded on the thread meanwhile.
fn spawn_with(envp: Argv, image: Image, f: impl FnOnce(Argv) -> c_int) -> c_int {
    // SAFETY: envp comes from the program as an environment array.
    unsafe {
        with_env(envp, image, |e| {
            tls::set_busy(tls::busy() + 1);
            let r = f(e);
            tls::set_busy(tls::busy().saturating_sub(1));
            r
        })
    }
}

/// # Safety
/// As posix_spawn(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: Argv,
    envp: Argv,
) -> c_int {
    note_untraced(path, false);
    // SAFETY: forwarding to the real function of the same C signature.
    spawn_with(envp, Image::Path(path, false), |e| unsafe {
        real!("posix_spawn", SpawnFn)(pid, path, actions, attr, argv, e)
    })
}

/// # Safety
/// As posix_spawnp(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: Argv,
    envp: Argv,
) -> c_int {
    note_untraced(file, true);
    // SAFETY: forwarding to the real function of the same C signature.
    spawn_with(envp, Image::Path(file, true), |e| unsafe {
        real!("posix_spawnp", SpawnFn)(pid, file, actions, attr, argv, e)
    })
}

/// `system(3)`, as glibc does it, but spawning the shell with the agent's
/// environment (glibc's own reaches its internal spawn directly): SIGINT
/// and SIGQUIT are ignored and SIGCHLD blocked while the command runs
/// (counted, for concurrent calls), the shell gets the caller's signal mask
/// and default dispositions for what the caller did not ignore.
///
/// # Safety
/// As system(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(line: *const c_char) -> c_int {
    type SystemFn = unsafe extern "C" fn(*const c_char) -> c_int;
    if line.is_null() || inject().is_none() {
        // SAFETY: forwarding to the real function of the same C signature.
        return unsafe { real!("system", SystemFn)(line) };
    }
    // SAFETY: plain libc calls on local, initialised structures.
    unsafe { run_shell(line) }
}

static SYSTEM_LOCK: std::sync::Mutex<(u32, Option<(libc::sigaction, libc::sigaction)>)> =
    std::sync::Mutex::new((0, None));

/// # Safety
/// `line` is a C string.
unsafe fn run_shell(line: *const c_char) -> c_int {
    // SAFETY: all structures are local and initialised by the calls that
    // fill them; signal functions get valid pointers.
    unsafe {
        let mut ign: libc::sigaction = std::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        libc::sigemptyset(&mut ign.sa_mask);
        let (intr, quit) = {
            let _b = tls::Busy::enter();
            let mut g = SYSTEM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            if g.0 == 0 {
                let mut intr: libc::sigaction = std::mem::zeroed();
                let mut quit: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGINT, &ign, &mut intr);
                libc::sigaction(libc::SIGQUIT, &ign, &mut quit);
                g.1 = Some((intr, quit));
            }
            g.0 += 1;
            g.1.expect("saved dispositions")
        };
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut omask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &block, &mut omask);

        let mut reset: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut reset);
        if intr.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut reset, libc::SIGINT);
        }
        if quit.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut reset, libc::SIGQUIT);
        }
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawnattr_setsigmask(&mut attr, &omask);
        libc::posix_spawnattr_setsigdefault(&mut attr, &reset);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as _,
        );
        let argv: [*const c_char; 5] = [
            c"sh".as_ptr(),
            c"-c".as_ptr(),
            c"--".as_ptr(),
            line,
            std::ptr::null(),
        ];
        let mut pid: libc::pid_t = 0;
        let r = posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            std::ptr::null(),
            (&attr as *const libc::posix_spawnattr_t).cast(),
            argv.as_ptr(),
            current_environ(),
        );
        libc::posix_spawnattr_destroy(&mut attr);
        let mut status: c_int;
        if r == 0 {
            status = 0;
            loop {
                let w = libc::waitpid(pid, &mut status, 0);
                if w == pid {
                    break;
                }
                if w < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                status = -1;
                break;
            }
        } else {
            // As glibc: the shell could not run, status as if it exited 127.
            status = 127 << 8;
        }
        {
            let _b = tls::Busy::enter();
            let mut g = SYSTEM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            g.0 -= 1;
            if g.0 == 0 {
                if let Some((intr, quit)) = g.1.take() {
                    libc::sigaction(libc::SIGINT, &intr, std::ptr::null_mut());
                    libc::sigaction(libc::SIGQUIT, &quit, std::ptr::null_mut());
                }
            }
        }
        libc::sigprocmask(libc::SIG_SETMASK, &omask, std::ptr::null_mut());
        if r != 0 {
            *libc::__errno_location() = r;
        }
        status
    }
}

/// A stream made by `popen`, until `pclose`.
struct Popened {
    file: usize,
    pid: libc::pid_t,
    fd: c_int,
}

static POPENED: std::sync::Mutex<Vec<Popened>> = std::sync::Mutex::new(Vec::new());

/// `popen(3)`: glibc's, too, spawns the shell internally. As glibc does it:
/// a close-on-exec pipe, the child's end on the shell's stdin or stdout,
/// the streams of earlier `popen`s closed in the child, `sh -c command`;
/// the caller's end is close-on-exec only with mode `e`.
///
/// # Safety
/// As popen(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    type PopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;
    if inject().is_none() || command.is_null() || mode.is_null() {
        // SAFETY: forwarding to the real function of the same C signature.
        return unsafe { real!("popen", PopenFn)(command, mode) };
    }
    // SAFETY: mode is a C string.
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let reading = match m.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::EINVAL };
            return std::ptr::null_mut();
        }
    };
    let cloexec = m[1..].contains(&b'e');
    // SAFETY: plain libc calls on local, initialised structures.
    unsafe {
        let mut fds = [0 as c_int; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return std::ptr::null_mut();
        }
        let (ours, theirs, std_fd) = if reading {
            (fds[0], fds[1], 1)
        } else {
            (fds[1], fds[0], 0)
        };
        let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut fa);
        if theirs == std_fd {
            // The standard descriptor was closed and the pipe took its
            // number: it only has to survive the exec.
            libc::fcntl(theirs, libc::F_SETFD, 0);
        } else {
            libc::posix_spawn_file_actions_adddup2(&mut fa, theirs, std_fd);
        }
        {
            let _b = tls::Busy::enter();
            let list = POPENED.lock().unwrap_or_else(|e| e.into_inner());
            for p in list.iter() {
                if p.fd != std_fd {
                    libc::posix_spawn_file_actions_addclose(&mut fa, p.fd);
                }
            }
        }
        let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), command, std::ptr::null()];
        let mut pid: libc::pid_t = 0;
        let r = posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            (&fa as *const libc::posix_spawn_file_actions_t).cast(),
            std::ptr::null(),
            argv.as_ptr(),
            current_environ(),
        );
        libc::posix_spawn_file_actions_destroy(&mut fa);
        libc::close(theirs);
        if r != 0 {
            libc::close(ours);
            *libc::__errno_location() = r;
            return std::ptr::null_mut();
        }
        if !cloexec {
            libc::fcntl(ours, libc::F_SETFD, 0);
        }
        let file = libc::fdopen(ours, if reading { c"r" } else { c"w" }.as_ptr());
        if file.is_null() {
            let e = *libc::__errno_location();
            libc::close(ours);
            let mut st = 0;
            while libc::waitpid(pid, &mut st, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
            *libc::__errno_location() = e;
            return std::ptr::null_mut();
        }
        let _b = tls::Busy::enter();
        POPENED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Popened {
                file: file as usize,
                pid,
                fd: ours,
            });
        file
    }
}

/// `pclose(3)` for the streams of the `popen` above (others go to the
/// real one): close the stream, wait for the shell, return its status.
///
/// # Safety
/// As pclose(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pclose(file: *mut libc::FILE) -> c_int {
    type PcloseFn = unsafe extern "C" fn(*mut libc::FILE) -> c_int;
    let entry = {
        let _b = tls::Busy::enter();
        let mut list = POPENED.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .position(|p| p.file == file as usize)
            .map(|i| list.swap_remove(i))
    };
    let Some(entry) = entry else {
        // SAFETY: forwarding to the real function of the same C signature.
        return unsafe { real!("pclose", PcloseFn)(file) };
    };
    // SAFETY: the stream came from popen above and is closed once.
    unsafe {
        libc::fclose(file);
        let mut status = 0;
        loop {
            let w = libc::waitpid(entry.pid, &mut status, 0);
            if w == entry.pid {
                return status;
            }
            if w < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            return -1;
        }
    }
}

// ---------------------------------------------------------------- vfork

/// The real vfork, resolved by `resolve_early` before the program runs.
static REAL_VFORK: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Looks up what the assembly entries need; called from the agent's
/// constructor whether or not tracing is set up (the program binds to the
/// agent's `vfork` either way).
pub fn resolve_early() {
    // SAFETY: dlsym with a NUL-terminated name.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"vfork".as_ptr()) };
    if p.is_null() {
        p = raw_fork as *mut c_void;
    }
    REAL_VFORK.store(p, Ordering::Relaxed);
}

/// Without a real vfork: fork, which vfork may always be.
extern "C" fn raw_fork() -> libc::pid_t {
    // SAFETY: fork has no memory preconditions here.
    unsafe { libc::fork() }
}

// `vfork`: the child runs on the parent's stack and shares its memory, its
// thread-local words included, until it execs or exits. The thread is
// marked busy first (so neither process records anything or touches the
// shadow stack meanwhile); the parent puts the busy word back as it was
// when vfork returns in it. The caller's return address and the busy word
// are kept in TLS words, not on the stack the child will overwrite. (rcx
// and r11 are free: the system call clobbers them anyway.)
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn vfork() {
    core::arch::naked_asm!(
        "mov r11, qword ptr [rip + fctrace_tls@GOTTPOFF]",
        "mov rcx, qword ptr fs:[r11 + 8]",
        "mov qword ptr fs:[r11 + 32], rcx",
        "add rcx, 1",
        "mov qword ptr fs:[r11 + 8], rcx",
        "pop qword ptr fs:[r11 + 24]",
        "call qword ptr [rip + {real}]",
        "mov r11, qword ptr [rip + fctrace_tls@GOTTPOFF]",
        "test eax, eax",
        "jz 2f",
        // The parent: whatever the child did to the busy word (an exec
        // interposer marks it too), it is the parent's again.
        "mov rcx, qword ptr fs:[r11 + 32]",
        "mov qword ptr fs:[r11 + 8], rcx",
        "2:",
        "jmp qword ptr fs:[r11 + 24]",
        real = sym REAL_VFORK,
    );
}

// ------------------------------------------------------- thread creation

#[repr(C)]
struct Start {
    routine: *mut c_void,
    arg: *mut c_void,
    parent: u32,
}

#[repr(C)]
struct RoutineAndArg {
    routine: *mut c_void,
    arg: *mut c_void,
}

type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    *mut c_void,
    *mut c_void,
) -> c_int;

/// # Safety
/// As pthread_create(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread_out: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: *mut c_void,
    arg: *mut c_void,
) -> c_int {
    thread::THREADS_CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let parent = creator_slot();
    let Some(parent) = parent else {
        // SAFETY: forwarding to the real function of the same C signature.
        return unsafe { real!("pthread_create", CreateFn)(thread_out, attr, routine, arg) };
    };
    let block = {
        let _b = tls::Busy::enter();
        Box::into_raw(Box::new(Start {
            routine,
            arg,
            parent,
        }))
    };
    // SAFETY: the trampoline takes the block and runs `routine(arg)`.
    let r = unsafe {
        real!("pthread_create", CreateFn)(
            thread_out,
            attr,
            thread_start as *mut c_void,
            block.cast(),
        )
    };
    if r != 0 {
        let _b = tls::Busy::enter();
        // SAFETY: the thread was not created: the block is still ours.
        drop(unsafe { Box::from_raw(block) });
    }
    r
}

/// The calling thread's slot, registering the thread first if it has made
/// no traced call yet.
fn creator_slot() -> Option<u32> {
    if tls::busy() != 0 {
        return None;
    }
    let shm = shm::get()?;
    if tls::state().is_null() {
        let _b = tls::Busy::enter();
        thread::init_thread(
            shm,
            shm::session(),
            u32::MAX,
            fctrace_format::shm::ORIGIN_THREAD,
        )?;
        // Armed by the caller: the thread-exit hook is unwinding's.
        unwind::watch_thread_exit();
    }
    parent_slot()
}

/// Runs first in a new thread: notes the creator for the thread's first
/// traced call and hands back the real routine and argument.
extern "C" fn thread_prepare(block: *mut Start) -> RoutineAndArg {
    let _b = tls::Busy::enter();
    // SAFETY: pthread_create above passed a block it leaked for this thread.
    let s = unsafe { Box::from_raw(block) };
    let st = tls::state();
    match shm::get() {
        // The thread library made traced calls before this (-l): the
        // thread is registered already.
        // SAFETY: a non-null state is this thread's.
        Some(shm) if !st.is_null() => shm.set_parent(unsafe { (*st).task_slot }, s.parent),
        _ => tls::set_pending_parent(s.parent),
    }
    RoutineAndArg {
        routine: s.routine,
        arg: s.arg,
    }
}

// The new thread's start routine: prepare, then jump to the real routine
// with its argument, so that it returns straight to the thread library.
#[unsafe(naked)]
extern "C" fn thread_start() {
    core::arch::naked_asm!(
        "sub rsp, 8",
        "call {prepare}",
        "add rsp, 8",
        "mov rdi, rdx",
        "jmp rax",
        prepare = sym thread_prepare,
    );
}
