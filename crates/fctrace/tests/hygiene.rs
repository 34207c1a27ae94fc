//! Hygiene of the agent in someone else's process: it never writes through
//! a descriptor the program may have reused, keeps its files private, works
//! with a program's own allocator, frees what each thread used, leaves the
//! environment as it was, and says when a program cannot be traced.

mod common;

use common::*;
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
/// environment (and `LD_PRELOAD` of the user's own when given); returns
/// both runs and the trace.
fn native_and_traced(cmd: &[&str], user_preload: Option<&str>) -> (Run, Recorded) {
    let mut vars = vec![
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/nonexistent"),
        ("ZZ_LAST", "last"),
        ("AA_FIRST", "first"),
    ];
    if let Some(p) = user_preload {
        vars.push(("LD_PRELOAD", p));
    }
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
/// (`/proc/self/environ`), with and without a `LD_PRELOAD` of the user's;
/// and they are traced.
#[test]
fn the_environment_is_the_programs() {
    let exe = c_program("hygiene_env.c", "-O2", &["-O2"]);
    let exe = exe.to_str().unwrap();
    let libm = "/lib/x86_64-linux-gnu/libm.so.6";
    for (args, preload) in [
        (vec![exe], None),
        (vec![exe, "again"], None),
        (vec![exe, "again"], Some(libm)),
    ] {
        let (native, rec) = native_and_traced(&args, preload);
        let ctx = format!("{args:?} LD_PRELOAD {preload:?}");
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

/// bash reads its environment itself (and defines its own `unsetenv`):
/// `bash -c env` prints the same variables under fctrace, bash itself has
/// none of fctrace's, and `env`, which
/// bash executes, is traced too.
#[test]
fn bash_sees_and_exports_the_programs_environment() {
    let script = "env; echo \"LD_PRELOAD=[$LD_PRELOAD] FCTRACE_SHM=[$FCTRACE_SHM]\"; declare -px | grep -c FCTRACE_ || true";
    let (native, mut rec) = native_and_traced(&["/bin/bash", "-c", script], None);
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
    let (native, mut rec) = native_and_traced(&cmd, None);
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
