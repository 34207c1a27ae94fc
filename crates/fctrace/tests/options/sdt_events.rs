//! uftrace's `--list-event` and `-E`: the SDT probes of sdt.c and its
//! library sdt_lib.c (app:start, app:step, applib:work, as their sources
//! write them) and of the C library, listed as uftrace prints them; the
//! expected lines come from `readelf -n` of each module `ldd` names; `-E`
//! is refused before the program runs.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn sdt_program() -> PathBuf {
    assert!(
        Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
            || Path::new("/usr/include/sys/sdt.h").exists(),
        "these tests need <sys/sdt.h>: apt-get install systemtap-sdt-dev"
    );
    let lib = c_shared_lib("libsdt_lib.so", "sdt_lib.c", &["-O1"]);
    c_program_with_lib("sdt", "sdt.c", &["-O1"], &lib)
}

/// The probes of one file as `readelf -n` lists them, in uftrace's line
/// shape: `[SDT event] provider:name arguments`.
fn readelf_probes(file: &Path) -> Vec<String> {
    let r = run(Command::new("readelf").arg("-n").arg("-W").arg(file));
    assert!(
        r.success(),
        "readelf -n {}\n{}",
        file.display(),
        r.describe()
    );
    probes_of_readelf(&r.stdout)
}

/// Every probe of readelf's text: `Provider:`, `Name:`, `Location:`, and
/// `Arguments:` (which an older readelf leaves out without arguments).
fn probes_of_readelf(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let (mut provider, mut name) = (String::new(), String::new());
    let mut open = false;
    for line in text.lines().map(str::trim) {
        // The note's header and its provider share a line.
        if let Some(p) = line.split_once("Provider: ").map(|(_, p)| p) {
            if open {
                out.push(format!("[SDT event] {provider}:{name} "));
            }
            provider = p.to_string();
            open = false;
        } else if let Some(n) = line.strip_prefix("Name: ") {
            name = n.to_string();
            open = true;
        } else if let Some(a) = line.strip_prefix("Arguments:") {
            out.push(format!("[SDT event] {provider}:{name} {}", a.trim_start()));
            open = false;
        }
    }
    if open {
        out.push(format!("[SDT event] {provider}:{name} "));
    }
    out
}

/// The files `ldd` says the program loads, the program first.
fn ldd_modules(exe: &Path) -> Vec<PathBuf> {
    let r = run(Command::new("ldd").arg(exe));
    assert!(r.success(), "ldd\n{}", r.describe());
    let mut out = vec![exe.to_path_buf()];
    for line in r.stdout.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            out.push(PathBuf::from(p));
        }
    }
    out
}

#[test]
fn list_event_shows_the_probes_of_the_program_and_its_libraries() {
    let exe = sdt_program();
    let r = fctrace(&["record".as_ref(), "--list-event".as_ref(), exe.as_os_str()]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        !r.stdout.contains("done"),
        "the program must not run: {}",
        r.describe()
    );
    let lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();

    // The program's own, first and in the order of its notes.
    let own = readelf_probes(&exe);
    let names: Vec<&str> = own.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    assert_eq!(names, ["app:start", "app:step"], "{own:?}");
    assert_eq!(lines[..2], own[..], "{}", r.stdout);
    assert_eq!(own[0], "[SDT event] app:start ");

    // Every module's, as readelf lists them, each once.
    let mut expected: Vec<String> = ldd_modules(&exe)
        .iter()
        .flat_map(|m| readelf_probes(m))
        .collect();
    let mut got = lines.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "{}", r.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("[SDT event] applib:work ")),
        "{}",
        r.stdout
    );

    // Live mode takes it too.
    let live = fctrace(&["--list-event".as_ref(), exe.as_os_str()]);
    assert!(live.success(), "{}", live.describe());
    assert_eq!(live.stdout, r.stdout);
}

#[test]
fn event_recording_is_refused_before_the_program_runs() {
    let exe = sdt_program();
    let r = fctrace(&[
        "record".as_ref(),
        "-E".as_ref(),
        "app:start".as_ref(),
        exe.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert_eq!(r.stdout, "", "the program must not run");
    assert!(
        r.stderr
            .contains("fctrace: -E app:start: recording SDT probes is not supported yet")
            && r.stderr.contains("--list-event"),
        "{}",
        r.describe()
    );
}
