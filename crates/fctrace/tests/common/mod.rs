//! Shared helpers of fctrace's integration tests.
//!
//! * building the test programs of `tests/programs/` (gcc, g++, rustc;
//!   cargo for Rust programs that need its profiles),
//!   cached under `CARGO_TARGET_TMPDIR` by a hash of compiler, flags and
//!   sources, so reruns do not recompile (safe for parallel tests and for
//!   parallel `cargo test` runs: file locks plus atomic renames);
//! * running fctrace (`record`, `replay`, `report --format json`, `info`)
//!   with a time limit, checking it never panicked, and comparing a
//!   program's behaviour natively and under `fctrace record`;
//! * parsing `replay`'s call tree, per task and thread, checking it nests
//!   properly (signal markers are leaves, which [`strip_markers`] removes);
//! * reading ELF symbols (readelf) and disassembly (objdump);
//! * sanitizer reports with their addresses and ids normalised;
//! * running callgrind and counting calls per function, and comparing those
//!   counts with fctrace's, function by function, for the main executable;
//! * booting a Linux kernel under qemu with an initramfs of the test's
//!   programs, for CPUs and kernels other than this machine's ([`vm`]).
//!
//! # What callgrind counts (valgrind 3.19, checked on this project's programs)
//!
//! The count of calls of a function is the sum of the `calls=N` lines whose
//! callee (`cfn=`) is that function, over all callers in all objects.
//! * Recursion: with the default `--separate-recs=2`, a recursive function
//!   shows up as `fib` and `fib'2` (the `'N` suffix names the recursion
//!   level). The suffix is stripped and the counts added.
//! * Tail calls: a jump to the first instruction of a function symbol is
//!   counted as a call (callgrind's "call emulation"), attributed to the
//!   function that jumped. So `g: ... jmp h` counts one call of h per call of
//!   g, the same as a `call`. Its return is matched by stack pointer, so g
//!   and h are left together.
//! * A jump to a function's *own* first instruction is also counted as a
//!   (recursive) call: a loop whose head is the entry (tree.c's `spin_entry`)
//!   gets one call per iteration. At the machine level this cannot be told
//!   apart from a self tail call; the tests take it as a loop, not a call
//!   (see [`SELF_ENTRY_JUMP_IS_CALL`]), and for such functions compare
//!   fctrace with callgrind's count *from other functions* only. Real code
//!   has them: in SQLite at -O2, `sqlite3ExprAffinity` and
//!   `sqlite3WhereSplit` end their tail recursion with a jump to their own
//!   entry (found by scanning objdump's output for such branches).
//! * `.cold` parts: gcc's `f.cold` is a symbol of its own, so the jump from
//!   f into it counts as a call of `f.cold`. It is not a function; excluded
//!   from the comparison, and fctrace must never report one.
//! * PLT stubs: with the default `--skip-plt=yes` they are invisible; a call
//!   through `puts@plt` is a call from main to libc's `puts` (plus one call
//!   of ld.so's `_dl_runtime_resolve_xsave` the first time, lazy binding).
//!   With `--skip-plt=no` they show as `0x... [PLT]` functions of an unknown
//!   object `???`, never as functions of the executable. Either way they do
//!   not touch the executable's own functions.
//! * `main` is called once, from libc's `__libc_start_call_main`; calls from
//!   libc back into the program (qsort's comparator, thread start routines,
//!   `frame_dummy` from the init array) are counted like any other call.
//! * `_start` is entered by a jump from ld.so: as a jump into another object
//!   it counts as one call. With `--show-below-main=no` (valgrind's default)
//!   `_start` and `__libc_start_call_main` are both renamed `(below main)`;
//!   we pass `--show-below-main=yes` to keep the real names.
//! * Symbols of size 0 (`_init`, `_fini`, `frame_dummy`, `register_tm_clones`,
//!   `deregister_tm_clones`, `__do_global_dtors_aux`) are not used by valgrind:
//!   their code is named `0x<address>` (the address relative to the object's
//!   load base, as in the symbol table), `_init` even shows up in an unknown
//!   object `???`, and a jump to them is not counted as a call
//!   (`frame_dummy` tail-jumps to `register_tm_clones`: callgrind counts 0).
//!   These C runtime functions are not the program's own: they are excluded
//!   ([`CRT_FUNCTIONS`]).
//! * Threads: by default all threads go to one output file and one count.
//! * C++ and Rust: with `--demangle=no` names are the raw symbols, the same
//!   as the report's `symbol`. Several symbols at one address (C1/C2
//!   constructors, identical code folding) are one function to both tools;
//!   the comparison is by address so either may pick any of the names.
//!   gcc also makes `.cold` parts of C++ functions (`main.cold`,
//!   `_ZN3geo6middleEi.cold` in tree.cpp -O2).

#![allow(dead_code)]

mod cli_args;
mod clones;
mod driven;
mod dump;
mod exports;
mod info_json;
mod notes;
mod scratch;
mod signals;
mod sqlite_build;
pub mod vm;
// (each test file uses only some of the shared helpers)
#[allow(unused_imports)]
pub use cli_args::*;
#[allow(unused_imports)]
pub use driven::*;
#[allow(unused_imports)]
pub use dump::*;
#[allow(unused_imports)]
pub use exports::*;
#[allow(unused_imports)]
pub use info_json::*;
#[allow(unused_imports)]
pub use notes::*;
#[allow(unused_imports)]
pub use scratch::*;
#[allow(unused_imports)]
pub use sqlite_build::*;

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Whether a branch from inside a function to its own first instruction is
/// a new call. The tests take the program's semantics: it is a loop
/// (`spin_entry(3)` is one call). Flip this if the engine's contract says
/// otherwise; tree.rs and the callgrind comparison both follow it.
pub const SELF_ENTRY_JUMP_IS_CALL: bool = false;

/// Functions of the C runtime start files (crt1.o, crti.o, crtbegin.o,
/// crtend.o, crtn.o) linked into every executable: not the program's own
/// code, and callgrind cannot count them (see the module documentation).
pub const CRT_FUNCTIONS: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "_dl_relocate_static_pie",
];

/// Default time limit of one fctrace command.
pub const FCTRACE_TIMEOUT: Duration = Duration::from_secs(180);

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

/// The fctrace binary that cargo built for these tests.
pub fn fctrace_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fctrace"))
}

/// `crates/fctrace/tests/programs`.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("programs")
}

pub fn program_source(file: &str) -> PathBuf {
    programs_dir().join(file)
}

/// Root of everything the tests cache or leave behind: builds, callgrind
/// outputs, trace directories (kept only when a test fails).
pub fn cache_root() -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fctrace-tests");
    fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    p
}

fn cache_subdir(name: &str) -> PathBuf {
    let p = cache_root().join(name);
    fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    p
}

static UNIQUE: AtomicUsize = AtomicUsize::new(0);

/// A name no other thread or process of this machine uses right now.
pub fn unique_suffix() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------
// Hashing and locking
// ---------------------------------------------------------------------------

/// 64-bit FNV-1a: stable across runs and toolchains (std's hashers are not
/// promised to be).
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn bytes(mut self, data: &[u8]) -> Self {
        for &b in data {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so that ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        self
    }
    pub fn str(self, s: &str) -> Self {
        self.bytes(s.as_bytes())
    }
    pub fn file(self, path: &Path) -> Self {
        let data = fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        self.bytes(&data)
    }
    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Self::new()
    }
}

/// An exclusive lock on a file of the cache (flock): held by one thread of
/// one process at a time, released on drop.
pub struct FileLock(fs::File);

impl FileLock {
    pub fn acquire(name: &str) -> FileLock {
        let path = cache_subdir("locks").join(format!("{name}.lock"));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        loop {
            // SAFETY: flock on a file descriptor we own.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if r == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                panic!("flock {}: {err}", path.display());
            }
        }
        FileLock(file)
    }
}

// ---------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------

/// What a finished command did.
#[derive(Debug, Clone)]
pub struct Run {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }
    pub fn success(&self) -> bool {
        self.status.success()
    }
    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nstatus: {}\n--- stdout ({} bytes) ---\n{}\n--- stderr ({} bytes) ---\n{}",
            self.cmdline,
            self.status,
            self.stdout.len(),
            clip(&self.stdout, 6000),
            self.stderr.len(),
            clip(&self.stderr, 6000)
        )
    }
    /// Panics if the command failed.
    #[track_caller]
    pub fn expect_success(&self) -> &Self {
        assert!(self.success(), "command failed\n{}", self.describe());
        self
    }
}

/// Cuts long text for assertion messages: head and tail.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut head = max * 2 / 3;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - max / 3;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

fn describe_command(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(char::is_whitespace) {
            s.push_str(&format!("'{a}'"));
        } else {
            s.push_str(&a);
        }
    }
    s
}

/// A started command whose stdout and stderr are being collected.
pub struct Spawned {
    pub child: Child,
    /// Its stdin, when it was started with a pipe there.
    pub stdin: Option<ChildStdin>,
    pub cmdline: String,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
}

/// Starts a command with `stdin` as its stdin, its stdout and stderr
/// captured.
pub fn spawn_captured(cmd: &mut Command, stdin: Stdio) -> Spawned {
    let cmdline = describe_command(cmd);
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        let program = Path::new(cmd.get_program());
        match program.file_name().and_then(|n| n.to_str()).map(package_of) {
            Some(Some(package)) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{}", missing_tool(&program.to_string_lossy(), package))
            }
            _ => panic!("cannot start `{cmdline}`: {e}"),
        }
    });
    fn read_all(mut from: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = from.read_to_end(&mut v);
            v
        })
    }
    Spawned {
        stdin: child.stdin.take(),
        out: read_all(child.stdout.take().unwrap()),
        err: read_all(child.stderr.take().unwrap()),
        child,
        cmdline,
    }
}

