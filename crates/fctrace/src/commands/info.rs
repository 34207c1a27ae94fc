//! `fctrace info`: what a trace holds.

use crate::cli::InfoArgs;
use crate::output::is_broken_pipe;
use anyhow::Context;
use fctrace_format::store::{ExitStatus, Trace};
use fctrace_format::symtab::{FuncKind, FuncStatus, SymTab};
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

pub fn run(args: InfoArgs) -> anyhow::Result<ExitCode> {
    let trace = Trace::open(&args.dir)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let written = write_info(&mut out, &trace).and_then(|()| Ok(out.flush()?));
    match written {
        Err(e) if is_broken_pipe(&e) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.context("cannot write the trace information")),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

/// The whole human-readable description of `trace`.
pub fn write_info(out: &mut dyn Write, trace: &Trace) -> anyhow::Result<()> {
    let info = &trace.info;
    writeln!(
        out,
        "Trace:          {} (format {}, recorded by fctrace {})",
        trace.dir.display(),
        info.format_version,
        info.fctrace_version
    )?;
    writeln!(out, "Program:        {}", info.program)?;
    writeln!(out, "Command line:   {}", shell_words(&info.args))?;
    writeln!(out, "Directory:      {}", info.cwd)?;
    writeln!(out, "Started:        {}", utc_time(info.start_unix_ns))?;
    writeln!(out, "Exit status:    {}", exit_text(info.exit))?;
    writeln!(out, "Events:         {}", info.events)?;
    writeln!(out, "Lost events:    {}", info.lost_events)?;
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

    writeln!(out)?;
    writeln!(out, "Tasks: {}", info.tasks.len())?;
    writeln!(
        out,
        "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}  COMM",
        "PID", "TID", "PPID", "PARENT", "SESSION", "EVENTS"
    )?;
    for t in &info.tasks {
        let parent = t
            .parent_tid
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        writeln!(
            out,
            "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}  {}",
            t.pid, t.tid, t.ppid, parent, t.session, t.events, t.comm
        )?;
    }

    for (id, table) in &trace.sessions {
        writeln!(out)?;
        write_session(out, *id, table)?;
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

fn write_session(out: &mut dyn Write, id: u32, table: &SymTab) -> io::Result<()> {
    writeln!(out, "Session {id}: {} (pid {})", table.exe, table.pid)?;
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  Module",
        "Instrumented", "Entry-only", "Not traced"
    )?;
    let mut counts = vec![(0u64, 0u64, 0u64); table.modules.len()];
    for f in &table.functions {
        if let Some(c) = counts.get_mut(f.module as usize) {
            match f.status {
                FuncStatus::Traced => c.0 += 1,
                FuncStatus::EntryOnly => {
                    c.0 += 1;
                    c.1 += 1;
                }
                FuncStatus::NotTraced(_) => c.2 += 1,
            }
        }
    }
    for (m, (traced, entry_only, not_traced)) in table.modules.iter().zip(&counts) {
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
        };
        format!("{}{kind} ({module})", fctrace_symbols::demangle(&f.name))
    };
    let not_traced: Vec<_> = table
        .functions
        .iter()
        .filter_map(|f| match &f.status {
            FuncStatus::NotTraced(reason) => Some((f, reason)),
            _ => None,
        })
        .collect();
    if !not_traced.is_empty() {
        writeln!(out, "  Not instrumented ({}):", not_traced.len())?;
        for (f, reason) in not_traced {
            writeln!(out, "    {}: {reason}", describe(f))?;
        }
    }
    let entry_only: Vec<_> = table
        .functions
        .iter()
        .filter(|f| f.status == FuncStatus::EntryOnly)
        .collect();
    if !entry_only.is_empty() {
        writeln!(
            out,
            "  Entry-only, their returns are not traced ({}):",
            entry_only.len()
        )?;
        for f in entry_only {
            writeln!(out, "    {}", describe(f))?;
        }
    }
    Ok(())
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

fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|s| s.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

fn human_bytes(n: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::testutil::{ev, fake_trace, FakeTask};
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
    fn info_text() {
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(10, vec![ev(Entry, 0, 0), ev(Exit, 0, 5)]),
            FakeTask::thread(11, 10, vec![]),
        ]);
        let mut out = Vec::new();
        write_info(&mut out, &trace).unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "Program:        /usr/bin/prog\n",
            "Command line:   prog -v\n",
            "Exit status:    exited with code 0\n",
            "Started:        2023-11-14 22:13:20 UTC\n",
            "Events:         2\n",
            "Lost events:    0\n",
            "Tasks: 2\n",
            "        10       10        1        -        0          2  prog\n",
            "        10       11        1       10        0          0  prog\n",
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
}
