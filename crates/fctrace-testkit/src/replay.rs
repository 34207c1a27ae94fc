//! `fctrace replay`'s call tree, per task and thread, parsed and checked to
//! nest properly (signal markers are leaves, which [`strip_markers`] removes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One function call of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// As printed, without ` {`, `;` or ` (unwound)`: `main()`, `ns::f(int)`.
    pub label: String,
    pub unwound: bool,
    /// False for a call still open when the trace ended.
    pub closed: bool,
    pub children: Vec<Node>,
}

impl Node {
    pub fn count(&self, label: &str) -> usize {
        usize::from(self.label == label)
            + self.children.iter().map(|c| c.count(label)).sum::<usize>()
    }
    /// Depth-first search.
    pub fn find(&self, label: &str) -> Option<&Node> {
        if self.label == label {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(label))
    }
    /// Every node, with its path of ancestors' labels (outermost first).
    pub fn walk<'a>(&'a self, path: &mut Vec<&'a str>, f: &mut dyn FnMut(&'a Node, &[&'a str])) {
        f(self, path);
        path.push(&self.label);
        for c in &self.children {
            c.walk(path, f);
        }
        path.pop();
    }
}

/// The calls of one thread, in order; `roots` are the outermost calls.
#[derive(Debug, Clone, Default)]
pub struct ThreadTree {
    pub tid: u64,
    /// The task (`# task N:` header), when replay names it.
    pub task: Option<u64>,
    pub roots: Vec<Node>,
    /// Number of lines of this thread in the replay.
    pub lines: usize,
}

impl ThreadTree {
    pub fn count(&self, label: &str) -> usize {
        self.roots.iter().map(|r| r.count(label)).sum()
    }
    pub fn find(&self, label: &str) -> Option<&Node> {
        self.roots.iter().find_map(|r| r.find(label))
    }
}

/// All threads of a replay, in the order of their first line.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub threads: Vec<ThreadTree>,
}

impl Replay {
    pub fn thread(&self, tid: u64) -> Option<&ThreadTree> {
        self.threads.iter().find(|t| t.tid == tid)
    }
    /// The thread whose outermost calls include `main()`.
    pub fn main_thread(&self) -> Option<&ThreadTree> {
        self.threads
            .iter()
            .find(|t| t.roots.iter().any(|r| r.label == "main()"))
    }
    /// The one call of `main()` (an outermost call of its thread).
    pub fn main(&self) -> &Node {
        let mains: Vec<&Node> = self
            .threads
            .iter()
            .flat_map(|t| t.roots.iter())
            .filter(|r| r.label == "main()")
            .collect();
        assert_eq!(
            mains.len(),
            1,
            "expected exactly one outermost call of main(), got {}",
            mains.len()
        );
        mains[0]
    }
    pub fn count(&self, label: &str) -> usize {
        self.threads.iter().map(|t| t.count(label)).sum()
    }
    /// The same replay without its signal markers ([`strip_markers`]).
    pub fn without_markers(&self) -> Replay {
        Replay {
            threads: self
                .threads
                .iter()
                .map(|t| ThreadTree {
                    roots: strip_markers(&t.roots),
                    ..t.clone()
                })
                .collect(),
        }
    }
}

/// Whether a node's label is a marker line of the replay, not a call:
/// `/* signal SIGUSR1 */` (or `/* signal 34 */` for a signal without a
/// standard name).
pub fn is_marker(label: &str) -> bool {
    label.starts_with("/*")
}

/// The calls of `nodes`, without the marker leaves.
pub fn strip_markers(nodes: &[Node]) -> Vec<Node> {
    project(nodes, &|l| !is_marker(l))
}

/// One line of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LineKind {
    Open(String),
    Close(String),
    Leaf(String),
    Marker(String),
}

