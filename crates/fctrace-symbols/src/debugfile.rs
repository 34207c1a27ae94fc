//! Separate debug files, found as gdb finds them.
//!
//! A distribution strips its binaries and ships their symbols and DWARF in
//! a debug package. A stripped file names its debug file two ways:
//!
//! * by build-id: `<root>/.build-id/xx/yyyy.debug`, where `xxyyyy` is the
//!   hex of its `NT_GNU_BUILD_ID` note (checked: the debug file must carry
//!   the same build-id);
//! * by `.gnu_debuglink`: a file name and the CRC-32 of the debug file,
//!   looked up next to the file, in its `.debug/` subdirectory, and under
//!   `<root>/<directory of the file>/` (checked: the CRC must match).
//!
//! The root is `/usr/lib/debug` ([`DEBUG_ROOT`]). One lookup serves the
//! function symbols ([`crate::analyze_borrowed_with_debug`]) and the DWARF of `-a`
//! ([`crate::dwarf::signatures_of_file`]).

use object::{Object, ObjectSymbolTable};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where separate debug files are installed.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The separate debug file of the ELF file at `path` whose bytes are
/// `data`, under [`DEBUG_ROOT`].
pub fn find(path: &Path, data: &[u8]) -> Option<PathBuf> {
    find_in(path, data, Path::new(DEBUG_ROOT))
}

/// The debug file that holds the symbols of a stripped file (no `.symtab`):
/// [`find`], for files without a symbol table of their own only.
pub fn find_symbols(path: &Path, data: &[u8]) -> Option<PathBuf> {
    let file = object::File::parse(data).ok()?;
    if file
        .symbol_table()
        .is_some_and(|t| t.symbols().nth(1).is_some())
    {
        return None;
    }
    find(path, data)
}

/// [`find`] for the file at `path`, reading only its headers and its
/// `.gnu_debuglink` (cheap on huge programs).
pub fn find_for_path(path: &Path) -> Option<PathBuf> {
    find_for_path_in(path, Path::new(DEBUG_ROOT))
}

/// [`find_for_path`] with debug files installed under `root`.
pub fn find_for_path_in(path: &Path, root: &Path) -> Option<PathBuf> {
    let data = crate::read_bytes(path, false).ok()?;
    find_in(path, &data, root)
}

/// [`find`] with debug files installed under `root`.
pub fn find_in(path: &Path, data: &[u8], root: &Path) -> Option<PathBuf> {
    let file = object::File::parse(data).ok()?;
    if let Some(id) = file.build_id().ok().flatten() {
        if let Some(p) = by_build_id(root, id) {
            return Some(p);
        }
    }
    let (name, crc) = file.gnu_debuglink().ok().flatten()?;
    let name = std::str::from_utf8(name).ok()?;
    // A bare file name: the link never points elsewhere.
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let real = std::fs::canonicalize(path).ok()?;
    let dir = real.parent()?;
    let under_root = root.join(dir.strip_prefix("/").unwrap_or(dir));
    [
        dir.join(name),
        dir.join(".debug").join(name),
        under_root.join(name),
    ]
    .into_iter()
    .find(|p| {
        // Not the file itself (a debug link to its own name).
        std::fs::canonicalize(p).is_ok_and(|c| c != real) && crc32_of(p) == Some(crc)
    })
}

/// `<root>/.build-id/xx/yyyy.debug` for this build-id, if it exists and
/// carries the same build-id.
pub fn by_build_id(root: &Path, build_id: &[u8]) -> Option<PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let p = root
        .join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    if !p.is_file() {
        return None;
    }
    let info = crate::read_headers(&p).ok()?;
    (info.build_id.as_deref() == Some(build_id)).then_some(p)
}

