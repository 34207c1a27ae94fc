//! `fctrace info`: what a trace holds.

use super::output::{Output, Terminal};
use crate::cli::InfoArgs;
use anyhow::Context;
use fctrace_analysis::is_broken_pipe;
use fctrace_analysis::term::{paint, RED};
use fctrace_format::store::{ExitStatus, Trace};
use fctrace_format::symtab::{FuncKind, FuncStatus, SymTab};
use fctrace_options::known_signal_name as signal_name;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

/// Prints what the trace holds. Fails (after printing it all) when event
/// files are damaged, as `replay` does on the same trace: each task's file
/// is checked chunk by chunk (headers, sizes, checksums, the count of
/// events), without decoding the events.
pub fn run(args: InfoArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    if args.system {
        let mut output = Output::open(&args.output, terminal)?;
        let mut out = BufWriter::new(&mut output.writer);
        write_facts(&mut out, &fctrace_record::system_facts(), "")?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let (trace, naming) = super::naming::open_with_naming(&args.dir, &args.naming)?;
    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    if args.task || args.symbols {
        let written = if args.task {
            write_task_tree(&mut out, &trace, true)
        } else {
            write_symbols(&mut out, &trace)
        }
        .and_then(|()| out.flush());
        return match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
            Err(e) => Err(anyhow::Error::from(e).context("cannot write the trace information")),
            Ok(()) => Ok(ExitCode::SUCCESS),
        };
    }
    let damaged = damaged_tasks(&trace);
    let written = write_info(&mut out, &trace, args.verbose)
        .and_then(|()| Ok(super::naming::write_origins(&mut out, &trace, &naming)?))
        .and_then(|()| write_damaged(&mut out, &damaged))
        .and_then(|()| Ok(out.flush()?));
    match written {
        Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e.context("cannot write the trace information")),
        Ok(()) => {}
    }
    match damaged.len() {
        0 => Ok(ExitCode::SUCCESS),
        n => anyhow::bail!(
            "the events of {n} task{} of {} are damaged (see \"Damaged events\"); replay \
             and report show what can be read",
            if n == 1 { "" } else { "s" },
            trace.shown().display()
        ),
    }
}

/// The tasks whose event files cannot be read to the end, with why.
fn damaged_tasks(trace: &Trace) -> Vec<(u32, String)> {
    trace
        .info
        .tasks
        .iter()
        .filter_map(|t| trace.check_task(t).err().map(|e| (t.id, e.to_string())))
        .collect()
}

fn write_damaged(out: &mut dyn Write, damaged: &[(u32, String)]) -> anyhow::Result<()> {
    if damaged.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let n = damaged.len();
    let heading = format!(
        "Damaged events ({n} task{}):",
        if n == 1 { "" } else { "s" }
    );
    writeln!(out, "{}", paint(&heading, RED))?;
    for (id, e) in damaged {
        writeln!(out, "  task {id}: {e}")?;
    }
    Ok(())
}

