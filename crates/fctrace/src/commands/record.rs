//! `fctrace record`: run a program and record its calls.

use crate::cli::RecordArgs;
use crate::recorder;
use std::process::ExitCode;

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let out = recorder::record(&args.command, &args.dir, &args.trace)?;
    if out.lost_events > 0 {
        eprintln!("fctrace: {} events were lost", out.lost_events);
    }
    Ok(recorder::exit_like(out.exit))
}
