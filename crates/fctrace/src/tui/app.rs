//! The TUI's state and what each key does to it (no drawing: see
//! [`super::view`]).

use super::columns::{self, Col, Key};
use super::model::{FuncRow, Model, Tree, NO_FUNC, ROOT};
use fctrace_analysis::duration;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Trees up to this many nodes open fully expanded; larger ones show their
/// first [`FIRST_LEVELS`] levels.
pub const EXPAND_ALL_UP_TO: usize = 10_000;
pub const FIRST_LEVELS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The calling-context tree.
    Graph,
    /// Per-function statistics.
    Report,
    /// The task list.
    Tasks,
    /// What `fctrace info` says of the trace.
    Info,
    /// The session list (the programs started or exec'd).
    Sessions,
}

/// A column of the graph (`f`): uftrace's graph fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Total,
    TotalAvg,
    TotalMin,
    TotalMax,
    SelfTime,
    SelfAvg,
    SelfMin,
    SelfMax,
    Call,
    Addr,
}

/// Every field: its name (as `graph -f` and uftrace spell it), its
/// column header and width, and what it is.
pub const FIELDS: [(Field, &str, &str, usize, &str); 10] = [
    (Field::Total, "total", "TOTAL", 10, "total time of the path"),
    (
        Field::TotalAvg,
        "total-avg",
        "TOTAL-AVG",
        10,
        "total time per call",
    ),
    (
        Field::TotalMin,
        "total-min",
        "TOTAL-MIN",
        10,
        "the shortest call",
    ),
    (
        Field::TotalMax,
        "total-max",
        "TOTAL-MAX",
        10,
        "the longest call",
    ),
    (Field::SelfTime, "self", "SELF", 10, "self time of the path"),
    (
        Field::SelfAvg,
        "self-avg",
        "SELF-AVG",
        10,
        "self time per call",
    ),
    (
        Field::SelfMin,
        "self-min",
        "SELF-MIN",
        10,
        "the least self time",
    ),
    (
        Field::SelfMax,
        "self-max",
        "SELF-MAX",
        10,
        "the largest self time",
    ),
    (Field::Call, "call", "CALLS", 10, "calls"),
    (
        Field::Addr,
        "addr",
        "ADDR",
        14,
        "the function's address in its module",
    ),
];

/// `tui -f`'s graph fields ([`FIELDS`]' names; `+FIELD` appends to
/// [`DEFAULT_FIELDS`], `none` shows none).
pub fn parse_graph_fields(spec: &str) -> Result<Vec<Field>, String> {
    columns::parse_list(spec, &DEFAULT_FIELDS, |name| {
        FIELDS
            .iter()
            .find(|f| f.1 == name)
            .map(|f| f.0)
            .ok_or_else(|| {
                let known: Vec<&str> = FIELDS.iter().map(|f| f.1).collect();
                format!(
                    "unknown graph field `{name}` (fields: {}, or none)",
                    known.join(", ")
                )
            })
    })
}

/// The graph's fields when the TUI opens (fctrace's columns).
pub const DEFAULT_FIELDS: [Field; 3] = [Field::Total, Field::SelfTime, Field::Call];

impl Field {
    fn entry(self) -> &'static (Field, &'static str, &'static str, usize, &'static str) {
        FIELDS.iter().find(|f| f.0 == self).unwrap_or(&FIELDS[0])
    }
    pub fn name(self) -> &'static str {
        self.entry().1
    }
    pub fn header(self) -> &'static str {
        self.entry().2
    }
    pub fn width(self) -> usize {
        self.entry().3
    }
}

/// What `n`/`N` look for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Search {
    /// Function names containing the text (case-insensitive unless the
    /// text has a capital letter).
    Text(String),
    /// The calls of one function (after a jump from the report).
    Func(u32),
}

/// A scrolled list: the selected row and the first row shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub at: usize,
    pub top: usize,
}

impl Cursor {
    /// Moves by `delta` rows within `len` rows.
    fn step(&mut self, delta: isize, len: usize) {
        let to = self.at as isize + delta;
        self.at = to.clamp(0, len.saturating_sub(1) as isize) as usize;
    }

