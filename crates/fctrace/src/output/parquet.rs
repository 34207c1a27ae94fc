//! `fctrace dump --parquet -o DIR`: the calls of a trace as Parquet tables
//! for DuckDB, Polars, Spark (docs/format.md describes the schema):
//! - `calls.parquet`: one row per call, written as the calls end (per
//!   task, innermost first), in row groups of [`ROW_GROUP`] rows written
//!   as they fill (column after column, each encoded and compressed as it
//!   goes): memory does not grow with the trace;
//! - `functions.parquet`: one row per function, the report's statistics;
//! - `tasks.parquet`: one row per task.
//!
//! The times follow the report ([`super::report`]): a call that never
//! returned in the trace has no duration nor self time (NULL), and its
//! time stays in its caller's self time; `total_ns` of a function does
//! not add a recursive call nested in another call of it again.

use super::calls::{each_task, Call, End, Functions, Open, Step, StepSink};
use super::Progress;
use anyhow::Context;
use fctrace_format::store::{StoreError, TaskInfo, Trace};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows of calls.parquet per row group: the rows held in memory at most
/// (about 6 MiB of them).
pub const ROW_GROUP: usize = 65_536;

/// What [`write`] met.
pub struct Written {
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read (their readable part is
    /// written).
    pub errors: Vec<StoreError>,
}

/// The values of one column for the row group being gathered.
enum Values {
    /// A uint32 (stored as int32, its bits).
    U32(Vec<i32>),
    /// A uint64 (stored as int64, its bits).
    U64(Vec<i64>),
    Str(Vec<ByteArray>),
    /// A string of a dictionary given to [`Table::flush`]: the index of
    /// the dictionary, and per row the index of its string there.
    Dict(usize, Vec<u32>),
}

/// A column: its values, and for an optional column its definition
/// levels (1: a value, 0: null).
struct Column {
    values: Values,
    defs: Option<Vec<i16>>,
}

impl Column {
    fn u32() -> Column {
        Column {
            values: Values::U32(Vec::new()),
            defs: None,
        }
    }
    fn u64() -> Column {
        Column {
            values: Values::U64(Vec::new()),
            defs: None,
        }
    }
    fn str() -> Column {
        Column {
            values: Values::Str(Vec::new()),
            defs: None,
        }
    }
    fn dict(which: usize) -> Column {
        Column {
            values: Values::Dict(which, Vec::new()),
            defs: None,
        }
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
    fn push_key(&mut self, key: u32) {
        if let Values::Dict(_, keys) = &mut self.values {
            keys.push(key);
        }
    }
    fn push_str(&mut self, v: Option<ByteArray>) {
        self.defined(v.is_some());
        if let (Values::Str(values), Some(v)) = (&mut self.values, v) {
            values.push(v);
        }
    }
}

/// A Parquet file being written, row group after row group.
struct Table {
    path: PathBuf,
    writer: SerializedFileWriter<BufWriter<File>>,
    /// In the schema's order.
    columns: Vec<Column>,
    rows: usize,
}

impl Table {
    fn create(
        dir: &Path,
        name: &str,
        schema: &str,
        columns: Vec<Column>,
        props: WriterProperties,
    ) -> anyhow::Result<Table> {
        let path = dir.join(name);
        let schema = Arc::new(parse_message_type(schema).expect("a valid schema"));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            schema,
            Arc::new(props),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Table {
            path,
            writer,
            columns,
            rows: 0,
        })
    }

    /// A row was pushed to every column; `dicts`: the strings of the
    /// [`Values::Dict`] columns.
    fn row_done(&mut self, dicts: &[Vec<ByteArray>]) -> anyhow::Result<()> {
        self.rows += 1;
        if self.rows >= ROW_GROUP {
            self.flush(dicts)?;
        }
        Ok(())
    }

