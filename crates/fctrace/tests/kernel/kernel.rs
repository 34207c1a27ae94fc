//! `record -k`: system calls recorded by the kernel, shown under the
//! functions that made them, counted exactly (from what the program does,
//! and against `strace -f -c` of a native run), and clear messages when
//! the kernel refuses.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The syscalls.c constants.
const FAILS: u64 = 5;
const THREAD_CALLS: u64 = 7;
const CHILD_CALLS: u64 = 3;
/// The size of the file copy_file copies, 4096 bytes at a time.
const SIZE: usize = 10_000;

/// Per (innermost function of the program among `funcs`, system call):
/// calls and errors, over every task; and per system call over the whole
/// trace. A system call line is `name(args) = result` (not a function's
/// leaf line, which ends in `;`); `<... name resumed>` lines (the return
/// of a call whose entry another task or program made) are not calls.
struct Counts {
    by_func: BTreeMap<(String, String), (u64, u64)>,
    total: BTreeMap<String, (u64, u64)>,
}

fn counts(text: &str, funcs: &[&str]) -> Counts {
    let mut by_func: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut total: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    // Per tid, the open calls.
    let mut stacks: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let l = split_replay_line(line).unwrap();
        let stack = stacks.entry(l.tid).or_default();
        stack.truncate(l.depth);
        let t = l.text;
        if let Some(name) = t.strip_suffix(" {").and_then(|t| t.split('(').next()) {
            stack.push(name.to_string());
            continue;
        }
        if t.starts_with('}') || t.ends_with(';') || t.starts_with("<...") {
            continue;
        }
        let Some((call, result)) = t.rsplit_once(") = ") else {
            continue;
        };
        let name = call.split('(').next().unwrap().to_string();
        let error = result.starts_with("-1 E");
        let e = total.entry(name.clone()).or_default();
        e.0 += 1;
        e.1 += u64::from(error);
        if let Some(f) = stack.iter().rev().find(|f| funcs.contains(&f.as_str())) {
            let e = by_func.entry((f.clone(), name)).or_default();
            e.0 += 1;
            e.1 += u64::from(error);
        }
    }
    Counts { by_func, total }
}

/// A fresh directory with the file copy_file copies (`SIZE` bytes), and
/// the path of its copy.
fn files() -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let work = std::env::temp_dir().join(format!("fctrace-kernel-{}", unique_suffix()));
    std::fs::create_dir_all(&work).unwrap();
    let src = work.join("src.bin");
    std::fs::write(&src, vec![7u8; SIZE]).unwrap();
    let dst = work.join("dst.bin");
    (work, src, dst)
}

/// syscalls.c recorded with `opts` (its files from [`files`]).
fn record_syscalls(
    opts: &[&str],
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    Recorded,
) {
    let exe = c_program("syscalls.c", "-O2", &["-O2", "-pthread"]);
    let (work, src, dst) = files();
    let rec = record(&exe, &[src.to_str().unwrap(), dst.to_str().unwrap()], opts);
    (work, src, dst, rec)
}

/// `strace -f -c` of a native run: calls and errors per system call.
fn strace_counts(exe: &Path, args: &[&str]) -> BTreeMap<String, (u64, u64)> {
    strace_counts_with(&[], exe, args)
}

/// [`strace_counts`] with more options for strace.
fn strace_counts_with(opts: &[&str], exe: &Path, args: &[&str]) -> BTreeMap<String, (u64, u64)> {
    let out = std::env::temp_dir().join(format!("fctrace-strace-{}", unique_suffix()));
    let r = run(Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .args(opts)
        .arg(exe)
        .args(args));
    assert!(r.success(), "strace failed\n{}", r.describe());
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    strace_c_counts(&text)
}

/// `strace -c`'s table: calls and errors per system call.
pub(crate) fn strace_c_counts(text: &str) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors], syscall
        if f.len() < 5 || f[0].parse::<f64>().is_err() || f[f.len() - 1] == "total" {
            continue;
        }
        let calls: u64 = f[3].parse().unwrap();
        let errors: u64 = if f.len() == 6 {
            f[4].parse().unwrap()
        } else {
            0
        };
        m.insert(f[f.len() - 1].to_string(), (calls, errors));
    }
    m
}

