//! Flame graphs: the calls of a trace merged by call path into folded
//! stacks (`main;parse;lex 1234`, one line per distinct path), the input
//! of flamegraph.pl, inferno and speedscope (`fctrace dump
//! --flame-graph`), and inferno's interactive SVG of them (`fctrace
//! flamegraph`).
//!
//! The weight of a path is, by default, the self time (ns) of the calls
//! made along it; with [`Weight::Calls`], the number of calls. Both follow
//! the report (see [`super::report`]): summed over the paths that end in a
//! function, they give its `self` time, or its `calls`. So a call that
//! never returned in the trace counts as a call with no time, and its time
//! stays in its caller's self time.
//!
//! Streaming: the calls are merged into the calling-context tree of
//! `fctrace graph` ([`super::graph::build`]), whose size is the number of
//! distinct call paths (plus the open calls of one task), whatever the
//! length of the trace. Paths of every task are merged (a flame graph of
//! the whole program).

use super::calls::Functions;
use super::graph::{self, Tree};
use fctrace_format::store::{StoreError, Trace};
use std::io::{self, Write};

/// What a path weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// The self time of its calls, in nanoseconds.
    SelfTime,
    /// The number of its calls.
    Calls,
}

impl Weight {
    /// The unit, as a flame graph names it.
    pub fn unit(self) -> &'static str {
        match self {
            Weight::SelfTime => "ns",
            Weight::Calls => "calls",
        }
    }
}