    /// Writes the rows gathered as a row group.
    fn flush(&mut self, dicts: &[Vec<ByteArray>]) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        self.rows = 0;
        let path = &self.path;
        let fail = |e: parquet::errors::ParquetError| {
            anyhow::Error::from(e).context(format!("cannot write {}", path.display()))
        };
        let mut group = self.writer.next_row_group().map_err(fail)?;
        for column in &mut self.columns {
            let mut w = group
                .next_column()
                .map_err(fail)?
                .expect("a column per field of the schema");
            let defs = column.defs.as_deref();
            match &mut column.values {
                Values::U32(v) => {
                    w.typed::<Int32Type>()
                        .write_batch(v, defs, None)
                        .map_err(fail)?;
                    v.clear();
                }
                Values::U64(v) => {
                    w.typed::<Int64Type>()
                        .write_batch(v, defs, None)
                        .map_err(fail)?;
                    v.clear();
                }
                Values::Str(v) => {
                    w.typed::<ByteArrayType>()
                        .write_batch(v, defs, None)
                        .map_err(fail)?;
                    v.clear();
                }
                Values::Dict(which, keys) => {
                    let dict = &dicts[*which];
                    let v: Vec<ByteArray> =
                        keys.iter().map(|&k| dict[k as usize].clone()).collect();
                    w.typed::<ByteArrayType>()
                        .write_batch(&v, defs, None)
                        .map_err(fail)?;
                    keys.clear();
                }
            }
            if let Some(d) = &mut column.defs {
                d.clear();
            }
            w.close().map_err(fail)?;
        }
        group.close().map_err(fail)?;
        Ok(())
    }

    fn close(mut self, dicts: &[Vec<ByteArray>]) -> anyhow::Result<()> {
        self.flush(dicts)?;
        let path = self.path.clone();
        self.writer
            .close()
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}

/// zstd (level 1: fast), statistics and dictionaries where they pay:
/// dictionaries for the `strings` (names repeat: one hash per value, no
/// statistics), none for the numbers (zstd packs repeated ones as well,
/// without hashing each value), delta encoding for the `times`.
fn properties(strings: &[&str], times: &[&str]) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(1).expect("valid level"),
        ))
        .set_max_row_group_size(ROW_GROUP)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_dictionary_enabled(false);
    for c in strings {
        b = b
            .set_column_statistics_enabled(ColumnPath::from(*c), EnabledStatistics::None)
            .set_column_dictionary_enabled(ColumnPath::from(*c), true);
    }
    for c in times {
        b = b.set_column_encoding(ColumnPath::from(*c), Encoding::DELTA_BINARY_PACKED);
    }
    b.build()
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

fn calls_columns() -> Vec<Column> {
    vec![
        Column::u32(),
        Column::u32(),
        Column::u32(),
        Column::u32(),
        Column::dict(NAMES),
        Column::dict(SYMBOLS),
        Column::dict(MODULES),
        Column::u64(),
        Column::u64(),
        Column::u64().optional(),
        Column::u64().optional(),
        Column::dict(ENDED),
        Column::str().optional(),
        Column::str().optional(),
    ]
}

/// The dictionaries of calls.parquet's string columns.
const NAMES: usize = 0;
const SYMBOLS: usize = 1;
const MODULES: usize = 2;
const ENDED: usize = 3;

