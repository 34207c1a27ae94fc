//! dlopen/dlclose (dlhost.c loading plugin.c, both built here): with -l the
//! plugin's functions are traced from the moment it is loaded (its
//! constructor, run inside dlopen, included), its calls back into the
//! program and the program's calls back into it nest where they run; the
//! plugin opened a second time while loaded is not patched twice; unloaded
//! and loaded again (at the same address or not), it is traced again.
//! Without -l only the program's own functions are traced, as before.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

fn plugin(opt: &str) -> PathBuf {
    c_shared_lib(&format!("libplugin{opt}.so"), "plugin.c", &[opt])
}

fn host(opt: &str) -> PathBuf {
    Build::new(
        Lang::C,
        &format!("dlhost{opt}"),
        &[program_source("dlhost.c")],
        &[opt, "-rdynamic"],
    )
    .build()
}

/// The program's and the plugin's functions, and the dl calls.
const KEEP: &[&str] = &[
    "main()",
    "one_round()",
    "run_plugin()",
    "host_log()",
    "host_twice()",
    "host_callback()",
    "plugin_init()",
    "plugin_fini()",
    "plugin_square()",
    "plugin_helper()",
    "plugin_compute()",
    "plugin_calls()",
    "dlopen()",
    "dlsym()",
    "dlclose()",
];

/// One round of dlhost.c with -l, written from its source: the plugin's
/// constructor runs inside the first dlopen, the second dlopen only takes
/// a reference, the destructor runs inside the last dlclose.
const ROUND_NEST: &str = r"
  one_round()
    dlopen()
      plugin_init()
    run_plugin()
      dlsym()
      dlsym()
      plugin_compute()
        plugin_helper()
          host_log()
          plugin_square()
        host_callback()
          plugin_square()
          host_twice()
    dlopen()
    run_plugin()
      dlsym()
      dlsym()
      plugin_compute()
        plugin_helper()
          host_log()
          plugin_square()
        host_callback()
          plugin_square()
          host_twice()
    dlclose()
    dlsym()
    plugin_calls()
    dlclose()
      plugin_fini()
";

/// The same without -l: the plugin is not traced; the program's functions
/// it calls nest under the program's last traced frame.
const ROUND_PLAIN: &str = r"
  one_round()
    dlopen()
    run_plugin()
      dlsym()
      dlsym()
      host_log()
      host_callback()
        host_twice()
    dlopen()
    run_plugin()
      dlsym()
      dlsym()
      host_log()
      host_callback()
        host_twice()
    dlclose()
    dlsym()
    dlclose()
";

fn expected(round: &str, rounds: usize) -> String {
    let mut s = String::from("main()\n");
    for _ in 0..rounds {
        s.push_str(
            &expected_outline(round)
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>(),
        );
    }
    s
}

fn stdout_for(rounds: usize) -> String {
    // Round x: compute(x) = (x*x + 1) + 2*x*x, then compute(x + 1), plus
    // the 2 calls of plugin_helper counted by the plugin since it was loaded.
    let c = |x: i64| 3 * x * x + 1;
    let sum: i64 = (1..=rounds as i64).map(|x| c(x) + c(x + 1) + 2).sum();
    let total: i64 = (1..=rounds as i64).map(|x| 2 * x + 1).sum();
    format!("dlhost: {rounds} rounds, sum {sum}, total {total}\n")
}

/// Records `rounds` rounds, checks output and the tree, and compares the
/// counts of the program's and (with -l) the plugin's functions with
/// callgrind's.
fn check(opt: &str, record_opts: &'static [&'static str], rounds: usize, tree: Option<&str>) {
    let (exe, lib) = (host(opt), plugin(opt));
    let n = rounds.to_string();
    let args = [lib.to_str().unwrap(), n.as_str()];
    let native = run_native(&exe, &args);
    assert_eq!(native.stdout, stdout_for(rounds), "{}", native.describe());
    let rec = record(&exe, &args, record_opts);
    let ctx = format!(
        "{} {record_opts:?} (trace {})",
        exe.display(),
        rec.dir.path.display()
    );
    assert_same_behaviour(&native, &rec.run, &ctx);
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    assert_all_closed(std::slice::from_ref(main), &ctx);
    if let Some(round) = tree {
        let kept = project(std::slice::from_ref(main), &|l| KEEP.contains(&l));
        assert_outline_eq(&outline(&kept), &expected(round, rounds), &ctx);
    }

    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    let cg = callgrind(&exe, &args);
    let opts = CompareOptions {
        record_opts,
        ..Default::default()
    };
    if let Err(msg) = compare_with_callgrind(&exe, &rep, &cg, &opts) {
        panic!("{msg}({ctx})");
    }
    let in_plugin = rep.functions_of(&lib);
    if record_opts.contains(&"-l") {
        match compare_with_callgrind(&lib, &rep, &cg, &opts) {
            Ok(c) => assert!(c.compared >= 6, "{ctx}: {c:?}"),
            Err(msg) => panic!("{msg}({ctx})"),
        }
        assert_eq!(rep.calls("plugin_init"), rounds as u64, "{ctx}");
        assert_eq!(rep.calls("plugin_square"), 4 * rounds as u64, "{ctx}");
    } else {
        assert!(
            in_plugin.is_empty(),
            "{ctx}: without -l the plugin is not traced: {in_plugin:?}"
        );
    }
}

