//! `fctrace dump --parquet -o DIR`: the calls of a trace as Parquet tables
//! for DuckDB, Polars, Spark (docs/format.md describes the schema):
//! - `calls.parquet`: one row per call, written as the calls end (per
//!   task, innermost first). Each column chunk is encoded and compressed
//!   as its rows come ([`chunk`]), and the chunks of a row group are
//!   written into the file when it holds [`GROUP_ROWS`] rows or
//!   [`GROUP_BYTES`] of chunks, with fctrace's writer of the file and its
//!   footer ([`footer`]): of the trace's length, only the footer's bytes
//!   are held (about 0.8 kB per row group) until the file is closed;
//! - `functions.parquet`: one row per function, the report's statistics;
//! - `tasks.parquet`: one row per task.
//!
//! The times follow the report ([`super::report`]): a call that never
//! returned in the trace has no duration nor self time (NULL), and its
//! time stays in its caller's self time; `total_ns` of a function does
//! not add a recursive call nested in another call of it again.

mod chunk;
mod delta;
mod footer;
mod rle;

use self::chunk::{KeyColumn, Plain, TextColumn, TimeColumn};
use super::calls::{each_task, Call, End, Functions, Open, Step, StepSink};
use crate::progress::Progress;
use anyhow::Context;
use fctrace_format::store::{StoreError, TaskInfo, Trace};
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows of calls.parquet per row group at most.
pub const GROUP_ROWS: usize = 1 << 20;

/// A row group is also closed when its chunks hold this much (compressed).
pub const GROUP_BYTES: usize = 1 << 20;

/// Rows per batch given to the encoding thread (and the row group's size
/// checked).
const BATCH: usize = 4096;

/// What [`write`] met.
pub struct Written {
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read (their readable part is
    /// written).
    pub errors: Vec<StoreError>,
}

fn create(
    dir: &Path,
    name: &str,
    schema: &str,
    props: WriterPropertiesPtr,
) -> anyhow::Result<(PathBuf, SerializedFileWriter<BufWriter<File>>)> {
    let path = dir.join(name);
    let schema = Arc::new(parse_message_type(schema).expect("a valid schema"));
    let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let writer =
        SerializedFileWriter::new(BufWriter::with_capacity(128 << 10, file), schema, props)
            .with_context(|| format!("cannot write {}", path.display()))?;
    Ok((path, writer))
}

/// zstd (fast), statistics per chunk, no dictionary, no page index.
fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(chunk::compression())
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        .set_dictionary_enabled(false)
        .build()
}

const CALLS_SCHEMA: &str = "message calls {
    required int32 task (INTEGER(32, false));
    required int32 pid (INTEGER(32, false));
    required int32 tid (INTEGER(32, false));
    required int32 depth (INTEGER(32, false));
    required binary function (STRING);
    required binary symbol (STRING);
    required binary module (STRING);
    required int64 start_ns (INTEGER(64, false));
    required int64 end_ns (INTEGER(64, false));
    optional int64 duration_ns (INTEGER(64, false));
    optional int64 self_ns (INTEGER(64, false));
    required binary ended (STRING);
    optional binary args (STRING);
    optional binary retval (STRING);
}";

/// How a call ended, as the `ended` column spells it.
fn ended(end: End) -> &'static str {
    match end {
        End::Returned => "returned",
        End::Unwound => "unwound",
        End::NotReturned => "not_returned",
    }
}

const ENDS: [End; 3] = [End::Returned, End::Unwound, End::NotReturned];

/// One row of calls.parquet as the pass gives it.
#[derive(Clone, Copy)]
struct Row {
    task: u32,
    depth: u32,
    /// Index in [`Pass::functions`].
    func: u32,
    end: End,
    /// No other call of its function was open around it (its duration
    /// counts in the function's total).
    outermost: bool,
    start_ns: u64,
    end_ns: u64,
    /// Its duration less its children's that returned.
    self_ns: u64,
}

/// Rows of calls.parquet, as the encoding thread takes them.
#[derive(Default)]
struct Batch {
    rows: Vec<Row>,
    /// The rows with arguments or a return value: (row, text).
    args: Vec<(u32, ByteArray)>,
    retval: Vec<(u32, ByteArray)>,
    /// Functions first met since the previous batch (in index order):
    /// name, symbol, module.
    functions: Vec<[String; 3]>,
    /// Tasks begun since the previous batch: id, pid, tid.
    tasks: Vec<(u32, u32, u32)>,
}

