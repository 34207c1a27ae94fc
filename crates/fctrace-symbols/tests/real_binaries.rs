//! fctrace-symbols against real binaries built by gcc / g++ / rustc during the
//! test, and the system's libc. Cross-checked with nm and objdump.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use fctrace_symbols::{analyze, read_file, ElfInfo, ElfKind, FuncSym};
use object::read::elf::{FileHeader, SectionHeader};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int inc(int x) { return x + 1; }

static __attribute__((noinline)) int square(int x) { return x * x; }

__attribute__((cold, noinline)) void report(const char *m) { fprintf(stderr, "error: %s\n", m); }

__attribute__((noinline, noreturn)) void die(const char *m) {
    report(m);
    exit(3);
}

__attribute__((noinline)) int work(const int *a, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        if (__builtin_expect(a[i] < 0, 0)) {
            report("negative");
            fprintf(stderr, "at %d\n", i);
            abort();
        }
        s += square(a[i]);
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc > 100)
        die("too many arguments");
    char *p = malloc(strlen(argv[0]) + 1);
    strcpy(p, argv[0]);
    int a[3] = {argc, 2, 3};
    printf("%zu %d %d\n", strlen(p), inc(argc), work(a, 3));
    puts(p);
    free(p);
    return 0;
}
"#;

struct Built {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

/// Compile `src` (C, or C++ with `cxx`) with `flags`; None if the compiler
/// cannot link it (the reason is printed).
fn build(src: &str, cxx: bool, flags: &[&str]) -> Option<Built> {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join(if cxx { "prog.cc" } else { "prog.c" });
    std::fs::write(&source, src).unwrap();
    let path = dir.path().join("prog");
    let out = Command::new(if cxx { "g++" } else { "gcc" })
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&path)
        .output()
        .expect("running gcc");
    if !out.status.success() {
        eprintln!(
            "cannot build with {flags:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(Built { _dir: dir, path })
}

fn run(cmd: &str, args: &[&str], path: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?} {}", path.display());
    String::from_utf8(out.stdout).unwrap()
}

/// Allocated executable sections of the file: name -> (start, end).
fn exec_sections(data: &[u8]) -> BTreeMap<String, (u64, u64)> {
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, data).unwrap();
    let mut out = BTreeMap::new();
    for sh in sections.iter() {
        let flags = sh.sh_flags(endian).0;
        if flags & object::elf::SHF_EXECINSTR.0 != 0 && flags & object::elf::SHF_ALLOC.0 != 0 {
            let name = String::from_utf8_lossy(sections.section_name(endian, sh).unwrap());
            let start = sh.sh_addr(endian);
            out.insert(name.into_owned(), (start, start + sh.sh_size(endian)));
        }
    }
    out
}

fn in_exec(sections: &BTreeMap<String, (u64, u64)>, addr: u64) -> bool {
    sections.values().any(|&(s, e)| addr >= s && addr < e)
}

/// Basic invariants of any analysis.
fn check_invariants(info: &ElfInfo, data: &[u8]) {
    let sections = exec_sections(data);
    for w in info.functions.windows(2) {
        assert!(
            w[0].addr < w[1].addr,
            "sorted, unique: {:?} {:?}",
            w[0],
            w[1]
        );
    }
    for f in &info.functions {
        assert!(f.addr != 0);
        assert!(in_exec(&sections, f.addr), "{f:?} not in an exec section");
        // Unnamed: a function of a stripped file found from its FDE,
        // whose size is the FDE's length.
        assert!(!f.name.contains('@'), "{f:?}");
        assert!(
            !f.name.is_empty() || (f.size > 0 && !info.has_symtab),
            "{f:?}"
        );
        assert!(!f.name.contains(".cold") && !f.aliases.iter().any(|a| a.contains(".cold")));
        assert!(!f.aliases.contains(&f.name));
        if f.size == 0 {
            assert_eq!(f.pad_end, f.addr, "{f:?}");
        } else {
            assert!(f.pad_end >= f.end(), "{f:?}");
            assert!(f.pad_end - f.end() < 256, "{f:?}");
        }
        let (s, e) = sections[&*f.section];
        assert!(f.addr >= s && f.addr < e, "{f:?}");
    }
    for w in info.plt.windows(2) {
        assert!(w[0].addr < w[1].addr);
    }
    for p in &info.plt {
        assert!(in_exec(&sections, p.addr), "{p:?}");
        assert!(!p.name.contains('@'));
    }
    for w in info.got_imports.windows(2) {
        assert!(w[0].got < w[1].got);
    }
    let plt_slots: HashSet<u64> = info.plt.iter().map(|p| p.got).collect();
    for g in &info.got_imports {
        assert!(!plt_slots.contains(&g.got), "{g:?} also has a PLT entry");
    }
}