    /// Keeps the selected row within the `height` rows shown.
    pub fn scroll(&mut self, height: usize, len: usize) {
        let height = height.max(1);
        self.at = self.at.min(len.saturating_sub(1));
        if self.at < self.top {
            self.top = self.at;
        }
        if self.at >= self.top + height {
            self.top = self.at + 1 - height;
        }
        self.top = self.top.min(len.saturating_sub(height));
    }
}

pub struct App {
    pub model: Model,
    /// The program and its arguments.
    pub title: String,
    /// The task shown (index in `model.tasks`), or all of them.
    pub task: Option<usize>,
    /// The session shown (index in `model.sessions`; then `task` is
    /// `None`).
    pub session: Option<usize>,
    pub view: View,
    pub help: bool,
    /// A message shown over the view until a key is pressed (load
    /// errors).
    pub notice: Option<String>,
    pub quit: bool,
    /// Per node of the shown tree: whether its children are shown.
    pub expanded: Vec<bool>,
    /// The nodes shown, in order.
    pub rows: Vec<u32>,
    /// Every node of the shown tree in display order (children by total
    /// time), and each node's position in it: the order of the search.
    preorder: Vec<u32>,
    position: Vec<u32>,
    pub graph: Cursor,
    /// The function statistics of the shown tree, sorted by `sort` (its
    /// keys in turn), shown in `report_cols`.
    pub report: Vec<FuncRow>,
    pub sort: Vec<Key>,
    pub report_cols: Vec<Col>,
    pub report_cursor: Cursor,
    pub tasks_cursor: Cursor,
    pub sessions_cursor: Cursor,
    /// The info view's text (`fctrace info`'s) and its scroll (`top`).
    pub info: Vec<String>,
    pub info_cursor: Cursor,
    /// The graph's columns, in [`FIELDS`]' order.
    pub fields: Vec<Field>,
    /// The field selection box, when open: its cursor (in [`FIELDS`]).
    pub field_menu: Option<usize>,
    /// A source file and line to open in the editor (`O`), for the event
    /// loop (it leaves the screen to the editor).
    pub edit: Option<(String, u64)>,
    /// The search text being typed after `/`.
    pub input: Option<String>,
    pub search: Option<Search>,
    /// A line for the status bar (search results, errors).
    pub message: String,
    /// Rows of the list the last frame showed (page moves).
    pub page: usize,
}

impl App {
    pub fn new(model: Model, title: String) -> App {
        let mut app = App {
            model,
            title,
            task: None,
            session: None,
            view: View::Graph,
            help: false,
            notice: None,
            quit: false,
            expanded: Vec::new(),
            rows: Vec::new(),
            preorder: Vec::new(),
            position: Vec::new(),
            graph: Cursor::default(),
            report: Vec::new(),
            sort: vec![Key::Col(Col::Total)],
            report_cols: columns::DEFAULT_COLS.to_vec(),
            report_cursor: Cursor::default(),
            tasks_cursor: Cursor::default(),
            sessions_cursor: Cursor::default(),
            info: Vec::new(),
            info_cursor: Cursor::default(),
            fields: DEFAULT_FIELDS.to_vec(),
            field_menu: None,
            edit: None,
            input: None,
            search: None,
            message: String::new(),
            page: 10,
        };
        app.select_task(None);
        // As uftrace: a trace of several sessions opens on their list.
        if app.model.sessions.len() > 1 {
            app.view = View::Sessions;
        }
        app
    }

    /// The tree shown.
    pub fn tree(&self) -> &Tree {
        if let Some(s) = self.session {
            if let Some(t) = &self.model.sessions[s].tree {
                return t;
            }
            return &self.model.all;
        }
        match self.task {
            Some(t) => &self.model.tasks[t].tree,
            None => &self.model.all,
        }
    }

    /// Shows session `session` (its tasks' calls merged).
    pub fn select_session(&mut self, session: usize) {
        self.task = None;
        self.session = Some(session);
        self.select_task_keeping_session();
    }

