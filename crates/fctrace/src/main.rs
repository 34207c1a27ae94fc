//! fctrace: shows every function call a program makes.
//!
//! Layout: `cli` holds every option (one place), `commands/` one module per
//! subcommand, `recorder/` the process control and the draining of the
//! agent's shared memory (the only unsafe code of this crate), `pager` the
//! pager and `--color`, `tui/` the interactive terminal UI. The readers of
//! a trace (calls, filters, renderings) are the `fctrace-analysis` crate.

mod cli;
mod commands;
mod pager;
mod recorder;
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
