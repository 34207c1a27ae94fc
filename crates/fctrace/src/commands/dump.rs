//! `fctrace dump`: a recorded trace converted for other tools, one module
//! per format under `output/` (`--flame-graph`: [`crate::output::flame`],
//! `--parquet`: [`crate::output::parquet`]).

use crate::cli::{DumpArgs, FilterArgs};
use crate::output::flame::{self, Weight};
use crate::output::{is_broken_pipe, warn};
use anyhow::Context;
use fctrace_format::store::{StoreError, Trace};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let (trace, options) = open(&args.dir, &args.filter)?;
    if args.format.flame_graph {
        let weight = if args.sample_count {
            Weight::Calls
        } else {
            Weight::SelfTime
        };
        let folded = flame::fold(&trace, &options);
        let written = write_to(args.output.as_deref(), |out| Ok(folded.write(out, weight)?));
        match written {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e.context("cannot write the folded stacks")),
            Ok(()) => {}
        }
        return finish(&trace, folded.lost_in_streams, folded.errors);
    }
    if args.sample_count {
        anyhow::bail!("--sample-count applies to --flame-graph only");
    }
    if args.format.parquet {
        let dir = args
            .output
            .as_deref()
            .context("--parquet needs -o DIR: the directory of the tables")?;
        let written = crate::output::parquet::write(&trace, &options, dir)?;
        return finish(&trace, written.lost_in_streams, written.errors);
    }
    unreachable!("clap requires one format")
}

/// The trace of `dir` and the display options of `filter` (with the
/// recording's own display filters), warnings printed.
pub fn open(dir: &Path, filter: &FilterArgs) -> anyhow::Result<(Trace, fctrace_options::Options)> {
    let given = filter.to_options()?;
    let trace = Trace::open(dir)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    crate::output::filter::warn_unmatched(&trace, &given);
    crate::output::filter::warn_tracing_gaps(&trace, &given);
    let options = crate::output::filter::with_recorded_display(&given, &trace);
    Ok((trace, options))
}

/// Runs `write` on the file `path` (created or truncated), or on standard
/// output.
pub fn write_to(
    path: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match path {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = BufWriter::with_capacity(1 << 16, file);
            write(&mut out)?;
            out.flush()
                .with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
            write(&mut out)?;
            Ok(out.flush()?)
        }
    }
}

/// The warning about lost events and the exit status after read errors,
/// as `report` has them.
pub fn finish(
    trace: &Trace,
    lost_in_streams: u64,
    errors: Vec<StoreError>,
) -> anyhow::Result<ExitCode> {
    let lost = trace.info.lost_events.max(lost_in_streams);
    if lost > 0 {
        let why = crate::recorder::loss_reasons(&trace.info);
        warn(&format!(
            "{lost} events were lost: the output is incomplete{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ));
    }
    let mut errors = errors.into_iter();
    if let Some(first) = errors.next() {
        for other in errors {
            warn(&other.to_string());
        }
        return Err(first.into());
    }
    Ok(ExitCode::SUCCESS)
}
