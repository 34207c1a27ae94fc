//! How the tree is laid out: its header, the task headers, the `-f`
//! columns ([`TreeStyle`], [`Field`]), and what a pass met
//! ([`TreeSummary`]).

use fctrace_format::store::{StoreError, TaskInfo, TaskOrigin, Trace};

/// The first line of the tree.
pub const HEADER: &str = "# DURATION     TID     FUNCTION";

/// Deepest level whose lines are indented by 2 spaces per level; deeper
/// lines keep this indent and show their depth as `(depth N) `.
pub const MAX_INDENT_DEPTH: usize = 100;

/// What [`write_tree`] met besides the lines it wrote.
#[derive(Debug, Default)]
pub struct TreeSummary {
    /// Events read.
    pub events: u64,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read: the error ended that
    /// task's part of the tree (the other tasks went on).
    pub errors: Vec<StoreError>,
}

/// How the tree is laid out (the options of `replay` and live mode that
/// are not filters).
#[derive(Clone, Debug, Default)]
pub struct TreeStyle {
    /// `--task-order`: each task's calls after the previous task's, not
    /// interleaved by time.
    pub task_order: bool,
    /// `-f`: the columns before the function, when not the default
    /// (`duration,tid`).
    pub fields: Option<Vec<Field>>,
    /// `--last N`: per task, only its last N calls, with the calls open
    /// around them; the task that crashed first ([`last`]).
    pub last: Option<u64>,
    /// `--no-comment`: closing lines are `}` without `/* name */`.
    pub no_comment: bool,
    /// `--task-newline`: an empty line where the task changes.
    pub task_newline: bool,
    /// `--column-view`: each task's lines shifted right by this many
    /// levels (2 spaces each) times the task's column (tasks numbered as
    /// they first print).
    pub column_offset: Option<usize>,
    /// `-F FUNC@kernel`, `-N FUNC@kernel`: which kernel functions
    /// (`record -K`) are shown (taken out of the function filters by
    /// [`write_tree_styled`](super::write_tree_styled)).
    pub kernel: KernelShown,
}

pub use crate::syscalls::KERNEL_MODULE;

/// `-F FUNC@kernel` (only these kernel functions and what they call) and
/// `-N FUNC@kernel` (not these nor what they call), at replay.
#[derive(Clone, Debug, Default)]
pub struct KernelShown {
    pub only: Vec<fctrace_options::pattern::FuncPattern>,
    pub hide: Vec<fctrace_options::pattern::FuncPattern>,
}

impl KernelShown {
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.hide.is_empty()
    }

    /// `options` without their `FUNC@kernel` patterns, and those.
    pub fn split(options: &fctrace_options::Options) -> (fctrace_options::Options, KernelShown) {
        let kernel = |p: &fctrace_options::pattern::FuncPattern| p.module() == Some(KERNEL_MODULE);
        let mut rest = options.clone();
        let shown = KernelShown {
            only: rest.filters.iter().filter(|p| kernel(p)).cloned().collect(),
            hide: rest.notrace.iter().filter(|p| kernel(p)).cloned().collect(),
        };
        rest.filters.retain(|p| !kernel(p));
        rest.notrace.retain(|p| !kernel(p));
        (rest, shown)
    }
}

impl TreeStyle {
    /// The `-f` columns the lines are composed with: those of `-f`, or
    /// the default ones when another option needs the per-line path.
    pub(super) fn line_fields(&self) -> Option<Vec<Field>> {
        match &self.fields {
            Some(f) => Some(f.clone()),
            None if self.no_comment || self.task_newline || self.column_offset.is_some() => {
                Some(vec![Field::Duration, Field::Tid])
            }
            None => None,
        }
    }
}

/// A column of `-f/--output-fields` (uftrace's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The call's duration (on leaves and closing lines).
    Duration,
    /// `[tid]`.
    Tid,
    /// The line's CLOCK_MONOTONIC time stamp, `SECONDS.NANOSECONDS` (an
    /// entry's for opening lines and leaves, an exit's for closing ones).
    Time,
    /// The time since the previous line of the same task.
    Delta,
    /// The time since the trace's first event.
    Elapsed,
    /// The task's thread name (comm).
    Task,
    /// The file name of the module of the line's function.
    Module,
    /// The function's address in the process (hexadecimal).
    Addr,
}