#[test]
fn nest_libcall_traces_the_plugin_o0() {
    check("-O0", &["-l"], 2, Some(ROUND_NEST));
}

#[test]
fn nest_libcall_traces_the_plugin_o2() {
    check("-O2", &["-l"], 2, Some(ROUND_NEST));
}

#[test]
fn without_nest_libcall_only_the_program_o2() {
    check("-O2", &[], 2, Some(ROUND_PLAIN));
}

/// Loaded and unloaded many times: every load is traced, counts stay
/// exact, nothing breaks.
#[test]
fn many_reloads_o2() {
    check("-O2", &["-l"], 40, None);
}

/// The symbol table lists the plugin once per load, with fresh function
/// ids (the session's ids stay unique), and `info` reads it.
#[test]
fn symbol_table_grows_per_load() {
    let (exe, lib) = (host("-O2"), plugin("-O2"));
    let rec = record(&exe, &[lib.to_str().unwrap(), "3"], &["-l"]);
    let sessions = rec.dir.path.join("sessions");
    let sym = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sym"))
        .expect("a .sym file");
    let text = std::fs::read_to_string(&sym).unwrap();
    let lib = canonical(&lib);
    let modules: Vec<u32> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0] == "module" && canonical(Path::new(f[3])) == lib).then(|| f[1].parse().unwrap())
        })
        .collect();
    assert!(
        !modules.is_empty(),
        "{}: no module line for the plugin",
        sym.display()
    );
    let mut ids = std::collections::BTreeSet::new();
    let mut square = 0;
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f[0] != "func" {
            continue;
        }
        assert!(ids.insert(f[1].to_string()), "function id {} twice", f[1]);
        if modules.contains(&f[2].parse().unwrap()) && f[7] == "plugin_square" {
            assert_eq!(f[6], "traced");
            square += 1;
        }
    }
    assert_eq!(square, 3, "plugin_square once per load\n{text}");
    let info = info_text(&rec.dir.path);
    assert!(
        info.contains(lib.file_name().unwrap().to_str().unwrap()),
        "{info}"
    );
}

/// Threads keep calling the program's functions, and the plugin's while it
/// is loaded, as the main thread loads, patches and unloads it again and
/// again: the program's output is unchanged and every call is counted
/// (the program counts its own calls; they vary from run to run).
#[test]
fn threads_run_while_libraries_load() {
    let exe = Build::new(
        Lang::C,
        "dlthreads-O2",
        &[program_source("dlthreads.c")],
        &["-O2", "-rdynamic", "-pthread"],
    )
    .build();
    let lib = plugin("-O2");
    let args = [lib.to_str().unwrap(), "10"];
    let native = run_native(&exe, &args);
    let rec = record(&exe, &args, &["-l"]);
    assert_eq!(rec.run.stdout, native.stdout, "{}", rec.run.describe());
    let ctx = format!("trace {}", rec.dir.path.display());
    let counts: Vec<u64> = rec
        .run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .unwrap_or_else(|| panic!("{ctx}: no counts on stderr\n{}", rec.run.describe()))
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let (worker_twice, worker_square) = (counts[0], counts[1]);
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    // The main thread: plugin_compute once a round, whose helper calls
    // plugin_square, whose callback calls host_twice.
    assert_eq!(rep.calls("plugin_compute"), 10, "{ctx}");
    assert_eq!(rep.calls("plugin_init"), 10, "{ctx}");
    assert_eq!(rep.calls("host_twice"), worker_twice + 10, "{ctx}");
    assert_eq!(rep.calls("plugin_square"), worker_square + 10, "{ctx}");
    assert!(worker_square > 0, "{ctx}: the workers never ran the plugin");
}