#[test]
fn system_calls_nest_under_the_functions_that_made_them() {
    let exe = c_program("syscalls.c", "-O2", &["-O2", "-pthread"]);
    let (work, src, dst) = files();
    let args = [src.to_str().unwrap(), dst.to_str().unwrap()];

    let native = run_native(&exe, &args);
    let rec = record(&exe, &args, &["-k"]);
    assert_same_behaviour(&native, &rec.run, "syscalls -k");
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    let funcs = [
        "copy_file",
        "fail_opens",
        "map_unmap",
        "nap",
        "stat_it",
        "worker",
        "child_work",
        "tidy",
    ];
    let c = counts(&text, &funcs);
    let by = |f: &str, s: &str| {
        c.by_func
            .get(&(f.to_string(), s.to_string()))
            .copied()
            .unwrap_or((0, 0))
    };
    let reads = SIZE.div_ceil(4096) as u64 + 1;
    let writes = SIZE.div_ceil(4096) as u64;
    // Every system call of each function, computed from what it does.
    type PerCall<'a> = &'a [(&'a str, (u64, u64))];
    let expected: &[(&str, PerCall)] = &[
        (
            "copy_file",
            &[
                ("openat", (2, 0)),
                ("read", (reads, 0)),
                ("write", (writes, 0)),
                ("close", (2, 0)),
            ],
        ),
        ("fail_opens", &[("openat", (FAILS, FAILS))]),
        ("map_unmap", &[("mmap", (1, 0)), ("munmap", (1, 0))]),
        ("nap", &[("clock_nanosleep", (1, 0))]),
        ("stat_it", &[("newfstatat", (1, 0))]),
        ("worker", &[("getppid", (THREAD_CALLS, 0))]),
        ("child_work", &[("umask", (CHILD_CALLS, 0))]),
        (
            "tidy",
            &[
                ("openat", (1, 0)),
                ("ftruncate", (1, 0)),
                ("lseek", (1, 0)),
                ("close", (1, 0)),
                ("unlink", (1, 0)),
            ],
        ),
    ];
    for (f, calls) in expected {
        for (s, n) in *calls {
            assert_eq!(by(f, s), *n, "{f}: {s}\n{ctx}");
        }
        let all: u64 = c
            .by_func
            .iter()
            .filter(|((g, _), _)| g == f)
            .map(|(_, n)| n.0)
            .sum();
        let want: u64 = calls.iter().map(|(_, n)| n.0).sum();
        let mine: Vec<_> = c.by_func.iter().filter(|((g, _), _)| g == f).collect();
        assert_eq!(all, want, "{f}: other system calls: {mine:?}\n{ctx}");
    }
    // The thread's and the child's in their own tasks.
    let tids = |needle: &str| {
        text.lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| split_replay_line(l).ok().map(|l| l.tid))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let main_tid = tids("copy_file() {");
    assert_eq!(main_tid.len(), 1, "{ctx}");
    for other in ["getppid() = ", "umask(022) = "] {
        let t = tids(other);
        assert_eq!(t.len(), 1, "{other}\n{ctx}");
        assert!(t.is_disjoint(&main_tid), "{other}\n{ctx}");
    }
    assert_ne!(tids("getppid() = "), tids("umask(022) = "), "{ctx}");

    // The whole run against strace -f -c of a native run, for the system
    // calls only the program's own code makes (not the dynamic loader,
    // which also loads fctrace's agent, or the C library's start-up).
    let strace = strace_counts(&exe, &args);
    for s in [
        "getppid",
        "umask",
        "ftruncate",
        "lseek",
        "unlink",
        "clock_nanosleep",
        "wait4",
        "clone",
        "clone3",
    ] {
        assert_eq!(
            c.total.get(s).map(|n| n.0),
            strace.get(s).map(|n| n.0),
            "{s}: fctrace -k against strace -f -c {strace:?}\n{ctx}"
        );
    }
    // info counts them.
    let info = info_text(&rec.dir.path);
    let n: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("Kernel events:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{info}"));
    let calls: u64 = c.total.values().map(|n| n.0).sum();
    assert!(
        n >= 2 * calls - 2,
        "{n} kernel events for {calls} system calls\n{info}"
    );
    // report -k sums the same calls and errors as the tree shows.
    let r = fctrace(&[
        "report",
        "-k",
        "--format",
        "json",
        "-d",
        rec.dir.path.to_str().unwrap(),
    ]);
    assert!(r.success(), "{}", r.describe());
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let reported: BTreeMap<String, (u64, u64)> = json["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                (s["calls"].as_u64().unwrap(), s["errors"].as_u64().unwrap()),
            )
        })
        .collect();
    assert_eq!(reported, c.total, "report -k against the tree\n{ctx}");
    // In the function report: system calls as functions of `[syscall]`,
    // and the kernel's time under each function.
    let r = fctrace(&[
        "report",
        "--format",
        "json",
        "-d",
        rec.dir.path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let funcs = json["functions"].as_array().unwrap();
    let func = |module: &str, name: &str| {
        funcs
            .iter()
            .find(|f| f["name"] == name && f["module"].as_str().unwrap().ends_with(module))
            .unwrap_or_else(|| panic!("{name} in {module}: {}", r.stdout))
    };
    for (name, (calls, _)) in &c.total {
        assert_eq!(
            func("[syscall]", name)["calls"].as_u64(),
            Some(*calls),
            "{name}"
        );
    }
    for f in ["copy_file", "fail_opens", "nap", "tidy"] {
        let row = func("syscalls-O2", f);
        let (kernel, total) = (
            row["kernel_ns"].as_u64().unwrap(),
            row["total_ns"].as_u64().unwrap(),
        );
        assert!(kernel > 0 && kernel <= total, "{f}: {row}");
    }
    // nap's time is nearly all its clock_nanosleep's.
    assert!(
        func("syscalls-O2", "nap")["kernel_ns"].as_u64().unwrap()
            >= func("[syscall]", "clock_nanosleep")["total_ns"]
                .as_u64()
                .unwrap()
    );
    let text_report = fctrace(&["report", "-k", "-d", rec.dir.path.to_str().unwrap()]);
    assert!(
        text_report
            .stdout
            .starts_with("% time     seconds  usecs/call     calls    errors syscall\n"),
        "{}",
        text_report.describe()
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Shown as strace prints them.
#[test]
fn system_call_lines_read_as_strace_prints_them() {
    let (work, src, dst, rec) = record_syscalls(&["-k"]);
    let text = replay_text(&rec.dir.path);
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| split_replay_line(l).ok().map(|l| l.text))
        .collect();
    let ctx = clip(&text, 20_000);
    let has = |pred: &dyn Fn(&str) -> bool| lines.iter().any(|l| pred(l));
    // Paths as the kernel copied them at the call (a BPF program).
    for n in 0..FAILS {
        let want = format!(
            "openat(AT_FDCWD, \"/nonexistent/{n}\", O_RDONLY) = -1 ENOENT (No such file or directory)"
        );
        assert!(has(&|l| l == want), "{want}\n{ctx}");
    }
    let (src_s, dst_s) = (src.to_str().unwrap(), dst.to_str().unwrap());
    for want in [
        format!("openat(AT_FDCWD, \"{src_s}\", O_RDONLY) = 3"),
        format!("openat(AT_FDCWD, \"{dst_s}\", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 4"),
        format!("unlink(\"{dst_s}\") = 0"),
    ] {
        assert!(has(&|l| l == want), "{want}\n{ctx}");
    }
    let stat = format!("newfstatat(AT_FDCWD, \"{src_s}\", 0x");
    assert!(
        has(&|l| l.starts_with(&stat) && l.ends_with(", 0) = 0")),
        "{ctx}"
    );
    assert!(
        has(&|l| l.starts_with("read(3, 0x") && l.ends_with(", 4096) = 4096")),
        "{ctx}"
    );
    assert!(
        has(&|l| l.starts_with(
            "mmap(NULL, 65536, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x"
        )),
        "{ctx}"
    );
    assert!(has(&|l| l == "umask(022) = 022"), "{ctx}");
    assert!(has(&|l| l == "exit_group(0) = ?"), "{ctx}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Without the right to the kernel's tracepoints (an ordinary user, with
/// kernel.perf_event_paranoid above -1), fctrace says what is missing and
/// how to allow it, and records the functions anyway.
#[test]
fn refused_tracepoints_are_explained_and_functions_recorded() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    let root = running_as_root();
    if !root || paranoid < 0 {
        eprintln!("skipped: needs root (to run fctrace as nobody) and perf_event_paranoid >= 0");
        return;
    }
    let exe = c_program("syscalls.c", "-O2", &["-O2", "-pthread"]);
    let (work, src, dst) = files();
    std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&src, Some(65534), Some(65534)).unwrap();
    let trace = work.join("trace");
    // fctrace and the program where nobody reaches them (the build
    // directory may be out of its reach: a clone in /root, mode 700).
    let (fctrace_copy, exe_copy) = (work.join("fctrace"), work.join("syscalls"));
    std::fs::copy(fctrace_bin(), &fctrace_copy).unwrap();
    std::fs::copy(&exe, &exe_copy).unwrap();
    let r = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&fctrace_copy)
        .args(["record", "-k", "-d"])
        .arg(&trace)
        .arg(&exe_copy)
        .arg(&src)
        .arg(&dst));
    assert_no_panic(&r);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!(
            "kernel.perf_event_paranoid is {paranoid}; tracepoints need it at -1"
        )) && r.stderr.contains("CAP_PERFMON")
            && r.stderr.contains("recording the functions only"),
        "{}",
        r.describe()
    );
    let text = replay_text(&trace);
    assert!(text.contains("copy_file() {"), "{text}");
    assert!(!text.contains("openat("), "{text}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Whether the tests run as root (effective user id 0).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// A machine that boots without tracefs (this one): fctrace, as root,
/// mounts it as perf does and says so. Run in a mount namespace of its
/// own where every tracefs (and debugfs, which mounts one on access) is
/// unmounted, so the other tests keep theirs.
#[test]
fn tracefs_is_mounted_when_it_is_not() {
    let root = running_as_root();
    assert!(
        root,
        "this test needs root (to mount tracefs in a mount namespace of its own)"
    );
    let exe = c_program("syscalls.c", "-O2", &["-O2", "-pthread"]);
    let (work, src, dst) = files();
    let trace = work.join("trace");
    let script = "for m in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug; do \
                    while umount \"$m\" 2>/dev/null; do :; done; done; \
                  if [ -e /sys/kernel/tracing/events ]; then echo still mounted; exit 99; fi; \
                  exec \"$@\"";
    let r = run(Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(fctrace_bin())
        .args(["record", "-k", "-d"])
        .arg(&trace)
        .arg(&exe)
        .arg(&src)
        .arg(&dst));
    assert_no_panic(&r);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stderr
            .contains("fctrace: mounted tracefs at /sys/kernel/tracing (it was not mounted)"),
        "{}",
        r.describe()
    );
    let text = replay_text(&trace);
    let c = counts(&text, &["copy_file"]);
    let opens = c
        .by_func
        .get(&("copy_file".to_string(), "openat".to_string()))
        .copied();
    assert_eq!(
        opens,
        Some((2, 0)),
        "copy_file opens its two files\n{}",
        clip(&text, 20_000)
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Time off the CPU inside a call, and page faults counted where they
/// happen: main blocks in read(2) on a pipe until a thread writes into it
/// 30 ms later, then touches 64 fresh pages.
#[test]
fn blocked_time_and_page_faults_are_shown() {
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &["-k"]);
    assert_same_behaviour(&native, &rec.run, "kernel_block -k");
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    let lines: Vec<ReplayLine> = text
        .lines()
        .filter_map(|l| split_replay_line(l).ok())
        .collect();
    let body = |f: &str| -> Vec<&ReplayLine> {
        let start = lines
            .iter()
            .position(|l| l.text == format!("{f}() {{"))
            .unwrap_or_else(|| panic!("{f}\n{ctx}"));
        let (tid, depth) = (lines[start].tid, lines[start].depth);
        lines[start + 1..]
            .iter()
            .filter(|l| l.tid == tid)
            .take_while(|l| l.depth > depth)
            .collect()
    };
    // The read, its duration and the time off the CPU in it.
    let waiting = body("wait_for_data");
    let reads: Vec<&&ReplayLine> = waiting
        .iter()
        .filter(|l| l.text.starts_with("read(3, 0x"))
        .collect();
    assert_eq!(reads.len(), 1, "{ctx}");
    let (call, off) = reads[0].text.split_once(" /* off-CPU ").expect(&ctx);
    assert!(call.ends_with(", 16) = 5"), "{ctx}");
    let ms = |t: &str| -> f64 {
        let (v, unit) = t.trim().split_once(' ').unwrap();
        let v: f64 = v.parse().unwrap();
        match unit.trim_end_matches(" */").trim() {
            "us" => v / 1000.0,
            "ms" => v,
            "s" => v * 1000.0,
            u => panic!("unit {u}"),
        }
    };
    let off_ms = ms(off.trim_end_matches(" */"));
    let dur_ms = ms(reads[0].duration);
    assert!(
        off_ms >= 15.0 && off_ms <= dur_ms + 0.001,
        "{off_ms} of {dur_ms}\n{ctx}"
    );
    // The 64 pages' faults between the mmap and the munmap.
    let touch = body("touch_pages");
    let from = touch.iter().position(|l| l.text == "mmap() {").expect(&ctx);
    let to = touch
        .iter()
        .position(|l| l.text == "munmap() {")
        .expect(&ctx);
    let faults: u64 = touch[from..to]
        .iter()
        .filter_map(|l| {
            l.text
                .strip_prefix("/* ")?
                .strip_suffix(" page faults */")
                .or_else(|| l.text.strip_prefix("/* ")?.strip_suffix(" page fault */"))?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(faults, 64, "{ctx}");
}

/// The kernel's tick, from its configuration (`CONFIG_HZ` in
/// /proc/config.gz or /boot/config-RELEASE); 100, the lowest Linux
/// offers, where neither is there.
fn kernel_hz() -> u64 {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let boot = std::fs::read_to_string(format!("/boot/config-{}", release.trim()));
    let text = boot.ok().or_else(|| {
        let out = Command::new("zcat").arg("/proc/config.gz").output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    });
    text.as_deref()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.parse().ok())
        .unwrap_or(100)
}

/// `-K`: the interrupts that ran while a system call was on the CPU are
/// counted on its line, with their time (`/* 7 interrupts 1.2 ms */`),
/// not mixed into it unsaid. kernel_irq.c's reads of /dev/zero, tens of
/// milliseconds of the kernel clearing memory each: the timer interrupts
/// each at least once per tick of the time it ran (the kernel's HZ, from
/// its configuration; NO_HZ_FULL is off), and their time is less than the
/// call's. With -k alone, no such count.
#[test]
fn interrupts_inside_system_calls_are_marked() {
    let exe = c_program("kernel_irq.c", "-O2", &["-O2"]);
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &["-K", "2"]);
    // (Its stderr may hold -K's note where the kernel has no function
    // tracer, as here: the system calls and interrupts are recorded.)
    assert_eq!(
        (&native.stdout, native.code()),
        (&rec.run.stdout, rec.run.code()),
        "{}",
        rec.run.describe()
    );
    assert!(
        !rec.run
            .stderr
            .contains("interrupts inside system calls are not marked"),
        "{}",
        rec.run.describe()
    );
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    let tick_ms = 1000.0 / kernel_hz() as f64;
    let ms = |t: &str| -> f64 {
        let (v, unit) = t.trim().split_once(' ').unwrap();
        let v: f64 = v.parse().unwrap();
        match unit.trim() {
            "ns" => v / 1e6,
            "us" => v / 1000.0,
            "ms" => v,
            "s" => v * 1000.0,
            u => panic!("unit {u}"),
        }
    };
    let reads: Vec<ReplayLine> = text
        .lines()
        .filter_map(|l| split_replay_line(l).ok())
        .filter(|l| l.text.starts_with("read(3, 0x") && l.text.contains(", 134217728) = 134217728"))
        .collect();
    assert_eq!(reads.len(), 4, "{ctx}");
    for r in &reads {
        let dur = ms(r.duration);
        let note = |what: &str| -> Option<&str> {
            let (_, rest) = r.text.split_once(what)?;
            rest.split(" */").next()
        };
        let off = note(" /* off-CPU ").map_or(0.0, ms);
        let (n, irq_ms) = note(" interrupt")
            .map(|rest| {
                let count = r.text.split(" interrupt").next().unwrap();
                let count: u64 = count.rsplit("/* ").next().unwrap().parse().unwrap();
                let time = rest.trim_start_matches('s').trim();
                (count, ms(time))
            })
            .unwrap_or((0, 0.0));
        let on_cpu = dur - off;
        let ticks = (on_cpu / tick_ms).floor() as u64;
        assert!(
            n + 1 >= ticks && n > 0,
            "{n} interrupts in {on_cpu} ms on the CPU (tick {tick_ms} ms): {}\n{ctx}",
            r.text
        );
        assert!(irq_ms < dur, "{}\n{ctx}", r.text);
    }
    let plain = record(&exe, &[], &["-k"]);
    assert_same_behaviour(&native, &plain.run, "kernel_irq -k");
    let text = replay_text(&plain.dir.path);
    assert!(!text.contains(" interrupt"), "{text}");
}

/// The kernel_signals.c constants.
const RAISES: u64 = 3;
const KILLS: u64 = 2;
const CHILDREN: u64 = 2;
const ALARMS: u64 = 2;

/// `--- SIGNAME {si_signo=SIGNAME, si_code=CODE...} ---` lines: per
/// (innermost function among `funcs`, signal, si_code), and per signal
/// over the whole trace.
type SignalCounts = (
    BTreeMap<(String, String, String), u64>,
    BTreeMap<String, u64>,
);

fn signal_lines(text: &str, funcs: &[&str]) -> SignalCounts {
    let mut by_func: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    let mut stacks: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let l = split_replay_line(line).unwrap();
        let stack = stacks.entry(l.tid).or_default();
        stack.truncate(l.depth);
        let t = l.text;
        if let Some(name) = t.strip_suffix(" {").and_then(|t| t.split('(').next()) {
            stack.push(name.to_string());
            continue;
        }
        let Some(rest) = t.strip_prefix("--- ") else {
            continue;
        };
        let sig = rest.split(' ').next().unwrap().to_string();
        let code = rest
            .split("si_code=")
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .unwrap_or("")
            .to_string();
        *total.entry(sig.clone()).or_default() += 1;
        if let Some(f) = stack.iter().rev().find(|f| funcs.contains(&f.as_str())) {
            *by_func.entry((f.clone(), sig, code)).or_default() += 1;
        }
    }
    (by_func, total)
}

