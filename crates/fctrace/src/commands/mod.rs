//! One module per subcommand, and what those that read a trace share
//! ([`output`]: where their output goes, how they end).

mod archive;
mod dump;
mod events;
mod flamegraph;
mod graph;
pub(crate) mod info;
mod live;
mod manual;
pub(crate) mod naming;
pub mod output;
mod record;
mod recv;
mod replay;
mod report;
pub(crate) mod script;
mod send;
mod snapshot;
mod tui;

use output::Terminal;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let terminal = &Terminal {
        page: cli.command.as_ref().is_some_and(pages),
        args: cli.terminal,
    };
    if let Some(command) = &cli.command {
        archive::clean_up_if_archive(&read_paths(command));
    }
    match cli.command {
        Some(Command::Record(args)) => record::run(*args),
        Some(Command::Replay(args)) => replay::run(args, terminal),
        Some(Command::Report(args)) => report::run(args, terminal),
        Some(Command::Graph(args)) => graph::run(args, terminal),
        Some(Command::Script(args)) => {
            let ended = if args.record.is_empty() {
                None
            } else {
                Some(record::record_for_script(&args)?)
            };
            script::run(args, ended)
        }
        Some(Command::Dump(args)) => dump::run(args),
        Some(Command::Flamegraph(args)) => flamegraph::run(args),
        Some(Command::Info(args)) => info::run(args, terminal),
        Some(Command::Tui(args)) => tui::run(args),
        Some(Command::Archive(args)) => archive::run(args),
        Some(Command::Snapshot(args)) => snapshot::run(args),
        Some(Command::Recv(args)) => recv::run(args),
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
        | Command::Archive(_)
        | Command::Snapshot(_)
        | Command::Recv(_)
        | Command::Dump(_)
        | Command::Script(_)
        | Command::Flamegraph(_)
        | Command::Tui(_)
        | Command::Completions(_)
        | Command::Man(_) => false,
    }
}

/// The traces a command reads (`-d`, `--diff`), which may be archives.
/// Not the TUI's: it ends by itself on those signals, restoring the
/// terminal, and its trace's temporary directory goes with it.
fn read_paths(command: &Command) -> Vec<&std::path::Path> {
    match command {
        Command::Replay(a) => vec![&a.dir],
        Command::Report(a) => [Some(&a.dir), a.diff.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| p.as_path())
            .collect(),
        Command::Graph(a) => vec![&a.dir],
        Command::Info(a) => vec![&a.dir],
        Command::Dump(a) => vec![&a.dir],
        Command::Script(a) => vec![&a.dir],
        Command::Flamegraph(a) => vec![&a.dir],
        _ => Vec::new(),
    }
}
