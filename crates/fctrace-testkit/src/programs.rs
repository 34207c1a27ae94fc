//! Building the test programs of `tests/programs/` (gcc, g++, rustc; cargo
//! for Rust programs that need its profiles), cached by a hash of compiler,
//! flags and sources; the sources of packages from crates.io.

use crate::paths::{cache_subdir, fctrace_crate_dir, program_source, unique_suffix, FileLock, Fnv};
use crate::process::{run, run_with_timeout, Run};

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

/// The directory of a package of the workspace's dependency graph, found
/// with `cargo metadata` (which downloads and unpacks it if needed; the
/// dev-dependencies used this way are in a `cfg(any())` target table of
/// Cargo.toml, so cargo never builds them).
pub fn package_dir(package: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = fctrace_crate_dir().join("Cargo.toml");
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
