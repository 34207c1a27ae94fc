//! The readers' naming step: a trace opened, then the functions no symbol
//! named at record time (`prog+0x1139`) named from their modules' debug
//! files (fctrace-debuginfo), before any filter or rendering sees a name.

use crate::cli::NamingArgs;
use fctrace_analysis::warn;
use fctrace_debuginfo::{Config, Finder, Naming, Origin, Source};
use fctrace_format::store::Trace;
use std::io::{self, Write};
use std::path::Path;

/// Opens the trace in `dir` and names its unnamed functions.
pub fn open(dir: &Path, args: &NamingArgs) -> anyhow::Result<Trace> {
    Ok(open_with_naming(dir, args)?.0)
}

/// [`open`], with where each module's names came from.
pub fn open_with_naming(dir: &Path, args: &NamingArgs) -> anyhow::Result<(Trace, Naming)> {
    check_dirs(args)?;
    let mut trace = Trace::open(dir)?;
    let naming = name(&mut trace, args);
    Ok((trace, naming))
}

/// A `--debug-dir` that is not a directory is an error (a typo would
/// otherwise silently name nothing).
pub fn check_dirs(args: &NamingArgs) -> anyhow::Result<()> {
    for d in &args.debug_dirs {
        if !d.is_dir() {
            anyhow::bail!("--debug-dir {}: no such directory", d.display());
        }
    }
    Ok(())
}

/// Names the unnamed functions of `trace`; the notes (servers not
/// reached...) go to stderr.
pub fn name(trace: &mut Trace, args: &NamingArgs) -> Naming {
    let mut finder = Finder::new(Config::from_env(args.debug_dirs.clone()));
    let naming = fctrace_debuginfo::name_trace(trace, &mut finder);
    for note in &naming.notes {
        warn(note);
    }
    naming
}

