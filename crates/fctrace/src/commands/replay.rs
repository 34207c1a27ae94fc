//! `fctrace replay`: print the call tree of a recorded trace (or with
//! `--flat` its events one per line; `--format html` as a web page).

use super::output::{Output, Terminal};
use crate::cli::ReplayArgs;
use fctrace_analysis::{filter, flat, tree};
use std::io::Write;
use std::process::ExitCode;

pub fn run(args: ReplayArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    let mut given = args.filter.to_options()?;
    given.disabled = args.disable || args.trace.as_deref() == Some("off");
    let style = args.tree.style()?;
    let mut trace = super::naming::open(&args.dir, &args.naming)?;
    trace.without_kernel = args.no_event;
    // Only the patterns given here are checked, not the record-time
    // options added next (a replay without options stays quiet).
    filter::warn_unmatched(&trace, &given);
    filter::warn_tracing_gaps(&trace, &given);
    let mut options = filter::with_recorded_display(&given, &trace);
    filter::add_recorded_backtraces(&mut options, &trace);
    let mut out = Output::open(&args.output, terminal)?;
    let html = args.format == "html";
    if html {
        fctrace_analysis::term::set_colour(false);
    }
    let mut text = Vec::new();
    let writer: &mut dyn Write = if html { &mut text } else { &mut out.writer };
    if args.flat {
        let errors = flat::write_flat(&trace, &options, writer)?;
        super::output::finish(&trace, "the events", 0, errors)?;
    } else {
        tree::print_tree_styled(&trace, &options, &style, writer)?;
    }
    if html {
        write_html(&String::from_utf8_lossy(&text), &mut out.writer)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--format html`: the text as a web page, in a `<pre>` block.
pub fn write_html(text: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let mut escaped = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            _ => escaped.push(c),
        }
    }
    write!(
        out,
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>fctrace</title>\n\
         </head>\n<body>\n<pre>\n{escaped}</pre>\n</body>\n</html>\n"
    )
}
