//! The JVM (OpenJDK's HotSpot) with -l. Its frame walker (`frame::sender`)
//! reads the return addresses of the VM's own functions called from Java
//! code: with libjvm.so traced, `java Hello` died in `frame::sender`
//! (SIGSEGV; its hs_err file listed the stubs' addresses as native
//! frames). libjvm.so is left uninstrumented with a message that `fctrace
//! info` lists, and the other libraries are traced (programs/jvm: threads,
//! exceptions' stack traces, the garbage collector, files, CRC32 through
//! libzip). Launched, and attached with `-p` then detached: the program's
//! output and exit status are those of a native run.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const ROUNDS: u64 = 3;

/// The message that says libjvm.so is not traced.
const JVM_NOTE: &str = "/libjvm.so (the JVM) is not traced";

fn java_tool(name: &str) -> PathBuf {
    require_tool(name, "default-jdk-headless")
}

/// programs/jvm/Work.java compiled (cached by its hash); the class
/// directory.
fn classes() -> PathBuf {
    let src = program_source("jvm/Work.java");
    let key = Fnv::new().file(&src).hex();
    let dir = cache_root().join("builds").join(format!("jvm-{key}"));
    if dir.join("Work.class").exists() {
        return dir;
    }
    let _lock = FileLock::acquire(&format!("build-jvm-{key}"));
    if dir.join("Work.class").exists() {
        return dir;
    }
    let tmp = cache_root()
        .join("builds")
        .join(format!(".jvm-{key}.tmp-{}", unique_suffix()));
    let r = run_with_timeout(
        Command::new(java_tool("javac"))
            .arg("-d")
            .arg(&tmp)
            .arg(&src),
        Duration::from_secs(300),
    );
    assert!(r.success(), "javac failed\n{}", r.describe());
    std::fs::rename(&tmp, &dir).unwrap();
    dir
}

fn java(classes: &Path) -> Command {
    let mut c = Command::new(java_tool("java"));
    c.arg(hs_err()).arg("-cp").arg(classes).arg("Work");
    c
}

/// A JVM that dies writes its hs_err file in the test cache, not in the
/// source tree.
fn hs_err() -> String {
    format!("-XX:ErrorFile={}/hs_err_pid%p.log", cache_root().display())
}

/// Nothing of libjvm.so traced, the other libraries' functions are.
fn assert_all_but_the_jvm(dir: &Path, ctx: &str) {
    let rep = report(dir);
    let jvm: Vec<_> = rep
        .functions
        .iter()
        .filter(|f| f.calls > 0 && f.module.ends_with("/libjvm.so"))
        .map(|f| &f.name)
        .collect();
    assert!(
        jvm.is_empty(),
        "{ctx}: libjvm.so's functions traced: {jvm:?}"
    );
    // Files and CRC32 go through the JDK's libraries (libnio, libzip).
    for lib in ["/libjava.so", "/libc.so.6"] {
        assert!(
            rep.functions
                .iter()
                .any(|f| f.calls > 0 && f.module.ends_with(lib)),
            "{ctx}: nothing of {lib} traced: {:?}",
            rep.calls_by_name()
        );
    }
    let info = info_text(dir);
    assert!(
        info.contains("Warnings:") && info.contains(JVM_NOTE),
        "{ctx}: fctrace info does not say libjvm.so is untraced:\n{info}"
    );
}

#[test]
fn the_jvm_with_l_runs_as_natively_with_its_libraries_traced() {
    let classes = classes();
    let rounds = ROUNDS.to_string();
    let native = run(java(&classes).arg(&rounds));
    native.expect_success();
    assert!(native.stdout.starts_with("total "), "{}", native.describe());
    let java = java_tool("java");
    let err = hs_err();
    let args = [&err, "-cp", classes.to_str().unwrap(), "Work", &rounds];
    let rec = record_any(&java, &args, &["-l"]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    assert!(rec.run.success(), "{}", rec.run.describe());
    assert_eq!(
        without_fctrace_notes(&rec.run.stderr),
        native.stderr,
        "{}",
        rec.run.describe()
    );
    assert_eq!(
        rec.run.stderr.matches(JVM_NOTE).count(),
        1,
        "{}",
        rec.run.describe()
    );
    assert_all_but_the_jvm(&rec.dir.path, "launched");
}

#[test]
fn the_jvm_attached_with_l_and_detached_runs_on() {
    let classes = classes();
    let mut input = "run\n".repeat(ROUNDS as usize + 1);
    input.push_str("quit\n");
    let (native, code) = run_with_input(&mut java(&classes), &input);
    assert_eq!(code, Some(0), "{native}");
    let dir = TraceDir::new("jvm-attached");
    let (stdout, code, said, fcode) =
        attached(&mut java(&classes), &dir.path, &["-l"], ROUNDS, true);
    assert_eq!(stdout, native, "{said}");
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(fcode, Some(0), "{said}");
    assert_eq!(said.matches(JVM_NOTE).count(), 1, "{said}");
    assert_all_but_the_jvm(&dir.path, "attached");
}
