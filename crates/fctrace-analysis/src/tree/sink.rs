//! Where a task's lines are composed ([`Sink`]): one buffer, the columns
//! before the function, the indent, and the markers at the ends of lines.

use super::style::{fields_header, Field, FieldCtx, LineInfo, TreeStyle, HEADER, MAX_INDENT_DEPTH};
use crate::duration::Duration;
use crate::names::PIECE;
use crate::term::{MAGENTA, RED, RESET, YELLOW};
use fctrace_format::store::{TaskInfo, Trace};
use fctrace_options::Options;
use std::io::{self, Write};
use std::rc::Rc;

/// Bytes gathered before they are written out.
pub(super) const SINK_CAPACITY: usize = 1 << 16;

/// The output: lines are composed in place at the end of `buf`, which goes
/// to `out` when it holds [`SINK_CAPACITY`] bytes (no formatting machinery
/// and no copy per line: replay prints one line per call).
pub(super) struct Sink<'a> {
    pub(super) buf: Vec<u8>,
    pub(super) out: &'a mut dyn Write,
    /// `-f` other than the default.
    pub(super) fields: Option<Rc<FieldCtx>>,
    /// How a frame still open at the end of its task's events is closed:
    /// `(not returned)`, or `(detached)` when fctrace detached from the
    /// process while it was in progress.
    pub(super) open_at_end: &'static str,
    /// The recording chose calls (`record -F`, `-N`, `--disable`): a
    /// system call made outside every recorded call is not shown (it
    /// belongs to calls the user left out).
    pub(super) kernel_in_calls_only: bool,
    /// `-F`/`-N FUNC@kernel`: the kernel functions shown.
    pub(super) kernel: super::style::KernelShown,
    /// Which calls of a chain recorded by the agent (attach, or where
    /// tracing resumed) are opened when the events are not filtered.
    pub(super) choice: crate::filter::ChainChoice,
    /// `--no-comment`: where the text of the line being composed starts.
    pub(super) text_at: Option<usize>,
    /// `--srcline`: the header's `FUNCTION` is uftrace's `FUNCTION [SOURCE]`.
    source_head: bool,
}

/// Spaces of the deepest indent, in whole [`PIECE`]s.
pub(super) const INDENT: [u8; (2 * MAX_INDENT_DEPTH).div_ceil(PIECE) * PIECE] =
    [b' '; (2 * MAX_INDENT_DEPTH).div_ceil(PIECE) * PIECE];

/// Appends the first `len` bytes of `padded` (whole [`PIECE`]s, at least
/// `len` bytes) to `buf`: copies of a fixed size are a few instructions,
/// where the short copies of a line would each call `memcpy`.
#[inline(always)]
pub(super) fn put_padded(buf: &mut Vec<u8>, padded: &[u8], len: usize) {
    let start = buf.len();
    for piece in padded[..len.div_ceil(PIECE) * PIECE].chunks_exact(PIECE) {
        let piece: &[u8; PIECE] = piece.try_into().unwrap_or(&[b' '; PIECE]);
        buf.extend_from_slice(piece);
    }
    buf.truncate(start + len);
}

impl<'a> Sink<'a> {
    pub(super) fn new(
        out: &'a mut dyn Write,
        style: &TreeStyle,
        trace: &Trace,
        options: &Options,
    ) -> Sink<'a> {
        let fields = style.line_fields().map(|f| {
            Rc::new(FieldCtx {
                origin: if f.contains(&Field::Elapsed) {
                    crate::filter::trace_start_ns(trace)
                } else {
                    0
                },
                fields: f,
                no_comment: style.no_comment,
                task_newline: style.task_newline,
                prev_tid: Default::default(),
                column_offset: style.column_offset,
                next_column: Default::default(),
            })
        });
        Sink {
            buf: Vec::with_capacity(SINK_CAPACITY + 1024),
            out,
            fields,
            open_at_end: if trace.info.detached {
                " */ (detached)"
            } else {
                " */ (not returned)"
            },
            kernel_in_calls_only: Options::from_wire(&trace.info.options)
                .is_ok_and(|o| !o.filters.is_empty() || !o.notrace.is_empty() || o.disabled),
            kernel: style.kernel.clone(),
            choice: crate::filter::ChainChoice::new(trace, options),
            text_at: None,
            source_head: options.srcline,
        }
    }

    /// The first line.
    pub(super) fn header(&mut self) -> io::Result<()> {
        let source = if self.source_head { " [SOURCE]" } else { "" };
        match &self.fields {
            None => writeln!(self, "{HEADER}{source}"),
            Some(f) => {
                let h = fields_header(&f.fields);
                writeln!(self, "{h}{source}")
            }
        }
    }
}

