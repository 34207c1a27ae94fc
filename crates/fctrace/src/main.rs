//! fctrace: shows every function call a program makes.
//!
//! Layout: `cli` holds every option (one place), `commands/` one module per
//! subcommand (turning options into the plain settings of the other
//! crates), `pager` the pager and `--color`, `tui/` the interactive
//! terminal UI. The recorder (process control, the draining of the agent's
//! shared memory) is the `fctrace-record` crate, the readers of a trace
//! (calls, filters, renderings) the `fctrace-analysis` crate. No unsafe
//! code here: what needs it (process control) is the recorder's.

#![forbid(unsafe_code)]

mod cli;
mod commands;
mod pager;
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
