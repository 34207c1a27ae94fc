//! The call graph (`fctrace graph`): calls merged by call path, a
//! calling-context tree.
//!
//! A node is one call path (`main > parse > lex`): the calls whose chain
//! of open callers in their task is that path. Per node:
//! - `calls`: the calls entered on that path;
//! - `total`: the sum of their durations;
//! - `self`: the sum of their durations less those of their direct
//!   children.
//!
//! Times follow the report's rules (see [`super::report`]): a call that
//! never returned (a caller returned past it, or its task ended with it
//! open) counts in `calls` only, and is no child of its caller's time. A
//! function's calls summed over the nodes of the function are its calls
//! in the report, and so are its self times; its total in the report is
//! the sum over its nodes that have no node of the same function above
//! them (a recursive call is not counted twice).
//!
//! Tasks (threads and processes) are merged into one graph under a root
//! that stands for the program, as uftrace does: a thread's start routine
//! is a child of the root, as `main` is, and so are a forked child's
//! calls (the calls it inherited open were counted in its parent; their
//! exits in the child are [`Step::Unmatched`]). With `per_task` each task
//! has a root of its own. Memory grows with the number of distinct call paths
//! (at most depth × distinct functions per level: a recursion of depth
//! 40 is 40 nodes), never with the number of events; `-D N` bounds the
//! depth.
//!
//! [`Graph::focus`] gives, for a function, its backtraces (every distinct
//! chain of callers that reached it) and the graph of its calls merged by
//! path below it.

use super::calls::{each_task, End, Functions, Open, Step, StepSink};
use super::duration::duration;
use super::progress::Progress;
use fctrace_format::store::{StoreError, TaskInfo, Trace};
use fctrace_options::pattern::name_forms;
use fctrace_options::FuncPattern;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};

/// No node: the parent of a root.
pub const NONE: u32 = u32::MAX;

/// One call path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Index in [`Graph::functions`]; [`NONE`] for a root.
    pub func: u32,
    /// [`NONE`] for a root.
    pub parent: u32,
    /// For a root: the tasks merged into it.
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// The shortest and longest call that returned, and the least and
    /// largest self time of one (`graph -f total-min,...`).
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub self_min_ns: Option<u64>,
    pub self_max_ns: Option<u64>,
    /// Calls that returned (the divisor of the averages).
    pub returned: u64,
    /// In the order they were first called.
    pub children: Vec<u32>,
    /// The last child looked up: `(func, node)` (a loop calls the same
    /// function again and again).
    last: (u32, u32),
}

impl Node {
    fn new(func: u32, parent: u32) -> Node {
        Node {
            func,
            parent,
            last: (NONE, NONE),
            ..Node::default()
        }
    }
}

/// A forest of call paths: `nodes[roots[i]]` and their descendants.
#[derive(Debug, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
    pub roots: Vec<u32>,
    /// `(parent, func) -> child`, for parents with many children.
    index: HashMap<(u32, u32), u32, BuildHasherDefault<PairHasher>>,
}

/// A multiplicative hash of the `(parent, func)` keys (the default
/// SipHash costs more than the rest of the pass).
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Tree {
    /// The child of `parent` for `func`, made if new.
    #[inline]
    fn child(&mut self, parent: u32, func: u32) -> u32 {
        let p = &self.nodes[parent as usize];
        if p.last.0 == func {
            return p.last.1;
        }
        let next = self.nodes.len() as u32;
        let n = *self.index.entry((parent, func)).or_insert(next);
        if n == next {
            self.nodes.push(Node::new(func, parent));
            self.nodes[parent as usize].children.push(n);
        }
        self.nodes[parent as usize].last = (func, n);
        n
    }

    fn root(&mut self) -> u32 {
        let n = self.nodes.len() as u32;
        self.nodes.push(Node::new(NONE, NONE));
        self.roots.push(n);
        n
    }

    /// The function nodes from the root's child down to `n`.
    pub fn path(&self, mut n: u32) -> Vec<u32> {
        let mut path = Vec::new();
        while n != NONE && self.nodes[n as usize].func != NONE {
            path.push(n);
            n = self.nodes[n as usize].parent;
        }
        path.reverse();
        path
    }

    /// The nodes in depth-first order (children in order), with their
    /// depth below their root: no recursion, so no depth is too deep.
    pub fn preorder(&self) -> Vec<(u32, usize)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<(u32, usize)> = self.roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((n, d)) = stack.pop() {
            out.push((n, d));
            for &c in self.nodes[n as usize].children.iter().rev() {
                stack.push((c, d + 1));
            }
        }
        out
    }

    /// The trees of every root merged into one, path by path (a tree of
    /// the calls of every task, from the tree of each task).
    pub fn merged(&self) -> Tree {
        let mut m = Tree::default();
        let root = m.root();
        // (node here, node in the merged tree)
        let mut todo: Vec<(u32, u32)> = self.roots.iter().rev().map(|&r| (r, root)).collect();
        while let Some((n, into)) = todo.pop() {
            let node = &self.nodes[n as usize];
            add(&mut m.nodes[into as usize], node);
            for &c in node.children.iter().rev() {
                let mc = m.child(into, self.nodes[c as usize].func);
                todo.push((c, mc));
            }
        }
        m
    }

    /// Calls of `n` per call of its parent, when the parent is a call.
    pub fn per_call(&self, n: u32) -> Option<f64> {
        let node = &self.nodes[n as usize];
        let p = self.nodes.get(node.parent as usize)?;
        (p.func != NONE && p.calls > 0).then(|| node.calls as f64 / p.calls as f64)
    }
}

