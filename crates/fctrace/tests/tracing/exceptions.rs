//! exceptions.cpp: C++ exceptions thrown through several traced frames,
//! caught higher up, rethrown (`throw;`), caught by nested try blocks, with
//! a destructor run by a cleanup landing pad (then `_Unwind_Resume`), and
//! one that escapes to std::terminate.
//!
//! The trees are written from the source and the Itanium C++ ABI: a
//! `throw` is `__cxa_allocate_exception` then `__cxa_throw`, which never
//! returns (unwound); a catch starts with `__cxa_begin_catch` and ends with
//! `__cxa_end_catch` (also on the way out of a catch block left by an
//! exception, from that frame's cleanup pad); a frame with something to
//! destroy runs it in a cleanup pad and goes on with `_Unwind_Resume`
//! (unwound); `throw;` is `__cxa_rethrow` (unwound). Every function is
//! noipa, so -O0 and -O2 make the same calls.

use fctrace_testkit::*;
use std::path::PathBuf;
use std::process::Command;

fn exe(opt: &str) -> PathBuf {
    cxx_program("exceptions.cpp", opt, &[opt])
}

const TREE_STDOUT: &str =
    "guard 3 released\nlevel1 saw 3\ninner caught 3\nouter caught 30\nresult 31\n";

/// One round of run_round(3), from the source.
const ROUND_TREE: &str = "
    main()
      strcmp()
      run_round(int)
        nested(int)
          level1(int) (unwound)
            level2(int) (unwound)
              level3(int) (unwound)
                Guard::Guard(int)
                thrower(int) (unwound)
                  __cxa_allocate_exception()
                  __cxa_throw() (unwound)
                Guard::~Guard()
                  printf()
                _Unwind_Resume() (unwound)
            __cxa_begin_catch()
            printf()
            __cxa_rethrow() (unwound)
            __cxa_end_catch()
            _Unwind_Resume() (unwound)
          __cxa_begin_catch()
          printf()
          __cxa_allocate_exception()
          __cxa_throw() (unwound)
          __cxa_end_catch()
          __cxa_begin_catch()
          printf()
          __cxa_end_catch()
        after(int)
      printf()
    ";

#[test]
fn exceptions_tree() {
    for opt in ["-O0", "-O2"] {
        let exe = exe(opt);
        let native = run_native(&exe, &["tree"]);
        assert_eq!(native.stdout, TREE_STDOUT);
        let rec = record(&exe, &["tree"], &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let replay = replay(&rec.dir.path);
        assert_outline_eq(
            &outline(std::slice::from_ref(replay.main())),
            &expected_outline(ROUND_TREE),
            &format!("exceptions.cpp {opt} (trace {})", rec.dir.path.display()),
        );
    }
}

/// Many rounds: the counts equal callgrind's (each function's calls, the
/// unwound ones included), nothing is lost, the output is the program's.
#[test]
fn exceptions_counts_match_callgrind() {
    for opt in ["-O0", "-O2"] {
        let exe = exe(opt);
        let args = ["loop", "2000"];
        let native = run_native(&exe, &args);
        let (rep, _) = assert_counts_match_callgrind(&exe, &args, &CompareOptions::default());
        // By the source: 2000 rounds, each throws twice (one rethrow).
        assert_eq!(rep.calls("run_round(int)"), 2000);
        assert_eq!(rep.calls("thrower(int)"), 2000);
        assert_eq!(rep.calls("__cxa_throw"), 4000);
        assert_eq!(rep.calls("__cxa_rethrow"), 2000);
        assert_eq!(rep.calls("__cxa_begin_catch"), 6000);
        assert_eq!(rep.calls("__cxa_end_catch"), 6000);
        let rec = record(&exe, &args, &[]);
        assert_same_behaviour(&native, &rec.run, opt);
    }
}

/// An exception no handler catches: std::terminate prints its message and
/// aborts. Under fctrace the same message, the same signal (fctrace record
/// dies by it too), and the trace up to the throw is readable: the frames
/// still open when the program died shown as such, the SIGABRT marked
/// inside __cxa_throw (std::terminate and abort are libstdc++'s and libc's
/// inner calls, not traced without -l).
#[test]
fn exception_escaping_to_terminate() {
    for opt in ["-O0", "-O2"] {
        let exe = exe(opt);
        let native = run(Command::new(&exe).arg("terminate"));
        assert_eq!(
            native.signal(),
            Some(libc::SIGABRT),
            "{}",
            native.describe()
        );
        assert_eq!(native.stdout, "about to throw 5\n");
        assert_eq!(
            native.stderr,
            "terminate called after throwing an instance of 'Err'\n"
        );
        // fctrace dies by the same SIGABRT.
        let rec = record_any(&exe, &["terminate"], &[]);
        assert_same_behaviour(&native, &rec.run, opt);
        let (text, replay) = replay_calls(&rec.dir.path);
        // The one marker, inside __cxa_throw (depth 4).
        assert_eq!(
            marker_lines(text.lines()),
            [(4, "/* signal SIGABRT */")],
            "{opt}\n{text}"
        );
        assert_outline_eq(
            &outline(std::slice::from_ref(replay.main())),
            &expected_outline(
                "
                main() (open)
                  strcmp()
                  printf()
                  fflush()
                  doomed(int) (open)
                    Guard::Guard(int)
                    thrower(int) (open)
                      __cxa_allocate_exception()
                      __cxa_throw() (open)
                ",
            ),
            &format!(
                "exceptions.cpp {opt} terminate (trace {})",
                rec.dir.path.display()
            ),
        );
        let rep = report(&rec.dir.path);
        assert_eq!(rep.lost_events, 0);
        assert_eq!(rep.calls("doomed(int)"), 1);
        assert!(info_text(&rec.dir.path).contains("exceptions_cpp"));
    }
}