    pub fn name(&self, func: u32) -> &str {
        self.model
            .names
            .get(func as usize)
            .map_or("(root)", |s| s.as_str())
    }

    /// Shows task `task` (or all): a new tree and report.
    pub fn select_task(&mut self, task: Option<usize>) {
        self.task = task;
        self.session = None;
        self.select_task_keeping_session();
    }

    /// A new tree and report for `task` and `session` as they are.
    fn select_task_keeping_session(&mut self) {
        let n = self.tree().nodes.len();
        let all = n <= EXPAND_ALL_UP_TO;
        self.expanded = self
            .tree()
            .nodes
            .iter()
            .map(|node| all || node.depth < FIRST_LEVELS)
            .collect();
        self.preorder = Vec::with_capacity(n);
        let mut todo = vec![ROOT];
        while let Some(i) = todo.pop() {
            if i != ROOT {
                self.preorder.push(i);
            }
            todo.extend(self.tree().nodes[i as usize].children.iter().rev());
        }
        self.position = vec![0; n];
        for (k, &i) in self.preorder.iter().enumerate() {
            self.position[i as usize] = k as u32;
        }
        self.graph = Cursor::default();
        self.rebuild_rows(None);
        self.report = self.tree().functions(self.model.names.len());
        self.report_cursor = Cursor::default();
        self.sort_report();
        if matches!(self.search, Some(Search::Func(_))) {
            self.search = None;
        }
    }

    /// The shown rows from `expanded`; the cursor stays on `keep` when it
    /// is shown.
    fn rebuild_rows(&mut self, keep: Option<u32>) {
        let mut rows = Vec::new();
        let mut todo: Vec<u32> = self.tree().nodes[ROOT as usize]
            .children
            .iter()
            .rev()
            .copied()
            .collect();
        while let Some(i) = todo.pop() {
            rows.push(i);
            if self.expanded[i as usize] {
                todo.extend(self.tree().nodes[i as usize].children.iter().rev());
            }
        }
        self.rows = rows;
        if let Some(k) = keep {
            if let Some(at) = self.rows.iter().position(|&r| r == k) {
                self.graph.at = at;
            }
        }
        self.graph.at = self.graph.at.min(self.rows.len().saturating_sub(1));
    }

    /// The node under the cursor of the graph.
    pub fn current_node(&self) -> Option<u32> {
        self.rows.get(self.graph.at).copied()
    }

    fn sort_report(&mut self) {
        let names = &self.model.names;
        let origins = &self.model.origins;
        let size = |f: u32| {
            origins
                .get(f as usize)
                .and_then(|o| o.as_ref())
                .map_or(0, |o| o.size)
        };
        let keys = &self.sort;
        self.report.sort_by(|a, b| {
            columns::compare(
                keys,
                (a, size(a.func), &names[a.func as usize]),
                (b, size(b.func), &names[b.func as usize]),
            )
        });
    }

    /// The size of function `func` (0: unknown).
    pub fn size(&self, func: u32) -> u64 {
        self.model
            .origins
            .get(func as usize)
            .and_then(|o| o.as_ref())
            .map_or(0, |o| o.size)
    }

    /// Sorts the report by `col`, the cursor on its first row.
    fn set_sort(&mut self, col: Col) {
        self.sort = vec![Key::Col(col)];
        self.sort_report();
        self.report_cursor = Cursor::default();
        let name = match col {
            Col::Call => "calls",
            Col::SelfTime => "self",
            _ => "total",
        };
        self.message = format!("report sorted by {name}");
    }

    /// `tui --report`, `-f` and `-s`: the view it opens on, the report's
    /// or the graph's columns, the report's order.
    pub fn configure(
        &mut self,
        report: bool,
        cols: Option<Vec<Col>>,
        fields: Option<Vec<Field>>,
        sort: Option<Vec<Key>>,
    ) {
        if report {
            self.view = View::Report;
        }
        if let Some(c) = cols {
            self.report_cols = c;
        }
        if let Some(f) = fields {
            self.fields = f;
        }
        if let Some(k) = sort {
            self.sort = k;
            self.sort_report();
        }
    }