impl Field {
    const ALL: [(&'static str, Field); 8] = [
        ("duration", Field::Duration),
        ("tid", Field::Tid),
        ("addr", Field::Addr),
        ("time", Field::Time),
        ("delta", Field::Delta),
        ("elapsed", Field::Elapsed),
        ("task", Field::Task),
        ("module", Field::Module),
    ];

    /// The column's title and width (with its leading space).
    pub(super) fn title(self) -> (&'static str, usize) {
        match self {
            Field::Duration => ("DURATION", 11),
            Field::Tid => ("TID", 8),
            Field::Time => ("TIMESTAMP", 17),
            Field::Delta => ("TIMEDELTA", 11),
            Field::Elapsed => ("ELAPSED", 11),
            Field::Task => ("TASK NAME", 16),
            Field::Module => ("MODULE NAME", 16),
            Field::Addr => ("ADDRESS", 13),
        }
    }
}

/// `-f FIELD,...` as uftrace takes it: a list of fields, `+FIELD,...` to
/// add them to the default `duration,tid`, or `none`. `None` for the
/// default.
pub fn parse_fields(spec: &str) -> Result<Option<Vec<Field>>, String> {
    let spec = spec.trim();
    if spec == "none" {
        return Ok(Some(Vec::new()));
    }
    let (mut fields, list) = match spec.strip_prefix('+') {
        Some(rest) => (vec![Field::Duration, Field::Tid], rest),
        None => (Vec::new(), spec),
    };
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(&(_, f)) = Field::ALL.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = Field::ALL.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown field `{name}` (fields: {}, or none)",
                known.join(", ")
            ));
        };
        if !fields.contains(&f) {
            fields.push(f);
        }
    }
    if fields.is_empty() {
        return Err(format!("`{spec}` names no field"));
    }
    Ok((fields != [Field::Duration, Field::Tid]).then_some(fields))
}

/// The `-f` columns of a pass: the fields and the origin of `elapsed`,
/// and the options laid out line by line with them.
pub(super) struct FieldCtx {
    pub(super) fields: Vec<Field>,
    pub(super) origin: u64,
    /// `--no-comment`.
    pub(super) no_comment: bool,
    /// `--task-newline`: the tid of the previous line.
    pub(super) task_newline: bool,
    pub(super) prev_tid: std::cell::Cell<Option<u32>>,
    /// `--column-view`: the offset per column and the next column.
    pub(super) column_offset: Option<usize>,
    pub(super) next_column: std::cell::Cell<usize>,
}

/// What a task's lines show in the `-f` columns besides their duration,
/// set by the task before each line.
pub(super) struct LineInfo {
    pub(super) tid: String,
    pub(super) tid_num: u32,
    /// The line's function's address (`addr`).
    pub(super) addr: std::cell::Cell<Option<u64>>,
    /// `--column-view`: the task's column, once it printed.
    pub(super) column: std::cell::Cell<Option<usize>>,
    pub(super) comm: String,
    /// The line's time.
    pub(super) ns: std::cell::Cell<u64>,
    /// The previous line's time (`delta`).
    pub(super) prev: std::cell::Cell<Option<u64>>,
    pub(super) module: std::cell::RefCell<String>,
}

/// The header line for `fields`.
pub(super) fn fields_header(fields: &[Field]) -> String {
    if fields == [Field::Duration, Field::Tid] {
        return HEADER.to_string();
    }
    if fields.is_empty() {
        return "# FUNCTION".to_string();
    }
    let mut h = String::new();
    for f in fields {
        let (title, width) = f.title();
        h.push_str(&format!("{title:>width$}"));
    }
    h.push_str("   FUNCTION");
    h.replace_range(0..1, "#");
    h
}

/// The header line of a task (without the newline).
pub fn task_header(trace: &Trace, task: &TaskInfo) -> String {
    let parent = task
        .parent
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let origin = match task.origin {
        TaskOrigin::Start if task.parent.is_none() => "the program started".to_string(),
        TaskOrigin::Start => format!("started by task {parent}"),
        TaskOrigin::Thread => format!("thread of task {parent}"),
        TaskOrigin::Fork => format!("forked by task {parent}"),
        TaskOrigin::Exec => format!("exec by task {parent}"),
        TaskOrigin::Spawn => format!("spawned by task {parent}"),
        TaskOrigin::Attach => "running when fctrace attached".to_string(),
    };
    format!(
        "# task {}: pid {}, tid {} ({}), {}, {origin}",
        task.id,
        task.pid,
        task.tid,
        task.comm,
        session_program(trace, task.session)
    )
}

/// The program of a session: its symbol table's executable, or for session
/// 0 without one the program fctrace ran.
pub fn session_program(trace: &Trace, session: u32) -> String {
    match trace.sessions.get(&session) {
        Some(table) => table.exe.clone(),
        None if session == 0 => trace.info.program.clone(),
        None => format!("<session {session}>"),
    }
}