/// Every text symbol nm lists (T/t/W/i in an executable section), except
/// `.cold` parts, is a function name or alias.
fn check_against_nm(info: &ElfInfo, path: &Path, data: &[u8]) {
    let sections = exec_sections(data);
    let names: HashSet<&str> = info
        .functions
        .iter()
        .flat_map(|f| std::iter::once(f.name.as_str()).chain(f.aliases.iter().map(|a| a.as_str())))
        .collect();
    let mut checked = 0;
    let mut colds = 0;
    for args in [&["--defined-only"][..], &["-D", "--defined-only"]] {
        for line in run("nm", args, path).lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [addr, ty, name] = parts[..] else {
                continue;
            };
            if !matches!(ty, "T" | "t" | "W" | "i") {
                continue;
            }
            let addr = u64::from_str_radix(addr, 16).unwrap();
            if !in_exec(&sections, addr) {
                continue; // e.g. `W data_start`
            }
            let name = name.split('@').next().unwrap();
            if name.contains(".cold") {
                colds += 1;
                assert!(!names.contains(name), "{name} must be excluded");
                continue;
            }
            assert!(names.contains(name), "{}: nm has {line}", path.display());
            checked += 1;
        }
    }
    eprintln!(
        "{}: {checked} nm text symbols found, {colds} .cold excluded",
        path.display()
    );
    assert!(checked > 0);
}

/// objdump's disassembly of the executable sections: address -> (length,
/// instruction text).
fn disassemble(path: &Path) -> BTreeMap<u64, (u64, String)> {
    let text = run("objdump", &["-d", "-w", "--insn-width=16", "-z"], path);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        // "    1130:\t48 83 ec 08          \tsub    $0x8,%rsp"
        let mut cols = line.split('\t');
        let (Some(addr), Some(bytes)) = (cols.next(), cols.next()) else {
            continue;
        };
        let Some(addr) = addr.trim().strip_suffix(':') else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let len = bytes.split_whitespace().count() as u64;
        let insn = cols.next().unwrap_or("").trim().to_string();
        out.insert(addr, (len, insn));
    }
    out
}

fn is_padding_insn(insn: &str) -> bool {
    let words: Vec<&str> = insn.split_whitespace().collect();
    let mnemonic = words
        .iter()
        .find(|w| !matches!(**w, "data16" | "cs"))
        .copied()
        .unwrap_or("");
    matches!(mnemonic, "nop" | "nopl" | "nopw" | "int3")
        || insn.starts_with("xchg   %ax,%ax")
        || (words.first() == Some(&"data16") && insn.contains("xchg   %ax,%ax"))
}

/// The bytes in `[addr+size, pad_end)` are whole padding instructions per
/// objdump, and (when `maximal`) the instruction at `pad_end` is not padding
/// unless a symbol or the section end is there.
fn check_padding(info: &ElfInfo, path: &Path, maximal: bool) -> usize {
    let insns = disassemble(path);
    let starts: HashSet<u64> = info.functions.iter().map(|f| f.addr).collect();
    let nm_syms = if maximal {
        symbol_addrs(path)
    } else {
        HashSet::new()
    };
    let mut padded = 0;
    for f in info.functions.iter().filter(|f| f.size > 0) {
        let mut at = f.end();
        while at < f.pad_end {
            let Some((len, insn)) = insns.get(&at) else {
                panic!(
                    "{}: no instruction at {at:#x} in padding of {f:?}",
                    path.display()
                );
            };
            assert!(
                is_padding_insn(insn),
                "{}: {insn} at {at:#x} in padding of {f:?}",
                path.display()
            );
            at += len;
        }
        assert_eq!(at, f.pad_end, "padding of {f:?} ends mid-instruction");
        if f.pad_end > f.end() {
            padded += 1;
        }
        if maximal && !starts.contains(&f.pad_end) {
            if let Some((_, insn)) = insns.get(&f.pad_end) {
                // objdump also prints symbol labels; a padding instruction
                // here would mean we stopped early (or at another symbol).
                if is_padding_insn(insn) {
                    assert!(
                        nm_syms.contains(&f.pad_end),
                        "{}: padding after {f:?} continues at {:#x}: {insn}",
                        path.display(),
                        f.pad_end
                    );
                }
            }
        }
    }
    padded
}

fn symbol_addrs(path: &Path) -> HashSet<u64> {
    run("nm", &["--defined-only"], path)
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .collect()
}

