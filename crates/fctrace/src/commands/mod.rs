//! One module per subcommand.

mod dump;
mod flamegraph;
mod info;
mod live;
mod record;
mod replay;
mod report;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::Record(args)) => record::run(args),
        Some(Command::Replay(args)) => replay::run(args),
        Some(Command::Report(args)) => report::run(args),
        Some(Command::Info(args)) => info::run(args),
        Some(Command::Dump(args)) => dump::run(args),
        Some(Command::Flamegraph(args)) => flamegraph::run(args),
        None => live::run(cli.live),
    }
}
