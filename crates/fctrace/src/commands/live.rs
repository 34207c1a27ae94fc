//! Live mode, `fctrace PROGRAM ARGS...`: record into a private temporary
//! directory, then print the call tree, as `fctrace record` followed by
//! `fctrace replay` would.

use super::output::{Output, Terminal};
use crate::cli::LiveArgs;
use anyhow::Context;
use fctrace_analysis::filter;
use fctrace_record as recorder;
use std::process::ExitCode;

pub fn run(args: LiveArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    if args.trace.list_event {
        super::events::list_events(&args.run.command, &mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Bad filter or argument specs are errors before anything runs, and
    // so is an output file that cannot be created.
    let options = args.filter.to_options_with(&args.trace)?;
    super::record::refuse_snapshot_triggers(&options)?;
    super::record::check_clock(&args.trace)?;
    if let Some(script) = &args.trace.script {
        super::script::check(script)?;
    }
    let style = args.tree.style()?;
    super::naming::check_dirs(&args.naming)?;
    let mut output = Output::open(&args.output, terminal)?;
    // A new directory only this user can enter (mkdtemp: a random name,
    // created 0700, never one that already exists); with --record the
    // trace directory `record` writes.
    let tmp = if args.record {
        None
    } else {
        Some(
            tempfile::Builder::new()
                .prefix("fctrace-live-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .context("cannot create a private temporary directory for the trace")?,
        )
    };
    let dir = tmp
        .as_ref()
        .map_or(std::path::Path::new(crate::cli::DEFAULT_DIR), |t| t.path());
    let result = (|| -> anyhow::Result<_> {
        let out = recorder::record(super::record::settings(
            args.run.target(&args.filter)?,
            dir,
            &args.trace,
            &options,
            None,
        ))?;
        let mut trace =
            fctrace_format::store::Trace::open(dir).context("reading the recorded trace")?;
        super::naming::name(&mut trace, &args.naming);
        filter::warn_unmatched(&trace, &options);
        // What the agent applied (-F, -N, -D, -T) is not applied again:
        // a call whose filtered ancestors were entered while tracing was
        // off (--disable) is recorded without them. The display-only
        // options (-C, -t, --tid) act here, as `replay` applies them.
        let mut display = filter::with_recorded_display(&filter::display_only(&options), &trace);
        filter::add_recorded_backtraces(&mut display, &trace);
        if let Some(script) = &args.trace.script {
            super::script::run_over(
                &trace,
                &display,
                script,
                super::script::How {
                    record: true,
                    values: true,
                },
            )?;
        }
        if args.report {
            write_report(&trace, &display, &mut output.writer)?;
        }
        fctrace_analysis::tree::print_tree_styled(&trace, &display, &style, &mut output.writer)?;
        Ok((out.exit, out.attach))
    })();
    // Removed before ending like the program (which may mean a signal).
    if let Some(tmp) = tmp {
        let _ = tmp.close();
    }
    let (exit, attach) = result?;
    // Ends as the program did (by the same signal if one killed it).
    Ok(recorder::end_like(exit, attach))
}

/// `--report`: the report of the run, between uftrace's headings, before
/// the tree.
fn write_report(
    trace: &fctrace_format::store::Trace,
    display: &fctrace_options::Options,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    use fctrace_analysis::report;
    let mut stats = report::aggregate_with(trace, display);
    report::sort(&mut stats.functions, fctrace_analysis::sort::SortKey::Total);
    write!(out, "#\n# fctrace report\n#\n")?;
    report::write_text(out, &stats.functions)?;
    write!(out, "\n#\n# fctrace replay\n#\n")?;
    Ok(())
}
