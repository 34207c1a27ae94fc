//! Arguments and return values (-A, -R, --max-string) on args.c: every
//! integer size and signedness, hex, chars, strings (long and cut, NULL, an
//! unreadable pointer), floats and doubles, on leaves and on calls with
//! children. Exact lines of the replay (without the duration and task
//! columns).

use fctrace_testkit::*;
use std::path::PathBuf;

fn args_prog() -> PathBuf {
    c_program("args.c", "-O0", &["-O0"])
}

#[track_caller]
fn record_lines(opts: &[&str]) -> Vec<String> {
    let rec = record(&args_prog(), &[], opts);
    call_lines(&replay_text(&rec.dir.path))
}

const LONG: &str = "0123456789012345678901234567890123456789012345678901234567890123";

#[test]
fn integers_chars_floats_and_strings() {
    let lines = record_lines(&[
        "-F",
        "main",
        "-A",
        "sizes@arg1/i8,arg2/u8,arg3/i16,arg4/u16,arg5/i32,arg6/u32,arg7/i64,arg8/u64",
        "-R",
        "sizes@retval/x",
        "-A",
        "put@arg1/c",
        "-R",
        "put@retval/c",
        "-A",
        "slen@arg1/s",
        "-R",
        "slen@retval",
        "-A",
        "opaque@arg1/s",
        "-A",
        "scale@fparg1,fparg2/f32",
        "-R",
        "scale@retval/f64",
        "-A",
        "add@arg1/x,arg2/x",
        "-A",
        "outer@arg1",
        "-R",
        "outer@retval",
        "-A",
        "greet@arg1/s",
        "-R",
        "greet@retval/s",
    ]);
    let sum: u64 = (-1i64 + 255 - 300 + 65535 - 70000 + 4_000_000_000 - 5_000_000_000) as u64;
    let sum = sum.wrapping_add(18_000_000_000_000_000_000);
    let expected = vec![
        "main() {".to_string(),
        "  add(0x2, 0x3);".into(),
        format!(
            "  sizes(-1, 255, -300, 65535, -70000, 4000000000, -5000000000, \
             18000000000000000000) = {sum:#x};"
        ),
        "  put('A') = 'B';".into(),
        "  greet(\"world\") {".into(),
        "    snprintf();".into(),
        "  } = \"hello world\"; /* greet */".into(),
        format!("  slen(\"{LONG}\"...) {{"),
        "    strlen();".into(),
        "  } = 80; /* slen */".into(),
        "  slen(NULL) = -1;".into(),
        "  opaque(0x1);".into(),
        "  scale(1.5, 2.0) = 3.0;".into(),
        "  outer(7) {".into(),
        "    add(0x7, 0x5);".into(),
        "  } = 12; /* outer */".into(),
        "  printf();".into(),
        "} /* main */".into(),
    ];
    assert_eq!(lines, expected);
}

/// The formats without a size, a 32-bit hex and a pointer.
#[test]
fn more_formats() {
    let lines = record_lines(&[
        "-F",
        "main",
        "-N",
        "greet",
        "-N",
        "slen",
        "-N",
        "outer",
        "-A",
        "add@arg1/p,arg2/u",
        "-R",
        "add@retval/i",
        "-A",
        "sizes@arg5/x32,arg7/i,arg8/u",
    ]);
    assert_eq!(lines[1], "  add(0x2, 3) = 5;");
    assert_eq!(
        lines[2],
        format!(
            "  sizes({:#x}, -5000000000, 18000000000000000000);",
            (-70000i32) as u32
        )
    );
}

#[test]
fn default_formats_and_max_string() {
    let lines = record_lines(&[
        "-F",
        "main",
        "--max-string",
        "10",
        "-A",
        "add@arg1,arg2",
        "-R",
        "add@retval",
        "-A",
        "slen@arg1/s",
        "-A",
        "greet@arg1/s",
        "-R",
        "greet@retval/s",
    ]);
    let want = [
        "  add(2, 3) = 5;",
        "  slen(\"0123456789\"...) {",
        "  slen(NULL);",
        "  greet(\"world\") {",
        "  } = \"hello worl\"...; /* greet */",
        "    add(7, 5) = 12;",
    ];
    for w in want {
        assert!(
            lines.iter().any(|l| l == w),
            "no line {w:?} in\n{}",
            lines.join("\n")
        );
    }
}

