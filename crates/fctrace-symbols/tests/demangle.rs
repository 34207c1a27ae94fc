//! `demangle` against `c++filt` and known Rust names.
#![cfg(feature = "demangle")]

use std::io::Write;
use std::process::{Command, Stdio};

use fctrace_symbols::demangle;

/// `c++filt`'s rendering of each name (one per line).
fn cxxfilt(names: &[String]) -> Vec<String> {
    let mut child = Command::new("c++filt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running c++filt");
    let mut stdin = child.stdin.take().unwrap();
    let input = names.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let out: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(out.len(), names.len());
    out
}

const CXX_NAMES: &[&str] = &[
    "_Z3foov",
    "_Z3foov.part.0",
    "_Z3barv.cold",
    "_Z3bazi.constprop.0.isra.0",
    "_Z5twiceIiET_S0_",
    "_Z5twiceIdET_S0_",
    "_ZN3geo3lenERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZNSt6vectorIiSaIiEE9push_backERKi",
    "_ZNKSt5ctypeIcE13_M_widen_initEv",
    "_ZN6SquareD0Ev",
    "_ZNK6Square5sidesEv",
    "_ZTV6Square",
    "_ZSt4cout",
    "_ZZ4mainE5count",
    "_ZNSt8_Rb_treeINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS5_mESt10_Select1stIS8_ESt4lessIS5_ESaIS8_EE8_M_eraseEPSt13_Rb_tree_nodeIS8_E",
    "_ZN9__gnu_cxx13new_allocatorIcE8allocateEmPKv",
    "_ZdlPvm",
    "_Znwm",
    "_ZThn8_N3Foo3barEv",
    "_GLOBAL__sub_I_main",
    "main",
    "_start",
];

#[test]
fn cplusplus_like_cxxfilt() {
    let names: Vec<String> = CXX_NAMES.iter().map(|s| s.to_string()).collect();
    let expected = cxxfilt(&names);
    for (raw, want) in names.iter().zip(&expected) {
        assert_eq!(&demangle(raw), want, "{raw}");
    }
    assert_eq!(demangle("_Z3foov.part.0"), "foo() [clone .part.0]");
}

/// Compares `demangle` with c++filt on every mangled function name of each
/// library present; returns (names, differences).
fn compare_libraries(libs: &[&str]) -> (usize, Vec<String>) {
    let mut total = 0;
    let mut diffs = Vec::new();
    for lib in libs {
        let path = std::path::Path::new(lib);
        if !path.exists() {
            eprintln!("not compared: no {lib}");
            continue;
        }
        let info = fctrace_symbols::read_file(path).unwrap();
        let names: Vec<String> = info
            .functions
            .iter()
            .flat_map(|f| std::iter::once(f.name.clone()).chain(f.aliases.iter().cloned()))
            .filter(|n| n.starts_with("_Z"))
            .collect();
        let expected = cxxfilt(&names);
        let before = diffs.len();
        for (raw, want) in names.iter().zip(&expected) {
            let got = demangle(raw);
            if &got != want {
                diffs.push(format!("{raw}\n  ours:     {got}\n  c++filt:  {want}"));
            }
        }
        eprintln!(
            "{lib}: {} names, {} differ",
            names.len(),
            diffs.len() - before
        );
        total += names.len();
    }
    (total, diffs)
}

/// Every mangled function name exported by libstdc++ and libicui18n renders exactly
/// as c++filt renders it.
#[test]
fn cxx_library_exports_like_cxxfilt() {
    let libs = [
        ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "libstdc++6"),
        ("/usr/lib/x86_64-linux-gnu/libicui18n.so.72", "libicu72"),
    ];
    for (lib, package) in libs {
        assert!(
            std::path::Path::new(lib).exists(),
            "no {lib}: apt-get install {package} (or run ./scripts/test, which installs it)"
        );
    }
    let (total, diffs) = compare_libraries(&libs.map(|(lib, _)| lib));
    assert!(total > 1000);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Heavy template code (LLVM, clang): about 1% differ, mostly pack
/// expansions (`DpRKT_`), which cpp_demangle renders wrongly, and
/// expressions in template arguments. Slow (60k names):
/// `cargo test -p fctrace-symbols --test demangle -- --ignored`.
/// More libraries: `FCTRACE_DEMANGLE_LIBS=/a.so:/b.so`.
#[test]
#[ignore]
fn heavy_template_libraries_mostly_like_cxxfilt() {
    let extra = std::env::var("FCTRACE_DEMANGLE_LIBS").unwrap_or_default();
    let mut libs = vec![
        "/usr/lib/x86_64-linux-gnu/libapt-pkg.so.6.0",
        "/usr/lib/x86_64-linux-gnu/libicuuc.so.72",
        "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
        "/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14",
    ];
    libs.extend(extra.split(':').filter(|s| !s.is_empty()));
    let (total, diffs) = compare_libraries(&libs);
    for d in diffs.iter().take(10) {
        eprintln!("{d}");
    }
    eprintln!("{total} names, {} differ", diffs.len());
    assert!(diffs.len() * 50 <= total, "more than 2% differ");
}

#[test]
fn rust_names() {
    assert_eq!(
        demangle("_ZN3std2rt10lang_start17h0123456789abcdefE"),
        "std::rt::lang_start"
    );
    assert_eq!(
        demangle("_ZN59_$LT$core..fmt..Arguments$u20$as$u20$core..fmt..Display$GT$3fmt17h2e1d3a8b6f0c4d5eE"),
        "<core::fmt::Arguments as core::fmt::Display>::fmt"
    );
    // v0, with a generic and the crate disambiguator.
    assert_eq!(
        demangle("_RNvCs15kBYyAo9fc_7mycrate7example"),
        "mycrate::example"
    );
    assert_eq!(
        demangle("_RINvNtCs1234_4core3ptr13drop_in_placeNtCs5678_5hello4BlobEB4_"),
        "core::ptr::drop_in_place::<hello::Blob>"
    );
    // Not mangled / not valid: unchanged.
    for s in ["main", "_ZN3foo", "_R", "puts", "_Z"] {
        assert_eq!(demangle(s), s);
    }
}
