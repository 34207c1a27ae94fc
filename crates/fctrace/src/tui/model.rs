//! What the TUI shows, built in one streaming pass over a trace: per task
//! a calling-context tree (the task's calls merged by call path, each node
//! with its calls, total and self time), the same tree merged over all the
//! tasks, and per-function statistics derived from a tree.
//!
//! The trees are those of `fctrace graph` ([`fctrace_analysis::graph`]: one
//! root per task, and their merge), laid out for the screens: nodes in
//! depth-first order, with their depth, children sorted. Memory grows
//! with the number of distinct call paths (per task) and of functions,
//! never with the number of calls.
//!
//! With several sessions (programs exec'd), each session also has the
//! tree of its tasks merged ([`Session`]); each function keeps where it
//! is defined ([`Origin`]: its module and address, for the `addr` field
//! and the source line of `O`).
//!
//! Times follow `fctrace report`: a call counts in `calls` when it is
//! entered; its duration counts in `total` and its duration less that of
//! its children with an exit in `self` when it has an exit (`Exit` or
//! `Unwind`), not when it never returned in the trace. A function's total
//! (in [`Tree::functions`]) leaves out its calls nested in a call of the
//! same function (recursion), as the report does: the nodes that have an
//! ancestor of the same function.

use fctrace_analysis::graph;
use fctrace_format::store::{StoreError, Trace};
use fctrace_format::symtab::FuncKind;
use std::collections::HashMap;

/// The virtual root of a tree (its children are the outermost calls).
pub const ROOT: u32 = 0;
/// The `func` of the root.
pub const NO_FUNC: u32 = u32::MAX;

/// One call path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Index in [`Model::names`]; [`NO_FUNC`] for the root.
    pub func: u32,
    pub parent: u32,
    /// 0 for the root, 1 for the outermost calls.
    pub depth: u32,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// Calls that returned (the divisor of the averages), the shortest
    /// and longest of them, and their least and largest self time.
    pub returned: u64,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub self_min_ns: Option<u64>,
    pub self_max_ns: Option<u64>,
    /// Sorted by total time (then calls, then function), descending, once
    /// the tree is complete ([`Tree::sort`]).
    pub children: Vec<u32>,
}

/// A calling-context tree: node 0 is [`ROOT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

impl Default for Tree {
    fn default() -> Tree {
        Tree {
            nodes: vec![Node {
                func: NO_FUNC,
                parent: ROOT,
                ..Node::default()
            }],
        }
    }
}

/// A function's statistics over one tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncRow {
    pub func: u32,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// Calls that returned, the sum of their times (recursive ones each
    /// counted), the shortest and longest, and their least and largest
    /// self time (`tui --report -f`'s averages and extremes).
    pub returned: u64,
    pub sum_ns: u64,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub self_min_ns: Option<u64>,
    pub self_max_ns: Option<u64>,
}

impl Node {
    /// Adds the calls of `from` (the same path elsewhere) to this node.
    fn add(&mut self, from: &Node) {
        self.calls += from.calls;
        self.total_ns = self.total_ns.saturating_add(from.total_ns);
        self.self_ns = self.self_ns.saturating_add(from.self_ns);
        self.returned += from.returned;
        let low = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).min();
        let high = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).max();
        self.min_ns = low(self.min_ns, from.min_ns);
        self.max_ns = high(self.max_ns, from.max_ns);
        self.self_min_ns = low(self.self_min_ns, from.self_min_ns);
        self.self_max_ns = high(self.self_max_ns, from.self_max_ns);
    }
}

impl Tree {
    /// The trees `parts` merged path by path, sorted.
    pub fn merge(parts: &[&Tree]) -> Tree {
        let mut tree = Tree::default();
        let mut index: HashMap<(u32, u32), u32> = HashMap::new();
        for part in parts {
            // (node there, node here)
            let mut todo = vec![(ROOT, ROOT)];
            while let Some((n, here)) = todo.pop() {
                for &c in &part.nodes[n as usize].children {
                    let from = &part.nodes[c as usize];
                    let next = tree.nodes.len() as u32;
                    let at = *index.entry((here, from.func)).or_insert(next);
                    if at == next {
                        tree.nodes.push(Node {
                            func: from.func,
                            parent: here,
                            depth: tree.nodes[here as usize].depth + 1,
                            ..Node::default()
                        });
                        tree.nodes[here as usize].children.push(at);
                    }
                    tree.nodes[at as usize].add(from);
                    todo.push((c, at));
                }
            }
        }
        tree.sort();
        tree
    }

