//! fctrace: shows every function call a program makes.
//!
//! Layout: `cli` holds every option (one place), `commands/` one module per
//! subcommand (turning options into the settings of the recorder,
//! crates/fctrace-record), `output/` the text renderings shared by live mode and replay, `tui/` the
//! interactive terminal UI.

mod cli;
mod commands;
mod output;
mod tui;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fctrace: {e:#}");
            ExitCode::from(1)
        }
    }
}
