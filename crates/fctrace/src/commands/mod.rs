//! One module per subcommand.

mod dump;
mod flamegraph;
mod graph;
mod info;
mod live;
mod manual;
mod record;
mod replay;
mod report;
mod snapshot;
mod tui;

use crate::cli::{Cli, Command, OutputArgs, TerminalArgs};
use crate::pager::{colour_wanted, Pager};
use anyhow::Context;
use fctrace_analysis::term;
use fctrace_analysis::warn;
use fctrace_format::store::{StoreError, Trace};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

/// The terminal options of the command line, and whether this command
/// pages its output.
pub struct Terminal {
    pub args: TerminalArgs,
    pub page: bool,
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let terminal = &Terminal {
        page: cli.command.as_ref().is_some_and(pages),
        args: cli.terminal,
    };
    match cli.command {
        Some(Command::Record(args)) => record::run(args),
        Some(Command::Replay(args)) => replay::run(args, terminal),
        Some(Command::Report(args)) => report::run(args, terminal),
        Some(Command::Graph(args)) => graph::run(args, terminal),
        Some(Command::Dump(args)) => dump::run(args),
        Some(Command::Flamegraph(args)) => flamegraph::run(args),
        Some(Command::Info(args)) => info::run(args, terminal),
        Some(Command::Tui(args)) => tui::run(args),
        Some(Command::Snapshot(args)) => snapshot::run(args),
        Some(Command::Completions(args)) => manual::completions(args),
        Some(Command::Man(args)) => manual::man(args),
        None => live::run(cli.live, terminal),
    }
}

/// Whether a command's output goes through the pager on a terminal: the
/// renderings of a trace, which are read rather than piped on. Live mode
/// and `record` never page (the program's own output and input share the
/// terminal); neither do the commands whose output is meant for a file or
/// a pipe, nor an interactive one.
fn pages(command: &Command) -> bool {
    match command {
        Command::Replay(_) | Command::Report(_) | Command::Graph(_) | Command::Info(_) => true,
        Command::Record(_)
        | Command::Snapshot(_)
        | Command::Dump(_)
        | Command::Flamegraph(_)
        | Command::Tui(_)
        | Command::Completions(_)
        | Command::Man(_) => false,
    }
}

/// Where a command writes its output: the `-o` file, or stdout (through
/// the pager when `page` and stdout is a terminal). Opening it also sets
/// colour on or off (`--color`, and whether this output is a terminal).
/// Dropping it flushes the output, then waits for the pager to end.
pub struct Output {
    pub writer: Box<dyn Write>,
    pager: Option<Pager>,
}

impl Output {
    /// Creates (or truncates) the `-o` file, or takes stdout.
    pub fn open(output: &OutputArgs, terminal: &Terminal) -> anyhow::Result<Output> {
        let when = terminal.args.color;
        match &output.output {
            Some(path) => {
                let file = File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                term::set_colour(colour_wanted(when, file.is_terminal()));
                Ok(Output {
                    writer: Box::new(file),
                    pager: None,
                })
            }
            None => {
                // The terminal decides before the pager takes its place.
                term::set_colour(colour_wanted(when, io::stdout().is_terminal()));
                let pager = if terminal.page && !terminal.args.no_pager {
                    Pager::start()
                } else {
                    None
                };
                Ok(Output {
                    writer: Box::new(io::stdout()),
                    pager,
                })
            }
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        let _ = self.writer.flush();
        if let Some(pager) = self.pager.take() {
            self.writer = Box::new(io::sink());
            pager.finish();
        }
    }
}

/// How a reader of a trace ends: a warning about the events lost
/// (recorded in `trace`'s info or met in its streams, `lost_in_streams`),
/// saying that `what` is incomplete, the read errors after the first as
/// warnings, and the first one as the result.
pub fn finish(
    trace: &Trace,
    what: &str,
    lost_in_streams: u64,
    errors: Vec<StoreError>,
) -> anyhow::Result<ExitCode> {
    let lost = trace.info.lost_events.max(lost_in_streams);
    if lost > 0 {
        let why = trace.info.loss_reasons();
        warn(&format!(
            "{lost} events were lost: {what} incomplete{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ));
    }
    let mut errors = errors.into_iter();
    if let Some(first) = errors.next() {
        for other in errors {
            warn(&other.to_string());
        }
        return Err(first.into());
    }
    Ok(ExitCode::SUCCESS)
}