    /// The subtree of `root` in a tree of [`graph`], `root` as [`ROOT`],
    /// sorted.
    fn from_graph(g: &graph::Tree, root: u32) -> Tree {
        let mut tree = Tree::default();
        // (node there, its parent here)
        let mut todo: Vec<(u32, u32)> = g.nodes[root as usize]
            .children
            .iter()
            .rev()
            .map(|&c| (c, ROOT))
            .collect();
        while let Some((n, parent)) = todo.pop() {
            let from = &g.nodes[n as usize];
            let here = tree.nodes.len() as u32;
            tree.nodes.push(Node {
                func: from.func,
                parent,
                depth: tree.nodes[parent as usize].depth + 1,
                calls: from.calls,
                total_ns: from.total_ns,
                self_ns: from.self_ns,
                returned: from.returned,
                min_ns: from.min_ns,
                max_ns: from.max_ns,
                self_min_ns: from.self_min_ns,
                self_max_ns: from.self_max_ns,
                children: Vec::with_capacity(from.children.len()),
            });
            tree.nodes[parent as usize].children.push(here);
            todo.extend(from.children.iter().rev().map(|&c| (c, here)));
        }
        tree.sort();
        tree
    }

    /// Sorts every node's children: by total time, calls, then function
    /// index, descending for the numbers.
    pub fn sort(&mut self) {
        for i in 0..self.nodes.len() {
            let mut kids = std::mem::take(&mut self.nodes[i].children);
            let nodes = &self.nodes;
            kids.sort_by(|&a, &b| {
                let (a, b) = (&nodes[a as usize], &nodes[b as usize]);
                b.total_ns
                    .cmp(&a.total_ns)
                    .then(b.calls.cmp(&a.calls))
                    .then(a.func.cmp(&b.func))
            });
            self.nodes[i].children = kids;
        }
    }

    /// The calls of the outermost level, their total and self time.
    pub fn top(&self) -> (u64, u64) {
        let root = &self.nodes[ROOT as usize];
        root.children.iter().fold((0, 0), |(c, t), &k| {
            let n = &self.nodes[k as usize];
            (c + n.calls, t.saturating_add(n.total_ns))
        })
    }

    /// Per-function statistics of the tree, one row per function that has
    /// a node, in function order.
    pub fn functions(&self, nfuncs: usize) -> Vec<FuncRow> {
        let mut rows: Vec<FuncRow> = (0..nfuncs as u32)
            .map(|func| FuncRow {
                func,
                ..FuncRow::default()
            })
            .collect();
        let mut seen = vec![false; nfuncs];
        // Open nodes per function on the current path (recursion).
        let mut open = vec![0u32; nfuncs];
        // Depth-first, with an exit marker: (node, leaving)
        let mut todo = vec![(ROOT, false)];
        while let Some((i, leaving)) = todo.pop() {
            let n = &self.nodes[i as usize];
            let f = n.func as usize;
            if leaving {
                open[f] -= 1;
                continue;
            }
            if i != ROOT && f < nfuncs {
                let r = &mut rows[f];
                seen[f] = true;
                r.calls += n.calls;
                r.self_ns = r.self_ns.saturating_add(n.self_ns);
                r.returned += n.returned;
                r.sum_ns = r.sum_ns.saturating_add(n.total_ns);
                let low = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).min();
                let high = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).max();
                r.min_ns = low(r.min_ns, n.min_ns);
                r.max_ns = high(r.max_ns, n.max_ns);
                r.self_min_ns = low(r.self_min_ns, n.self_min_ns);
                r.self_max_ns = high(r.self_max_ns, n.self_max_ns);
                if open[f] == 0 {
                    r.total_ns = r.total_ns.saturating_add(n.total_ns);
                }
                open[f] += 1;
                todo.push((i, true));
            }
            todo.extend(n.children.iter().rev().map(|&c| (c, false)));
        }
        rows.retain(|r| seen[r.func as usize]);
        rows
    }
}

/// A task as the TUI lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// The session (program) its function ids refer to.
    pub session: u32,
    pub tree: Tree,
}

/// A session of the trace: a program started or exec'd, with the tasks
/// that ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub id: u32,
    /// The program's path.
    pub exe: String,
    pub pid: u32,
    /// Its tasks (indices in [`Model::tasks`]).
    pub tasks: Vec<usize>,
    /// Their trees merged; `None` when the trace has this session only
    /// (its tree is then [`Model::all`]).
    pub tree: Option<Tree>,
}