/// The call graph of a trace.
pub struct Graph {
    pub tree: Tree,
    pub functions: Functions,
    /// Per root: the task it stands for, with `per_task`.
    pub root_tasks: Vec<Option<TaskInfo>>,
    /// Sum of the counts of the `Lost` records met.
    pub lost_in_streams: u64,
    /// Tasks whose events could not all be read (their readable part is
    /// in the graph).
    pub errors: Vec<StoreError>,
    /// Events read.
    pub events: u64,
    /// The pass was stopped before its end ([`build_with`]).
    pub stopped: bool,
    /// `graph -f`: the text's columns (none: fctrace's own).
    pub fields: Option<Vec<GraphCol>>,
}

/// A column of `graph -f` (uftrace's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphCol {
    Total,
    TotalAvg,
    TotalMin,
    TotalMax,
    SelfTime,
    SelfAvg,
    SelfMin,
    SelfMax,
    Call,
}

const GRAPH_COLS: [(&str, GraphCol, &str); 9] = [
    ("total", GraphCol::Total, "Total time"),
    ("total-avg", GraphCol::TotalAvg, "Total avg"),
    ("total-min", GraphCol::TotalMin, "Total min"),
    ("total-max", GraphCol::TotalMax, "Total max"),
    ("self", GraphCol::SelfTime, "Self time"),
    ("self-avg", GraphCol::SelfAvg, "Self avg"),
    ("self-min", GraphCol::SelfMin, "Self min"),
    ("self-max", GraphCol::SelfMax, "Self max"),
    ("call", GraphCol::Call, "Calls"),
];

/// `graph -f FIELD,...`: total, total-avg, total-min, total-max, self,
/// self-avg, self-min, self-max, call, or none.
pub fn parse_graph_cols(spec: &str) -> Result<Vec<GraphCol>, String> {
    if spec.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut cols = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match GRAPH_COLS.iter().find(|c| c.0 == name) {
            Some(c) if !cols.contains(&c.1) => cols.push(c.1),
            Some(_) => {}
            None => {
                let known: Vec<&str> = GRAPH_COLS.iter().map(|c| c.0).collect();
                return Err(format!(
                    "unknown field `{name}` (fields: {}, or none)",
                    known.join(", ")
                ));
            }
        }
    }
    if cols.is_empty() {
        return Err(format!("`{spec}` names no field"));
    }
    Ok(cols)
}

impl GraphCol {
    fn title(self) -> &'static str {
        GRAPH_COLS.iter().find(|c| c.1 == self).map_or("", |c| c.2)
    }

    /// The cell of `node` (a root: only its total).
    fn cell(self, node: &Node) -> String {
        let avg = |sum: u64| (node.returned > 0).then(|| sum / node.returned);
        let t = |v: Option<u64>| v.map_or_else(String::new, duration);
        if node.func == NONE {
            return match self {
                GraphCol::Total => duration(node.total_ns),
                _ => String::new(),
            };
        }
        match self {
            GraphCol::Total => duration(node.total_ns),
            GraphCol::TotalAvg => t(avg(node.total_ns)),
            GraphCol::TotalMin => t(node.min_ns),
            GraphCol::TotalMax => t(node.max_ns),
            GraphCol::SelfTime => duration(node.self_ns),
            GraphCol::SelfAvg => t(avg(node.self_ns)),
            GraphCol::SelfMin => t(node.self_min_ns),
            GraphCol::SelfMax => t(node.self_max_ns),
            GraphCol::Call => node.calls.to_string(),
        }
    }
}

/// A call open in the task being read.
struct Frame {
    node: u32,
    /// Durations of its direct children that returned.
    children_ns: u64,
}

/// Reads every task of `trace` once (through the display filters of
/// `options`) and merges its calls by path; `label`: that of the
/// progress line.
pub fn build(
    trace: &Trace,
    options: &fctrace_options::Options,
    per_task: bool,
    label: &'static str,
) -> Graph {
    build_with(trace, options, per_task, Some(label), &mut |_| true)
}

/// [`build`] with a progress line labelled `line` (none: no line) and
/// `progress(events read)` called every 2^18 events or so: when it
/// returns false, the pass stops there ([`Graph::stopped`]).
pub fn build_with(
    trace: &Trace,
    options: &fctrace_options::Options,
    per_task: bool,
    line: Option<&'static str>,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Graph {
    let mut sink = Builder {
        trace,
        per_task,
        g: Graph {
            tree: Tree::default(),
            functions: Functions::with_options(options),
            root_tasks: Vec::new(),
            lost_in_streams: 0,
            errors: Vec::new(),
            events: 0,
            stopped: false,
            fields: None,
        },
        by_id: HashMap::new(),
        ids: Vec::new(),
        session: 0,
        root: NONE,
        stack: Vec::new(),
        progress,
        next_report: 1 << 18,
    };
    let wanted = line.is_some() && Progress::wanted(false);
    // The sink writes nothing: it fails only when `progress` stops it.
    let pass = each_task(trace, options, line.unwrap_or(""), wanted, &mut sink);
    sink.by_id
        .insert(sink.session, std::mem::take(&mut sink.ids));
    let mut g = sink.g;
    match pass {
        Ok(pass) => {
            g.lost_in_streams = pass.lost_in_streams;
            g.errors = pass.errors;
            g.events = pass.events;
        }
        Err(_) => g.stopped = true,
    }
    for &r in &g.tree.roots {
        let t: u64 = g.tree.nodes[r as usize]
            .children
            .iter()
            .map(|&c| g.tree.nodes[c as usize].total_ns)
            .fold(0, u64::saturating_add);
        g.tree.nodes[r as usize].total_ns = t;
    }
    g
}

/// The calls of the tasks into a [`Graph`] ([`build`]).
struct Builder<'t> {
    trace: &'t Trace,
    per_task: bool,
    g: Graph,
    /// (session, func id) -> index in the functions: a vector per
    /// session, but that of the current task's session, in `ids`.
    by_id: HashMap<u32, Vec<u32>>,
    ids: Vec<u32>,
    session: u32,
    /// The current task's root.
    root: u32,
    stack: Vec<Frame>,
    progress: &'t mut dyn FnMut(u64) -> bool,
    /// Events read at the next call of `progress`.
    next_report: u64,
}