impl Spawned {
    /// Closes its stdin and waits for its end, with no time limit (for
    /// callers that have made it end, under a time limit of their own).
    pub fn finish(mut self) -> Run {
        drop(self.stdin.take());
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.cmdline));
        self.output(status)
    }

    /// Everything it wrote, once it has ended with `status`.
    fn output(self, status: ExitStatus) -> Run {
        Run {
            cmdline: self.cmdline,
            status,
            stdout: String::from_utf8_lossy(&self.out.join().unwrap()).into_owned(),
            stderr: String::from_utf8_lossy(&self.err.join().unwrap()).into_owned(),
        }
    }
}

/// Runs a command to its end, stdin closed, stdout and stderr captured,
/// killed (and the test failed) if it runs longer than `timeout`.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Run {
    let mut spawned = spawn_captured(cmd, Stdio::null());
    let start = Instant::now();
    loop {
        match spawned.child.try_wait() {
            Ok(Some(status)) => return spawned.output(status),
            Ok(None) => {}
            Err(e) => panic!("waiting for `{}`: {e}", spawned.cmdline),
        }
        if start.elapsed() > timeout {
            let _ = spawned.child.kill();
            let r = spawned.finish();
            panic!(
                "`{}` still running after {timeout:?}: killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                r.cmdline,
                clip(&r.stdout, 4000),
                clip(&r.stderr, 4000)
            );
        }
        // Polling for the time limit only; the result does not depend on it.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The Debian package of a tool the tests run (what `scripts/test`
/// installs for it).
pub fn package_of(tool: &str) -> Option<&'static str> {
    const SAME_NAME: &[&str] = &[
        "zsh", "fish", "tmux", "less", "strace", "valgrind", "chromium", "cpio", "python3", "gcc",
        "g++",
    ];
    if let Some(name) = SAME_NAME.iter().find(|t| **t == tool) {
        return Some(name);
    }
    Some(match tool {
        "man" => "man-db",
        "groff" => "groff-base",
        "script" => "bsdutils",
        "setpriv" | "unshare" => "util-linux",
        "dot" => "graphviz",
        "protoc" => "protobuf-compiler",
        "node" => "nodejs",
        "go" => "golang-go",
        "java" | "javac" => "default-jdk-headless",
        "qemu-system-x86_64" => "qemu-system-x86",
        "busybox" => "busybox-static",
        "xz" => "xz-utils",
        "kill" => "procps",
        "gprof" | "objdump" | "objcopy" | "readelf" | "strip" | "c++filt" | "ld.gold" => "binutils",
        "timeout" | "mkfifo" | "env" | "id" => "coreutils",
        "mount" | "umount" => "mount",
        "ldd" => "libc-bin",
        _ => return None,
    })
}

/// What a test says when a tool it needs is missing.
fn missing_tool(tool: &str, package: &str) -> String {
    format!(
        "{tool} not found: apt-get install {package} \
         (or run ./scripts/test, which installs what the tests need)"
    )
}

/// The path of `tool` on PATH; a missing tool fails the test with the
/// line that installs its Debian `package` (never a silent skip).
#[track_caller]
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{}", missing_tool(tool, package)))
}

pub fn run(cmd: &mut Command) -> Run {
    run_with_timeout(cmd, FCTRACE_TIMEOUT)
}

/// Runs a tool of the machine (gcc, objdump, ...), panics if it fails.
#[track_caller]
pub fn tool(program: &str, args: &[&OsStr]) -> Run {
    let r = run_with_timeout(Command::new(program).args(args), Duration::from_secs(900));
    r.expect_success();
    r
}

// ---------------------------------------------------------------------------
// Building test programs
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    C,
    Cxx,
    Rust,
}

impl Lang {
    fn compiler(self) -> &'static str {
        match self {
            Lang::C => "gcc",
            Lang::Cxx => "g++",
            Lang::Rust => "rustc",
        }
    }
}

/// Version line of a compiler, part of every cache key.
fn compiler_version(compiler: &str) -> String {
    use std::sync::Mutex;
    static CACHE: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let mut m = CACHE.lock().unwrap();
    if let Some(v) = m.get(compiler) {
        return v.clone();
    }
    let r = run_with_timeout(
        Command::new(compiler).arg("--version"),
        Duration::from_secs(60),
    );
    r.expect_success();
    let v = r.stdout.lines().next().unwrap_or("").to_string();
    m.insert(compiler.to_string(), v.clone());
    v
}

/// One build: sources (and objects) → an executable, or one object file.
#[derive(Clone, Debug)]
pub struct Build {
    pub lang: Lang,
    /// File name of the result, e.g. `tree-O2`: also the program's `comm`.
    pub name: String,
    pub sources: Vec<PathBuf>,
    /// Flags before the sources (`-O2`, `-g`, ...).
    pub flags: Vec<String>,
    /// Flags after the sources (`-lm`, `-pthread`, ...).
    pub libs: Vec<String>,
    /// Produce an object file (`-c`) instead of an executable.
    pub object: bool,
}

impl Build {
    pub fn new(lang: Lang, name: &str, sources: &[PathBuf], flags: &[&str]) -> Build {
        Build {
            lang,
            name: name.to_string(),
            sources: sources.to_vec(),
            flags: flags.iter().map(|s| s.to_string()).collect(),
            libs: Vec::new(),
            object: false,
        }
    }
    pub fn libs(mut self, libs: &[&str]) -> Build {
        self.libs = libs.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn object(mut self) -> Build {
        self.object = true;
        self
    }

    fn key(&self) -> String {
        let compiler = self.lang.compiler();
        let mut h = Fnv::new().str(compiler).str(&compiler_version(compiler));
        h = h.str(if self.object { "object" } else { "exe" });
        for f in &self.flags {
            h = h.str(f);
        }
        h = h.str("--");
        for f in &self.libs {
            h = h.str(f);
        }
        for s in &self.sources {
            h = h.str(&s.file_name().unwrap().to_string_lossy()).file(s);
        }
        h.hex()
    }

    /// Builds (or finds in the cache) and returns the path of the result.
    pub fn build(&self) -> PathBuf {
        let key = self.key();
        let dir = cache_subdir("builds").join(format!("{}-{key}", self.name));
        let out = dir.join(&self.name);
        if out.exists() {
            return out;
        }
        let _lock = FileLock::acquire(&format!("build-{}-{key}", self.name));
        if out.exists() {
            return out;
        }
        fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join(format!(".{}.tmp-{}", self.name, unique_suffix()));
        let mut cmd = Command::new(self.lang.compiler());
        match self.lang {
            Lang::C | Lang::Cxx => {
                cmd.args(&self.flags);
                if self.object {
                    cmd.arg("-c");
                }
                cmd.arg("-o").arg(&tmp).args(&self.sources).args(&self.libs);
            }
            Lang::Rust => {
                assert!(!self.object, "rust builds are executables");
                assert_eq!(self.sources.len(), 1, "one rust source file");
                // The crate is named after the file (prog.rs: crate `prog`).
                cmd.args(&self.flags)
                    .arg("--edition=2021")
                    .arg("-o")
                    .arg(&tmp)
                    .arg(&self.sources[0])
                    .args(&self.libs);
                // rustc writes nothing else next to -o's path; keep the
                // build independent of the caller's environment.
                cmd.env_remove("RUSTFLAGS")
                    .env_remove("CARGO_ENCODED_RUSTFLAGS");
            }
        }
        let start = Instant::now();
        let r = run_with_timeout(&mut cmd, Duration::from_secs(1800));
        assert!(
            r.success(),
            "building {} failed\n{}",
            self.name,
            r.describe()
        );
        let took = start.elapsed();
        if took > Duration::from_secs(5) {
            eprintln!("built {} in {:.1} s", out.display(), took.as_secs_f64());
        }
        fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename to {}: {e}", out.display()));
        out
    }
}

/// A C program of `tests/programs/` built with `flags`; the result is named
/// `<stem><suffix>`, e.g. `c_program("tree.c", "-O2", &["-O2"])` → `tree-O2`.
pub fn c_program(file: &str, suffix: &str, flags: &[&str]) -> PathBuf {
    let stem = Path::new(file)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    Build::new(
        Lang::C,
        &format!("{stem}{suffix}"),
        &[program_source(file)],
        flags,
    )
    .build()
}

/// A C shared library named `name` built from `tests/programs/` `file`
/// with `flags` (`-shared -fPIC` added).
pub fn c_shared_lib(name: &str, file: &str, flags: &[&str]) -> PathBuf {
    let mut all = flags.to_vec();
    all.extend(["-shared", "-fPIC"]);
    Build::new(Lang::C, name, &[program_source(file)], &all).build()
}

/// A C program named `name` built from `tests/programs/` `file` with
/// `flags`, linked with the shared library `lib` (found through its rpath).
pub fn c_program_with_lib(name: &str, file: &str, flags: &[&str], lib: &Path) -> PathBuf {
    let dir = lib.parent().unwrap().to_str().unwrap();
    let rpath = format!("-Wl,-rpath,{dir}");
    let mut all = flags.to_vec();
    all.push(&rpath);
    Build::new(Lang::C, name, &[program_source(file)], &all)
        .libs(&[lib.to_str().unwrap()])
        .build()
}

pub fn cxx_program(file: &str, suffix: &str, flags: &[&str]) -> PathBuf {
    let stem = Path::new(file)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    Build::new(
        Lang::Cxx,
        &format!("{stem}_cpp{suffix}"),
        &[program_source(file)],
        flags,
    )
    .build()
}

/// tests/programs/prog.rs built by rustc at `-Copt-level=opt`, with v0
/// symbol mangling or the default (legacy) one.
pub fn rust_prog(opt: u32, v0: bool) -> PathBuf {
    let level = format!("-Copt-level={opt}");
    let mut flags = vec![level.as_str()];
    if v0 {
        flags.push("-Csymbol-mangling-version=v0");
    }
    let name = format!("prog-O{opt}{}", if v0 { "-v0" } else { "" });
    Build::new(Lang::Rust, &name, &[program_source("prog.rs")], &flags).build()
}

/// `tests/programs/<file>` built by `cargo build --release` as the binary of
/// a one-file package named `package`, with `[profile.release]` set to
/// `profile` (TOML lines): for Rust programs that need cargo's profiles
/// (`rust_prog` calls rustc directly). The package is written into the
/// cache, with a target directory of its own, keyed by the hash of its
/// manifest, its source and the toolchain's versions. Returns the
/// executable's path.
pub fn cargo_program(package: &str, file: &str, profile: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let source = program_source(file);
    let manifest = format!(
        "[package]\nname = \"{package}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\n\n[profile.release]\n{profile}\n\n\
         # Not part of any enclosing workspace.\n[workspace]\n"
    );
    let key = Fnv::new()
        .str(&compiler_version(&cargo))
        .str(&compiler_version("rustc"))
        .str(&manifest)
        .file(&source)
        .hex();
    let dir = cache_subdir("cargo").join(format!("{package}-{key}"));
    let out = dir.join("bin").join(package);
    if out.exists() {
        return out;
    }
    let _lock = FileLock::acquire(&format!("cargo-{package}-{key}"));
    if out.exists() {
        return out;
    }
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("Cargo.toml"), &manifest).unwrap();
    fs::copy(&source, dir.join("src").join("main.rs")).unwrap();
    let target = dir.join("target");
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--offline")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&dir);
    // Independent of the environment `cargo test` runs in.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let r = run_with_timeout(&mut cmd, Duration::from_secs(900));
    assert!(
        r.success(),
        "cargo build of {package} failed\n{}",
        r.describe()
    );
    let tmp = dir
        .join("bin")
        .join(format!(".{package}.tmp-{}", unique_suffix()));
    fs::copy(target.join("release").join(package), &tmp).unwrap();
    fs::rename(&tmp, &out).unwrap();
    out
}

