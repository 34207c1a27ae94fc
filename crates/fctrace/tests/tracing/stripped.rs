//! Stripped programs without a debug file: their functions are found
//! from their call frame information (`.eh_frame`), named by module and
//! address (`prog+0x1460`). A program of several C files (static and
//! extern functions, recursion, function pointers, a tail call, `.cold`
//! parts, one of them in a function that keeps no frame) is built at -O2,
//! with `-freorder-blocks-and-partition` and with profile feedback, then
//! stripped (`strip --strip-all`, no debug file anywhere): the functions
//! instrumented are exactly the unstripped `.symtab`'s function symbols
//! that have an FDE (read with readelf), `.cold` parts and the entry point
//! `_start` (no return address: its CFI says so) excepted, and each one's
//! call count equals callgrind's on the unstripped build. MiniDebugInfo
//! (`.gnu_debugdata`, built as gdb's documentation says) names them, and
//! module+address patterns select them (`-F prog+0x1460`).

use fctrace_format::symtab::{FuncStatus, SymTab};
use fctrace_testkit::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[track_caller]
fn tool_in(program: &str, args: &[&OsStr], dir: &Path) -> Run {
    let r = run(Command::new(program).args(args).current_dir(dir));
    assert!(r.success(), "{program} failed\n{}", r.describe());
    r
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

const SOURCES: [&str; 2] = ["stripped_main.c", "stripped_util.c"];

/// One build of the program: unstripped and stripped.
struct Build {
    full: PathBuf,
    stripped: PathBuf,
}

/// gcc -O2 -g `flags` of the program's files, as `dir/name`, stripped into
/// `dir/name.s`... with the stripped file named `name` and the unstripped
/// `name.full`. With `fdo`, built once with -fprofile-generate, run, and
/// built again with -fprofile-use (the same output name, so that gcc finds
/// the profile).
fn build(dir: &Path, name: &str, flags: &[&str], fdo: bool) -> Build {
    let sources: Vec<PathBuf> = SOURCES.iter().map(|s| program_source(s)).collect();
    let out = dir.join(format!("{name}.full"));
    let gcc = |extra: &[&str]| {
        let mut args: Vec<&OsStr> = vec![os("-O2"), os("-g")];
        args.extend(flags.iter().map(|f| os(f)));
        args.extend(extra.iter().map(|f| os(f)));
        args.push(os("-I"));
        args.push(sources[0].parent().unwrap().as_os_str());
        args.push(os("-o"));
        args.push(out.as_os_str());
        args.extend(sources.iter().map(|s| s.as_os_str()));
        tool_in("gcc", &args, dir);
    };
    if fdo {
        gcc(&["-fprofile-generate"]);
        tool_in(out.to_str().unwrap(), &[], dir);
        gcc(&["-fprofile-use", "-Wno-missing-profile"]);
    } else {
        gcc(&[]);
    }
    let stripped = dir.join(name);
    tool_in(
        "strip",
        &[
            os("--strip-all"),
            os("-o"),
            stripped.as_os_str(),
            out.as_os_str(),
        ],
        dir,
    );
    Build {
        full: out,
        stripped,
    }
}

/// The starts of the FDEs of `elf`'s `.eh_frame` (readelf's `pc=` ranges).
fn fde_starts(elf: &Path) -> BTreeSet<u64> {
    let r = tool("readelf", &[os("--debug-dump=frames"), elf.as_os_str()]);
    r.stdout
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| l.split("pc=").nth(1))
        .filter_map(|r| u64::from_str_radix(r.split("..").next()?, 16).ok())
        .collect()
}

/// The functions that must be instrumented, by address: the `.symtab`
/// function symbols of the unstripped build that have an FDE, `.cold`
/// parts and `_start` excepted; and the addresses of the `.cold` parts.
fn expected_functions(full: &Path) -> (BTreeMap<u64, String>, BTreeSet<u64>) {
    let fdes = fde_starts(full);
    let mut want = BTreeMap::new();
    let mut cold = BTreeSet::new();
    for s in function_symbols(full) {
        if !fdes.contains(&s.addr) {
            continue;
        }
        if s.name.contains(".cold") {
            cold.insert(s.addr);
        } else if s.name != "_start" {
            want.insert(s.addr, s.name);
        }
    }
    (want, cold)
}

/// The trace's symbol table (session 0).
fn symtab(dir: &Path) -> SymTab {
    let text = fs::read_to_string(dir.join("sessions/0.sym")).unwrap();
    SymTab::parse(&text).unwrap()
}

