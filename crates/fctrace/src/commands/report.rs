//! `fctrace report`: per-function statistics of a recorded trace.

use super::{Output, Terminal};
use crate::cli::{Format, ReportArgs};
use crate::output::{report, warn};
use anyhow::Context;
use fctrace_format::store::Trace;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

pub fn run(args: ReportArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    let trace = Trace::open(&args.dir)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    crate::output::filter::warn_unmatched(&trace, &given);
    crate::output::filter::warn_tracing_gaps(&trace, &given);
    // `record -C`/`-t`: acting here, as in live mode.
    let options = crate::output::filter::with_recorded_display(&given, &trace);
    let mut stats = report::aggregate_with(&trace, &options);
    report::sort(&mut stats.functions, args.sort);

    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = match args.format {
        Format::Text => report::write_text(&mut out, &stats.functions),
        Format::Json => {
            report::write_json(&mut out, &trace, &stats.functions, stats.lost_in_streams)
        }
    }
    .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the report");
    }

    let lost = trace.info.lost_events.max(stats.lost_in_streams);
    if lost > 0 {
        let why = crate::recorder::loss_reasons(&trace.info);
        warn(&format!(
            "{lost} events were lost: the statistics are incomplete{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ));
    }
    let mut errors = stats.errors.into_iter();
    if let Some(first) = errors.next() {
        for other in errors {
            warn(&other.to_string());
        }
        return Err(first.into());
    }
    Ok(ExitCode::SUCCESS)
}