impl Sink<'_> {
    /// A task header line was written for task `tid`: `--task-newline`
    /// adds no empty line before its first line.
    pub(super) fn task_started(&mut self, tid: u32) {
        if let Some(ctx) = &self.fields {
            ctx.prev_tid.set(Some(tid));
        }
    }

    /// A line was appended to `buf`.
    #[inline]
    pub(super) fn line_done(&mut self) -> io::Result<()> {
        if let Some(at) = self.text_at.take() {
            self.drop_comment(at);
        }
        if self.buf.len() >= SINK_CAPACITY {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The start of a line: duration column, task column, indent.
    #[inline(always)]
    pub(super) fn start(&mut self, dur: Option<u64>, column: &Column, depth: usize) {
        if self.fields.is_some() {
            return self.start_fields(dur, column, depth);
        }
        let buf = &mut self.buf;
        match dur {
            Some(ns) => {
                buf.push(b' ');
                Duration(ns).push_to(buf);
                buf.push(b' ');
            }
            None => buf.extend_from_slice(b"            "),
        }
        put_padded(buf, &column.padded, column.len);
        if depth <= MAX_INDENT_DEPTH {
            put_padded(buf, &INDENT, depth * 2);
        } else {
            put_padded(buf, &INDENT, MAX_INDENT_DEPTH * 2);
            let _ = write!(buf, "(depth {depth}) ");
        }
    }

    /// [`start`](Self::start) with the `-f` columns.
    #[cold]
    #[inline(never)]
    pub(super) fn start_fields(&mut self, dur: Option<u64>, column: &Column, depth: usize) {
        let (Some(ctx), Some(info)) = (self.fields.clone(), column.info.as_ref()) else {
            return;
        };
        let buf = &mut self.buf;
        if ctx.task_newline {
            if ctx.prev_tid.get().is_some_and(|t| t != info.tid_num) {
                blank_fields(buf, &ctx.fields);
            }
            ctx.prev_tid.set(Some(info.tid_num));
        }
        let ns = info.ns.get();
        let duration = |buf: &mut Vec<u8>, v: Option<u64>| match v {
            Some(v) => {
                buf.push(b' ');
                Duration(v).push_to(buf);
            }
            None => buf.extend_from_slice(b"           "),
        };
        for f in &ctx.fields {
            match f {
                Field::Duration => duration(buf, dur),
                Field::Tid => buf.extend_from_slice(info.tid.as_bytes()),
                Field::Time => {
                    let _ = write!(buf, " {:>6}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
                }
                Field::Delta => {
                    duration(buf, info.prev.get().map(|p| ns.saturating_sub(p)));
                    info.prev.set(Some(ns));
                }
                Field::Elapsed => duration(buf, Some(ns.saturating_sub(ctx.origin))),
                Field::Task => {
                    let _ = write!(buf, " {:>15}", info.comm);
                }
                Field::Module => {
                    let _ = write!(buf, " {:>15}", info.module.borrow());
                }
                Field::Addr => match info.addr.get() {
                    Some(a) => {
                        let _ = write!(buf, " {a:>12x}");
                    }
                    None => buf.extend_from_slice(&[b' '; 13]),
                },
            }
        }
        if !ctx.fields.is_empty() {
            buf.extend_from_slice(b" | ");
        }
        if let Some(offset) = ctx.column_offset {
            let column = info.column.get().unwrap_or_else(|| {
                let c = ctx.next_column.get();
                ctx.next_column.set(c + 1);
                info.column.set(Some(c));
                c
            });
            buf.extend(std::iter::repeat_n(b' ', 2 * column * offset));
        }
        if depth <= MAX_INDENT_DEPTH {
            put_padded(buf, &INDENT, depth * 2);
        } else {
            put_padded(buf, &INDENT, MAX_INDENT_DEPTH * 2);
            let _ = write!(buf, "(depth {depth}) ");
        }
        if ctx.no_comment {
            self.text_at = Some(self.buf.len());
        }
    }

    /// `--no-comment`: the line composed from `at` on, a closing line
    /// `} /* name */...` or `} = 6; /* name */`, loses its `/* name */`.
    #[cold]
    #[inline(never)]
    fn drop_comment(&mut self, at: usize) {
        let text = &self.buf[at..];
        if !text.starts_with(b"}") {
            return;
        }
        let Some(open) = text.windows(3).position(|w| w == b" /*") else {
            return;
        };
        let Some(close) = text[open..].windows(2).position(|w| w == b"*/") else {
            return;
        };
        self.buf.drain(at + open..at + open + close + 2);
    }

    /// A whole line whose text (after the indent) is the first `len` bytes
    /// of `padded`, newline included.
    #[inline(always)]
    pub(super) fn text_line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        (padded, len): (&[u8], usize),
    ) -> io::Result<()> {
        self.start(dur, column, depth);
        put_padded(&mut self.buf, padded, len);
        self.line_done()
    }

    /// One line whose text is the concatenation of `parts`. The lines of
    /// markers come here (the common lines do not): with colour on, they
    /// are painted on their way ([`Sink::painted_line`]).
    pub(super) fn line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        parts: &[&str],
    ) -> io::Result<()> {
        if crate::term::colour() {
            return self.painted_line(dur, column, depth, parts);
        }
        self.start(dur, column, depth);
        for p in parts {
            self.buf.extend_from_slice(p.as_bytes());
        }
        self.buf.push(b'\n');
        self.line_done()
    }
}

