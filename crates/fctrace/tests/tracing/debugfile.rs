//! Stripped programs with a separate debug file, found as gdb finds them:
//! by build-id under `/usr/lib/debug/.build-id/xx/yyyy.debug`, or by
//! `.gnu_debuglink` next to the program or in its `.debug/` directory (the
//! CRC checked). The functions and their names come from the debug file's
//! `.symtab`: the per-function call counts of the stripped program equal
//! callgrind's on the unstripped build, `info` lists no function of the
//! program as not traced but `_start`, and `-a` reads the debug file's DWARF.
//!
//! Each program is built here with a build-id of its own (random), so the
//! file installed under /usr/lib/debug (the tests run as root) names no
//! other program; it is removed when the test ends, failed or not.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A debug file installed under /usr/lib/debug/.build-id/, removed on drop
/// (with its `xx` directory when the test created it).
struct Installed {
    file: PathBuf,
    made_dir: Option<PathBuf>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.file);
        if let Some(d) = &self.made_dir {
            let _ = fs::remove_dir(d);
        }
    }
}

#[track_caller]
fn tool_ok(program: &str, args: &[&OsStr], dir: &Path) {
    let r = run(Command::new(program).args(args).current_dir(dir));
    assert!(r.success(), "{program} failed\n{}", r.describe());
}