/// objdump's synthetic `<name@plt>` labels: address -> name.
fn objdump_plt(path: &Path) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    for line in run("objdump", &["-d", "-w"], path).lines() {
        // "0000000000001030 <free@plt>:"
        let Some((addr, rest)) = line.split_once(" <") else {
            continue;
        };
        let Some(label) = rest.strip_suffix(">:") else {
            continue;
        };
        let Some(name) = label.strip_suffix("@plt") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if name.starts_with("*ABS*") {
            continue;
        }
        out.insert(addr, name.split('@').next().unwrap().to_string());
    }
    out
}

fn func<'a>(info: &'a ElfInfo, name: &'a str) -> &'a FuncSym {
    let mut found = info.functions_named(name);
    let f = found.next().unwrap_or_else(|| panic!("no function {name}"));
    assert!(found.next().is_none(), "several functions named {name}");
    f
}

/// Whether the bytes in `[f.end(), f.pad_end)` are gcc/gas padding, per a
/// byte check independent of the crate's decoder.
fn padding_bytes_ok(data: &[u8], f: &FuncSym) -> bool {
    let (offset, _) = file_offset(data, f.end());
    let bytes = &data[offset as usize..(offset + f.pad_end - f.end()) as usize];
    // Typical gcc/gas padding: nop/int3, 66 90, 0f 1f .., 66 [66..] [2e] 0f 1f ..
    let mut i = 0;
    while i < bytes.len() {
        let b = &bytes[i..];
        let n = if b[0] == 0x90 || b[0] == 0xcc {
            1
        } else if b.starts_with(&[0x66, 0x90]) {
            2
        } else {
            let p = b.iter().take_while(|&&x| x == 0x66 || x == 0x2e).count();
            if !b[p..].starts_with(&[0x0f, 0x1f]) {
                return false;
            }
            p + match b[p + 2] {
                0x00 => 3,
                0x40 => 4,
                0x44 => 5,
                0x80 => 7,
                0x84 => 8,
                _ => return false,
            }
        };
        i += n;
    }
    i == bytes.len()
}

/// File offset of a virtual address (via the containing section).
fn file_offset(data: &[u8], addr: u64) -> (u64, String) {
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, data).unwrap();
    for sh in sections.iter() {
        let start = sh.sh_addr(endian);
        if start != 0 && addr >= start && addr < start + sh.sh_size(endian) {
            let name = String::from_utf8_lossy(sections.section_name(endian, sh).unwrap());
            return (sh.sh_offset(endian) + (addr - start), name.into_owned());
        }
    }
    panic!("{addr:#x} not in a section");
}

/// `analyze_functions_with_debug` (what the agent uses for a library
/// with -l) reads no code: the same functions as the full analysis, no
/// PLT or GOT imports, and each `pad_end` where the scan for padding
/// stops; the padding the agent then measures in the code (`padding_run`
/// up to there) is the full analysis's `pad_end`.
fn check_code_free_analysis(data: &[u8]) {
    let (full_info, full) = fctrace_symbols::analyze_borrowed(data).unwrap();
    let (info, funcs) = fctrace_symbols::analyze_functions_with_debug(data, None).unwrap();
    assert!(info.plt.is_empty() && info.got_imports.is_empty());
    assert_eq!(info.markers, full_info.markers);
    assert_eq!(funcs.len(), full.len());
    let mut padded = 0;
    for (f, g) in funcs.iter().zip(&full) {
        assert_eq!((&f.name, f.addr, f.size), (&g.name, g.addr, g.size));
        let end = f.addr + f.size;
        assert!(
            f.pad_end >= g.pad_end,
            "{}: limit before the padding's end",
            f.name
        );
        let measured = if f.size != 0 && f.pad_end > end {
            let (off, _) = file_offset(data, end);
            let bytes = &data[off as usize..(off + f.pad_end - end) as usize];
            end + fctrace_symbols::padding_run(bytes) as u64
        } else {
            f.pad_end
        };
        assert_eq!(measured, g.pad_end, "{} at {:#x}", f.name, f.addr);
        padded += usize::from(g.pad_end > end);
    }
    assert!(padded > 0, "no function has padding");
}

const VARIANTS: &[&[&str]] = &[
    &["-O0"],
    &["-O2"],
    &["-O2", "-no-pie"],
    &["-O2", "-fcf-protection=none"],
    &["-O2", "-fcf-protection=full"],
    // Debian's crt files lack the IBT property, so ld only emits the IBT PLT
    // (.plt.sec) when forced.
    &["-O2", "-fcf-protection=full", "-Wl,-z,ibtplt"],
    &["-O2", "-fcf-protection=full", "-Wl,-z,ibtplt", "-Wl,-z,now"],
    &["-O2", "-Wl,-z,lazy"],
    &["-O2", "-Wl,-z,now"],
    &["-O2", "-no-pie", "-fcf-protection=none", "-Wl,-z,lazy"],
    &["-O2", "-fno-plt"],
    &["-O2", "-no-pie", "-fno-plt"],
];