/// Without argument specs nothing changes: no values, the same lines.
#[test]
fn no_specs_no_values() {
    let lines = record_lines(&["-F", "main"]);
    assert!(
        lines.iter().any(|l| l == "  add();"),
        "{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().all(|l| !l.contains(" = ")),
        "{}",
        lines.join("\n")
    );
}

#[test]
fn bad_specs_are_errors() {
    // (`-A add` alone is uftrace's: every argument, typed from DWARF.)
    for bad in ["add@arg0", "add@fparg1/s", "add@arg1/q", "add@arg1,bogus"] {
        let r = fctrace(&[
            "record",
            "-d",
            "/nonexistent/never-created",
            "-A",
            bad,
            "/bin/true",
        ]);
        assert!(!r.success(), "{bad}: {}", r.describe());
        assert!(r.stderr.contains(bad), "{bad}: {}", r.describe());
    }
}

/// Hex numbers of 5 digits or more (addresses, which change from run to
/// run) become `0xADDR`.
fn without_addresses(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        let n = tail
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(tail.len());
        if n >= 5 {
            out.push_str("0xADDR");
        } else {
            out.push_str(&rest[i..i + 2 + n]);
        }
        rest = &tail[n..];
    }
    out.push_str(rest);
    out
}

/// -a on autoargs.c built with -g at -O0 and -O2: types from DWARF (enums,
/// bool, char, float and double, strings, structs by value in registers,
/// in two kinds of registers, on the stack, returned in registers and in
/// memory, by pointer), the 8th argument on the stack, and libc's
/// functions from the built-in prototypes.
#[test]
fn auto_args_from_dwarf_and_prototypes() {
    let expected = [
        "main() {",
        "  pick(GREEN) = RED;",
        "  pick(RED) = BLUE;",
        "  add(2, 3) = 5;",
        "  is_even(4) = true;",
        "  upper('a') = 'A';",
        "  scale(1.5, 2.0) = 3.0;",
        "  norm1({x: -3, y: 4}) {",
        "    abs(-3) = 3;",
        "    abs(4) = 4;",
        "  } = 7; /* norm1 */",
        "  mid({a: {x: 0, y: 0}, b: {x: 10, y: 20}}) = {x: 5, y: 10};",
        "  weigh({d: 0.5, i: 4}) = 2.0;",
        "  total({a: 1, b: 2, c: 3}) = 6;",
        "  move_by(0xADDR, 1);",
        "  make_big(7) = {a: 7, b: 8, c: 9};",
        "  name_of(BLUE) = \"blue\";",
        "  many(1, 2, 3, 4, 5, 6, 7, -8) = 20;",
        "  malloc(16) = 0xADDR;",
        "  strcpy(0xADDR, \"abc\") = 0xADDR;",
        "  strlen(\"abc\") = 3;",
        "  free(0xADDR);",
        "  open(\"/dev/null\", 0) = 3;",
        "  close(3) = 0;",
        "  printf(\"auto: %ld\\n\") = 10;",
        "} = 0; /* main */",
    ];
    for opt in ["-O0", "-O2"] {
        let exe = c_program(
            "autoargs.c",
            &format!("-g{opt}"),
            &["-g", opt, "-fno-builtin"],
        );
        let rec = record(&exe, &[], &["-a", "-F", "main"]);
        let lines: Vec<String> = call_lines(&replay_text(&rec.dir.path))
            .iter()
            .map(|l| without_addresses(l))
            .collect();
        assert_eq!(lines, expected, "{opt}");
    }
}

/// -a -l: libc's functions are traced inside libc too, and show their
/// values from the prototypes under their libc names (`__close`).
#[test]
fn auto_args_with_nest_libcall() {
    let exe = c_program("autoargs.c", "-g-O0", &["-g", "-O0", "-fno-builtin"]);
    let rec = record(&exe, &[], &["-a", "-l", "-F", "main"]);
    let lines: Vec<String> = call_lines(&replay_text(&rec.dir.path))
        .iter()
        .map(|l| without_addresses(l))
        .collect();
    // The program's first malloc sets up the C library's heap (the agent
    // allocates from memory of its own): it may show the calls that does.
    let malloc_leaf = lines.iter().any(|l| l == "  malloc(16) = 0xADDR;");
    let malloc_open = lines.iter().position(|l| l == "  malloc(16) {");
    let malloc_close = lines.iter().position(|l| l == "  } = 0xADDR; /* malloc */");
    assert!(
        malloc_leaf || matches!((malloc_open, malloc_close), (Some(a), Some(b)) if a < b),
        "no malloc(16) returning its address in\n{}",
        lines.join("\n")
    );
    for want in ["  strlen(\"abc\") = 3;", "  printf(\"auto: %ld\\n\") {"] {
        assert!(
            lines.iter().any(|l| l == want),
            "no {want:?} in\n{}",
            lines.join("\n")
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  open(\"/dev/null\", 0) = ")),
        "{}",
        lines.join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("close(") && l.ends_with(") = 0;")),
        "{}",
        lines.join("\n")
    );
}

