//! What the subcommands that read a trace share: where their output goes
//! (the `-o` file, stdout, the pager), with colour decided there, and how
//! a reader ends (lost events, read errors).

use crate::cli::{OutputArgs, TerminalArgs};
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
