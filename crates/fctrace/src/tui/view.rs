//! Drawing the TUI's state: a title line, the view's column header, its
//! rows and a status line; the help and the field selection over them.

use super::app::{App, Cursor, Field, View, FIELDS};
use super::model::Node;
use fctrace_analysis::duration;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

/// The keys, as the help shows them.
pub const HELP: &[(&str, &str)] = &[
    ("G R T, Tab", "graph, report, task list; Tab: the next view"),
    ("S", "session list (the programs started or exec'd)"),
    ("I i", "info: what `fctrace info` says of the trace"),
    ("Up Down j k", "move"),
    ("PgUp PgDn Home End", "move by a page, to the ends"),
    ("Enter", "graph: fold/unfold; report: the calls of the"),
    ("", "function in the graph; tasks: show that task"),
    ("Left h / Right", "fold, or go to the caller / unfold"),
    ("u", "go to the caller"),
    ("l", "graph: go to the longest child (unfolds the row)"),
    ("f", "graph: choose the fields (columns)"),
    ("O", "graph: open the function's source line in $EDITOR"),
    ("c e", "fold / unfold everything under the row"),
    ("C E", "fold / unfold the whole graph"),
    ("s 1 2 3", "report: next sort key; by total, self, calls"),
    ("/ n N", "search a function; next, previous match"),
    ("?", "this help (any key closes it)"),
    ("q Ctrl-C", "quit"),
];

pub fn draw(f: &mut Frame, app: &mut App) {
    let [title, header, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let reverse = Style::default().add_modifier(Modifier::REVERSED);
    let task = match (app.session, app.task) {
        (Some(s), _) => format!(
            "session {} {}",
            app.model.sessions[s].id, app.model.sessions[s].exe
        ),
        (None, None) => format!("all {} tasks", app.model.tasks.len()),
        (None, Some(t)) => format!(
            "task {} {}",
            app.model.tasks[t].tid, app.model.tasks[t].comm
        ),
    };
    let view = match app.view {
        View::Graph => "Graph",
        View::Report => "Report",
        View::Tasks => "Tasks",
        View::Info => "Info",
        View::Sessions => "Sessions",
    };
    f.render_widget(
        Paragraph::new(format!(" {view} | {task} | ? help | {}", app.title)).style(reverse),
        title,
    );
    app.page = body.height as usize;
    let (head, lines) = match app.view {
        View::Graph => graph(app, body),
        View::Report => report(app, body),
        View::Tasks => tasks(app, body),
        View::Sessions => sessions(app, body),
        View::Info => info(app, body),
    };
    f.render_widget(
        Paragraph::new(head).style(Style::default().add_modifier(Modifier::BOLD)),
        header,
    );
    f.render_widget(Paragraph::new(lines), body);
    let line = match &app.input {
        Some(text) => format!("/{text}"),
        None => app.message.clone(),
    };
    f.render_widget(Paragraph::new(line), status);
    if let Some(at) = app.field_menu {
        field_menu(f, app, at);
    }
    if app.help {
        help(f);
    }
    if let Some(text) = &app.notice {
        notice(f, text);
    }
}

/// A box of wrapped text in the middle of the screen.
fn notice(f: &mut Frame, text: &str) {
    let area = f.area();
    let width = area.width.min(100);
    let height = area.height.min(12);
    let r = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(text.to_string())
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL)),
        r,
    );
}

/// The rows of a list within `area`: the selected one reversed.
fn window<'a>(
    cursor: &mut Cursor,
    len: usize,
    area: Rect,
    mut line: impl FnMut(usize) -> Line<'a>,
) -> Vec<Line<'a>> {
    cursor.scroll(area.height as usize, len);
    (cursor.top..len.min(cursor.top + area.height as usize))
        .map(|i| {
            let l = line(i);
            if i == cursor.at {
                l.style(Style::default().add_modifier(Modifier::REVERSED))
            } else {
                l
            }
        })
        .collect()
}

/// The cell of `field` for `node` (of function `func` at `addr`).
fn cell(field: Field, node: &Node, addr: Option<u64>) -> String {
    let avg = |sum: u64| (node.returned > 0).then(|| sum / node.returned);
    let t = |v: Option<u64>| v.map_or_else(String::new, duration);
    let text = match field {
        Field::Total => duration(node.total_ns),
        Field::TotalAvg => t(avg(node.total_ns)),
        Field::TotalMin => t(node.min_ns),
        Field::TotalMax => t(node.max_ns),
        Field::SelfTime => duration(node.self_ns),
        Field::SelfAvg => t(avg(node.self_ns)),
        Field::SelfMin => t(node.self_min_ns),
        Field::SelfMax => t(node.self_max_ns),
        Field::Call => node.calls.to_string(),
        Field::Addr => addr.map_or_else(String::new, |a| format!("{a:#x}")),
    };
    format!("{text:>w$} ", w = field.width())
}