/// What a line says besides its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Marks {
    /// ` (unwound)`: left by longjmp or an exception.
    unwound: bool,
    /// ` (not returned)`: still running when the process ended (killed,
    /// exit() deep down): no duration.
    not_returned: bool,
    /// ` (entry not recorded)`: the exit of a call entered before the task's
    /// trace begins (a fork child returning from `fork`); ` (entry not in
    /// history)` too (a flight recorder's snapshot).
    entry_not_recorded: bool,
}

/// One line of the replay's call tree, split:
/// `  0.210 us [ 4321] |     strtol();` has the duration `0.210 us`, the
/// tid 4321, the depth 2 (two spaces per level, or a `(depth N) ` prefix
/// beyond the indentation cap) and the text `strtol();`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLine<'a> {
    pub duration: &'a str,
    pub tid: u64,
    pub depth: usize,
    pub text: &'a str,
}

pub fn split_replay_line(line: &str) -> Result<ReplayLine<'_>, String> {
    let open = line.find('[').ok_or("no `[tid]`")?;
    let close = open + line[open..].find(']').ok_or("no `]` after `[`")?;
    let duration = line[..open].trim();
    let tid: u64 = line[open + 1..close]
        .trim()
        .parse()
        .map_err(|_| "tid is not a number")?;
    let rest = line[close + 1..]
        .strip_prefix(" | ")
        .ok_or("no ` | ` after `[tid]`")?;
    let spaces = rest.len() - rest.trim_start_matches(' ').len();
    if spaces % 2 != 0 {
        return Err(format!("odd indentation ({spaces} spaces)"));
    }
    let mut depth = spaces / 2;
    let mut text = rest[spaces..].trim_end();
    if let Some(t) = text.strip_prefix("(depth ") {
        let (n, t) = t.split_once(") ").ok_or("bad `(depth N)` prefix")?;
        depth = n.parse().map_err(|_| "bad depth number")?;
        text = t;
    }
    Ok(ReplayLine {
        duration,
        tid,
        depth,
        text,
    })
}

/// The markers among replay lines (see [`is_marker`]), as (depth, text).
pub fn marker_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    lines
        .into_iter()
        .filter_map(|l| split_replay_line(l).ok())
        .filter(|l| is_marker(l.text))
        .map(|l| (l.depth, l.text))
        .collect()
}

