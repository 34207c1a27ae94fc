//! Debian's stripped programs (`/usr/bin/gzip`, `/usr/bin/git`,
//! `/usr/bin/python3.11`: no `.symtab`, no debug file installed): at least
//! 99% of the functions their FDEs describe are instrumented (the FDEs
//! fctrace leaves out as no function, split parts and PLT stubs, said
//! with their reason, aside), the programs behave as natively, and the
//! entry counts of 50 unnamed functions picked at random (a fixed seed)
//! equal the kernel's uprobes' counts (`perf probe` at the function's file
//! offset, `perf stat`), which count every execution of a function's
//! first instruction, tail-call jumps included, as fctrace's entries do.
//! Needs root (uprobes) and perf.

use fctrace_format::symtab::{FuncStatus, SymTab};
use fctrace_testkit::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A program and the command run (in `cwd`, with `env`).
struct Case {
    exe: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
}

/// The FDE starts of `elf` (readelf).
fn fde_starts(elf: &Path) -> BTreeSet<u64> {
    let r = tool(
        "readelf",
        &[OsStr::new("--debug-dump=frames"), elf.as_os_str()],
    );
    r.stdout
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| l.split("pc=").nth(1))
        .filter_map(|r| u64::from_str_radix(r.split("..").next()?, 16).ok())
        .collect()
}

/// The loadable segments of `elf`: (p_vaddr, p_offset, p_filesz).
fn loads(elf: &Path) -> Vec<(u64, u64, u64)> {
    let r = tool("readelf", &[OsStr::new("-lW"), elf.as_os_str()]);
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    r.stdout
        .lines()
        .map(str::split_whitespace)
        .map(Iterator::collect::<Vec<_>>)
        .filter(|f| f.first() == Some(&"LOAD"))
        .map(|f| (hex(f[2]), hex(f[1]), hex(f[4])))
        .collect()
}

/// The file offset of address `addr` of `elf` (what `perf probe -x`
/// takes: for a position-dependent program it is not the address).
fn file_offset(segs: &[(u64, u64, u64)], addr: u64) -> u64 {
    let &(va, off, _) = segs
        .iter()
        .find(|&&(va, _, n)| addr >= va && addr < va + n)
        .unwrap_or_else(|| panic!("{addr:#x} in no loaded segment"));
    addr - va + off
}

/// A tiny deterministic generator (xorshift), for the seeded choice.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Uprobes made by one test, deleted on drop.
struct Probes {
    groups: BTreeSet<String>,
}

impl Drop for Probes {
    fn drop(&mut self) {
        for g in &self.groups {
            let _ = run(Command::new("perf").args(["probe", "-q", "-d", &format!("{g}:fct_*")]));
        }
    }
}

/// Adds a uprobe at file offset `off` of `exe`; returns its event name.
fn add_probe(probes: &mut Probes, exe: &Path, off: u64) -> String {
    let name = format!("fct_{off:x}");
    let spec = format!("{name}={off:#x}");
    let r = run(Command::new("perf")
        .arg("probe")
        .arg("-x")
        .arg(exe)
        .arg("-a")
        .arg(&spec));
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(r.success(), "perf probe failed\n{}", r.describe());
    let event = text
        .split_whitespace()
        .find(|w| w.ends_with(&format!(":{name}")))
        .unwrap_or_else(|| panic!("no event in perf probe's output: {text}"))
        .to_string();
    probes
        .groups
        .insert(event.split(':').next().unwrap().to_string());
    event
}

