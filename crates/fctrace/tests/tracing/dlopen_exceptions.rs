//! C++ exceptions inside a library that arrives with `dlopen` and brings
//! libstdc++ with it (RTLD_LOCAL: in a scope of its own, as Python's ctypes
//! and extension modules load theirs): a C program (dlthrow_host.c) loading
//! dlthrow_lib.cpp, Python's ctypes loading the same library, and the pip
//! `duckdb` module's failing query. Each runs as natively, with and
//! without -l; with -l the library's calls are counted as the source makes
//! them.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A hang (the old interposer calling itself) must fail, not wait for
/// the suite's limit.
const LIMIT: Duration = Duration::from_secs(60);

fn lib(opt: &str) -> PathBuf {
    Build::new(
        Lang::Cxx,
        &format!("libdlthrow{opt}.so"),
        &[program_source("dlthrow_lib.cpp")],
        &[opt, "-shared", "-fPIC"],
    )
    .build()
}

fn host(opt: &str) -> (PathBuf, PathBuf) {
    let lib = lib(opt);
    let define = format!("-DDLTHROW_LIB=\"{}\"", lib.display());
    let exe = Build::new(
        Lang::C,
        &format!("dlthrow_host{opt}"),
        &[program_source("dlthrow_host.c")],
        &[opt, &define],
    )
    .build();
    (exe, lib)
}

/// `fctrace record [opts] exe args` within [`LIMIT`]; past it, fctrace
/// and the program (its own process group: a program spinning in the
/// agent would keep the output pipes open) are killed and the test fails.
fn record_limited(exe: &Path, args: &[&str], opts: &[&str]) -> (TraceDir, Run) {
    use std::os::unix::process::CommandExt;
    let dir = TraceDir::new("dlthrow");
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("record")
        .arg("-d")
        .arg(&dir.path)
        .args(opts)
        .arg(exe)
        .args(args);
    cmd.process_group(0);
    let mut spawned = spawn_captured(&mut cmd, std::process::Stdio::null());
    let start = std::time::Instant::now();
    while spawned.child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            let group = format!("-{}", spawned.child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let r = spawned.finish();
            panic!(
                "{} still running after {LIMIT:?}: killed\n{}",
                r.cmdline,
                r.describe()
            );
        }
        // Polling for the time limit only; the result does not depend on it.
        std::thread::sleep(Duration::from_millis(5));
    }
    let run = spawned.finish();
    assert_recorder_ending(&run, &dir.path);
    (dir, run)
}

/// stdout of `dlthrow_host run N`, from the source: round r catches r
/// exceptions in its loop, then one more after the rethrow (+100).
fn host_stdout(rounds: i32) -> String {
    let mut s = String::new();
    for r in 1..=rounds {
        s.push_str(&format!("round {r}: caught {}\n", r + 100));
    }
    s.push_str(&format!(
        "total {}\n",
        (1..=rounds).map(|r| r + 100).sum::<i32>()
    ));
    s
}