fn graph(app: &mut App, area: Rect) -> (String, Vec<Line<'static>>) {
    let mut head: String = app
        .fields
        .iter()
        .map(|f| format!("{:>w$} ", f.header(), w = f.width()))
        .collect();
    head.push_str(" FUNCTION");
    if app.rows.is_empty() {
        return (head, vec![Line::from("  (no calls)")]);
    }
    let mut cursor = app.graph;
    let len = app.rows.len();
    let lines = window(&mut cursor, len, area, |i| {
        let node = &app.tree().nodes[app.rows[i] as usize];
        let mark = if node.children.is_empty() {
            "   "
        } else if app.expanded[app.rows[i] as usize] {
            "[-]"
        } else {
            "[+]"
        };
        let addr = app
            .model
            .origins
            .get(node.func as usize)
            .and_then(|o| o.as_ref())
            .map(|o| o.addr);
        let mut text: String = app.fields.iter().map(|&f| cell(f, node, addr)).collect();
        text.push_str(&format!(
            " {}{} {}",
            "  ".repeat(node.depth.saturating_sub(1) as usize),
            mark,
            app.name(node.func)
        ));
        styled(text, app.is_match(node.func))
    });
    app.graph = cursor;
    (head, lines)
}

fn styled(text: String, hit: bool) -> Line<'static> {
    if hit {
        Line::from(text).style(Style::default().add_modifier(Modifier::BOLD))
    } else {
        Line::from(text)
    }
}

fn report(app: &mut App, area: Rect) -> (String, Vec<Line<'static>>) {
    use super::columns::{Key, Value};
    let primary = app.sort.first().copied();
    let mut head = String::new();
    for &c in &app.report_cols {
        let star = if primary == Some(Key::Col(c)) {
            "*"
        } else {
            ""
        };
        head.push_str(&format!("{:>10} ", format!("{}{star}", c.header())));
    }
    head.push_str(if primary == Some(Key::Func) {
        " FUNCTION*"
    } else {
        " FUNCTION"
    });
    if app.report.is_empty() {
        return (head, vec![Line::from("  (no calls)")]);
    }
    let mut cursor = app.report_cursor;
    let len = app.report.len();
    let lines = window(&mut cursor, len, area, |i| {
        let r = &app.report[i];
        let mut text = String::new();
        for &c in &app.report_cols {
            match c.value(r, app.size(r.func)) {
                Value::Time(Some(t)) => text.push_str(&duration(t)),
                Value::Time(None) => text.push_str(&format!("{:>10}", "-")),
                Value::Count(n) => text.push_str(&format!("{n:>10}")),
            }
            text.push(' ');
        }
        text.push(' ');
        text.push_str(app.name(r.func));
        styled(text, app.is_match(r.func))
    });
    app.report_cursor = cursor;
    (head, lines)
}

fn tasks(app: &mut App, area: Rect) -> (String, Vec<Line<'static>>) {
    let head = format!(
        "{:>8} {:>8} {:>10} {:>10}  COMMAND",
        "TID", "PID", "CALLS", "TOTAL"
    );
    let mut cursor = app.tasks_cursor;
    let len = app.model.tasks.len() + 1;
    let lines = window(&mut cursor, len, area, |i| {
        let (tid, pid, comm, tree) = match i.checked_sub(1) {
            None => (
                "all".to_string(),
                String::new(),
                format!("({} tasks)", app.model.tasks.len()),
                &app.model.all,
            ),
            Some(t) => {
                let t = &app.model.tasks[t];
                (
                    t.tid.to_string(),
                    t.pid.to_string(),
                    t.comm.clone(),
                    &t.tree,
                )
            }
        };
        let (calls, total) = tree.top();
        let chosen = if app.task == i.checked_sub(1) {
            "*"
        } else {
            " "
        };
        Line::from(format!(
            "{chosen}{tid:>7} {pid:>8} {calls:>10} {}  {comm}",
            duration(total)
        ))
    });
    app.tasks_cursor = cursor;
    (head, lines)
}