impl Batch {
    fn clear(&mut self) {
        self.rows.clear();
        self.args.clear();
        self.retval.clear();
        self.functions.clear();
        self.tasks.clear();
    }
}

/// calls.parquet's encoder, on its own thread: batches of rows in, row
/// groups out.
struct Encoder {
    path: PathBuf,
    file: footer::File<BufWriter<File>>,
    z: zstd::bulk::Compressor<'static>,
    /// task, pid, tid.
    task: KeyColumn,
    depth: KeyColumn,
    /// function, symbol, module.
    func: KeyColumn,
    end: KeyColumn,
    start_ns: TimeColumn,
    end_ns: TimeColumn,
    duration_ns: TimeColumn,
    self_ns: TimeColumn,
    args: TextColumn,
    retval: TextColumn,
    /// Rows in the row group.
    rows: usize,
    /// Per function index: name, symbol, module.
    functions: Vec<[String; 3]>,
    /// Per task id: pid, tid.
    tasks: Vec<(u32, u32)>,
    /// Per function index, the report's statistics.
    stats: Vec<Stats>,
}

impl Encoder {
    fn create(dir: &Path) -> anyhow::Result<Encoder> {
        let path = dir.join("calls.parquet");
        let schema = SchemaDescriptor::new(Arc::new(
            parse_message_type(CALLS_SCHEMA).expect("a valid schema"),
        ));
        let time = |i: usize| TimeColumn::new(schema.column(i));
        let (start_ns, end_ns, duration_ns, self_ns) = (time(7), time(8), time(9), time(10));
        let out =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let file = footer::File::new(BufWriter::with_capacity(128 << 10, out), schema)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Encoder {
            path,
            file,
            z: zstd::bulk::Compressor::new(chunk::ZSTD_LEVEL).context("zstd")?,
            task: KeyColumn::new(),
            depth: KeyColumn::new(),
            func: KeyColumn::new(),
            start_ns,
            end_ns,
            duration_ns,
            self_ns,
            end: KeyColumn::new(),
            args: TextColumn::new(),
            retval: TextColumn::new(),
            rows: 0,
            functions: Vec::new(),
            tasks: Vec::new(),
            stats: Vec::new(),
        })
    }

    fn fail(&self, e: parquet::errors::ParquetError) -> anyhow::Error {
        anyhow::Error::from(e).context(format!("cannot write {}", self.path.display()))
    }

    fn add(&mut self, b: &mut Batch) -> anyhow::Result<()> {
        self.functions.append(&mut b.functions);
        for &(id, pid, tid) in &b.tasks {
            let i = id as usize;
            if self.tasks.len() <= i {
                self.tasks.resize(i + 1, (0, 0));
            }
            self.tasks[i] = (pid, tid);
        }
        self.stats.resize(self.functions.len(), Stats::default());
        self.encode(b).map_err(|e| self.fail(e))?;
        self.rows += b.rows.len();
        if self.rows >= GROUP_ROWS || self.held_bytes() >= GROUP_BYTES {
            self.close_group()?;
        }
        Ok(())
    }

    fn encode(&mut self, b: &Batch) -> parquet::errors::Result<()> {
        let z = &mut self.z;
        for r in &b.rows {
            self.task.push(r.task, z)?;
            self.depth.push(r.depth, z)?;
            self.func.push(r.func, z)?;
            self.end.push(r.end as u32, z)?;
            self.start_ns.push(Some(r.start_ns as i64));
            self.end_ns.push(Some(r.end_ns as i64));
            let returned = r.end != End::NotReturned;
            let duration = r.end_ns.saturating_sub(r.start_ns);
            self.duration_ns.push(returned.then_some(duration as i64));
            self.self_ns.push(returned.then_some(r.self_ns as i64));
            let s = &mut self.stats[r.func as usize];
            s.calls += 1;
            if returned {
                s.returned += 1;
                s.sum_ns = s.sum_ns.saturating_add(duration);
                s.self_ns = s.self_ns.saturating_add(r.self_ns);
                if r.outermost {
                    s.total_ns = s.total_ns.saturating_add(duration);
                }
                s.min_ns = Some(s.min_ns.map_or(duration, |m| m.min(duration)));
                s.max_ns = Some(s.max_ns.map_or(duration, |m| m.max(duration)));
            }
        }
        // The text columns: the rows that have one, and runs of nulls.
        for (column, texts) in [(&mut self.args, &b.args), (&mut self.retval, &b.retval)] {
            let mut next = 0;
            for (row, text) in texts {
                column.push_nulls(*row as usize - next, z)?;
                column.push(Some(text.data()), z)?;
                next = *row as usize + 1;
            }
            column.push_nulls(b.rows.len() - next, z)?;
        }
        Ok(())
    }

    fn held_bytes(&self) -> usize {
        [&self.task, &self.depth, &self.func, &self.end]
            .iter()
            .map(|c| c.held_bytes())
            .sum::<usize>()
            + [
                &self.start_ns,
                &self.end_ns,
                &self.duration_ns,
                &self.self_ns,
            ]
            .iter()
            .map(|c| c.held_bytes())
            .sum::<usize>()
            + self.args.held_bytes()
            + self.retval.held_bytes()
    }

    /// Writes the rows gathered as a row group.
    fn close_group(&mut self) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        self.write_chunks().map_err(|e| self.fail(e))?;
        self.file
            .end_group(rows as u64)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Writes the row group's chunks, in the schema's order.
    fn write_chunks(&mut self) -> parquet::errors::Result<()> {
        let z = &mut self.z;
        let file = &mut self.file;
        let tasks = &self.tasks;
        let task = |k: u32| tasks.get(k as usize).copied().unwrap_or_default();
        let functions = &self.functions;
        let func = |k: u32, i: usize| Plain::Str(&functions[k as usize][i]);
        self.task.close(
            z,
            &[
                &|k| Plain::Int(k as i32),
                &|k| Plain::Int(task(k).0 as i32),
                &|k| Plain::Int(task(k).1 as i32),
            ],
            file,
        )?;
        self.depth.close(z, &[&|k| Plain::Int(k as i32)], file)?;
        self.func.close(
            z,
            &[&|k| func(k, 0), &|k| func(k, 1), &|k| func(k, 2)],
            file,
        )?;
        self.start_ns.close(file)?;
        self.end_ns.close(file)?;
        self.duration_ns.close(file)?;
        self.self_ns.close(file)?;
        self.end
            .close(z, &[&|k| Plain::Str(ended(ENDS[k as usize]))], file)?;
        self.args.close(z, file)?;
        self.retval.close(z, file)?;
        Ok(())
    }

    /// Closes the file; the statistics per function.
    fn close(mut self) -> anyhow::Result<Vec<Stats>> {
        self.close_group()?;
        let created_by = format!("fctrace version {}", env!("CARGO_PKG_VERSION"));
        // Flushed: dropping the writer closes the file.
        self.file
            .close(&created_by)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(self.stats)
    }
}

