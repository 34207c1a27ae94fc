//! Where a module's separate debug file is, in this order:
//!
//! 1. each `--debug-dir DIR` the user gave, as a root:
//!    `DIR/.build-id/xx/yyyy.debug`, the debug link's name `DIR/<name>` and
//!    `DIR/<directory of the module>/<name>`, then any file directly in
//!    DIR carrying the module's build-id (`DIR/prog.debug`);
//! 2. the standard places, as gdb looks: `/usr/lib/debug/.build-id/xx/yyyy.debug`,
//!    then the debug link next to the module file, in its `.debug/`, and
//!    under `/usr/lib/debug/<directory>/` (when that file is still there
//!    and is the module recorded: the same build-id);
//! 3. debuginfod ([`crate::debuginfod`]), when `DEBUGINFOD_URLS` is set.
//!
//! A file found must carry the module's build-id (when the module has
//! one), else the CRC-32 its debug link records.

use crate::debuginfod::{self, Client};
use crate::elfid::{build_id_of_file, hex, is_debug_file_of};
use fctrace_format::symtab::Module;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where to look.
#[derive(Clone, Debug)]
pub struct Config {
    /// The user's `--debug-dir`s, in order.
    pub debug_dirs: Vec<PathBuf>,
    /// The standard root, `/usr/lib/debug`.
    pub standard_root: PathBuf,
    pub debuginfod: debuginfod::Settings,
}

impl Config {
    /// The user's directories, the standard root and debuginfod as the
    /// environment sets it.
    pub fn from_env(debug_dirs: Vec<PathBuf>) -> Config {
        Config {
            debug_dirs,
            standard_root: PathBuf::from(fctrace_symbols::debugfile::DEBUG_ROOT),
            debuginfod: debuginfod::Settings::from_env(),
        }
    }
}

/// How a debug file was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// In a `--debug-dir`.
    DebugDir,
    /// In `/usr/lib/debug` or by the debug link next to the module.
    Standard,
    /// Sent by this debuginfod server.
    Debuginfod(String),
    /// In the debuginfod cache, from an earlier lookup.
    DebuginfodCache,
}

/// A module's debug file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub source: Source,
}

/// Looks debug files up; keeps what lookups share (the build-ids of the
/// files in each `--debug-dir`, the servers that failed).
#[derive(Debug)]
pub struct Finder {
    config: Config,
    client: Client,
    dir_ids: HashMap<PathBuf, HashMap<String, PathBuf>>,
}

impl Finder {
    pub fn new(config: Config) -> Finder {
        Finder {
            client: Client::new(config.debuginfod.clone()),
            config,
            dir_ids: HashMap::new(),
        }
    }

    /// Notes for the user (one line each), see [`Client::take_notes`].
    pub fn take_notes(&mut self) -> Vec<String> {
        self.client.take_notes()
    }

    /// The debug file of `module`, if one is found.
    pub fn find(&mut self, module: &Module) -> Option<Found> {
        for dir in self.config.debug_dirs.clone() {
            if let Some(path) = self.in_debug_dir(&dir, module) {
                return Some(Found {
                    path,
                    source: Source::DebugDir,
                });
            }
        }
        if let Some(path) = self.standard(module) {
            return Some(Found {
                path,
                source: Source::Standard,
            });
        }
        let fetched = self
            .client
            .find(&module.build_id, |p| is_debug_file_of(p, module))?;
        Some(Found {
            path: fetched.path,
            source: fetched
                .server
                .map_or(Source::DebuginfodCache, Source::Debuginfod),
        })
    }

    fn in_debug_dir(&mut self, dir: &Path, module: &Module) -> Option<PathBuf> {
        let mut candidates: Vec<PathBuf> =
            build_id_path(dir, &module.build_id).into_iter().collect();
        let link = &module.debuglink;
        if !link.is_empty() && !link.contains('/') {
            candidates.push(dir.join(link));
            if let Some(parent) = Path::new(&module.path).parent() {
                candidates.push(
                    dir.join(parent.strip_prefix("/").unwrap_or(parent))
                        .join(link),
                );
            }
        }
        if let Some(p) = candidates.into_iter().find(|p| is_debug_file_of(p, module)) {
            return Some(p);
        }
        if module.build_id.is_empty() {
            return None;
        }
        let ids = self
            .dir_ids
            .entry(dir.to_path_buf())
            .or_insert_with(|| build_ids_in(dir));
        ids.get(&module.build_id).cloned()
    }

    fn standard(&self, module: &Module) -> Option<PathBuf> {
        let root = &self.config.standard_root;
        if let Some(p) =
            build_id_path(root, &module.build_id).filter(|p| is_debug_file_of(p, module))
        {
            return Some(p);
        }
        if module.debuglink.is_empty() {
            return None;
        }
        let file = Path::new(&module.path);
        let info = fctrace_symbols::read_headers(file).ok()?;
        if !module.build_id.is_empty()
            && info.build_id.as_deref().map(hex).as_deref() != Some(module.build_id.as_str())
        {
            return None;
        }
        fctrace_symbols::debugfile::find_for_path_in(file, root)
            .filter(|p| is_debug_file_of(p, module))
    }
}

/// `<root>/.build-id/xx/yyyy.debug` for a hex build-id.
fn build_id_path(root: &Path, build_id: &str) -> Option<PathBuf> {
    (build_id.len() > 2).then(|| {
        root.join(".build-id")
            .join(&build_id[..2])
            .join(format!("{}.debug", &build_id[2..]))
    })
}

/// The build-ids of the ELF files directly in `dir`.
fn build_ids_in(dir: &Path) -> HashMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    let mut ids = HashMap::new();
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    for p in paths {
        if let Some(id) = build_id_of_file(&p) {
            ids.entry(id).or_insert(p);
        }
    }
    ids
}
