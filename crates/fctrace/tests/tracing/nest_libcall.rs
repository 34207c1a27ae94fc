//! -l/--nest-libcall, on libcall.c: with it, libc's own functions run by
//! qsort, printf and fflush are traced and nest under the call from the
//! program, and qsort's comparator nests under qsort below libc's frames
//! (glibc 2.36's qsort tail-jumps to qsort_r, an exported function, which
//! calls the comparator through static, untraceable frames); fflush reaches
//! write(2)'s wrapper. Without it, printf and fflush are leaves and the
//! comparator's parent is qsort itself.
//!
//! libc's functions are found through its dynamic symbols (Debian ships it
//! without .symtab): which names exist is read from this machine's libc.

use fctrace_testkit::*;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

const STDOUT: &str = "libcall: 0 8 15\n";

fn libcall() -> PathBuf {
    c_program("libcall.c", "-O0", &["-O0"])
}

/// The libc the program loads (from ldd).
fn libc_path(exe: &Path) -> PathBuf {
    let r = tool("ldd", &[exe.as_os_str()]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("libc.so"))
        .expect("libc in ldd's output");
    let path = line
        .split("=>")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    canonical(Path::new(path))
}

/// Labels of every dynamic symbol of `lib` at the address of `name`.
fn alias_labels(lib: &Path, name: &str) -> BTreeSet<String> {
    let syms = function_symbols(lib);
    let addr = syms
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {}", lib.display()))
        .addr;
    syms.iter()
        .filter(|s| s.addr == addr)
        .map(|s| format!("{}()", s.name))
        .collect()
}

fn child<'a>(n: &'a Node, label: &str) -> &'a Node {
    child_any(n, &BTreeSet::from([label.to_string()]))
}

/// The one child of `n` labelled with any of `labels` (the aliases of one
/// libc function: with -l the function is known by its address, and any of
/// its dynamic symbols may name it, e.g. `_IO_fflush` for `fflush`).
fn child_any<'a>(n: &'a Node, labels: &BTreeSet<String>) -> &'a Node {
    let found: Vec<&Node> = n
        .children
        .iter()
        .filter(|c| labels.contains(&c.label))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one of {labels:?} under {}:\n{}",
        n.label,
        outline(std::slice::from_ref(n))
    );
    found[0]
}

/// Every cmp() of the tree with its ancestors.
fn cmp_paths(main: &Node) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    main.walk(&mut Vec::new(), &mut |n, path| {
        if n.label == "cmp()" {
            out.push(path.iter().map(|s| s.to_string()).collect());
        }
    });
    out
}

#[test]
fn without_nest_libcall_library_calls_are_leaves() {
    let exe = libcall();
    let rec = record(&exe, &[], &[]);
    assert_eq!(rec.run.stdout, STDOUT);
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    let labels: Vec<&str> = main.children.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        ["qsort()", "printf()", "fflush()"],
        "{}",
        outline(std::slice::from_ref(main))
    );
    assert!(child(main, "printf()").children.is_empty());
    assert!(child(main, "fflush()").children.is_empty());
    let paths = cmp_paths(main);
    assert!(!paths.is_empty(), "the comparator was never seen");
    for p in &paths {
        assert_eq!(
            p.last().map(String::as_str),
            Some("qsort()"),
            "cmp() not directly under qsort(): {p:?}"
        );
    }

    let rep = report(&rec.dir.path);
    let libc = libc_path(&exe);
    let in_libc: BTreeSet<&str> = rep
        .functions
        .iter()
        .filter(|f| canonical(Path::new(&f.module)) == libc)
        .map(|f| f.name.as_str())
        .collect();
    for f in ["qsort", "printf", "fflush"] {
        assert!(
            in_libc.contains(f),
            "{f} not reported in {}: {in_libc:?}",
            libc.display()
        );
    }
    let allowed: BTreeSet<&str> = [
        "qsort",
        "printf",
        "fflush",
        "__cxa_finalize",
        "__libc_start_main",
    ]
    .into();
    assert!(
        in_libc.is_subset(&allowed),
        "without -l only the calls from the program into libc: {in_libc:?}"
    );
    assert_eq!(rep.calls("cmp") as usize, paths.len());
}

