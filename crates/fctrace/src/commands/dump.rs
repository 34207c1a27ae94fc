//! `fctrace dump`: a recorded trace written for other tools (one module
//! per format under `output/`).

use crate::cli::DumpArgs;
use crate::output::{self, calls::Pass, warn};
use anyhow::Context;
use fctrace_format::store::Trace;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::process::ExitCode;

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    if args.perfetto && args.output.is_none() && io::stdout().is_terminal() {
        anyhow::bail!(
            "--perfetto writes a binary file: give it with -o FILE, e.g. \
             `fctrace dump --perfetto -o trace.pftrace`"
        );
    }
    let trace = Trace::open(&args.dir)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    output::filter::warn_unmatched(&trace, &given);
    output::filter::warn_tracing_gaps(&trace, &given);
    let options = output::filter::with_recorded_display(&given, &trace);

    let to_file = args.output.is_some();
    let sink: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let progress = output::Progress::wanted(!to_file);
    let written: io::Result<Pass> = if args.chrome {
        output::chrome::write(&trace, &options, progress, &mut out)
    } else if args.perfetto {
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

    let lost = trace.info.lost_events.max(pass.lost_in_streams);
    if lost > 0 {
        let why = crate::recorder::loss_reasons(&trace.info);
        warn(&format!(
            "{lost} events were lost: calls are missing{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ));
    }
    let mut errors = pass.errors.into_iter();
    if let Some(first) = errors.next() {
        for other in errors {
            warn(&other.to_string());
        }
        return Err(first.into());
    }
    Ok(ExitCode::SUCCESS)
}
