//! The Python interpreters the tests run: Debian's own and the machine
//! image's pyenv builds (`--enable-shared`), each asserted to be there
//! with the way to install it (a missing one fails, never skips).

use std::path::{Path, PathBuf};

/// Debian's `/usr/bin/python3.11` (stripped, the interpreter inside).
pub fn debian_python() -> PathBuf {
    let p = PathBuf::from("/usr/bin/python3.11");
    assert!(
        p.is_file(),
        "{} is missing: install Debian's package python3.11",
        p.display()
    );
    p
}

/// pyenv's CPython `version` (`3.11.7`): `~/.pyenv/versions/V/bin/python3.X`.
pub fn pyenv_python_version(version: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is not set");
    let minor = version.rsplit_once('.').map_or(version, |(m, _)| m);
    let p = Path::new(&home).join(format!(".pyenv/versions/{version}/bin/python{minor}"));
    assert!(
        p.is_file(),
        "{} is missing: pyenv's CPython {version} \
         (PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install {version})",
        p.display()
    );
    p
}