/// Batches in flight between the pass and the encoder: the memory held.
const BATCHES: usize = 3;

/// calls.parquet, written by an [`Encoder`] on another thread while the
/// pass goes on: rows are gathered into a [`Batch`] here, encoded and
/// compressed there, and the batch comes back to be filled again.
struct CallsWriter {
    batch: Batch,
    to_encoder: Option<std::sync::mpsc::SyncSender<Batch>>,
    emptied: std::sync::mpsc::Receiver<Batch>,
    encoder: Option<std::thread::JoinHandle<anyhow::Result<Vec<Stats>>>>,
    /// Functions the encoder was given.
    functions_sent: usize,
}

impl CallsWriter {
    fn create(dir: &Path) -> anyhow::Result<CallsWriter> {
        let mut encoder = Encoder::create(dir)?;
        let (to_encoder, batches) = std::sync::mpsc::sync_channel::<Batch>(BATCHES - 1);
        let (give_back, emptied) = std::sync::mpsc::sync_channel::<Batch>(BATCHES);
        let thread = std::thread::Builder::new()
            .name("parquet".into())
            .spawn(move || {
                for mut batch in batches {
                    encoder.add(&mut batch)?;
                    batch.clear();
                    // Never waits: when the pass has batches enough, or
                    // has ended, this one is dropped.
                    let _ = give_back.try_send(batch);
                }
                encoder.close()
            })
            .context("cannot start the Parquet encoding thread")?;
        Ok(CallsWriter {
            batch: Batch::default(),
            to_encoder: Some(to_encoder),
            emptied,
            encoder: Some(thread),
            functions_sent: 0,
        })
    }