impl StepSink for Builder<'_> {
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()> {
        let tree = &mut self.g.tree;
        self.root = if self.per_task || tree.roots.is_empty() {
            self.g.root_tasks.push(self.per_task.then(|| task.clone()));
            tree.root()
        } else {
            tree.roots[0]
        };
        tree.nodes[self.root as usize].calls += 1;
        if task.session != self.session {
            let ids = self.by_id.remove(&task.session).unwrap_or_default();
            self.by_id
                .insert(self.session, std::mem::replace(&mut self.ids, ids));
            self.session = task.session;
        }
        self.stack.clear();
        Ok(())
    }

    #[inline]
    fn step(&mut self, step: &Step, stack: &[Open]) -> io::Result<()> {
        let tree = &mut self.g.tree;
        match step {
            Step::Enter { func, .. } => {
                let i = *func as usize;
                let f = match self.ids.get(i) {
                    Some(&x) if x != NONE => x,
                    _ => {
                        let x = self.g.functions.index(self.trace, self.session, *func) as u32;
                        // A stray huge id (corrupt trace) is not cached.
                        if i < self.ids.len() + 1_000_000 {
                            if self.ids.len() <= i {
                                self.ids.resize(i + 1, NONE);
                            }
                            self.ids[i] = x;
                        }
                        x
                    }
                };
                let parent = self.stack.last().map_or(self.root, |fr| fr.node);
                let n = tree.child(parent, f);
                // A call open where the trace begins (an attach or history
                // chain) is a node of the graph, not a counted call, as in
                // the report.
                if stack.last().is_none_or(|o| o.entry_recorded) {
                    tree.nodes[n as usize].calls += 1;
                }
                self.stack.push(Frame {
                    node: n,
                    children_ns: 0,
                });
            }
            Step::Leave(call) => {
                let Some(frame) = self.stack.pop() else {
                    return Ok(());
                };
                if call.end == End::NotReturned || !call.entry_recorded {
                    return Ok(());
                }
                let dur = call.duration_ns();
                let node = &mut tree.nodes[frame.node as usize];
                node.total_ns = node.total_ns.saturating_add(dur);
                let self_dur = dur.saturating_sub(frame.children_ns);
                node.self_ns = node.self_ns.saturating_add(self_dur);
                node.returned += 1;
                node.min_ns = Some(node.min_ns.map_or(dur, |m| m.min(dur)));
                node.max_ns = Some(node.max_ns.map_or(dur, |m| m.max(dur)));
                node.self_min_ns = Some(node.self_min_ns.map_or(self_dur, |m| m.min(self_dur)));
                node.self_max_ns = Some(node.self_max_ns.map_or(self_dur, |m| m.max(self_dur)));
                if let Some(parent) = self.stack.last_mut() {
                    parent.children_ns = parent.children_ns.saturating_add(dur);
                }
            }
            Step::Lost { .. } | Step::Unmatched { .. } | Step::Signal { .. } => {}
        }
        Ok(())
    }

    #[inline]
    fn events_read(&mut self, total: u64) -> io::Result<()> {
        if total >= self.next_report {
            self.next_report = total + (1 << 18);
            if !(self.progress)(total) {
                return Err(io::ErrorKind::Interrupted.into());
            }
        }
        Ok(())
    }
}

/// One distinct chain of callers that reached a focused function.
#[derive(Clone, Debug)]
pub struct Backtrace {
    /// Nodes of [`Graph::tree`], outermost first; the last is the call of
    /// the function.
    pub chain: Vec<u32>,
}

/// The callers and callees of the functions a pattern names.
pub struct Focus {
    /// Every node of one of them, most calls first.
    pub backtraces: Vec<Backtrace>,
    /// The calls of the functions merged by path below them: one root per
    /// function, made of its outermost calls (those without a call of a
    /// named function above them: a recursive call is inside its
    /// caller's graph).
    pub below: Tree,
}

impl Graph {
    /// Which functions `pattern` names (by name, symbol or module, as `-F`).
    pub fn matching(&self, pattern: &FuncPattern) -> Vec<bool> {
        self.functions
            .list
            .iter()
            .map(|f| pattern.matches(&f.module, name_forms(&f.symbol, &f.name)))
            .collect()
    }

    /// The backtraces and the calling graph of the functions `matched`.
    pub fn focus(&self, matched: Vec<bool>) -> Focus {
        let t = &self.tree;
        let is = |n: u32| {
            let f = t.nodes[n as usize].func;
            f != NONE && matched[f as usize]
        };
        let mut backtraces: Vec<Backtrace> = (0..t.nodes.len() as u32)
            .filter(|&n| is(n) && t.nodes[n as usize].calls > 0)
            .map(|n| Backtrace { chain: t.path(n) })
            .collect();
        backtraces
            .sort_by_key(|b| std::cmp::Reverse(t.nodes[*b.chain.last().unwrap() as usize].calls));

        // Merge the subtrees of the outermost matching nodes.
        let mut below = Tree::default();
        let mut roots: HashMap<u32, u32> = HashMap::new();
        let mut work: Vec<(u32, u32, bool)> =
            t.roots.iter().rev().map(|&r| (r, NONE, false)).collect();
        // (node, merged parent or NONE, inside a matching call)
        while let Some((n, into, inside)) = work.pop() {
            let node = &t.nodes[n as usize];
            let mut next = into;
            let mut now_inside = inside;
            if inside {
                let m = below.child(into, node.func);
                add(&mut below.nodes[m as usize], node);
                next = m;
            } else if is(n) {
                let m = *roots.entry(node.func).or_insert_with(|| {
                    let m = below.nodes.len() as u32;
                    below.nodes.push(Node::new(node.func, NONE));
                    below.roots.push(m);
                    m
                });
                add(&mut below.nodes[m as usize], node);
                next = m;
                now_inside = true;
            }
            for &c in node.children.iter().rev() {
                work.push((c, next, now_inside));
            }
        }
        Focus { backtraces, below }
    }