/// `strace -f -qq -e trace=none` of a native run: its `--- SIG...` lines
/// per signal.
fn strace_signals(exe: &Path, args: &[&str]) -> BTreeMap<String, u64> {
    let out = std::env::temp_dir().join(format!("fctrace-strace-{}", unique_suffix()));
    let r = run(Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=none", "-o"])
        .arg(&out)
        .arg(exe)
        .args(args));
    // (strace ends as the program did: by its signal, too.)
    let straced = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("strace wrote nothing ({e})\n{}", r.describe()));
    let _ = std::fs::remove_file(&out);
    let mut by_strace: BTreeMap<String, u64> = BTreeMap::new();
    for l in straced.lines() {
        if let Some(rest) = l.split_once("--- ").map(|(_, r)| r) {
            let sig = rest.split(' ').next().unwrap().to_string();
            *by_strace.entry(sig).or_default() += 1;
        }
    }
    by_strace
}

/// Signals from the kernel's side (`signal:signal_deliver`), shown where
/// they arrive as strace prints them, under the function running then:
/// kernel_signals.c raises, kills and pthread_kills SIGUSR1, reaps
/// children (SIGCHLD) and waits for timers (SIGALRM), all handled. The
/// counts are the program's, and per signal the same as strace's `---`
/// lines for a native run (nothing of the agent's mixed in).
#[test]
fn signals_are_shown_where_the_kernel_delivers_them() {
    let exe = c_program("kernel_signals.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    let want_out = format!(
        "usr1 {} chld {CHILDREN} alrm {ALARMS}\n",
        RAISES + KILLS + 1
    );
    assert_eq!(native.stdout, want_out, "{}", native.describe());
    let rec = record(&exe, &[], &["-k"]);
    assert_same_behaviour(&native, &rec.run, "kernel_signals -k");
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    let funcs = [
        "raise_usr1",
        "kill_usr1",
        "poke_usr1",
        "reap_child",
        "wait_alarm",
    ];
    let (by_func, total) = signal_lines(&text, &funcs);
    let key = |f: &str, s: &str, c: &str| (f.to_string(), s.to_string(), c.to_string());
    let expected: BTreeMap<(String, String, String), u64> = [
        (key("raise_usr1", "SIGUSR1", "SI_TKILL"), RAISES),
        (key("kill_usr1", "SIGUSR1", "SI_USER"), KILLS),
        (key("poke_usr1", "SIGUSR1", "SI_TKILL"), 1),
        (key("reap_child", "SIGCHLD", "CLD_EXITED"), CHILDREN),
        (key("wait_alarm", "SIGALRM", "SI_KERNEL"), ALARMS),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_func, expected, "{ctx}");
    // The whole run: every signal line is one of those, in the main task.
    let all: u64 = total.values().sum();
    assert_eq!(all, RAISES + KILLS + 1 + CHILDREN + ALARMS, "{ctx}");
    // Handled: no default action noted. (The agent's mark of the
    // handler, `/* signal SIGCHLD */`, is missing when the signal lands
    // inside its fork interposer, the child having exited before fork
    // returned: the kernel's side shows it all the same.)
    for l in text.lines().filter_map(|l| split_replay_line(l).ok()) {
        if l.text.starts_with("--- ") {
            assert!(l.text.ends_with("} ---"), "{}\n{ctx}", l.text);
        }
    }
    // strace's count of each signal, for a native run.
    let by_strace = strace_signals(&exe, &[]);
    assert_eq!(total, by_strace, "fctrace -k against strace\n{ctx}");
}

