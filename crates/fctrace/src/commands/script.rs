//! `fctrace script -S FILE.py` (and `record -S`, live `-S`): a Python
//! script run over a recorded trace with uftrace's interface
//! (`uftrace_begin(ctx)`, `uftrace_entry(ctx)`, `uftrace_exit(ctx)`,
//! `uftrace_end()`). fctrace links no Python: it runs the system's
//! `python3` with a small driver (script_driver.py, embedded here) and
//! writes the trace's events to its standard input, one JSON line each
//! (fctrace_analysis::script); the driver calls the script's functions.

use crate::cli::ScriptArgs;
use fctrace_analysis::filter;
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

const DRIVER: &str = include_str!("script_driver.py");

/// `ended`: with `--record`, how the program recorded first ended
/// (`commands::record::record_for_script`), which is how fctrace ends.
pub fn run(args: ScriptArgs, ended: Option<ExitCode>) -> anyhow::Result<ExitCode> {
    check(&args.script)?;
    let given = args.filter.to_options()?;
    let trace = super::naming::open(&args.dir, &args.naming)?;
    filter::warn_unmatched(&trace, &given);
    let options = filter::with_recorded_display(&given, &trace);
    let how = How {
        record: ended.is_some(),
        values: !args.no_args,
    };
    let code = run_over(&trace, &options, &args.script, how)?;
    Ok(ended.unwrap_or(code))
}

/// Refuses a script fctrace cannot run, before anything is recorded or
/// read: one that is not there, or not Python (by its name, as uftrace
/// tells them).
pub fn check(script: &Path) -> anyhow::Result<()> {
    let shown = script.display();
    match script.extension().and_then(|e| e.to_str()) {
        Some("py") => {}
        Some("lua") => anyhow::bail!(
            "{shown}: Lua scripts are not supported, only Python (a .py file run by python3)"
        ),
        _ => anyhow::bail!(
            "{shown}: the script's kind is told by its name: a Python script ends in .py \
             (Lua's .lua is not supported)"
        ),
    }
    if let Err(e) = std::fs::File::open(script) {
        anyhow::bail!("cannot read the script {shown}: {e}");
    }
    Ok(())
}

/// How a script is run.
#[derive(Clone, Copy)]
pub struct How {
    /// It runs right after recording (uftrace_begin's `ctx["record"]`).
    pub record: bool,
    /// ctx has `args` and `retval` where they were recorded (not with
    /// --no-args).
    pub values: bool,
}

/// Runs `script` over the calls of `trace` that `options` show.
pub fn run_over(
    trace: &fctrace_format::store::Trace,
    options: &fctrace_options::Options,
    script: &Path,
    how: How,
) -> anyhow::Result<ExitCode> {
    let mut cmds = vec![trace.info.program.clone()];
    cmds.extend(trace.info.args.iter().cloned());
    let begin = serde_json::json!({
        "record": how.record,
        "version": format!("fctrace {}", env!("CARGO_PKG_VERSION")),
        "cmds": cmds,
    });
    let shown = script.display();
    let mut child = match Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(script)
        .arg(begin.to_string())
        .stdin(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => anyhow::bail!(
            "running the script {shown} needs python3, which is not on PATH \
             (apt-get install python3)"
        ),
        Err(e) => anyhow::bail!("cannot run python3 for the script {shown}: {e}"),
    };
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // The script may stop reading (it failed): its status says why.
    let written = fctrace_analysis::script::write_events(trace, options, how.values, &mut stdin);
    drop(stdin);
    let status = child.wait()?;
    let errors = match written {
        Ok(errors) => errors,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    std::io::stdout().flush()?;
    match status.code() {
        Some(0) => {}
        Some(2) => {
            anyhow::bail!("the script {shown} could not be compiled (python3's error above)")
        }
        Some(3) => anyhow::bail!("the script {shown} raised an exception (its traceback above)"),
        Some(n) => anyhow::bail!("the script {shown} ended with exit status {n}"),
        None => anyhow::bail!("python3 running the script {shown} was killed ({status})"),
    }
    super::output::finish(trace, "the script's events", 0, errors)
}
