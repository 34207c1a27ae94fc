//! Hygiene of the agent in someone else's process: it never writes through
//! a descriptor the program may have reused, keeps its files private, works
//! with a program's own allocator, frees what each thread used, leaves the
//! environment as it was, keeps a program's pending `dlerror()` message,
//! and says when a program cannot be traced. And
//! its source stays in layers, without cycles (`agent_layers`): the
//! agent's files in their layer order, no crate's files in a circle, the
//! crates depending only downward.

use fctrace_testkit::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The modes of the session symbol files of a trace.
fn sym_modes(dir: &Path) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = std::fs::read_dir(dir.join("sessions"))
        .expect("sessions directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sym"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().permissions().mode() & 0o7777,
            )
        })
        .collect();
    v.sort();
    v
}

/// A program that closes every descriptor, opens its own file (which gets
/// the number the agent's symbol file had) and then loads a library with
/// -l: the file holds exactly what the program wrote, and the library's
/// functions are still in the trace.
/// A failed `dlsym`, then the first call of a function the agent
/// interposes (it looks the real one up then: signal masks and actions),
/// then `dlerror()`: the message is the one the program gets natively
/// (glibc clears it at every `dlsym`, the agent's too).
#[test]
fn a_pending_dlerror_message_stays_the_programs() {
    let exe = c_program("dlerror_kept.c", "", &["-O1"]);
    for call in ["sigprocmask", "pthread_sigmask", "sigaction", "signal"] {
        let native = run_env(&exe, &[call], &[]);
        assert!(
            native.stdout.contains("no_such_function_anywhere"),
            "{}",
            native.describe()
        );
        let rec = record_env(&exe, &[call], &[]);
        assert_same_behaviour(&native, &rec.run, call);
    }
}

#[test]
fn symbol_lines_never_go_to_the_programs_descriptor() {
    let exe = c_program("hygiene_fds.c", "-O2", &["-O2"]);
    let scratch = scratch("fds-files");
    let native_file = scratch.path.join("native.txt");
    let traced_file = scratch.path.join("traced.txt");
    let native = run_native(&exe, &[native_file.to_str().unwrap()]);
    let expected_file = "first line\nsecond line\nthird line\n";
    assert_eq!(
        std::fs::read_to_string(&native_file).unwrap(),
        expected_file
    );
    assert_eq!(
        native.stdout,
        format!(
            "cbrt(8) = 2.0\nfile holds {} bytes:\n{expected_file}",
            expected_file.len()
        )
    );
    let rec = record(&exe, &[traced_file.to_str().unwrap()], &["-l"]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    assert_eq!(
        std::fs::read_to_string(&traced_file).unwrap(),
        expected_file
    );
    let rep = report(&rec.dir.path);
    let cbrt: Vec<(String, u64)> = rep
        .functions
        .iter()
        .filter(|f| f.module.contains("libm") && f.name.contains("cbrt"))
        .map(|f| (f.name.clone(), f.calls))
        .collect();
    assert_eq!(
        cbrt.iter().map(|c| c.1).sum::<u64>(),
        1,
        "cbrt traced inside libm: {cbrt:?} (trace {})",
        rec.dir.path.display()
    );
}

/// A program that sets umask 0 and execs itself twice: each image's symbol
/// file is 0600 all the same.
#[test]
fn symbol_files_are_private_whatever_the_umask() {
    let exe = c_program("hygiene_umask.c", "-O2", &["-O2"]);
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "image 0\nimage 1\nimage 2\n");
    let rec = record(&exe, &[], &[]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    let modes = sym_modes(&rec.dir.path);
    assert_eq!(modes.len(), 3, "one symbol file per image: {modes:?}");
    for (name, mode) in &modes {
        assert_eq!(
            *mode,
            0o600,
            "{name}: mode {mode:o} (trace {})",
            rec.dir.path.display()
        );
    }
}

/// The counts a program with its own allocator prints at exit
/// (`malloc=N free=N calloc=N realloc=N`).
fn printed_counts(stdout: &str) -> Vec<(String, u64)> {
    let line = stdout.lines().last().unwrap_or("");
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("name=count");
            (k.to_string(), v.parse().expect("a count"))
        })
        .collect()
}

