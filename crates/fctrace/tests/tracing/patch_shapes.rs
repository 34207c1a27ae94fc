//! patch_shapes.c: functions whose first 5 bytes hold a branch target and
//! which make calls, so that neither a 5-byte entry jump nor moving the
//! whole function into its stub is sound. They get a 2-byte entry jump to
//! a 5-byte jump in padding within reach: after the function, before it,
//! or inside it (docs/engine.md, "Patching an entry"). Checked: gcc and gas
//! really produced those shapes (objdump), the functions are instrumented
//! (the two that no jump fits through the trap fallback, listed as such),
//! the program behaves the same, and every count equals callgrind's and
//! the program's own.

use fctrace_testkit::*;
use std::path::{Path, PathBuf};

const STDOUT_PREFIX: &str = "patch_shapes: sink=";

fn program() -> PathBuf {
    c_program("patch_shapes.c", "-O2", &["-O2"])
}

fn sym<'a>(syms: &'a [Sym], name: &str) -> &'a Sym {
    syms.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// Direct branches (not calls) of `f` to `target`.
fn jumps_to(f: &DisFunc, target: u64) -> usize {
    f.insns
        .iter()
        .filter(|i| DisFunc::is_jump(i) && i.target == Some(target))
        .count()
}

fn calls(f: &DisFunc) -> usize {
    f.insns.iter().filter(|i| DisFunc::is_call(i)).count()
}

/// The shapes, as objdump sees them.
fn check_shapes(exe: &Path) {
    let syms = function_symbols(exe);
    let funcs = disassemble(exe);

    // mark_near: `push %rbx; mov %rdi,%rbx`, then a loop head at +4
    // (inside the 5 bytes, after the 2), calls, and short enough for the
    // padding after it to be within a rel8 jump of its entry.
    let near = find_function(&funcs, "mark_near");
    let s = sym(&syms, "mark_near");
    assert!(
        near.insns[0].text == "push   %rbx" && near.insns[1].text == "mov    %rdi,%rbx",
        "{}",
        listing(near)
    );
    assert!(jumps_to(near, s.addr + 4) >= 1, "{}", listing(near));
    assert!(
        near.self_calls().len() == 1 && calls(near) >= 2,
        "{}",
        listing(near)
    );
    assert!(
        s.size <= 120,
        "mark_near is {} bytes\n{}",
        s.size,
        listing(near)
    );
    assert!(near.self_entry_jumps().is_empty(), "{}", listing(near));

    // far_before: loop head at +4, calls, longer than a rel8 jump reaches;
    // donor (1 byte) and its 15 bytes of padding right before it.
    let far = find_function(&funcs, "far_before");
    let s = sym(&syms, "far_before");
    assert_eq!(jumps_to(far, s.addr + 4), 1, "{}", listing(far));
    assert_eq!(calls(far), 1, "{}", listing(far));
    assert!(s.size > 140, "far_before is {} bytes", s.size);
    let donor = sym(&syms, "donor");
    assert_eq!((donor.size, s.addr - donor.addr), (1, 16));

    // far_inside: endbr64, loop head at +8 (4 after endbr64), no padding
    // before it (seven ends at its entry), and 6 bytes of nop after a jmp,
    // ending 8-aligned, within reach.
    let inside = find_function(&funcs, "far_inside");
    let s = sym(&syms, "far_inside");
    assert_eq!(inside.insns[0].mnemonic, "endbr64", "{}", listing(inside));
    assert_eq!(jumps_to(inside, s.addr + 8), 1, "{}", listing(inside));
    assert!(s.size > 140, "far_inside is {} bytes", s.size);
    let seven = sym(&syms, "seven");
    assert_eq!(
        seven.addr + seven.size,
        s.addr,
        "seven ends where far_inside starts"
    );
    let k = inside
        .insns
        .iter()
        .position(|i| i.mnemonic == "jmp")
        .unwrap_or_else(|| panic!("{}", listing(inside)));
    let (nop, next) = (&inside.insns[k + 1], &inside.insns[k + 2]);
    assert!(
        nop.mnemonic.starts_with("nop")
            && next.addr - nop.addr >= 5
            && next.addr % 8 == 0
            && nop.addr + 2 - (s.addr + 6) <= 127,
        "{}",
        listing(inside)
    );

    // far_claimed: the only padding in reach is the 5 bytes after donor2
    // (3 bytes long), whose own 5-byte jump takes 2 of them.
    let claimed = find_function(&funcs, "far_claimed");
    let s = sym(&syms, "far_claimed");
    assert_eq!(jumps_to(claimed, s.addr + 4), 1, "{}", listing(claimed));
    let donor2 = sym(&syms, "donor2");
    assert_eq!((donor2.size, s.addr - donor2.addr), (3, 8));
    assert!(
        !claimed
            .insns
            .iter()
            .any(|i| i.mnemonic.starts_with("nop") && i.addr < s.addr + s.size),
        "{}",
        listing(claimed)
    );

    // entry_loop: branches back to its own entry, and calls.
    let el = find_function(&funcs, "entry_loop");
    assert_eq!(el.self_entry_jumps().len(), 1, "{}", listing(el));
    assert_eq!(calls(el), 1, "{}", listing(el));
}

/// The lines `fctrace info` lists under "Traced through the trap
/// fallback", trimmed.
fn trap_fallback_lines(info: &str) -> Vec<&str> {
    info.split_once("Traced through the trap fallback")
        .and_then(|(_, t)| t.split_once('\n'))
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no trap fallback in\n{info}"))
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(str::trim)
        .collect()
}

