//! tree.c: the exact call tree, known by construction, at -O0 and -O2; the
//! report's counts, modules and timing consistency; live mode; and first of
//! all, that gcc really produced the shapes the program is there to test
//! (checked with objdump, so the tree tests are not vacuous).

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

fn tree(opt: &str) -> PathBuf {
    c_program("tree.c", opt, &[opt])
}

/// The program's own output, the same at every level.
const TREE_STDOUT: &str = "tree: start\ntree: rare 13\ntree: total=350230300 len=9\n";

/// main's subtree, from tree.c's source. At -O2 the only difference is the
/// name of scale's clone: the calls are the same, tail calls included (a
/// function entered by a jump nests under the function that jumped, and
/// both end together: `g() { h(); }`, `rec() { inc(); }`, `rare() {
/// printf(); }` where rare jumps to printf through the PLT).
fn expected_tree(opt: &str) -> String {
    let scale = if opt == "-O2" {
        "scale.constprop.0()"
    } else {
        "scale()"
    };
    let outline = expected_outline(
        "
        main()
          puts()
          leaf()
          nest1()
            nest2()
              leaf()
              inc()
            leaf()
          rec()
            rec()
              rec()
                inc()
          g()
            h()
          spin_entry()
          sum_to()
          SCALE
          SCALE
          checked()
          checked()
            rare()
              printf()
          strlen()
          printf()
        ",
    )
    .replace("SCALE", scale);
    if SELF_ENTRY_JUMP_IS_CALL {
        // spin_entry(3) arrives at its entry three times.
        outline.replace(
            "  spin_entry()\n",
            "  spin_entry()\n    spin_entry()\n      spin_entry()\n",
        )
    } else {
        outline
    }
}

fn sym<'a>(syms: &'a [Sym], name: &str) -> &'a Sym {
    syms.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// The shapes tree.c is there for, at -O2, as objdump sees them.
fn check_shapes_o2(exe: &Path) {
    let syms = function_symbols(exe);
    let funcs = disassemble(exe);

    // inc: 4 bytes, `lea 0x1(%rdi),%eax; ret`.
    assert_eq!(
        sym(&syms, "inc").size,
        4,
        "{}",
        listing(find_function(&funcs, "inc"))
    );
    let inc = find_function(&funcs, "inc");
    assert!(
        inc.insns[0].text.starts_with("lea") && inc.insns[1].mnemonic == "ret",
        "{}",
        listing(inc)
    );

    // g ends with `jmp h`, and nothing else ever reaches h.
    let g = find_function(&funcs, "g");
    let h = sym(&syms, "h").addr;
    let last = g
        .insns
        .iter()
        .rev()
        .find(|i| !i.mnemonic.starts_with("nop") && !i.text.contains("nop"))
        .unwrap();
    assert!(
        last.mnemonic == "jmp" && last.target == Some(h),
        "g does not end with jmp h:\n{}",
        listing(g)
    );
    for f in &funcs {
        for i in &f.insns {
            if i.target == Some(h) && !(f.name == "g" && i.addr == last.addr) {
                panic!(
                    "h is also reached from {} at {:x}: {}",
                    f.name, i.addr, i.text
                );
            }
        }
    }
    // rec(1) tail-jumps to inc, rare tail-jumps to printf through the PLT.
    let rec = find_function(&funcs, "rec");
    assert!(
        rec.insns
            .iter()
            .any(|i| i.mnemonic == "jmp" && i.target == Some(sym(&syms, "inc").addr)),
        "{}",
        listing(rec)
    );
    let rare = find_function(&funcs, "rare");
    assert!(
        rare.insns
            .iter()
            .any(|i| i.mnemonic == "jmp" && i.text.contains("<printf@plt>")),
        "{}",
        listing(rare)
    );

    // spin_entry: its first instruction is the target of its own loop.
    let spin = find_function(&funcs, "spin_entry");
    assert_eq!(spin.self_entry_jumps().len(), 1, "{}", listing(spin));
    // sum_to: a branch into the first 5 bytes (offset 2).
    let sum_to = find_function(&funcs, "sum_to");
    assert!(
        sum_to
            .insns
            .iter()
            .any(|i| i.mnemonic.starts_with('j') && i.target == Some(sum_to.start + 2)),
        "{}",
        listing(sum_to)
    );

    // scale only exists as its IPA-CP clone, called twice from main.
    assert!(
        syms.iter().all(|s| s.name != "scale"),
        "scale was not cloned"
    );
    let clone = sym(&syms, "scale.constprop.0").addr;
    let main = find_function(&funcs, "main");
    assert_eq!(
        main.insns
            .iter()
            .filter(|i| i.mnemonic == "call" && i.target == Some(clone))
            .count(),
        2,
        "{}",
        listing(main)
    );

    // checked has a .cold part, entered by a jump, which calls rare.
    let cold = sym(&syms, "checked.cold").addr;
    let checked = find_function(&funcs, "checked");
    assert!(
        checked
            .insns
            .iter()
            .any(|i| i.mnemonic.starts_with('j') && i.target == Some(cold)),
        "{}",
        listing(checked)
    );
    let cold_f = find_function(&funcs, "checked.cold");
    assert!(
        cold_f
            .insns
            .iter()
            .any(|i| i.mnemonic == "call" && i.target == Some(sym(&syms, "rare").addr)),
        "{}",
        listing(cold_f)
    );
}

