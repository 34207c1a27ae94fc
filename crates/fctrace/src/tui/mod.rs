//! `fctrace tui`: an interactive terminal UI over a recorded trace.
//!
//! - [`model`]: the calling-context trees (per task and merged) and the
//!   per-function statistics, built in one streaming pass;
//! - [`app`]: the state and what each key does;
//! - [`columns`]: the report's columns and sort keys (`--report -f -s`);
//! - [`view`]: drawing it with ratatui.
//!
//! The terminal (raw mode, alternate screen) is restored when the TUI
//! ends, on an error, on a panic (ratatui's panic hook), on Ctrl-C (a
//! key in raw mode) and on SIGTERM, SIGHUP, SIGINT and SIGQUIT (caught:
//! the TUI then exits with status 128 + the signal); it is left to the
//! editor that `O` runs, and taken back when the editor ends.

pub mod app;
pub mod columns;
pub mod model;
pub mod view;

use crate::cli::TuiArgs;
use fctrace_analysis::{filter, warn};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(args: TuiArgs) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    let looks = Looks::from_args(&args)?;
    let trace = crate::commands::naming::open(&args.dir, &args.naming)?;
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !args.exit_after_load && !terminal {
        anyhow::bail!("fctrace tui needs a terminal; use replay/report/graph");
    }
    for w in &trace.load_warnings {
        warn(w);
    }
    filter::warn_unmatched(&trace, &given);
    filter::warn_tracing_gaps(&trace, &given);
    let options = filter::with_recorded_display(&given, &trace);
    let title = std::iter::once(trace.info.program.as_str())
        .chain(trace.info.args.iter().skip(1).map(|s| s.as_str()))
        .collect::<Vec<_>>()
        .join(" ");

    if args.exit_after_load {
        let start = Instant::now();
        let mut progress = fctrace_analysis::Progress::new(
            "tui",
            trace.info.events,
            fctrace_analysis::Progress::wanted(false),
        );
        let (model, errors) = model::build(&trace, &options, &mut |done| {
            progress.update(done);
            true
        })
        .map_err(|_| anyhow::anyhow!("loading stopped"))?;
        progress.finish();
        // A full disk or a closed pipe is an error said, not a panic.
        writeln!(
            std::io::stdout(),
            "{} events, {} tasks, {} functions, {} call paths, loaded in {:.3} s",
            model.events,
            model.tasks.len(),
            model.names.len(),
            model.nodes(),
            start.elapsed().as_secs_f64()
        )
        .map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}"))?;
        return crate::commands::output::finish(&trace, STATS, model.lost, errors);
    }

    // A signal that would end the process sets this instead: the loops
    // below stop, the terminal is restored, and the status is 128 + it.
    let signalled = Arc::new(AtomicUsize::new(0));
    for sig in [SIGTERM, SIGHUP, SIGINT, SIGQUIT] {
        signal_hook::flag::register_usize(sig, Arc::clone(&signalled), sig as usize)?;
    }
    watch_for_a_stuck_end(Arc::clone(&signalled));
    let mut guard = Terminal::start()?;
    let term = &mut guard.0;
    let dir = args.dir.display().to_string();
    let total = trace.info.events;
    term.draw(|f| view::loading(f, 0, total, &dir))?;
    let mut last_draw = Instant::now();
    let mut draw_error = None;
    let built = model::build(&trace, &options, &mut |done| {
        if signalled.load(Ordering::Relaxed) != 0 {
            return false;
        }
        if last_draw.elapsed() < Duration::from_millis(100) {
            return true;
        }
        last_draw = Instant::now();
        if let Err(e) = term.draw(|f| view::loading(f, done, total, &dir)) {
            draw_error = Some(e);
            return false;
        }
        !stop_asked()
    });
    if let Some(e) = draw_error {
        return Err(e.into());
    }
    let Ok((model, errors)) = built else {
        drop(guard);
        return Ok(match signalled.load(Ordering::Relaxed) {
            0 => {
                eprintln!("fctrace: loading stopped");
                ExitCode::from(130)
            }
            sig => ended_by(sig),
        });
    };
    let lost = model.lost;
    let mut app = app::App::new(model, title);
    app.configure(looks.report, looks.cols, looks.fields, looks.sort);
    app.info = info_lines(&trace);
    let mut notes: Vec<String> = errors.iter().map(|e| format!("error: {e}")).collect();
    if !notes.is_empty() {
        notes.push("The readable part of the trace is shown.".into());
    }
    let all_lost = trace.info.lost_events.max(lost);
    if all_lost > 0 {
        notes.push(format!(
            "{all_lost} events were lost: the statistics are incomplete."
        ));
    }
    if !notes.is_empty() {
        notes.push("Any key closes this.".into());
        app.notice = Some(notes.join("\n\n"));
    }
    let mut dirty = true;
    while !app.quit && signalled.load(Ordering::Relaxed) == 0 {
        if dirty {
            term.draw(|f| view::draw(f, &mut app))?;
            dirty = false;
        }
        // Waits for a key at most this long: a signal is seen within it.
        if event::poll(Duration::from_millis(100))? {
            match event::read()? {
                Event::Key(k) => app.key(k),
                Event::Resize(..) => {}
                _ => continue,
            }
            dirty = true;
        }
        if let Some((file, line)) = app.edit.take() {
            if let Some(said) = edit(term, &file, line)? {
                app.message = said;
            }
        }
    }
    drop(guard);
    match signalled.load(Ordering::Relaxed) {
        0 => crate::commands::output::finish(&trace, STATS, lost, errors),
        sig => Ok(ended_by(sig)),
    }
}