#[test]
fn gcc_variants() {
    for flags in VARIANTS {
        eprintln!("== gcc {flags:?}");
        let built = build(PROGRAM, false, flags).expect("gcc must build the test program");
        let data = std::fs::read(&built.path).unwrap();
        let info = read_file(&built.path).unwrap();
        check_invariants(&info, &data);
        check_code_free_analysis(&data);
        info.check_traceable().unwrap();
        let no_pie = flags.contains(&"-no-pie");
        let no_plt = flags.contains(&"-fno-plt");
        let optimized = flags.contains(&"-O2");
        assert_eq!(
            info.kind,
            if no_pie {
                ElfKind::Executable
            } else {
                ElfKind::PieExecutable
            }
        );
        assert!(info.is_x86_64 && !info.is_static && info.has_symtab);
        assert_eq!(info.machine, "x86_64");
        // The headers-only reading agrees on everything it reads.
        let headers = fctrace_symbols::read_headers(&built.path).unwrap();
        assert_eq!(
            (
                headers.kind,
                headers.is_x86_64,
                headers.is_static,
                headers.has_symtab
            ),
            (info.kind, info.is_x86_64, info.is_static, info.has_symtab)
        );
        assert_eq!(
            (headers.entry, &headers.build_id),
            (info.entry, &info.build_id)
        );
        assert!(headers.functions.is_empty() && headers.plt.is_empty());
        assert!(info.build_id.as_ref().is_some_and(|b| b.len() >= 8));
        assert!(info.markers.is_empty(), "{:?}", info.markers);
        assert_eq!(info.entry, func(&info, "_start").addr);

        // Functions.
        for name in [
            "main", "inc", "work", "die", "report", "_start", "_init", "_fini",
        ] {
            let f = func(&info, name);
            assert!(f.global, "{f:?}");
            assert!(!f.ifunc);
            if !name.starts_with("_init") && !name.starts_with("_fini") {
                assert!(f.size > 0 && f.size < 1024, "{f:?}");
                assert_eq!(&*f.section, ".text");
            }
        }
        let sq = func(&info, "square");
        assert!(!sq.global && sq.size > 0, "{sq:?}");
        let inc = func(&info, "inc");
        if optimized {
            // lea 0x1(%rdi),%eax; ret  (+ endbr64 with CET)
            assert!(inc.size == 4 || inc.size == 8, "{inc:?}");
            assert!(inc.pad_end > inc.end(), "{inc:?}");
            assert!(padding_bytes_ok(&data, inc), "{inc:?}");
            // The cold part of work() exists and is not a function.
            let nm = run("nm", &[], &built.path);
            assert!(nm.contains(" t work.cold"), "gcc made no work.cold:\n{nm}");
            assert!(info.functions.iter().all(|f| !f.has_name("work.cold")));
            // The cold part is a boundary for the padding of what precedes it.
            let cold = nm.lines().find(|l| l.ends_with(" work.cold")).unwrap();
            let cold = u64::from_str_radix(cold.split(' ').next().unwrap(), 16).unwrap();
            assert!(info
                .functions
                .iter()
                .all(|f| f.addr >= cold || f.pad_end <= cold));
        }
        check_against_nm(&info, &built.path, &data);
        let padded = check_padding(&info, &built.path, true);
        // -O0 does not align functions.
        assert!(!optimized || padded >= 3, "only {padded} padded functions");

        // PLT and GOT imports.
        let ours: BTreeMap<u64, String> =
            info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
        assert_eq!(ours, objdump_plt(&built.path), "PLT vs objdump");
        let plt_names: HashMap<&str, &fctrace_symbols::PltEntry> =
            info.plt.iter().map(|p| (p.name.as_str(), p)).collect();
        let got_names: HashSet<&str> = info.got_imports.iter().map(|g| g.name.as_str()).collect();
        for name in ["puts", "strlen", "malloc", "free", "printf"] {
            if no_plt {
                assert!(
                    got_names.contains(name),
                    "{name} not in {:?}",
                    info.got_imports
                );
                assert!(!plt_names.contains_key(name));
            } else {
                let p = plt_names
                    .get(name)
                    .unwrap_or_else(|| panic!("{name} not in {:?}", info.plt));
                assert_eq!(p.version.as_deref(), Some("GLIBC_2.2.5"));
                assert_eq!(p.size, 16);
                assert!(!got_names.contains(name));
            }
        }
        if no_plt {
            assert!(info.got_imports.len() >= 6);
        }
        // Only the callable PLT sections are listed.
        let sections: Vec<String> = info
            .plt
            .iter()
            .map(|p| file_offset(&data, p.addr).1)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if flags.contains(&"-Wl,-z,ibtplt") {
            assert!(!sections.contains(&".plt".to_string()), "{sections:?}");
            assert!(sections.contains(&".plt.sec".to_string()), "{sections:?}");
        }
    }
}