    /// Gives the batch to the encoder; false when the encoder stopped (its
    /// error is [`CallsWriter::finish`]'s).
    fn send(&mut self) -> bool {
        let empty = self.emptied.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.batch, empty);
        match &self.to_encoder {
            Some(tx) => tx.send(full).is_ok(),
            None => false,
        }
    }

    /// The rows given so far, written; the file closed; the statistics
    /// per function.
    fn finish(mut self) -> anyhow::Result<Vec<Stats>> {
        if !self.batch.rows.is_empty() || !self.batch.functions.is_empty() {
            self.send();
        }
        drop(self.to_encoder.take());
        match self.encoder.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Ok(Vec::new()),
        }
    }
}

/// The values of one column of a small table.
enum Values {
    /// A uint32 (stored as int32, its bits).
    U32(Vec<i32>),
    /// A uint64 (stored as int64, its bits).
    U64(Vec<i64>),
    Str(Vec<ByteArray>),
}

/// A column of a small table: its values, and for an optional column its
/// definition levels (1: a value, 0: null).
struct Column {
    values: Values,
    defs: Option<Vec<i16>>,
}

impl Column {
    fn new(values: Values) -> Column {
        Column { values, defs: None }
    }
    fn u32() -> Column {
        Column::new(Values::U32(Vec::new()))
    }
    fn u64() -> Column {
        Column::new(Values::U64(Vec::new()))
    }
    fn str() -> Column {
        Column::new(Values::Str(Vec::new()))
    }
    fn optional(mut self) -> Column {
        self.defs = Some(Vec::new());
        self
    }

    fn defined(&mut self, yes: bool) {
        if let Some(d) = &mut self.defs {
            d.push(i16::from(yes));
        }
    }

    fn push_u32(&mut self, v: Option<u32>) {
        self.defined(v.is_some());
        if let (Values::U32(values), Some(v)) = (&mut self.values, v) {
            values.push(v as i32);
        }
    }
    fn push_u64(&mut self, v: Option<u64>) {
        self.defined(v.is_some());
        if let (Values::U64(values), Some(v)) = (&mut self.values, v) {
            values.push(v as i64);
        }
    }
    fn push_str(&mut self, v: Option<ByteArray>) {
        self.defined(v.is_some());
        if let (Values::Str(values), Some(v)) = (&mut self.values, v) {
            values.push(v);
        }
    }
}

/// A small table (functions.parquet, tasks.parquet), written as one row
/// group when it is closed.
struct Table {
    path: PathBuf,
    writer: SerializedFileWriter<BufWriter<File>>,
    /// In the schema's order.
    columns: Vec<Column>,
}

impl Table {
    fn create(dir: &Path, name: &str, schema: &str, columns: Vec<Column>) -> anyhow::Result<Table> {
        let (path, writer) = create(dir, name, schema, Arc::new(properties()))?;
        Ok(Table {
            path,
            writer,
            columns,
        })
    }

    fn close(mut self) -> anyhow::Result<()> {
        let path = &self.path;
        let fail = |e: parquet::errors::ParquetError| {
            anyhow::Error::from(e).context(format!("cannot write {}", path.display()))
        };
        let mut group = self.writer.next_row_group().map_err(fail)?;
        for column in &self.columns {
            let mut w = group
                .next_column()
                .map_err(fail)?
                .expect("a column per field of the schema");
            let defs = column.defs.as_deref();
            match &column.values {
                Values::U32(v) => w.typed::<Int32Type>().write_batch(v, defs, None),
                Values::U64(v) => w.typed::<Int64Type>().write_batch(v, defs, None),
                Values::Str(v) => w.typed::<ByteArrayType>().write_batch(v, defs, None),
            }
            .map_err(fail)?;
            w.close().map_err(fail)?;
        }
        group.close().map_err(fail)?;
        self.writer.close().map_err(fail)?;
        Ok(())
    }
}

/// Per function, the report's statistics.
#[derive(Clone, Default)]
struct Stats {
    calls: u64,
    returned: u64,
    total_ns: u64,
    self_ns: u64,
    sum_ns: u64,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
}

