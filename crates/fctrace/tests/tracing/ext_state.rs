//! The slow paths' saving of the extended state on CPUs with and without
//! XSAVE: ext_state.c recorded (`-A`/`-R` on a float function, enough calls
//! to switch buffers) and replayed inside a VM (crates/fctrace-testkit/src/vm.rs) whose
//! CPU is qemu's `qemu64` (no XSAVE: the slow paths use FXSAVE) and then
//! `max` (XSAVE). The program's output and the replay's call lines are
//! exact, derived from what the program does.

use fctrace_testkit::vm::{self, Initramfs, VmRun};
use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// ext_state.c's `STEPS`: 5000 calls of `step` are 10,000 event records of
/// 16 bytes, more than two 64 KiB buffers.
const STEPS: i64 = 5000;

/// What ext_state.c prints.
fn expected_stdout() -> String {
    let sum: i64 = (0..STEPS).map(|i| i * 3 + 1).sum();
    let f = 0.5 + 0.25 * STEPS as f64;
    let a = 1.5 * 2.0 + 0.5;
    let b = a * 4.0 + 0.5;
    format!("sum={sum} f={f:.2} a={a:.2} b={b:.2}\n")
}

/// Its call lines in `replay -f none`.
fn expected_calls() -> Vec<String> {
    let a = 1.5 * 2.0 + 0.5;
    let b = a * 4.0 + 0.5;
    let mut v = vec!["main() {".to_string()];
    v.extend((0..STEPS).map(|_| "  step();".to_string()));
    v.push(format!("  scale(1.5, 2) = {a:?};"));
    v.push(format!("  scale({a:?}, 4) = {b:?};"));
    v.push("  printf();".into());
    v.push("} /* main */".into());
    v
}

/// /init's script: the CPU's flags, then record and replay, each part
/// after a `@@NAME` line.
const SCRIPT: &str = "\
echo @@flags; grep -m1 '^flags' /proc/cpuinfo
/fctrace record -d /tmp/t -A 'scale@fparg1,arg1' -R 'scale@retval/f64' /ext_state >/tmp/out 2>/tmp/err
echo \"@@record-status $?\"
echo @@stdout; cat /tmp/out
echo @@stderr; cat /tmp/err
echo @@replay; /fctrace replay -d /tmp/t -f none
echo \"@@replay-status $?\"
";

fn image(prog: &Path) -> (Initramfs, PathBuf) {
    let fs = Initramfs::new("ext-state");
    fs.add_program("/fctrace", &fctrace_bin());
    fs.add_program("/ext_state", prog);
    fs.set_script(SCRIPT);
    let path = fs.build();
    (fs, path)
}

/// The script's output cut at its `@@NAME rest` lines: NAME → the rest of
/// that line followed by the lines up to the next one.
fn parts(out: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in out.lines() {
        if let Some(marker) = line.strip_prefix("@@") {
            let (name, rest) = marker.split_once(' ').unwrap_or((marker, ""));
            m.insert(name.to_string(), rest.to_string());
            cur = Some(name.to_string());
        } else if let Some(c) = &cur {
            let s: &mut String = m.get_mut(c).unwrap();
            s.push_str(line);
            s.push('\n');
        }
    }
    m
}

/// The run inside the VM traced ext_state.c exactly; the CPU has XSAVE
/// (`xsave` among /proc/cpuinfo's flags) iff `xsave`.
#[track_caller]
fn check(r: &VmRun, xsave: bool) {
    let p = parts(&r.output);
    let part = |name: &str| {
        p.get(name)
            .unwrap_or_else(|| panic!("no @@{name} part\n{}", r.describe()))
            .as_str()
    };
    let flags: Vec<&str> = part("flags").split_whitespace().collect();
    assert_eq!(flags.contains(&"xsave"), xsave, "CPU flags {flags:?}");
    if !xsave {
        assert!(
            !flags
                .iter()
                .any(|f| f.starts_with("xsave") || f.starts_with("avx")),
            "{flags:?}"
        );
    }
    assert_eq!(
        part("record-status"),
        "0",
        "fctrace record\n{}",
        r.describe()
    );
    assert_eq!(part("stdout"), expected_stdout(), "{}", r.describe());
    assert_eq!(part("stderr"), "", "{}", r.describe());
    assert_eq!(
        part("replay-status"),
        "0",
        "fctrace replay\n{}",
        r.describe()
    );
    let calls: Vec<String> = part("replay")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert!(
        calls == expected_calls(),
        "replay's call lines differ\n{}",
        r.describe()
    );
}

#[test]
fn traced_with_fxsave_on_a_cpu_without_xsave_and_with_xsave() {
    let prog = c_program("ext_state.c", "-O2", &["-O2"]);
    assert_eq!(run_native(&prog, &[]).stdout, expected_stdout());
    let (_fs, initrd) = image(&prog);
    let kernel = vm::kernel();
    let bare = vm::boot(&kernel, &initrd, "qemu64");
    check(&bare, false);
    let full = vm::boot(&kernel, &initrd, "max");
    check(&full, true);
    eprintln!(
        "boots: qemu64 {:.1} s, max {:.1} s",
        bare.took.as_secs_f64(),
        full.took.as_secs_f64()
    );
}
