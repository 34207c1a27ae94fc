//! Callgrind's count of calls per function, compared with fctrace's,
//! function by function, for the main executable.
//!
//! # What callgrind counts (valgrind 3.19, checked on this project's programs)
//!
//! The count of calls of a function is the sum of the `calls=N` lines whose
//! callee (`cfn=`) is that function, over all callers in all objects.
//! * Recursion: with the default `--separate-recs=2`, a recursive function
//!   shows up as `fib` and `fib'2` (the `'N` suffix names the recursion
//!   level). The suffix is stripped and the counts added.
//! * Tail calls: a jump to the first instruction of a function symbol is
//!   counted as a call (callgrind's "call emulation"), attributed to the
//!   function that jumped. So `g: ... jmp h` counts one call of h per call of
//!   g, the same as a `call`. Its return is matched by stack pointer, so g
//!   and h are left together.
//! * A jump to a function's *own* first instruction is also counted as a
//!   (recursive) call: a loop whose head is the entry (tree.c's `spin_entry`)
//!   gets one call per iteration. At the machine level this cannot be told
//!   apart from a self tail call; the tests take it as a loop, not a call
//!   (see [`SELF_ENTRY_JUMP_IS_CALL`]), and for such functions compare
//!   fctrace with callgrind's count *from other functions* only. Real code
//!   has them: in SQLite at -O2, `sqlite3ExprAffinity` and
//!   `sqlite3WhereSplit` end their tail recursion with a jump to their own
//!   entry (found by scanning objdump's output for such branches).
//! * `.cold` parts: gcc's `f.cold` is a symbol of its own, so the jump from
//!   f into it counts as a call of `f.cold`. It is not a function; excluded
//!   from the comparison, and fctrace must never report one.
//! * PLT stubs: with the default `--skip-plt=yes` they are invisible; a call
//!   through `puts@plt` is a call from main to libc's `puts` (plus one call
//!   of ld.so's `_dl_runtime_resolve_xsave` the first time, lazy binding).
//!   With `--skip-plt=no` they show as `0x... [PLT]` functions of an unknown
//!   object `???`, never as functions of the executable. Either way they do
//!   not touch the executable's own functions.
//! * `main` is called once, from libc's `__libc_start_call_main`; calls from
//!   libc back into the program (qsort's comparator, thread start routines,
//!   `frame_dummy` from the init array) are counted like any other call.
//! * `_start` is entered by a jump from ld.so: as a jump into another object
//!   it counts as one call. With `--show-below-main=no` (valgrind's default)
//!   `_start` and `__libc_start_call_main` are both renamed `(below main)`;
//!   we pass `--show-below-main=yes` to keep the real names.
//! * Symbols of size 0 (`_init`, `_fini`, `frame_dummy`, `register_tm_clones`,
//!   `deregister_tm_clones`, `__do_global_dtors_aux`) are not used by valgrind:
//!   their code is named `0x<address>` (the address relative to the object's
//!   load base, as in the symbol table), `_init` even shows up in an unknown
//!   object `???`, and a jump to them is not counted as a call
//!   (`frame_dummy` tail-jumps to `register_tm_clones`: callgrind counts 0).
//!   These C runtime functions are not the program's own: they are excluded
//!   ([`CRT_FUNCTIONS`]).
//! * Threads: by default all threads go to one output file and one count.
//! * C++ and Rust: with `--demangle=no` names are the raw symbols, the same
//!   as the report's `symbol`. Several symbols at one address (C1/C2
//!   constructors, identical code folding) are one function to both tools;
//!   the comparison is by address so either may pick any of the names.
//!   gcc also makes `.cold` parts of C++ functions (`main.cold`,
//!   `_ZN3geo6middleEi.cold` in tree.cpp -O2).

use crate::elf::{disassemble, function_symbols};
use crate::paths::{cache_subdir, unique_suffix, FileLock, Fnv};
use crate::process::run_with_timeout;
use crate::record::record;
use crate::report::{canonical, report, Report};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether a branch from inside a function to its own first instruction is
/// a new call. The tests take the program's semantics: it is a loop
/// (`spin_entry(3)` is one call). Flip this if the engine's contract says
/// otherwise; tree.rs and the callgrind comparison both follow it.
pub const SELF_ENTRY_JUMP_IS_CALL: bool = false;