/// Splits a line into (duration, tid, depth, kind, marks).
fn parse_line(line: &str) -> Result<(String, u64, usize, LineKind, Marks), String> {
    let ReplayLine {
        duration,
        tid,
        depth,
        text,
    } = split_replay_line(line)?;
    let duration = duration.to_string();
    let mut text = text.to_string();
    let mut marks = Marks::default();
    loop {
        if let Some(t) = text.strip_suffix(" (unwound)") {
            text = t.trim_end().to_string();
            marks.unwound = true;
        } else if let Some(t) = text.strip_suffix(" (not returned)") {
            text = t.trim_end().to_string();
            marks.not_returned = true;
        } else if let Some(t) = text
            .strip_suffix(" (entry not recorded)")
            .or_else(|| text.strip_suffix(" (entry not in history)"))
        {
            text = t.trim_end().to_string();
            marks.entry_not_recorded = true;
        } else {
            break;
        }
    }
    let kind = if text.starts_with("/*") && text.ends_with("*/") {
        // A marker (`/* signal SIGUSR1 */`): kept as a leaf labelled with
        // its text.
        LineKind::Marker(text.clone())
    } else if let Some(t) = text.strip_prefix('}') {
        let t = t.trim();
        // `} = 6; /* name */`: a return value before the comment.
        let t = match t.strip_prefix('=') {
            Some(v) => v.find("; /*").map_or(t, |i| &v[i + 1..]).trim(),
            None => t,
        };
        let name = t
            .strip_prefix("/*")
            .and_then(|t| t.strip_suffix("*/"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        LineKind::Close(name)
    } else if let Some(t) = text.strip_suffix(" {") {
        LineKind::Open(t.to_string())
    } else if let Some(t) = text.strip_suffix(';') {
        let mut t = t.trim_end().to_string();
        if let Some(u) = t.strip_suffix(" (unwound)") {
            t = u.to_string();
            marks.unwound = true;
        }
        LineKind::Leaf(t)
    } else {
        return Err(format!("neither `name {{`, `}}` nor `name;`: {text:?}"));
    };
    if let LineKind::Open(l) | LineKind::Leaf(l) = &kind {
        if l.is_empty() {
            return Err("empty function name".into());
        }
    }
    Ok((duration, tid, depth, kind, marks))
}

/// Whether the name in `} /* name */` closes the call labelled `label`.
fn closes(label: &str, name: &str) -> bool {
    name.is_empty()
        || label == name
        || label.strip_suffix("()") == Some(name)
        || label.starts_with(name)
}

/// Parses the whole output of `replay`, checking per thread that every line
/// is at the depth of the calls open at that point, that every `}` closes
/// the innermost open call (by name), and that open lines have no duration
/// while leaves and closes have one (except ` (not returned)` ones). Calls
/// still open at the end of the trace, or closed as ` (not returned)`, are
/// kept with `closed: false`.
pub fn parse_replay(text: &str) -> Result<Replay, String> {
    struct Open {
        node: Node,
    }
    // Trees are keyed by task (the `# task N:` header before them) and
    // tid: an exec'd program is a new task with the same tid.
    let mut stacks: BTreeMap<(u64, u64), Vec<Open>> = BTreeMap::new();
    let mut trees: BTreeMap<(u64, u64), ThreadTree> = BTreeMap::new();
    let mut order: Vec<(u64, u64)> = Vec::new();
    // The task of each tid: set by its `# task N: pid P, tid T` header
    // (tasks are interleaved by time; an exec'd task keeps its tid).
    let mut task_of: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if let Some(rest) = line.strip_prefix("# task ") {
            let n = rest.split(':').next().and_then(|n| n.trim().parse().ok());
            let tid = rest
                .split_once(", tid ")
                .and_then(|(_, t)| t.split(' ').next())
                .and_then(|t| t.parse().ok());
            if let (Some(n), Some(tid)) = (n, tid) {
                task_of.insert(tid, n);
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (duration, tid, depth, kind, marks) =
            parse_line(line).map_err(|e| format!("line {lineno}: {e}: {line:?}"))?;
        let task = task_of.get(&tid).copied().unwrap_or(u64::MAX);
        let key = (task, tid);
        let stack = stacks.entry(key).or_default();
        let tree = trees.entry(key).or_insert_with(|| {
            order.push(key);
            ThreadTree {
                tid,
                task: (task != u64::MAX).then_some(task),
                ..Default::default()
            }
        });
        tree.lines += 1;
        let attach =
            |stack: &mut Vec<Open>, tree: &mut ThreadTree, node: Node| match stack.last_mut() {
                Some(parent) => parent.node.children.push(node),
                None => tree.roots.push(node),
            };
        match kind {
            LineKind::Open(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label} {{` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                if !duration.is_empty() {
                    return Err(format!(
                        "line {lineno}: an opening line has a duration: {line:?}"
                    ));
                }
                stack.push(Open {
                    node: Node {
                        label,
                        unwound: false,
                        closed: false,
                        children: Vec::new(),
                    },
                });
            }
            LineKind::Leaf(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label};` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                if duration.is_empty() && !marks.not_returned {
                    return Err(format!("line {lineno}: a leaf has no duration: {line:?}"));
                }
                attach(
                    stack,
                    tree,
                    Node {
                        label,
                        unwound: marks.unwound,
                        closed: !marks.not_returned,
                        children: Vec::new(),
                    },
                );
            }
            LineKind::Marker(label) => {
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `{label}` at depth {depth}, but {} calls are open: {line:?}",
                        stack.len()
                    ));
                }
                attach(
                    stack,
                    tree,
                    Node {
                        label,
                        unwound: false,
                        closed: true,
                        children: Vec::new(),
                    },
                );
            }
            LineKind::Close(_) if marks.entry_not_recorded => {
                if !stack.is_empty() || depth != 0 {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `(entry not recorded)` inside a call: {line:?}"
                    ));
                }
            }
            LineKind::Close(name) => {
                let Some(mut top) = stack.pop() else {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}}` with no open call: {line:?}"
                    ));
                };
                if depth != stack.len() {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}}` of {} at depth {depth}, expected {}: {line:?}",
                        top.node.label,
                        stack.len()
                    ));
                }
                if !closes(&top.node.label, &name) {
                    return Err(format!(
                        "line {lineno}: tid {tid}: `}} /* {name} */` closes {}: {line:?}",
                        top.node.label
                    ));
                }
                if duration.is_empty() && !marks.not_returned {
                    return Err(format!(
                        "line {lineno}: a closing line has no duration: {line:?}"
                    ));
                }
                top.node.closed = !marks.not_returned;
                top.node.unwound = marks.unwound;
                attach(stack, tree, top.node);
            }
        }
    }
    // Calls still open at the end: attach them, innermost first.
    for (key, mut stack) in stacks {
        let tree = trees.get_mut(&key).unwrap();
        while let Some(top) = stack.pop() {
            match stack.last_mut() {
                Some(parent) => parent.node.children.push(top.node),
                None => tree.roots.push(top.node),
            }
        }
    }
    Ok(Replay {
        threads: order
            .into_iter()
            .map(|t| trees.remove(&t).unwrap())
            .collect(),
    })
}