fn sessions(app: &mut App, area: Rect) -> (String, Vec<Line<'static>>) {
    let head = format!(
        "{:>8} {:>8} {:>6} {:>10} {:>10}  PROGRAM",
        "SESSION", "PID", "TASKS", "CALLS", "TOTAL"
    );
    let mut cursor = app.sessions_cursor;
    let len = app.model.sessions.len() + 1;
    let lines = window(&mut cursor, len, area, |i| {
        let (id, pid, tasks, exe, tree) = match i.checked_sub(1) {
            None => (
                "all".to_string(),
                String::new(),
                app.model.tasks.len(),
                format!("({} sessions)", app.model.sessions.len()),
                &app.model.all,
            ),
            Some(s) => {
                let s = &app.model.sessions[s];
                (
                    s.id.to_string(),
                    s.pid.to_string(),
                    s.tasks.len(),
                    s.exe.clone(),
                    s.tree.as_ref().unwrap_or(&app.model.all),
                )
            }
        };
        let (calls, total) = tree.top();
        let chosen = match (i.checked_sub(1), app.session, app.task) {
            (None, None, None) => "*",
            (Some(s), Some(c), _) if s == c => "*",
            _ => " ",
        };
        Line::from(format!(
            "{chosen}{id:>7} {pid:>8} {tasks:>6} {calls:>10} {}  {exe}",
            duration(total)
        ))
    });
    app.sessions_cursor = cursor;
    (head, lines)
}

/// `fctrace info`'s text, scrolled: the cursor is its first line shown.
fn info(app: &mut App, area: Rect) -> (String, Vec<Line<'static>>) {
    let height = area.height as usize;
    let len = app.info.len();
    let c = &mut app.info_cursor;
    c.at = c.at.min(len.saturating_sub(height.max(1)));
    c.top = c.at;
    let lines = app.info[c.top..len.min(c.top + height)]
        .iter()
        .map(|l| Line::from(l.clone()))
        .collect();
    let head = format!("fctrace info (line {} of {len})", (c.top + 1).min(len));
    (head, lines)
}

/// The field selection box: every field, a mark on those shown.
fn field_menu(f: &mut Frame, app: &App, at: usize) {
    let area = f.area();
    let width = area.width.min(60);
    let height = area.height.min(FIELDS.len() as u16 + 3);
    let r = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let mut lines: Vec<Line> = FIELDS
        .iter()
        .enumerate()
        .map(|(i, (field, name, _, _, what))| {
            let mark = if app.fields.contains(field) { "x" } else { " " };
            let l = Line::from(format!("[{mark}] {name:<10} {what}"));
            if i == at {
                l.style(Style::default().add_modifier(Modifier::REVERSED))
            } else {
                l
            }
        })
        .collect();
    lines.push(Line::from("Space/Enter: show or hide; f, Esc: done"));
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" fields ")),
        r,
    );
}

fn help(f: &mut Frame) {
    let area = f.area();
    let width = area.width.min(72);
    let height = area.height.min(HELP.len() as u16 + 2);
    let r = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(format!("{k:>18}  {what}")))
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")),
        r,
    );
}

