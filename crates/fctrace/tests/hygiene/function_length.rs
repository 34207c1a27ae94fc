//! No function of the workspace's sources is longer than a reader can
//! hold: 200 lines from `fn` to its closing brace (tests excepted:
//! `#[cfg(test)]` modules, `#[test]` functions, `tests/` folders).
//! Long drivers are split into named phases; code generation into one
//! builder per generated block. A line scan of rustfmt's layout: a
//! function ends at the first `}` line at its own indentation.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 200;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The name of the function a line begins, if it begins one with a
/// body (`fn f();` in a trait or an extern block has none).
fn starts_fn(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for word in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
        "extern \"C-unwind\" ",
    ] {
        rest = rest.strip_prefix(word).unwrap_or(rest);
    }
    let name = rest.strip_prefix("fn ")?;
    if line.trim_end().ends_with(';') {
        return None;
    }
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    Some(&name[..end])
}

fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// The line after the block that opens at `lines[i]` (its closing
/// brace at the same indentation), or the end.
fn block_end(lines: &[&str], i: usize) -> usize {
    let close = format!("{}}}", indent(lines[i]));
    (i + 1..lines.len())
        .find(|&j| lines[j] == close)
        .map_or(lines.len(), |j| j + 1)
}

/// The functions over the limit in one file's text: (name, first
/// line, lines).
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let attr = i > 0 && {
            let prev = lines[i - 1].trim();
            prev == "#[cfg(test)]" || prev == "#[test]"
        };
        let trimmed = lines[i].trim_start();
        if attr && (trimmed.starts_with("mod ") || starts_fn(lines[i]).is_some()) {
            i = block_end(&lines, i);
            continue;
        }
        if let Some(name) = starts_fn(lines[i]) {
            let n = block_end(&lines, i) - i;
            if n > MAX_LINES {
                out.push((name.to_string(), i + 1, n));
            }
        }
        i += 1;
    }
    out
}

#[test]
fn the_scan_measures_functions() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let text = format!(
        "fn short() {{\n{}}}\n\npub(crate) unsafe fn long(a: u8) -> u8 {{\n{}}}\n\n#[cfg(test)]\nmod tests {{\n    fn helper() {{\n{}    }}\n}}\n\n#[test]\nfn big_test() {{\n{}}}\ntrait T {{\n    fn f();\n}}\n",
        body(10),
        body(199),
        body(300),
        body(300)
    );
    assert_eq!(long_functions(&text), [("long".to_string(), 14, 201)]);
}

#[test]
fn no_function_is_longer_than_200_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = c.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(
        files.len() > 100,
        "sources not found under {}",
        crates.display()
    );
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (name, line, n) in long_functions(&text) {
            let shown = f.strip_prefix(&crates).unwrap_or(f).display().to_string();
            long.push(format!("{shown}:{line}: {name} is {n} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split them into named phases):\n{}",
        long.join("\n")
    );
}
