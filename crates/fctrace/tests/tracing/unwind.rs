//! unwind.c: longjmp out of three frames. The frames it leaves never
//! return: replay marks them ` (unwound)`, and the calls main makes after
//! setjmp's second return nest under main again.

use fctrace_testkit::*;

const STDOUT: &str = "unwind: got=4 r=12\n";

#[test]
fn longjmp_frames_are_unwound() {
    for opt in ["-O0", "-O2"] {
        let exe = c_program("unwind.c", opt, &[opt]);
        assert_eq!(run_native(&exe, &[]).stdout, STDOUT);
        let rec = record(&exe, &[], &[]);
        assert_eq!(rec.run.stdout, STDOUT, "{}", rec.run.describe());
        let replay = replay(&rec.dir.path);
        let expected = expected_outline(
            "
            main()
              _setjmp()
              outer() (unwound)
                middle() (unwound)
                  deepest() (unwound)
                    longjmp() (unwound)
              after()
              printf()
            ",
        );
        assert_outline_eq(
            &outline(std::slice::from_ref(replay.main())),
            &expected,
            &format!("unwind.c {opt} (trace {})", rec.dir.path.display()),
        );
    }
}

#[test]
fn longjmp_counts_match_callgrind() {
    for opt in ["-O0", "-O2"] {
        assert_counts_match_callgrind(
            &c_program("unwind.c", opt, &[opt]),
            &[],
            &CompareOptions::default(),
        );
    }
}