    /// Handles one key.
    pub fn key(&mut self, k: KeyEvent) {
        if k.kind == KeyEventKind::Release {
            return;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(k.code, KeyCode::Char('c') | KeyCode::Char('C'))
        {
            self.quit = true;
            return;
        }
        if let Some(input) = &mut self.input {
            match k.code {
                KeyCode::Esc => {
                    self.input = None;
                    self.message.clear();
                }
                KeyCode::Enter => {
                    let text = self.input.take().unwrap_or_default();
                    if text.is_empty() {
                        self.message.clear();
                    } else {
                        self.search = Some(Search::Text(text));
                        self.find(true, false);
                    }
                }
                KeyCode::Backspace => {
                    input.pop();
                }
                KeyCode::Char(c) => input.push(c),
                _ => {}
            }
            return;
        }
        if let Some(at) = self.field_menu {
            self.field_menu_key(k.code, at);
            return;
        }
        if self.help || self.notice.is_some() {
            // Any key closes the help (q still quits).
            self.help = false;
            self.notice = None;
            if k.code == KeyCode::Char('q') {
                self.quit = true;
            }
            return;
        }
        self.message.clear();
        match k.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('?') | KeyCode::F(1) => self.help = true,
            KeyCode::Char('G') => self.view = View::Graph,
            KeyCode::Char('R') => self.view = View::Report,
            KeyCode::Char('T') => self.view = View::Tasks,
            // uftrace's I (i too: fctrace had no i).
            KeyCode::Char('I') | KeyCode::Char('i') => self.view = View::Info,
            KeyCode::Char('S') => self.view = View::Sessions,
            KeyCode::Tab => {
                self.view = match self.view {
                    View::Graph => View::Report,
                    View::Report => View::Tasks,
                    View::Tasks => View::Sessions,
                    View::Sessions => View::Info,
                    View::Info => View::Graph,
                }
            }
            KeyCode::Char('/') => self.input = Some(String::new()),
            KeyCode::Char('n') => self.find(false, false),
            KeyCode::Char('N') => self.find(false, true),
            _ => match self.view {
                View::Graph => self.graph_key(k.code),
                View::Report => self.report_key(k.code),
                View::Tasks => self.tasks_key(k.code),
                View::Sessions => self.sessions_key(k.code),
                View::Info => {
                    let len = self.info.len();
                    Self::moved(k.code, &mut self.info_cursor, len, self.page);
                }
            },
        }
    }

    /// Up, down, page and end moves of a list of `len` rows.
    fn moved(code: KeyCode, cursor: &mut Cursor, len: usize, page: usize) -> bool {
        let page = page.max(1) as isize;
        match code {
            KeyCode::Up | KeyCode::Char('k') => cursor.step(-1, len),
            KeyCode::Down | KeyCode::Char('j') => cursor.step(1, len),
            KeyCode::PageUp => cursor.step(-page, len),
            KeyCode::PageDown | KeyCode::Char(' ') => cursor.step(page, len),
            KeyCode::Home => cursor.at = 0,
            KeyCode::End => cursor.at = len.saturating_sub(1),
            _ => return false,
        }
        true
    }