/// The whole human-readable description of `trace`.
pub fn write_info(out: &mut dyn Write, trace: &Trace, verbose: bool) -> anyhow::Result<()> {
    let info = &trace.info;
    writeln!(
        out,
        "Trace:          {} (format {}, recorded by fctrace {})",
        trace.shown().display(),
        info.format_version,
        info.fctrace_version
    )?;
    writeln!(out, "Program:        {}", info.program)?;
    writeln!(out, "Command line:   {}", shell_words(&info.args))?;
    writeln!(out, "Directory:      {}", info.cwd)?;
    writeln!(out, "Started:        {}", utc_time(info.start_unix_ns))?;
    writeln!(out, "Exit status:    {}", exit_text(info.exit))?;
    if let Some(snap) = &info.snapshot {
        let why = match snap.reason.as_str() {
            "exit" => "at the program's exit".to_string(),
            "trigger" => "by a snapshot trigger".to_string(),
            "detach" => "when fctrace detached".to_string(),
            "end" => "at the end of the recording".to_string(),
            "SIGUSR2" => "on SIGUSR2 (fctrace snapshot)".to_string(),
            "SIGINT" => "on Ctrl-C".to_string(),
            sig => format!("the program died by {sig}"),
        };
        writeln!(
            out,
            "Snapshot:       {} of a flight recording (--ring {}), {why}; {} earlier events not kept",
            snap.number,
            human_bytes(snap.ring_size),
            snap.events_before
        )?;
    }
    if !info.options.is_empty() {
        writeln!(out, "Record options: {}", options_text(&info.options))?;
    }
    writeln!(out, "Events:         {}", info.events)?;
    let lost = info.lost_events.to_string();
    let lost = match info.lost_events {
        0 => lost,
        _ => paint(&lost, RED),
    };
    writeln!(out, "Lost events:    {lost}")?;
    if trace.info.kernel_events > 0 {
        writeln!(
            out,
            "Kernel events:  {} (record -k: system calls, switches, page faults, paths)",
            trace.info.kernel_events
        )?;
    }
    if info.invalid_events > 0 {
        writeln!(out, "Invalid records: {} (skipped)", info.invalid_events)?;
    }
    let size = trace
        .disk_size()
        .context("cannot measure the trace directory")?;
    let per_event = if info.events > 0 {
        format!(
            ", {:.2} bytes/event",
            info.bytes as f64 / info.events as f64
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "Size on disk:   {} (event data {}{per_event})",
        human_bytes(size),
        human_bytes(info.bytes)
    )?;

    if !info.facts.is_empty() {
        writeln!(out)?;
        writeln!(out, "System and run (as uftrace's info):")?;
        write_facts(out, &info.facts, "  ")?;
    }

    writeln!(out)?;
    writeln!(out, "Tasks: {}", info.tasks.len())?;
    write_task_tree(out, trace, false)?;

    for (id, table) in &trace.sessions {
        writeln!(out)?;
        write_session(out, *id, table, verbose)?;
    }

    let warnings: Vec<&String> = info.warnings.iter().chain(&trace.load_warnings).collect();
    if !warnings.is_empty() {
        writeln!(out)?;
        writeln!(out, "Warnings:")?;
        for w in warnings {
            writeln!(out, "  {w}")?;
        }
    }
    Ok(())
}

/// Deepest level of the task tree indented further (2 spaces per level);
/// deeper tasks show `(level N)`.
const MAX_TASK_INDENT: usize = 50;

/// The tasks as a tree, pstree-like: each task under the task that
/// created it (thread, fork, exec, spawn), in order of creation; a task
/// whose parent is not in the trace is a root.
/// `(label, value)` lines, `PREFIXlabel : value` with the labels aligned.
fn write_facts(out: &mut dyn Write, facts: &[(String, String)], prefix: &str) -> io::Result<()> {
    for (label, value) in facts {
        writeln!(out, "{prefix}{label:<19} : {value}")?;
    }
    Ok(())
}

/// `info --symbols`: per session, the traced functions of the
/// executable, then its traced calls into libraries (PLT, GOT), each
/// list by address.
fn write_symbols(out: &mut dyn Write, trace: &Trace) -> io::Result<()> {
    let many = trace.sessions.len() > 1;
    for table in trace.sessions.values() {
        if many {
            writeln!(out, "# {}", table.exe)?;
        }
        let exe = table.modules.iter().position(|m| m.path == table.exe);
        let traced =
            |f: &&fctrace_format::symtab::Function| !matches!(f.status, FuncStatus::NotTraced(_));
        let mut normal: Vec<_> = table
            .functions
            .iter()
            .filter(traced)
            .filter(|f| f.kind == FuncKind::Function && exe == Some(f.module as usize))
            .collect();
        let mut dynamic: Vec<_> = table
            .functions
            .iter()
            .filter(traced)
            .filter(|f| {
                !matches!(
                    f.kind,
                    FuncKind::Function | FuncKind::Python | FuncKind::Sdt
                )
            })
            .collect();
        normal.sort_by_key(|f| f.addr);
        dynamic.sort_by_key(|f| f.addr);
        write_python_symbols(out, table)?;
        for (title, list) in [("Normal symbols", normal), ("Dynamic symbols", dynamic)] {
            writeln!(out, "{title}")?;
            writeln!(out, "{}", "=".repeat(title.len()))?;
            for (i, f) in list.iter().enumerate() {
                writeln!(out, "[{i:>2}] {} ({:#x}) size: {}", f.name, f.addr, f.size)?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// The Python functions a session saw (`py` lines), by source file and
/// line: `name (file:line)`.
fn write_python_symbols(out: &mut dyn Write, table: &SymTab) -> io::Result<()> {
    let mut python: Vec<_> = table
        .functions
        .iter()
        .filter(|f| f.kind == FuncKind::Python)
        .map(|f| {
            let file = table.module(f.module).map_or("?", |m| m.path.as_str());
            (file, f.addr, f.name.as_str())
        })
        .collect();
    if python.is_empty() {
        return Ok(());
    }
    python.sort();
    let title = "Python functions";
    writeln!(out, "{title}")?;
    writeln!(out, "{}", "=".repeat(title.len()))?;
    for (i, (file, line, name)) in python.iter().enumerate() {
        writeln!(out, "[{i:>2}] {name} ({file}:{line})")?;
    }
    writeln!(out)
}

fn write_task_tree(out: &mut dyn Write, trace: &Trace, short: bool) -> io::Result<()> {
    use std::collections::{HashMap, HashSet};
    let tasks = &trace.info.tasks;
    let ids: HashSet<u32> = tasks.iter().map(|t| t.id).collect();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        match t.parent.filter(|p| ids.contains(p) && *p != t.id) {
            Some(p) => children.entry(p).or_default().push(i),
            None => roots.push(i),
        }
    }
    // Depth-first without recursion (a chain of thousands of tasks is
    // possible); `shown` guards against a cycle in a damaged info.json.
    let mut shown = vec![false; tasks.len()];
    let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&i| (i, 0)).collect();
    loop {
        let (i, level) = match stack.pop() {
            Some(next) => next,
            None => match shown.iter().position(|s| !s) {
                // Tasks only reachable through a cycle.
                Some(i) => (i, 0),
                None => break,
            },
        };
        if std::mem::replace(&mut shown[i], true) {
            continue;
        }
        let t = &tasks[i];
        if short {
            // uftrace's `info --task`: `[TID] NAME`, 6 spaces per level.
            writeln!(
                out,
                "{:w$}[{}] {}",
                "",
                t.tid,
                t.comm,
                w = 6 * level.min(MAX_TASK_INDENT)
            )?;
            if let Some(kids) = children.get(&t.id) {
                stack.extend(kids.iter().rev().map(|&k| (k, level + 1)));
            }
            continue;
        }
        let indent = 2 + 2 * level.min(MAX_TASK_INDENT);
        let deep = if level > MAX_TASK_INDENT {
            format!("(level {level}) ")
        } else {
            String::new()
        };
        let parent = t
            .parent
            .map_or_else(String::new, |p| format!(" of task {p}"));
        writeln!(
            out,
            "{:indent$}{deep}task {}: {}{parent}, pid {}, tid {} ({}), {}, {} events",
            "",
            t.id,
            t.origin.as_str(),
            t.pid,
            t.tid,
            t.comm,
            fctrace_analysis::tree::session_program(trace, t.session),
            t.events
        )?;
        if let Some(kids) = children.get(&t.id) {
            stack.extend(kids.iter().rev().map(|&k| (k, level + 1)));
        }
    }
    Ok(())
}

fn write_session(out: &mut dyn Write, id: u32, table: &SymTab, verbose: bool) -> io::Result<()> {
    // A fork child's own session: its parent's functions are listed with
    // the parent; only those it added are counted here.
    let first = table
        .forked
        .as_ref()
        .map_or(0, |f| (f.functions as usize).min(table.functions.len()));
    let functions = &table.functions[first..];
    match &table.forked {
        Some(f) => writeln!(
            out,
            "Session {id}: {} (pid {}), forked from session {}: its functions, and {} of its own",
            table.exe,
            table.pid,
            f.parent,
            functions.len()
        )?,
        None => writeln!(out, "Session {id}: {} (pid {})", table.exe, table.pid)?,
    }
    if table.forked.is_some() && functions.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  Module",
        "Instrumented", "Entry-only", "Not traced"
    )?;
    let mut counts = vec![(0u64, 0u64, 0u64); table.modules.len()];
    for f in functions {
        if let Some(c) = counts.get_mut(f.module as usize) {
            match f.status {
                FuncStatus::Traced | FuncStatus::TracedTrap => c.0 += 1,
                FuncStatus::EntryOnly => {
                    c.0 += 1;
                    c.1 += 1;
                }
                FuncStatus::NotTraced(_) => c.2 += 1,
            }
        }
    }
    for (m, (traced, entry_only, not_traced)) in table.modules.iter().zip(&counts) {
        if first > 0 && traced + not_traced == 0 {
            continue;
        }
        writeln!(
            out,
            "  {traced:>12}  {entry_only:>10}  {not_traced:>10}  {}",
            m.path
        )?;
    }
    let describe = |f: &fctrace_format::symtab::Function| {
        let module = table.module(f.module).map_or("?", |m| m.path.as_str());
        let kind = match f.kind {
            FuncKind::Function => "",
            FuncKind::Plt => " [plt]",
            FuncKind::Got => " [got]",
            FuncKind::Python => " [py]",
            FuncKind::Sdt => " [sdt]",
        };
        format!("{}{kind} ({module})", fctrace_symbols::demangle(&f.name))
    };
    let not_traced: Vec<_> = functions
        .iter()
        .filter_map(|f| match &f.status {
            FuncStatus::NotTraced(reason) => Some((f, reason)),
            _ => None,
        })
        .collect();
    if not_traced.len() > LISTED && !verbose {
        writeln!(
            out,
            "  Not instrumented ({}), by reason (each one with --verbose):",
            not_traced.len()
        )?;
        for (n, reason) in reason_counts(not_traced.iter().map(|(_, r)| r.as_str())) {
            writeln!(out, "    {n:>7}  {reason}")?;
        }
    } else if !not_traced.is_empty() {
        writeln!(out, "  Not instrumented ({}):", not_traced.len())?;
        for (f, reason) in not_traced {
            writeln!(out, "    {}: {reason}", describe(f))?;
        }
    }
    for (status, heading) in [
        (
            FuncStatus::TracedTrap,
            "Traced through the trap fallback, a signal per call",
        ),
        (
            FuncStatus::EntryOnly,
            "Entry-only, their returns are not traced",
        ),
    ] {
        let listed: Vec<_> = functions.iter().filter(|f| f.status == status).collect();
        if !listed.is_empty() {
            writeln!(out, "  {heading} ({}):", listed.len())?;
            for f in listed {
                writeln!(out, "    {}", describe(f))?;
            }
        }
    }
    Ok(())
}

/// Functions not instrumented listed one by one up to this many (without
/// `--verbose`); more are counted per reason (a stripped program's split
/// parts are thousands).
const LISTED: usize = 20;

/// How many times each reason is given, its details in a trailing
/// parenthesis left out ("split part reached only by jumps (from
/// 0x4a3f0)"), most frequent first.
fn reason_counts<'a>(reasons: impl Iterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in reasons {
        let key = match r.rfind(" (") {
            Some(k) if r.ends_with(')') => &r[..k],
            _ => r,
        };
        *counts.entry(key).or_default() += 1;
    }
    let mut v: Vec<(usize, &str)> = counts.into_iter().map(|(r, n)| (n, r)).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    v
}

