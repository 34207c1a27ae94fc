//! A program that embeds V8 (node) is not instrumented: V8's stack walker
//! reads the return address of every C++ function its generated code
//! calls, and fctrace's stubs would be there instead (`node -e 1` died in
//! the agent, `JSON.parse` of bad input in V8). Such a module is known by
//! V8's builtins' symbols (`Builtins_*`); v8_named.c has one. The program
//! runs as without fctrace, fctrace says why it traces nothing of it, and
//! with -l its libraries are traced.

use fctrace_testkit::*;

#[test]
fn a_v8_embedder_runs_untraced_and_is_named() {
    let exe = c_program("v8_named.c", "-O1", &["-O1"]);
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "42\n", "{}", native.describe());
    for opts in [&[][..], &["-l"][..]] {
        let rec = record_any(&exe, &[], opts);
        assert_eq!(
            rec.run.stdout,
            native.stdout,
            "{opts:?}: {}",
            rec.run.describe()
        );
        assert!(rec.run.success(), "{opts:?}: {}", rec.run.describe());
        assert!(
            rec.run
                .stderr
                .contains(" embeds V8, whose stack walker reads the return address"),
            "{opts:?}: {}",
            rec.run.describe()
        );
        let rep = report(&rec.dir.path);
        for f in ["main", "work", "Builtins_Example"] {
            assert_eq!(
                rep.calls(f),
                0,
                "{opts:?}: {f} traced: {:?}",
                rep.calls_by_name()
            );
        }
        if opts.is_empty() {
            assert_eq!(rep.events, 0, "{:?}", rep.calls_by_name());
        } else {
            // libc's own functions are traced with -l (printf's work).
            assert!(rep.events > 0, "{opts:?}: nothing traced");
        }
    }
}
