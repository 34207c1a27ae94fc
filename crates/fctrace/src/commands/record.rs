//! `fctrace record`: run a program and record its calls.

use crate::cli::{RecordArgs, TraceOptions};
use fctrace_record as recorder;
use std::process::ExitCode;

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    if args.trace.list_event {
        super::events::list_events(&args.run.command, &mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.filter.tid.is_empty() && args.run.pid.is_none() {
        anyhow::bail!(
            "--tid selects threads of a recorded trace, whose ids are known only once it \
             ran: give it to `fctrace replay` or `fctrace report` (`fctrace info` lists the \
             tasks)"
        );
    }
    if let Some(opt) = args.filter.display_only().first() {
        anyhow::bail!(
            "{opt} only changes how a trace is shown (it is recorded whole): give it to \
             `fctrace replay` or `fctrace report`"
        );
    }
    // Bad filter or argument specs are errors before anything runs.
    let mut options = args.filter.to_options_with(&args.trace)?;
    check_clock(&args.trace)?;
    if let Some(script) = &args.trace.script {
        super::script::check(script)?;
    }
    if args.no_args {
        options.args.clear();
        options.auto_args = false;
    }
    if args.run.pid.is_some() {
        // --tid chose the threads to trace: the trace holds those only.
        options.tids.clear();
    }
    if args.ring.ring.is_none() {
        refuse_snapshot_triggers(&options)?;
    }
    // --host: the receiver answers before the program starts.
    let sender = match &args.send.host {
        Some(host) => Some(super::send::connect(host, args.send.port, &args.dir)?),
        None => None,
    };
    let out = recorder::record(settings(
        args.run.target(&args.filter)?,
        &args.dir,
        &args.trace,
        &options,
        args.ring.ring.map(|size| recorder::RingOptions {
            size,
            at_exit: args.ring.at_exit,
        }),
    ))?;
    // What was not recorded, and why (also in the trace's warnings).
    for note in &out.notes {
        eprintln!("fctrace: {note}");
    }
    if let Some(sender) = sender {
        sender.send(&args.dir);
    }
    if let Some(script) = &args.trace.script {
        run_script(&args.dir, script)?;
    }
    Ok(recorder::end_like(out.exit, out.attach))
}

/// `--record COMMAND`: `fctrace record -d DIR COMMAND` with the record
/// options the script names, whose ending (the program's) is fctrace's
/// once the script ran.
pub fn record_for_script(args: &crate::cli::ScriptArgs) -> anyhow::Result<ExitCode> {
    use clap::Parser;
    super::script::check(&args.script)?;
    let mut line: Vec<std::ffi::OsString> = vec!["fctrace".into(), "record".into()];
    line.extend(crate::cli::script_record_options(&args.script)?);
    line.extend(["-d".into(), args.dir.clone().into_os_string(), "--".into()]);
    line.extend(args.record.iter().cloned());
    match crate::cli::Cli::try_parse_from(line)?.command {
        Some(crate::cli::Command::Record(r)) => run(*r),
        _ => anyhow::bail!("--record: cannot record {:?}", args.record),
    }
}

/// `-S FILE.py`: the script run over the trace just recorded in `dir`
/// (after the program, not while it runs).
pub fn run_script(dir: &std::path::Path, script: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let trace = fctrace_format::store::Trace::open(dir).context("reading the recorded trace")?;
    let options = fctrace_analysis::filter::with_recorded_display(&Default::default(), &trace);
    super::script::run_over(
        &trace,
        &options,
        script,
        super::script::How {
            record: true,
            values: true,
        },
    )?;
    Ok(())
}

/// `--clock`: the recording's clock, by uftrace's names (`mono`, its
/// default and fctrace's; `mono_raw`; `boot`); `realtime` is refused.
pub fn check_clock(trace: &TraceOptions) -> anyhow::Result<()> {
    match trace.clock.as_str() {
        "" => Ok(()),
        "realtime" => anyhow::bail!(
            "--clock realtime: fctrace records on a clock that does not jump (mono, mono_raw, \
             boot), as uftrace does; `replay -f time` shows the recording's times"
        ),
        name => fctrace_record::clock::choose(name),
    }
}

/// A `snapshot` trigger needs a flight recorder (`record --ring`).
pub fn refuse_snapshot_triggers(options: &fctrace_options::Options) -> anyhow::Result<()> {
    if let Some(t) = options
        .triggers
        .iter()
        .find(|t| t.actions.contains(&fctrace_options::Action::Snapshot))
    {
        anyhow::bail!(
            "trigger `{}`: `snapshot` writes a flight recorder's snapshot: record with \
             `fctrace record --ring SIZE`",
            t.source
        );
    }
    Ok(())
}

/// The recorder's settings: the target and directory, and `trace`'s
/// recording options (`-l`, `-k`, `-K`) with the agent's `options`.
pub fn settings<'a>(
    target: recorder::Target<'a>,
    dir: &'a std::path::Path,
    trace: &TraceOptions,
    options: &'a fctrace_options::Options,
    ring: Option<recorder::RingOptions>,
) -> recorder::RecordSettings<'a> {
    recorder::RecordSettings {
        target,
        dir,
        nest_libcall: trace.nest_libcall,
        kernel: trace.kernel,
        kernel_depth: trace.kernel_depth,
        options,
        ring,
        cache: (!trace.no_cache)
            .then(recorder::default_cache_dir)
            .flatten(),
    }
}