/// How a call ended, as the `ended` column spells it.
fn ended(end: End) -> &'static str {
    match end {
        End::Returned => "returned",
        End::Unwound => "unwound",
        End::NotReturned => "not_returned",
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
    stats: Vec<Stats>,
    /// Per function its name, symbol and module ([`NAMES`], [`SYMBOLS`],
    /// [`MODULES`]), and the ways a call ends ([`ENDED`]).
    dicts: Vec<Vec<ByteArray>>,
    table: Table,
    /// The first write error: the pass stops writing.
    failed: Option<anyhow::Error>,
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
    fn push(&mut self, task: &TaskInfo, func: u32, call: &Call, self_ns: u64) {
        self.calls += 1;
        if self.failed.is_some() {
            return;
        }
        while self.dicts[NAMES].len() < self.functions.list.len() {
            let f = &self.functions.list[self.dicts[NAMES].len()];
            self.dicts[NAMES].push(f.name.as_str().into());
            self.dicts[SYMBOLS].push(f.symbol.as_str().into());
            self.dicts[MODULES].push(f.module.as_str().into());
        }
        let returned = call.end != End::NotReturned;
        let c = &mut self.table.columns;
        c[0].push_u32(Some(task.id));
        c[1].push_u32(Some(task.pid));
        c[2].push_u32(Some(task.tid));
        c[3].push_u32(Some(call.depth as u32));
        c[4].push_key(func);
        c[5].push_key(func);
        c[6].push_key(func);
        c[7].push_u64(Some(call.start_ns));
        c[8].push_u64(Some(call.end_ns));
        c[9].push_u64(returned.then(|| call.duration_ns()));
        c[10].push_u64(returned.then_some(self_ns));
        let e = match call.end {
            End::Returned => 0,
            End::Unwound => 1,
            End::NotReturned => 2,
        };
        c[11].push_key(e);
        let text = |p: &Option<Vec<u8>>| {
            p.as_ref()
                .map(|p| ByteArray::from(super::args::format_payload(p).into_bytes()))
        };
        c[12].push_str(text(&call.args));
        c[13].push_str(text(&call.retval));
        if let Err(e) = self.table.row_done(&self.dicts) {
            self.failed = Some(e);
        }
    }
}

const NO_INDEX: u32 = u32::MAX;

impl StepSink for Pass<'_> {
    fn begin_task(&mut self, task: &TaskInfo) -> std::io::Result<()> {
        self.task = task.clone();
        self.calls_before = self.calls;
        self.ids.clear();
        self.stack.clear();
        self.open.clear();
        self.open.resize(self.stats.len(), 0);
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
                        if self.stats.len() < self.functions.list.len() {
                            self.stats
                                .resize(self.functions.list.len(), Stats::default());
                        }
                        if i < self.ids.len() + 1_000_000 {
                            if self.ids.len() <= i {
                                self.ids.resize(i + 1, NO_INDEX);
                            }
                            self.ids[i] = x;
                        }
                        x
                    }
                };
                if self.open.len() < self.stats.len() {
                    self.open.resize(self.stats.len(), 0);
                }
                self.stats[f as usize].calls += 1;
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
                    let s = &mut self.stats[f as usize];
                    s.returned += 1;
                    s.sum_ns = s.sum_ns.saturating_add(dur);
                    s.self_ns = s.self_ns.saturating_add(self_ns);
                    if self.open[f as usize] == 0 {
                        s.total_ns = s.total_ns.saturating_add(dur);
                    }
                    s.min_ns = Some(s.min_ns.map_or(dur, |m| m.min(dur)));
                    s.max_ns = Some(s.max_ns.map_or(dur, |m| m.max(dur)));
                    if let Some(parent) = self.stack.last_mut() {
                        parent.1 = parent.1.saturating_add(dur);
                    }
                }
                let task = std::mem::take(&mut self.task);
                self.push(&task, f, call, self_ns);
                self.task = task;
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
    let table = Table::create(
        dir,
        "calls.parquet",
        CALLS_SCHEMA,
        calls_columns(),
        properties(
            &["function", "symbol", "module", "ended", "args", "retval"],
            &["start_ns", "end_ns"],
        ),
    )?;
    let mut pass = Pass {
        trace,
        functions: Functions::demangled(options.demangle),
        stats: Vec::new(),
        dicts: vec![
            Vec::new(),
            Vec::new(),
            Vec::new(),
            [End::Returned, End::Unwound, End::NotReturned]
                .map(|e| ByteArray::from(ended(e)))
                .to_vec(),
        ],
        table,
        failed: None,
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
    if let Some(e) = pass.failed {
        return Err(e);
    }
    pass.table.close(&pass.dicts)?;
    write_functions(dir, &pass.functions, &pass.stats)?;
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
    let mut t = Table::create(
        dir,
        "functions.parquet",
        SCHEMA,
        columns,
        properties(&[], &[]),
    )?;
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
        t.row_done(&[])?;
    }
    t.close(&[])
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
    let mut table = Table::create(dir, "tasks.parquet", SCHEMA, columns, properties(&[], &[]))?;
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
        table.row_done(&[])?;
    }
    table.close(&[])
}
