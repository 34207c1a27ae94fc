//! Programs linked with musl instead of glibc: musl's dynamic loader
//! cannot load fctrace's agent (a glibc library) and would end the program
//! with status 127 before its code runs. Launched directly, fctrace refuses
//! such a program, as a statically linked one, without running it;
//! executed by a traced program, it runs untraced, exactly as without
//! fctrace, and fctrace says so.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

/// A musl program: prints its arguments to stdout and a line to stderr,
/// creates the file its first argument names (when given) and exits 3.
fn musl_program() -> PathBuf {
    assert!(
        Command::new("sh")
            .args(["-c", "command -v musl-gcc"])
            .output()
            .is_ok_and(|o| o.status.success()),
        "musl-gcc is missing: apt-get install musl-tools"
    );
    let src = write_cached_source(
        "musl-prog.c",
        "#include <stdio.h>\n\
         int twice(int x) { return 2 * x; }\n\
         int main(int argc, char **argv) {\n\
         \x20 if (argc > 1) { FILE *f = fopen(argv[1], \"w\"); if (f) fclose(f); }\n\
         \x20 for (int i = 1; i < argc; i++) printf(\"arg %d: %s\\n\", i, argv[i]);\n\
         \x20 fprintf(stderr, \"musl says %d\\n\", twice(21));\n\
         \x20 return 3;\n\
         }\n",
    );
    let out = src.with_file_name("musl-prog");
    if !out.exists() {
        let tmp = src.with_file_name(format!(".musl-prog.tmp-{}", unique_suffix()));
        let r = run(Command::new("musl-gcc")
            .arg("-O1")
            .arg("-o")
            .arg(&tmp)
            .arg(&src));
        assert!(r.success(), "musl-gcc failed\n{}", r.describe());
        std::fs::rename(&tmp, &out).unwrap();
    }
    // Dynamically linked, started by musl's loader.
    let headers = tool("readelf", &[OsStr::new("-lW"), out.as_os_str()]).stdout;
    assert!(headers.contains("ld-musl-x86_64.so.1"), "{headers}");
    out
}

fn fresh_path(label: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("fctrace-{label}-{}", unique_suffix()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Launched directly (live and `record`): refused before it runs, with a
/// message naming musl, and a non-zero exit.
#[test]
fn a_musl_program_is_refused_without_being_run() {
    let exe = musl_program();
    let marker = fresh_path("musl-ran");
    let dir = TraceDir::new("musl-refused");
    let recorded = fctrace(&[
        OsStr::new("record"),
        OsStr::new("-d"),
        dir.path.as_os_str(),
        exe.as_os_str(),
        marker.as_os_str(),
    ]);
    let live = fctrace(&[exe.as_os_str(), marker.as_os_str()]);
    for r in [&recorded, &live] {
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(
            r.stderr.contains("a musl program") && r.stderr.contains("cannot load"),
            "{}",
            r.describe()
        );
        assert!(!r.stdout.contains("arg 1"), "it ran\n{}", r.describe());
    }
    let ran = marker.exists();
    let _ = std::fs::remove_file(&marker);
    assert!(!ran, "the program ran");
}

/// A traced shell script runs the musl program: it runs as natively (its
/// output, and its status that the script passes on), the shell is
/// traced, and fctrace says the musl program ran untraced.
#[test]
fn a_musl_program_executed_by_a_traced_one_runs_as_natively() {
    let exe = musl_program();
    let script = write_cached_source(
        "runs-musl.sh",
        &format!(
            "#!/bin/sh\necho before\n{} /dev/null two\necho \"status $?\"\nexit 5\n",
            exe.display()
        ),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let native = run(&mut Command::new(&script));
    assert_eq!(
        (
            native.code(),
            native.stdout.as_str(),
            native.stderr.as_str()
        ),
        (
            Some(5),
            "before\narg 1: /dev/null\narg 2: two\nstatus 3\n",
            "musl says 42\n"
        ),
        "{}",
        native.describe()
    );
    let rec = record_any(&script, &[], &[]);
    let warning = "a musl program: fctrace's agent (built for glibc) cannot be loaded into it, so \
                   it ran untraced, as without fctrace\n";
    let (said, program_stderr): (Vec<&str>, Vec<&str>) = rec
        .run
        .stderr
        .split_inclusive('\n')
        .partition(|l| l.starts_with("fctrace: "));
    assert_same_behaviour(
        &native,
        &Run {
            stderr: program_stderr.concat(),
            ..rec.run.clone()
        },
        "the script under fctrace",
    );
    assert_eq!(said.len(), 1, "{}", rec.run.describe());
    assert!(
        said[0].ends_with(&format!("executed {}, {warning}", exe.display())),
        "{}",
        rec.run.describe()
    );
    // The shell was traced; the musl program has no task.
    let text = replay_text(&rec.dir.path);
    assert!(
        text.contains("/usr/bin/dash") || text.contains("/bin/sh"),
        "{text}"
    );
    assert!(!text.contains("musl-prog"), "{text}");
    assert!(!text.contains("twice"), "{text}");
}
