//! `--list-event` (uftrace's): the SDT probes (`.note.stapsdt`, from
//! `<sys/sdt.h>`'s STAP_PROBE macros) of a program and of the libraries it
//! needs, read from the files without running anything. (`-E` records
//! them: the agent's `instrument/sdt.rs`.)

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a program named on the command line is (through PATH without a
/// `/`, as exec does).
fn program_path(program: &OsString) -> anyhow::Result<PathBuf> {
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
        .ok_or_else(|| anyhow::anyhow!("{}: not found in PATH", p.display()))
}

/// The directories searched for a library named `name` needed by the file
/// `from` (its run paths, `$ORIGIN` replaced), LD_LIBRARY_PATH, then the
/// system's: the dynamic loader's order, without ld.so.cache's extra
/// directories.
fn find_library(name: &str, from: &Path, run_paths: &[String]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let origin = from.parent().unwrap_or(Path::new("."));
    let mut dirs: Vec<PathBuf> = run_paths
        .iter()
        .map(|d| PathBuf::from(d.replace("$ORIGIN", &origin.to_string_lossy())))
        .collect();
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&v));
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|c| c.is_file())
}

/// The program and every library it needs, directly or not, each once,
/// in breadth-first order of DT_NEEDED (the loader's).
fn modules(program: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let data = std::fs::read(program)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", program.display()))?;
    let mut out = vec![(program.to_path_buf(), data)];
    let mut seen = HashSet::new();
    let mut next = 0;
    while next < out.len() {
        let (path, data) = &out[next];
        let run_paths = fctrace_symbols::sdt::run_paths(data);
        let mut found = Vec::new();
        for name in fctrace_symbols::needed_libraries(data) {
            if !seen.insert(name.clone()) {
                continue;
            }
            match find_library(&name, path, &run_paths) {
                Some(lib) => found.push(lib),
                None => eprintln!("fctrace: {name} (needed by {}) not found", path.display()),
            }
        }
        for lib in found {
            if let Ok(bytes) = std::fs::read(&lib) {
                out.push((lib, bytes));
            }
        }
        next += 1;
    }
    Ok(out)
}

/// `--list-event PROGRAM`: one line per probe, as uftrace prints them
/// (`[SDT event] provider:name arguments`), the program's first, then its
/// libraries' in load order.
pub fn list_events(command: &[OsString], out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(program) = command.first() else {
        anyhow::bail!("--list-event lists the probes of a program: give it, e.g. `fctrace --list-event ./app`");
    };
    for (_, data) in modules(&program_path(program)?)? {
        for p in fctrace_symbols::sdt::probes(&data) {
            writeln!(out, "[SDT event] {}:{} {}", p.provider, p.name, p.args)?;
        }
    }
    Ok(())
}