/// The pass over the tasks.
struct Pass<'t> {
    trace: &'t Trace,
    functions: Functions,
    out: CallsWriter,
    /// The encoder stopped (a write error): the pass stops writing.
    failed: bool,
    calls: u64,
    calls_by_task: HashMap<u32, u64>,
    /// The current task, and its calls before it.
    task: TaskInfo,
    calls_before: u64,
    /// Function id of the task's session -> index in `functions`.
    ids: Vec<u32>,
    /// The open calls: (function index, durations of the children that
    /// ended with an exit), in step with the calls' stack.
    stack: Vec<(u32, u64)>,
    /// Open calls per function in this task (recursion).
    open: Vec<u32>,
}

impl Pass<'_> {
    fn push(&mut self, func: u32, call: &Call, self_ns: u64, outermost: bool) {
        self.calls += 1;
        if self.failed {
            return;
        }
        let b = &mut self.out.batch;
        let row = b.rows.len() as u32;
        b.rows.push(Row {
            task: self.task.id,
            depth: call.depth as u32,
            func,
            end: call.end,
            outermost,
            start_ns: call.start_ns,
            end_ns: call.end_ns,
            self_ns,
        });
        let text = |p: &Vec<u8>| ByteArray::from(super::args::format_payload(p).into_bytes());
        if let Some(p) = &call.args {
            b.args.push((row, text(p)));
        }
        if let Some(p) = &call.retval {
            b.retval.push((row, text(p)));
        }
        if b.rows.len() == BATCH && !self.out.send() {
            self.failed = true;
        }
    }
}

const NO_INDEX: u32 = u32::MAX;

impl StepSink for Pass<'_> {
    fn begin_task(&mut self, task: &TaskInfo) -> std::io::Result<()> {
        self.task = task.clone();
        self.out.batch.tasks.push((task.id, task.pid, task.tid));
        self.calls_before = self.calls;
        self.ids.clear();
        self.stack.clear();
        self.open.clear();
        self.open.resize(self.functions.list.len(), 0);
        Ok(())
    }

    fn step(&mut self, step: &Step, _: &[Open]) -> std::io::Result<()> {
        match step {
            Step::Enter { func, .. } => {
                let i = *func as usize;
                let f = match self.ids.get(i) {
                    Some(&x) if x != NO_INDEX => x,
                    _ => {
                        let x = self.functions.index(self.trace, self.task.session, *func) as u32;
                        // Functions new to the encoder go with the batch
                        // of their first call.
                        let b = &mut self.out.batch;
                        for f in &self.functions.list[self.out.functions_sent..] {
                            b.functions
                                .push([f.name.clone(), f.symbol.clone(), f.module.clone()]);
                        }
                        self.out.functions_sent = self.functions.list.len();
                        if i < self.ids.len() + 1_000_000 {
                            if self.ids.len() <= i {
                                self.ids.resize(i + 1, NO_INDEX);
                            }
                            self.ids[i] = x;
                        }
                        x
                    }
                };
                if self.open.len() <= f as usize {
                    self.open.resize(f as usize + 1, 0);
                }
                self.open[f as usize] += 1;
                self.stack.push((f, 0));
            }
            Step::Leave(call) => {
                let Some((f, exited_children_ns)) = self.stack.pop() else {
                    return Ok(());
                };
                self.open[f as usize] -= 1;
                let dur = call.duration_ns();
                let self_ns = dur.saturating_sub(exited_children_ns);
                if call.end != End::NotReturned {
                    if let Some(parent) = self.stack.last_mut() {
                        parent.1 = parent.1.saturating_add(dur);
                    }
                }
                let outermost = self.open[f as usize] == 0;
                // A call open where the trace begins (an attach or history
                // chain) has no entry: not a row, as the report does not
                // count it.
                if call.entry_recorded {
                    self.push(f, call, self_ns, outermost);
                }
            }
            Step::Lost { .. } | Step::Unmatched { .. } | Step::Signal { .. } => {}
        }
        Ok(())
    }

    fn end_task(&mut self) -> std::io::Result<()> {
        *self.calls_by_task.entry(self.task.id).or_default() += self.calls - self.calls_before;
        Ok(())
    }
}