    /// The label of root `i`: the program, or the task.
    pub fn root_label(&self, trace: &Trace, i: usize) -> String {
        match self.root_tasks.get(i).and_then(|t| t.as_ref()) {
            Some(t) => format!("{} [{}]", task_name(trace, t), t.tid),
            None => super::names::module_file(&trace.info.program).to_string(),
        }
    }
}

fn task_name(trace: &Trace, t: &TaskInfo) -> String {
    if t.comm.is_empty() {
        super::names::module_file(&trace.info.program).to_string()
    } else {
        t.comm.clone()
    }
}

fn add(into: &mut Node, from: &Node) {
    into.calls += from.calls;
    into.total_ns = into.total_ns.saturating_add(from.total_ns);
    into.self_ns = into.self_ns.saturating_add(from.self_ns);
    into.returned += from.returned;
    let low = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).min();
    let high = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).max();
    into.min_ns = low(into.min_ns, from.min_ns);
    into.max_ns = high(into.max_ns, from.max_ns);
    into.self_min_ns = low(into.self_min_ns, from.self_min_ns);
    into.self_max_ns = high(into.self_max_ns, from.self_max_ns);
}

/// `n` calls per call as text: an integer when it is one, else 2
/// decimals (3 where 2 would look like an integer: 2000 calls per 2008 is
/// `0.996`, not `1.00`).
pub fn ratio(r: f64) -> String {
    if (r - r.round()).abs() < 1e-9 {
        return format!("{}", r.round() as u64);
    }
    let two = format!("{r:.2}");
    if two.ends_with(".00") {
        format!("{r:.3}")
    } else {
        two
    }
}

/// What the outputs need to name nodes.
pub struct Names<'a> {
    graph: &'a Graph,
    ambiguous: Vec<bool>,
    roots: HashMap<u32, String>,
}

impl<'a> Names<'a> {
    pub fn new(graph: &'a Graph, trace: &Trace) -> Names<'a> {
        Names {
            graph,
            ambiguous: graph.functions.ambiguous(),
            roots: graph
                .tree
                .roots
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, graph.root_label(trace, i)))
                .collect(),
        }
    }

    /// The name of node `n` of `tree` (a root of the whole graph: its label).
    fn of(&self, tree: &Tree, n: u32, whole: bool) -> String {
        let f = tree.nodes[n as usize].func;
        if f == NONE {
            if whole {
                return self.roots.get(&n).cloned().unwrap_or_default();
            }
            return String::new();
        }
        self.graph.functions.shown_name(f as usize, &self.ambiguous)
    }
}

// ------------------------------------------------------------------ text

const HEADER: &str = "  Total time   Self time       Calls    Per call  Function\n  ==========  ==========  ==========  ==========  ====================\n";

/// The tree as text, uftrace style: a node with one child has it on the
/// next line at the same indent; several children each get a `+-`
/// branch.
fn write_tree_text(out: &mut dyn Write, tree: &Tree, names: &Names, whole: bool) -> io::Result<()> {
    if let Some(cols) = &names.graph.fields {
        return write_tree_fields(out, tree, names, whole, cols);
    }
    out.write_all(HEADER.as_bytes())?;
    // (node, lead printed before its name, prefix of its descendants)
    let mut stack: Vec<(u32, String, String)> = tree
        .roots
        .iter()
        .rev()
        .map(|&r| (r, String::new(), String::new()))
        .collect();
    while let Some((n, lead, cont)) = stack.pop() {
        let node = &tree.nodes[n as usize];
        let root = node.func == NONE;
        let per = tree.per_call(n).map(ratio).unwrap_or_default();
        writeln!(
            out,
            "  {:>10}  {:>10}  {:>10}  {:>10}  {}{}",
            duration(node.total_ns),
            if root {
                String::new()
            } else {
                duration(node.self_ns)
            },
            if root && node.calls > 1 {
                format!("{} tasks", node.calls)
            } else if root {
                String::new()
            } else {
                node.calls.to_string()
            },
            per,
            lead,
            names.of(tree, n, whole)
        )?;
        let k = node.children.len();
        for (i, &c) in node.children.iter().enumerate().rev() {
            if k == 1 {
                stack.push((c, cont.clone(), cont.clone()));
            } else {
                let last = i + 1 == k;
                stack.push((
                    c,
                    format!("{cont}+-"),
                    format!("{cont}{}", if last { "  " } else { "| " }),
                ));
            }
        }
    }
    Ok(())
}

/// [`write_tree_text`] with the columns of `graph -f`.
fn write_tree_fields(
    out: &mut dyn Write,
    tree: &Tree,
    names: &Names,
    whole: bool,
    cols: &[GraphCol],
) -> io::Result<()> {
    let mut head = String::new();
    let mut rule = String::new();
    for c in cols {
        head.push_str(&format!("  {:>10}", c.title()));
        rule.push_str(&format!("  {}", "=".repeat(10)));
    }
    writeln!(out, "{head}  Function")?;
    writeln!(out, "{rule}  {}", "=".repeat(20))?;
    let mut stack: Vec<(u32, String, String)> = tree
        .roots
        .iter()
        .rev()
        .map(|&r| (r, String::new(), String::new()))
        .collect();
    while let Some((n, lead, cont)) = stack.pop() {
        let node = &tree.nodes[n as usize];
        let mut line = String::new();
        for c in cols {
            line.push_str(&format!("  {:>10}", c.cell(node)));
        }
        writeln!(out, "{line}  {lead}{}", names.of(tree, n, whole))?;
        let k = node.children.len();
        for (i, &c) in node.children.iter().enumerate().rev() {
            if k == 1 {
                stack.push((c, cont.clone(), cont.clone()));
            } else {
                let last = i + 1 == k;
                stack.push((
                    c,
                    format!("{cont}+-"),
                    format!("{cont}{}", if last { "  " } else { "| " }),
                ));
            }
        }
    }
    Ok(())
}