/// Functions of the C runtime start files (crt1.o, crti.o, crtbegin.o,
/// crtend.o, crtn.o) linked into every executable: not the program's own
/// code, and callgrind cannot count them (see the module documentation).
pub const CRT_FUNCTIONS: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "_dl_relocate_static_pie",
];

/// A function as callgrind names it: (object path, raw name).
pub type FnKey = (String, String);

/// Call counts of one callgrind run, by (object path, raw function name).
#[derive(Debug, Clone, Default)]
pub struct Callgrind {
    /// Calls of each function, summed over all callers.
    pub calls: BTreeMap<(String, String), u64>,
    /// Calls of each function made by itself (same object and name, any
    /// recursion level): for functions that jump to their own entry.
    pub self_calls: BTreeMap<(String, String), u64>,
    /// Calls by (caller, callee), each as (object, raw name without the
    /// recursion suffix).
    pub arcs: BTreeMap<(FnKey, FnKey), u64>,
    /// The output file, for messages.
    pub file: PathBuf,
}

/// Strips callgrind's recursion-level suffix: `fib'2` → `fib`.
pub fn strip_rec_suffix(name: &str) -> &str {
    if let Some(pos) = name.rfind('\'') {
        if pos + 1 < name.len() && name[pos + 1..].bytes().all(|b| b.is_ascii_digit()) {
            return &name[..pos];
        }
    }
    name
}

/// Parses callgrind's output (format version 1, with or without name
/// compression). Only call lines matter: `calls=N ...` after `cfn=`, with
/// the callee's object given by `cob=` (for that call only; the caller's
/// object when absent).
pub fn parse_callgrind(text: &str) -> Result<Callgrind, String> {
    let mut ob_names: HashMap<String, String> = HashMap::new();
    let mut fn_names: HashMap<String, (String, String)> = HashMap::new(); // id -> (object, name)
    let mut cur_ob = String::new();
    let mut cur_fn: Option<(String, String)> = None;
    let mut cob: Option<String> = None;
    let mut cfn: Option<(String, String)> = None;
    let mut out = Callgrind::default();

    // `(id) name`, `(id)` or `name`.
    fn split_compressed(v: &str) -> (Option<&str>, Option<&str>) {
        let v = v.trim();
        if let Some(rest) = v.strip_prefix('(') {
            if let Some(end) = rest.find(')') {
                let id = &rest[..end];
                let name = rest[end + 1..].trim();
                return (Some(id), if name.is_empty() { None } else { Some(name) });
            }
        }
        (None, Some(v))
    }
    let resolve_ob =
        |v: &str, names: &mut HashMap<String, String>, lineno: usize| -> Result<String, String> {
            match split_compressed(v) {
                (Some(id), Some(name)) => {
                    names.insert(id.to_string(), name.to_string());
                    Ok(name.to_string())
                }
                (Some(id), None) => names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown object id ({id})")),
                (None, Some(name)) => Ok(name.to_string()),
                (None, None) => Err(format!("line {lineno}: empty object")),
            }
        };
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if let Some(v) = line.strip_prefix("ob=") {
            cur_ob = resolve_ob(v, &mut ob_names, lineno)?;
        } else if let Some(v) = line.strip_prefix("cob=") {
            cob = Some(resolve_ob(v, &mut ob_names, lineno)?);
        } else if let Some(v) = line.strip_prefix("fn=") {
            let f = match split_compressed(v) {
                (Some(id), Some(name)) => {
                    let f = (cur_ob.clone(), name.to_string());
                    fn_names.insert(id.to_string(), f.clone());
                    f
                }
                (Some(id), None) => fn_names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown function id ({id})"))?,
                (None, Some(name)) => (cur_ob.clone(), name.to_string()),
                (None, None) => return Err(format!("line {lineno}: empty fn=")),
            };
            cur_fn = Some(f);
            cob = None;
            cfn = None;
        } else if let Some(v) = line.strip_prefix("cfn=") {
            let obj = cob.clone().unwrap_or_else(|| cur_ob.clone());
            cfn = Some(match split_compressed(v) {
                (Some(id), Some(name)) => {
                    let f = (obj, name.to_string());
                    fn_names.insert(id.to_string(), f.clone());
                    f
                }
                (Some(id), None) => fn_names
                    .get(id)
                    .cloned()
                    .ok_or(format!("line {lineno}: unknown function id ({id})"))?,
                (None, Some(name)) => (obj, name.to_string()),
                (None, None) => return Err(format!("line {lineno}: empty cfn=")),
            });
        } else if let Some(v) = line.strip_prefix("calls=") {
            let n: u64 = v
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("line {lineno}: bad calls= line {line:?}"))?;
            let (obj, name) = cfn
                .take()
                .ok_or(format!("line {lineno}: calls= without cfn="))?;
            let callee = (obj, strip_rec_suffix(&name).to_string());
            *out.calls.entry(callee.clone()).or_insert(0) += n;
            if let Some((caller_obj, caller_name)) = &cur_fn {
                let caller = (
                    caller_obj.clone(),
                    strip_rec_suffix(caller_name).to_string(),
                );
                *out.arcs.entry((caller, callee.clone())).or_insert(0) += n;
                if *caller_obj == callee.0 && strip_rec_suffix(caller_name) == callee.1 {
                    *out.self_calls.entry(callee).or_insert(0) += n;
                }
            }
            cob = None;
        }
    }
    Ok(out)
}