/// The CRC-32 of a regular file's contents (the one `.gnu_debuglink`
/// holds).
pub fn crc32_of(path: &Path) -> Option<u32> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[track_caller]
    fn ok(cmd: &mut Command) {
        let st = cmd.status().unwrap();
        assert!(st.success(), "{cmd:?}");
    }

    /// A C program built with -g, its debug file, and the stripped
    /// program: the stripped one with its debug file has the functions of
    /// the unstripped one; the debug file is found by build-id under a
    /// root, and by `.gnu_debuglink` next to the file, in `.debug/` and
    /// under the root's copy of the file's directory, with its CRC checked.
    #[test]
    fn stripped_with_debug_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let src = d.join("t.c");
        std::fs::write(
            &src,
            "static int twice(int x) { return 2 * x; }\n\
             int pub_fn(int x) { return twice(x) + 1; }\n\
             int main(int argc, char **argv) { (void)argv; return pub_fn(argc); }\n",
        )
        .unwrap();
        let full = d.join("t.full");
        ok(Command::new("cc")
            .args(["-g", "-O0", "-Wl,--build-id=0x0123456789abcdef", "-o"])
            .arg(&full)
            .arg(&src));
        ok(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(d.join("t.debug")));
        let bare = d.join("bare");
        ok(Command::new("strip").arg("-o").arg(&bare).arg(&full));
        let linked = d.join("t");
        ok(Command::new("objcopy")
            .arg("--add-gnu-debuglink=t.debug")
            .arg(&bare)
            .arg(&linked)
            .current_dir(d));

        let full_info = crate::read_file(&full).unwrap();
        let data = std::fs::read(&bare).unwrap();
        let debug = std::fs::read(d.join("t.debug")).unwrap();
        let (stripped, _) = crate::analyze_borrowed(&data).unwrap();
        assert!(!stripped.has_symtab);
        let (info, funcs) = crate::analyze_borrowed_with_debug(&data, Some(&debug)).unwrap();
        assert!(info.has_symtab);
        let got: Vec<(String, u64, u64, u64)> = funcs
            .iter()
            .map(|f| (f.name.to_string(), f.addr, f.size, f.pad_end))
            .collect();
        let want: Vec<(String, u64, u64, u64)> = full_info
            .functions
            .iter()
            .map(|f| (f.name.clone(), f.addr, f.size, f.pad_end))
            .collect();
        assert_eq!(got, want);
        assert!(got.iter().any(|f| f.0 == "twice"));

        // By build-id under a root (the bare file has no debug link).
        let root = d.join("root");
        let nowhere = d.join("nowhere");
        assert_eq!(find_for_path_in(&bare, &nowhere), None);
        let at = root.join(".build-id").join("01");
        std::fs::create_dir_all(&at).unwrap();
        let by_id = at.join("23456789abcdef.debug");
        std::fs::copy(d.join("t.debug"), &by_id).unwrap();
        assert_eq!(find_for_path_in(&bare, &root), Some(by_id.clone()));
        // A file with a .symtab of its own needs none for its symbols.
        assert_eq!(find_symbols(&full, &std::fs::read(&full).unwrap()), None);
        // A file there with another build-id is not it.
        std::fs::copy(&full, &by_id).unwrap();
        let other = d.join("other");
        ok(Command::new("cc")
            .args(["-g", "-O0", "-Wl,--build-id=0x0123456789abcdee", "-o"])
            .arg(&other)
            .arg(&src));
        std::fs::copy(&other, &by_id).unwrap();
        assert_eq!(find_for_path_in(&bare, &root), None);
        std::fs::remove_file(&by_id).unwrap();

        // By .gnu_debuglink: next to the file.
        assert_eq!(find_for_path_in(&linked, &nowhere), Some(d.join("t.debug")));
        // The same from the headers-only read of a big file.
        let file = std::fs::File::open(&linked).unwrap();
        let len = file.metadata().unwrap().len();
        let sparse = crate::read_headers_sparse(&file, len, 0)
            .unwrap()
            .expect("an ELF file");
        assert_eq!(find_in(&linked, &sparse, &nowhere), Some(d.join("t.debug")));
        // In .debug/.
        std::fs::create_dir(d.join(".debug")).unwrap();
        std::fs::rename(d.join("t.debug"), d.join(".debug/t.debug")).unwrap();
        assert_eq!(
            find_for_path_in(&linked, &nowhere),
            Some(d.join(".debug/t.debug"))
        );
        // Under the root, at the file's directory.
        let real_dir = std::fs::canonicalize(d).unwrap();
        let mirrored = root.join(real_dir.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&mirrored).unwrap();
        std::fs::rename(d.join(".debug/t.debug"), mirrored.join("t.debug")).unwrap();
        assert_eq!(
            find_for_path_in(&linked, &root),
            Some(mirrored.join("t.debug"))
        );
        // Another file of that name (another CRC) is not it.
        std::fs::write(mirrored.join("t.debug"), b"not the debug file").unwrap();
        assert_eq!(find_for_path_in(&linked, &root), None);
    }
}