/// The whole graph as text.
pub fn write_text(out: &mut dyn Write, trace: &Trace, g: &Graph) -> io::Result<()> {
    writeln!(out, "# Call graph of {}", command_line(trace))?;
    write_tree_text(out, &g.tree, &Names::new(g, trace), true)
}

/// The backtraces and calling graph of a function as text.
pub fn write_focus_text(
    out: &mut dyn Write,
    trace: &Trace,
    g: &Graph,
    what: &str,
    focus: &Focus,
) -> io::Result<()> {
    let names = Names::new(g, trace);
    let t = &g.tree;
    let hits: u64 = focus
        .backtraces
        .iter()
        .map(|b| t.nodes[*b.chain.last().unwrap() as usize].calls)
        .sum();
    writeln!(out, "# Call graph of {what} in {}", command_line(trace))?;
    writeln!(
        out,
        "# {hits} calls from {} distinct chains of callers\n",
        focus.backtraces.len()
    )?;
    writeln!(out, "=============== BACKTRACES ===============")?;
    for (i, b) in focus.backtraces.iter().enumerate() {
        let last = &t.nodes[*b.chain.last().unwrap() as usize];
        writeln!(
            out,
            " backtrace #{i}: {} call{}, total {}, self {}",
            last.calls,
            if last.calls == 1 { "" } else { "s" },
            duration(last.total_ns).trim_start(),
            duration(last.self_ns).trim_start()
        )?;
        for (level, &n) in b.chain.iter().enumerate() {
            let node = &t.nodes[n as usize];
            let per = t
                .per_call(n)
                .map(|r| format!(", {} per call of its caller", ratio(r)))
                .unwrap_or_default();
            writeln!(
                out,
                "   [{level}] {} ({} call{}{per})",
                names.of(t, n, true),
                node.calls,
                if node.calls == 1 { "" } else { "s" }
            )?;
        }
        writeln!(out)?;
    }
    writeln!(out, "========== CALL GRAPH BELOW {what} ==========")?;
    write_tree_text(out, &focus.below, &names, false)
}

// ------------------------------------------------------------ uftrace text

/// The columns of uftrace's shape: `-f`'s, else the total time.
fn uftrace_cols(names: &Names) -> Vec<GraphCol> {
    names
        .graph
        .fields
        .clone()
        .unwrap_or_else(|| vec![GraphCol::Total])
}

/// The tree in uftrace's shape: `TIME : (CALLS) name` lines, a node with
/// several children gives each a ` +-` branch, and after each of them but
/// the last a line with only the branch's `|`.
fn write_tree_uftrace(
    out: &mut dyn Write,
    tree: &Tree,
    names: &Names,
    whole: bool,
) -> io::Result<()> {
    let cols = uftrace_cols(names);
    let mut head = String::from("#");
    for c in &cols {
        head.push_str(&format!(" {:>10}", c.title().to_uppercase()));
    }
    writeln!(out, "{head}   FUNCTION")?;
    let blank: String = cols.iter().map(|_| format!(" {:>10}", "")).collect();
    // A node to write (node, lead before its name, prefix of its
    // descendants), or a separator line (`Err(prefix)`).
    let mut stack: Vec<Result<(u32, String, String), String>> = tree
        .roots
        .iter()
        .rev()
        .map(|&r| Ok((r, String::new(), String::new())))
        .collect();
    while let Some(item) = stack.pop() {
        let (n, lead, cont) = match item {
            Ok(node) => node,
            Err(prefix) => {
                writeln!(out, "{blank} : {prefix}")?;
                continue;
            }
        };
        let node = &tree.nodes[n as usize];
        let cells: String = cols
            .iter()
            .map(|c| format!(" {:>10}", c.cell(node)))
            .collect();
        let name = names.of(tree, n, whole);
        writeln!(out, "{cells} : {lead}({}) {name}", node.calls)?;
        let k = node.children.len();
        for (i, &c) in node.children.iter().enumerate().rev() {
            if k == 1 {
                stack.push(Ok((c, cont.clone(), cont.clone())));
                continue;
            }
            let last = i + 1 == k;
            if !last {
                stack.push(Err(format!("{cont} |")));
            }
            stack.push(Ok((
                c,
                format!("{cont} +-"),
                format!("{cont}{}", if last { "   " } else { " | " }),
            )));
        }
    }
    Ok(())
}

/// The whole graph in uftrace's shape (`graph` without FUNC).
pub fn write_text_uftrace(out: &mut dyn Write, trace: &Trace, g: &Graph) -> io::Result<()> {
    writeln!(
        out,
        "# Function Call Graph for '{}' (session: {})",
        super::names::module_file(&trace.info.program),
        session_text(trace)
    )?;
    writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
    write_tree_uftrace(out, &g.tree, &Names::new(g, trace), true)
}

/// The backtraces and calling graph of a function in uftrace's shape.
pub fn write_focus_text_uftrace(
    out: &mut dyn Write,
    trace: &Trace,
    g: &Graph,
    what: &str,
    focus: &Focus,
) -> io::Result<()> {
    let names = Names::new(g, trace);
    let t = &g.tree;
    writeln!(
        out,
        "# Function Call Graph for '{what}' (session: {})",
        session_text(trace)
    )?;
    writeln!(out, "=============== BACKTRACE ===============")?;
    for (i, b) in focus.backtraces.iter().enumerate() {
        let last = &t.nodes[*b.chain.last().unwrap() as usize];
        writeln!(
            out,
            " backtrace #{i}: hit {}, time {}",
            last.calls,
            duration(last.total_ns)
        )?;
        for (level, &n) in b.chain.iter().enumerate() {
            writeln!(out, "   [{level}] {}", names.of(t, n, true))?;
        }
        writeln!(out)?;
    }
    writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
    write_tree_uftrace(out, &focus.below, &names, false)
}

