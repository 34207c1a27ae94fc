//! One module per subcommand.

mod graph;
mod info;
mod live;
mod record;
mod replay;
mod report;
mod tui;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::Record(args)) => record::run(args),
        Some(Command::Replay(args)) => replay::run(args),
        Some(Command::Report(args)) => report::run(args),
        Some(Command::Graph(args)) => graph::run(args),
        Some(Command::Info(args)) => info::run(args),
        Some(Command::Tui(args)) => tui::run(args),
        None => live::run(cli.live),
    }
}
