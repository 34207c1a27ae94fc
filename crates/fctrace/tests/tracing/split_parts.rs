//! Parts split off a function (BOLT's `.warm` and `.cold`, GCC's `.cold`)
//! are entered by a jump from it, not called: they are not traced as
//! functions. split_parts.c's split_parent jumps to split_parent.warm,
//! which reads the parent's local at the top of the stack: patched as a
//! function, its stub took that local for a return address (rustc
//! compiling with -l aborted so, in librustc_driver's BOLT parts).

use fctrace_testkit::*;

#[test]
fn a_warm_part_is_no_function() {
    let exe = c_program("split_parts.c", "-O1", &["-O1"]);
    let native = run_native(&exe, &[]);
    // split_parent(21) = 21 (its local) + 21 (rbx).
    assert_eq!(native.stdout, "42\n", "{}", native.describe());
    let rec = record(&exe, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "traced");
    let rep = report(&rec.dir.path);
    assert_eq!(rep.calls("split_parent"), 1, "{:?}", rep.calls_by_name());
    assert!(
        rep.functions.iter().all(|f| !f.symbol.contains(".warm")),
        "a .warm part reported as a function: {:?}",
        rep.calls_by_name()
    );
    assert!(
        !info_text(&rec.dir.path).contains("split_parent.warm"),
        "the .warm part is listed as a function"
    );
}