/// The calls of a trace merged by call path.
pub struct Folded {
    pub functions: Functions,
    tree: Tree,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read (their readable part is
    /// counted).
    pub errors: Vec<StoreError>,
}

/// Merges the calls the display filters of `options` show (as
/// [`super::report::aggregate_with`] counts them).
pub fn fold(trace: &Trace, options: &fctrace_options::Options) -> Folded {
    let g = graph::build(trace, options, false, "flame graph");
    Folded {
        functions: g.functions,
        tree: g.tree,
        lost_in_streams: g.lost_in_streams,
        errors: g.errors,
    }
}

impl Folded {
    /// Writes the folded stacks, one line per call path whose weight is
    /// not 0, paths sorted by name level by level.
    pub fn write(&self, out: &mut dyn Write, weight: Weight) -> io::Result<()> {
        let ambiguous = self.functions.ambiguous();
        let names: Vec<String> = (0..self.functions.list.len())
            .map(|i| frame_name(&self.functions.shown_name(i, &ambiguous)))
            .collect();
        let nodes = &self.tree.nodes;
        let by_name = |v: &mut Vec<u32>| {
            v.sort_by(|&a, &b| {
                names[nodes[a as usize].func as usize].cmp(&names[nodes[b as usize].func as usize])
            })
        };
        // Depth first, with the path so far in `path`: the output is the
        // only thing that grows with the depth.
        let mut path: Vec<u8> = Vec::new();
        let mut todo: Vec<(u32, usize)> = Vec::new();
        let mut roots: Vec<u32> = self
            .tree
            .roots
            .iter()
            .flat_map(|&r| nodes[r as usize].children.iter().copied())
            .collect();
        by_name(&mut roots);
        todo.extend(roots.iter().rev().map(|&n| (n, 0)));
        let mut line = itoa_buffer();
        while let Some((n, len)) = todo.pop() {
            path.truncate(len);
            if len > 0 {
                path.push(b';');
            }
            let node = &nodes[n as usize];
            path.extend_from_slice(names[node.func as usize].as_bytes());
            let w = match weight {
                Weight::SelfTime => node.self_ns,
                Weight::Calls => node.calls,
            };
            if w > 0 {
                out.write_all(&path)?;
                out.write_all(b" ")?;
                out.write_all(format_u64(&mut line, w))?;
                out.write_all(b"\n")?;
            }
            let mut k = node.children.clone();
            by_name(&mut k);
            let here = path.len();
            todo.extend(k.iter().rev().map(|&c| (c, here)));
        }
        Ok(())
    }
}

fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, in `buf`.
fn format_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// A function's name as a frame of a folded stack: `;` separates frames
/// and a line ends with ` COUNT`, so a `;` becomes `:` and line breaks
/// become spaces (the count is after the last space: spaces in a name, as
/// in `f(int, char)`, are fine).
fn frame_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// The title of a flame graph of `trace`: its command line.
pub fn title(trace: &Trace) -> String {
    let info = &trace.info;
    if info.args.is_empty() {
        info.program.clone()
    } else {
        info.args.join(" ")
    }
}

/// Inferno's SVG of the folded stacks.
pub fn write_svg(
    folded: &Folded,
    weight: Weight,
    title: &str,
    subtitle: Option<&str>,
    min_width: f64,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut text = Vec::new();
    folded.write(&mut text, weight)?;
    let text = String::from_utf8_lossy(&text);
    if text.is_empty() {
        anyhow::bail!("no calls to draw (the trace, or what the filters leave of it, is empty)");
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.subtitle = subtitle.map(str::to_string);
    opts.count_name = weight.unit().to_string();
    opts.min_width = min_width;
    opts.name_type = "Function:".to_string();
    // Colours from the names: the same function has the same colour in
    // every graph.
    opts.hash = true;
    inferno::flamegraph::from_lines(&mut opts, text.lines(), out)
        .map_err(|e| anyhow::anyhow!("cannot draw the flame graph: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::{Entry, Exit, Lost, Unwind};

    fn folded(events: Vec<fctrace_format::event::RawEvent>, weight: Weight) -> String {
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, events)]);
        let f = fold(&trace, &fctrace_options::Options::default());
        assert!(f.errors.is_empty());
        let mut out = Vec::new();
        f.write(&mut out, weight).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn paths_weighed_by_self_time_and_calls() {
        // main(0..100) { foo(10..40) { leaf(15..25) } foo(50..60) leaf(70..75) }
        // with ids: main 0, foo 4, leaf 3.
        let events = vec![
            ev(Entry, 0, 0),
            ev(Entry, 4, 10),
            ev(Entry, 3, 15),
            ev(Exit, 3, 25),
            ev(Exit, 4, 40),
            ev(Entry, 4, 50),
            ev(Exit, 4, 60),
            ev(Entry, 3, 70),
            ev(Exit, 3, 75),
            ev(Lost, 2, 80),
            ev(Exit, 0, 100),
        ];
        assert_eq!(
            folded(events.clone(), Weight::SelfTime),
            "main 55\nmain;foo(int) 30\nmain;foo(int);leaf 10\nmain;leaf 5\n"
        );
        assert_eq!(
            folded(events, Weight::Calls),
            "main 1\nmain;foo(int) 2\nmain;foo(int);leaf 1\nmain;leaf 1\n"
        );
    }

    #[test]
    fn calls_that_never_returned_have_no_time() {
        // main { foo { leaf (never returns) } foo unwinds } main open at
        // the end: only foo has an exit.
        let events = vec![
            ev(Entry, 0, 0),
            ev(Entry, 4, 10),
            ev(Entry, 3, 20),
            ev(Unwind, 4, 50),
            ev(Entry, 4, 60),
            ev(Entry, 4, 61),
            ev(Exit, 4, 62),
            ev(Exit, 4, 64),
        ];
        assert_eq!(
            folded(events.clone(), Weight::SelfTime),
            "main;foo(int) 43\nmain;foo(int);foo(int) 1\n"
        );
        assert_eq!(
            folded(events, Weight::Calls),
            "main 1\nmain;foo(int) 2\nmain;foo(int);foo(int) 1\nmain;foo(int);leaf 1\n"
        );
    }

    #[test]
    fn frame_names_keep_the_format() {
        assert_eq!(frame_name("a;b\nc"), "a:b c");
        let mut b = itoa_buffer();
        assert_eq!(format_u64(&mut b, 0), b"0");
        assert_eq!(format_u64(&mut b, u64::MAX), b"18446744073709551615");
    }
}