/// A program with its own malloc, free, calloc and realloc, built -O2
/// (where its calloc calls itself: only the program may call its allocator
/// as it expects). It runs as natively, and every call of its allocator is
/// in the trace, as often as the program counted them.
#[test]
fn a_programs_own_allocator() {
    let exe = c_program(
        "hygiene_malloc.c",
        "-O2",
        &["-O2", "-Wno-free-nonheap-object"],
    );
    let native = run_native(&exe, &[]);
    let counts = printed_counts(&native.stdout);
    assert_eq!(
        counts.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["malloc", "free", "calloc", "realloc"],
        "{}",
        native.describe()
    );
    let rec = record_any(&exe, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "hygiene_malloc -O2");
    let rep = report(&rec.dir.path);
    let exe_path = canonical(&exe);
    let calls = |name: &str| -> u64 {
        rep.functions
            .iter()
            .filter(|f| f.name == name && canonical(Path::new(&f.module)) == exe_path)
            .map(|f| f.calls)
            .sum()
    };
    for (name, n) in &counts {
        assert_eq!(calls(name), *n, "{name} (trace {})", rec.dir.path.display());
    }
    assert_eq!(calls("dup_word"), 3);
    assert_eq!(rep.lost_events, 0);
}

/// 40,000 short threads under an address-space limit the program sets
/// (`RLIMIT_AS`: what it had plus 1 GiB), then a 256 MiB allocation that
/// fits natively. Each thread's shadow stack is mapped small and unmapped
/// at its end: the program behaves as natively, and every traced thread's
/// calls are all there.
#[test]
fn many_threads_under_an_address_space_limit() {
    let exe = c_program("hygiene_threads.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "40000 threads, 256 MiB allocated\n");
    let rec = record_any(&exe, &[], &[]);
    assert_eq!(
        (rec.run.code(), rec.run.stdout.as_str()),
        (native.code(), native.stdout.as_str()),
        "{}",
        rec.run.describe()
    );
    let rep = report(&rec.dir.path);
    let calls = |name: &str| rep.calls_with_clones(name);
    let threads = rep.tasks.len() as u64 - 1;
    let ctx = format!("trace {}", rec.dir.path.display());
    assert_eq!(calls("pthread_create"), 40000, "{ctx}");
    // Every thread that has a task has its calls, whole.
    assert_eq!(calls("thread_main"), threads, "{ctx}");
    assert_eq!(calls("work"), threads, "{ctx}");
    assert_eq!(calls("leaf"), 2 * threads, "{ctx}");
    if threads < 40000 {
        // Threads beyond the task table are not traced: never silently.
        assert!(
            rep.lost_events > 0,
            "{ctx}: {threads} threads traced, no loss reported"
        );
    } else {
        assert_eq!(rep.lost_events, 0, "{ctx}");
    }
}

/// Runs `cmd` natively and under `fctrace record` with the same small
/// environment (and the user's own loader variables when given: a
/// `LD_PRELOAD`, a `LD_AUDIT`); returns both runs and the trace.
fn native_and_traced(cmd: &[&str], user_vars: &[(&str, &str)]) -> (Run, Recorded) {
    let mut vars = vec![
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/nonexistent"),
        ("ZZ_LAST", "last"),
        ("AA_FIRST", "first"),
    ];
    vars.extend_from_slice(user_vars);
    let native = run(std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .env_clear()
        .envs(vars.iter().copied()));
    let dir = TraceDir::new("env");
    let traced = run_with_timeout(
        std::process::Command::new(fctrace_bin())
            .args(["record", "-d"])
            .arg(&dir.path)
            .args(cmd)
            .env_clear()
            .envs(vars.iter().copied()),
        FCTRACE_TIMEOUT,
    );
    assert_no_panic(&traced);
    (native, Recorded { dir, run: traced })
}

/// The program and the programs it executes see the environment they see
/// without fctrace, as the C library has it and as the kernel shows it
/// (`/proc/self/environ`), with and without a `LD_PRELOAD` (fctrace adds
/// its own, and takes it out) or a `LD_AUDIT` of the user's; and they are
/// traced.
#[test]
fn the_environment_is_the_programs() {
    let exe = c_program("hygiene_env.c", "-O2", &["-O2"]);
    let exe = exe.to_str().unwrap();
    let libm = "/lib/x86_64-linux-gnu/libm.so.6";
    let audit = c_shared_lib("libhygiene_audit.so", "hygiene_audit.c", &["-O1"]);
    let audit = audit.to_str().unwrap();
    for (args, user) in [
        (vec![exe], vec![]),
        (vec![exe, "again"], vec![]),
        (vec![exe, "again"], vec![("LD_PRELOAD", libm)]),
        (vec![exe, "again"], vec![("LD_AUDIT", audit)]),
    ] {
        let (native, rec) = native_and_traced(&args, &user);
        let ctx = format!("{args:?} {user:?}");
        assert!(
            native.stdout.contains("\nAA_FIRST=first\n"),
            "{}",
            native.describe()
        );
        assert_eq!(
            native.stdout.matches("ZZ_LAST=last").count(),
            2,
            "{}",
            native.describe()
        );
        assert_same_behaviour(&native, &rec.run, &ctx);
        let rep = report(&rec.dir.path);
        assert_eq!(rep.tasks.len(), args.len(), "{ctx}: one task per image");
        let mains = rep.calls("main");
        assert_eq!(mains, args.len() as u64, "{ctx}: main traced in each image");
    }
}

/// `ldd` (bash running the dynamic loader with `LD_TRACE_LOADED_OBJECTS`)
/// lists the program's objects under fctrace as without it: the loader
/// runs no program then, and does not get the agent to list.
#[test]
fn ldd_lists_the_programs_objects_only() {
    let exe = c_program("hygiene_env.c", "-O2", &["-O2"]);
    let exe = exe.to_str().unwrap();
    let (native, rec) = native_and_traced(&["/bin/bash", "/usr/bin/ldd", exe], &[]);
    // Load addresses differ from run to run.
    let objects = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| l.split(" (0x").next().unwrap_or(l).trim().to_string())
            .collect()
    };
    assert!(
        objects(&native.stdout)
            .iter()
            .any(|l| l.starts_with("libc.so.6 => ")),
        "{}",
        native.describe()
    );
    assert_eq!(
        objects(&rec.run.stdout),
        objects(&native.stdout),
        "{}",
        rec.run.describe()
    );
    assert!(rec.run.success(), "{}", rec.run.describe());
}