    fn graph_key(&mut self, code: KeyCode) {
        if Self::moved(code, &mut self.graph, self.rows.len(), self.page) {
            return;
        }
        if code == KeyCode::Char('f') {
            self.field_menu = Some(0);
            return;
        }
        let Some(node) = self.current_node() else {
            return;
        };
        let has_children = !self.tree().nodes[node as usize].children.is_empty();
        let open = self.expanded[node as usize];
        match code {
            KeyCode::Enter if has_children => {
                self.expanded[node as usize] = !open;
                self.rebuild_rows(Some(node));
            }
            KeyCode::Left | KeyCode::Char('h') => {
                if has_children && open {
                    self.expanded[node as usize] = false;
                    self.rebuild_rows(Some(node));
                } else {
                    self.go_to_parent(node);
                }
            }
            KeyCode::Char('u') => self.go_to_parent(node),
            KeyCode::Char('l') => self.longest_child(node),
            KeyCode::Char('O') => self.open_source(node),
            KeyCode::Right => {
                if has_children && !open {
                    self.expanded[node as usize] = true;
                    self.rebuild_rows(Some(node));
                } else if has_children {
                    self.graph.step(1, self.rows.len());
                }
            }
            KeyCode::Char('c') => {
                self.set_subtree(node, false);
                self.rebuild_rows(Some(node));
            }
            KeyCode::Char('e') => {
                self.set_subtree(node, true);
                self.rebuild_rows(Some(node));
            }
            KeyCode::Char('C') => {
                self.expanded.iter_mut().for_each(|e| *e = false);
                self.expanded[ROOT as usize] = true;
                let top = self.top_ancestor(node);
                self.rebuild_rows(Some(top));
            }
            KeyCode::Char('E') => {
                self.expanded.iter_mut().for_each(|e| *e = true);
                self.rebuild_rows(Some(node));
            }
            _ => {}
        }
    }

    /// uftrace's `l`: the cursor to the child of `node` with the longest
    /// total time (the first of them on a tie), unfolding `node`.
    fn longest_child(&mut self, node: u32) {
        let nodes = &self.tree().nodes;
        let longest = nodes[node as usize]
            .children
            .iter()
            .copied()
            .reduce(|best, c| {
                if nodes[c as usize].total_ns > nodes[best as usize].total_ns {
                    c
                } else {
                    best
                }
            });
        let name = self.name(nodes[node as usize].func).to_string();
        let Some(child) = longest else {
            self.message = format!("{name} calls nothing");
            return;
        };
        let (func, total) = (nodes[child as usize].func, nodes[child as usize].total_ns);
        self.expanded[node as usize] = true;
        self.rebuild_rows(Some(child));
        self.message = format!(
            "longest child of {name}: {} ({})",
            self.name(func),
            duration(total).trim()
        );
    }

    /// uftrace's `O`: asks the event loop to open the source file of the
    /// function of `node` at its line (from its module's DWARF line
    /// table), or says why it cannot.
    fn open_source(&mut self, node: u32) {
        let func = self.tree().nodes[node as usize].func;
        let name = self.name(func).to_string();
        let Some(origin) = self
            .model
            .origins
            .get(func as usize)
            .and_then(|o| o.as_ref())
        else {
            self.message = format!("{name}: no source line (not a function of a module)");
            return;
        };
        let Some(at) =
            fctrace_analysis::srclines::of_entry(origin.kind, &origin.module, origin.addr)
        else {
            let file = origin.module.rsplit('/').next().unwrap_or_default();
            self.message = format!("{name}: no source line in {file}'s debug information");
            return;
        };
        if !std::path::Path::new(&at.file).is_file() {
            self.message = format!("{name}: {}:{}: no such file here", at.file, at.line);
            return;
        }
        self.message = format!("{name}: {}:{}", at.file, at.line);
        self.edit = Some((at.file, at.line));
    }

    /// A key in the field selection box open on row `at`.
    fn field_menu_key(&mut self, code: KeyCode, at: usize) {
        let mut cursor = Cursor { at, top: 0 };
        // (Space toggles here: it is not a page down.)
        if code != KeyCode::Char(' ') && Self::moved(code, &mut cursor, FIELDS.len(), FIELDS.len())
        {
            self.field_menu = Some(cursor.at);
            return;
        }
        match code {
            KeyCode::Enter | KeyCode::Char(' ') => {
                let f = FIELDS[at].0;
                if self.fields.contains(&f) {
                    self.fields.retain(|&x| x != f);
                } else {
                    self.fields.push(f);
                    let order = |f: &Field| FIELDS.iter().position(|e| e.0 == *f);
                    self.fields.sort_by_key(order);
                }
                self.message = self.fields_text();
            }
            KeyCode::Esc | KeyCode::Char('f') | KeyCode::Char('q') => {
                self.field_menu = None;
                self.message = self.fields_text();
            }
            _ => {}
        }
    }

