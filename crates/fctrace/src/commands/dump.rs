//! `fctrace dump`: a recorded trace written for other tools, one module
//! per format in `fctrace-analysis`: `--chrome` ([`fctrace_analysis::chrome`]),
//! `--perfetto` ([`fctrace_analysis::perfetto`]), `--flame-graph`
//! ([`fctrace_analysis::flame`]), `--parquet` ([`fctrace_analysis::parquet`]),
//! and without a format the events as text ([`fctrace_analysis::events`]).

use super::output::finish;
use crate::cli::{DumpArgs, FilterArgs};
use anyhow::Context;
use fctrace_analysis::flame::{self, Weight};
use fctrace_analysis::{self as output, calls::Pass, is_broken_pipe, warn};
use fctrace_format::store::Trace;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let name = args.format.name();
    if args.sample_count && name != "flame-graph" {
        anyhow::bail!("--sample-count applies to --flame-graph only");
    }
    if name == "perfetto" && args.output.is_none() && io::stdout().is_terminal() {
        anyhow::bail!(
            "--perfetto writes a binary file: give it with -o FILE, e.g. \
             `fctrace dump --perfetto -o trace.pftrace`"
        );
    }
    let (trace, options) = open(&args.dir, &args.filter, &args.naming)?;
    if args.debug {
        let mut errors = Vec::new();
        let written = write_to(args.output.as_deref(), |out| {
            errors = output::events::write_raw(&trace, &options, out)?;
            Ok(())
        });
        match written {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e.context("cannot write the events")),
            Ok(()) => return finish(&trace, OUTPUT, 0, errors),
        }
    }
    if let Some(lang) = match name {
        "graphviz" => Some(output::graph::Lang::Dot),
        "mermaid" => Some(output::graph::Lang::Mermaid),
        _ => None,
    } {
        let g = output::graph::build(&trace, &options, false, "dump");
        let written = write_to(args.output.as_deref(), |out| {
            Ok(output::graph::write_drawing(out, &trace, &g, lang)?)
        });
        match written {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e.context("cannot write the graph")),
            Ok(()) => {}
        }
        return finish(&trace, OUTPUT, g.lost_in_streams, g.errors);
    }

    if name == "flame-graph" {
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
        return finish(&trace, OUTPUT, folded.lost_in_streams, folded.errors);
    }
    if name == "parquet" {
        let dir = args
            .output
            .as_deref()
            .context("--parquet needs -o DIR: the directory of the tables")?;
        let written = output::parquet::write(&trace, &options, dir)?;
        return finish(&trace, OUTPUT, written.lost_in_streams, written.errors);
    }

    // The formats written as the calls end, task after task.
    let to_file = args.output.is_some();
    let sink: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let progress = output::Progress::wanted(!to_file);
    let written: io::Result<Pass> = if name == "chrome" {
        output::chrome::write(&trace, &options, progress, &mut out)
    } else if name == "perfetto" {
        output::perfetto::write(&trace, &options, progress, &mut out)
    } else {
        output::events::write(&trace, &options, progress, &mut out)
    }
    .and_then(|pass| out.flush().map(|()| pass));
    let pass = match written {
        Ok(pass) => pass,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe && !to_file => {
            return Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            return Err(e).context(match &args.output {
                Some(path) => format!("cannot write {}", path.display()),
                None => "cannot write the output".to_string(),
            })
        }
    };
    finish(&trace, OUTPUT, pass.lost_in_streams, pass.errors)
}

/// The trace of `dir` and the display options of `filter` (with the
/// recording's own display filters), warnings printed.
pub fn open(
    dir: &Path,
    filter: &FilterArgs,
    naming: &crate::cli::NamingArgs,
) -> anyhow::Result<(Trace, fctrace_options::Options)> {
    let given = filter.to_options()?;
    let trace = super::naming::open(dir, naming)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    output::filter::warn_unmatched(&trace, &given);
    output::filter::warn_tracing_gaps(&trace, &given);
    let options = output::filter::with_recorded_display(&given, &trace);
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

/// What the warning about lost events says is incomplete.
pub const OUTPUT: &str = "the output is";