/// Where a function is defined: its module's file, its address there and
/// its kind (the source line is read from the module's DWARF when asked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub module: String,
    pub addr: u64,
    /// Its size in bytes (0: unknown, an import).
    pub size: u64,
    pub kind: FuncKind,
}

/// Everything the TUI shows.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Shown names of the functions (`name`, or `name@module` where two
    /// modules have one name).
    pub names: Vec<String>,
    /// Per function: where it is defined (`None`: a system call, or not
    /// in the trace's symbol tables).
    pub origins: Vec<Option<Origin>>,
    /// The sessions of the trace, by id.
    pub sessions: Vec<Session>,
    /// The tasks read (in the trace's order; filtered out ones are not).
    pub tasks: Vec<Task>,
    /// The tasks' trees merged.
    pub all: Tree,
    /// Events read.
    pub events: u64,
    /// Sum of the counts of the `Lost` records met.
    pub lost: u64,
}

impl Model {
    /// Nodes of all the trees (a measure of the model's size).
    pub fn nodes(&self) -> usize {
        let sessions: usize = self
            .sessions
            .iter()
            .filter_map(|s| s.tree.as_ref())
            .map(|t| t.nodes.len())
            .sum();
        self.all.nodes.len()
            + self.tasks.iter().map(|t| t.tree.nodes.len()).sum::<usize>()
            + sessions
    }
}

/// The model was not finished: the user asked to stop.
#[derive(Debug)]
pub struct Cancelled;

