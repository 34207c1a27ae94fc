//! tree.cpp: the call tree of the program's own functions at -O0 (classes,
//! virtual calls, templates, a namespace, operators, constructors and
//! destructors, an exception), names as c++filt prints them, and call counts
//! equal to callgrind's at -O0 and -O2.
//!
//! At -O0 every inline member function and every std:: template used is a
//! real function of the executable (std::vector<int>'s internals among them,
//! which depend on the libstdc++ version): the trees keep only the program's
//! own functions and the libc calls main makes, lifting the rest out
//! ([`project`]); the order of calls gcc chose where C++ leaves it open
//! (operands of `+`, printf's arguments) was read from objdump: left operand
//! first, `s.id()` before printf.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn tree_cpp(opt: &str) -> PathBuf {
    cxx_program("tree.cpp", opt, &[opt])
}

const BASIC_STDOUT: &str = "cpp: area=22 c=(4,6) d=10 e=(8,12) same=0 n=3 last=44 id=2\n";
const EXCEPTIONS_STDOUT: &str = "cpp: guard 7 released\ncpp: caught too big\ncpp: got=0\n";

/// The program's own functions and main's libc calls.
fn own(label: &str) -> bool {
    label.contains("geo::")
        || [
            "main()",
            "run_basic()",
            "run_exceptions()",
            "printf()",
            "strcmp()",
        ]
        .contains(&label)
}

fn own_tree(exe: &Path, mode: &str, stdout: &str) -> (String, Recorded) {
    let rec = record(exe, &[mode], &[]);
    assert_eq!(
        rec.run.stdout,
        stdout,
        "program output through record\n{}",
        rec.run.describe()
    );
    let replay = replay(&rec.dir.path);
    let main = replay.main();
    (outline(&project(std::slice::from_ref(main), &own)), rec)
}

#[test]
fn cpp_o0_basic_tree() {
    let exe = tree_cpp("-O0");
    assert_eq!(run_native(&exe, &["basic"]).stdout, BASIC_STDOUT);
    let (actual, rec) = own_tree(&exe, "basic", BASIC_STDOUT);
    let expected = expected_outline(
        "
        main()
          strcmp()
          run_basic()
            geo::Rect::Rect(int, int, int)
              geo::Shape::Shape(int)
            geo::Square::Square(int, int)
              geo::Rect::Rect(int, int, int)
                geo::Shape::Shape(int)
            geo::total_area(geo::Shape const&, geo::Shape const&)
              geo::Rect::area() const
              geo::Square::area() const
                geo::Rect::area() const
            geo::Vec2::Vec2(int, int)
            geo::Vec2::Vec2(int, int)
            geo::Vec2::operator+(geo::Vec2 const&) const
              geo::Vec2::Vec2(int, int)
            int geo::twice<int>(int)
            geo::Vec2 geo::twice<geo::Vec2>(geo::Vec2)
              geo::Vec2::operator+(geo::Vec2 const&) const
                geo::Vec2::Vec2(int, int)
            geo::Vec2::operator==(geo::Vec2 const&) const
            geo::Shape::id() const
            printf()
            geo::Square::~Square()
              geo::Rect::~Rect()
                geo::Shape::~Shape()
            geo::Rect::~Rect()
              geo::Shape::~Shape()
        ",
    );
    assert_outline_eq(
        &actual,
        &expected,
        &format!("tree.cpp -O0 basic (trace {})", rec.dir.path.display()),
    );
}

/// inner throws, middle's Guard is destroyed during unwinding (from
/// middle's landing pad, so under middle), run_exceptions catches; then
/// ordinary calls nest under run_exceptions again. middle and inner never
/// return normally: unwound.
#[test]
fn cpp_o0_exception_tree() {
    let exe = tree_cpp("-O0");
    assert_eq!(run_native(&exe, &["exceptions"]).stdout, EXCEPTIONS_STDOUT);
    let (actual, rec) = own_tree(&exe, "exceptions", EXCEPTIONS_STDOUT);
    let expected = expected_outline(
        "
        main()
          strcmp()
          run_exceptions()
            geo::middle(int) (unwound)
              geo::Guard::Guard(int)
              geo::inner(int) (unwound)
              geo::Guard::~Guard()
                printf()
            printf()
            geo::inner(int)
            printf()
        ",
    );
    assert_outline_eq(
        &actual,
        &expected,
        &format!("tree.cpp -O0 exceptions (trace {})", rec.dir.path.display()),
    );
}

/// c++filt's names for raw symbols, in order.
fn cxxfilt(symbols: &[&str]) -> Vec<String> {
    let args: Vec<&OsStr> = symbols.iter().map(OsStr::new).collect();
    let r = tool("c++filt", &args);
    let out: Vec<String> = r.stdout.lines().map(str::to_string).collect();
    assert_eq!(out.len(), symbols.len());
    out
}

/// Every function's `name` is c++filt's rendering of its `symbol`, and the
/// report knows the program's functions by those names.
#[test]
fn cpp_names_are_demangled_like_cxxfilt() {
    for opt in ["-O0", "-O2"] {
        let exe = tree_cpp(opt);
        let rec = record(&exe, &["basic"], &[]);
        let rep = report(&rec.dir.path);
        let own: Vec<&FnStat> = rep.functions_of(&exe);
        let syms: Vec<&str> = own.iter().map(|f| f.symbol.as_str()).collect();
        let want = cxxfilt(&syms);
        let bad: Vec<String> = own
            .iter()
            .zip(&want)
            .filter(|(f, w)| f.name != **w)
            .map(|(f, w)| format!("{}: name {:?}, c++filt says {:?}", f.symbol, f.name, w))
            .collect();
        assert!(
            bad.is_empty(),
            "{opt}: names differ from c++filt's:\n{}",
            bad.join("\n")
        );
        if opt == "-O0" {
            let f = rep
                .function("geo::Vec2::operator+(geo::Vec2 const&) const")
                .expect("operator+ in the report");
            assert_eq!(f.symbol, "_ZNK3geo4Vec2plERKS0_");
            assert_eq!(f.calls, 2);
            assert_eq!(rep.calls("geo::Rect::area() const"), 2);
            assert_eq!(rep.calls("geo::Shape::~Shape()"), 2);
            assert_eq!(rep.calls("int geo::twice<int>(int)"), 1);
        }
        // Library calls are reported with the library as module.
        let printf = rep.function("printf").expect("printf in the report");
        assert!(
            Path::new(&printf.module)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("libc.so"),
            "{printf:?}"
        );
    }
}

#[test]
fn cpp_o0_counts_match_callgrind() {
    let exe = tree_cpp("-O0");
    for mode in ["basic", "exceptions"] {
        assert_counts_match_callgrind(&exe, &[mode], &CompareOptions::default());
    }
}

#[test]
fn cpp_o2_counts_match_callgrind() {
    let exe = tree_cpp("-O2");
    for mode in ["basic", "exceptions"] {
        assert_eq!(
            run_native(&exe, &[mode]).stdout,
            if mode == "basic" {
                BASIC_STDOUT
            } else {
                EXCEPTIONS_STDOUT
            }
        );
        assert_counts_match_callgrind(&exe, &[mode], &CompareOptions::default());
    }
}
