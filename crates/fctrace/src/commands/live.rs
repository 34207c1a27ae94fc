//! Live mode, `fctrace PROGRAM ARGS...`: record into a temporary
//! directory, then print the call tree.

use crate::cli::LiveArgs;
use crate::recorder;
use anyhow::Context;
use std::process::ExitCode;

pub fn run(args: LiveArgs) -> anyhow::Result<ExitCode> {
    // Bad filter or argument specs are errors before anything runs.
    let options = args.filter.to_options_with(&args.trace)?;
    let tmp = std::env::temp_dir().join(format!("fctrace-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = (|| -> anyhow::Result<_> {
        let out = recorder::record(&args.command, &tmp, &args.trace, &options)?;
        let trace =
            fctrace_format::store::Trace::open(&tmp).context("reading the recorded trace")?;
        crate::output::filter::warn_unmatched(&trace, &options);
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        // The display filters again (idempotent on what the agent already
        // filtered; -t, --tid and -C act only here).
        crate::output::tree::print_tree_with(&trace, &options, &mut lock)?;
        Ok(out.exit)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    // Ends as the program did (by the same signal if one killed it).
    Ok(recorder::exit_like(result?))
}
