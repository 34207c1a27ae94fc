//! `fctrace tui`: the interactive terminal UI (in [`crate::tui`]).

use crate::cli::TuiArgs;
use std::process::ExitCode;

pub fn run(args: TuiArgs) -> anyhow::Result<ExitCode> {
    crate::tui::run(args)
}