#[test]
fn with_nest_libcall_libc_internals_nest_under_the_call() {
    let exe = libcall();
    let libc = libc_path(&exe);
    for f in ["qsort_r", "write", "_IO_file_write"] {
        assert!(
            function_symbols(&libc).iter().any(|s| s.name == f),
            "this libc has no dynamic symbol {f}"
        );
    }
    let rec = record(&exe, &[], &["-l"]);
    assert_eq!(rec.run.stdout, STDOUT);
    let ctx = format!("trace {}", rec.dir.path.display());
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    let tree = outline(std::slice::from_ref(main));

    let qsort_names = alias_labels(&libc, "qsort");
    // The comparator: always under qsort, and below libc frames.
    let paths = cmp_paths(main);
    assert!(
        !paths.is_empty(),
        "{ctx}: the comparator was never seen\n{tree}"
    );
    for p in &paths {
        let q = p
            .iter()
            .position(|l| qsort_names.contains(l))
            .unwrap_or_else(|| panic!("{ctx}: cmp() not under qsort(): {p:?}"));
        assert!(
            p.len() > q + 1,
            "{ctx}: with -l, libc's frames between qsort() and cmp(): {p:?}"
        );
    }
    let qsort = child_any(main, &qsort_names);
    let qsort_r_names = alias_labels(&libc, "qsort_r");
    let mut has_qsort_r = false;
    qsort.walk(&mut Vec::new(), &mut |n, _| {
        has_qsort_r |= qsort_r_names.contains(&n.label)
    });
    assert!(
        has_qsort_r,
        "{ctx}: qsort jumps to qsort_r, traced with -l\n{tree}"
    );

    // printf goes deeper than its entry; fflush reaches write(2)'s wrapper.
    assert!(
        !child_any(main, &alias_labels(&libc, "printf"))
            .children
            .is_empty(),
        "{ctx}: printf() has no traced callee with -l\n{tree}"
    );
    let write = alias_labels(&libc, "write");
    let fflush = child_any(main, &alias_labels(&libc, "fflush"));
    let mut found = false;
    fflush.walk(&mut Vec::new(), &mut |n, _| {
        found |= write.contains(&n.label)
    });
    assert!(
        found,
        "{ctx}: none of {write:?} under fflush()\n{}",
        outline(std::slice::from_ref(fflush))
    );

    let rep = report(&rec.dir.path);
    let in_libc: BTreeSet<&str> = rep
        .functions
        .iter()
        .filter(|f| canonical(Path::new(&f.module)) == libc)
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        in_libc.len() > 5,
        "{ctx}: with -l, libc's own functions are reported: {in_libc:?}"
    );
    let qsort_r_names = alias_labels(&libc, "qsort_r");
    assert!(
        in_libc
            .iter()
            .any(|f| qsort_r_names.contains(&format!("{f}()"))),
        "{ctx}: {in_libc:?}"
    );
    assert_eq!(rep.calls("cmp") as usize, paths.len(), "{ctx}");
}

/// -l changes nothing for the program's own functions.
#[test]
fn with_nest_libcall_own_counts_match_callgrind() {
    let opts = CompareOptions {
        record_opts: &["-l"],
        ..Default::default()
    };
    assert_counts_match_callgrind(&libcall(), &[], &opts);
    assert_counts_match_callgrind(&c_program("dense.c", "-O2", &["-O2"]), &[], &opts);
}