/// Crash signals left at their default action: the agent's marker catches
/// them first (a delivery of its own), then lets them take effect (the
/// delivery a run without fctrace has): one line each, as strace shows.
#[test]
fn crash_signals_are_shown_once() {
    let exe = c_program("kernel_signals.c", "-O2", &["-O2", "-pthread"]);
    for (arg, func, sig, code) in [
        ("abort", "crash_abort", "SIGABRT", "SI_TKILL"),
        ("segv", "crash_segv", "SIGSEGV", "SEGV_MAPERR"),
    ] {
        let native = run(Command::new(&exe).arg(arg));
        let rec = record_any(&exe, &[arg], &["-k"]);
        assert_same_behaviour(&native, &rec.run, arg);
        let text = replay_text(&rec.dir.path);
        let (by_func, total) = signal_lines(&text, &[func]);
        let want: BTreeMap<(String, String, String), u64> =
            [((func.to_string(), sig.to_string(), code.to_string()), 1)]
                .into_iter()
                .collect();
        assert_eq!(by_func, want, "{text}");
        assert_eq!(total, strace_signals(&exe, &[arg]), "{text}");
        assert!(
            text.contains(&format!(
                "--- {sig} {{si_signo={sig}, si_code={code}}} --- /* default action: core */"
            )),
            "{text}"
        );
    }
}

