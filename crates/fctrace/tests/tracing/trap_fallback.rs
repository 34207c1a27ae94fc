//! The trap fallback (docs/engine.md, "Patching an entry"): functions no
//! jump fits (shorter than 5 bytes with no padding after them, a loop back
//! to the first instruction in a function that makes calls) get a one-byte
//! `int3` entry that the agent's SIGTRAP handler sends to their stub.
//! trap_shapes.cpp (gcc -O2 -falign-functions=1, so no padding between
//! functions, plus assembly) has each shape; checked: the shapes are really
//! there (objdump), `info` lists them as traced through the trap and
//! nothing of the program as not instrumented but `_start`, the program
//! behaves as natively, and every count equals the program's own and
//! callgrind's. The program's own use of SIGTRAP (a handler installed late
//! that runs int3s and calls the shapes, SIGTRAP blocked or ignored, an
//! alternate signal stack, threads, an int3 that kills it) is unchanged.

use fctrace_testkit::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn program() -> PathBuf {
    cxx_program(
        "trap_shapes.cpp",
        "-O2-falign1",
        &["-O2", "-falign-functions=1", "-pthread"],
    )
}

/// The functions that must take the trap, by raw symbol and as `info`
/// and `report` name them.
const TRAPPED: [(&str, &str); 4] = [
    ("in_parent", "in_parent"),
    ("_ZN1SC2Ei", "S::S(int)"),
    ("tail2", "tail2"),
    ("rloop", "rloop"),
];

fn sym<'a>(syms: &'a [Sym], name: &str) -> &'a Sym {
    syms.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// The shapes, as objdump sees them: the short ones are followed right
/// away by another function (no padding), rloop jumps back to its entry
/// and calls.
fn check_shapes(exe: &Path) {
    let syms = function_symbols(exe);
    let funcs = disassemble(exe);
    for (name, size) in [("in_parent", 4), ("_ZN1SC2Ei", 3), ("tail2", 2)] {
        let s = sym(&syms, name);
        assert_eq!(s.size, size, "{name}");
        // The next function (the constructor is the last of .text: _fini,
        // in .fini, follows) starts before 5 bytes from its entry.
        let next = syms
            .iter()
            .filter(|o| o.addr > s.addr)
            .map(|o| o.addr)
            .min()
            .unwrap_or_else(|| panic!("nothing after {name}"));
        assert!(
            next - s.addr < 5,
            "{name} at {:#x}: the next function is at {next:#x}",
            s.addr
        );
    }
    let tail2 = find_function(&funcs, "tail2");
    assert_eq!(tail2.insns.len(), 1, "{}", listing(tail2));
    assert!(DisFunc::is_jump(&tail2.insns[0]), "{}", listing(tail2));
    let rloop = find_function(&funcs, "rloop");
    assert_eq!(rloop.self_entry_jumps().len(), 1, "{}", listing(rloop));
    assert!(
        rloop.insns.iter().filter(|i| DisFunc::is_call(i)).count() == 2,
        "{}",
        listing(rloop)
    );
}