/// `info`'s section "Names": per module of each session, where the names
/// of the functions no symbol named at record time came from; nothing
/// when every function had its name at record time.
pub fn write_origins(out: &mut dyn Write, trace: &Trace, naming: &Naming) -> io::Result<()> {
    if naming
        .modules
        .iter()
        .all(|m| m.origin == Origin::RecordTime)
    {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "Names:")?;
    for m in &naming.modules {
        let Some(module) = trace
            .sessions
            .get(&m.session)
            .and_then(|t| t.module(m.module))
        else {
            continue;
        };
        let origin = match &m.origin {
            Origin::RecordTime => "its symbols, at record time".to_string(),
            Origin::DebugFile {
                found,
                named,
                unnamed,
            } => {
                let how = match &found.source {
                    Source::DebugDir => "--debug-dir".to_string(),
                    Source::Standard => "standard place".to_string(),
                    Source::Debuginfod(url) => format!("debuginfod {url}"),
                    Source::DebuginfodCache => "debuginfod cache".to_string(),
                };
                format!(
                    "{named} of {unnamed} unnamed functions named from {} ({how})",
                    found.path.display()
                )
            }
            Origin::Unreadable {
                path,
                error,
                unnamed,
            } => format!(
                "{unnamed} unnamed functions: debug file {} unreadable: {error}",
                path.display()
            ),
            Origin::NotFound { unnamed } => {
                format!("{unnamed} unnamed functions: no debug file found (module+offset names)")
            }
        };
        writeln!(out, "  session {} {}: {origin}", m.session, module.path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use fctrace_analysis::testutil::{ev, fake_trace_with, FakeTask};
    use fctrace_format::event::EventKind::{Entry, Exit};
    use fctrace_format::symtab::{self, FuncKind, FuncStatus, Function, Module, SymTab};
    use std::process::Command as Run;

    #[track_caller]
    fn ok(cmd: &mut Run) -> String {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install gcc binutils)"));
        assert!(out.status.success(), "{cmd:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// The replay of a trace of a stripped program whose table names its
    /// functions `prog+0x...` (as the agent writes them), read with
    /// `--debug-dir`: the names of the debug file (nm's, on the unstripped
    /// build), `-F` selecting by them, `info` saying where they came from;
    /// without the directory, the module+offset names.
    #[test]
    fn replay_names_stripped_functions_from_a_debug_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(
            d.join("p.c"),
            "__attribute__((noinline)) int leaf_fn(int x) { return x * 3; }\n\
             __attribute__((noinline)) int mid_fn(int x) { return leaf_fn(x) + 1; }\n\
             int main(int c, char **v) { (void)v; return mid_fn(c); }\n",
        )
        .unwrap();
        let full = d.join("p.full");
        ok(Run::new("gcc")
            .args([
                "-O2",
                "-g",
                "-Wl,--build-id=0xfeedc0de0123456789abcdef",
                "-o",
            ])
            .arg(&full)
            .arg(d.join("p.c")));
        let dbg = d.join("dbg");
        std::fs::create_dir(&dbg).unwrap();
        ok(Run::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(dbg.join("p.debug")));
        let prog = d.join("prog");
        ok(Run::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&prog)
            .arg(&full));
        let nm = ok(Run::new("nm").arg(&full));
        let addr = |name: &str| {
            let line = nm
                .lines()
                .find(|l| l.ends_with(&format!(" {name}")))
                .unwrap();
            u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap()
        };
        let path = prog.to_str().unwrap();
        let f = |id: u32, name: &str| Function {
            id,
            module: 0,
            addr: addr(name),
            size: 4,
            kind: FuncKind::Function,
            status: FuncStatus::Traced,
            name: symtab::unnamed_function_name(path, addr(name)),
        };
        let table = SymTab {
            session: 0,
            pid: 7,
            exe: path.into(),
            modules: vec![Module {
                build_id: "feedc0de0123456789abcdef".into(),
                ..Module::new(0, 0x5555_0000_0000, path)
            }],
            functions: vec![f(0, "main"), f(1, "mid_fn"), f(2, "leaf_fn")],
            forked: None,
        };
        let events = vec![
            ev(Entry, 0, 0),
            ev(Entry, 1, 10),
            ev(Entry, 2, 20),
            ev(Exit, 2, 30),
            ev(Exit, 1, 40),
            ev(Exit, 0, 50),
        ];
        let (_trace_dir, trace) = fake_trace_with(&[table], &[FakeTask::main(7, events)]);
        let dir = trace.dir.to_str().unwrap().to_string();
        let replay = |extra: &[&str]| {
            let mut argv = vec!["fctrace", "replay", "-d", &dir, "-f", "none"];
            argv.extend_from_slice(extra);
            let Some(Command::Replay(args)) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not replay");
            };
            let trace = open(&args.dir, &args.naming).unwrap();
            let mut out = Vec::new();
            let options = args.filter.to_options().unwrap();
            fctrace_analysis::tree::print_tree_with(&trace, &options, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let dbg_arg = dbg.to_str().unwrap();
        let named = replay(&["--debug-dir", dbg_arg]);
        assert!(
            named.contains("main() {")
                && named.contains("mid_fn() {")
                && named.contains("leaf_fn();"),
            "{named}"
        );
        let only = replay(&["--debug-dir", dbg_arg, "-F", "mid_fn"]);
        assert!(
            only.contains("mid_fn() {") && !only.contains("main"),
            "{only}"
        );
        let unnamed = replay(&[]);
        assert!(
            unnamed.contains(&format!("prog+{:#x}() {{", addr("mid_fn"))),
            "{unnamed}"
        );

        let (trace, naming) = open_with_naming(
            Path::new(&dir),
            &NamingArgs {
                debug_dirs: vec![dbg.clone()],
            },
        )
        .unwrap();
        let mut out = Vec::new();
        write_origins(&mut out, &trace, &naming).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "\nNames:\n  session 0 {path}: 3 of 3 unnamed functions named from {} (--debug-dir)\n",
                dbg.join("p.debug").display()
            )
        );
        let err = open(
            Path::new(&dir),
            &NamingArgs {
                debug_dirs: vec![d.join("none")],
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("--debug-dir")
                && err.to_string().contains("no such directory")
        );
    }
}