/// `-K DEPTH` (kernel functions): fctrace says what this kernel lacks
/// (here the function_graph tracer, and kprobes that could stand in for
/// it) and records the system calls anyway.
#[test]
fn kernel_functions_say_what_is_missing() {
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &["-K", "2"]);
    assert!(
        rec.run
            .stderr
            .contains("fctrace: -K: kernel functions are not recorded"),
        "{}",
        rec.run.describe()
    );
    let tracers =
        std::fs::read_to_string("/sys/kernel/tracing/available_tracers").unwrap_or_default();
    if !tracers.split_whitespace().any(|t| t == "function_graph") {
        assert!(
            rec.run.stderr.contains("no function_graph tracer"),
            "{}",
            rec.run.describe()
        );
        // What could stand in for it is named too (this machine has no
        // kprobe events either).
        if !Path::new("/sys/kernel/tracing/kprobe_events").exists() {
            assert!(
                rec.run.stderr.contains(
                    "CONFIG_FUNCTION_GRAPH_TRACER), nor kprobes to use in its place \
                     (/sys/kernel/tracing/kprobe_events is missing: it needs \
                     CONFIG_KPROBE_EVENTS); system calls are recorded as with -k"
                ),
                "{}",
                rec.run.describe()
            );
        }
    }
    let text = replay_text(&rec.dir.path);
    assert!(text.contains("read(3, 0x"), "{text}");
}

