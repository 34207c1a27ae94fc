//! fctrace given capabilities through its file (`setcap cap_perfmon+ep`,
//! as the `-k` refusal suggests) and run by an ordinary user: the programs
//! it launches are traced, with exactly the capabilities they have
//! without fctrace (none). And `-p` on another user's process with a
//! `cap_sys_ptrace+ep` copy: refused with the right reason, the process
//! left alone. Both need root (setcap, setpriv to other users).

use fctrace_testkit::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether the tests run as root (effective user id 0).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// A fresh directory every user may enter and read, owned by `nobody`,
/// holding a copy of fctrace with the file capabilities `caps`, and a
/// program built from `source`.
struct Setup {
    dir: PathBuf,
    fctrace: PathBuf,
    program: PathBuf,
}

impl Setup {
    fn new(label: &str, caps: &str, source: &str) -> Setup {
        assert!(
            Command::new("setcap").arg("-v").output().is_ok(),
            "setcap is missing: apt-get install libcap2-bin"
        );
        let dir = std::env::temp_dir().join(format!("fctrace-{label}-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let fctrace = dir.join("fctrace");
        std::fs::copy(fctrace_bin(), &fctrace).unwrap();
        let r = run(Command::new("setcap").arg(caps).arg(&fctrace));
        assert!(r.success(), "{}", r.describe());
        let src = write_cached_source(&format!("{label}.c"), source);
        let program = dir.join(label);
        let r = run(Command::new("gcc")
            .arg("-O0")
            .arg("-o")
            .arg(&program)
            .arg(&src));
        assert!(r.success(), "{}", r.describe());
        for p in [&fctrace, &program] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Setup {
            dir,
            fctrace,
            program,
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `cmd` run as user `uid` (group the same), without supplementary groups.
fn as_user(uid: u32, cmd: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(cmd)
        .current_dir("/");
    c
}

/// Prints its capability sets and calls `twice`.
const CAPS_PROGRAM: &str = "#include <stdio.h>\n\
#include <string.h>\n\
int twice(int x) { return 2 * x; }\n\
int main(void) {\n\
  FILE *f = fopen(\"/proc/self/status\", \"r\");\n\
  char l[256];\n\
  while (f && fgets(l, sizeof l, f))\n\
    if (!strncmp(l, \"Cap\", 3)) fputs(l, stdout);\n\
  if (f) fclose(f);\n\
  printf(\"twice: %d\\n\", twice(21));\n\
  return 4;\n\
}\n";

/// A `cap_perfmon+ep` copy run by nobody traces what it launches (with
/// and without -k): before, the program could not open the agent at
/// /proc/<fctrace>/fd/N (fctrace, given capabilities, is not dumpable) and
/// the tree was empty.
#[test]
fn a_copy_with_file_capabilities_traces_what_it_launches() {
    if !running_as_root() {
        panic!("needs root (setcap, and setpriv to run fctrace as nobody)");
    }
    let s = Setup::new("caps-launch", "cap_perfmon+ep", CAPS_PROGRAM);
    let native = run(&mut as_user(65534, &s.program));
    assert_eq!(native.code(), Some(4), "{}", native.describe());
    assert!(
        native.stdout.contains("CapEff:\t0000000000000000\n")
            && native.stdout.ends_with("twice: 42\n"),
        "{}",
        native.describe()
    );
    for opts in [&[][..], &["-k"][..]] {
        let trace = s.dir.join(format!("trace{}", opts.len()));
        let r = run(as_user(65534, &s.fctrace)
            .arg("record")
            .args(opts)
            .arg("-d")
            .arg(&trace)
            .arg(&s.program));
        assert_no_panic(&r);
        let ctx = format!("fctrace record {opts:?} as nobody\n{}", r.describe());
        // The program's own output and status, its capabilities those
        // of a native run; fctrace's stderr lines only (-k: tracefs is
        // not nobody's here, said).
        assert_eq!(r.code(), native.code(), "{ctx}");
        assert_eq!(r.stdout, native.stdout, "{ctx}");
        assert!(
            r.stderr.lines().all(|l| l.starts_with("fctrace: ")),
            "{ctx}"
        );
        assert!(!r.stderr.contains("cannot be preloaded"), "{ctx}");
        assert!(!r.stderr.contains("no call of"), "{ctx}");
        let text = replay_text(&trace);
        let calls = call_lines(&text);
        assert!(calls.iter().any(|l| l == "main() {"), "{ctx}\n{text}");
        assert_eq!(
            calls.iter().filter(|l| *l == "  twice();").count(),
            1,
            "{ctx}\n{text}"
        );
    }
}

/// A launched program the agent did not start in (here the dynamic
/// loader cannot find it: `FCTRACE_AGENT_PATH` names a missing file) is
/// said, not shown as the empty tree of a program that made no calls;
/// fctrace still ends as the program did.
#[test]
fn a_program_the_agent_did_not_start_in_is_said() {
    let exe = c_program("exits.c", "-O0", &["-O0"]);
    let native = run(&mut Command::new(&exe));
    let dir = TraceDir::new("no-agent");
    let r = run(Command::new(fctrace_bin())
        .args(["record", "-d"])
        .arg(&dir.path)
        .arg(&exe)
        .env("FCTRACE_AGENT_PATH", "/nonexistent/fctrace-agent.so"));
    assert_no_panic(&r);
    assert_eq!(r.code(), native.code(), "{}", r.describe());
    assert_eq!(r.stdout, native.stdout, "{}", r.describe());
    assert!(
        r.stderr.contains(&format!(
            "fctrace: no call of {} was recorded: fctrace's agent did not start in it",
            exe.display()
        )),
        "{}",
        r.describe()
    );
}

/// `-p` on another user's process from a `cap_sys_ptrace+ep` copy run by
/// nobody: refused (the kernel: /proc/PID/mem is that user's file), said
/// without claiming that CAP_SYS_PTRACE would do, and the process runs on
/// untouched.
#[test]
fn attaching_to_another_users_process_with_cap_sys_ptrace_is_explained() {
    if !running_as_root() {
        panic!("needs root (setcap, and setpriv to run as two other users)");
    }
    let s = Setup::new(
        "caps-attach",
        "cap_sys_ptrace+ep",
        "#include <stdio.h>\n\
         #include <unistd.h>\n\
         int main(void) {\n\
         \x20 char c[64];\n\
         \x20 printf(\"ready\\n\");\n\
         \x20 fflush(stdout);\n\
         \x20 ssize_t n = read(0, c, sizeof c);\n\
         \x20 printf(\"read %zd\\n\", n);\n\
         \x20 return 0;\n\
         }\n",
    );
    let mut target = as_user(12345, &s.program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let pid = target.id();
    let r = run(as_user(65534, &s.fctrace).args(["-p", &pid.to_string()]));
    assert_no_panic(&r);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!(
            "fctrace: process {pid} belongs to another user (uid 12345): attach as that user"
        )) && r.stderr.contains("CAP_SYS_PTRACE alone is not enough"),
        "{}",
        r.describe()
    );
    // Untouched: it reads what it is sent and ends normally.
    target.stdin.take().unwrap().write_all(b"go").unwrap();
    let status = target.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!((status.code(), rest.as_str()), (Some(0), "read 2\n"));
}