fn check_shapes_o0(exe: &Path) {
    let syms = function_symbols(exe);
    let funcs = disassemble(exe);
    assert!(
        syms.iter().any(|s| s.name == "scale"),
        "scale missing at -O0"
    );
    assert!(
        syms.iter()
            .all(|s| !s.name.contains(".cold") && !s.name.contains(".constprop")),
        "clones at -O0?"
    );
    assert_eq!(
        find_function(&funcs, "spin_entry").self_entry_jumps().len(),
        1
    );
}

#[test]
fn tree_c_shapes_are_really_there() {
    check_shapes_o2(&tree("-O2"));
    check_shapes_o0(&tree("-O0"));
    for opt in ["-O0", "-O2"] {
        assert_eq!(run_native(&tree(opt), &[]).stdout, TREE_STDOUT);
    }
}

fn check_tree(opt: &str) {
    let exe = tree(opt);
    if opt == "-O2" {
        check_shapes_o2(&exe);
    }
    let rec = record(&exe, &[], &[]);
    assert_eq!(
        rec.run.stdout,
        TREE_STDOUT,
        "record must let the program's output through unchanged\n{}",
        rec.run.describe()
    );
    assert_eq!(
        rec.run.stderr,
        "",
        "record of a clean run prints nothing on stderr\n{}",
        rec.run.describe()
    );
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    assert!(main.closed, "main() never returned in the trace");
    assert_outline_eq(
        &outline(std::slice::from_ref(main)),
        &expected_tree(opt),
        &format!("tree.c {opt} (trace {})", rec.dir.path.display()),
    );
    assert_eq!(replay.threads.len(), 1, "one thread");
}

#[test]
fn tree_c_o0_call_tree() {
    check_tree("-O0");
}

#[test]
fn tree_c_o2_call_tree() {
    check_tree("-O2");
}