/// A build-id no other file has: 20 random bytes, in hex.
fn random_build_id() -> String {
    let mut bytes = [0u8; 20];
    let mut f = fs::File::open("/dev/urandom").unwrap();
    std::io::Read::read_exact(&mut f, &mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One program built with -g and a build-id of its own, in `dir`:
/// `<name>.full` (unstripped), `<name>.debug` (objcopy --only-keep-debug)
/// and `<name>` (stripped, with a `.gnu_debuglink` to `<name>.debug` when
/// `link`).
struct Program {
    full: PathBuf,
    debug: PathBuf,
    stripped: PathBuf,
    build_id: String,
}

fn build(dir: &Path, source: &str, name: &str, flags: &[&str], link: bool) -> Program {
    let build_id = random_build_id();
    let full = dir.join(format!("{name}.full"));
    let debug = dir.join(format!("{name}.debug"));
    let stripped = dir.join(name);
    let mut cc = Command::new("gcc");
    cc.args(["-g", "-fno-builtin"])
        .args(flags)
        .arg(format!("-Wl,--build-id=0x{build_id}"))
        .arg("-o")
        .arg(&full)
        .arg(program_source(source));
    let r = run(&mut cc);
    assert!(r.success(), "gcc failed\n{}", r.describe());
    tool_ok(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            full.as_os_str(),
            debug.as_os_str(),
        ],
        dir,
    );
    tool_ok(
        "strip",
        &["-o".as_ref(), stripped.as_os_str(), full.as_os_str()],
        dir,
    );
    if link {
        // objcopy records the file name and the CRC of the file it reads.
        tool_ok(
            "objcopy",
            &[
                format!("--add-gnu-debuglink={name}.debug").as_ref(),
                stripped.as_os_str(),
            ],
            dir,
        );
    }
    let syms = function_symbols(&stripped);
    let has_symtab = run(Command::new("readelf").arg("-S").arg(&stripped))
        .stdout
        .contains(".symtab");
    assert!(
        !has_symtab,
        "{} still has a .symtab ({} function symbols)",
        stripped.display(),
        syms.len()
    );
    Program {
        full,
        debug,
        stripped,
        build_id,
    }
}

/// Installs `p`'s debug file under /usr/lib/debug/.build-id/.
fn install_by_build_id(p: &Program) -> Installed {
    let dir = Path::new("/usr/lib/debug/.build-id").join(&p.build_id[..2]);
    let made_dir = (!dir.exists()).then(|| dir.clone());
    fs::create_dir_all(&dir).unwrap_or_else(|e| {
        panic!(
            "cannot create {} (the tests run as root): {e}",
            dir.display()
        )
    });
    let file = dir.join(format!("{}.debug", &p.build_id[2..]));
    let guard = Installed { file, made_dir };
    fs::copy(&p.debug, &guard.file).unwrap();
    guard
}

const STRIPPED_WARNING: &str = "stripped (no .symtab)";

/// Records the stripped program and asserts: the same behaviour as the
/// unstripped one natively, no warning that it is stripped, the call
/// counts of each of its functions equal callgrind's on the unstripped
/// build, and `info` lists none of its functions as not traced but
/// `_start`.
#[track_caller]
fn assert_fully_traced(p: &Program, ctx: &str) {
    let native = run(&mut Command::new(&p.full));
    let rec = record_any(&p.stripped, &[], &[]);
    assert_same_behaviour(&native, &rec.run, ctx);
    assert!(
        !rec.run.stderr.contains(STRIPPED_WARNING),
        "{ctx}: the debug file was not used\n{}",
        rec.run.describe()
    );
    let mut rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    // The report names the stripped file: compare its functions with the
    // unstripped build's (the same code at the same addresses).
    let stripped = canonical(&p.stripped);
    for f in &mut rep.functions {
        if canonical(Path::new(&f.module)) == stripped {
            f.module = p.full.to_string_lossy().into_owned();
        }
    }
    let cg = callgrind(&p.full, &[]);
    match compare_with_callgrind(&p.full, &rep, &cg, &CompareOptions::default()) {
        Ok(c) => {
            assert!(c.compared >= 10, "{ctx}: only {} functions", c.compared);
            eprintln!(
                "{ctx}: {} functions, {} calls agree with callgrind",
                c.compared, c.total_calls
            );
        }
        Err(msg) => panic!("{ctx}: {msg}(trace: {})", rec.dir.path.display()),
    }
    let info = info_text(&rec.dir.path);
    let shown = stripped.to_string_lossy().into_owned();
    let not_traced: Vec<&str> = info
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("Not instrumented"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .filter(|l| l.contains(&format!("({shown})")))
        .collect();
    assert!(
        not_traced
            .iter()
            .all(|l| l.trim_start().starts_with("_start ")),
        "{ctx}: functions of the program not traced: {not_traced:?}\n{info}"
    );
}

/// `.gnu_debuglink`: the debug file next to the program, then in its
/// `.debug/` directory; a debug file of the right name whose CRC does not
/// match is not used.
#[test]
fn debuglink() {
    let dir = scratch("link");
    let p = build(&dir.path, "tree.c", "tree", &["-O2"], true);
    assert_fully_traced(&p, "debug file next to the program");

    let sub = dir.path.join(".debug");
    fs::create_dir(&sub).unwrap();
    let moved = sub.join("tree.debug");
    fs::rename(&p.debug, &moved).unwrap();
    assert_fully_traced(&p, "debug file in .debug/");

    // One byte more: another file for the CRC. Not used, and fctrace says
    // the program is stripped.
    let mut bytes = fs::read(&moved).unwrap();
    bytes.push(0);
    fs::write(&moved, &bytes).unwrap();
    let rec = record(&p.stripped, &[], &[]);
    assert!(
        rec.run.stderr.contains(STRIPPED_WARNING),
        "a debug file with another CRC must not be used\n{}",
        rec.run.describe()
    );
    let rep = report(&rec.dir.path);
    assert_eq!(
        rep.calls("nest1"),
        0,
        "a local function of tree.c traced without its symbols"
    );
}

/// Build-id: the debug file under /usr/lib/debug/.build-id/ (the program
/// has no `.gnu_debuglink`).
#[test]
fn build_id() {
    let dir = scratch("buildid");
    let p = build(&dir.path, "tree.c", "tree", &["-O0"], false);
    let _installed = install_by_build_id(&p);
    assert_fully_traced(&p, "debug file by build-id");
}

/// `-a` takes the types from the debug file's DWARF, found either way:
/// the stripped program's call lines are the unstripped one's.
#[test]
fn auto_args_from_the_debug_file() {
    let dir = scratch("args");
    let lines = |exe: &Path| {
        let rec = record(exe, &[], &["-a", "-F", "main"]);
        call_lines(&replay_text(&rec.dir.path))
    };
    let linked = build(&dir.path, "enums.c", "enums", &["-O0"], true);
    let want = lines(&linked.full);
    assert!(
        want.iter().any(|l| l.contains("show_wide(W_HIGH)")),
        "{want:?}"
    );
    assert_eq!(lines(&linked.stripped), want, ".gnu_debuglink");

    let by_id = build(&dir.path, "enums.c", "enums-id", &["-O0"], false);
    let _installed = install_by_build_id(&by_id);
    assert_eq!(lines(&by_id.stripped), want, "build-id");
}