/// Counts of `events` over one run of the case (perf stat).
fn uprobe_counts(case: &Case, cwd: &Path, events: &[String]) -> BTreeMap<String, u64> {
    let mut cmd = Command::new("perf");
    cmd.args(["stat", "-x,", "--no-big-num"]);
    for e in events {
        cmd.arg("-e").arg(e);
    }
    cmd.arg("--")
        .arg(&case.exe)
        .args(&case.args)
        .current_dir(cwd);
    for (k, v) in &case.env {
        cmd.env(k, v);
    }
    let r = run(&mut cmd);
    assert!(r.success(), "perf stat failed\n{}", r.describe());
    let mut out = BTreeMap::new();
    for line in r.stderr.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() > 2 && events.iter().any(|e| e == f[2]) {
            let n = f[0]
                .parse()
                .unwrap_or_else(|_| panic!("perf stat line {line}"));
            out.insert(f[2].to_string(), n);
        }
    }
    out
}

/// The case's trace, checked: same behaviour as natively, at least 99%
/// of the FDE functions instrumented. Returns the unnamed functions
/// instrumented, by address, with their entry counts.
fn check_case(case: &Case, cwd: &Path) -> BTreeMap<u64, u64> {
    let exe = &case.exe;
    let ctx = exe.display().to_string();
    let mut native_cmd = Command::new(exe);
    native_cmd.args(&case.args).current_dir(cwd);
    for (k, v) in &case.env {
        native_cmd.env(k, v);
    }
    let native = run(&mut native_cmd);
    let dir = TraceDir::new(&exe.file_name().unwrap().to_string_lossy());
    let mut cmd = Command::new(fctrace_bin());
    cmd.arg("record")
        .arg("-d")
        .arg(&dir.path)
        .arg(exe)
        .args(&case.args)
        .current_dir(cwd);
    for (k, v) in &case.env {
        cmd.env(k, v);
    }
    let traced = run(&mut cmd);
    let file = exe.file_name().unwrap().to_string_lossy().into_owned();
    // fctrace's notice that the program is stripped is not its output.
    let notice = format!("fctrace: {}: stripped (no .symtab)", exe.display());
    assert_same_behaviour_with(&native, &traced, &ctx, |s| {
        s.lines()
            .filter(|l| !l.starts_with(&notice))
            .map(|l| format!("{l}\n"))
            .collect()
    });

    let text = fs::read_to_string(dir.path.join("sessions/0.sym")).unwrap();
    let table = SymTab::parse(&text).unwrap();
    let module = table
        .modules
        .iter()
        .find(|m| canonical(Path::new(&m.path)) == canonical(exe))
        .expect("the program's module")
        .index;
    // The module's build-id and debug link, as readelf reads them.
    let notes = tool("readelf", &[OsStr::new("-n"), exe.as_os_str()]).stdout;
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id");
    let link = tool(
        "readelf",
        &[OsStr::new("--string-dump=.gnu_debuglink"), exe.as_os_str()],
    )
    .stdout;
    let m = table.module(module).unwrap();
    assert_eq!(m.build_id, build_id, "{ctx}");
    assert!(
        !m.debuglink.is_empty() && link.contains(&m.debuglink),
        "{ctx}: debug link {:?}, readelf: {link}",
        m.debuglink
    );
    let fdes = fde_starts(exe);
    let (mut instrumented, mut not_functions, mut refused) = (0usize, 0usize, Vec::new());
    let mut unnamed = BTreeSet::new();
    for f in table.functions.iter().filter(|f| f.module == module) {
        if !fdes.contains(&f.addr) {
            continue;
        }
        match &f.status {
            FuncStatus::NotTraced(why) if is_no_function(why) => not_functions += 1,
            FuncStatus::NotTraced(why) => refused.push(format!("{}: {why}", f.name)),
            _ => {
                instrumented += 1;
                if f.is_unnamed(m) {
                    unnamed.insert(f.addr);
                }
            }
        }
    }
    let functions = fdes.len() - not_functions;
    let share = instrumented as f64 / functions as f64;
    eprintln!(
        "{ctx}: {} FDEs, {not_functions} left out as no function, {instrumented} of {functions} \
         functions instrumented ({:.2}%), {} refused: {:?}",
        fdes.len(),
        share * 100.0,
        refused.len(),
        &refused[..refused.len().min(8)]
    );
    assert!(
        share >= 0.99,
        "{ctx}: only {instrumented} of {functions} FDE functions instrumented"
    );
    let rep = report(&dir.path);
    let counts: BTreeMap<String, u64> = rep
        .functions_of(exe)
        .iter()
        .map(|f| (f.symbol.clone(), f.calls))
        .collect();
    unnamed
        .into_iter()
        .map(|a| {
            let n = counts.get(&format!("{file}+{a:#x}")).copied().unwrap_or(0);
            (a, n)
        })
        .collect()
}