/// A position-dependent program that takes a library function's address
/// in its code makes its own PLT entry that function's address for the
/// whole process (its dynamic symbol `puts` is undefined with a non-zero
/// value), so looking `puts` up finds the program's PLT entry. With -l,
/// the call is still recorded once (by libc's own entry; the PLT entry is
/// left alone as for any import traced inside its library), and the
/// import belongs to libc, not to a module named after the program. The
/// same for `pthread_create`, which the agent interposes: its PLT entry
/// stays traced (the call reaches the agent's interposer first).
#[test]
fn canonical_plt_entry_is_traced_once_with_nest_libcall() {
    let src = write_cached_source(
        "canonical_plt.c",
        "#include <stdio.h>\n\
         #include <pthread.h>\n\
         int (*volatile fp)(const char *);\n\
         int (*volatile cp)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);\n\
         static void *run(void *a) { return a; }\n\
         int main(void) {\n\
             pthread_t t;\n\
             fp = puts; cp = pthread_create;\n\
             puts(\"a\"); fp(\"b\");\n\
             if (pthread_create(&t, 0, run, 0) || pthread_join(t, 0)) return 1;\n\
             if (cp(&t, 0, run, 0) || pthread_join(t, 0)) return 1;\n\
             return 0;\n\
         }\n",
    );
    let exe = Build::new(
        Lang::C,
        "canonical_plt",
        &[src],
        &["-O1", "-no-pie", "-fno-pic"],
    )
    .build();
    // The shape: puts undefined, with its PLT entry as value.
    let syms = tool(
        "readelf",
        &["--dyn-syms".as_ref(), "-W".as_ref(), exe.as_os_str()],
    );
    let line = syms
        .stdout
        .lines()
        .find(|l| l.contains(" UND ") && l.split_whitespace().any(|w| w.starts_with("puts@")))
        .unwrap_or_else(|| panic!("no undefined puts\n{}", syms.stdout));
    let value = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_ne!(value, 0, "puts has no canonical PLT address: {line}");
    assert!(
        syms.stdout.lines().any(|l| l.contains(" UND ")
            && l.split_whitespace()
                .any(|w| w.starts_with("pthread_create@"))
            && !l
                .split_whitespace()
                .nth(1)
                .unwrap()
                .chars()
                .all(|c| c == '0')),
        "pthread_create has no canonical PLT address\n{}",
        syms.stdout
    );

    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "a\nb\n");
    let libc = libc_path(&exe);
    let labels = alias_labels(&libc, "puts");
    for (opts, what) in [(&[][..], "without -l"), (&["-l"][..], "-l")] {
        let rec = record(&exe, &[], opts);
        assert_same_behaviour(&native, &rec.run, what);
        let rep = report(&rec.dir.path);
        let puts_calls: u64 = rep
            .functions
            .iter()
            .filter(|f| labels.contains(&format!("{}()", f.name)))
            .map(|f| f.calls)
            .sum();
        assert_eq!(puts_calls, 2, "{what}: puts recorded {puts_calls} times");
        for f in rep
            .functions
            .iter()
            .filter(|f| labels.contains(&format!("{}()", f.name)))
        {
            assert_eq!(
                canonical(Path::new(&f.module)),
                libc,
                "{what}: {} in {}",
                f.name,
                f.module
            );
        }
        // Each call once, at the program's PLT entry: with -l, the agent's
        // interposer enters libc's (patched) pthread_create untraced on
        // behalf of that call.
        assert_eq!(rep.calls("pthread_create"), 2, "{what}: pthread_create");
        let info = info_text(&rec.dir.path);
        let exe_name = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !info
                .lines()
                .any(|l| l.trim_end().ends_with(&format!("  {exe_name}"))),
            "{what}: a module named after the program\n{info}"
        );
    }
}

/// `fctrace report` of the first task (the program's main thread) only.
fn main_thread_report(dir: &Path) -> Report {
    let info = info_text(dir);
    let tid = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("task 0: start, pid "))
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no first task in\n{info}"))
        .to_string();
    let text = report_json_text_with(dir, &[OsStr::new("--tid"), OsStr::new(&tid)]);
    serde_json::from_str(&text).unwrap()
}