/// Writes `text` to a file of the cache named by its content hash and
/// returns its path (for programs a test writes itself).
pub fn write_cached_source(name: &str, text: &str) -> PathBuf {
    let dir = cache_subdir("sources").join(Fnv::new().str(text).hex());
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    if !path.exists() {
        let tmp = dir.join(format!(".{name}.tmp-{}", unique_suffix()));
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// Runs a program natively, returns its output; panics if it fails.
#[track_caller]
pub fn run_native(exe: &Path, args: &[&str]) -> Run {
    let r = run(Command::new(exe).args(args));
    r.expect_success();
    r
}

/// Runs a program natively with extra environment variables; whatever its
/// exit status.
pub fn run_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run(Command::new(exe).args(args).envs(env.iter().copied()))
}

// ---------------------------------------------------------------------------
// Trace directories
// ---------------------------------------------------------------------------

/// A directory for one trace, under the cache root. Removed when dropped,
/// except while the thread panics: a failing test leaves its trace for
/// inspection (its path is in the assertion messages).
pub struct TraceDir {
    pub path: PathBuf,
}

impl TraceDir {
    /// A fresh path that does not exist yet (fctrace record creates it).
    pub fn new(label: &str) -> TraceDir {
        let path = cache_subdir("traces").join(format!("{label}-{}", unique_suffix()));
        let _ = fs::remove_dir_all(&path);
        TraceDir { path }
    }
}

impl Drop for TraceDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("trace kept for inspection: {}", self.path.display());
        } else if std::env::var_os("FCTRACE_TESTS_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------
// Running fctrace
// ---------------------------------------------------------------------------

/// Runs fctrace with these arguments (no time limit beyond the default).
#[track_caller]
pub fn fctrace<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let r = run_with_timeout(Command::new(fctrace_bin()).args(args), FCTRACE_TIMEOUT);
    assert_no_panic(&r);
    r
}

/// fctrace must never end in a Rust panic or be killed by a signal, whatever
/// its input.
#[track_caller]
pub fn assert_no_panic(r: &Run) {
    assert_no_panic_text(r);
    assert!(
        r.signal().is_none(),
        "fctrace was killed by signal {:?}\n{}",
        r.signal(),
        r.describe()
    );
}

#[track_caller]
fn assert_no_panic_text(r: &Run) {
    assert!(
        !r.stderr.contains("panicked") && !r.stderr.contains("RUST_BACKTRACE"),
        "fctrace panicked\n{}",
        r.describe()
    );
}

/// After `fctrace record`: fctrace may end by a signal only when the
/// program did (it then dies the same way, after writing the trace).
#[track_caller]
pub fn assert_recorder_ending(r: &Run, dir: &Path) {
    assert_no_panic_text(r);
    let Some(sig) = r.signal() else { return };
    let info = fs::read_to_string(dir.join("info.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&info).unwrap_or_default();
    assert_eq!(
        v["exit"]["signal"].as_i64(),
        Some(sig as i64),
        "fctrace was killed by signal {sig}, but the program did not end by it\n{}",
        r.describe()
    );
}

/// A finished `fctrace record`.
pub struct Recorded {
    pub dir: TraceDir,
    pub run: Run,
}

/// `fctrace record -d DIR [opts] exe args`; asserts fctrace exited with
/// status 0 (the program's own status must be 0 for that).
#[track_caller]
pub fn record(exe: &Path, args: &[&str], opts: &[&str]) -> Recorded {
    let rec = record_any(exe, args, opts);
    assert!(
        rec.run.success(),
        "fctrace record failed\n{}",
        rec.run.describe()
    );
    rec
}

/// `fctrace record`, whatever its exit status.
#[track_caller]
pub fn record_any(exe: &Path, args: &[&str], opts: &[&str]) -> Recorded {
    let (dir, mut cmd) = record_command(exe, args, opts);
    let run = run_with_timeout(&mut cmd, FCTRACE_TIMEOUT);
    assert_recorder_ending(&run, &dir.path);
    Recorded { dir, run }
}

/// `fctrace record -d DIR exe args` with extra environment variables (for
/// fctrace and the program), whatever its exit status. Checks only that
/// fctrace was not killed: not [`assert_no_panic`], since the program's own
/// panic messages pass through fctrace's stderr (callers compare that
/// stderr with the program's).
#[track_caller]
pub fn record_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Recorded {
    let (dir, mut cmd) = record_command(exe, args, &[]);
    let run = run_with_timeout(cmd.envs(env.iter().copied()), FCTRACE_TIMEOUT);
    assert!(
        run.signal().is_none(),
        "fctrace was killed\n{}",
        run.describe()
    );
    Recorded { dir, run }
}

/// `fctrace record -d DIR [opts] exe args`, in a fresh trace directory.
fn record_command(exe: &Path, args: &[&str], opts: &[&str]) -> (TraceDir, Command) {
    let label = exe
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = TraceDir::new(&label);
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("record")
        .arg("-d")
        .arg(&dir.path)
        .args(opts)
        .arg(exe)
        .args(args);
    (dir, cmd)
}

/// The program behaves the same natively and under fctrace: the same exit
/// status (or death by the same signal), stdout and stderr.
#[track_caller]
pub fn assert_same_behaviour(native: &Run, traced: &Run, ctx: &str) {
    assert_same_behaviour_with(native, traced, ctx, |s| s.to_string());
}

/// [`assert_same_behaviour`], the two stderr compared through `stderr`
/// (a sanitizer report's addresses and pids normalised).
#[track_caller]
pub fn assert_same_behaviour_with(
    native: &Run,
    traced: &Run,
    ctx: &str,
    stderr: impl Fn(&str) -> String,
) {
    assert_eq!(
        (native.code(), native.signal()),
        (traced.code(), traced.signal()),
        "{ctx}: exit status\n--- native ---\n{}\n--- fctrace ---\n{}",
        native.describe(),
        traced.describe()
    );
    assert_eq!(
        native.stdout,
        traced.stdout,
        "{ctx}: stdout\n{}",
        traced.describe()
    );
    assert_eq!(
        stderr(&native.stderr),
        stderr(&traced.stderr),
        "{ctx}: stderr\n--- native ---\n{}\n--- fctrace ---\n{}",
        native.stderr,
        traced.stderr
    );
}

/// Runs `exe args` natively and under `fctrace record`, whatever their
/// ending, and asserts they behave the same ([`assert_same_behaviour`]).
/// Returns the recording.
#[track_caller]
pub fn record_same(exe: &Path, args: &[&str]) -> Recorded {
    let native = run(Command::new(exe).args(args));
    let rec = record_any(exe, args, &[]);
    assert_same_behaviour(
        &native,
        &rec.run,
        &format!("{} (trace {})", native.cmdline, rec.dir.path.display()),
    );
    rec
}

/// `fctrace replay -d DIR`: its stdout; asserts success.
#[track_caller]
pub fn replay_text(dir: &Path) -> String {
    let r = fctrace(&[OsStr::new("replay"), OsStr::new("-d"), dir.as_os_str()]);
    assert!(r.success(), "fctrace replay failed\n{}", r.describe());
    r.stdout
}

/// `fctrace replay -d DIR`, parsed and checked for nesting; signal markers
/// are leaves of the tree (see [`is_marker`]).
#[track_caller]
pub fn replay(dir: &Path) -> Replay {
    replay_with_text(dir).1
}

/// `fctrace replay -d DIR`: its text, and its tree as [`replay`] gives it.
#[track_caller]
pub fn replay_with_text(dir: &Path) -> (String, Replay) {
    let text = replay_text(dir);
    let tree = parse_replay(&text).unwrap_or_else(|e| {
        panic!(
            "replay of {} is not a well-formed call tree: {e}\n--- replay ---\n{}",
            dir.display(),
            clip(&text, 8000)
        )
    });
    (text, tree)
}

/// `fctrace replay -d DIR`: its text, and its tree of calls only, without
/// the signal markers (a handler's calls follow the marker at the
/// interrupted call's depth, so they stay where they are).
#[track_caller]
pub fn replay_calls(dir: &Path) -> (String, Replay) {
    let (text, tree) = replay_with_text(dir);
    (text, tree.without_markers())
}

/// `fctrace CMD -d DIR OPTS...` (e.g. `replay` with display filters): its
/// stdout; asserts success.
#[track_caller]
pub fn fctrace_on(cmd: &str, dir: &Path, opts: &[&str]) -> String {
    let mut args: Vec<&OsStr> = vec![OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(
        r.success(),
        "fctrace {cmd} {opts:?} failed\n{}",
        r.describe()
    );
    r.stdout
}

/// [`fctrace_on`], also asserting that fctrace warned about nothing.
pub fn fctrace_on_quietly(cmd: &str, dir: &Path, opts: &[&str]) -> String {
    let mut args: Vec<&OsStr> = vec![OsStr::new(cmd), OsStr::new("-d"), dir.as_os_str()];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(
        r.success() && !r.stderr.contains("warning"),
        "fctrace {cmd} {opts:?} failed or warned\n{}",
        r.describe()
    );
    r.stdout
}

/// The text of each call line of a replay: what follows `] | `, with its
/// indent (headers and other lines left out).
pub fn call_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("] | ").map(|(_, t)| t.to_string()))
        .collect()
}

/// Every line of `text` with `prefix` before it (an indent, a thread tag),
/// each ended by a newline.
pub fn prefix_lines(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// `fctrace info -d DIR`: its stdout; asserts success.
#[track_caller]
pub fn info_text(dir: &Path) -> String {
    let r = fctrace(&[OsStr::new("info"), OsStr::new("-d"), dir.as_os_str()]);
    assert!(r.success(), "fctrace info failed\n{}", r.describe());
    r.stdout
}

// ---------------------------------------------------------------------------
// The report (`fctrace report --format json`)
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    pub functions: Vec<FnStat>,
    pub tasks: Vec<Task>,
    pub events: u64,
    pub lost_events: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FnStat {
    pub name: String,
    pub symbol: String,
    pub module: String,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// null when no call of the function returned (e.g. `exit`): there is
    /// no duration to take a minimum, maximum or mean of.
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub avg_ns: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    pub tid: u64,
    pub pid: u64,
    pub ppid: u64,
    pub session: u64,
    pub comm: String,
}

/// `fctrace report --format json --show-runtime`: every recorded call
/// (the C runtime's too, as callgrind counts them).
#[track_caller]
pub fn report_json_text(dir: &Path) -> String {
    report_json_text_with(dir, &[OsStr::new("--show-runtime")])
}

/// `fctrace report -d DIR --format json` with the options `extra`.
pub fn report_json_text_with(dir: &Path, extra: &[&OsStr]) -> String {
    let mut args = vec![
        OsStr::new("report"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("json"),
    ];
    args.extend_from_slice(extra);
    let r = fctrace(&args);
    assert!(r.success(), "fctrace report failed\n{}", r.describe());
    r.stdout
}

#[track_caller]
pub fn report(dir: &Path) -> Report {
    let text = report_json_text(dir);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "report of {} is not the JSON of the contract: {e}\n--- report ---\n{}",
            dir.display(),
            clip(&text, 6000)
        )
    })
}

