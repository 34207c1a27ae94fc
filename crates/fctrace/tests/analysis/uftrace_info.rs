//! uftrace's `info` options in fctrace: `--task` (the task tree), `--symbols`
//! (the traced functions, as the executable's symbol table has them:
//! `nm -S`), `--system` (this machine, as `hostname`, `uname -r` and
//! `getconf` say), and the run's facts uftrace's info prints, recorded with
//! the trace (max RSS, page faults, context switches of rusage.c, which
//! touches 64 MiB and sleeps).

use super::uftrace_replay::recorded;
use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::process::Command;

/// The first line `tool args` prints.
fn tool(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (apt-get install coreutils hostname libc-bin)"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `label : value` lines.
fn facts(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(" : ")?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

#[test]
fn task_tree_and_symbols() {
    let (rec, main, worker) = recorded();
    let dir = &rec.dir.path;
    assert_eq!(
        fctrace_on_quietly("info", dir, &["--task"]),
        format!("[{main}] uftrace_readers\n      [{worker}] uftrace_readers\n")
    );

    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let nm = Command::new("nm")
        .args(["-S".as_ref(), exe.as_os_str()])
        .output()
        .expect("nm: apt-get install binutils");
    let nm: BTreeMap<String, (u64, u64)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4).then(|| {
                let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
                (f[3].to_string(), (hex(f[0]), hex(f[1])))
            })
        })
        .collect();
    let text = fctrace_on_quietly("info", dir, &["--symbols"]);
    let (normal, dynamic) = text.split_once("Dynamic symbols").expect(&text);
    assert!(
        normal.starts_with("Normal symbols\n==============\n"),
        "{text}"
    );
    let mut seen = Vec::new();
    for (i, l) in normal.lines().skip(2).filter(|l| !l.is_empty()).enumerate() {
        // `[ N] name (0xADDR) size: N`
        let (idx, rest) = l.split_once("] ").expect(l);
        assert_eq!(
            idx.trim_start_matches('[').trim().parse::<usize>().unwrap(),
            i
        );
        let (name, rest) = rest.split_once(" (0x").expect(l);
        let (addr, size) = rest.split_once(") size: ").expect(l);
        let got = (
            u64::from_str_radix(addr, 16).unwrap(),
            size.parse::<u64>().unwrap(),
        );
        // (nm -S gives no size to _init and _fini.)
        if let Some(want) = nm.get(name) {
            assert_eq!(&got, want, "{l}");
            seen.push(name.to_string());
        }
    }
    for f in ["main", "worker", "a", "b", "c", "leaf"] {
        assert!(seen.contains(&f.to_string()), "{f} in {text}");
    }
    for f in [
        "printf",
        "fflush",
        "syscall",
        "pthread_create",
        "pthread_join",
    ] {
        assert!(dynamic.contains(&format!("] {f} (0x")), "{f} in {text}");
    }
}

#[test]
fn system_and_run_facts() {
    let f = facts(&fctrace_on_quietly(
        "info",
        "/nonexistent".as_ref(),
        &["--system"],
    ));
    assert_eq!(f["hostname"], tool("hostname", &[]));
    assert_eq!(
        f["kernel version"],
        format!("Linux {}", tool("uname", &["-r"]))
    );
    let online = tool("getconf", &["_NPROCESSORS_ONLN"]);
    assert!(
        f["number of cpus"].starts_with(&format!("{online} / ")),
        "{f:?}"
    );

    let exe = c_program("rusage.c", "-O0", &["-O0"]);
    let rec = record(&exe, &[], &[]);
    assert_eq!(
        rec.run.stdout,
        format!("{}\n", 64 * 256),
        "the program's output"
    );
    let f = facts(&info_text(&rec.dir.path));
    assert_eq!(f["hostname"], tool("hostname", &[]));
    let kb: u64 = f["max rss"].strip_suffix(" KB").unwrap().parse().unwrap();
    assert!(kb >= 64 * 1024, "64 MiB touched: {f:?}");
    let (major, minor) = f["page fault"]
        .strip_suffix(" (major / minor)")
        .unwrap()
        .split_once(" / ")
        .unwrap();
    assert!(major.parse::<u64>().is_ok());
    assert!(minor.parse::<u64>().unwrap() >= 16384, "{f:?}");
    let (voluntary, _) = f["context switch"].split_once(" / ").unwrap();
    assert!(voluntary.parse::<u64>().unwrap() >= 1, "usleep: {f:?}");
    assert!(f["cpu time"].ends_with(" sec (sys / user)"), "{f:?}");
}