/// Counts, names, modules, tasks and timing consistency of the report.
fn check_report(opt: &str) {
    let exe = tree(opt);
    let rec = record(&exe, &[], &[]);
    let rep = report(&rec.dir.path);
    let ctx = format!("tree.c {opt}, trace {}", rec.dir.path.display());
    assert_eq!(rep.lost_events, 0, "{ctx}");
    assert!(rep.events > 0, "{ctx}");

    let scale = if opt == "-O2" {
        "scale.constprop.0"
    } else {
        "scale"
    };
    let spin = if SELF_ENTRY_JUMP_IS_CALL { 3 } else { 1 };
    let own: &[(&str, u64)] = &[
        ("main", 1),
        ("leaf", 3),
        ("nest1", 1),
        ("nest2", 1),
        ("inc", 2),
        ("rec", 3),
        ("g", 1),
        ("h", 1),
        ("spin_entry", spin),
        ("sum_to", 1),
        (scale, 2),
        ("checked", 2),
        ("rare", 1),
    ];
    for (name, calls) in own {
        let f = rep
            .function(name)
            .unwrap_or_else(|| panic!("{ctx}: no function {name} in the report"));
        assert_eq!(f.calls, *calls, "{ctx}: calls of {name}");
        assert_eq!(f.symbol, *name, "{ctx}: a C function's name is its symbol");
        assert_eq!(
            canonical(Path::new(&f.module)),
            canonical(&exe),
            "{ctx}: module of {name}"
        );
    }
    for libf in ["puts", "strlen", "printf"] {
        let f = rep
            .function(libf)
            .unwrap_or_else(|| panic!("{ctx}: no library call {libf} in the report"));
        let module = Path::new(&f.module)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            module.starts_with("libc.so"),
            "{ctx}: module of {libf} is {}",
            f.module
        );
        assert!(
            Path::new(&f.module).is_absolute(),
            "{ctx}: module of {libf} is not an absolute path: {}",
            f.module
        );
    }
    let want_printf = 2;
    assert_eq!(rep.calls("printf"), want_printf, "{ctx}");
    assert_eq!(rep.calls("puts"), 1, "{ctx}");
    assert_eq!(rep.calls("strlen"), 1, "{ctx}");
    for f in &rep.functions {
        assert!(
            !f.symbol.contains(".cold") && !f.name.contains(".cold"),
            "{ctx}: a .cold part as a function: {f:?}"
        );
    }

    // Timing consistency (not values), for the program's own functions and
    // its libc calls, all of which return. Whatever the convention for a
    // recursive function's total (counted once over the outermost call, or
    // summed over every call), these hold for every function; for the
    // functions that never recurse, total is the sum of the calls' times.
    let recursive = ["rec", "spin_entry"];
    let timed = own
        .iter()
        .map(|(n, _)| *n)
        .chain(["puts", "strlen", "printf"]);
    for name in timed {
        let f = rep.function(name).unwrap();
        let (Some(min), Some(max), Some(avg_ns)) = (f.min_ns, f.max_ns, f.avg_ns) else {
            panic!("{ctx}: {name} returned, it has a min, max and mean duration: {f:?}");
        };
        assert!(min <= max, "{ctx}: min > max: {f:?}");
        assert!(
            min as f64 <= avg_ns + 0.5 && avg_ns <= max as f64 + 0.5,
            "{ctx}: avg outside [min, max]: {f:?}"
        );
        assert!(f.self_ns <= f.total_ns, "{ctx}: self > total: {f:?}");
        assert!(
            max <= f.total_ns,
            "{ctx}: one call longer than the total: {f:?}"
        );
        assert!(
            f.total_ns <= max.saturating_mul(f.calls),
            "{ctx}: total > calls * max: {f:?}"
        );
        if recursive.contains(&name) {
            continue;
        }
        assert!(
            f.total_ns >= min.saturating_mul(f.calls),
            "{ctx}: total < calls * min: {f:?}"
        );
        let avg = f.total_ns as f64 / f.calls as f64;
        assert!(
            (avg_ns - avg).abs() <= 1.0 + avg * 1e-9,
            "{ctx}: avg_ns {avg_ns} != total/calls {avg}: {f:?}"
        );
    }
    for f in &rep.functions {
        assert!(
            f.min_ns.is_some() == f.max_ns.is_some() && f.min_ns.is_some() == f.avg_ns.is_some(),
            "{ctx}: min, max and avg are all there or all null: {f:?}"
        );
    }
    // main's total time includes its callees'.
    let main = rep.function("main").unwrap();
    let nest1 = rep.function("nest1").unwrap();
    assert!(main.total_ns >= nest1.total_ns, "{ctx}");

    // One task: the process itself.
    assert_eq!(rep.tasks.len(), 1, "{ctx}: {:?}", rep.tasks);
    let t = &rep.tasks[0];
    assert_eq!(t.tid, t.pid, "{ctx}: {t:?}");
    assert_eq!(
        t.comm,
        exe.file_name().unwrap().to_string_lossy(),
        "{ctx}: {t:?}"
    );
}

#[test]
fn tree_c_o0_report() {
    check_report("-O0");
}

#[test]
fn tree_c_o2_report() {
    check_report("-O2");
}

#[test]
fn tree_c_counts_match_callgrind() {
    for opt in ["-O0", "-O2"] {
        assert_counts_match_callgrind(&tree(opt), &[], &CompareOptions::default());
    }
}

#[test]
fn tree_c_info() {
    let exe = tree("-O2");
    let rec = record(&exe, &[], &[]);
    let info = info_text(&rec.dir.path);
    assert!(!info.trim().is_empty(), "info printed nothing");
    assert!(
        info.contains("tree-O2"),
        "info does not name the program:\n{info}"
    );
}

/// Live mode: the program's output first, unchanged, then the call tree.
#[test]
fn tree_c_live_mode() {
    let exe = tree("-O0");
    let r = fctrace(&[exe.as_os_str()]);
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stdout.starts_with(TREE_STDOUT),
        "live mode must let the program's output through first, unchanged\n{}",
        r.describe()
    );
    let after = &r.stdout[TREE_STDOUT.len()..];
    let tree_text = if after.contains("main() {") {
        after
    } else {
        r.stderr.as_str()
    };
    assert!(
        tree_text.contains("main() {"),
        "no call tree after the program's output\n{}",
        r.describe()
    );
    // The tree is the same as replay's: check it parses and main's subtree.
    let start = tree_text.find('#').unwrap_or(0);
    let parsed = parse_replay(&tree_text[start..])
        .unwrap_or_else(|e| panic!("live tree: {e}\n{}", r.describe()));
    assert_outline_eq(
        &outline(std::slice::from_ref(parsed.main())),
        &expected_tree("-O0"),
        "live mode, tree.c -O0",
    );
}