/// The addresses of the functions of module `exe` instrumented in the
/// trace, and the module's functions by address.
fn instrumented(dir: &Path, exe: &Path) -> (BTreeSet<u64>, BTreeMap<u64, String>) {
    let t = symtab(dir);
    let exe = canonical(exe);
    let module: BTreeSet<u32> = t
        .modules
        .iter()
        .filter(|m| canonical(Path::new(&m.path)) == exe)
        .map(|m| m.index)
        .collect();
    let mut traced = BTreeSet::new();
    let mut all = BTreeMap::new();
    for f in t.functions.iter().filter(|f| module.contains(&f.module)) {
        all.insert(f.addr, format!("{} [{}]", f.name, f.status));
        if !matches!(f.status, FuncStatus::NotTraced(_)) {
            traced.insert(f.addr);
        }
    }
    (traced, all)
}

/// `text` without fctrace's notice that `exe` is stripped (not the
/// program's output).
fn without_notice(text: &str, exe: &Path) -> String {
    let notice = format!("fctrace: {}: stripped (no .symtab)", exe.display());
    text.lines()
        .filter(|l| !l.starts_with(&notice))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Records the stripped build and checks it against the unstripped one:
/// the same behaviour, exactly the expected functions instrumented, no
/// `.cold` part among them, call counts equal callgrind's.
#[track_caller]
fn check_build(b: &Build, ctx: &str) {
    let (want, cold) = expected_functions(&b.full);
    assert!(
        want.len() >= 12 && !cold.is_empty(),
        "{ctx}: the build has {} functions with an FDE and {} .cold parts",
        want.len(),
        cold.len()
    );
    // The exit status and the cold paths' messages, with an argument.
    for args in [&[][..], &["1234"][..]] {
        let native = run(Command::new(&b.full).args(args));
        let rec = record_any(&b.stripped, args, &[]);
        assert_same_behaviour_with(&native, &rec.run, ctx, |s| without_notice(s, &b.stripped));
    }
    let rec = record(&b.stripped, &[], &[]);
    let (traced, all) = instrumented(&rec.dir.path, &b.stripped);
    let want_set: BTreeSet<u64> = want.keys().copied().collect();
    let name = |a: &u64| {
        format!(
            "{a:#x} {} / {}",
            want.get(a).map_or("-", |s| s.as_str()),
            all.get(a).map_or("-", |s| s.as_str())
        )
    };
    let missing: Vec<String> = want_set.difference(&traced).map(name).collect();
    let extra: Vec<String> = traced.difference(&want_set).map(name).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{ctx}: not instrumented: {missing:?}; instrumented but no function: {extra:?} \
         (trace {})",
        rec.dir.path.display()
    );
    assert!(
        traced.is_disjoint(&cold),
        "{ctx}: a .cold part instrumented"
    );

    // Counts: the unnamed functions by address against callgrind's on the
    // unstripped build (the same code at the same addresses).
    let mut rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    let stripped = canonical(&b.stripped);
    let file = b
        .stripped
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for f in &mut rep.functions {
        if canonical(Path::new(&f.module)) == stripped {
            f.module = b.full.to_string_lossy().into_owned();
            if let Some(hex) = f.symbol.strip_prefix(&format!("{file}+")) {
                let hex = hex.to_string();
                f.name = hex.clone();
                f.symbol = hex;
            }
        }
    }
    let cg = callgrind(&b.full, &[]);
    match compare_with_callgrind(&b.full, &rep, &cg, &CompareOptions::default()) {
        Ok(c) => {
            assert!(c.compared >= 10, "{ctx}: only {} functions", c.compared);
            eprintln!(
                "{ctx}: {} functions, {} calls agree with callgrind",
                c.compared, c.total_calls
            );
        }
        Err(msg) => panic!("{ctx}: {msg}(trace: {})", rec.dir.path.display()),
    }
}

/// -O2, with -freorder-blocks-and-partition and with profile feedback:
/// every function found, no split part taken for one.
#[test]
fn stripped_functions_from_call_frames() {
    let dir = scratch("stripped");
    let plain = build(&dir.path, "prog", &[], false);
    check_build(&plain, "-O2");
    let parts = build(
        &dir.path,
        "prog_rbp",
        &["-freorder-blocks-and-partition"],
        false,
    );
    check_build(&parts, "-O2 -freorder-blocks-and-partition");
    let fdo = build(
        &dir.path,
        "prog_fdo",
        &["-freorder-blocks-and-partition"],
        true,
    );
    check_build(&fdo, "-O2 -fprofile-use");
}

/// The address of the function named `name` in `elf`'s `.symtab`.
fn address_of(elf: &Path, name: &str) -> u64 {
    function_symbols(elf)
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {}", elf.display()))
        .addr
}