/// `-K` where the tracefs instance refuses the tracer (here the
/// `function` tracer, which this kernel lists but refuses with EPERM,
/// asked for through FCTRACE_KERNEL_TRACER): the note says so, the
/// instance is gone afterwards, and the system calls and functions are
/// recorded as without -K.
#[test]
fn a_refused_tracer_is_said_and_the_rest_recorded() {
    let Some(root) = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .find(|r| Path::new(r).join("instances").is_dir())
    else {
        eprintln!("skipped: no tracefs instances here");
        return;
    };
    let tracers = std::fs::read_to_string(format!("{root}/available_tracers")).unwrap_or_default();
    if !tracers.split_whitespace().any(|t| t == "function") {
        eprintln!("skipped: no function tracer listed");
        return;
    }
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    let work = std::env::temp_dir().join(format!("fctrace-kgraph-{}", unique_suffix()));
    std::fs::create_dir_all(&work).unwrap();
    let trace = work.join("trace");
    let r = run(Command::new(fctrace_bin())
        .args(["record", "-K", "2", "-d"])
        .arg(&trace)
        .arg(&exe)
        .env("FCTRACE_KERNEL_TRACER", "function"));
    assert_no_panic(&r);
    // The program untouched (fctrace's notes are on its stderr).
    assert!(r.success(), "{}", r.describe());
    assert_eq!(native.stdout, r.stdout, "{}", r.describe());
    let accepted = !r.stderr.contains("-K: kernel functions are not recorded");
    if accepted {
        eprintln!("this kernel accepts the function tracer: nothing refused");
    } else {
        assert!(
            r.stderr.contains(
                "-K: kernel functions are not recorded: the kernel refuses the function tracer \
                 in fctrace's tracefs instance ("
            ) && r.stderr.contains("current_tracer: ")
                && r.stderr.contains("system calls are recorded as with -k"),
            "{}",
            r.describe()
        );
    }
    // No instance of this recording left.
    let left: Vec<String> = std::fs::read_dir(format!("{root}/instances"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("fctrace-"))
        .filter(|n| {
            let pid = n.trim_start_matches("fctrace-");
            !Path::new("/proc").join(pid).exists()
        })
        .collect();
    assert!(left.is_empty(), "instances left: {left:?}");
    let text = replay_text(&trace);
    assert!(text.contains("wait_for_data() {"), "{text}");
    assert!(text.contains("read(3, 0x"), "{text}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Display filters on system calls: `-F NAME@[syscall]` shows those system
/// calls only, `-N NAME@[syscall]` hides them (a pattern without
/// `@[syscall]` names functions only).
#[test]
fn system_calls_are_filtered_as_functions_of_syscall() {
    let (work, _, _, rec) = record_syscalls(&["-k"]);
    let dir = rec.dir.path.to_str().unwrap();
    let all = replay_text(&rec.dir.path);
    let openats = |text: &str| {
        text.lines()
            .filter_map(|l| split_replay_line(l).ok())
            .filter(|l| l.text.starts_with("openat("))
            .count()
    };
    let n = openats(&all);
    assert!(n >= FAILS as usize + 3, "{all}");
    // Only the openat calls, each at depth 0.
    let only = fctrace(&["replay", "-d", dir, "-F", "openat@[syscall]"]);
    assert!(only.success(), "{}", only.describe());
    let lines: Vec<ReplayLine> = only
        .stdout
        .lines()
        .filter_map(|l| split_replay_line(l).ok())
        .collect();
    assert_eq!(lines.len(), n, "{}", only.stdout);
    assert!(
        lines
            .iter()
            .all(|l| l.depth == 0 && l.text.starts_with("openat(")),
        "{}",
        only.stdout
    );
    // Hidden: none left, the functions still there.
    let none = fctrace(&["replay", "-d", dir, "-N", "openat@[syscall]"]);
    assert_eq!(openats(&none.stdout), 0, "{}", none.stdout);
    assert!(none.stdout.contains("fail_opens() {"), "{}", none.stdout);
    // `-N openat` (no module) hides functions named openat, not the
    // system calls.
    let plain = fctrace(&["replay", "-d", dir, "-N", "main"]);
    assert!(openats(&plain.stdout) > 0);
    let _ = std::fs::remove_dir_all(&work);
}

/// With calls chosen at record time (`record -F copy_file -k`), the
/// system calls shown are those made inside the recorded calls.
#[test]
fn record_time_filters_keep_the_system_calls_of_the_calls_recorded() {
    let (work, _, _, rec) = record_syscalls(&["-k", "-F", "copy_file"]);
    let text = replay_text(&rec.dir.path);
    let c = counts(&text, &["copy_file"]);
    let reads = SIZE.div_ceil(4096) as u64 + 1;
    let writes = SIZE.div_ceil(4096) as u64;
    let all: u64 = c.total.values().map(|n| n.0).sum();
    assert_eq!(all, 2 + reads + writes + 2, "{text}");
    let inside: u64 = c.by_func.values().map(|n| n.0).sum();
    assert_eq!(inside, all, "{text}");
    let _ = std::fs::remove_dir_all(&work);
}

/// `report -k --format json` of a trace: calls and errors per system call.
fn reported_counts(dir: &Path) -> BTreeMap<String, (u64, u64)> {
    let r = fctrace(&[
        "report",
        "-k",
        "--format",
        "json",
        "-d",
        dir.to_str().unwrap(),
    ]);
    assert!(r.success(), "{}", r.describe());
    report_json_counts(&r.stdout)
}

/// `report -k --format json`'s text: calls and errors per system call.
pub(crate) fn report_json_counts(text: &str) -> BTreeMap<String, (u64, u64)> {
    let json: serde_json::Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("report -k's JSON: {e}\n{}", clip(text, 4000)));
    json["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                (s["calls"].as_u64().unwrap(), s["errors"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// `report -k` against `strace -f -c` of a native run (`strace`), system
/// call by system call, calls and errors:
/// equal, but for what strace counts otherwise: the first `execve` is
/// fctrace's starting of the program (recorded from its return on), and
/// `exit`/`exit_group` never return (strace counts a call at its return);
/// and `unequal`'s (futex with lock contention, which differs from run
/// to run natively).
pub(crate) fn assert_counts_as_strace(
    reported: &BTreeMap<String, (u64, u64)>,
    strace: &BTreeMap<String, (u64, u64)>,
    unequal: &[&str],
    ctx: &str,
) {
    for name in reported.keys().chain(strace.keys()) {
        let (ours, theirs) = (reported.get(name), strace.get(name));
        match name.as_str() {
            "execve" => {
                let (o, t) = (ours.map_or(0, |n| n.0), theirs.map_or(0, |n| n.0));
                assert_eq!(
                    o + 1,
                    t,
                    "execve: fctrace {reported:?}\nstrace {strace:?}\n{ctx}"
                );
            }
            "exit" | "exit_group" => assert_eq!(theirs, None, "{name}"),
            n if unequal.contains(&n) => {}
            _ => assert_eq!(
                ours, theirs,
                "{name}: fctrace -k {reported:?}\nstrace -f -c {strace:?}\n{ctx}"
            ),
        }
    }
}

/// The agent's own system calls are not the program's: a threaded program
/// with a signal handler (the slow path blocks signals around each of
/// the many buffer switches), a forked child and an exec: `report -k`
/// counts what `strace -f -c` counts of a native run.
#[test]
fn the_agents_system_calls_are_left_out() {
    let exe = c_program("agent_quiet.c", "-O2", &["-O2", "-pthread"]);
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &["-k"]);
    assert_same_behaviour(&native, &rec.run, "agent_quiet -k");
    let reported = reported_counts(&rec.dir.path);
    let strace = strace_counts(&exe, &[]);
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    assert_counts_as_strace(&reported, &strace, &[], &ctx);
    // The dynamic loader's loading of the agent (a memfd of fctrace's,
    // through /proc) and of libgcc_s, which only the agent needs, in the
    // program and in the image it executes, is not in the tree either.
    for bad in ["/fd/", "libgcc_s"] {
        assert!(!text.contains(bad), "{bad}\n{ctx}");
    }
    assert!(text.contains("libc.so.6"), "{ctx}");
}

/// An int3 of the trap fallback is the agent's: no SIGTRAP delivery and
/// no rt_sigreturn of it in the tree, and the counts are the program's.
#[test]
fn the_trap_fallbacks_signals_are_left_out() {
    let exe = c_program(
        "agent_quiet.c",
        "-O2-falign1",
        &["-O2", "-falign-functions=1", "-pthread"],
    );
    let native = run_native(&exe, &["trap"]);
    let rec = record(&exe, &["trap"], &["-k"]);
    assert_same_behaviour(&native, &rec.run, "agent_quiet trap -k");
    // tail2 really takes the trap.
    let info = info_text(&rec.dir.path);
    let traps = info
        .split("Traced through the trap fallback")
        .nth(1)
        .unwrap_or_else(|| panic!("no trap fallback\n{info}"));
    assert!(traps.contains("tail2 ("), "{info}");
    let text = replay_text(&rec.dir.path);
    let ctx = format!("trace {}\n{}", rec.dir.path.display(), clip(&text, 20_000));
    for bad in ["rt_sigreturn", "SIGTRAP"] {
        assert!(!text.contains(bad), "{bad}\n{ctx}");
    }
    // Its calls are all there.
    let tail2 = text.lines().filter(|l| l.ends_with("tail2() {")).count();
    assert_eq!(tail2, 3000, "{ctx}");
    let reported = reported_counts(&rec.dir.path);
    let strace = strace_counts(&exe, &["trap"]);
    assert_counts_as_strace(&reported, &strace, &[], &ctx);
}

/// A threaded Python script: `report -k` counts what `strace -f -c`
/// counts of a native run (but futex: the interpreter lock's contention
/// differs from run to run), but for the C library's allocator setting
/// itself up (a getrandom and two brk, at its first call): in python3 the
/// agent's set-up makes that first call, inside its span.
#[test]
fn a_threaded_python_scripts_system_calls_are_its_own() {
    let python = Path::new("/usr/bin/python3");
    assert!(
        python.exists(),
        "/usr/bin/python3 is missing: apt-get install python3"
    );
    let script = program_source("ctypes_threads.py");
    let script = script.to_str().unwrap();
    let native = run_native(python, &[script]);
    // Python's functions left out (FCTRACE_NO_PYTHON): recording them has
    // the interpreter take its profiling path, which allocates (brk) and
    // contends (futex) as under cProfile, not as natively.
    let rec = record_env_with(python, &[script], &["-k"], &[("FCTRACE_NO_PYTHON", "1")]);
    // (fctrace says on stderr what it cannot see in the stripped python.)
    assert_eq!(native.stdout, rec.run.stdout);
    assert!(rec.run.success(), "{}", rec.run.describe());
    let reported = reported_counts(&rec.dir.path);
    let mut strace = strace_counts(python, &[script]);
    for (name, n) in [("getrandom", 1), ("brk", 2)] {
        strace.get_mut(name).unwrap_or_else(|| panic!("{name}")).0 -= n;
    }
    let ctx = format!("trace {}", rec.dir.path.display());
    assert_counts_as_strace(&reported, &strace, &["futex"], &ctx);
}

/// `-F FUNC@kernel` and `-N FUNC@kernel` filter kernel functions, which
/// only `-K` records: without it they are refused, saying so, before the
/// program runs.
#[test]
fn kernel_function_filters_need_kernel_depth() {
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let work = std::env::temp_dir().join(format!("fctrace-kfilter-{}", unique_suffix()));
    for (flag, pattern) in [("-F", "vfs_read@kernel"), ("-N", "vfs_.*@kernel")] {
        let r = fctrace(&[
            "record",
            "-d",
            work.join(flag).to_str().unwrap(),
            flag,
            pattern,
            exe.to_str().unwrap(),
        ]);
        assert_eq!(r.status.code(), Some(1), "{}", r.describe());
        assert_eq!(
            r.stderr,
            format!(
                "fctrace: {pattern}: a filter of kernel functions needs -K DEPTH (they are \
                 recorded with -K only)\n"
            ),
            "{}",
            r.describe()
        );
        assert_eq!(r.stdout, "", "{}", r.describe());
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// `record -p PID` of a kernel thread (kthreadd, pid 2): no user side to
/// trace, said; with -K the kernel functions are what is recorded, and
/// here the missing tracer is said (both exit 1, no trace written).
/// At record time `NAME@[syscall]` chooses kernel functions and needs -K.
#[test]
fn kernel_threads_and_system_call_filters_need_kernel_depth() {
    let comm = std::fs::read_to_string("/proc/2/comm").unwrap();
    assert_eq!(comm, "kthreadd\n");
    let work = std::env::temp_dir().join(format!("fctrace-kthread-{}", unique_suffix()));
    let dir = work.join("t");
    let d = dir.to_str().unwrap();
    let r = fctrace(&["record", "-d", d, "-p", "2"]);
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert_eq!(
        r.stderr,
        "fctrace: process 2 (kthreadd) is a kernel thread: it has no user side to trace (no \
         program, no ptrace); record its kernel functions with -K DEPTH\n",
        "{}",
        r.describe()
    );
    assert!(!dir.exists());
    let tracers =
        std::fs::read_to_string("/sys/kernel/tracing/available_tracers").unwrap_or_default();
    if !tracers.split_whitespace().any(|t| t == "function_graph") {
        let r = fctrace(&["record", "-d", d, "-K", "2", "-p", "2"]);
        assert_eq!(r.status.code(), Some(1), "{}", r.describe());
        assert!(
            r.stderr.starts_with(
                "fctrace: -K: kernel thread 2 (kthreadd): this kernel has no function_graph \
                 tracer ("
            ) && r.stderr.lines().count() == 1,
            "{}",
            r.describe()
        );
        assert!(!dir.exists());
    }
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let r = fctrace(&[
        "record",
        "-d",
        d,
        "-F",
        "read@[syscall]",
        exe.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert_eq!(
        r.stderr,
        "fctrace: read@[syscall]: at record time, a system call filter chooses the kernel \
         functions recorded (those it runs) and needs -K DEPTH; to show only these system \
         calls, give it to replay or report\n",
        "{}",
        r.describe()
    );
    assert_eq!(r.stdout, "", "{}", r.describe());
    let _ = std::fs::remove_dir_all(&work);
}

/// `report -F/-N FUNC@kernel`: report lists no kernel functions, so the
/// patterns change nothing (before, they hid every function).
#[test]
fn report_leaves_kernel_function_filters_aside() {
    let exe = c_program("kernel_block.c", "-O2", &["-O2", "-pthread"]);
    let rec = record(&exe, &[], &["-k"]);
    assert_eq!(rec.run.status.code(), Some(0), "{}", rec.run.describe());
    let dir = rec.dir.path.to_str().unwrap();
    let plain = fctrace(&["report", "-d", dir]);
    assert_eq!(plain.status.code(), Some(0), "{}", plain.describe());
    assert!(plain.stdout.contains("read@[syscall]"), "{}", plain.stdout);
    for (flag, pattern) in [("-F", "vfs_read@kernel"), ("-N", "vfs_.*@kernel")] {
        let r = fctrace(&["report", "-d", dir, flag, pattern]);
        assert_eq!(r.status.code(), Some(0), "{}", r.describe());
        assert_eq!(r.stdout, plain.stdout, "{flag} {pattern}");
        assert_eq!(r.stderr, plain.stderr, "{flag} {pattern}");
    }
}