#[test]
fn cplusplus() {
    let src = r#"
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>
template <typename T> __attribute__((noinline)) T twice(T x) { return x + x; }
struct Shape { virtual ~Shape() {} virtual int sides() const { return 0; } };
struct Square : Shape { int sides() const override { return 4; } };
namespace geo { __attribute__((noinline)) size_t len(const std::string &s) { return s.size(); } }
int main(int argc, char **argv) {
    std::vector<std::string> args(argv, argv + argc);
    std::map<std::string, size_t> m;
    for (auto &s : args) m[s] = geo::len(s);
    Shape *s = new Square;
    std::cout << twice(argc) << twice(1.5) << s->sides() << m.size() << std::endl;
    delete s;
    try { if (argc > 5) throw std::runtime_error("x"); } catch (std::exception &e) { std::cout << e.what(); }
}
"#;
    for flags in [&["-O0"][..], &["-O2"]] {
        let built = build(src, true, flags).expect("g++ must build");
        let data = std::fs::read(&built.path).unwrap();
        let info = analyze(&data).unwrap();
        check_invariants(&info, &data);
        check_against_nm(&info, &built.path, &data);
        check_padding(&info, &built.path, true);
        let ours: BTreeMap<u64, String> =
            info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
        assert_eq!(ours, objdump_plt(&built.path));
        assert!(
            info.functions_named(
                "_ZN3geo3lenERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
            )
            .count()
                == 1
        );
        assert!(info.functions_named("_Z5twiceIiET_S0_").count() == 1);
        assert!(info.plt.iter().any(|p| p.name == "__cxa_throw"));
        assert!(info.plt.iter().any(|p| p.name == "_Znwm"));
        #[cfg(feature = "demangle")]
        {
            let names: Vec<String> = info
                .functions
                .iter()
                .map(|f| fctrace_symbols::demangle(&f.name))
                .collect();
            assert!(
                names.iter().any(|n| n == "int twice<int>(int)"),
                "{names:?}"
            );
        }
    }
}

#[test]
fn rust_binary() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("prog.rs");
    std::fs::write(
        &src,
        r#"
use std::io::Write;
#[inline(never)]
fn sum_squares(v: &[u64]) -> u64 { v.iter().map(|x| x * x).sum() }
fn main() {
    let v: Vec<u64> = std::env::args().map(|a| a.len() as u64).collect();
    let s = format!("{}\n", sum_squares(&v));
    std::io::stdout().write_all(s.as_bytes()).unwrap();
}
"#,
    )
    .unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    for opt in ["-Copt-level=0", "-Copt-level=2"] {
        let path = dir.path().join(format!("prog{opt}"));
        let status = Command::new(&rustc)
            .args([opt, "--edition=2021", "-o"])
            .arg(&path)
            .arg(&src)
            .status()
            .expect("running rustc");
        assert!(status.success());
        let data = std::fs::read(&path).unwrap();
        let info = analyze(&data).unwrap();
        check_invariants(&info, &data);
        check_against_nm(&info, &path, &data);
        check_padding(&info, &path, true);
        assert_eq!(info.kind, ElfKind::PieExecutable);
        assert!(info.has_symtab);
        let ours: BTreeMap<u64, String> =
            info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
        assert_eq!(ours, objdump_plt(&path));
        // rustc calls libc through the GOT, not the PLT.
        let got: HashSet<&str> = info.got_imports.iter().map(|g| g.name.as_str()).collect();
        eprintln!(
            "rust {opt}: {} GOT imports, {} PLT entries",
            got.len(),
            info.plt.len()
        );
        for name in ["malloc", "free", "write"] {
            assert!(got.contains(name), "{name} not in {got:?}");
        }
        assert!(!info.plt.iter().any(|p| p.name == "malloc"));
        let f = info
            .functions
            .iter()
            .find(|f| f.name.contains("sum_squares"))
            .expect("sum_squares");
        assert!(f.size > 0);
        #[cfg(feature = "demangle")]
        assert_eq!(fctrace_symbols::demangle(&f.name), "prog::sum_squares");
    }
}