/// Whether a reason fctrace gives says the FDE is no function (rather
/// than a function it could not patch).
fn is_no_function(why: &str) -> bool {
    why.starts_with("split part")
        || why == "PLT stub"
        || why.starts_with("no return address")
        || why.starts_with("not a call's target")
        || why.starts_with("starts inside a named function")
        || why == "entered without a call"
}

#[test]
fn debian_stripped_programs() {
    let root = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(
        root,
        "this test needs root: it counts calls with uprobes (perf probe)"
    );
    let perf = run(Command::new("perf").arg("--version"));
    assert!(
        perf.success(),
        "perf is missing: apt-get install linux-perf\n{}",
        perf.describe()
    );
    for p in ["/usr/bin/gzip", "/usr/bin/git", "/usr/bin/python3.11"] {
        assert!(
            Path::new(p).exists(),
            "{p} is missing: apt-get install gzip git python3.11"
        );
    }
    let dir = scratch("debian_stripped");
    let input = dir.path.join("small.txt");
    fs::write(&input, "fctrace stripped test\n".repeat(40)).unwrap();
    let repo = dir.path.join("repo");
    fs::create_dir(&repo).unwrap();
    fs::write(repo.join("a.txt"), "a\n").unwrap();
    let git_init = run(Command::new("/usr/bin/git")
        .arg("init")
        .arg("-q")
        .current_dir(&repo));
    assert!(git_init.success(), "{}", git_init.describe());
    let git_env = vec![
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("HOME", "/nonexistent"),
        ("GIT_OPTIONAL_LOCKS", "0"),
    ];
    let cases = [
        (
            Case {
                exe: "/usr/bin/gzip".into(),
                args: vec!["-c".into(), input.to_string_lossy().into_owned()],
                env: vec![],
            },
            dir.path.clone(),
        ),
        (
            Case {
                exe: "/usr/bin/git".into(),
                args: vec!["status".into(), "--porcelain".into()],
                env: git_env.clone(),
            },
            repo.clone(),
        ),
        (
            Case {
                exe: "/usr/bin/git".into(),
                args: vec!["--version".into()],
                env: git_env.clone(),
            },
            repo.clone(),
        ),
        (
            Case {
                exe: "/usr/bin/python3.11".into(),
                args: vec![
                    "-I".into(),
                    "-c".into(),
                    "import json; print(json.dumps({'a': [1, 2.5, None]}))".into(),
                ],
                // The interpreter as a C program (uprobes count a native
                // run, which runs no profile function).
                env: vec![("PYTHONHASHSEED", "0"), ("FCTRACE_NO_PYTHON", "1")],
            },
            dir.path.clone(),
        ),
    ];
    // Each case's unnamed functions with fctrace's counts.
    let traced: Vec<BTreeMap<u64, u64>> = cases.iter().map(|(c, cwd)| check_case(c, cwd)).collect();

    // 50 functions, seeded: from each of gzip, git status and python, half
    // among those the run entered and half among all.
    let mut rng = Rng(0x2600_5eed);
    let mut probes = Probes {
        groups: BTreeSet::new(),
    };
    let (mut compared, mut probed_entered, mut entries) = (0, 0, 0u64);
    for (k, per) in [(0usize, 16usize), (1, 17), (3, 17)] {
        let (case, cwd) = &cases[k];
        let all: Vec<u64> = traced[k].keys().copied().collect();
        let entered: Vec<u64> = traced[k]
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&a, _)| a)
            .collect();
        let mut chosen = BTreeSet::new();
        while chosen.len() < per / 2 && chosen.len() < entered.len() {
            chosen.insert(entered[rng.below(entered.len())]);
        }
        while chosen.len() < per {
            chosen.insert(all[rng.below(all.len())]);
        }
        let segs = loads(&case.exe);
        let events: Vec<(u64, String)> = chosen
            .iter()
            .map(|&a| (a, add_probe(&mut probes, &case.exe, file_offset(&segs, a))))
            .collect();
        let names: Vec<String> = events.iter().map(|(_, e)| e.clone()).collect();
        let counts = uprobe_counts(case, cwd, &names);
        let mut wrong = Vec::new();
        for (a, e) in &events {
            let want = counts[e];
            let got = traced[k][a];
            if want != got {
                wrong.push(format!("{a:#x}: fctrace {got}, uprobe {want}"));
            }
            compared += 1;
            probed_entered += usize::from(want > 0);
            entries += want;
        }
        assert!(
            wrong.is_empty(),
            "{}: entry counts differ from uprobes': {wrong:?}",
            case.exe.display()
        );
    }
    eprintln!(
        "{compared} functions compared with uprobes, {probed_entered} entered, {entries} entries"
    );
    assert_eq!(compared, 50);
    assert!(
        probed_entered >= 20,
        "only {probed_entered} of the functions were entered"
    );
}