/// The calls patch_shapes.c's main makes of each shape (by its code: the
/// list, then each child by recursion; ten rounds of the rest).
const SHAPE_CALLS: &[(&str, u64)] = &[
    ("mark_near", 1 + 34),
    ("visit", 100 + 34),
    ("donor", 10),
    ("far_before", 10),
    ("seven", 10),
    ("far_inside", 10),
    ("donor2", 10),
    ("leaf", 10 * (3 + 4 + 5) + 6),
    ("far_claimed", 10),
    // Its loop's jumps back to the entry are not calls.
    ("entry_loop", 1),
];

#[test]
fn patch_shapes_are_really_there() {
    let exe = program();
    check_shapes(&exe);
    assert!(run_native(&exe, &[]).stdout.starts_with(STDOUT_PREFIX));
}

/// The two functions that must stay untraced; every other one is compared.
/// callgrind counts entry_loop's jumps back to its entry as calls.
fn compared(name: &str) -> bool {
    name != "entry_loop"
}

#[test]
fn short_entry_jumps_trace_every_call() {
    let exe = program();
    check_shapes(&exe);
    let native = run_native(&exe, &[]);
    let rec = record(&exe, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "patch_shapes.c -O2");

    // Instrumented, or listed with the reason.
    let info = info_text(&rec.dir.path);
    let listed = |name: &str| {
        info.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} (")))
            .map(str::to_string)
    };
    for name in [
        "mark_near",
        "far_before",
        "far_inside",
        "donor",
        "donor2",
        "seven",
    ] {
        assert_eq!(listed(name), None, "{name} is not instrumented\n{info}");
    }
    // No jump fits these two: the trap fallback, and nothing else.
    let trapped = trap_fallback_lines(&info);
    let exe_path = canonical(&exe);
    assert_eq!(
        trapped,
        [
            format!("far_claimed ({})", exe_path.display()),
            format!("entry_loop ({})", exe_path.display())
        ],
        "{info}"
    );
    let not_instrumented: Vec<&str> = info
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("Not instrumented"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect();
    assert!(
        not_instrumented
            .iter()
            .all(|l| l.trim_start().starts_with("_start (")),
        "{info}"
    );

    // The program's own counts.
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    for &(name, n) in SHAPE_CALLS.iter().chain(&[("main", 1)]) {
        assert_eq!(rep.calls(name), n, "calls of {name}");
    }

    // callgrind's counts, for every function but the two untraced ones.
    let cg = callgrind(&exe, &[]);
    let opts = CompareOptions {
        only: Some(compared),
        ..CompareOptions::default()
    };
    if let Err(msg) = compare_with_callgrind(&exe, &rep, &cg, &opts) {
        panic!("{msg}(fctrace trace: {})", rec.dir.path.display());
    }
}

/// The same shapes in a shared library traced with -l: there the agent
/// reads the library's code from its file (a window at a time, never
/// through the loaded mapping) and measures the padding after each
/// function itself (the library's analysis reads no code), so the
/// placements after, before and inside a function, and the trap fallback,
/// are found the same way, and the counts are the program's.
#[test]
fn short_entry_jumps_in_a_library_with_l() {
    let lib = c_shared_lib(
        "libpatch_shapesO2.so",
        "patch_shapes.c",
        &["-O2", "-Wl,-Bsymbolic", "-Dmain=patch_shapes_main"],
    );
    check_shapes(&lib);
    let dir = lib.parent().unwrap().to_str().unwrap().to_string();
    let main = write_cached_source(
        "patch_shapes_host.c",
        "int patch_shapes_main(void);\nint main(void) { return patch_shapes_main(); }\n",
    );
    let exe = Build::new(
        Lang::C,
        "patch_shapes_hostO2",
        &[main],
        &["-O2", &format!("-Wl,-rpath,{dir}")],
    )
    .libs(&[lib.to_str().unwrap()])
    .build();
    let native = run_native(&exe, &[]);
    assert!(
        native.stdout.starts_with(STDOUT_PREFIX),
        "{}",
        native.describe()
    );
    let rec = record(&exe, &[], &["-l"]);
    assert_same_behaviour(&native, &rec.run, "patch_shapes.c -O2 as a library, -l");

    let info = info_text(&rec.dir.path);
    let lib_path = canonical(&lib);
    let here = |name: &str| format!("{name} ({})", lib_path.display());
    for name in [
        "mark_near",
        "far_before",
        "far_inside",
        "donor",
        "donor2",
        "seven",
        "visit",
        "leaf",
    ] {
        assert!(
            !info
                .lines()
                .any(|l| l.trim_start().starts_with(&here(name))),
            "{name} is not instrumented\n{info}"
        );
    }
    let trapped: Vec<&str> = trap_fallback_lines(&info)
        .into_iter()
        .filter(|l| l.ends_with(&format!("({})", lib_path.display())))
        .collect();
    assert_eq!(trapped, [here("far_claimed"), here("entry_loop")], "{info}");

    // The program's own counts (callgrind's, in the test above).
    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0);
    for &(name, n) in SHAPE_CALLS
        .iter()
        .chain(&[("main", 1), ("patch_shapes_main", 1)])
    {
        assert_eq!(rep.calls(name), n, "calls of {name}");
    }
}