/// `-F prog+0xADDR` traces the calls made inside the function at that
/// address (fib: its recursive calls), `-N prog+0xADDR` leaves it out,
/// for the unnamed function of a stripped build and the named one of the
/// unstripped build alike.
#[test]
fn module_and_address_patterns() {
    let dir = scratch("stripped_at");
    let b = build(&dir.path, "prog", &[], false);
    let cg = callgrind(&b.full, &[]);
    let fib_calls = cg.of_object(&b.full)["fib"];
    let leaf_calls = cg.of_object(&b.full)["leaf"];
    assert!(fib_calls > 100 && leaf_calls > 10);
    let fib = address_of(&b.full, "fib");
    let leaf = address_of(&b.full, "leaf");
    for exe in [&b.stripped, &b.full] {
        let file = exe.file_name().unwrap().to_string_lossy().into_owned();
        let ctx = exe.display().to_string();
        let at = |a: u64| format!("{file}+{a:#x}");
        let named =
            |rep: &Report, a: u64, name: &str| -> u64 { rep.calls(&at(a)) + rep.calls(name) };
        let rec = record(exe, &[], &["-F", &at(fib)]);
        let rep = report(&rec.dir.path);
        assert_eq!(named(&rep, fib, "fib"), fib_calls, "{ctx}: -F fib");
        assert_eq!(named(&rep, leaf, "leaf"), 0, "{ctx}: -F fib shows leaf");
        let rec = record(exe, &[], &["-N", &at(leaf)]);
        let rep = report(&rec.dir.path);
        assert_eq!(named(&rep, leaf, "leaf"), 0, "{ctx}: -N leaf");
        assert_eq!(named(&rep, fib, "fib"), fib_calls, "{ctx}: -N leaf, fib");
    }
}

/// MiniDebugInfo, made as gdb's manual says (the local function symbols
/// not in `.dynsym`, in an xz-compressed debug file added as
/// `.gnu_debugdata`): the stripped program's functions have their names
/// again, with callgrind's counts, and fctrace does not call it stripped.
#[test]
fn minidebuginfo_names_functions() {
    let dir = scratch("minidebug");
    let b = build(&dir.path, "prog", &[], false);
    let d = &dir.path;
    let nm = |args: &[&str]| -> BTreeSet<String> {
        let mut a: Vec<&OsStr> = args.iter().map(|s| os(s)).collect();
        a.push(b.full.as_os_str());
        tool_in("nm", &a, d)
            .stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    };
    let dynsyms = nm(&["-D", "--format=posix", "--defined-only"]);
    let funcs: BTreeSet<String> = {
        let mut a: Vec<&OsStr> = vec![os("--format=posix"), os("--defined-only")];
        a.push(b.full.as_os_str());
        tool_in("nm", &a, d)
            .stdout
            .lines()
            .filter(|l| matches!(l.split_whitespace().nth(1), Some("T" | "t")))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    };
    let keep: Vec<&String> = funcs.difference(&dynsyms).collect();
    assert!(keep.iter().any(|k| *k == "fib"));
    let keep_file = d.join("keep_symbols");
    fs::write(
        &keep_file,
        keep.iter().map(|k| format!("{k}\n")).collect::<String>(),
    )
    .unwrap();
    let mini = d.join("mini");
    let mini_small = d.join("mini.small");
    tool_in(
        "objcopy",
        &[
            os("--only-keep-debug"),
            b.full.as_os_str(),
            mini.as_os_str(),
        ],
        d,
    );
    let keep_arg = format!("--keep-symbols={}", keep_file.display());
    tool_in(
        "objcopy",
        &[
            os("--strip-all"),
            os(&keep_arg),
            os("--remove-section"),
            os(".comment"),
            mini.as_os_str(),
            mini_small.as_os_str(),
        ],
        d,
    );
    let r = run(Command::new("xz").arg("-f").arg(&mini_small));
    assert!(
        r.success(),
        "xz failed (apt-get install xz-utils)\n{}",
        r.describe()
    );
    let xz = d.join("mini.small.xz");
    let with_mdi = d.join("prog_mdi");
    let section = format!(".gnu_debugdata={}", xz.display());
    tool_in(
        "objcopy",
        &[
            os("--add-section"),
            os(&section),
            b.stripped.as_os_str(),
            with_mdi.as_os_str(),
        ],
        d,
    );
    let native = run(&mut Command::new(&b.full));
    let rec = record_any(&with_mdi, &[], &[]);
    assert_same_behaviour(&native, &rec.run, "MiniDebugInfo");
    let mut rep = report(&rec.dir.path);
    assert!(rep.calls("fib") > 100, "fib not named");
    let mdi = canonical(&with_mdi);
    for f in &mut rep.functions {
        if canonical(Path::new(&f.module)) == mdi {
            f.module = b.full.to_string_lossy().into_owned();
        }
    }
    let cg = callgrind(&b.full, &[]);
    if let Err(msg) = compare_with_callgrind(&b.full, &rep, &cg, &CompareOptions::default()) {
        panic!("MiniDebugInfo: {msg}(trace: {})", rec.dir.path.display());
    }
}