fn check_host(opt: &str, record_opts: &[&str]) {
    let (exe, lib) = host(opt);
    // The program itself has no C++ runtime: libstdc++ comes with the library.
    let deps = run(Command::new("ldd").arg(&exe));
    assert!(!deps.stdout.contains("libstdc++"), "{}", deps.stdout);
    const ROUNDS: i32 = 3;
    let args = ["run", "3"];
    let native = run_native(&exe, &args);
    assert_eq!(native.stdout, host_stdout(ROUNDS));
    let (dir, traced) = record_limited(&exe, &args, record_opts);
    let ctx = format!(
        "{} {record_opts:?} (trace {})",
        exe.display(),
        dir.path.display()
    );
    assert_same_behaviour(&native, &traced, &ctx);
    let (text, tree) = replay_with_text(&dir.path);
    let ctx = format!("{ctx}\n{}", clip(&text, 6000));
    assert_all_closed(std::slice::from_ref(tree.main()), &ctx);
    let rep = report(&dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    assert_eq!(rep.calls("one_round"), ROUNDS as u64, "{ctx}");
    // Round r: r throws in the loop and one through rethrower, each from
    // thrower() through middle(); r + 2 catches (the rethrower's own).
    let throws: u64 = (1..=ROUNDS as u64).map(|r| r + 1).sum();
    if record_opts.contains(&"-l") {
        assert!(!rep.functions_of(&lib).is_empty(), "{ctx}");
        assert_eq!(rep.calls("lib_work"), ROUNDS as u64, "{ctx}");
        assert_eq!(rep.calls("middle"), throws, "{ctx}");
        assert_eq!(rep.calls("thrower"), throws, "{ctx}");
        assert_eq!(rep.calls("rethrower"), ROUNDS as u64, "{ctx}");
        assert_eq!(rep.calls("__cxa_throw"), throws, "{ctx}");
        assert_eq!(rep.calls("__cxa_rethrow"), ROUNDS as u64, "{ctx}");
        assert_eq!(
            rep.calls("__cxa_begin_catch"),
            throws + ROUNDS as u64,
            "{ctx}"
        );
        // Every thrower and middle frame is left by the exception.
        assert_eq!(
            text.matches("} /* thrower */ (unwound)").count() as u64,
            throws,
            "{ctx}"
        );
        assert_eq!(
            text.matches("} /* middle */ (unwound)").count() as u64,
            throws,
            "{ctx}"
        );
        assert_eq!(
            text.matches("} /* rethrower */ (unwound)").count() as u64,
            ROUNDS as u64,
            "{ctx}"
        );
    } else {
        assert!(rep.functions_of(&lib).is_empty(), "{ctx}");
    }
}

#[test]
fn c_program_dlopens_a_throwing_cxx_library_o0() {
    check_host("-O0", &[]);
}

#[test]
fn c_program_dlopens_a_throwing_cxx_library_o2() {
    check_host("-O2", &[]);
}

#[test]
fn c_program_dlopens_a_throwing_cxx_library_nest_o0() {
    check_host("-O0", &["-l"]);
}

#[test]
fn c_program_dlopens_a_throwing_cxx_library_nest_o2() {
    check_host("-O2", &["-l"]);
}

/// The Python interpreter itself (not a wrapper script such as pyenv's
/// shim): `sys.executable`.
fn python() -> PathBuf {
    let r = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): apt-get install python3"));
    assert!(
        r.status.success(),
        "python3 failed: apt-get install python3"
    );
    PathBuf::from(String::from_utf8_lossy(&r.stdout).trim())
}

/// Python code run natively and under fctrace (with and without -l): the
/// same stdout, stderr and exit status.
fn python_as_natively(code: &str, args: &[&str]) {
    let py = python();
    let mut all = vec!["-c", code];
    all.extend_from_slice(args);
    let native = run(Command::new(&py).args(&all));
    // fctrace's notice that the interpreter is stripped (Debian's
    // python3 is; one built from source is not) is not Python's output.
    let notice = format!(
        "fctrace: {}: stripped (no .symtab): functions its dynamic symbol table does not \
         name are found from its call frame information and named by address ({}+0x...)\n",
        py.display(),
        std::fs::canonicalize(&py)
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
    );
    for opts in [&[][..], &["-l"][..]] {
        let (dir, traced) = record_limited(&py, &all, opts);
        let ctx = format!("{} {opts:?} (trace {})", py.display(), dir.path.display());
        assert_same_behaviour_with(&native, &traced, &ctx, |s| s.replacen(&notice, "", 1));
    }
}

#[test]
fn python_ctypes_loads_a_throwing_cxx_library() {
    let lib = lib("-O2");
    let code = "import ctypes, sys\n\
                lib = ctypes.CDLL(sys.argv[1])\n\
                print([lib.lib_work(n) for n in range(4)])\n";
    let native = run(Command::new(python()).args(["-c", code, lib.to_str().unwrap()]));
    assert_eq!(
        native.stdout,
        "[100, 101, 102, 103]\n",
        "{}",
        native.describe()
    );
    python_as_natively(code, &[lib.to_str().unwrap()]);
}

#[test]
fn duckdb_failing_query_as_natively() {
    let check = Command::new(python())
        .args(["-c", "import duckdb"])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "the duckdb module is missing: python3 -m pip install --break-system-packages duckdb \
         (./scripts/test installs it)"
    );
    // The first query fails inside DuckDB (a C++ exception, caught and
    // turned into a Python exception); the second one works.
    let code = "import duckdb\n\
                con = duckdb.connect()\n\
                try:\n    con.execute('select * from no_such_table')\n\
                except duckdb.Error as e:\n    print(type(e).__name__)\n\
                print(con.execute('select 6 * 7').fetchall())\n\
                con.execute('select * from no_such_table')\n";
    let native = run(Command::new(python()).args(["-c", code]));
    assert!(
        native.stdout.starts_with("CatalogException\n[(42,)]\n"),
        "{}",
        native.describe()
    );
    assert_eq!(native.code(), Some(1), "{}", native.describe());
    python_as_natively(code, &[]);
}