/// `fctrace info`'s text of `trace`, a line each, without colours.
fn info_lines(trace: &fctrace_format::store::Trace) -> Vec<String> {
    let mut out = Vec::new();
    if let Err(e) = crate::commands::info::write_info(&mut out, trace, false) {
        return vec![format!("cannot describe the trace: {e}")];
    }
    let text = String::from_utf8_lossy(&out);
    text.lines().map(strip_colours).collect()
}

/// `line` without its SGR escape sequences (`\x1b[...m`).
fn strip_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        rest = match after.find('m') {
            Some(m) => &after[m + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Runs `$EDITOR +LINE FILE` (`vi` without EDITOR; EDITOR may hold
/// arguments, split at spaces, as uftrace does) with the terminal given
/// back to it, then takes the terminal again. Returns what the status
/// line says when the editor could not run or failed.
fn edit(
    term: &mut ratatui::DefaultTerminal,
    file: &str,
    line: u64,
) -> anyhow::Result<Option<String>> {
    let editor = std::env::var("EDITOR").unwrap_or_default();
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or("vi").to_string();
    let mut cmd = std::process::Command::new(&program);
    cmd.args(words).arg(format!("+{line}")).arg(file);
    ratatui::restore();
    let ran = cmd.status();
    ratatui::crossterm::terminal::enable_raw_mode()?;
    ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::terminal::EnterAlternateScreen
    )?;
    term.clear()?;
    Ok(match ran {
        Err(e) => Some(format!("cannot run the editor {program}: {e}")),
        Ok(s) if !s.success() => Some(format!("the editor {program} ended: {s}")),
        Ok(_) => None,
    })
}

/// After the terminal was restored on signal `sig`: says so, and the
/// status of a process it ended (128 + sig).
fn ended_by(sig: usize) -> ExitCode {
    eprintln!("fctrace: tui ended by signal {sig}");
    ExitCode::from((128 + sig).min(255) as u8)
}

/// Ends the process if a signal was caught and the TUI has not ended
/// itself a second later: when its terminal is gone (the hangup of a
/// closed window or tmux session), crossterm's wait for a key reads
/// end-of-file again and again and never returns, at full CPU.
fn watch_for_a_stuck_end(signalled: Arc<AtomicUsize>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        let sig = signalled.load(Ordering::Relaxed);
        if sig != 0 {
            std::thread::sleep(Duration::from_secs(1));
            ratatui::restore();
            eprintln!("fctrace: tui ended by signal {sig}");
            std::process::exit((128 + sig).min(255) as i32);
        }
    });
}

/// Whether a key pressed while loading asks to stop (q, Esc, Ctrl-C).
fn stop_asked() -> bool {
    while event::poll(Duration::ZERO).unwrap_or(false) {
        if let Ok(Event::Key(k)) = event::read() {
            if k.kind != KeyEventKind::Release
                && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (k.modifiers.contains(KeyModifiers::CONTROL)
                        && k.code == KeyCode::Char('c')))
            {
                return true;
            }
        }
    }
    false
}

/// The terminal in raw mode on the alternate screen, restored when
/// dropped.
struct Terminal(ratatui::DefaultTerminal);

impl Terminal {
    fn start() -> anyhow::Result<Terminal> {
        match ratatui::try_init() {
            Ok(t) => Ok(Terminal(t)),
            Err(e) => {
                ratatui::restore();
                Err(anyhow::anyhow!("cannot set up the terminal: {e}"))
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// What the warning about lost events says is incomplete.
const STATS: &str = "the statistics are";

/// `--report`, `-f` and `-s` as uftrace reads them: `-f` names the
/// report's fields with `--report`, the graph's otherwise; `-s` needs
/// `--report`.
struct Looks {
    report: bool,
    cols: Option<Vec<app_cols::Col>>,
    fields: Option<Vec<app::Field>>,
    sort: Option<Vec<app_cols::Key>>,
}

use columns as app_cols;

impl Looks {
    fn from_args(args: &TuiArgs) -> anyhow::Result<Looks> {
        let bad = |e: String| anyhow::anyhow!("{e}");
        if args.sort.is_some() && !args.report {
            anyhow::bail!("-s/--sort sorts the report: give it with --report (as uftrace's tui)");
        }
        let (cols, fields) = match (&args.fields, args.report) {
            (Some(f), true) => (Some(columns::parse_report_cols(f).map_err(bad)?), None),
            (Some(f), false) => (None, Some(app::parse_graph_fields(f).map_err(bad)?)),
            (None, _) => (None, None),
        };
        let sort = match &args.sort {
            Some(s) => Some(columns::parse_keys(s).map_err(bad)?),
            None => None,
        };
        Ok(Looks {
            report: args.report,
            cols,
            fields,
            sort,
        })
    }
}