/// Builds the model of `trace`'s calls that `options`' display filters
/// show, in one pass. `progress(events read)` is called every 2^18 events
/// or so; when it returns false, loading stops. The read errors of tasks
/// whose events could not all be read are returned with the model (their
/// readable part is in it).
pub fn build(
    trace: &Trace,
    options: &fctrace_options::Options,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<(Model, Vec<StoreError>), Cancelled> {
    let g = graph::build_with(trace, options, true, None, progress);
    if g.stopped {
        return Err(Cancelled);
    }
    let mut model = Model {
        events: g.events,
        lost: g.lost_in_streams,
        ..Model::default()
    };
    for (&root, task) in g.tree.roots.iter().zip(&g.root_tasks) {
        let Some(task) = task else { continue };
        model.tasks.push(Task {
            tid: task.tid,
            pid: task.pid,
            comm: task.comm.clone(),
            session: task.session,
            tree: Tree::from_graph(&g.tree, root),
        });
    }
    let all = g.tree.merged();
    model.all = Tree::from_graph(&all, all.roots[0]);
    let ambiguous = g.functions.ambiguous();
    model.names = (0..g.functions.list.len())
        .map(|i| g.functions.shown_name(i, &ambiguous))
        .collect();
    model.origins = g
        .functions
        .origins()
        .into_iter()
        .map(|o| {
            let (session, id) = o?;
            let table = trace.sessions.get(&session)?;
            let f = table.function(id)?;
            Some(Origin {
                module: table.module(f.module)?.path.clone(),
                addr: f.addr,
                size: if f.kind == FuncKind::Function {
                    f.size
                } else {
                    0
                },
                kind: f.kind,
            })
        })
        .collect();
    model.sessions = sessions(trace, &model.tasks);
    Ok((model, g.errors))
}

/// The sessions of `trace` with their tasks among `tasks` and, when
/// there are several, the merged tree of each.
fn sessions(trace: &Trace, tasks: &[Task]) -> Vec<Session> {
    let several = trace.sessions.len() > 1;
    let mut ids: Vec<u32> = trace.sessions.keys().copied().collect();
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| {
            let table = &trace.sessions[&id];
            let mine: Vec<usize> = (0..tasks.len())
                .filter(|&t| tasks[t].session == id)
                .collect();
            let tree = several.then(|| {
                let trees: Vec<&Tree> = mine.iter().map(|&t| &tasks[t].tree).collect();
                Tree::merge(&trees)
            });
            Session {
                id,
                exe: table.exe.clone(),
                pid: table.pid,
                tasks: mine,
                tree,
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fctrace_analysis::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::*;

    /// main(0..100) { parse_args(10..40) { leaf(15..25) } parse_args(50..60)
    /// leaf(70..75) }, and a thread: leaf(5..9).
    pub fn sample() -> Model {
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(
                10,
                vec![
                    ev(Entry, 0, 0),
                    ev(Entry, 1, 10),
                    ev(Entry, 3, 15),
                    ev(Exit, 3, 25),
                    ev(Exit, 1, 40),
                    ev(Entry, 1, 50),
                    ev(Exit, 1, 60),
                    ev(Entry, 3, 70),
                    ev(Exit, 3, 75),
                    ev(Exit, 0, 100),
                ],
            ),
            FakeTask::thread(11, 10, vec![ev(Entry, 3, 5), ev(Exit, 3, 9)]),
        ]);
        build(&trace, &Default::default(), &mut |_| true).unwrap().0
    }

    fn path(m: &Model, tree: &Tree, names: &[&str]) -> Node {
        let mut at = ROOT;
        for name in names {
            at = *tree.nodes[at as usize]
                .children
                .iter()
                .find(|&&c| m.names[tree.nodes[c as usize].func as usize] == *name)
                .unwrap_or_else(|| panic!("no {name} under {at}"));
        }
        tree.nodes[at as usize].clone()
    }

    #[test]
    fn calls_merge_by_path() {
        let m = sample();
        assert_eq!(m.tasks.len(), 2);
        assert_eq!(m.events, 12);
        let main = path(&m, &m.all, &["main"]);
        assert_eq!((main.calls, main.total_ns, main.self_ns), (1, 100, 55));
        let pa = path(&m, &m.all, &["main", "parse_args"]);
        assert_eq!((pa.calls, pa.total_ns, pa.self_ns), (2, 40, 30));
        let leaf = path(&m, &m.all, &["main", "parse_args", "leaf"]);
        assert_eq!((leaf.calls, leaf.total_ns), (1, 10));
        let leaf2 = path(&m, &m.all, &["main", "leaf"]);
        assert_eq!((leaf2.calls, leaf2.total_ns), (1, 5));
        // The thread's leaf is an outermost call of its own.
        let top = path(&m, &m.all, &["leaf"]);
        assert_eq!((top.calls, top.total_ns), (1, 4));
        // Children by total time: parse_args (40) before leaf (5).
        let kids: Vec<&str> = main
            .children
            .iter()
            .map(|&c| m.names[m.all.nodes[c as usize].func as usize].as_str())
            .collect();
        assert_eq!(kids, ["parse_args", "leaf"]);
        // Per task.
        assert_eq!(m.tasks[1].tree.nodes.len(), 2);
    }

    #[test]
    fn function_rows_count_recursion_once_in_total() {
        // main(0..100) { leaf(10..50) { leaf(20..30) } } : leaf's total is
        // 40 (the inner call is inside the outer), self 30 + 10.
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            10,
            vec![
                ev(Entry, 0, 0),
                ev(Entry, 3, 10),
                ev(Entry, 3, 20),
                ev(Exit, 3, 30),
                ev(Exit, 3, 50),
                ev(Exit, 0, 100),
            ],
        )]);
        let (m, errors) = build(&trace, &Default::default(), &mut |_| true).unwrap();
        assert!(errors.is_empty());
        let rows = m.all.functions(m.names.len());
        let leaf = rows.iter().find(|r| m.names[r.func as usize] == "leaf");
        assert_eq!(
            leaf.map(|r| (r.calls, r.total_ns, r.self_ns)),
            Some((2, 40, 40))
        );
        let main = rows.iter().find(|r| m.names[r.func as usize] == "main");
        assert_eq!(
            main.map(|r| (r.calls, r.total_ns, r.self_ns)),
            Some((1, 100, 60))
        );
    }

    #[test]
    fn not_returned_calls_count_without_time_as_in_the_report() {
        // main never returns; leaf(10..20) does.
        let (_dir, trace) = fake_trace(&[FakeTask::main(
            10,
            vec![ev(Entry, 0, 0), ev(Entry, 3, 10), ev(Exit, 3, 20)],
        )]);
        let (m, _) = build(&trace, &Default::default(), &mut |_| true).unwrap();
        let report = fctrace_analysis::report::aggregate(&trace);
        let rows = m.all.functions(m.names.len());
        for f in &report.functions {
            let r = rows.iter().find(|r| m.names[r.func as usize] == f.name);
            assert_eq!(
                r.map(|r| (r.calls, r.total_ns, r.self_ns)),
                Some((f.calls, f.total_ns, f.self_ns)),
                "{}",
                f.name
            );
        }
    }

    /// The model's function rows against `report`'s statistics of the
    /// same trace: calls, total and self time of every function.
    fn same_as_report(trace: &Trace, options: &fctrace_options::Options) {
        let (m, _) = build(trace, options, &mut |_| true).unwrap();
        let report = fctrace_analysis::report::aggregate_with(trace, options);
        let rows = m.all.functions(m.names.len());
        let shown: Vec<(String, u64, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    m.names[r.func as usize].clone(),
                    r.calls,
                    r.total_ns,
                    r.self_ns,
                )
            })
            .collect();
        let mut expected: Vec<(String, u64, u64, u64)> = report
            .functions
            .iter()
            .filter(|f| f.calls > 0)
            .map(|f| (f.name.clone(), f.calls, f.total_ns, f.self_ns))
            .collect();
        let mut shown = shown;
        shown.sort();
        expected.sort();
        assert_eq!(shown, expected);
    }

    #[test]
    fn function_rows_are_the_reports() {
        // Task 10: recursion, a call whose caller unwinds past it, an exit
        // without entry, a loss, calls still open at the end. Task 11: a
        // thread with its own recursion.
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(
                10,
                vec![
                    ev(Entry, 0, 0),
                    ev(Entry, 1, 10),
                    ev(Entry, 1, 12),
                    ev(Entry, 3, 14),
                    ev(Exit, 3, 20),
                    ev(Exit, 1, 30),
                    ev(Exit, 1, 40),
                    ev(Entry, 4, 41),
                    ev(Entry, 3, 42),
                    ev(Unwind, 4, 50),
                    ev(Exit, 5, 51),
                    ev(Lost, 3, 52),
                    ev(Entry, 2, 60),
                    ev(Exit, 2, 70),
                    ev(Entry, 1, 80),
                    ev(Entry, 3, 85),
                    ev(Exit, 3, 90),
                ],
            ),
            FakeTask::thread(
                11,
                10,
                vec![
                    ev(Entry, 3, 5),
                    ev(Entry, 3, 6),
                    ev(Exit, 3, 8),
                    ev(Exit, 3, 9),
                ],
            ),
        ]);
        same_as_report(&trace, &Default::default());
        let (m, _) = build(&trace, &Default::default(), &mut |_| true).unwrap();
        assert_eq!(m.lost, 3);
        // With display filters: -N parse_args, and --tid 11.
        let no_parse = fctrace_options::Options {
            notrace: vec![fctrace_options::FuncPattern::parse("parse_args").unwrap()],
            ..Default::default()
        };
        same_as_report(&trace, &no_parse);
        let (m, _) = build(&trace, &no_parse, &mut |_| true).unwrap();
        let rows = m.all.functions(m.names.len());
        assert!(rows
            .iter()
            .all(|r| m.names[r.func as usize] != "parse_args"));
        let tid = fctrace_options::Options {
            tids: vec![11],
            ..Default::default()
        };
        same_as_report(&trace, &tid);
        let (m, _) = build(&trace, &tid, &mut |_| true).unwrap();
        assert_eq!(m.tasks.len(), 1);
    }

    #[test]
    fn an_empty_trace_has_an_empty_tree() {
        let (_dir, trace) = fake_trace(&[]);
        let (m, errors) = build(&trace, &Default::default(), &mut |_| true).unwrap();
        assert!(errors.is_empty());
        assert_eq!(m.all.nodes.len(), 1);
        assert!(m.all.functions(m.names.len()).is_empty());
    }

    #[test]
    fn wide_nodes_use_the_hash_lookup() {
        // main calls 40 distinct functions twice each (ids beyond the
        // symbol table: unknown functions, each its own).
        let mut events = vec![ev(Entry, 0, 0)];
        for round in 0..2u64 {
            for f in 0..40u32 {
                let t = 1 + round * 100 + u64::from(f) * 2;
                events.push(ev(Entry, 100 + f, t));
                events.push(ev(Exit, 100 + f, t + 1));
            }
        }
        events.push(ev(Exit, 0, 1000));
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, events)]);
        let (m, _) = build(&trace, &Default::default(), &mut |_| true).unwrap();
        let main = path(&m, &m.all, &["main"]);
        assert_eq!(main.children.len(), 40);
        assert!(main
            .children
            .iter()
            .all(|&c| m.all.nodes[c as usize].calls == 2));
    }

    #[test]
    fn loading_stops_when_asked() {
        let events: Vec<_> = (0..200_000u64)
            .flat_map(|i| [ev(Entry, 3, i * 2), ev(Exit, 3, i * 2 + 1)])
            .collect();
        let (_dir, trace) = fake_trace(&[FakeTask::main(10, events)]);
        let mut asked = 0;
        let r = build(&trace, &Default::default(), &mut |_| {
            asked += 1;
            false
        });
        assert!(r.is_err());
        assert_eq!(asked, 1);
    }
}