    /// `fields: total,self,call` (or `none`).
    pub fn fields_text(&self) -> String {
        let names: Vec<&str> = self.fields.iter().map(|f| f.name()).collect();
        match names.is_empty() {
            true => "fields: none".into(),
            false => format!("fields: {}", names.join(",")),
        }
    }

    fn go_to_parent(&mut self, node: u32) {
        let parent = self.tree().nodes[node as usize].parent;
        if parent != ROOT {
            self.rebuild_rows(Some(parent));
        }
    }

    fn top_ancestor(&self, mut node: u32) -> u32 {
        while self.tree().nodes[node as usize].parent != ROOT {
            node = self.tree().nodes[node as usize].parent;
        }
        node
    }

    fn set_subtree(&mut self, node: u32, open: bool) {
        let mut todo = vec![node];
        while let Some(i) = todo.pop() {
            self.expanded[i as usize] = open;
            todo.extend(self.tree().nodes[i as usize].children.iter());
        }
    }

    /// Expands the callers of `node` so that it is shown.
    fn reveal(&mut self, node: u32) {
        let mut p = self.tree().nodes[node as usize].parent;
        while p != ROOT {
            self.expanded[p as usize] = true;
            p = self.tree().nodes[p as usize].parent;
        }
    }

    fn report_key(&mut self, code: KeyCode) {
        if Self::moved(code, &mut self.report_cursor, self.report.len(), self.page) {
            return;
        }
        match code {
            KeyCode::Char('s') => self.set_sort(match self.sort.first() {
                Some(Key::Col(Col::Total)) => Col::SelfTime,
                Some(Key::Col(Col::SelfTime)) => Col::Call,
                _ => Col::Total,
            }),
            KeyCode::Char('1') => self.set_sort(Col::Total),
            KeyCode::Char('2') => self.set_sort(Col::SelfTime),
            KeyCode::Char('3') => self.set_sort(Col::Call),
            KeyCode::Enter => {
                if let Some(f) = self.report.get(self.report_cursor.at).map(|r| r.func) {
                    self.jump_to_calls(f);
                }
            }
            _ => {}
        }
    }

    /// The graph with only the call paths that reach `func` open, the
    /// cursor on the first; `n`/`N` go through them.
    pub fn jump_to_calls(&mut self, func: u32) {
        self.expanded.iter_mut().for_each(|e| *e = false);
        self.expanded[ROOT as usize] = true;
        let hits: Vec<u32> = self
            .preorder
            .iter()
            .copied()
            .filter(|&i| self.tree().nodes[i as usize].func == func)
            .collect();
        for &h in &hits {
            self.reveal(h);
        }
        self.rebuild_rows(hits.first().copied());
        self.view = View::Graph;
        let calls: u64 = hits
            .iter()
            .map(|&h| self.tree().nodes[h as usize].calls)
            .sum();
        self.message = format!(
            "{}: {} call path{}, {} call{} (n/N: next/previous)",
            self.name(func),
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            calls,
            if calls == 1 { "" } else { "s" }
        );
        self.search = Some(Search::Func(func));
    }

    fn matches(&self, func: u32) -> bool {
        match &self.search {
            None => false,
            Some(Search::Func(f)) => *f == func,
            Some(Search::Text(t)) => {
                if func == NO_FUNC {
                    return false;
                }
                let name = self.name(func);
                if t.chars().any(char::is_uppercase) {
                    name.contains(t.as_str())
                } else {
                    name.to_lowercase().contains(&t.to_lowercase())
                }
            }
        }
    }

    /// Whether `func` is what the search looks for (highlighted).
    pub fn is_match(&self, func: u32) -> bool {
        self.matches(func)
    }