/// Canonical form of a path for comparisons (the path itself if it cannot
/// be resolved).
pub fn canonical(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Report {
    /// The functions whose module is `exe`.
    pub fn functions_of(&self, exe: &Path) -> Vec<&FnStat> {
        let exe = canonical(exe);
        self.functions
            .iter()
            .filter(|f| canonical(Path::new(&f.module)) == exe)
            .collect()
    }
    /// Calls by demangled name, over all modules.
    pub fn calls_by_name(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for f in &self.functions {
            *m.entry(f.name.clone()).or_insert(0) += f.calls;
        }
        m
    }
    /// Calls of the function named `name` (0 if absent).
    pub fn calls(&self, name: &str) -> u64 {
        self.functions
            .iter()
            .filter(|f| f.name == name)
            .map(|f| f.calls)
            .sum()
    }
    pub fn function(&self, name: &str) -> Option<&FnStat> {
        self.functions.iter().find(|f| f.name == name)
    }
}

// ---------------------------------------------------------------------------
// The call tree of `fctrace replay`
// ---------------------------------------------------------------------------

/// One function call of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// As printed, without ` {`, `;` or ` (unwound)`: `main()`, `ns::f(int)`.
    pub label: String,
    pub unwound: bool,
    /// False for a call still open when the trace ended.
    pub closed: bool,
    pub children: Vec<Node>,
}

impl Node {
    pub fn count(&self, label: &str) -> usize {
        usize::from(self.label == label)
            + self.children.iter().map(|c| c.count(label)).sum::<usize>()
    }
    /// Depth-first search.
    pub fn find(&self, label: &str) -> Option<&Node> {
        if self.label == label {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(label))
    }
    /// Every node, with its path of ancestors' labels (outermost first).
    pub fn walk<'a>(&'a self, path: &mut Vec<&'a str>, f: &mut dyn FnMut(&'a Node, &[&'a str])) {
        f(self, path);
        path.push(&self.label);
        for c in &self.children {
            c.walk(path, f);
        }
        path.pop();
    }
}

/// The calls of one thread, in order; `roots` are the outermost calls.
#[derive(Debug, Clone, Default)]
pub struct ThreadTree {
    pub tid: u64,
    /// The task (`# task N:` header), when replay names it.
    pub task: Option<u64>,
    pub roots: Vec<Node>,
    /// Number of lines of this thread in the replay.
    pub lines: usize,
}

impl ThreadTree {
    pub fn count(&self, label: &str) -> usize {
        self.roots.iter().map(|r| r.count(label)).sum()
    }
    pub fn find(&self, label: &str) -> Option<&Node> {
        self.roots.iter().find_map(|r| r.find(label))
    }
}

/// All threads of a replay, in the order of their first line.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub threads: Vec<ThreadTree>,
}

impl Replay {
    pub fn thread(&self, tid: u64) -> Option<&ThreadTree> {
        self.threads.iter().find(|t| t.tid == tid)
    }
    /// The thread whose outermost calls include `main()`.
    pub fn main_thread(&self) -> Option<&ThreadTree> {
        self.threads
            .iter()
            .find(|t| t.roots.iter().any(|r| r.label == "main()"))
    }
    /// The one call of `main()` (an outermost call of its thread).
    pub fn main(&self) -> &Node {
        let mains: Vec<&Node> = self
            .threads
            .iter()
            .flat_map(|t| t.roots.iter())
            .filter(|r| r.label == "main()")
            .collect();
        assert_eq!(
            mains.len(),
            1,
            "expected exactly one outermost call of main(), got {}",
            mains.len()
        );
        mains[0]
    }
    pub fn count(&self, label: &str) -> usize {
        self.threads.iter().map(|t| t.count(label)).sum()
    }
    /// The same replay without its signal markers ([`strip_markers`]).
    pub fn without_markers(&self) -> Replay {
        Replay {
            threads: self
                .threads
                .iter()
                .map(|t| ThreadTree {
                    roots: strip_markers(&t.roots),
                    ..t.clone()
                })
                .collect(),
        }
    }
}

/// Whether a node's label is a marker line of the replay, not a call:
/// `/* signal SIGUSR1 */` (or `/* signal 34 */` for a signal without a
/// standard name).
pub fn is_marker(label: &str) -> bool {
    label.starts_with("/*")
}

/// The calls of `nodes`, without the marker leaves.
pub fn strip_markers(nodes: &[Node]) -> Vec<Node> {
    project(nodes, &|l| !is_marker(l))
}

/// One line of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LineKind {
    Open(String),
    Close(String),
    Leaf(String),
    Marker(String),
}

/// What a line says besides its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Marks {
    /// ` (unwound)`: left by longjmp or an exception.
    unwound: bool,
    /// ` (not returned)`: still running when the process ended (killed,
    /// exit() deep down): no duration.
    not_returned: bool,
    /// ` (entry not recorded)`: the exit of a call entered before the task's
    /// trace begins (a fork child returning from `fork`); ` (entry not in
    /// history)` too (a flight recorder's snapshot).
    entry_not_recorded: bool,
}

/// One line of the replay's call tree, split:
/// `  0.210 us [ 4321] |     strtol();` has the duration `0.210 us`, the
/// tid 4321, the depth 2 (two spaces per level, or a `(depth N) ` prefix
/// beyond the indentation cap) and the text `strtol();`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLine<'a> {
    pub duration: &'a str,
    pub tid: u64,
    pub depth: usize,
    pub text: &'a str,
}

