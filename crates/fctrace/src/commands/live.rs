//! Live mode, `fctrace PROGRAM ARGS...`: record into a temporary
//! directory, then print the call tree.

use crate::cli::LiveArgs;
use crate::recorder;
use anyhow::Context;
use std::process::ExitCode;

pub fn run(args: LiveArgs) -> anyhow::Result<ExitCode> {
    let tmp = std::env::temp_dir().join(format!("fctrace-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = (|| -> anyhow::Result<_> {
        let out = recorder::record(&args.command, &tmp, &args.trace)?;
        let trace =
            fctrace_format::store::Trace::open(&tmp).context("reading the recorded trace")?;
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        crate::output::tree::print_tree(&trace, &mut lock)?;
        Ok(out.exit)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    // Ends as the program did (by the same signal if one killed it).
    Ok(recorder::exit_like(result?))
}