/// The counts the program printed: `name=N` pairs of its line `mode: ...`.
fn own_counts(stdout: &str, mode: &str) -> Vec<(String, u64)> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{mode}: rounds=")))
        .unwrap_or_else(|| panic!("no counts in {stdout:?}"));
    line.split_once(": ")
        .unwrap()
        .1
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k != "rounds")
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// The functions `info` lists under a heading starting with `heading`.
fn listed_under(info: &str, heading: &str) -> Vec<String> {
    info.lines()
        .skip_while(|l| !l.trim_start().starts_with(heading))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Records `mode`, checks the behaviour against the native run and the
/// counts against the program's own; returns the recording and report.
#[track_caller]
fn record_mode(mode: &str, rounds: &str) -> (Recorded, Report) {
    let exe = program();
    let native = run(std::process::Command::new(&exe).args([mode, rounds]));
    let rec = record_any(&exe, &[mode, rounds], &[]);
    assert_same_behaviour(&native, &rec.run, &format!("trap_shapes {mode}"));
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{mode}");
    for (name, n) in own_counts(&native.stdout, mode) {
        assert_eq!(
            rep.calls(&name),
            n,
            "{mode}: calls of {name} (trace {})",
            rec.dir.path.display()
        );
    }
    (rec, rep)
}

#[test]
fn trap_shapes_are_really_there() {
    check_shapes(&program());
}

#[test]
fn trap_fallback_traces_every_call() {
    let exe = program();
    check_shapes(&exe);
    let (rec, rep) = record_mode("plain", "300");

    let info = info_text(&rec.dir.path);
    let exe_path = canonical(&exe);
    let trapped: BTreeSet<String> = listed_under(&info, "Traced through the trap fallback")
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = TRAPPED
        .iter()
        .map(|(_, shown)| format!("{shown} ({})", exe_path.display()))
        .collect();
    assert_eq!(trapped, expected, "{info}");
    assert_eq!(
        listed_under(&info, "Not instrumented"),
        [format!(
            "_start ({}): entered without a call",
            exe_path.display()
        )],
        "{info}"
    );

    // rloop calls itself and jumps back to its entry: callgrind's count
    // cannot be split, the comparison leaves it out (checked above against
    // the program's own count).
    let cg = callgrind(&exe, &["plain", "300"]);
    match compare_with_callgrind(&exe, &rep, &cg, &CompareOptions::default()) {
        Ok(cmp) => {
            for (raw, _) in TRAPPED.iter().filter(|(r, _)| *r != "rloop") {
                assert!(
                    !cmp.excluded.iter().any(|(n, _)| n == raw),
                    "{raw} left out of the comparison: {:?}",
                    cmp.excluded
                );
            }
        }
        Err(msg) => panic!("{msg}(fctrace trace: {})", rec.dir.path.display()),
    }
}

#[test]
fn trap_fallback_in_threads() {
    record_mode("threads", "2000");
}

#[test]
fn program_sigtrap_handler_installed_late_is_chained() {
    // Its own int3s and raise(SIGTRAP) reach it (4 times), its calls of
    // the shapes from inside it are traced, and its queries show the
    // action it installed (no SA_NODEFER, SIGTRAP in its mask).
    let (rec, _) = record_mode("handler", "50");
    assert!(
        rec.run
            .stdout
            .contains("handler installed: same=1 nodefer=0 trap_in_mask=1\n")
            && rec.run.stdout.contains("traps seen by the program: 4\n"),
        "{}",
        rec.run.describe()
    );
    let text = replay_text(&rec.dir.path);
    let markers = text.matches("/* signal SIGTRAP */").count();
    assert_eq!(markers, 4, "{text}");
}

#[test]
fn sigtrap_blocked_or_ignored_by_the_program() {
    record_mode("blocked", "200");
    let (rec, _) = record_mode("ignored", "200");
    assert!(
        rec.run
            .stdout
            .contains("ignored: before=SIG_DFL then=SIG_IGN\n"),
        "{}",
        rec.run.describe()
    );
}

#[test]
fn sigtrap_blocked_through_exec() {
    // The exec'd image starts with SIGTRAP blocked (the raw system call
    // went around the interposers): the agent unblocks it at start.
    let exe = program();
    let native = run_native(&exe, &["exec_blocked", "100"]);
    let rec = record_any(&exe, &["exec_blocked", "100"], &[]);
    assert_same_behaviour(&native, &rec.run, "trap_shapes exec_blocked");
    let rep = report(&rec.dir.path);
    for (name, n) in own_counts(&native.stdout, "plain") {
        assert_eq!(rep.calls(&name), n, "calls of {name}");
    }
}

#[test]
fn trap_fallback_on_an_alternate_signal_stack() {
    let (rec, _) = record_mode("altstack", "300");
    assert!(
        rec.run
            .stdout
            .contains("handler on the alternate stack: 1\n"),
        "{}",
        rec.run.describe()
    );
}

#[test]
fn program_sigtrap_handler_with_sa_resethand() {
    // The agent's traps neither run nor reset it; the program's int3 runs
    // it once and resets it; signal() back to SIG_DFL; the last int3 kills
    // the program as natively (record_mode compares).
    let (rec, _) = record_mode("resethand", "100");
    assert!(
        rec.run.stdout.contains("before: mine=1 resethand=1\n")
            && rec.run.stdout.contains("after: default=1 traps seen=1\n")
            && rec.run.stdout.contains("signal(): was mine=1\n"),
        "{}",
        rec.run.describe()
    );
}

#[test]
fn program_int3_without_handler_still_kills_it() {
    // (record_mode checks it dies by SIGTRAP as natively.)
    let (rec, _) = record_mode("int3", "20");
    assert!(
        rec.run.stdout.contains("int3: rounds=20 ") && !rec.run.stdout.contains("not reached"),
        "{}",
        rec.run.describe()
    );
}