/// `--task-newline`'s line between two tasks: the fields left blank.
fn blank_fields(buf: &mut Vec<u8>, fields: &[Field]) {
    let width: usize = fields.iter().map(|f| f.title().1).sum();
    if !fields.is_empty() {
        buf.extend(std::iter::repeat_n(b' ', width));
        buf.extend_from_slice(b" |");
    }
    buf.push(b'\n');
}

/// The markers that end a line, and their colours.
pub(super) const END_MARKERS: [(&str, &str); 5] = [
    ("(unwound)", YELLOW),
    ("(not returned)", RED),
    ("(detached)", RED),
    ("(entry not recorded)", RED),
    ("(entry not in history)", RED),
];

impl Sink<'_> {
    /// [`Sink::line`] with colour on: a line ending in a marker of
    /// [`END_MARKERS`] has that marker painted; a signal's line
    /// (`/* signal SIGUSR1 */`) is magenta and a `... N events lost ...`
    /// line red, whole. (Kept apart from the writing of the events, so
    /// that code is the same with colour on or off.)
    #[cold]
    #[inline(never)]
    pub(super) fn painted_line(
        &mut self,
        dur: Option<u64>,
        column: &Column,
        depth: usize,
        parts: &[&str],
    ) -> io::Result<()> {
        let text = parts.concat();
        let whole = if text.starts_with("/* signal ") {
            Some(MAGENTA)
        } else if text.starts_with("... ") && text.ends_with(" events lost ...") {
            Some(RED)
        } else {
            None
        };
        self.start(dur, column, depth);
        let painted = match whole {
            Some(colour) => format!("{colour}{text}{RESET}"),
            None => match END_MARKERS.iter().find(|(m, _)| text.ends_with(m)) {
                Some((mark, colour)) => {
                    let plain = &text[..text.len() - mark.len()];
                    format!("{plain}{colour}{mark}{RESET}")
                }
                None => text,
            },
        };
        self.buf.extend_from_slice(painted.as_bytes());
        self.buf.push(b'\n');
        self.line_done()
    }
}

impl Write for Sink<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        self.line_done()?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}

/// The task column of a task's lines, `[{tid:>5}] | ` (wider if
/// needed), padded to whole [`PIECE`]s.
pub(super) struct Column {
    pub(super) padded: Vec<u8>,
    pub(super) len: usize,
    /// With `-f` other than the default.
    pub(super) info: Option<Box<LineInfo>>,
}

impl Column {
    /// With what the `-f` columns show of `task`.
    pub(super) fn with_info(task: &TaskInfo) -> Column {
        let mut c = Column::new(task.tid);
        c.info = Some(Box::new(LineInfo {
            tid: format!(" [{:>5}]", task.tid),
            tid_num: task.tid,
            addr: Default::default(),
            column: Default::default(),
            comm: task.comm.clone(),
            ns: Default::default(),
            prev: Default::default(),
            module: Default::default(),
        }));
        c
    }

    pub(super) fn new(tid: u32) -> Column {
        let mut digits = [0u8; 20];
        let tid = fctrace_format::digits::decimal(u64::from(tid), &mut digits);
        let mut padded = b"[".to_vec();
        padded.extend_from_slice(&b"     "[tid.len().min(5)..]);
        padded.extend_from_slice(tid);
        padded.extend_from_slice(b"] | ");
        let len = padded.len();
        padded.resize(len.div_ceil(PIECE) * PIECE, b' ');
        Column {
            padded,
            len,
            info: None,
        }
    }
}