/// bash reads its environment itself (and defines its own `unsetenv`):
/// `bash -c env` prints the same variables under fctrace, bash itself has
/// none of fctrace's, and `env`, which
/// bash executes, is traced too.
#[test]
fn bash_sees_and_exports_the_programs_environment() {
    let script = "env; echo \"LD_PRELOAD=[$LD_PRELOAD] FCTRACE_SHM=[$FCTRACE_SHM]\"; declare -px | grep -c FCTRACE_ || true";
    let (native, mut rec) = native_and_traced(&["/bin/bash", "-c", script], &[]);
    assert!(
        native.stdout.ends_with("LD_PRELOAD=[] FCTRACE_SHM=[]\n0\n"),
        "{}",
        native.describe()
    );
    assert!(
        native.stdout.contains("AA_FIRST=first"),
        "{}",
        native.describe()
    );
    rec.run.stderr = without_fctrace_notes(&rec.run.stderr);
    assert_same_behaviour(&native, &rec.run, "bash -c env");
    let rep = report(&rec.dir.path);
    let comms: Vec<&str> = rep.tasks.iter().map(|t| t.comm.as_str()).collect();
    assert!(comms.contains(&"env"), "env traced: {comms:?}");
}

/// A program started in new PID and mount namespaces with its own /proc
/// (where the recorder's /proc/<pid>/fd paths do not exist) runs with the
/// stderr it has without fctrace, and is traced.
#[test]
fn a_new_mount_and_pid_namespace() {
    let exe = c_program("hygiene_env.c", "-O2", &["-O2"]);
    let cmd = [
        "unshare",
        "--mount-proc",
        "--pid",
        "--fork",
        exe.to_str().unwrap(),
    ];
    let (native, mut rec) = native_and_traced(&cmd, &[]);
    if !native.success() {
        eprintln!(
            "skipped: unshare does not work here (needs root)\n{}",
            native.describe()
        );
        return;
    }
    rec.run.stderr = without_fctrace_notes(&rec.run.stderr);
    assert_same_behaviour(&native, &rec.run, "unshare --mount-proc --pid --fork");
    let rep = report(&rec.dir.path);
    let prog = rep
        .tasks
        .iter()
        .find(|t| t.comm.starts_with("hygiene_env"))
        .unwrap_or_else(|| panic!("the program is traced: {:?}", rep.tasks));
    assert_eq!(prog.pid, 1, "it is the namespace's first process");
    let mains = rep.calls("main");
    assert_eq!(mains, 1);
}