    /// Moves to the next (or previous) match of the search in the current
    /// view; `here`: the current row counts.
    fn find(&mut self, here: bool, backwards: bool) {
        let Some(search) = self.search.clone() else {
            self.message = "no search: / then a name".into();
            return;
        };
        let what = match &search {
            Search::Text(t) => format!("\"{t}\""),
            Search::Func(f) => self.name(*f).to_string(),
        };
        // Per function: whether it matches (names are fewer than nodes).
        let hit: Vec<bool> = (0..self.model.names.len() as u32)
            .map(|f| self.matches(f))
            .collect();
        let is_hit = |f: u32| hit.get(f as usize).copied().unwrap_or(false);
        let found = match self.view {
            View::Graph => {
                let n = self.preorder.len();
                let start = self
                    .current_node()
                    .map_or(0, |c| self.position[c as usize] as usize);
                let hit = (0..n)
                    .map(|k| {
                        let k = if here { k } else { k + 1 };
                        if backwards {
                            (start + n * 2 - k) % n.max(1)
                        } else {
                            (start + k) % n.max(1)
                        }
                    })
                    .map(|k| self.preorder[k])
                    .find(|&i| is_hit(self.tree().nodes[i as usize].func));
                if let Some(node) = hit {
                    self.reveal(node);
                    self.rebuild_rows(Some(node));
                    let k = self.position[node as usize] as usize + 1;
                    let total = self
                        .preorder
                        .iter()
                        .filter(|&&i| is_hit(self.tree().nodes[i as usize].func))
                        .count();
                    let before = self.preorder[..k]
                        .iter()
                        .filter(|&&i| is_hit(self.tree().nodes[i as usize].func))
                        .count();
                    self.message = format!("{what}: call path {before} of {total}");
                }
                hit.is_some()
            }
            View::Report => {
                let n = self.report.len();
                let start = self.report_cursor.at;
                let hit = (0..n)
                    .map(|k| {
                        let k = if here { k } else { k + 1 };
                        if backwards {
                            (start + n * 2 - k) % n.max(1)
                        } else {
                            (start + k) % n.max(1)
                        }
                    })
                    .find(|&k| is_hit(self.report[k].func));
                if let Some(k) = hit {
                    self.report_cursor.at = k;
                    self.message = format!("{what}: {}", self.name(self.report[k].func));
                }
                hit.is_some()
            }
            View::Tasks | View::Sessions | View::Info => {
                self.message = "search works in the graph and the report".into();
                return;
            }
        };
        if !found {
            self.message = format!("{what}: not found");
        }
    }

    fn sessions_key(&mut self, code: KeyCode) {
        let len = self.model.sessions.len() + 1;
        if Self::moved(code, &mut self.sessions_cursor, len, self.page) {
            return;
        }
        if code == KeyCode::Enter {
            self.view = View::Graph;
            match self.sessions_cursor.at.checked_sub(1) {
                None => {
                    self.select_task(None);
                    self.message = "all sessions".into();
                }
                Some(s) => {
                    self.select_session(s);
                    let s = &self.model.sessions[s];
                    self.message = format!("session {} ({})", s.id, s.exe);
                }
            }
        }
    }