/// With -l, a stripped library's functions are found the same way:
/// Debian's libz and libpcre2 under `git` have at least 99% of their FDE
/// functions instrumented (libz names 88 of its 121 in `.dynsym`, libpcre2
/// 73 of its 255),
/// and git behaves as natively.
#[test]
fn stripped_libraries_with_nest_libcall() {
    let git = Path::new("/usr/bin/git");
    assert!(git.exists(), "/usr/bin/git is missing: apt-get install git");
    let native = run(Command::new(git).arg("--version"));
    let rec = record_any(git, &["--version"], &["-l"]);
    let notice = format!("fctrace: {}: stripped (no .symtab)", git.display());
    assert_same_behaviour_with(&native, &rec.run, "git -l", |s| {
        s.lines()
            .filter(|l| !l.starts_with(&notice))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let text = fs::read_to_string(rec.dir.path.join("sessions/0.sym")).unwrap();
    let table = SymTab::parse(&text).unwrap();
    let mut checked = 0;
    for m in &table.modules {
        let file = m.file_name();
        if !(file.starts_with("libz.so") || file.starts_with("libpcre2-8.so")) {
            continue;
        }
        let fdes = fde_starts(Path::new(&m.path));
        let (mut instrumented, mut not_functions, mut unnamed) = (0usize, 0usize, 0usize);
        for f in table.functions.iter().filter(|f| f.module == m.index) {
            if !fdes.contains(&f.addr) {
                continue;
            }
            match &f.status {
                FuncStatus::NotTraced(why) if is_no_function(why) => not_functions += 1,
                FuncStatus::NotTraced(_) => {}
                _ => {
                    instrumented += 1;
                    unnamed += usize::from(f.is_unnamed(m));
                }
            }
        }
        let functions = fdes.len() - not_functions;
        eprintln!(
            "{}: {} FDEs, {instrumented} of {functions} functions instrumented, {unnamed} unnamed",
            m.path,
            fdes.len()
        );
        assert!(
            instrumented * 100 >= functions * 99 && unnamed > 10,
            "{}: {instrumented} of {functions} FDE functions instrumented, {unnamed} unnamed",
            m.path
        );
        checked += 1;
    }
    assert_eq!(checked, 2, "git's libz and libpcre2 not among the modules");
}