/// Arguments joined by spaces, those with spaces or quotes single-quoted.
fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+%@".contains(&b));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn exit_text(exit: Option<ExitStatus>) -> String {
    match exit {
        None => "unknown (the program did not end while recorded)".to_string(),
        Some(ExitStatus::Code(code)) => format!("exited with code {code}"),
        Some(ExitStatus::Signal { signal, core }) => {
            let name = signal_name(signal).map_or_else(String::new, |n| format!(" ({n})"));
            let core = if core { ", core dumped" } else { "" };
            format!("killed by signal {signal}{name}{core}")
        }
    }
}

pub(super) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a unix time in nanoseconds.
fn utc_time(unix_ns: u64) -> String {
    if unix_ns == 0 {
        return "unknown".to_string();
    }
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a proleptic Gregorian date.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The record-time options of a trace (their text form for the agent) as
/// command-line options: `-F main -D 2 --disable`.
fn options_text(wire: &str) -> String {
    let mut parts = Vec::new();
    for line in wire.lines() {
        let (k, v) = line.split_once(' ').unwrap_or((line, ""));
        let flag = match k {
            "F" | "N" | "C" | "D" | "T" => format!("-{k}"),
            "t" => "-t".to_string(),
            "tid" => "--tid".to_string(),
            "disable" => {
                parts.push("--disable".to_string());
                continue;
            }
            "auto-args" => {
                parts.push("-a".to_string());
                continue;
            }
            "signal" => "--signal".to_string(),
            "A" if v.contains("@retval") => "-R".to_string(),
            "A" => "-A".to_string(),
            "string-max" if v == fctrace_options::DEFAULT_STRING_MAX.to_string() => continue,
            "string-max" => "--max-string".to_string(),
            _ => k.to_string(),
        };
        let v = if k == "t" {
            format!("{v}ns")
        } else {
            v.to_string()
        };
        parts.push(format!("{flag} {}", shell_words(&[v])));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fctrace_analysis::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::{Entry, Exit};

    #[test]
    fn helpers() {
        assert_eq!(
            utc_time(1_700_000_000_000_000_000),
            "2023-11-14 22:13:20 UTC"
        );
        assert_eq!(utc_time(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(0), "unknown");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
        assert_eq!(
            exit_text(Some(ExitStatus::Signal {
                signal: 11,
                core: true
            })),
            "killed by signal 11 (SIGSEGV), core dumped"
        );
        assert_eq!(exit_text(Some(ExitStatus::Code(3))), "exited with code 3");
        assert_eq!(
            exit_text(Some(ExitStatus::Signal {
                signal: 64,
                core: false
            })),
            "killed by signal 64"
        );
        assert_eq!(
            shell_words(&["a".into(), "b c".into(), "it's".into(), "".into()]),
            "a 'b c' 'it'\\''s' ''"
        );
    }

    #[test]
    fn trap_fallback_functions_are_listed() {
        use fctrace_format::symtab::{Function, Module};
        let f = |id, name: &str, status| Function {
            id,
            module: 0,
            addr: 0x1000 + u64::from(id) * 4,
            size: 4,
            kind: FuncKind::Function,
            status,
            name: name.to_string(),
        };
        let table = SymTab {
            session: 0,
            pid: 7,
            exe: "/bin/p".into(),
            modules: vec![Module::new(0, 0, "/bin/p")],
            functions: vec![
                f(0, "main", FuncStatus::Traced),
                f(1, "in_parent", FuncStatus::TracedTrap),
                f(2, "_ZN1SC2Ei", FuncStatus::TracedTrap),
            ],
            forked: None,
        };
        let mut out = Vec::new();
        write_session(&mut out, 0, &table, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("             3           0           0  /bin/p\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  Traced through the trap fallback, a signal per call (2):\n    \
                 in_parent (/bin/p)\n    S::S(int) (/bin/p)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("Not instrumented"), "{text}");
    }

    #[test]
    fn reasons_are_counted() {
        let reasons = [
            "split part reached only by jumps (from 0x10)",
            "PLT stub",
            "split part reached only by jumps (from 0x20)",
            "too short to patch (3 bytes)",
        ];
        assert_eq!(
            reason_counts(reasons.into_iter()),
            vec![
                (2, "split part reached only by jumps"),
                (1, "PLT stub"),
                (1, "too short to patch"),
            ]
        );
    }

    #[test]
    fn info_text() {
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(10, vec![ev(Entry, 0, 0), ev(Exit, 0, 5)]),
            FakeTask::thread(11, 10, vec![]),
        ]);
        let mut out = Vec::new();
        write_info(&mut out, &trace, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "Program:        /usr/bin/prog\n",
            "Command line:   prog -v\n",
            "Exit status:    exited with code 0\n",
            "Started:        2023-11-14 22:13:20 UTC\n",
            "Events:         2\n",
            "Lost events:    0\n",
            "Tasks: 2\n  task 10: start, pid 10, tid 10 (prog), /usr/bin/prog, 2 events\n    \
             task 11: thread of task 10, pid 10, tid 11 (prog), /usr/bin/prog, 0 events\n",
            "Session 0: /usr/bin/prog (pid 100)\n",
            "             5           0           1  /usr/bin/prog\n",
            "             2           1           0  /lib/x86_64-linux-gnu/libc.so.6\n",
            "  Not instrumented (1):\n    tiny (/usr/bin/prog): too short to patch (3 bytes)\n",
            "_setjmp [plt] (/lib/x86_64-linux-gnu/libc.so.6)\n",
        ] {
            assert!(text.contains(needle), "{needle:?} not in\n{text}");
        }
        assert!(!text.contains("Warnings"));
    }

    #[test]
    fn task_tree() {
        use fctrace_format::store::TaskOrigin;
        let task = |id, tid, pid, origin, parent: Option<u32>, session| FakeTask {
            id,
            origin,
            parent,
            session,
            ..FakeTask::thread(tid, pid, vec![ev(Entry, 0, u64::from(id))])
        };
        let mut ls = fctrace_analysis::testutil::default_symtab(1);
        ls.exe = "/bin/ls".into();
        let (_dir, trace) = fctrace_analysis::testutil::fake_trace_with(
            &[fctrace_analysis::testutil::default_symtab(0), ls],
            &[
                task(0, 50, 50, TaskOrigin::Start, None, 0),
                task(1, 51, 50, TaskOrigin::Thread, Some(0), 0),
                task(2, 60, 60, TaskOrigin::Fork, Some(1), 0),
                task(3, 60, 60, TaskOrigin::Exec, Some(2), 1),
                task(4, 70, 70, TaskOrigin::Spawn, Some(0), 1),
                task(5, 80, 80, TaskOrigin::Fork, Some(99), 0),
            ],
        );
        let mut out = Vec::new();
        write_task_tree(&mut out, &trace, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  task 0: start, pid 50, tid 50 (prog), /usr/bin/prog, 1 events
    task 1: thread of task 0, pid 50, tid 51 (prog), /usr/bin/prog, 1 events
      task 2: fork of task 1, pid 60, tid 60 (prog), /usr/bin/prog, 1 events
        task 3: exec of task 2, pid 60, tid 60 (prog), /bin/ls, 1 events
    task 4: spawn of task 0, pid 70, tid 70 (prog), /bin/ls, 1 events
  task 5: fork of task 99, pid 80, tid 80 (prog), /usr/bin/prog, 1 events
"
        );
    }
}
