//! Where things are: the fctrace binary, the test programs, the cache of
//! builds and outputs; names unique to a test; locks on files of the cache.

use std::fs;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `target/<profile>`: cargo runs each integration-test binary from its
/// `deps/` folder, next to the binaries it built (the tests' own
/// `CARGO_BIN_EXE_fctrace` only exists when the test binary is compiled;
/// tests/hygiene/harness.rs checks both agree).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's folder");
    deps.parent().expect("target/<profile>").to_path_buf()
}

/// The fctrace binary that cargo built for these tests.
pub fn fctrace_bin() -> PathBuf {
    profile_dir().join("fctrace")
}

/// The folder cargo gives integration tests for their files
/// (`CARGO_TARGET_TMPDIR`: `target/tmp`).
pub fn target_tmpdir() -> PathBuf {
    let profile = profile_dir();
    profile.parent().expect("the target folder").join("tmp")
}

/// The fctrace crate's folder, `crates/fctrace`.
pub fn fctrace_crate_dir() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent().expect("the crates folder").join("fctrace")
}

/// `crates/fctrace/tests/programs`.
pub fn programs_dir() -> PathBuf {
    fctrace_crate_dir().join("tests").join("programs")
}

pub fn program_source(file: &str) -> PathBuf {
    programs_dir().join(file)
}

/// Root of everything the tests cache or leave behind: builds, callgrind
/// outputs, trace directories (kept only when a test fails).
pub fn cache_root() -> PathBuf {
    let p = target_tmpdir().join("fctrace-tests");
    fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    p
}

pub(crate) fn cache_subdir(name: &str) -> PathBuf {
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
/// one process at a time, released on drop (when the file is closed).
pub struct FileLock {
    _open: fs::File,
}

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
        FileLock { _open: file }
    }
}
