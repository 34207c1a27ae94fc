//! What the debug-file lookup tests share: a small C program built with
//! its own build-id, stripped, its debug file kept apart, and nm's names of
//! its functions to check naming against; a lookup configuration.

#![allow(dead_code)]

use fctrace_debuginfo::debuginfod::Settings;
use fctrace_debuginfo::{name_symtab, Config, Finder, Found, Origin};
use fctrace_format::symtab::{
    unnamed_function_name, FuncKind, FuncStatus, Function, Module, SymTab,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static int square(int x) { return x * x + (x & 1); }
__attribute__((noinline)) int sum_squares(int n) { int s = 0; for (int i = 0; i < n; i++) s += square(i); return s; }
__attribute__((noinline)) static long fold(const char *s) { long h = 7; while (*s) h = h * 31 + *s++; return h; }
int main(int argc, char **argv) { printf("%d %ld\n", sum_squares(argc + 3), fold(argv[0])); return 0; }
"#;

#[track_caller]
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install gcc binutils)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A program built -O2 -g with a build-id of its own, stripped, its debug
/// kept apart, and linked to it.
pub struct Built {
    pub _dir: tempfile::TempDir,
    pub dir: PathBuf,
    /// The stripped program, with a `.gnu_debuglink` to `prog.debug`.
    pub stripped: PathBuf,
    pub debug: PathBuf,
    pub build_id: String,
    pub crc: u32,
    /// nm's function symbols of the unstripped build: address -> names.
    pub functions: BTreeMap<u64, Vec<String>>,
}

pub fn build(with_build_id: bool) -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("prog.c"), SOURCE).unwrap();
    // A build-id no other test (or run) has: the time and pid in it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("{:032x}{:08x}", nanos, std::process::id());
    let id_flag = if with_build_id {
        format!("-Wl,--build-id=0x{id}")
    } else {
        "-Wl,--build-id=none".to_string()
    };
    let full = dir.join("prog.full");
    run(Command::new("gcc")
        .args(["-O2", "-g", &id_flag, "-o"])
        .arg(&full)
        .arg(dir.join("prog.c")));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(dir.join("prog.debug")));
    let bare = dir.join("prog.bare");
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&bare)
        .arg(&full));
    let stripped = dir.join("prog");
    run(Command::new("objcopy")
        .arg("--add-gnu-debuglink=prog.debug")
        .arg(&bare)
        .arg(&stripped)
        .current_dir(&dir));
    // Kept apart: not next to the program, where its debug link would
    // find it (the tests put it where they look).
    std::fs::create_dir(dir.join("kept")).unwrap();
    let debug = dir.join("kept").join("prog.debug");
    std::fs::rename(dir.join("prog.debug"), &debug).unwrap();
    let nm = run(Command::new("nm").arg("--defined-only").arg(&full));
    let mut functions: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in nm.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && (f[1] == "T" || f[1] == "t") {
            let addr = u64::from_str_radix(f[0], 16).unwrap();
            functions.entry(addr).or_default().push(f[2].to_string());
        }
    }
    assert!(run(Command::new("nm")
        .arg(&stripped)
        .stderr(std::process::Stdio::null()))
    .is_empty());
    // The CRC the debug link holds, as readelf shows it.
    let dump = run(Command::new("readelf")
        .args(["-x", ".gnu_debuglink"])
        .arg(&stripped));
    let words: Vec<&str> = dump
        .lines()
        .filter(|l| l.trim_start().starts_with("0x"))
        .flat_map(|l| l.split_whitespace().skip(1).take(4))
        .collect();
    let bytes: Vec<u8> = words
        .concat()
        .as_bytes()
        .chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
        .collect();
    let crc = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
    Built {
        _dir: tmp,
        dir,
        stripped,
        debug,
        build_id: if with_build_id { id } else { String::new() },
        crc,
        functions,
    }
}

impl Built {
    pub fn module(&self) -> Module {
        Module {
            build_id: self.build_id.clone(),
            debuglink: "prog.debug".into(),
            debuglink_crc: self.crc,
            ..Module::new(0, 0x5555_0000_0000, self.stripped.to_str().unwrap())
        }
    }

    /// The symbol table the agent writes for the stripped program: its
    /// functions by module-and-offset name.
    pub fn symtab(&self) -> SymTab {
        let path = self.stripped.to_str().unwrap();
        SymTab {
            session: 0,
            pid: 1,
            exe: path.into(),
            modules: vec![self.module()],
            functions: self
                .functions
                .keys()
                .enumerate()
                .map(|(i, &addr)| Function {
                    id: i as u32,
                    module: 0,
                    addr,
                    size: 1,
                    kind: FuncKind::Function,
                    status: FuncStatus::Traced,
                    name: unnamed_function_name(path, addr),
                })
                .collect(),
            forked: None,
        }
    }

    /// Names the stripped program's table and checks every function got
    /// one of nm's names for its address; returns where the file was.
    #[track_caller]
    pub fn names_through(&self, finder: &mut Finder) -> Found {
        let mut table = self.symtab();
        let origins = name_symtab(&mut table, finder);
        let Origin::DebugFile {
            found,
            named,
            unnamed,
        } = &origins[0].origin
        else {
            panic!("no debug file found: {origins:?}");
        };
        assert_eq!(
            (*named, *unnamed),
            (self.functions.len(), self.functions.len())
        );
        for f in &table.functions {
            assert!(self.functions[&f.addr].contains(&f.name), "{f:?}");
        }
        let names: Vec<&str> = table.functions.iter().map(|f| f.name.as_str()).collect();
        for want in ["main", "sum_squares", "square", "fold"] {
            assert!(
                names.iter().any(|n| n.starts_with(want)),
                "{want} in {names:?}"
            );
        }
        found.clone()
    }
}

pub fn config(dirs: Vec<PathBuf>, root: &Path, servers: Vec<String>, cache: &Path) -> Config {
    Config {
        debug_dirs: dirs,
        standard_root: root.to_path_buf(),
        debuginfod: Settings {
            servers,
            cache: cache.to_path_buf(),
            timeout: Duration::from_secs(1),
        },
    }
}

pub fn offline(dirs: Vec<PathBuf>) -> Finder {
    Finder::new(config(
        dirs,
        Path::new("/nonexistent"),
        vec![],
        Path::new("/nonexistent"),
    ))
}

#[track_caller]
pub fn not_found(b: &Built, finder: &mut Finder) {
    let mut table = b.symtab();
    let origins = name_symtab(&mut table, finder);
    assert_eq!(
        origins[0].origin,
        Origin::NotFound {
            unnamed: b.functions.len()
        }
    );
    assert_eq!(table, b.symtab());
}