/// Writes calls.parquet, functions.parquet and tasks.parquet of the calls
/// the display filters of `options` show into `dir` (created if needed).
pub fn write(
    trace: &Trace,
    options: &fctrace_options::Options,
    dir: &Path,
) -> anyhow::Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pass = Pass {
        trace,
        functions: Functions::demangled(options.demangle),
        out: CallsWriter::create(dir)?,
        failed: false,
        calls: 0,
        calls_by_task: HashMap::new(),
        task: TaskInfo::default(),
        calls_before: 0,
        ids: Vec::new(),
        stack: Vec::new(),
        open: Vec::new(),
    };
    // The sink keeps its write errors in `failed`: it does not fail.
    let steps = each_task(
        trace,
        options,
        "parquet",
        Progress::wanted(false),
        &mut pass,
    )
    .unwrap_or_default();
    // The encoder's error, if it stopped.
    let stats = pass.out.finish()?;
    write_functions(dir, &pass.functions, &stats)?;
    write_tasks(dir, trace, &pass.calls_by_task)?;
    Ok(Written {
        lost_in_streams: steps.lost_in_streams,
        errors: steps.errors,
    })
}

fn write_functions(dir: &Path, functions: &Functions, stats: &[Stats]) -> anyhow::Result<()> {
    const SCHEMA: &str = "message functions {
        required binary function (STRING);
        required binary symbol (STRING);
        required binary module (STRING);
        required int64 calls (INTEGER(64, false));
        required int64 returned (INTEGER(64, false));
        required int64 total_ns (INTEGER(64, false));
        required int64 self_ns (INTEGER(64, false));
        optional int64 min_ns (INTEGER(64, false));
        optional int64 avg_ns (INTEGER(64, false));
        optional int64 max_ns (INTEGER(64, false));
    }";
    let columns = vec![
        Column::str(),
        Column::str(),
        Column::str(),
        Column::u64(),
        Column::u64(),
        Column::u64(),
        Column::u64(),
        Column::u64().optional(),
        Column::u64().optional(),
        Column::u64().optional(),
    ];
    let mut t = Table::create(dir, "functions.parquet", SCHEMA, columns)?;
    for (f, s) in functions.list.iter().zip(stats) {
        let avg = (s.returned > 0).then(|| {
            ((u128::from(s.sum_ns) + u128::from(s.returned) / 2) / u128::from(s.returned)) as u64
        });
        let c = &mut t.columns;
        c[0].push_str(Some(f.name.as_str().into()));
        c[1].push_str(Some(f.symbol.as_str().into()));
        c[2].push_str(Some(f.module.as_str().into()));
        c[3].push_u64(Some(s.calls));
        c[4].push_u64(Some(s.returned));
        c[5].push_u64(Some(s.total_ns));
        c[6].push_u64(Some(s.self_ns));
        c[7].push_u64(s.min_ns);
        c[8].push_u64(avg);
        c[9].push_u64(s.max_ns);
    }
    t.close()
}

fn write_tasks(dir: &Path, trace: &Trace, calls: &HashMap<u32, u64>) -> anyhow::Result<()> {
    const SCHEMA: &str = "message tasks {
        required int32 task (INTEGER(32, false));
        required int32 pid (INTEGER(32, false));
        required int32 tid (INTEGER(32, false));
        required int32 ppid (INTEGER(32, false));
        optional int32 parent (INTEGER(32, false));
        required binary origin (STRING);
        required binary comm (STRING);
        required binary program (STRING);
        required int32 session (INTEGER(32, false));
        required int64 events (INTEGER(64, false));
        required int64 calls (INTEGER(64, false));
    }";
    let columns = vec![
        Column::u32(),
        Column::u32(),
        Column::u32(),
        Column::u32(),
        Column::u32().optional(),
        Column::str(),
        Column::str(),
        Column::str(),
        Column::u32(),
        Column::u64(),
        Column::u64(),
    ];
    let mut table = Table::create(dir, "tasks.parquet", SCHEMA, columns)?;
    for t in &trace.info.tasks {
        let program = trace
            .sessions
            .get(&t.session)
            .map_or(trace.info.program.as_str(), |s| s.exe.as_str());
        let c = &mut table.columns;
        c[0].push_u32(Some(t.id));
        c[1].push_u32(Some(t.pid));
        c[2].push_u32(Some(t.tid));
        c[3].push_u32(Some(t.ppid));
        c[4].push_u32(t.parent);
        c[5].push_str(Some(t.origin.as_str().into()));
        c[6].push_str(Some(t.comm.as_str().into()));
        c[7].push_str(Some(program.into()));
        c[8].push_u32(Some(t.session));
        c[9].push_u64(Some(t.events));
        c[10].push_u64(Some(calls.get(&t.id).copied().unwrap_or(0)));
    }
    table.close()
}