/// Output of `valgrind --version`, part of the callgrind cache key.
fn valgrind_version() -> String {
    let r = run_with_timeout(
        Command::new("valgrind").arg("--version"),
        Duration::from_secs(60),
    );
    r.expect_success();
    r.stdout.trim().to_string()
}

/// Runs `exe args` under callgrind (cached by the executable's content, the
/// arguments and valgrind's version) and parses its counts. The program
/// must exit with status 0.
pub fn callgrind(exe: &Path, args: &[&str]) -> Callgrind {
    callgrind_with_timeout(exe, args, Duration::from_secs(600))
}

pub fn callgrind_with_timeout(exe: &Path, args: &[&str], timeout: Duration) -> Callgrind {
    callgrind_run(exe, args, &[], timeout)
}

/// The calls made while `func` (a function of `exe`, not recursive) runs,
/// `func`'s own calls included: what `fctrace -F func` shows. Callgrind
/// collects only inside `func` (`--toggle-collect`), but still names the
/// calls that led to it: those are left out (only calls made by `func`
/// or by a function reachable from it count).
pub fn callgrind_under(exe: &Path, args: &[&str], func: &str) -> Callgrind {
    let toggle = format!("--toggle-collect={func}");
    let cg = callgrind_run(
        exe,
        args,
        &["--collect-atstart=no", &toggle],
        Duration::from_secs(600),
    );
    let root = (exe.to_string_lossy().into_owned(), func.to_string());
    let same = |a: &(String, String), b: &(String, String)| {
        a.1 == b.1 && canonical(Path::new(&a.0)) == canonical(Path::new(&b.0))
    };
    // Functions reachable from func.
    let mut inside: Vec<(String, String)> = Vec::new();
    for (caller, _) in cg.arcs.keys() {
        if same(caller, &root) && !inside.contains(caller) {
            inside.push(caller.clone());
        }
    }
    loop {
        let mut grew = false;
        for (caller, callee) in cg.arcs.keys() {
            if inside.contains(caller) && !inside.contains(callee) {
                inside.push(callee.clone());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut under = Callgrind {
        file: cg.file.clone(),
        ..Callgrind::default()
    };
    for ((caller, callee), n) in &cg.arcs {
        if inside.contains(caller) || same(callee, &root) {
            *under.calls.entry(callee.clone()).or_insert(0) += n;
            under.arcs.insert((caller.clone(), callee.clone()), *n);
            if caller == callee {
                *under.self_calls.entry(callee.clone()).or_insert(0) += n;
            }
        }
    }
    under
}

/// Runs `exe args` under callgrind with `extra` options, cached.
fn callgrind_run(exe: &Path, args: &[&str], extra: &[&str], timeout: Duration) -> Callgrind {
    let mut h = Fnv::new()
        .file(exe)
        .str(&valgrind_version())
        .str(&exe.to_string_lossy());
    for a in args {
        h = h.str(a);
    }
    for e in extra {
        h = h.str("callgrind option").str(e);
    }
    let stem = exe.file_name().unwrap().to_string_lossy().into_owned();
    let key = h.hex();
    let out = cache_subdir("callgrind").join(format!("{stem}-{key}.out"));
    if !out.exists() {
        let _lock = FileLock::acquire(&format!("callgrind-{stem}-{key}"));
        if !out.exists() {
            let tmp = out.with_extension(format!("tmp-{}", unique_suffix()));
            let start = Instant::now();
            let r = run_with_timeout(
                Command::new("valgrind")
                    .arg("--tool=callgrind")
                    .arg("--demangle=no")
                    .arg("--show-below-main=yes")
                    .args(extra)
                    .arg(format!("--callgrind-out-file={}", tmp.display()))
                    .arg(exe)
                    .args(args),
                timeout,
            );
            assert!(r.success(), "callgrind run failed\n{}", r.describe());
            let took = start.elapsed();
            if took > Duration::from_secs(10) {
                eprintln!(
                    "callgrind of {} took {:.1} s",
                    exe.display(),
                    took.as_secs_f64()
                );
            }
            fs::rename(&tmp, &out).unwrap();
        }
    }
    let text = fs::read_to_string(&out).unwrap();
    let mut cg =
        parse_callgrind(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", out.display()));
    cg.file = out;
    cg
}

impl Callgrind {
    /// Counts of the functions of object `obj`, by raw name.
    pub fn of_object(&self, obj: &Path) -> BTreeMap<String, u64> {
        let obj = canonical(obj);
        let mut m = BTreeMap::new();
        for ((o, name), n) in &self.calls {
            if canonical(Path::new(o)) == obj {
                *m.entry(name.clone()).or_insert(0) += n;
            }
        }
        m
    }
    fn self_calls_of_object(&self, obj: &Path) -> BTreeMap<String, u64> {
        let obj = canonical(obj);
        let mut m = BTreeMap::new();
        for ((o, name), n) in &self.self_calls {
            if canonical(Path::new(o)) == obj {
                *m.entry(name.clone()).or_insert(0) += n;
            }
        }
        m
    }
}

/// What [`compare_with_callgrind`] compared and left out.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Functions compared (by address) with at least one call.
    pub compared: usize,
    /// Sum of the calls compared.
    pub total_calls: u64,
    /// Functions that jump to their own entry, compared against callgrind's
    /// calls from other functions (name, callgrind total, expected).
    pub self_entry: Vec<(String, u64, u64)>,
    /// Left out, with the reason.
    pub excluded: Vec<(String, String)>,
}

/// Which functions of the executable are left out of the comparison, and
/// which are compared in a special way.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// Only compare functions whose raw symbol satisfies this (e.g. the Rust
    /// program's own crate); all of the executable's functions if None.
    pub only: Option<fn(&str) -> bool>,
    /// Options of `fctrace record` (e.g. `-l`).
    pub record_opts: &'static [&'static str],
}

/// Compares fctrace's call counts of every function of `exe` with
/// callgrind's, by address (so aliases such as C1/C2 constructors or
/// functions merged by identical code folding match whatever name each tool
/// chose). Returns Err with every mismatch listed.
///
/// Left out: C runtime functions ([`CRT_FUNCTIONS`]) and `.cold` parts (and
/// fctrace must report no `.cold` part). A function with a direct jump to its
/// own first instruction is compared with callgrind's count minus the calls
/// from itself (see the module documentation), unless it also calls itself
/// directly, when the two cannot be told apart: then it is left out.
pub fn compare_with_callgrind(
    exe: &Path,
    report: &Report,
    cg: &Callgrind,
    opts: &CompareOptions,
) -> Result<Comparison, String> {
    let d = count_diff(exe, report, cg, opts);
    if d.mismatches.is_empty() && d.problems.is_empty() {
        return Ok(d.cmp);
    }
    let mut msg = format!(
        "call counts of {} differ from callgrind's ({} mismatches, {} other problems; {} functions agree; callgrind output: {})\n",
        exe.display(),
        d.mismatches.len(),
        d.problems.len(),
        d.cmp.compared,
        cg.file.display()
    );
    for m in d.mismatches.iter().chain(&d.problems) {
        let _ = writeln!(msg, "  {m}");
    }
    Err(msg)
}

/// The details of a comparison: what agreed, what did not (`name: fctrace
/// N, callgrind M`), and other problems (names that are no function of the
/// executable, `.cold` parts reported as functions).
#[derive(Debug, Default)]
pub struct CountDiff {
    pub cmp: Comparison,
    pub mismatches: Vec<String>,
    pub problems: Vec<String>,
}

pub fn count_diff(exe: &Path, report: &Report, cg: &Callgrind, opts: &CompareOptions) -> CountDiff {
    let syms = function_symbols(exe);
    let mut addrs_of: HashMap<&str, BTreeSet<u64>> = HashMap::new();
    let mut names_at: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for s in &syms {
        addrs_of.entry(&s.name).or_default().insert(s.addr);
        names_at.entry(s.addr).or_default().insert(&s.name);
    }
    let funcs = disassemble(exe);
    let self_entry: HashMap<u64, (bool, bool)> = funcs
        .iter()
        .map(|f| {
            (
                f.start,
                (!f.self_entry_jumps().is_empty(), !f.self_calls().is_empty()),
            )
        })
        .collect();

    #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
    enum Key {
        Addr(u64),
        Name(String),
    }
    let mut problems: Vec<String> = Vec::new();
    let key_of = |name: &str| -> Option<Key> {
        if let Some(h) = name.strip_prefix("0x") {
            return u64::from_str_radix(h, 16).ok().map(Key::Addr);
        }
        match addrs_of.get(name) {
            Some(a) if a.len() == 1 => Some(Key::Addr(*a.iter().next().unwrap())),
            Some(_) => Some(Key::Name(name.to_string())),
            None => None,
        }
    };
    let display = |k: &Key| -> String {
        match k {
            Key::Addr(a) => match names_at.get(a) {
                Some(n) => n.iter().copied().collect::<Vec<_>>().join(" = "),
                None => format!("{a:#x}"),
            },
            Key::Name(n) => n.clone(),
        }
    };
    let names_of = |k: &Key| -> Vec<String> {
        match k {
            Key::Addr(a) => names_at
                .get(a)
                .map(|s| s.iter().map(|n| n.to_string()).collect())
                .unwrap_or_default(),
            Key::Name(n) => vec![n.clone()],
        }
    };

    let mut cmp = Comparison::default();
    let is_excluded = |k: &Key| -> Option<String> {
        let names = names_of(k);
        if names.iter().any(|n| CRT_FUNCTIONS.contains(&n.as_str())) {
            return Some("C runtime start-up code".into());
        }
        if names.iter().any(|n| n.contains(".cold")) {
            return Some("a .cold part, not a function".into());
        }
        if let Some(only) = opts.only {
            if !names.iter().any(|n| only(n)) {
                return Some("outside the compared set".into());
            }
        }
        if names.is_empty() {
            return Some("no symbol at this address".into());
        }
        None
    };

    // callgrind's side
    let cg_counts = cg.of_object(exe);
    let cg_self = cg.self_calls_of_object(exe);
    let mut expected: BTreeMap<Key, u64> = BTreeMap::new();
    let mut self_from_cg: BTreeMap<Key, u64> = BTreeMap::new();
    for (name, n) in &cg_counts {
        match key_of(name) {
            Some(k) => {
                *expected.entry(k.clone()).or_insert(0) += n;
                if let Some(s) = cg_self.get(name) {
                    *self_from_cg.entry(k).or_insert(0) += s;
                }
            }
            None => problems.push(format!(
                "callgrind names `{name}` ({n} calls), not a function symbol of the executable"
            )),
        }
    }
    // fctrace's side
    let mut actual: BTreeMap<Key, u64> = BTreeMap::new();
    for f in report.functions_of(exe) {
        if f.symbol.contains(".cold") {
            problems.push(format!(
                "fctrace reports the .cold part `{}` as a function ({} calls)",
                f.symbol, f.calls
            ));
            continue;
        }
        match key_of(&f.symbol) {
            Some(k) => *actual.entry(k).or_insert(0) += f.calls,
            None => problems.push(format!(
                "fctrace reports `{}` (symbol `{}`, {} calls), not a function symbol of the executable",
                f.name, f.symbol, f.calls
            )),
        }
    }

    let keys: BTreeSet<Key> = expected.keys().chain(actual.keys()).cloned().collect();
    let mut mismatches: Vec<String> = Vec::new();
    for k in keys {
        let name = display(&k);
        if let Some(reason) = is_excluded(&k) {
            cmp.excluded.push((name, reason));
            continue;
        }
        let mut want = expected.get(&k).copied().unwrap_or(0);
        let got = actual.get(&k).copied().unwrap_or(0);
        if let Key::Addr(a) = k {
            if let Some(&(jumps, calls)) = self_entry.get(&a) {
                if jumps && !SELF_ENTRY_JUMP_IS_CALL {
                    if calls {
                        cmp.excluded.push((
                            name,
                            "jumps to its own entry and calls itself: callgrind cannot tell loops from calls".into(),
                        ));
                        continue;
                    }
                    let total = want;
                    want -= self_from_cg.get(&k).copied().unwrap_or(0);
                    cmp.self_entry.push((name.clone(), total, want));
                }
            }
        }
        if want != got {
            mismatches.push(format!("{name}: fctrace {got}, callgrind {want}"));
        } else if want > 0 {
            cmp.compared += 1;
            cmp.total_calls += want;
        }
    }
    CountDiff {
        cmp,
        mismatches,
        problems,
    }
}

/// The oracle checked against itself, without fctrace: every name callgrind
/// gives to code of `exe` resolves to a function symbol (or is left out for
/// a stated reason), and an empty report differs exactly on the functions
/// callgrind saw called. Returns the number of functions compared.
pub fn assert_oracle_resolves(exe: &Path, args: &[&str]) -> usize {
    let cg = callgrind(exe, args);
    let empty = Report {
        functions: vec![],
        tasks: vec![],
        events: 0,
        lost_events: 0,
    };
    let d = count_diff(exe, &empty, &cg, &CompareOptions::default());
    assert!(
        d.problems.is_empty(),
        "{}: callgrind names that do not resolve:\n{}",
        exe.display(),
        d.problems.join("\n")
    );
    assert!(
        !d.mismatches.is_empty(),
        "{}: callgrind saw no call of the executable's functions",
        exe.display()
    );
    for m in &d.mismatches {
        assert!(m.contains(": fctrace 0, callgrind "), "{m}");
    }
    eprintln!(
        "{}: callgrind counts {} functions; left out: {:?}; compared without jumps to their own entry: {:?}",
        exe.display(),
        d.mismatches.len(),
        d.cmp.excluded,
        d.cmp.self_entry
    );
    d.mismatches.len()
}

/// Records `exe args` with fctrace, runs it under callgrind, and asserts the
/// counts agree for every function of the executable. Also asserts no event
/// was lost. Returns the comparison for further checks.
#[track_caller]
pub fn assert_counts_match_callgrind(
    exe: &Path,
    args: &[&str],
    opts: &CompareOptions,
) -> (Report, Comparison) {
    let rec = record(exe, args, opts.record_opts);
    let rep = report(&rec.dir.path);
    assert_eq!(
        rep.lost_events,
        0,
        "fctrace lost events recording {} (trace {})",
        exe.display(),
        rec.dir.path.display()
    );
    let cg = callgrind(exe, args);
    match compare_with_callgrind(exe, &rep, &cg, opts) {
        Ok(c) => {
            eprintln!(
                "{}: {} functions, {} calls agree with callgrind; {} compared without jumps to their own entry; {} left out",
                exe.display(),
                c.compared,
                c.total_calls,
                c.self_entry.len(),
                c.excluded.len()
            );
            (rep, c)
        }
        Err(msg) => panic!("{msg}(fctrace trace: {})", rec.dir.path.display()),
    }
}