pub fn split_replay_line(line: &str) -> Result<ReplayLine<'_>, String> {
    let open = line.find('[').ok_or("no `[tid]`")?;
    let close = open + line[open..].find(']').ok_or("no `]` after `[`")?;
    let duration = line[..open].trim();
    let tid: u64 = line[open + 1..close]
        .trim()
        .parse()
        .map_err(|_| "tid is not a number")?;
    let rest = line[close + 1..]
        .strip_prefix(" | ")
        .ok_or("no ` | ` after `[tid]`")?;
    let spaces = rest.len() - rest.trim_start_matches(' ').len();
    if spaces % 2 != 0 {
        return Err(format!("odd indentation ({spaces} spaces)"));
    }
    let mut depth = spaces / 2;
    let mut text = rest[spaces..].trim_end();
    if let Some(t) = text.strip_prefix("(depth ") {
        let (n, t) = t.split_once(") ").ok_or("bad `(depth N)` prefix")?;
        depth = n.parse().map_err(|_| "bad depth number")?;
        text = t;
    }
    Ok(ReplayLine {
        duration,
        tid,
        depth,
        text,
    })
}

/// The markers among replay lines (see [`is_marker`]), as (depth, text).
pub fn marker_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    lines
        .into_iter()
        .filter_map(|l| split_replay_line(l).ok())
        .filter(|l| is_marker(l.text))
        .map(|l| (l.depth, l.text))
        .collect()
}

/// Splits a line into (duration, tid, depth, kind, marks).
fn parse_line(line: &str) -> Result<(String, u64, usize, LineKind, Marks), String> {
    let ReplayLine {
        duration,
        tid,
        depth,
        text,
    } = split_replay_line(line)?;
    let duration = duration.to_string();
    let mut text = text.to_string();
    let mut marks = Marks::default();
    loop {
        if let Some(t) = text.strip_suffix(" (unwound)") {
            text = t.trim_end().to_string();
            marks.unwound = true;
        } else if let Some(t) = text.strip_suffix(" (not returned)") {
            text = t.trim_end().to_string();
            marks.not_returned = true;
        } else if let Some(t) = text
            .strip_suffix(" (entry not recorded)")
            .or_else(|| text.strip_suffix(" (entry not in history)"))
        {
            text = t.trim_end().to_string();
            marks.entry_not_recorded = true;
        } else {
            break;
        }
    }
    let kind = if text.starts_with("/*") && text.ends_with("*/") {
        // A marker (`/* signal SIGUSR1 */`): kept as a leaf labelled with
        // its text.
        LineKind::Marker(text.clone())
    } else if let Some(t) = text.strip_prefix('}') {
        let t = t.trim();
        // `} = 6; /* name */`: a return value before the comment.
        let t = match t.strip_prefix('=') {
            Some(v) => v.find("; /*").map_or(t, |i| &v[i + 1..]).trim(),
            None => t,
        };
        let name = t
            .strip_prefix("/*")
            .and_then(|t| t.strip_suffix("*/"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        LineKind::Close(name)
    } else if let Some(t) = text.strip_suffix(" {") {
        LineKind::Open(t.to_string())
    } else if let Some(t) = text.strip_suffix(';') {
        let mut t = t.trim_end().to_string();
        if let Some(u) = t.strip_suffix(" (unwound)") {
            t = u.to_string();
            marks.unwound = true;
        }
        LineKind::Leaf(t)
    } else {
        return Err(format!("neither `name {{`, `}}` nor `name;`: {text:?}"));
    };
    if let LineKind::Open(l) | LineKind::Leaf(l) = &kind {
        if l.is_empty() {
            return Err("empty function name".into());
        }
    }
    Ok((duration, tid, depth, kind, marks))
}

/// Whether the name in `} /* name */` closes the call labelled `label`.
fn closes(label: &str, name: &str) -> bool {
    name.is_empty()
        || label == name
        || label.strip_suffix("()") == Some(name)
        || label.starts_with(name)
}

/// Parses the whole output of `replay`, checking per thread that every line
/// is at the depth of the calls open at that point, that every `}` closes
/// the innermost open call (by name), and that open lines have no duration
/// while leaves and closes have one (except ` (not returned)` ones). Calls
/// still open at the end of the trace, or closed as ` (not returned)`, are
/// kept with `closed: false`.
pub fn parse_replay(text: &str) -> Result<Replay, String> {
    struct Open {
        node: Node,
    }
    // Trees are keyed by task (the `# task N:` header before them) and
    // tid: an exec'd program is a new task with the same tid.
    let mut stacks: BTreeMap<(u64, u64), Vec<Open>> = BTreeMap::new();
    let mut trees: BTreeMap<(u64, u64), ThreadTree> = BTreeMap::new();
    let mut order: Vec<(u64, u64)> = Vec::new();
    // The task of each tid: set by its `# task N: pid P, tid T` header
    // (tasks are interleaved by time; an exec'd task keeps its tid).
    let mut task_of: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if let Some(rest) = line.strip_prefix("# task ") {
            let n = rest.split(':').next().and_then(|n| n.trim().parse().ok());
            let tid = rest
                .split_once(", tid ")
                .and_then(|(_, t)| t.split(' ').next())
                .and_then(|t| t.parse().ok());
            if let (Some(n), Some(tid)) = (n, tid) {
                task_of.insert(tid, n);
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (duration, tid, depth, kind, marks) =
            parse_line(line).map_err(|e| format!("line {lineno}: {e}: {line:?}"))?;
        let task = task_of.get(&tid).copied().unwrap_or(u64::MAX);
        let key = (task, tid);
        let stack = stacks.entry(key).or_default();
        let tree = trees.entry(key).or_insert_with(|| {
            order.push(key);
            ThreadTree {
                tid,
                task: (task != u64::MAX).then_some(task),
                ..Default::default()
            }
        });
        tree.lines += 1;
        let attach =
            |stack: &mut Vec<Open>, tree: &mut ThreadTree, node: Node| match stack.last_mut() {
                Some(parent) => parent.node.children.push(node),
                None => tree.roots.push(node),
            };
        match kind {
            LineKind::Open(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label} {{` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                if !duration.is_empty() {
                    return Err(format!(
                        "line {lineno}: an opening line has a duration: {line:?}"
                    ));
                }
                stack.push(Open {
                    node: Node {
                        label,
                        unwound: false,
                        closed: false,
                        children: Vec::new(),
                    },
                });
            }
            LineKind::Leaf(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label};` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                if duration.is_empty() && !marks.not_returned {
                    return Err(format!("line {lineno}: a leaf has no duration: {line:?}"));
                }
                attach(
                    stack,
                    tree,
                    Node {
                        label,
                        unwound: marks.unwound,
                        closed: !marks.not_returned,
                        children: Vec::new(),
                    },
                );
            }
            LineKind::Marker(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label}` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                attach(
                    stack,
                    tree,
                    Node {
                        label,
                        unwound: false,
                        closed: true,
                        children: Vec::new(),
                    },
                );
            }
            LineKind::Close(_) if marks.entry_not_recorded => {
                if !stack.is_empty() || depth != 0 {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `(entry not recorded)` inside a call: {line:?}"
                    ));
                }
            }
            LineKind::Close(name) => {
                let Some(mut top) = stack.pop() else {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}}` with no open call: {line:?}"
                    ));
                };
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}}` of {} at depth {depth}, expected {}: {line:?}",
                        top.node.label,
                        stack.len()
                    ));
                }
                if !closes(&top.node.label, &name) {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}} /* {name} */` closes {}: {line:?}",
                        top.node.label
                    ));
                }
                if duration.is_empty() && !marks.not_returned {
                    return Err(format!(
                        "line {lineno}: a closing line has no duration: {line:?}"
                    ));
                }
                top.node.closed = !marks.not_returned;
                top.node.unwound = marks.unwound;
                attach(stack, tree, top.node);
            }
        }
    }
    // Calls still open at the end: attach them, innermost first.
    for (key, mut stack) in stacks {
        let tree = trees.get_mut(&key).unwrap();
        while let Some(top) = stack.pop() {
            match stack.last_mut() {
                Some(parent) => parent.node.children.push(top.node),
                None => tree.roots.push(top.node),
            }
        }
    }
    Ok(Replay {
        threads: order
            .into_iter()
            .map(|t| trees.remove(&t).unwrap())
            .collect(),
    })
}

/// Keeps the calls whose label satisfies `keep`; the kept descendants of a
/// dropped call take its place, in order.
pub fn project(nodes: &[Node], keep: &dyn Fn(&str) -> bool) -> Vec<Node> {
    let mut out = Vec::new();
    for n in nodes {
        let children = project(&n.children, keep);
        if keep(&n.label) {
            out.push(Node {
                label: n.label.clone(),
                unwound: n.unwound,
                closed: n.closed,
                children,
            });
        } else {
            out.extend(children);
        }
    }
    out
}

/// Asserts every call of `nodes`, and of their subtrees, was closed
/// (returned or unwound).
#[track_caller]
pub fn assert_all_closed(nodes: &[Node], ctx: &str) {
    for n in nodes {
        n.walk(&mut Vec::new(), &mut |n, path| {
            assert!(n.closed, "{ctx}: {} left open under {path:?}", n.label);
        });
    }
}