/// This test executable: a Rust program built by cargo.
#[test]
fn cargo_built_test_binary() {
    let path = std::env::current_exe().unwrap();
    let data = std::fs::read(&path).unwrap();
    let info = analyze(&data).unwrap();
    check_invariants(&info, &data);
    check_against_nm(&info, &path, &data);
    // (check_padding passes here too, but disassembling this binary is slow.)
    assert!(info.has_symtab && !info.is_static);
    let ours: BTreeMap<u64, String> = info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
    assert_eq!(ours, objdump_plt(&path));
    let got: HashSet<&str> = info.got_imports.iter().map(|g| g.name.as_str()).collect();
    for name in ["malloc", "free", "write", "pthread_create"] {
        assert!(got.contains(name), "{name} not in {got:?}");
    }
    let me = info
        .functions
        .iter()
        .find(|f| f.name.contains("cargo_built_test_binary"))
        .expect("this test function");
    assert!(me.size > 0);
}

#[test]
fn system_libc() {
    let path = Path::new(LIBC);
    assert!(path.exists(), "no {LIBC}: apt-get install libc6");
    let data = std::fs::read(path).unwrap();
    let info = read_file(path).unwrap();
    check_invariants(&info, &data);
    check_code_free_analysis(&data);
    assert_eq!(info.kind, ElfKind::SharedObject);
    assert!(!info.is_static);
    assert!(info.functions.len() > 1500, "{}", info.functions.len());
    assert!(info.functions.iter().filter(|f| f.global).count() > 1500);
    let strlen = info.functions_named("strlen").next().unwrap();
    assert!(strlen.ifunc && strlen.global, "{strlen:?}");
    let printf = func(&info, "printf");
    assert!(
        !printf.ifunc && printf.global && printf.size > 0,
        "{printf:?}"
    );
    // Preferred over the alias _IO_printf.
    assert_eq!(printf.name, "printf");
    let malloc = func(&info, "malloc");
    assert_eq!(malloc.name, "malloc", "{malloc:?}");
    // Two memcpy versions at two addresses.
    assert!(info.functions_named("memcpy").count() >= 1);
    assert!(!info.plt.is_empty());
    check_against_nm(&info, path, &data);
    let padded = check_padding(&info, path, false);
    eprintln!(
        "libc: {} functions, {padded} with padding, {} PLT entries, {} GOT imports, has_symtab={}",
        info.functions.len(),
        info.plt.len(),
        info.got_imports.len(),
        info.has_symtab
    );
    assert!(padded > 500);
}

