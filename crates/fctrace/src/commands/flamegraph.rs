//! `fctrace flamegraph`: an interactive SVG flame graph of a recorded
//! trace (inferno), titled with the program's command line.

use super::dump::{open, write_to, OUTPUT};
use super::output::finish;
use crate::cli::FlamegraphArgs;
use fctrace_analysis::flame::{self, Weight};
use std::process::ExitCode;

pub fn run(args: FlamegraphArgs) -> anyhow::Result<ExitCode> {
    if !(args.min_width >= 0.0 && args.min_width.is_finite()) {
        anyhow::bail!("--min-width must be a number of pixels, 0 or more");
    }
    let (trace, options) = open(&args.dir, &args.filter, &args.naming)?;
    let weight = if args.sample_count {
        Weight::Calls
    } else {
        Weight::SelfTime
    };
    let folded = flame::fold(&trace, &options);
    let title = flame::title(&trace);
    let mut subtitle = vec![match weight {
        Weight::SelfTime => "width: self time".to_string(),
        Weight::Calls => "width: number of calls".to_string(),
    }];
    let shown = args.filter.shown_text();
    if !shown.is_empty() {
        subtitle.push(format!("filters: {shown}"));
    }
    write_to(Some(&args.output), |out| {
        flame::write_svg(
            &folded,
            weight,
            &title,
            Some(&subtitle.join(", ")),
            args.min_width,
            out,
        )
    })?;
    finish(&trace, OUTPUT, folded.lost_in_streams, folded.errors)
}