/// The tree as an outline: one call a line, two spaces per depth, ` (unwound)`
/// after unwound calls, ` (open)` after calls not closed.
pub fn outline(nodes: &[Node]) -> String {
    fn go(n: &Node, depth: usize, out: &mut String) {
        let _ = write!(out, "{}{}", "  ".repeat(depth), n.label);
        if n.unwound {
            out.push_str(" (unwound)");
        }
        if !n.closed {
            out.push_str(" (open)");
        }
        out.push('\n');
        for c in &n.children {
            go(c, depth + 1, out);
        }
    }
    let mut s = String::new();
    for n in nodes {
        go(n, 0, &mut s);
    }
    s
}

/// An outline written in a test: strips the common indentation and blank
/// lines, so it can be written as an indented raw string.
pub fn expected_outline(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let indent = lines
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut s = String::new();
    for l in lines {
        s.push_str(l[indent..].trim_end());
        s.push('\n');
    }
    s
}

/// Asserts two outlines are equal, showing both and the first difference.
#[track_caller]
pub fn assert_outline_eq(actual: &str, expected: &str, context: &str) {
    if actual == expected {
        return;
    }
    let a: Vec<&str> = actual.lines().collect();
    let e: Vec<&str> = expected.lines().collect();
    let first = a
        .iter()
        .zip(e.iter())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(e.len()));
    panic!(
        "{context}: call tree differs from the expected one at line {} (actual {:?}, expected {:?})\n\
         --- expected ---\n{expected}--- actual ---\n{actual}",
        first + 1,
        a.get(first),
        e.get(first)
    );
}

// ---------------------------------------------------------------------------
// ELF symbols and disassembly
// ---------------------------------------------------------------------------

/// A function symbol (FUNC or IFUNC, defined) of an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub global: bool,
}

/// Function symbols of `.symtab` and `.dynsym` (by `readelf -sW`), without
/// version suffixes, deduplicated.
pub fn function_symbols(elf: &Path) -> Vec<Sym> {
    let r = tool(
        "readelf",
        &[OsStr::new("-sW"), OsStr::new("--dyn-syms"), elf.as_os_str()],
    );
    let mut set = BTreeSet::new();
    let mut out = Vec::new();
    for line in r.stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        if f.len() < 8
            || !f[0].ends_with(':')
            || !(f[3] == "FUNC" || f[3] == "IFUNC")
            || f[6] == "UND"
        {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(f[1], 16) else {
            continue;
        };
        let size = if let Some(h) = f[2].strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap_or(0)
        } else {
            f[2].parse().unwrap_or(0)
        };
        let name = f[7].split('@').next().unwrap().to_string();
        if set.insert((name.clone(), addr)) {
            out.push(Sym {
                name,
                addr,
                size,
                global: f[4] != "LOCAL",
            });
        }
    }
    out
}

/// One instruction of the disassembly.
#[derive(Debug, Clone)]
pub struct Insn {
    pub addr: u64,
    /// Without prefixes such as `bnd` or `notrack`.
    pub mnemonic: String,
    /// The direct target of a jump or call.
    pub target: Option<u64>,
    pub text: String,
}

/// A function of the disassembly (objdump's `<name>:` blocks).
#[derive(Debug, Clone)]
pub struct DisFunc {
    pub name: String,
    pub start: u64,
    pub insns: Vec<Insn>,
}

impl DisFunc {
    pub fn is_jump(i: &Insn) -> bool {
        i.mnemonic.starts_with('j')
    }
    pub fn is_call(i: &Insn) -> bool {
        i.mnemonic.starts_with("call")
    }
    /// Direct jumps (conditional or not) from inside the function to its
    /// own first instruction.
    pub fn self_entry_jumps(&self) -> Vec<&Insn> {
        self.insns
            .iter()
            .filter(|i| Self::is_jump(i) && i.target == Some(self.start))
            .collect()
    }
    /// Direct calls of its own first instruction.
    pub fn self_calls(&self) -> Vec<&Insn> {
        self.insns
            .iter()
            .filter(|i| Self::is_call(i) && i.target == Some(self.start))
            .collect()
    }
}

const PREFIXES: &[&str] = &[
    "bnd", "notrack", "rep", "repz", "repnz", "repe", "repne", "lock", "data16", "cs", "ds",
    "addr32",
];

/// `objdump -d` of all executable sections of `elf`.
pub fn disassemble(elf: &Path) -> Vec<DisFunc> {
    let r = tool(
        "objdump",
        &[
            OsStr::new("-d"),
            OsStr::new("--no-show-raw-insn"),
            elf.as_os_str(),
        ],
    );
    parse_objdump(&r.stdout)
}

pub fn parse_objdump(text: &str) -> Vec<DisFunc> {
    let mut funcs: Vec<DisFunc> = Vec::new();
    for line in text.lines() {
        // Function header: `0000000000001250 <spin_entry>:`
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((addr, name)) = rest.split_once(" <") {
                if let Ok(a) = u64::from_str_radix(addr.trim(), 16) {
                    funcs.push(DisFunc {
                        name: name.to_string(),
                        start: a,
                        insns: Vec::new(),
                    });
                    continue;
                }
            }
        }
        // Instruction: `    1253:\tjg     1250 <spin_entry>`
        let Some((addr, rest)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(a) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let Some(f) = funcs.last_mut() else { continue };
        let mut toks = rest.split_whitespace().peekable();
        while let Some(t) = toks.peek() {
            if PREFIXES.contains(t) {
                toks.next();
            } else {
                break;
            }
        }
        let mnemonic = toks.next().unwrap_or("").to_string();
        let target = toks.next().and_then(|op| {
            // A direct target is `<hex> <symbol+off>`.
            if rest.contains(&format!("{op} <")) {
                u64::from_str_radix(op, 16).ok()
            } else {
                None
            }
        });
        f.insns.push(Insn {
            addr: a,
            mnemonic,
            target,
            text: rest.trim().to_string(),
        });
    }
    funcs
}

pub fn find_function<'a>(funcs: &'a [DisFunc], name: &str) -> &'a DisFunc {
    funcs
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no function `{name}` in the disassembly"))
}

/// The disassembly of one function, as text, for messages.
pub fn listing(f: &DisFunc) -> String {
    let mut s = format!("{:x} <{}>:\n", f.start, f.name);
    for i in &f.insns {
        let _ = writeln!(s, "  {:x}: {}", i.addr, i.text);
    }
    s
}

// ---------------------------------------------------------------------------
// Callgrind
// ---------------------------------------------------------------------------

/// A function as callgrind names it: (object path, raw name).
pub type FnKey = (String, String);

/// Call counts of one callgrind run, by (object path, raw function name).
#[derive(Debug, Clone, Default)]
pub struct Callgrind {
    /// Calls of each function, summed over all callers.
    pub calls: BTreeMap<(String, String), u64>,
    /// Calls of each function made by itself (same object and name, any
    /// recursion level): for functions that jump to their own entry.
    pub self_calls: BTreeMap<(String, String), u64>,
    /// Calls by (caller, callee), each as (object, raw name without the
    /// recursion suffix).
    pub arcs: BTreeMap<(FnKey, FnKey), u64>,
    /// The output file, for messages.
    pub file: PathBuf,
}

/// Strips callgrind's recursion-level suffix: `fib'2` → `fib`.
pub fn strip_rec_suffix(name: &str) -> &str {
    if let Some(pos) = name.rfind('\'') {
        if pos + 1 < name.len() && name[pos + 1..].bytes().all(|b| b.is_ascii_digit()) {
            return &name[..pos];
        }
    }
    name
}

/// Parses callgrind's output (format version 1, with or without name
/// compression). Only call lines matter: `calls=N ...` after `cfn=`, with
/// the callee's object given by `cob=` (for that call only; the caller's
/// object when absent).
pub fn parse_callgrind(text: &str) -> Result<Callgrind, String> {
    let mut ob_names: HashMap<String, String> = HashMap::new();
    let mut fn_names: HashMap<String, (String, String)> = HashMap::new(); // id -> (object, name)
    let mut cur_ob = String::new();
    let mut cur_fn: Option<(String, String)> = None;
    let mut cob: Option<String> = None;
    let mut cfn: Option<(String, String)> = None;
    let mut out = Callgrind::default();

    // `(id) name`, `(id)` or `name`.
    fn split_compressed(v: &str) -> (Option<&str>, Option<&str>) {
        let v = v.trim();
        if let Some(rest) = v.strip_prefix('(') {
            if let Some(end) = rest.find(')') {
                let id = &rest[..end];
                let name = rest[end + 1..].trim();
                return (Some(id), if name.is_empty() { None } else { Some(name) });
            }
        }
        (None, Some(v))
    }
    let resolve_ob =
        |v: &str, names: &mut HashMap<String, String>, lineno: usize| -> Result<String, String> {
            match split_compressed(v) {
                (Some(id), Some(name)) => {
                    names.insert(id.to_string(), name.to_string());
                    Ok(name.to_string())
                }
                (Some(id), None) => names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown object id ({id})")),
                (None, Some(name)) => Ok(name.to_string()),
                (None, None) => Err(format!("line {lineno}: empty object")),
            }
        };
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if let Some(v) = line.strip_prefix("ob=") {
            cur_ob = resolve_ob(v, &mut ob_names, lineno)?;
        } else if let Some(v) = line.strip_prefix("cob=") {
            cob = Some(resolve_ob(v, &mut ob_names, lineno)?);
        } else if let Some(v) = line.strip_prefix("fn=") {
            let f = match split_compressed(v) {
                (Some(id), Some(name)) => {
                    let f = (cur_ob.clone(), name.to_string());
                    fn_names.insert(id.to_string(), f.clone());
                    f
                }
                (Some(id), None) => fn_names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown function id ({id})"))?,
                (None, Some(name)) => (cur_ob.clone(), name.to_string()),
                (None, None) => return Err(format!("line {lineno}: empty fn=")),
            };
            cur_fn = Some(f);
            cob = None;
            cfn = None;
        } else if let Some(v) = line.strip_prefix("cfn=") {
            let obj = cob.clone().unwrap_or_else(|| cur_ob.clone());
            cfn = Some(match split_compressed(v) {
                (Some(id), Some(name)) => {
                    let f = (obj, name.to_string());
                    fn_names.insert(id.to_string(), f.clone());
                    f
                }
                (Some(id), None) => fn_names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown function id ({id})"))?,
                (None, Some(name)) => (obj, name.to_string()),
                (None, None) => return Err(format!("line {lineno}: empty cfn=")),
            });
        } else if let Some(v) = line.strip_prefix("calls=") {
            let n: u64 = v
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("line {lineno}: bad calls= line {line:?}"))?;
            let (obj, name) = cfn
                .take()
                .ok_or(format!("line {lineno}: calls= without cfn="))?;
            let callee = (obj, strip_rec_suffix(&name).to_string());
            *out.calls.entry(callee.clone()).or_insert(0) += n;
            if let Some((caller_obj, caller_name)) = &cur_fn {
                let caller = (
                    caller_obj.clone(),
                    strip_rec_suffix(caller_name).to_string(),
                );
                *out.arcs.entry((caller, callee.clone())).or_insert(0) += n;
                if *caller_obj == callee.0 && strip_rec_suffix(caller_name) == callee.1 {
                    *out.self_calls.entry(callee).or_insert(0) += n;
                }
            }
            cob = None;
        }
    }
    Ok(out)
}