/// -a on a C++ program built with -g: `this` and references as
/// addresses, classes by value with their fields, templates; the
/// parameter list of the name gives way to the values.
#[test]
fn auto_args_cpp() {
    let exe = cxx_program("tree.cpp", "-g-O0", &["-g", "-O0"]);
    let rec = record(&exe, &["basic"], &["-a", "-F", "run_basic"]);
    let lines: Vec<String> = call_lines(&replay_text(&rec.dir.path))
        .iter()
        .map(|l| without_addresses(l))
        .collect();
    for want in [
        "  geo::Rect::Rect(0xADDR, 1, 2, 3) {",
        "    geo::Shape::Shape(0xADDR, 1);",
        "  geo::total_area(0xADDR, 0xADDR) {",
        "    geo::Rect::area(0xADDR) = 6;",
        "  } = 22; /* geo::total_area(geo::Shape const&, geo::Shape const&) */",
        "  int geo::twice<int>(5) = 10;",
        "  geo::Vec2 geo::twice<geo::Vec2>({x: 4, y: 6}) {",
        "  geo::Vec2::operator==(0xADDR, 0xADDR) = false;",
    ] {
        assert!(
            lines.iter().any(|l| l == want),
            "no {want:?} in\n{}",
            lines.join("\n")
        );
    }
}

/// 30,000 calls with arguments and return values, strings of every length
/// up to 99 bytes: the payloads cross many buffer boundaries (64 KiB
/// buffers) and each call's values are its own, in order.
#[test]
fn many_calls_across_buffers() {
    let n = 30_000u64;
    let rec = record(
        &args_prog(),
        &["loop", &n.to_string()],
        &[
            "-F",
            "loop",
            "--max-string",
            "200",
            "-A",
            "add@arg1,arg2",
            "-R",
            "add@retval",
            "-A",
            "opaque@arg1/s",
            "-R",
            "opaque@retval",
        ],
    );
    let lines = call_lines(&replay_text(&rec.dir.path));
    let calls: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("  add(") || l.starts_with("  opaque("))
        .collect();
    assert_eq!(
        calls.len() as u64,
        2 * n,
        "{}",
        lines[..20.min(lines.len())].join("\n")
    );
    for i in 0..n {
        let add = format!("  add({i}, {}) = {};", i + 1, 2 * i + 1);
        assert_eq!(calls[2 * i as usize], &add);
        let len = (i % 100) as usize;
        let text: String = std::iter::repeat_n((b'a' + (i % 26) as u8) as char, len).collect();
        let opaque = format!("  opaque(\"{text}\") = 1;");
        assert_eq!(calls[2 * i as usize + 1], &opaque);
    }
}

#[test]
fn specs_naming_no_function_are_warned_about_as_filters_are() {
    // Live mode warns about -F, -N, -C and -T patterns that name no
    // function of the trace; -A and -R specs too (by the option given).
    let exe = args_prog();
    let r = fctrace(&[
        "-A",
        "no_such_function@arg1",
        "-R",
        "nope.*zz@retval",
        "-A",
        "sizes@arg1",
        "-R",
        "slen@retval",
        "-N",
        "no_such_filter",
        exe.to_str().unwrap(),
    ]);
    assert!(r.success(), "{}", r.describe());
    for missing in [
        "-A no_such_function@arg1",
        "-R nope.*zz@retval",
        "-N no_such_filter",
    ] {
        assert!(
            r.stderr
                .contains(&format!("{missing} matches no function of the trace")),
            "{missing}\n{}",
            r.describe()
        );
    }
    assert_eq!(
        r.stderr.matches("matches no function").count(),
        3,
        "{}",
        r.describe()
    );
}