#[test]
fn errors() {
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("nope");
    let e = read_file(&missing).unwrap_err();
    assert!(e.0.starts_with("program not found"), "{e}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, this is text\n".repeat(10)).unwrap();
    let e = read_file(&text).unwrap_err();
    assert!(e.to_string().ends_with("not an ELF file"), "{e}");
    assert_eq!(analyze(b"hello").unwrap_err().0, "not an ELF file");
    assert_eq!(analyze(b"").unwrap_err().0, "not an ELF file");

    let script = dir.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let e = read_file(&script).unwrap_err();
    assert!(e.0.contains("not an ELF file"), "{e}");

    let e = read_file(dir.path()).unwrap_err();
    assert!(e.0.contains("is a directory"), "{e}");
    let e = read_file(Path::new("/dev/null")).unwrap_err();
    assert!(e.0.contains("not a regular file"), "{e}");

    // An object file is not a program.
    let src = dir.path().join("x.c");
    std::fs::write(&src, "int f(int x) { return x; }\n").unwrap();
    let obj = dir.path().join("x.o");
    assert!(Command::new("gcc")
        .args(["-c", "-o"])
        .arg(&obj)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let e = read_file(&obj).unwrap_err();
    assert!(e.0.contains("relocatable object file"), "{e}");

    // aarch64: a real x86_64 executable with e_machine patched to 183.
    let built = build(PROGRAM, false, &["-O2"]).unwrap();
    let mut data = std::fs::read(&built.path).unwrap();
    data[18..20].copy_from_slice(&183u16.to_le_bytes());
    let info = analyze(&data).unwrap();
    assert!(!info.is_x86_64);
    assert_eq!(info.machine, "aarch64");
    assert!(info.plt.is_empty());
    assert_eq!(
        info.check_traceable().unwrap_err().0,
        "ELF for aarch64, fctrace traces x86_64 programs only"
    );

    // Statically linked (and static-pie).
    for flags in [&["-O2", "-static"][..], &["-O2", "-static-pie"]] {
        let built = build(PROGRAM, false, flags).unwrap_or_else(|| {
            panic!("gcc cannot link {flags:?} (see above): apt-get install libc6-dev")
        });
        let info = read_file(&built.path).unwrap();
        assert!(info.is_static, "{flags:?}");
        let pie = flags.contains(&"-static-pie");
        assert_eq!(
            info.kind,
            if pie {
                ElfKind::PieExecutable
            } else {
                ElfKind::Executable
            }
        );
        let e = info.check_traceable().unwrap_err();
        assert!(e.0.contains("statically linked"), "{e}");
        let data = std::fs::read(&built.path).unwrap();
        check_invariants(&info, &data);
        check_against_nm(&info, &built.path, &data);
    }
}

/// Truncated and corrupted files give errors or results, never panics.
/// `FCTRACE_FUZZ_ITERATIONS` raises the number of mutations (default 3000).
#[test]
fn corrupted_files_do_not_panic() {
    let iterations: usize = std::env::var("FCTRACE_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut inputs = Vec::new();
    for flags in [&["-O2"][..], &["-O2", "-no-pie", "-fno-plt"]] {
        let built = build(PROGRAM, false, flags).unwrap();
        inputs.push(std::fs::read(&built.path).unwrap());
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for data in &inputs {
        for len in (0..data.len()).step_by(97).chain([64, 65, 100, 1000]) {
            let _ = analyze(&data[..len.min(data.len())]);
        }
        // e_shoff: where the section headers are.
        let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
        for _ in 0..iterations {
            let mut copy = data.clone();
            for _ in 0..1 + next() % 8 {
                let r = next();
                let i = match r % 4 {
                    // ELF and program headers, section headers, anywhere.
                    0 => (r >> 8) as usize % 0x400,
                    1 => shoff + (r >> 8) as usize % (copy.len() - shoff),
                    _ => (r >> 8) as usize % copy.len(),
                };
                copy[i] = match (r >> 40) % 4 {
                    0 => 0,
                    1 => 0xff,
                    _ => (r >> 48) as u8,
                };
            }
            let _ = analyze(&copy);
        }
    }
}

#[test]
fn gold_linker() {
    let probe = Command::new("ld.gold").arg("--version").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "ld.gold not found: apt-get install binutils (or run ./scripts/test)"
    );
    for flags in [
        &["-O2", "-fuse-ld=gold"][..],
        &["-O2", "-fuse-ld=gold", "-no-pie"],
        &["-O2", "-fuse-ld=gold", "-Wl,-z,now"],
        &["-O2", "-fuse-ld=gold", "-fno-plt"],
    ] {
        let built = build(PROGRAM, false, flags).expect("gcc -fuse-ld=gold");
        let data = std::fs::read(&built.path).unwrap();
        let info = analyze(&data).unwrap();
        check_invariants(&info, &data);
        check_against_nm(&info, &built.path, &data);
        check_padding(&info, &built.path, true);
        let ours: BTreeMap<u64, String> =
            info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
        assert_eq!(ours, objdump_plt(&built.path), "{flags:?}");
        let imported: HashSet<&str> = info
            .plt
            .iter()
            .map(|p| p.name.as_str())
            .chain(info.got_imports.iter().map(|g| g.name.as_str()))
            .collect();
        for name in ["puts", "strlen", "malloc"] {
            assert!(imported.contains(name), "{flags:?}: {name}");
        }
    }
}

#[test]
fn instrumentation_markers() {
    for (flags, marker) in [
        (&["-O2", "-pg"][..], "mcount"),
        (&["-O2", "-pg", "-mfentry"], "__fentry__"),
        (
            &["-O2", "-finstrument-functions"],
            "__cyg_profile_func_enter",
        ),
        (
            &["-O2", "-fpatchable-function-entry=5"],
            "__patchable_function_entries",
        ),
        (
            &["-O2", "-fpatchable-function-entry=8,3"],
            "__patchable_function_entries",
        ),
    ] {
        let built = build(PROGRAM, false, flags).expect("gcc with instrumentation");
        let info = read_file(&built.path).unwrap();
        assert_eq!(info.markers, [marker], "{flags:?}");
    }
    // libc defines mcount & co. for others; that is not instrumentation.
    if Path::new(LIBC).exists() {
        assert!(read_file(Path::new(LIBC)).unwrap().markers.is_empty());
    }
}

#[test]
fn stripped_executable() {
    let built = build(PROGRAM, false, &["-O2", "-s"]).unwrap();
    let data = std::fs::read(&built.path).unwrap();
    let info = analyze(&data).unwrap();
    check_invariants(&info, &data);
    assert!(!info.has_symtab);
    assert!(
        !fctrace_symbols::read_headers(&built.path)
            .unwrap()
            .has_symtab
    );
    // The dynamic symbols name functions (none defined in .text here);
    // the others are found from their FDEs, unnamed (main among them),
    // and `_start` is left out: its return address is undefined.
    assert!(
        info.functions.iter().all(|f| f.global || f.name.is_empty()),
        "{:?}",
        info.functions
    );
    assert!(info.functions_named("main").next().is_none());
    assert!(info.functions.iter().any(|f| f.name.is_empty()));
    assert!(
        info.left_out
            .iter()
            .any(|l| l.addr == info.entry && l.reason.starts_with("no return address")),
        "{:?}",
        info.left_out
    );
    // The PLT is still known: it does not need .symtab.
    let names: HashSet<&str> = info.plt.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains("puts") && names.contains("malloc"),
        "{names:?}"
    );
}

#[test]
fn shared_library() {
    let src = r#"
#include <stdio.h>
#include <string.h>
static int helper(const char *s) { return (int)strlen(s) * 3; }
__attribute__((noinline)) int lib_visible(const char *s) { puts(s); return helper(s); }
__attribute__((visibility("hidden"), noinline)) int lib_hidden(int x) { return x * 7 + 1; }
int lib_alias(const char *s) __attribute__((alias("lib_visible")));
__attribute__((weak)) int lib_weak(int x) { return lib_hidden(x) + 2; }
"#;
    let built = build(src, false, &["-O2", "-shared", "-fPIC"]).unwrap();
    let data = std::fs::read(&built.path).unwrap();
    let info = analyze(&data).unwrap();
    check_invariants(&info, &data);
    check_against_nm(&info, &built.path, &data);
    check_padding(&info, &built.path, true);
    assert_eq!(info.kind, ElfKind::SharedObject);
    assert!(!info.is_static);
    info.check_traceable().unwrap();
    // Two global names at one address: the shorter one is preferred.
    let f = func(&info, "lib_alias");
    assert_eq!(f.name, "lib_alias");
    assert_eq!(f.aliases, ["lib_visible"]);
    assert!(f.global);
    let hidden = func(&info, "lib_hidden");
    assert!(!hidden.global, "hidden symbols are local once linked");
    assert!(func(&info, "lib_weak").global);
    let ours: BTreeMap<u64, String> = info.plt.iter().map(|p| (p.addr, p.name.clone())).collect();
    assert_eq!(ours, objdump_plt(&built.path));
    assert!(info.plt.iter().any(|p| p.name == "puts"));
}

/// Debian's stripped libc, its functions found from its FDEs, against the
/// symbols of its debug file (libc6-dbg): every function kept is one (but
/// at most one `.cold` part: of glibc's eight 6-byte `round_away.cold`
/// parts of a frameless function, the one that is 16-byte aligned passes
/// the split-part heuristic), and no FDE left out starts a function.
#[test]
fn stripped_libc_against_its_debug_file() {
    use object::{Object, ObjectSymbol, SymbolKind};
    let path = Path::new(LIBC);
    let data = std::fs::read(path).unwrap();
    let debug = fctrace_symbols::debugfile::find_symbols(path, &data)
        .expect("libc's debug file: apt-get install libc6-dbg");
    let debug = std::fs::read(debug).unwrap();
    let truth = object::File::parse(&*debug).unwrap();
    let mut names: HashMap<u64, Vec<String>> = HashMap::new();
    for s in truth.symbols() {
        if s.kind() == SymbolKind::Text && s.address() != 0 {
            let name = s.name().unwrap_or("").to_string();
            names.entry(s.address()).or_default().push(name);
        }
    }
    let is_part = |a: u64| {
        names
            .get(&a)
            .is_some_and(|n| n.iter().all(|x| x.contains(".cold")))
    };
    let is_function = |a: u64| names.get(&a).is_some_and(|_| !is_part(a));
    let info = read_file(path).unwrap();
    assert!(!info.has_symtab);
    let unnamed: Vec<&FuncSym> = info
        .functions
        .iter()
        .filter(|f| f.name.is_empty())
        .collect();
    assert!(unnamed.len() > 1000, "{} unnamed functions", unnamed.len());
    let parts: Vec<u64> = unnamed
        .iter()
        .map(|f| f.addr)
        .filter(|&a| is_part(a))
        .collect();
    let unknown: Vec<u64> = unnamed
        .iter()
        .map(|f| f.addr)
        .filter(|&a| !names.contains_key(&a))
        .collect();
    assert!(parts.len() <= 1, "split parts kept: {parts:x?}");
    assert!(unknown.is_empty(), "kept at no symbol: {unknown:x?}");
    let lost: Vec<(u64, &str)> = info
        .left_out
        .iter()
        .filter(|l| is_function(l.addr))
        .map(|l| (l.addr, l.reason.as_str()))
        .collect();
    assert!(lost.is_empty(), "functions left out: {lost:x?}");
    eprintln!(
        "libc: {} unnamed functions, {} left out",
        unnamed.len(),
        info.left_out.len()
    );
}