/// Output of `valgrind --version`, part of the callgrind cache key.
fn valgrind_version() -> String {
    let r = run_with_timeout(
        Command::new("valgrind").arg("--version"),
        Duration::from_secs(60),
    );
    r.expect_success();
    r.stdout.trim().to_string()
}

/// Runs `exe args` under callgrind (cached by the executable's content, the
/// arguments and valgrind's version) and parses its counts. The program
/// must exit with status 0.
pub fn callgrind(exe: &Path, args: &[&str]) -> Callgrind {
    callgrind_with_timeout(exe, args, Duration::from_secs(600))
}

pub fn callgrind_with_timeout(exe: &Path, args: &[&str], timeout: Duration) -> Callgrind {
    callgrind_run(exe, args, &[], timeout)
}

/// The calls made while `func` (a function of `exe`, not recursive) runs,
/// `func`'s own calls included: what `fctrace -F func` shows. Callgrind
/// collects only inside `func` (`--toggle-collect`), but still names the
/// calls that led to it: those are left out (only calls made by `func`
/// or by a function reachable from it count).
pub fn callgrind_under(exe: &Path, args: &[&str], func: &str) -> Callgrind {
    let toggle = format!("--toggle-collect={func}");
    let cg = callgrind_run(
        exe,
        args,
        &["--collect-atstart=no", &toggle],
        Duration::from_secs(600),
    );
    let root = (exe.to_string_lossy().into_owned(), func.to_string());
    let same = |a: &(String, String), b: &(String, String)| {
        a.1 == b.1 && canonical(Path::new(&a.0)) == canonical(Path::new(&b.0))
    };
    // Functions reachable from func.
    let mut inside: Vec<(String, String)> = Vec::new();
    for (caller, _) in cg.arcs.keys() {
        if same(caller, &root) && !inside.contains(caller) {
            inside.push(caller.clone());
        }
    }
    loop {
        let mut grew = false;
        for (caller, callee) in cg.arcs.keys() {
            if inside.contains(caller) && !inside.contains(callee) {
                inside.push(callee.clone());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut under = Callgrind {
        file: cg.file.clone(),
        ..Callgrind::default()
    };
    for ((caller, callee), n) in &cg.arcs {
        if inside.contains(caller) || same(callee, &root) {
            *under.calls.entry(callee.clone()).or_insert(0) += n;
            under.arcs.insert((caller.clone(), callee.clone()), *n);
            if caller == callee {
                *under.self_calls.entry(callee.clone()).or_insert(0) += n;
            }
        }
    }
    under
}

/// Runs `exe args` under callgrind with `extra` options, cached.
fn callgrind_run(exe: &Path, args: &[&str], extra: &[&str], timeout: Duration) -> Callgrind {
    let mut h = Fnv::new()
        .file(exe)
        .str(&valgrind_version())
        .str(&exe.to_string_lossy());
    for a in args {
        h = h.str(a);
    }
    for e in extra {
        h = h.str("callgrind option").str(e);
    }
    let stem = exe.file_name().unwrap().to_string_lossy().into_owned();
    let key = h.hex();
    let out = cache_subdir("callgrind").join(format!("{stem}-{key}.out"));
    if !out.exists() {
        let _lock = FileLock::acquire(&format!("callgrind-{stem}-{key}"));
        if !out.exists() {
            let tmp = out.with_extension(format!("tmp-{}", unique_suffix()));
            let start = Instant::now();
            let r = run_with_timeout(
                Command::new("valgrind")
                    .arg("--tool=callgrind")
                    .arg("--demangle=no")
                    .arg("--show-below-main=yes")
                    .args(extra)
                    .arg(format!("--callgrind-out-file={}", tmp.display()))
                    .arg(exe)
                    .args(args),
                timeout,
            );
            assert!(r.success(), "callgrind run failed\n{}", r.describe());
            let took = start.elapsed();
            if took > Duration::from_secs(10) {
                eprintln!(
                    "callgrind of {} took {:.1} s",
                    exe.display(),
                    took.as_secs_f64()
                );
            }
            fs::rename(&tmp, &out).unwrap();
        }
    }
    let text = fs::read_to_string(&out).unwrap();
    let mut cg =
        parse_callgrind(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", out.display()));
    cg.file = out;
    cg
}

impl Callgrind {
    /// Counts of the functions of object `obj`, by raw name.
    pub fn of_object(&self, obj: &Path) -> BTreeMap<String, u64> {
        let obj = canonical(obj);
        let mut m = BTreeMap::new();
        for ((o, name), n) in &self.calls {
            if canonical(Path::new(o)) == obj {
                *m.entry(name.clone()).or_insert(0) += n;
            }
        }
        m
    }
    fn self_calls_of_object(&self, obj: &Path) -> BTreeMap<String, u64> {
        let obj = canonical(obj);
        let mut m = BTreeMap::new();
        for ((o, name), n) in &self.self_calls {
            if canonical(Path::new(o)) == obj {
                *m.entry(name.clone()).or_insert(0) += n;
            }
        }
        m
    }
}

/// What [`compare_with_callgrind`] compared and left out.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Functions compared (by address) with at least one call.
    pub compared: usize,
    /// Sum of the calls compared.
    pub total_calls: u64,
    /// Functions that jump to their own entry, compared against callgrind's
    /// calls from other functions (name, callgrind total, expected).
    pub self_entry: Vec<(String, u64, u64)>,
    /// Left out, with the reason.
    pub excluded: Vec<(String, String)>,
}

/// Which functions of the executable are left out of the comparison, and
/// which are compared in a special way.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// Only compare functions whose raw symbol satisfies this (e.g. the Rust
    /// program's own crate); all of the executable's functions if None.
    pub only: Option<fn(&str) -> bool>,
    /// Options of `fctrace record` (e.g. `-l`).
    pub record_opts: &'static [&'static str],
}

/// Compares fctrace's call counts of every function of `exe` with
/// callgrind's, by address (so aliases such as C1/C2 constructors or
/// functions merged by identical code folding match whatever name each tool
/// chose). Returns Err with every mismatch listed.
///
/// Left out: C runtime functions ([`CRT_FUNCTIONS`]) and `.cold` parts (and
/// fctrace must report no `.cold` part). A function with a direct jump to its
/// own first instruction is compared with callgrind's count minus the calls
/// from itself (see the module documentation), unless it also calls itself
/// directly, when the two cannot be told apart: then it is left out.
pub fn compare_with_callgrind(
    exe: &Path,
    report: &Report,
    cg: &Callgrind,
    opts: &CompareOptions,
) -> Result<Comparison, String> {
    let d = count_diff(exe, report, cg, opts);
    if d.mismatches.is_empty() && d.problems.is_empty() {
        return Ok(d.cmp);
    }
    let mut msg = format!(
        "call counts of {} differ from callgrind's ({} mismatches, {} other problems; {} functions agree; callgrind output: {})\n",
        exe.display(),
        d.mismatches.len(),
        d.problems.len(),
        d.cmp.compared,
        cg.file.display()
    );
    for m in d.mismatches.iter().chain(&d.problems) {
        let _ = writeln!(msg, "  {m}");
    }
    Err(msg)
}

/// The details of a comparison: what agreed, what did not (`name: fctrace
/// N, callgrind M`), and other problems (names that are no function of the
/// executable, `.cold` parts reported as functions).
#[derive(Debug, Default)]
pub struct CountDiff {
    pub cmp: Comparison,
    pub mismatches: Vec<String>,
    pub problems: Vec<String>,
}

pub fn count_diff(exe: &Path, report: &Report, cg: &Callgrind, opts: &CompareOptions) -> CountDiff {
    let syms = function_symbols(exe);
    let mut addrs_of: HashMap<&str, BTreeSet<u64>> = HashMap::new();
    let mut names_at: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for s in &syms {
        addrs_of.entry(&s.name).or_default().insert(s.addr);
        names_at.entry(s.addr).or_default().insert(&s.name);
    }
    let funcs = disassemble(exe);
    let self_entry: HashMap<u64, (bool, bool)> = funcs
        .iter()
        .map(|f| {
            (
                f.start,
                (!f.self_entry_jumps().is_empty(), !f.self_calls().is_empty()),
            )
        })
        .collect();

    #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
    enum Key {
        Addr(u64),
        Name(String),
    }
    let mut problems: Vec<String> = Vec::new();
    let key_of = |name: &str| -> Option<Key> {
        if let Some(h) = name.strip_prefix("0x") {
            return u64::from_str_radix(h, 16).ok().map(Key::Addr);
        }
        match addrs_of.get(name) {
            Some(a) if a.len() == 1 => Some(Key::Addr(*a.iter().next().unwrap())),
            Some(_) => Some(Key::Name(name.to_string())),
            None => None,
        }
    };
    let display = |k: &Key| -> String {
        match k {
            Key::Addr(a) => match names_at.get(a) {
                Some(n) => n.iter().copied().collect::<Vec<_>>().join(" = "),
                None => format!("{a:#x}"),
            },
            Key::Name(n) => n.clone(),
        }
    };
    let names_of = |k: &Key| -> Vec<String> {
        match k {
            Key::Addr(a) => names_at
                .get(a)
                .map(|s| s.iter().map(|n| n.to_string()).collect())
                .unwrap_or_default(),
            Key::Name(n) => vec![n.clone()],
        }
    };

    let mut cmp = Comparison::default();
    let is_excluded = |k: &Key| -> Option<String> {
        let names = names_of(k);
        if names.iter().any(|n| CRT_FUNCTIONS.contains(&n.as_str())) {
            return Some("C runtime start-up code".into());
        }
        if names.iter().any(|n| n.contains(".cold")) {
            return Some("a .cold part, not a function".into());
        }
        if let Some(only) = opts.only {
            if !names.iter().any(|n| only(n)) {
                return Some("outside the compared set".into());
            }
        }
        if names.is_empty() {
            return Some("no symbol at this address".into());
        }
        None
    };

    // callgrind's side
    let cg_counts = cg.of_object(exe);
    let cg_self = cg.self_calls_of_object(exe);
    let mut expected: BTreeMap<Key, u64> = BTreeMap::new();
    let mut self_from_cg: BTreeMap<Key, u64> = BTreeMap::new();
    for (name, n) in &cg_counts {
        match key_of(name) {
            Some(k) => {
                *expected.entry(k.clone()).or_insert(0) += n;
                if let Some(s) = cg_self.get(name) {
                    *self_from_cg.entry(k).or_insert(0) += s;
                }
            }
            None => problems.push(format!(
                "callgrind names `{name}` ({n} calls), not a function symbol of the executable"
            )),
        }
    }
    // fctrace's side
    let mut actual: BTreeMap<Key, u64> = BTreeMap::new();
    for f in report.functions_of(exe) {
        if f.symbol.contains(".cold") {
            problems.push(format!(
                "fctrace reports the .cold part `{}` as a function ({} calls)",
                f.symbol, f.calls
            ));
            continue;
        }
        match key_of(&f.symbol) {
            Some(k) => *actual.entry(k).or_insert(0) += f.calls,
            None => problems.push(format!(
                "fctrace reports `{}` (symbol `{}`, {} calls), not a function symbol of the executable",
                f.name, f.symbol, f.calls
            )),
        }
    }

    let keys: BTreeSet<Key> = expected.keys().chain(actual.keys()).cloned().collect();
    let mut mismatches: Vec<String> = Vec::new();
    for k in keys {
        let name = display(&k);
        if let Some(reason) = is_excluded(&k) {
            cmp.excluded.push((name, reason));
            continue;
        }
        let mut want = expected.get(&k).copied().unwrap_or(0);
        let got = actual.get(&k).copied().unwrap_or(0);
        if let Key::Addr(a) = k {
            if let Some(&(jumps, calls)) = self_entry.get(&a) {
                if jumps && !SELF_ENTRY_JUMP_IS_CALL {
                    if calls {
                        cmp.excluded.push((
                            name,
                            "jumps to its own entry and calls itself: callgrind cannot tell loops from calls".into(),
                        ));
                        continue;
                    }
                    let total = want;
                    want -= self_from_cg.get(&k).copied().unwrap_or(0);
                    cmp.self_entry.push((name.clone(), total, want));
                }
            }
        }
        if want != got {
            mismatches.push(format!("{name}: fctrace {got}, callgrind {want}"));
        } else if want > 0 {
            cmp.compared += 1;
            cmp.total_calls += want;
        }
    }
    CountDiff {
        cmp,
        mismatches,
        problems,
    }
}

/// The oracle checked against itself, without fctrace: every name callgrind
/// gives to code of `exe` resolves to a function symbol (or is left out for
/// a stated reason), and an empty report differs exactly on the functions
/// callgrind saw called. Returns the number of functions compared.
pub fn assert_oracle_resolves(exe: &Path, args: &[&str]) -> usize {
    let cg = callgrind(exe, args);
    let empty = Report {
        functions: vec![],
        tasks: vec![],
        events: 0,
        lost_events: 0,
    };
    let d = count_diff(exe, &empty, &cg, &CompareOptions::default());
    assert!(
        d.problems.is_empty(),
        "{}: callgrind names that do not resolve:\n{}",
        exe.display(),
        d.problems.join("\n")
    );
    assert!(
        !d.mismatches.is_empty(),
        "{}: callgrind saw no call of the executable's functions",
        exe.display()
    );
    for m in &d.mismatches {
        assert!(m.contains(": fctrace 0, callgrind "), "{m}");
    }
    eprintln!(
        "{}: callgrind counts {} functions; left out: {:?}; compared without jumps to their own entry: {:?}",
        exe.display(),
        d.mismatches.len(),
        d.cmp.excluded,
        d.cmp.self_entry
    );
    d.mismatches.len()
}

/// Records `exe args` with fctrace, runs it under callgrind, and asserts the
/// counts agree for every function of the executable. Also asserts no event
/// was lost. Returns the comparison for further checks.
#[track_caller]
pub fn assert_counts_match_callgrind(
    exe: &Path,
    args: &[&str],
    opts: &CompareOptions,
) -> (Report, Comparison) {
    let rec = record(exe, args, opts.record_opts);
    let rep = report(&rec.dir.path);
    assert_eq!(
        rep.lost_events,
        0,
        "fctrace lost events recording {} (trace {})",
        exe.display(),
        rec.dir.path.display()
    );
    let cg = callgrind(exe, args);
    match compare_with_callgrind(exe, &rep, &cg, opts) {
        Ok(c) => {
            eprintln!(
                "{}: {} functions, {} calls agree with callgrind; {} compared without jumps to their own entry; {} left out",
                exe.display(),
                c.compared,
                c.total_calls,
                c.self_entry.len(),
                c.excluded.len()
            );
            (rep, c)
        }
        Err(msg) => panic!("{msg}(fctrace trace: {})", rec.dir.path.display()),
    }
}

// ---------------------------------------------------------------------------
// Sources from crates.io
// ---------------------------------------------------------------------------

/// The directory of a package of the workspace's dependency graph, found
/// with `cargo metadata` (which downloads and unpacks it if needed; the
/// dev-dependencies used this way are in a `cfg(any())` target table of
/// Cargo.toml, so cargo never builds them).
pub fn package_dir(package: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let _lock = FileLock::acquire("cargo-metadata");
    let r = run_with_timeout(
        Command::new(&cargo)
            .arg("metadata")
            .arg("--format-version")
            .arg("1")
            .arg("--manifest-path")
            .arg(&manifest),
        Duration::from_secs(600),
    );
    assert!(r.success(), "cargo metadata failed\n{}", r.describe());
    let v: serde_json::Value =
        serde_json::from_str(&r.stdout).expect("cargo metadata output is JSON");
    let pkgs = v["packages"].as_array().expect("cargo metadata: packages");
    let found: Vec<&serde_json::Value> = pkgs.iter().filter(|p| p["name"] == package).collect();
    assert!(
        !found.is_empty(),
        "package {package} is not in the dependency graph (is it a dev-dependency?)"
    );
    let manifest_path = found[0]["manifest_path"].as_str().expect("manifest_path");
    Path::new(manifest_path).parent().unwrap().to_path_buf()
}

// ---------------------------------------------------------------------------
// Sanitizer reports
// ---------------------------------------------------------------------------

/// A report with its run-dependent numbers replaced: hexadecimal
/// addresses, `==PID==`, `(pid=N)`, `tid=N`.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if let Some(hex) = rest.strip_prefix("0x") {
            let n = hex.bytes().take_while(|c| c.is_ascii_hexdigit()).count();
            out.push_str("ADDR");
            i += 2 + n;
            continue;
        }
        let number_after = ["==", "pid=", "tid="].into_iter().find(|p| {
            rest.starts_with(p) && rest[p.len()..].starts_with(|c: char| c.is_ascii_digit())
        });
        if let Some(p) = number_after {
            let n = rest[p.len()..]
                .bytes()
                .take_while(|c| c.is_ascii_digit())
                .count();
            out.push_str(p);
            out.push('N');
            i += p.len() + n;
            continue;
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The frame lines of a report (`#N ... in function file:line`) and its
/// headlines, normalised.
pub fn frames(text: &str) -> Vec<String> {
    normalise(text)
        .lines()
        .filter(|l| {
            l.trim_start().starts_with('#')
                || l.contains("ERROR:")
                || l.contains("SUMMARY:")
                || l.contains(" by thread ")
                || l.contains("created by")
        })
        .map(str::to_string)
        .collect()
}