/// The functions the agent interposes (pthread_create, signal, sigaction,
/// sigprocmask, longjmp) are recorded once per call with -l: at the program's
/// import, with libc's own calls nested under it (the agent forwards to
/// libc's patched function through its untraced way in), and at libc's
/// entry when a library calls them (std::thread in libstdc++).
#[test]
fn interposed_functions_are_recorded_once_with_nest_libcall() {
    let src = write_cached_source(
        "interposed.c",
        "#include <pthread.h>\n\
         #include <setjmp.h>\n\
         #include <signal.h>\n\
         #include <stdio.h>\n\
         static jmp_buf jb;\n\
         static void *run(void *a) { return a; }\n\
         static void on(int s) { (void)s; }\n\
         int main(void) {\n\
             pthread_t t[3];\n\
             for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, run, 0);\n\
             for (int i = 0; i < 3; i++) pthread_join(t[i], 0);\n\
             signal(SIGUSR1, on);\n\
             signal(SIGUSR2, on);\n\
             struct sigaction sa = {0};\n\
             sa.sa_handler = on;\n\
             sigaction(SIGHUP, &sa, 0);\n\
             sigset_t m;\n\
             sigemptyset(&m);\n\
             sigprocmask(SIG_BLOCK, &m, 0);\n\
             if (!setjmp(jb)) longjmp(jb, 1);\n\
             FILE *f = popen(\"exit 0\", \"r\");\n\
             if (!f || pclose(f) != 0) return 1;\n\
             puts(\"ok\");\n\
             return 0;\n\
         }\n",
    );
    let exe = Build::new(Lang::C, "interposed", &[src], &["-O1"]).build();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "ok\n");
    let libc = libc_path(&exe);
    let truth = callgrind(&exe, &[]);
    // Calls of libc's `f` (not the dynamic loader's own `stat`).
    let native_calls = |f: &str| -> u64 {
        truth
            .calls
            .iter()
            .filter(|((obj, name), _)| name == f && canonical(Path::new(obj)) == libc)
            .map(|(_, n)| n)
            .sum()
    };
    for (opts, what) in [
        (&[][..], "without -l"),
        (&["-l"][..], "-l"),
        (&["-l", "-k"][..], "-l -k"),
    ] {
        let rec = record(&exe, &[], opts);
        assert_same_behaviour(&native, &rec.run, what);
        // The agent's own calls are not the program's: `syscall` (the
        // agent marks its spans for -k with a system call) is called as
        // often as natively (callgrind counts the program's process, not
        // the shell popen starts: the report of its main thread).
        let rep = main_thread_report(&rec.dir.path);
        assert_eq!(
            rep.calls("syscall"),
            native_calls("syscall"),
            "{what}: syscall()\n{}",
            replay_text(&rec.dir.path)
        );
        if opts.contains(&"-k") {
            // (The tree has system call lines: counts only.)
            assert_eq!(
                rep.calls("__libc_sigaction"),
                native_calls("__libc_sigaction"),
                "{what}: __libc_sigaction"
            );
            assert_eq!(rep.calls("pthread_create"), 3, "{what}: pthread_create");
            continue;
        }
        let replay = replay(&rec.dir.path);
        let main = replay.main();
        let tree = outline(std::slice::from_ref(main));
        for (name, calls) in [
            ("pthread_create", 3),
            ("signal", 2),
            ("sigaction", 1),
            ("sigprocmask", 1),
            ("longjmp", 1),
        ] {
            let labels = alias_labels(&libc, name);
            let direct = main
                .children
                .iter()
                .filter(|c| labels.contains(&c.label))
                .collect::<Vec<_>>();
            assert_eq!(direct.len(), calls, "{what}: {name} under main\n{tree}");
            // Not again inside itself.
            for c in direct {
                assert!(
                    !c.children.iter().any(|g| labels.contains(&g.label)),
                    "{what}: {name} nested in itself\n{tree}"
                );
            }
        }
        if !opts.is_empty() {
            // libc's own calls still nest under the program's call.
            let create = main
                .children
                .iter()
                .find(|c| c.label == "pthread_create()")
                .unwrap();
            assert!(
                !create.children.is_empty(),
                "{what}: nothing under pthread_create\n{tree}"
            );
            // The system call's wrapper runs as often as natively: the
            // agent's own calls of sigaction (for its handlers) are not
            // the program's.
            // Nor its questions before starting a program (whether the
            // shell is set-user-ID, where the agent is): in main, as
            // often as natively (callgrind counts the process, not the
            // shell).
            for f in ["stat", "getuid", "getgid"] {
                let labels = alias_labels(&libc, f);
                let n: usize = labels.iter().map(|l| main.count(l)).sum();
                assert_eq!(n as u64, native_calls(f), "{what}: {f} in main\n{tree}");
            }
            let n = native_calls("__libc_sigaction");
            assert!(n >= 4, "callgrind: {n} __libc_sigaction");
            assert_eq!(
                rep.calls("__libc_sigaction"),
                n,
                "{what}: __libc_sigaction\n{tree}"
            );
        }
    }

    // From inside a library: libstdc++'s std::thread calls pthread_create
    // through its own import, which -l does not trace: libc's entry
    // records it, once.
    let src = write_cached_source(
        "interposed_thread.cpp",
        "#include <thread>\n\
         #include <cstdio>\n\
         static void run() {}\n\
         int main() {\n\
             std::thread t(run);\n\
             t.join();\n\
             std::puts(\"ok\");\n\
             return 0;\n\
         }\n",
    );
    let exe = Build::new(Lang::Cxx, "interposed_thread", &[src], &["-O1", "-pthread"]).build();
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &["-l"]);
    assert_same_behaviour(&native, &rec.run, "std::thread, -l");
    let replay = replay(&rec.dir.path);
    let labels = alias_labels(&libc, "pthread_create");
    let n: usize = labels.iter().map(|l| replay.count(l)).sum();
    assert_eq!(
        n,
        1,
        "std::thread, -l: pthread_create\n{}",
        outline(std::slice::from_ref(replay.main()))
    );
}