/// The screen while the trace is read.
pub fn loading(f: &mut Frame, done: u64, total: u64, dir: &str) {
    let read = match (done.min(total) * 100).checked_div(total) {
        Some(pct) => format!("{pct}% ({done} of {total} events)"),
        None => format!("{done} events"),
    };
    let lines = vec![
        Line::from(format!("fctrace tui: reading {dir}")),
        Line::from(format!("{read}  q: stop")),
    ];
    f.render_widget(Paragraph::new(lines), f.area());
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::sample;
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::Terminal;

    fn screen(app: &mut App, w: u16, h: u16) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, app)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    fn press(app: &mut App, code: KeyCode) {
        app.key(KeyEvent::new(code, KeyModifiers::NONE));
    }

    #[test]
    fn graph_screen() {
        let mut app = App::new(sample(), "prog -v".into());
        assert_eq!(
            screen(&mut app, 60, 9),
            [
                " Graph | all 2 tasks | ? help | prog -v",
                "     TOTAL       SELF      CALLS  FUNCTION",
                "  0.100 us   0.055 us          1  [-] main",
                "  0.040 us   0.030 us          2    [-] parse_args",
                "  0.010 us   0.010 us          1          leaf",
                "  0.005 us   0.005 us          1        leaf",
                "  0.004 us   0.004 us          1      leaf",
                "",
                "",
            ]
        );
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Enter);
        let s = screen(&mut app, 60, 9);
        assert_eq!(s[3], "  0.040 us   0.030 us          2    [+] parse_args");
        assert_eq!(s[4], "  0.005 us   0.005 us          1        leaf");
    }

    #[test]
    fn report_fields_and_keys_as_chosen() {
        use crate::tui::columns::{Col, Key};
        // sample(): leaf's calls take 10, 5 and 4 ns (avg 6.33), parse_args'
        // 30 and 10, main's 100; each function 0x20 bytes long.
        let mut app = App::new(sample(), "prog".into());
        let cols = vec![
            Col::Call,
            Col::TotalAvg,
            Col::TotalMin,
            Col::TotalMax,
            Col::Size,
        ];
        app.configure(
            true,
            Some(cols),
            None,
            Some(vec![Key::Col(Col::Call), Key::Func]),
        );
        assert_eq!(
            screen(&mut app, 70, 6),
            [
                " Report | all 2 tasks | ? help | prog",
                "    CALLS*  TOTAL-AVG  TOTAL-MIN  TOTAL-MAX       SIZE  FUNCTION",
                "         3   0.006 us   0.004 us   0.010 us         32  leaf",
                "         2   0.020 us   0.010 us   0.030 us         32  parse_args",
                "         1   0.100 us   0.100 us   0.100 us         32  main",
                "",
            ]
        );
    }

    #[test]
    fn report_screen_sorted_by_calls() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, KeyCode::Char('R'));
        press(&mut app, KeyCode::Char('3'));
        assert_eq!(
            screen(&mut app, 60, 7),
            [
                " Report | all 2 tasks | ? help | prog",
                "     TOTAL       SELF     CALLS*  FUNCTION",
                "  0.019 us   0.019 us          3  leaf",
                "  0.040 us   0.030 us          2  parse_args",
                "  0.100 us   0.055 us          1  main",
                "",
                "report sorted by calls",
            ]
        );
    }

    #[test]
    fn task_screen() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, KeyCode::Char('T'));
        assert_eq!(
            screen(&mut app, 60, 6),
            [
                " Tasks | all 2 tasks | ? help | prog",
                "     TID      PID      CALLS      TOTAL  COMMAND",
                "*    all                   2   0.104 us  (2 tasks)",
                "      10       10          1   0.100 us  prog",
                "      11       10          1   0.004 us  prog",
                "",
            ]
        );
    }

    #[test]
    fn scrolling_keeps_the_cursor_shown() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, KeyCode::End);
        let s = screen(&mut app, 40, 5);
        // 2 rows of list: the last two nodes, cut at 40 columns.
        assert_eq!(s[2], "  0.005 us   0.005 us          1"); // leaf past 40

        assert_eq!(s[3], "  0.004 us   0.004 us          1      le");
    }

    #[test]
    fn tiny_and_empty_screens_do_not_panic() {
        for (w, h) in [(20, 5), (1, 1), (0, 0), (5, 2), (80, 1)] {
            let mut app = App::new(sample(), "prog".into());
            app.help = true;
            screen(&mut app, w, h);
            for v in ['R', 'T', 'G'] {
                app.help = false;
                press(&mut app, KeyCode::Char(v));
                press(&mut app, KeyCode::PageDown);
                screen(&mut app, w, h);
            }
            let mut empty = App::new(Default::default(), String::new());
            empty.notice = Some("error: a long message that wraps ".repeat(9));
            screen(&mut empty, w, h);
        }
        let mut empty = App::new(Default::default(), "prog".into());
        let s = screen(&mut empty, 40, 4);
        assert_eq!(s[2], "  (no calls)");
    }

    #[test]
    fn notice_over_the_graph() {
        let mut app = App::new(sample(), "prog".into());
        app.notice = Some("error: damaged\n\nAny key closes this.".into());
        let s = screen(&mut app, 40, 9);
        // At most 12 rows high: the whole screen here.
        assert_eq!(s[0], "┌──────────────────────────────────────┐");
        assert_eq!(s[1], "│error: damaged                        │");
        assert_eq!(s[3], "│Any key closes this.                  │");
        assert_eq!(s[8], "└──────────────────────────────────────┘");
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(app.notice, None);
        // The key only closed it.
        assert_eq!(app.graph.at, 0);
    }

    #[test]
    fn loading_screen() {
        let mut term = Terminal::new(TestBackend::new(50, 3)).unwrap();
        term.draw(|f| loading(f, 262_144, 1_048_576, "fctrace.data"))
            .unwrap();
        term.backend().assert_buffer_lines([
            "fctrace tui: reading fctrace.data                 ",
            "25% (262144 of 1048576 events)  q: stop           ",
            "                                                  ",
        ]);
        // A trace whose info has no count of events.
        term.draw(|f| loading(f, 10, 0, "d")).unwrap();
        term.backend().assert_buffer_lines([
            "fctrace tui: reading d                            ",
            "10 events  q: stop                                ",
            "                                                  ",
        ]);
    }

    #[test]
    fn help_screen() {
        let mut app = App::new(sample(), "prog".into());
        press(&mut app, KeyCode::Char('?'));
        let s = screen(&mut app, 80, 20);
        assert!(s.iter().any(|l| l.contains("q Ctrl-C  quit")), "{s:#?}");
        press(&mut app, KeyCode::Char('x'));
        assert!(!app.help);
    }
}
