//! self_inspect.c: programs that look at themselves keep working under
//! fctrace: reading /proc/self/maps, reading their own code bytes, taking
//! their own address, their own SIGTRAP and SIGSEGV handlers. The one
//! visible difference is documented in docs/engine.md and checked exactly
//! here: the bytes fctrace patched (function entries, PLT entries) differ
//! from the file on disk.

use fctrace_testkit::*;
use std::path::Path;

fn program(opt: &str) -> std::path::PathBuf {
    c_program("self_inspect.c", opt, &[opt])
}

const OPTS: [&str; 2] = ["-O0", "-O2"];

#[test]
fn finds_its_own_mappings() {
    for opt in OPTS {
        let rec = record_same(&program(opt), &["maps"]);
        assert_eq!(
            rec.run.stdout,
            "code: r-xp self=1\ndata: rw-p self=1\nstack: rw-p [stack]\nheap: rw-p\n",
            "{opt}"
        );
    }
}

#[test]
fn reads_code_bytes_past_the_entry() {
    for opt in OPTS {
        let rec = record_same(&program(opt), &["body"]);
        assert_eq!(
            rec.run.stdout, "body: readable=yes same_as_file=1\n",
            "{opt}"
        );
    }
}

#[test]
fn takes_its_own_address() {
    for opt in OPTS {
        let rec = record_same(&program(opt), &["selfaddr"]);
        assert_eq!(
            rec.run.stdout, "selfaddr: same=1 registered_same=1\n",
            "{opt}"
        );
        let r = replay(&rec.dir.path);
        assert_eq!(
            r.main().count("self_addr()"),
            1,
            "{opt}: self_addr is traced"
        );
    }
}

/// Section ranges (address, end) of `exe` whose name starts with `.plt`.
fn plt_sections(exe: &Path) -> Vec<(u64, u64)> {
    let r = tool("readelf", &[std::ffi::OsStr::new("-SW"), exe.as_os_str()]);
    let mut v = Vec::new();
    for line in r.stdout.lines() {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix('[') else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(']') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Name Type Address Off Size ...
        if f.len() >= 5 && f[0].starts_with(".plt") {
            let addr = u64::from_str_radix(f[2], 16).unwrap();
            let size = u64::from_str_radix(f[4], 16).unwrap();
            v.push((addr, addr + size));
        }
    }
    v
}

/// The whole executable segment compared with the file: natively
/// identical; under fctrace, the only bytes that differ are the patched
/// ones: the first bytes of function entries (a jmp to the stub, at most
/// the instructions it displaces: 4 + 15 + 5 bytes at the very most), the
/// padding right after a function (the 5-byte jump of a 2-byte entry), and
/// PLT entries. Everything else reads as on disk.
#[test]
fn text_differs_only_where_patched() {
    for opt in OPTS {
        let exe = program(opt);
        let native = run_native(&exe, &["text"]);
        assert_eq!(native.stdout, "text: 0 ranges differ\n");
        let rec = record(&exe, &["text"], &[]);
        let out = &rec.run.stdout;
        let last = out.lines().last().unwrap_or_default();
        let n: usize = last
            .strip_prefix("text: ")
            .and_then(|l| l.strip_suffix(" ranges differ"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{opt}: unexpected output\n{out}"));
        assert!(n > 0, "{opt}: fctrace patched nothing?");
        let mut syms = function_symbols(&exe);
        syms.sort_by_key(|s| s.addr);
        let plt = plt_sections(&exe);
        let mut entries = 0;
        for line in out.lines().filter(|l| l.starts_with("diff ")) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let off = u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap();
            let len: u64 = f[2].parse().unwrap();
            // In these small PIE programs the text segment's file offsets
            // equal its addresses.
            if plt.iter().any(|&(a, b)| off >= a && off + len <= b) {
                continue;
            }
            let owner = syms
                .iter()
                .rev()
                .find(|s| s.addr <= off)
                .unwrap_or_else(|| panic!("{opt}: {line}: before every function"));
            let entry_patch = off + len <= owner.addr + 24;
            let padding = owner.size > 0 && off >= owner.addr + owner.size && len <= 5;
            assert!(
                entry_patch || padding,
                "{opt}: {line}: bytes of {} (at {:#x}, size {}) differ beyond its entry\n{out}",
                owner.name,
                owner.addr,
                owner.size
            );
            entries += usize::from(entry_patch);
        }
        assert!(entries > 5, "{opt}: only {entries} patched entries\n{out}");
    }
}

#[test]
fn own_sigtrap_handler() {
    for opt in OPTS {
        let rec = record_same(&program(opt), &["trap"]);
        assert_eq!(
            rec.run.stdout, "trap before: SIG_DFL\ntrap: hits=2 rip_ok=1 codes=12\n",
            "{opt}"
        );
        let (text, r) = replay_with_text(&rec.dir.path);
        let keep = [
            "main()",
            "breakpoint()",
            "raise_trap()",
            "raise()",
            "on_trap()",
        ];
        let got = outline(&project(&r.main_thread().unwrap().roots, &|l| {
            is_marker(l) || keep.contains(&l)
        }));
        assert_outline_eq(
            &got,
            &expected_outline(
                "
                main()
                  breakpoint()
                    /* signal SIGTRAP */
                    on_trap()
                  raise_trap()
                    raise()
                      /* signal SIGTRAP */
                      on_trap()
                ",
            ),
            &format!("trap {opt}\n{}", clip(&text, 4000)),
        );
    }
}

#[test]
fn own_sigsegv_handler_write_barrier() {
    for opt in OPTS {
        let rec = record_same(&program(opt), &["segv"]);
        assert_eq!(
            rec.run.stdout, "segv before: SIG_DFL flags=0\nsegv: faults=8 sum=108 handler_kept=1\n",
            "{opt}"
        );
        let (text, r) = replay_with_text(&rec.dir.path);
        let main = r.main();
        let stores: Vec<&Node> = main
            .children
            .iter()
            .filter(|c| c.label == "store()")
            .collect();
        assert_eq!(stores.len(), 24, "{opt}");
        // The first touch of each page faults: the handler runs inside
        // store(), after its marker; later stores run straight through.
        for (k, s) in stores.iter().enumerate() {
            let labels: Vec<&str> = s.children.iter().map(|c| c.label.as_str()).collect();
            let want: &[&str] = if k < 8 {
                &["/* signal SIGSEGV */", "on_segv()"]
            } else {
                &[]
            };
            assert_eq!(labels, want, "{opt}: store #{k}\n{}", clip(&text, 4000));
            if k < 8 {
                let h: Vec<&str> = s.children[1]
                    .children
                    .iter()
                    .map(|c| c.label.as_str())
                    .collect();
                assert_eq!(h, ["mprotect()"], "{opt}: store #{k}");
            }
        }
    }
}