/// The trace's sessions, as `graph`'s header names them: their numbers.
fn session_text(trace: &Trace) -> String {
    let ids: Vec<String> = trace.sessions.keys().map(|k| k.to_string()).collect();
    ids.join(",")
}

fn command_line(trace: &Trace) -> String {
    if trace.info.args.is_empty() {
        trace.info.program.clone()
    } else {
        trace.info.args.join(" ")
    }
}

// ------------------------------------------------------------------ JSON

#[derive(Serialize)]
struct JsonNode<'a> {
    id: u32,
    parent: Option<u32>,
    depth: usize,
    /// The function's name, or the program's (task's) for a root.
    name: String,
    symbol: Option<&'a str>,
    module: Option<&'a str>,
    calls: u64,
    total_ns: u64,
    self_ns: Option<u64>,
    per_call: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
}

fn json_nodes<'a>(tree: &Tree, names: &Names<'a>, whole: bool) -> Vec<JsonNode<'a>> {
    let g = names.graph;
    let root_tid: HashMap<u32, u32> = g
        .tree
        .roots
        .iter()
        .zip(&g.root_tasks)
        .filter_map(|(&r, t)| Some((r, t.as_ref()?.tid)))
        .collect();
    tree.preorder()
        .into_iter()
        .map(|(n, depth)| {
            let node = &tree.nodes[n as usize];
            let f = (node.func != NONE).then(|| &g.functions.list[node.func as usize]);
            JsonNode {
                id: n,
                parent: (node.parent != NONE).then_some(node.parent),
                depth,
                name: names.of(tree, n, whole),
                symbol: f.map(|f| f.symbol.as_str()),
                module: f.map(|f| f.module.as_str()),
                calls: node.calls,
                total_ns: node.total_ns,
                self_ns: f.map(|_| node.self_ns),
                per_call: tree.per_call(n),
                tid: if whole {
                    root_tid.get(&n).copied()
                } else {
                    None
                },
            }
        })
        .collect()
}

#[derive(Serialize)]
struct JsonGraph<'a> {
    program: &'a str,
    args: &'a [String],
    nodes: Vec<JsonNode<'a>>,
    lost_events: u64,
}

#[derive(Serialize)]
struct JsonLevel<'a> {
    name: String,
    symbol: &'a str,
    module: &'a str,
    calls: u64,
}

#[derive(Serialize)]
struct JsonBacktrace<'a> {
    calls: u64,
    total_ns: u64,
    self_ns: u64,
    /// Outermost first; the last is the function.
    chain: Vec<JsonLevel<'a>>,
}

#[derive(Serialize)]
struct JsonFocus<'a> {
    program: &'a str,
    args: &'a [String],
    function: &'a str,
    backtraces: Vec<JsonBacktrace<'a>>,
    nodes: Vec<JsonNode<'a>>,
    lost_events: u64,
}