    fn tasks_key(&mut self, code: KeyCode) {
        let len = self.model.tasks.len() + 1;
        if Self::moved(code, &mut self.tasks_cursor, len, self.page) {
            return;
        }
        if code == KeyCode::Enter {
            let task = self.tasks_cursor.at.checked_sub(1);
            self.select_task(task);
            self.view = View::Graph;
            self.message = match task {
                None => "all tasks".into(),
                Some(t) => format!(
                    "task {} ({})",
                    self.model.tasks[t].tid, self.model.tasks[t].comm
                ),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::sample;
    use super::*;

    fn press(app: &mut App, keys: &str) {
        for c in keys.chars() {
            let code = match c {
                '\n' => KeyCode::Enter,
                '<' => KeyCode::Left,
                '>' => KeyCode::Right,
                c => KeyCode::Char(c),
            };
            app.key(KeyEvent::new(code, KeyModifiers::NONE));
        }
    }

    fn shown(app: &App) -> Vec<String> {
        app.rows
            .iter()
            .map(|&r| {
                let n = &app.tree().nodes[r as usize];
                format!("{}{}", " ".repeat(n.depth as usize - 1), app.name(n.func))
            })
            .collect()
    }

    #[test]
    fn folding_and_unfolding() {
        let mut app = App::new(sample(), "prog".into());
        assert_eq!(
            shown(&app),
            [
                "main",
                " parse_args",
                "  leaf",
                " leaf",
                "leaf" // the thread's
            ]
        );
        press(&mut app, "j\n");
        assert_eq!(shown(&app), ["main", " parse_args", " leaf", "leaf"]);
        press(&mut app, ">");
        assert_eq!(shown(&app).len(), 5);
        press(&mut app, "kC");
        assert_eq!(shown(&app), ["main", "leaf"]);
        press(&mut app, "e");
        assert_eq!(shown(&app).len(), 5);
        // Left on a leaf goes to its parent.
        press(&mut app, "jj<");
        assert_eq!(
            app.current_node()
                .map(|n| app.tree().nodes[n as usize].depth),
            Some(2)
        );
    }

    #[test]
    fn report_sorting_search_and_jump() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, "R");
        let order = |app: &App| -> Vec<String> {
            app.report
                .iter()
                .map(|r| app.name(r.func).to_string())
                .collect()
        };
        assert_eq!(order(&app), ["main", "parse_args", "leaf"]);
        press(&mut app, "s");
        assert_eq!(app.sort, [Key::Col(Col::SelfTime)]);
        assert_eq!(order(&app), ["main", "parse_args", "leaf"]);
        press(&mut app, "s");
        assert_eq!(order(&app), ["leaf", "parse_args", "main"]);
        press(&mut app, "/pars\n");
        assert_eq!(app.report_cursor.at, 1);
        // Enter: leaf's three call paths, in the graph.
        press(&mut app, "k\n");
        assert_eq!(app.view, View::Graph);
        assert_eq!(
            app.message,
            "leaf: 3 call paths, 3 calls (n/N: next/previous)"
        );
        let at = |app: &App| {
            let n = app.current_node().unwrap();
            (
                app.tree().nodes[n as usize].depth,
                app.name(app.tree().nodes[n as usize].func).to_string(),
            )
        };
        assert_eq!(at(&app), (3, "leaf".to_string()));
        press(&mut app, "n");
        assert_eq!(at(&app), (2, "leaf".to_string()));
        press(&mut app, "n");
        assert_eq!(at(&app), (1, "leaf".to_string()));
        press(&mut app, "n");
        assert_eq!(at(&app), (3, "leaf".to_string()));
        press(&mut app, "N");
        assert_eq!(at(&app), (1, "leaf".to_string()));
    }

    #[test]
    fn per_task_view() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, "Tjj\n");
        assert_eq!(app.task, Some(1));
        assert_eq!(app.view, View::Graph);
        assert_eq!(shown(&app), ["leaf"]);
        press(&mut app, "Tk\n");
        assert_eq!(app.task, Some(0));
        assert_eq!(shown(&app).len(), 4);
    }

    #[test]
    fn longest_child_and_fields() {
        let mut app = App::new(sample(), "prog".into());
        // main(100): parse_args (40 over two calls) before leaf (5).
        press(&mut app, "\nl");
        let at = app.current_node().unwrap();
        assert_eq!(app.name(app.tree().nodes[at as usize].func), "parse_args");
        assert_eq!(app.message, "longest child of main: parse_args (0.040 us)");
        press(&mut app, "ll");
        assert_eq!(app.message, "leaf calls nothing");
        // f: self off, total-max and addr on; Esc closes.
        press(&mut app, "f");
        assert_eq!(app.field_menu, Some(0));
        press(&mut app, "jjj jjjjjj ");
        assert_eq!(
            app.fields,
            [
                Field::Total,
                Field::TotalMax,
                Field::SelfTime,
                Field::Call,
                Field::Addr
            ]
        );
        press(&mut app, "kkkkk ");
        app.key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert_eq!(app.field_menu, None);
        assert_eq!(app.message, "fields: total,total-max,call,addr");
    }

    #[test]
    fn keys_on_an_empty_model_do_nothing_bad() {
        let mut app = App::new(Model::default(), String::new());
        press(&mut app, "jk\n<>cCeEun/x\nnNRs\n123TjG?xlOf j fSj\nIjiG");
        assert!(!app.quit);
        press(&mut app, "q");
        assert!(app.quit);
    }
}
