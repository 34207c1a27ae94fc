//! `fctrace graph`: the call graph of a recorded trace.

use super::output::{Output, Terminal};
use crate::cli::{GraphArgs, GraphFormat};
use anyhow::Context;
use fctrace_analysis::graph::{self, Lang};
use fctrace_analysis::{filter, warn};
use fctrace_options::FuncPattern;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

pub fn run(args: GraphArgs, terminal: &Terminal) -> anyhow::Result<ExitCode> {
    let given = args.filter.to_options()?;
    let pattern = args
        .function
        .as_deref()
        .map(|f| FuncPattern::parse(f).map_err(|e| anyhow::anyhow!("invalid FUNC: {e}")))
        .transpose()?;
    let trace = super::naming::open(&args.dir, &args.naming)?;
    for w in &trace.load_warnings {
        warn(w);
    }
    filter::warn_unmatched(&trace, &given);
    filter::warn_tracing_gaps(&trace, &given);
    let options = filter::with_recorded_display(&given, &trace);
    if args.task {
        return task_graph(&args, &trace, &options, terminal);
    }
    let mut g = graph::build(&trace, &options, args.per_task, "graph");
    g.fields = args
        .output_fields
        .as_deref()
        .map(graph::parse_graph_cols)
        .transpose()
        .map_err(|e| anyhow::anyhow!("invalid -f/--output-fields: {e}"))?;

    let mut output = Output::open(&args.output, terminal)?;
    if args.format == GraphFormat::Html {
        fctrace_analysis::term::set_colour(false);
    }
    let mut text = Vec::new();
    let mut file = BufWriter::new(&mut output.writer);
    let out: &mut dyn Write = if args.format == GraphFormat::Html {
        &mut text
    } else {
        &mut file
    };
    let written = match &pattern {
        None => match args.format {
            GraphFormat::Text | GraphFormat::Html if args.table => {
                graph::write_text(out, &trace, &g)
            }
            GraphFormat::Text | GraphFormat::Html => graph::write_text_uftrace(out, &trace, &g),
            GraphFormat::Json => graph::write_json(out, &trace, &g),
            GraphFormat::Dot => graph::write_drawing(out, &trace, &g, Lang::Dot),
            GraphFormat::Mermaid => graph::write_drawing(out, &trace, &g, Lang::Mermaid),
        },
        Some(p) => {
            let matched = g.matching(p);
            if !matched.iter().any(|&m| m) {
                anyhow::bail!(
                    "{} names no function called in the trace{}",
                    p.as_str(),
                    if filter::filters_display(&options) {
                        " (with these filters)"
                    } else {
                        ""
                    }
                );
            }
            let focus = g.focus(matched);
            let what = p.as_str();
            match args.format {
                GraphFormat::Text | GraphFormat::Html if args.table => {
                    graph::write_focus_text(out, &trace, &g, what, &focus)
                }
                GraphFormat::Text | GraphFormat::Html => {
                    graph::write_focus_text_uftrace(out, &trace, &g, what, &focus)
                }
                GraphFormat::Json => graph::write_focus_json(out, &trace, &g, what, &focus),
                GraphFormat::Dot => {
                    graph::write_focus_drawing(out, &trace, &g, what, &focus, Lang::Dot)
                }
                GraphFormat::Mermaid => {
                    graph::write_focus_drawing(out, &trace, &g, what, &focus, Lang::Mermaid)
                }
            }
        }
    }
    .and_then(|()| {
        if args.format == GraphFormat::Html {
            super::replay::write_html(&String::from_utf8_lossy(&text), &mut file)?;
        }
        file.flush()
    });
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the graph");
    }

    super::output::finish(&trace, "the graph is", g.lost_in_streams, g.errors)
}

/// `graph --task`: the tree of the tasks.
fn task_graph(
    args: &GraphArgs,
    trace: &fctrace_format::store::Trace,
    options: &fctrace_options::Options,
    terminal: &Terminal,
) -> anyhow::Result<ExitCode> {
    let (tasks, errors) = fctrace_analysis::report_fields::aggregate_tasks(trace, options);
    let mut output = Output::open(&args.output, terminal)?;
    let mut out = BufWriter::new(&mut output.writer);
    let written = fctrace_analysis::report_fields::write_task_graph(&mut out, &tasks)
        .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("cannot write the task graph");
    }
    super::output::finish(trace, "the graph is", 0, errors)
}