/// The whole graph as JSON: `{"program", "args", "nodes": [...],
/// "lost_events"}`, nodes in depth-first order, each `{"id", "parent",
/// "depth", "name", "symbol", "module", "calls", "total_ns", "self_ns",
/// "per_call"}` (a root: the program, `symbol`/`module`/`self_ns`/
/// `per_call` null, `calls` the tasks merged into it, `tid` with
/// `--per-task`).
pub fn write_json(out: &mut dyn Write, trace: &Trace, g: &Graph) -> io::Result<()> {
    let names = Names::new(g, trace);
    let doc = JsonGraph {
        program: &trace.info.program,
        args: &trace.info.args,
        nodes: json_nodes(&g.tree, &names, true),
        lost_events: trace.info.lost_events.max(g.lost_in_streams),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// A function's backtraces and calling graph as JSON: `{"program",
/// "args", "function", "backtraces": [{"calls", "total_ns", "self_ns",
/// "chain": [{"name", "symbol", "module", "calls"}]}], "nodes": [...],
/// "lost_events"}` (nodes as [`write_json`]'s, rooted at the function).
pub fn write_focus_json(
    out: &mut dyn Write,
    trace: &Trace,
    g: &Graph,
    what: &str,
    focus: &Focus,
) -> io::Result<()> {
    let names = Names::new(g, trace);
    let t = &g.tree;
    let doc = JsonFocus {
        program: &trace.info.program,
        args: &trace.info.args,
        function: what,
        backtraces: focus
            .backtraces
            .iter()
            .map(|b| {
                let last = &t.nodes[*b.chain.last().unwrap() as usize];
                JsonBacktrace {
                    calls: last.calls,
                    total_ns: last.total_ns,
                    self_ns: last.self_ns,
                    chain: b
                        .chain
                        .iter()
                        .map(|&n| {
                            let node = &t.nodes[n as usize];
                            let f = &g.functions.list[node.func as usize];
                            JsonLevel {
                                name: names.of(t, n, true),
                                symbol: &f.symbol,
                                module: &f.module,
                                calls: node.calls,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
        nodes: json_nodes(&focus.below, &names, false),
        lost_events: trace.info.lost_events.max(g.lost_in_streams),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

// ------------------------------------------------------------ DOT, Mermaid

/// A graph drawing: nodes with labels, edges with labels.
struct Drawing {
    /// `(id, label lines, highlighted)`.
    nodes: Vec<(String, Vec<String>, bool)>,
    /// `(from, to, label lines)`.
    edges: Vec<(String, String, Vec<String>)>,
}

fn node_lines(tree: &Tree, n: u32, name: String) -> Vec<String> {
    let node = &tree.nodes[n as usize];
    if node.func == NONE {
        return vec![
            name,
            format!("total {}", duration(node.total_ns).trim_start()),
        ];
    }
    vec![
        name,
        format!(
            "{} call{}, total {}",
            node.calls,
            if node.calls == 1 { "" } else { "s" },
            duration(node.total_ns).trim_start()
        ),
        format!("self {}", duration(node.self_ns).trim_start()),
    ]
}

fn edge_lines(tree: &Tree, n: u32) -> Vec<String> {
    let node = &tree.nodes[n as usize];
    let mut l = vec![format!("{}", node.calls)];
    if let Some(r) = tree.per_call(n) {
        l[0] = format!("{} ({} per call)", node.calls, ratio(r));
    }
    l
}

/// Adds the nodes of `tree` for which `keep` holds (with their parents
/// kept too) to `d`, ids prefixed with `prefix`.
fn draw(
    d: &mut Drawing,
    tree: &Tree,
    names: &Names,
    whole: bool,
    prefix: &str,
    keep: &dyn Fn(u32) -> bool,
    highlight: &dyn Fn(u32) -> bool,
) {
    for (n, _) in tree.preorder() {
        if !keep(n) {
            continue;
        }
        let id = format!("{prefix}{n}");
        d.nodes.push((
            id.clone(),
            node_lines(tree, n, names.of(tree, n, whole)),
            highlight(n),
        ));
        let p = tree.nodes[n as usize].parent;
        if p != NONE {
            d.edges
                .push((format!("{prefix}{p}"), id, edge_lines(tree, n)));
        }
    }
}

fn whole_drawing(trace: &Trace, g: &Graph) -> Drawing {
    let names = Names::new(g, trace);
    let mut d = Drawing {
        nodes: Vec::new(),
        edges: Vec::new(),
    };
    draw(&mut d, &g.tree, &names, true, "n", &|_| true, &|_| false);
    d
}

/// The backtraces as a tree of call paths (the paths that lead to a call
/// of the function, the calls of the function highlighted), then the
/// graph below the function.
fn focus_drawing(trace: &Trace, g: &Graph, focus: &Focus) -> Drawing {
    let names = Names::new(g, trace);
    let t = &g.tree;
    let mut on_chain = vec![false; t.nodes.len()];
    let mut hit = vec![false; t.nodes.len()];
    for b in &focus.backtraces {
        hit[*b.chain.last().unwrap() as usize] = true;
        for &n in &b.chain {
            on_chain[n as usize] = true;
        }
    }
    for &r in &t.roots {
        if t.nodes[r as usize]
            .children
            .iter()
            .any(|&c| on_chain[c as usize])
        {
            on_chain[r as usize] = true;
        }
    }
    let mut d = Drawing {
        nodes: Vec::new(),
        edges: Vec::new(),
    };
    draw(
        &mut d,
        t,
        &names,
        true,
        "b",
        &|n| on_chain[n as usize],
        &|n| hit[n as usize],
    );
    draw(&mut d, &focus.below, &names, false, "c", &|_| true, &|n| {
        focus.below.nodes[n as usize].parent == NONE
    });
    d
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn write_dot_drawing(out: &mut dyn Write, d: &Drawing, title: &str) -> io::Result<()> {
    writeln!(out, "digraph fctrace {{")?;
    writeln!(out, "  label=\"{}\";", dot_escape(title))?;
    writeln!(out, "  labelloc=t;")?;
    writeln!(out, "  node [shape=box, fontname=\"monospace\"];")?;
    writeln!(out, "  edge [fontname=\"monospace\"];")?;
    for (id, lines, hl) in &d.nodes {
        let label: Vec<String> = lines.iter().map(|l| dot_escape(l)).collect();
        writeln!(
            out,
            "  {id} [label=\"{}\"{}];",
            label.join("\\n"),
            if *hl {
                ", style=filled, fillcolor=\"#ffd27f\""
            } else {
                ""
            }
        )?;
    }
    for (from, to, lines) in &d.edges {
        let label: Vec<String> = lines.iter().map(|l| dot_escape(l)).collect();
        writeln!(out, "  {from} -> {to} [label=\"{}\"];", label.join("\\n"))?;
    }
    writeln!(out, "}}")
}

/// Text inside a Mermaid `"..."` label: entity codes for the characters
/// Mermaid or its HTML labels would take as syntax.
fn mermaid_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '#' => o.push_str("#35;"),
            '"' => o.push_str("#quot;"),
            '<' => o.push_str("#lt;"),
            '>' => o.push_str("#gt;"),
            '&' => o.push_str("#amp;"),
            '|' => o.push_str("#124;"),
            '`' => o.push_str("#96;"),
            _ => o.push(c),
        }
    }
    o
}

fn write_mermaid_drawing(out: &mut dyn Write, d: &Drawing, title: &str) -> io::Result<()> {
    writeln!(out, "---\ntitle: \"{}\"\n---", mermaid_escape(title))?;
    writeln!(out, "flowchart TD")?;
    for (id, lines, hl) in &d.nodes {
        let label: Vec<String> = lines.iter().map(|l| mermaid_escape(l)).collect();
        writeln!(out, "  {id}[\"{}\"]", label.join("<br/>"))?;
        if *hl {
            writeln!(out, "  style {id} fill:#ffd27f")?;
        }
    }
    for (from, to, lines) in &d.edges {
        let label: Vec<String> = lines.iter().map(|l| mermaid_escape(l)).collect();
        writeln!(out, "  {from} -->|\"{}\"| {to}", label.join("<br/>"))?;
    }
    Ok(())
}

/// Which drawing language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Dot,
    Mermaid,
}

/// The whole graph as a Graphviz or Mermaid graph.
pub fn write_drawing(out: &mut dyn Write, trace: &Trace, g: &Graph, lang: Lang) -> io::Result<()> {
    let d = whole_drawing(trace, g);
    let title = format!("Call graph of {}", command_line(trace));
    match lang {
        Lang::Dot => write_dot_drawing(out, &d, &title),
        Lang::Mermaid => write_mermaid_drawing(out, &d, &title),
    }
}

/// A function's backtraces and calling graph as a Graphviz or Mermaid
/// graph.
pub fn write_focus_drawing(
    out: &mut dyn Write,
    trace: &Trace,
    g: &Graph,
    what: &str,
    focus: &Focus,
    lang: Lang,
) -> io::Result<()> {
    let d = focus_drawing(trace, g, focus);
    let title = format!("Callers and calls of {what} in {}", command_line(trace));
    match lang {
        Lang::Dot => write_dot_drawing(out, &d, &title),
        Lang::Mermaid => write_mermaid_drawing(out, &d, &title),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::{Entry, Exit};

    fn sample() -> (tempfile::TempDir, Trace) {
        // main { foo { leaf leaf } foo { leaf } parse_args { leaf } }
        // (ids of testutil's default table: 0 main, 1 parse_args, 3 leaf,
        // 4 foo)
        fake_trace(&[FakeTask::main(
            10,
            vec![
                ev(Entry, 0, 0),
                ev(Entry, 4, 10),
                ev(Entry, 3, 11),
                ev(Exit, 3, 21),
                ev(Entry, 3, 22),
                ev(Exit, 3, 32),
                ev(Exit, 4, 40),
                ev(Entry, 4, 50),
                ev(Entry, 3, 51),
                ev(Exit, 3, 56),
                ev(Exit, 4, 60),
                ev(Entry, 1, 70),
                ev(Entry, 3, 71),
                ev(Exit, 3, 72),
                ev(Exit, 1, 80),
                ev(Exit, 0, 100),
            ],
        )])
    }

    fn shape(tree: &Tree, g: &Graph) -> Vec<(usize, String, u64, u64, u64)> {
        tree.preorder()
            .into_iter()
            .map(|(n, d)| {
                let node = &tree.nodes[n as usize];
                let name = if node.func == NONE {
                    "<root>".into()
                } else {
                    g.functions.list[node.func as usize].symbol.clone()
                };
                (d, name, node.calls, node.total_ns, node.self_ns)
            })
            .collect()
    }

    #[test]
    fn calls_are_merged_by_path() {
        let (_dir, trace) = sample();
        let g = build(&trace, &Default::default(), false, "graph");
        let s = |d, n: &str, c, t, sf| (d, n.to_string(), c, t, sf);
        assert_eq!(
            shape(&g.tree, &g),
            vec![
                (0, "<root>".to_string(), 1, 100, 0),
                s(1, "main", 1, 100, 100 - 30 - 10 - 10),
                s(2, "_Z3fooi", 2, 40, 40 - 20 - 5),
                s(3, "leaf", 3, 25, 25),
                s(2, "parse_args", 1, 10, 9),
                s(3, "leaf", 1, 1, 1),
            ]
        );
        let foo = g.tree.nodes[g.tree.roots[0] as usize].children[0];
        let foo = g.tree.nodes[foo as usize].children[0];
        let leaf = g.tree.nodes[foo as usize].children[0];
        assert_eq!(g.tree.per_call(leaf), Some(1.5));
        assert_eq!(ratio(1.5), "1.50");
        assert_eq!(ratio(3.0), "3");
        assert_eq!(ratio(2000.0 / 2008.0), "0.996");
        assert_eq!(ratio(1.0 / 3.0), "0.33");
    }

    #[test]
    fn focus_on_a_function() {
        let (_dir, trace) = sample();
        let g = build(&trace, &Default::default(), false, "graph");
        let m = g.matching(&FuncPattern::parse("leaf").unwrap());
        let f = g.focus(m);
        let chains: Vec<(Vec<String>, u64)> = f
            .backtraces
            .iter()
            .map(|b| {
                (
                    b.chain
                        .iter()
                        .map(|&n| {
                            g.functions.list[g.tree.nodes[n as usize].func as usize]
                                .symbol
                                .clone()
                        })
                        .collect(),
                    g.tree.nodes[*b.chain.last().unwrap() as usize].calls,
                )
            })
            .collect();
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            chains,
            vec![
                (v(&["main", "_Z3fooi", "leaf"]), 3),
                (v(&["main", "parse_args", "leaf"]), 1)
            ]
        );
        assert_eq!(
            shape(&f.below, &g),
            vec![(0, "leaf".to_string(), 4, 26, 26)]
        );

        let mut out = Vec::new();
        write_focus_text(&mut out, &trace, &g, "leaf", &f).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(" backtrace #0: 3 calls, total 0.025 us, self 0.025 us\n   [0] main (1 call)\n   [1] foo(int) (2 calls, 2 per call of its caller)\n   [2] leaf (3 calls, 1.50 per call of its caller)\n"), "{text}");
    }

    #[test]
    fn text_tree_branches() {
        let (_dir, trace) = sample();
        let g = build(&trace, &Default::default(), false, "graph");
        let mut out = Vec::new();
        write_text(&mut out, &trace, &g).unwrap();
        let text = String::from_utf8(out).unwrap();
        let body: Vec<&str> = text.lines().skip(3).collect();
        assert_eq!(
            body,
            vec![
                "    0.100 us                                      prog",
                "    0.100 us    0.050 us           1              main",
                "    0.040 us    0.015 us           2           2  +-foo(int)",
                "    0.025 us    0.025 us           3        1.50  | leaf",
                "    0.010 us    0.009 us           1           1  +-parse_args",
                "    0.001 us    0.001 us           1           1    leaf",
            ]
        );
    }

    #[test]
    fn escaping() {
        assert_eq!(dot_escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(
            mermaid_escape("operator<<(a#b, \"x\")|"),
            "operator#lt;#lt;(a#35;b, #quot;x#quot;)#124;"
        );
    }
}