/// A set-user-ID copy of a program (owned by `nobody`): the dynamic loader
/// ignores LD_PRELOAD for it, so it cannot be traced. fctrace says so at
/// start when it is the program, at the end when a traced program executes
/// it, and `info` lists it; the programs run as natively.
#[test]
fn set_user_id_programs_are_named() {
    use std::os::unix::fs::PermissionsExt;
    let exe = c_program("hygiene_exec.c", "-O2", &["-O2"]);
    let dir = scratch("setuid");
    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let suid = dir.path.join("suid-copy");
    std::fs::copy(&exe, &suid).unwrap();
    let c = std::ffi::CString::new(suid.to_str().unwrap()).unwrap();
    // SAFETY: chown with a valid path.
    if unsafe { libc::chown(c.as_ptr(), 65534, 65534) } != 0 {
        eprintln!("skipped: cannot give a file to nobody (needs root)");
        return;
    }
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let suid_s = suid.to_str().unwrap();
    let native = run(&mut std::process::Command::new(&suid));
    if native.stdout != "no program to run\n" {
        eprintln!(
            "skipped: the set-user-ID copy does not run here\n{}",
            native.describe()
        );
        return;
    }
    // Owned by someone else: for the real user, set-user-ID takes effect
    // (unless this file system is nosuid: then it is traced, and fctrace
    // must not claim otherwise).
    let nosuid = {
        // SAFETY: statvfs with a valid path into a local.
        unsafe {
            let mut fs: libc::statvfs = std::mem::zeroed();
            libc::statvfs(c.as_ptr(), &mut fs) == 0 && fs.f_flag & libc::ST_NOSUID != 0
        }
    };
    let note = format!(
        "{suid_s} is set-user-ID nobody: the dynamic loader ignores LD_PRELOAD for it, so it runs untraced"
    );
    let rec = record_any(&suid, &[], &[]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    assert_eq!(rec.run.code(), native.code());
    let info = info_text(&rec.dir.path);
    if nosuid {
        assert!(
            !rec.run.stderr.contains("set-user-ID"),
            "{}",
            rec.run.describe()
        );
        return;
    }
    assert!(
        rec.run.stderr.contains(&format!("fctrace: {note}\n")),
        "{}",
        rec.run.describe()
    );
    assert!(info.contains(&note), "{info}");

    // Executed by a traced program.
    let native = run_native(&exe, &[suid_s]);
    let rec = record_any(&exe, &[suid_s], &[]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    assert_eq!(
        native.stdout,
        format!("running {suid_s}\nno program to run\n")
    );
    let rep = report(&rec.dir.path);
    let pid = rep.tasks[0].pid;
    let line = format!(
        "process {pid} executed {suid_s} (set-user-ID): the dynamic loader ignores LD_PRELOAD for it, so it ran untraced"
    );
    assert!(
        rec.run.stderr.contains(&format!("fctrace: {line}\n")),
        "{}",
        rec.run.describe()
    );
    let info = info_text(&rec.dir.path);
    assert!(info.contains(&line), "{info}");
    assert_eq!(
        rep.tasks.len(),
        1,
        "only the parent is traced: {:?}",
        rep.tasks
    );
}

/// Recursions 200,000 calls deep, in a thread and in main: each shadow
/// stack grows from its first mapping as they go down, with and without
/// record-time filters (`-N leaf` hides a function at every level), and
/// no call is lost.
#[test]
fn shadow_stacks_grow_on_demand() {
    let exe = c_program("hygiene_deep.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "199999 199999\n");
    // With -D 150000 (the filters' depth limit is an address in the
    // shadow stack, moved with it): in main, main and deep take two
    // levels, in the thread deep one; down and leaf fill the rest.
    const D: u64 = 150_000;
    for opts in [&[][..], &["-N", "leaf"][..], &["-D", "150000"][..]] {
        let rec = record_any(&exe, &[], opts);
        assert_same_behaviour(&native, &rec.run, &format!("{opts:?}"));
        let rep = report(&rec.dir.path);
        let calls = |name: &str| rep.calls_with_clones(name);
        let ctx = format!("{opts:?} trace {}", rec.dir.path.display());
        let (down, leaf) = match opts.first() {
            None => (400_000, 400_000),
            Some(&"-N") => (400_000, 0),
            _ => ((D - 2) + (D - 1), (D - 3) + (D - 2)),
        };
        assert_eq!(calls("down"), down, "{ctx}");
        assert_eq!(calls("deep"), 2, "{ctx}");
        assert_eq!(calls("leaf"), leaf, "{ctx}");
        assert_eq!(rep.lost_events, 0, "{ctx}");
    }
}

/// The agent's source is in layers (`crates/fctrace-agent/src`, see
/// docs/engine.md, "Code layout"): each file may use its own layer and
/// the ones below it (`runtime` < `recording` < `interpose` <
/// `instrument`; `lib.rs` on top), `arch` only `runtime`, and no files
/// use each other in a circle. A text scan of the paths the code names
/// (`crate::`, `super::`, `self::`, `{...}` groups of `use`), comments
/// and literals left out.
mod agent_layers {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// The layers, bottom first. A file's layer is its first folder under
    /// `src` (`lib.rs`: the top, which may use everything).
    const ORDER: [&str; 4] = ["runtime", "recording", "interpose", "instrument"];
    /// Architecture code: usable by every layer but `runtime`, it uses
    /// only `runtime`.
    const ARCH: &str = "arch";
    const TOP: &str = "lib";

    type Module = Vec<String>;

    /// Every `.rs` file under `dir`, by module path (`lib.rs`: empty;
    /// `a/mod.rs`: `[a]`; `a/b.rs`: `[a, b]`).
    fn files(dir: &Path, prefix: &[String], out: &mut BTreeMap<Module, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let mut m = prefix.to_vec();
            if p.is_dir() {
                m.push(name);
                files(&p, &m, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                if !(stem == "mod" || (prefix.is_empty() && (stem == "lib" || stem == "main"))) {
                    m.push(stem.to_string());
                }
                out.insert(m, p);
            }
        }
    }

    fn is_ident(c: char) -> bool {
        c.is_alphanumeric() || c == '_'
    }

    /// The code alone: comments, string and char literals blanked out
    /// (doc comments name modules freely; strings hold braces).
    fn code_only(text: &str) -> String {
        let b: Vec<char> = text.chars().collect();
        let at = |i: usize| b.get(i).copied().unwrap_or('\0');
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            let prev = if i > 0 { b[i - 1] } else { ' ' };
            if c == '/' && at(i + 1) == '/' {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            } else if c == '/' && at(i + 1) == '*' {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if b[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            } else if c == 'r'
                && (!is_ident(prev)
                    || (prev == 'b' && !is_ident(if i > 1 { b[i - 2] } else { ' ' })))
                && {
                    let mut j = i + 1;
                    while at(j) == '#' {
                        j += 1;
                    }
                    at(j) == '"'
                }
            {
                // A raw string: r"...", r#"..."#, br"...".
                let mut hashes = 0;
                i += 1;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1;
                while i < b.len() {
                    if b[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
                out.push_str("\"\"");
            } else if c == '"' {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            } else if c == '\'' && at(i + 1) == '\\' {
                // An escaped char literal.
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c == '\'' && at(i + 2) == '\'' {
                i += 3;
                out.push_str("' '");
            } else {
                // (A lifetime's quote too.)
                out.push(c);
                i += 1;
            }
        }
        out
    }

    /// Reads a path after its first segment (`b` at `i` is just after
    /// it): `::` segments, a `{...}` group (each item a path, `self` the
    /// prefix itself), a glob. Returns the paths and where it ended.
    fn path_tree(b: &[char], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
        let skip_ws = |mut i: usize| {
            while i < b.len() && b[i].is_whitespace() {
                i += 1;
            }
            i
        };
        let mut segs = prefix;
        loop {
            i = skip_ws(i);
            if !(b.get(i) == Some(&':') && b.get(i + 1) == Some(&':')) {
                return (vec![segs], i);
            }
            i = skip_ws(i + 2);
            match b.get(i) {
                Some('{') => {
                    let mut all = Vec::new();
                    i += 1;
                    loop {
                        i = skip_ws(i);
                        match b.get(i) {
                            None => return (all, i),
                            Some('}') => return (all, i + 1),
                            Some(',') => i += 1,
                            Some(&c) if is_ident(c) => {
                                let s = i;
                                while i < b.len() && is_ident(b[i]) {
                                    i += 1;
                                }
                                let word: String = b[s..i].iter().collect();
                                let mut p = segs.clone();
                                if word != "self" {
                                    p.push(word);
                                }
                                let (mut sub, end) = path_tree(b, i, p);
                                all.append(&mut sub);
                                i = end;
                                // `as name`
                                i = skip_ws(i);
                                if b[i..].starts_with(&['a', 's', ' ']) {
                                    i += 3;
                                    while i < b.len() && (b[i].is_whitespace() || is_ident(b[i])) {
                                        i += 1;
                                    }
                                }
                            }
                            Some(_) => i += 1, // `*`
                        }
                    }
                }
                Some(&c) if is_ident(c) => {
                    let s = i;
                    while i < b.len() && is_ident(b[i]) {
                        i += 1;
                    }
                    segs.push(b[s..i].iter().collect());
                }
                _ => return (vec![segs], i), // `*`, `<` of a turbofish
            }
        }
    }

    /// The absolute paths that the code of module `file` names (`children`:
    /// its child modules, which its code may name without `self::`).
    fn named_paths(code: &str, file: &[String], children: &BTreeSet<String>) -> Vec<Module> {
        let b: Vec<char> = code.chars().collect();
        let mut out = Vec::new();
        // Inline modules (`mod name { ... }`) open here, with the brace
        // depth inside them.
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0;
        let mut i = 0;
        let word_at = |i: usize| -> String {
            let mut j = i;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            b[i..j].iter().collect()
        };
        while i < b.len() {
            let c = b[i];
            let prev = if i > 0 { b[i - 1] } else { ' ' };
            if c == '{' {
                depth += 1;
                i += 1;
                continue;
            }
            if c == '}' {
                if inline.last().is_some_and(|m| m.1 == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
                continue;
            }
            if !(is_ident(c) || c == '$') || is_ident(prev) || prev == ':' || prev == '$' {
                i += 1;
                continue;
            }
            let start = if c == '$' { i + 1 } else { i };
            let word = word_at(start);
            let after = start + word.len();
            if word == "mod" && c != '$' {
                let mut j = after;
                while j < b.len() && b[j].is_whitespace() {
                    j += 1;
                }
                let name = word_at(j);
                j += name.len();
                while j < b.len() && b[j].is_whitespace() {
                    j += 1;
                }
                if !name.is_empty() && b.get(j) == Some(&'{') {
                    depth += 1;
                    inline.push((name, depth));
                    i = j + 1;
                    continue;
                }
            }
            let here: Module = file
                .iter()
                .cloned()
                .chain(inline.iter().map(|m| m.0.clone()))
                .collect();
            let base: Option<Module> = match word.as_str() {
                "crate" => Some(Vec::new()),
                "self" => Some(here.clone()),
                "super" => Some(here.clone()),
                w if c != '$' && children.contains(w) && inline.is_empty() => {
                    Some(here.iter().cloned().chain([w.to_string()]).collect())
                }
                _ => None,
            };
            let is_path = b.get(after) == Some(&':') && b.get(after + 1) == Some(&':');
            match base {
                Some(mut base) if is_path => {
                    let mut j = after;
                    if word == "super" {
                        base.pop();
                        // `super::super::...`
                        let more: Vec<char> = "::super".chars().collect();
                        while b[j..].starts_with(&more)
                            && !b.get(j + 7).is_some_and(|&c| is_ident(c))
                        {
                            base.pop();
                            j += 7;
                        }
                    }
                    let (paths, end) = path_tree(&b, j, base);
                    out.extend(paths);
                    i = end;
                }
                _ => i = after.max(i + 1),
            }
        }
        out
    }

    fn layer(m: &[String]) -> &str {
        m.first().map_or(TOP, |s| s.as_str())
    }

    fn allowed(from: &str, to: &str) -> bool {
        let rank = |l: &str| ORDER.iter().position(|&o| o == l);
        from == to
            || from == TOP
            || to == "runtime"
            || (to == ARCH && from != "runtime")
            || matches!((rank(from), rank(to)), (Some(f), Some(t)) if t < f)
    }

    /// The workspace's crates folder.
    fn crates_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The agent's files and the files each uses.
    fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
        let src = crates_dir().join("fctrace-agent/src");
        let g = graph_of(&src);
        assert!(g.len() > 10, "agent sources not found in {}", src.display());
        g
    }

    /// The file each file of the crate whose sources are in `src` uses
    /// (module paths), resolved through the longest module prefix of each
    /// path it names (`crate::real!`: the file that defines the exported
    /// macro). Files that are no module of the crate (a build script's
    /// includes, `bin/`) are left out.
    fn graph_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut mods = BTreeMap::new();
        files(src, &[], &mut mods);
        let code: BTreeMap<Module, String> = mods
            .iter()
            .map(|(m, p)| (m.clone(), code_only(&std::fs::read_to_string(p).unwrap())))
            .collect();
        let mut macros = BTreeMap::new();
        for (m, p) in &mods {
            let text = std::fs::read_to_string(p).unwrap();
            let mut exported = false;
            for line in text.lines().map(str::trim) {
                if line.starts_with("#[macro_export]") {
                    exported = true;
                } else if let Some(r) = line.strip_prefix("macro_rules!").filter(|_| exported) {
                    let name: String = r.trim().chars().take_while(|&c| is_ident(c)).collect();
                    macros.insert(name, m.clone());
                    exported = false;
                }
            }
        }
        let mut g = BTreeMap::new();
        for (m, text) in &code {
            let children: BTreeSet<String> = mods
                .keys()
                .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
                .map(|k| k.last().unwrap().clone())
                .collect();
            let mut uses = BTreeSet::new();
            for p in named_paths(text, m, &children) {
                let target = match macros.get(p.first().map_or("", |s| s.as_str())) {
                    Some(t) if p.len() == 1 => t.clone(),
                    _ => (0..=p.len())
                        .rev()
                        .map(|n| p[..n].to_vec())
                        .find(|q| mods.contains_key(q))
                        .unwrap_or_default(),
                };
                if &target != m {
                    uses.insert(target);
                }
            }
            g.insert(m.clone(), uses);
        }
        g
    }

    fn show(m: &[String]) -> String {
        if m.is_empty() {
            "lib".into()
        } else {
            m.join("::")
        }
    }

    /// The scan itself: groups, `self`, `super`, inline modules, macros;
    /// nothing from comments or strings.
    #[test]
    fn the_scan_reads_paths() {
        let text = r#"
            //! Uses `crate::instrument` in a comment only.
            use crate::runtime::{buffer, shm::{self, Shm}, state::ThreadState};
            use super::codegen::Common;
            fn f() { let s = "crate::interpose::x {"; let c = '{'; crate::recording::filter::go(); }
            mod inner {
                use super::helper;
            }
            fn g<'a>(x: &'a u8) { $crate::runtime::real::resolve_next(); }
        "#;
        let file: Module = vec!["arch".into(), "x86_64".into(), "patch".into()];
        let got: BTreeSet<String> = named_paths(&code_only(text), &file, &BTreeSet::new())
            .iter()
            .map(|p| p.join("::"))
            .collect();
        let want: BTreeSet<String> = [
            "runtime::buffer",
            "runtime::shm",
            "runtime::shm::Shm",
            "runtime::state::ThreadState",
            "arch::x86_64::codegen::Common",
            "recording::filter::go",
            "arch::x86_64::patch::helper",
            "runtime::real::resolve_next",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn agent_files_are_layered_without_cycles() {
        let g = graph();
        assert!(
            g.values().map(BTreeSet::len).sum::<usize>() > 30,
            "too few uses found: {g:?}"
        );
        let mut wrong = Vec::new();
        for (from, uses) in &g {
            let fl = layer(from);
            assert!(
                fl == TOP || fl == ARCH || ORDER.contains(&fl),
                "{}: folder {fl} is in no layer (add it to ORDER in this test and to docs/engine.md)",
                show(from)
            );
            for to in uses {
                if !allowed(fl, layer(to)) {
                    wrong.push(format!("{} uses {}", show(from), show(to)));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "uses against the layer order (runtime < recording < interpose < instrument < lib.rs; arch uses only runtime):\n{}",
            wrong.join("\n")
        );
        if let Some(c) = first_cycle(&g) {
            panic!(
                "files of the agent use each other in a circle: {}",
                show_cycle(&c)
            );
        }
    }

    /// A circle of files using each other, if there is one: a depth-first
    /// walk, a file met again on the current path closes one.
    fn first_cycle(g: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
        fn walk(
            m: &Module,
            g: &BTreeMap<Module, BTreeSet<Module>>,
            path: &mut Vec<Module>,
            done: &mut BTreeSet<Module>,
        ) -> Option<Vec<Module>> {
            if let Some(k) = path.iter().position(|p| p == m) {
                let mut cycle = path[k..].to_vec();
                cycle.push(m.clone());
                return Some(cycle);
            }
            if done.contains(m) {
                return None;
            }
            path.push(m.clone());
            for n in g.get(m).into_iter().flatten() {
                if let Some(c) = walk(n, g, path, done) {
                    return Some(c);
                }
            }
            path.pop();
            done.insert(m.clone());
            None
        }
        let mut done = BTreeSet::new();
        g.keys()
            .find_map(|m| walk(m, g, &mut Vec::new(), &mut done))
    }

    fn show_cycle(c: &[Module]) -> String {
        c.iter().map(|m| show(m)).collect::<Vec<_>>().join(" -> ")
    }

    /// Every crate of the workspace (a folder of `crates/` with a `src`).
    fn workspace_crates() -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(crates_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("src").is_dir() && p.join("Cargo.toml").is_file())
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
            .collect();
        out.sort();
        out
    }

    /// In no crate do files use each other in a circle (a newcomer reads
    /// a crate bottom up: each file needs only the ones below it).
    #[test]
    fn no_crate_has_files_in_a_circle() {
        let crates = workspace_crates();
        assert!(crates.len() >= 6, "crates not found: {crates:?}");
        let mut circles = Vec::new();
        for (name, dir) in &crates {
            let g = graph_of(&dir.join("src"));
            assert!(!g.is_empty(), "{name}: no sources found");
            // The whole crate: each circle found is cut at its last use
            // and the walk goes on, so that every circle is listed.
            let mut g = g;
            while let Some(c) = first_cycle(&g) {
                circles.push(format!("{name}: {}", show_cycle(&c)));
                let (a, b) = (&c[c.len() - 2], &c[c.len() - 1]);
                g.get_mut(a).unwrap().remove(b);
            }
        }
        assert!(
            circles.is_empty(),
            "files that use each other in a circle (move what both need into a file below them):\n{}",
            circles.join("\n")
        );
    }

    /// The crates' layers, bottom first: a crate depends only on crates of
    /// layers below its own. The trace format, the option syntax, Perfetto's
    /// messages; the symbol reader; read-time naming from debug files; the
    /// agent, the recorder and the analysis (independent of each other); the
    /// command line on top, with the integration tests' helpers.
    const CRATE_LAYERS: [&[&str]; 5] = [
        &["fctrace-format", "fctrace-options", "fctrace-perfetto"],
        &["fctrace-symbols"],
        &["fctrace-debuginfo"],
        &["fctrace-agent", "fctrace-record", "fctrace-analysis"],
        &["fctrace", "fctrace-testkit"],
    ];

    /// The names of the dependencies in the `[dependencies]`-like tables
    /// of a Cargo.toml (`[dependencies]`, `[build-dependencies]`,
    /// `[target.'...'.dependencies]`; dev-dependencies left out).
    fn dependencies(manifest: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut inside = false;
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                inside = (line.ends_with("dependencies]") && !line.contains("dev-dependencies"))
                    || line.starts_with("[dependencies.");
                if let Some(name) = line
                    .strip_prefix("[dependencies.")
                    .and_then(|r| r.strip_suffix(']'))
                {
                    out.push(name.to_string());
                    inside = false;
                }
                continue;
            }
            if inside && !line.starts_with('#') {
                if let Some((name, _)) = line.split_once('=') {
                    out.push(name.trim().to_string());
                }
            }
        }
        out
    }

    /// No crate imports upward: each depends only on crates below it, and
    /// only the command line knows clap (the libraries take plain
    /// settings, never the CLI's option types).
    #[test]
    fn crates_depend_only_downward() {
        let layer = |name: &str| CRATE_LAYERS.iter().position(|l| l.contains(&name));
        let mut wrong = Vec::new();
        for (name, dir) in workspace_crates() {
            let Some(mine) = layer(&name) else {
                panic!("crate {name} is in no layer: add it to CRATE_LAYERS in this test and to docs/engine.md");
            };
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            for dep in dependencies(&manifest) {
                if dep.starts_with("clap") && name != "fctrace" {
                    wrong.push(format!(
                        "{name} depends on {dep} (only the command line parses options)"
                    ));
                }
                if let Some(theirs) = layer(&dep) {
                    if theirs >= mine {
                        wrong.push(format!("{name} depends on {dep}, not below it"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_manifest_scan_reads_dependencies() {
        let toml = "[package]\nname = \"x\"\n[dependencies]\na = \"1\"\n# c = 1\nb = { path = \"../b\" }\n[dev-dependencies]\nd = \"1\"\n[build-dependencies]\ne = \"1\"\n[dependencies.f]\nversion = \"1\"\n[lints]\nworkspace = true\n";
        assert_eq!(dependencies(toml), ["a", "b", "e", "f"]);
    }
}