/// Keeps the calls whose label satisfies `keep`; the kept descendants of a
/// dropped call take its place, in order.
pub fn project(nodes: &[Node], keep: &dyn Fn(&str) -> bool) -> Vec<Node> {
    let mut out = Vec::new();
    for n in nodes {
        let children = project(&n.children, keep);
        if keep(&n.label) {
            out.push(Node {
                label: n.label.clone(),
                unwound: n.unwound,
                closed: n.closed,
                children,
            });
        } else {
            out.extend(children);
        }
    }
    out
}

/// Asserts every call of `nodes`, and of their subtrees, was closed
/// (returned or unwound).
#[track_caller]
pub fn assert_all_closed(nodes: &[Node], ctx: &str) {
    for n in nodes {
        n.walk(&mut Vec::new(), &mut |n, path| {
            assert!(n.closed, "{ctx}: {} left open under {path:?}", n.label);
        });
    }
}

/// The tree as an outline: one call a line, two spaces per depth, ` (unwound)`
/// after unwound calls, ` (open)` after calls not closed.
pub fn outline(nodes: &[Node]) -> String {
    fn go(n: &Node, depth: usize, out: &mut String) {
        let _ = write!(out, "{}{}", "  ".repeat(depth), n.label);
        if n.unwound {
            out.push_str(" (unwound)");
        }
        if !n.closed {
            out.push_str(" (open)");
        }
        out.push('\n');
        for c in &n.children {
            go(c, depth + 1, out);
        }
    }
    let mut s = String::new();
    for n in nodes {
        go(n, 0, &mut s);
    }
    s
}

/// An outline written in a test: strips the common indentation and blank
/// lines, so it can be written as an indented raw string.
pub fn expected_outline(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let indent = lines
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut s = String::new();
    for l in lines {
        s.push_str(l[indent..].trim_end());
        s.push('\n');
    }
    s
}

/// Asserts two outlines are equal, showing both and the first difference.
#[track_caller]
pub fn assert_outline_eq(actual: &str, expected: &str, context: &str) {
    if actual == expected {
        return;
    }
    let a: Vec<&str> = actual.lines().collect();
    let e: Vec<&str> = expected.lines().collect();
    let first = a
        .iter()
        .zip(e.iter())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(e.len()));
    panic!(
        "{context}: call tree differs from the expected one at line {} (actual {:?}, expected {:?})\n\
         --- expected ---\n{expected}--- actual ---\n{actual}",
        first + 1,
        a.get(first),
        e.get(first)
    );
}
