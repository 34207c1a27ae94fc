//! `fctrace tui` driven in a real terminal: a tmux session runs it on the
//! trace of tests/programs/tui.c, keys are sent with `send-keys` and the
//! screen read with `capture-pane` (polled until the expected text shows,
//! within a deadline). The counts expected follow from tui.c's source; the
//! orders of the sorted report from `report --format json` of the same
//! trace.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a screen may take to show what a test waits for.
const DEADLINE: Duration = Duration::from_secs(60);

fn program() -> PathBuf {
    c_program("tui.c", "-O0", &["-O0", "-pthread"])
}

/// A tmux server of its own (its socket in a fresh directory), killed when
/// dropped.
struct Tmux {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Tmux {
    /// A 120x40 session running `fctrace tui ARGS` in a shell that prints
    /// `before-tui` first and, after the TUI, its exit status, the
    /// terminal's `icanon` and `echo` settings and `modes-end`.
    fn start(args: &[&OsStr]) -> Tmux {
        Tmux::start_with(args, &[])
    }

    /// [`Tmux::start`] with `env` (name, value) exported to the TUI.
    fn start_with(args: &[&OsStr], env: &[(&str, &OsStr)]) -> Tmux {
        require_tool("tmux", "tmux");
        let dir = tempfile::Builder::new()
            .prefix("fct-tmux")
            .tempdir_in("/tmp")
            .unwrap();
        let socket = dir.path().join("s");
        let script = dir.path().join("run.sh");
        let quote = |a: &OsStr| format!("'{}'", a.to_string_lossy().replace('\'', "'\\''"));
        let quoted: Vec<String> = std::iter::once(fctrace_bin().as_os_str())
            .chain(std::iter::once(OsStr::new("tui")))
            .chain(args.iter().copied())
            .map(quote)
            .collect();
        let exports: String = env
            .iter()
            .map(|(k, v)| format!("export {k}={}\n", quote(v)))
            .collect();
        fs::write(
            &script,
            format!(
                "{exports}echo before-tui\n{}\necho \"tui exited $?\"\n\
                 stty -a | tr ' ;' '\\n\\n' | grep -x -e '-\\?icanon' -e '-\\?echo'\n\
                 echo modes-end\nexec cat\n",
                quoted.join(" ")
            ),
        )
        .unwrap();
        let t = Tmux { _dir: dir, socket };
        let out = t
            .cmd()
            .args(["new-session", "-d", "-x", "120", "-y", "40", "sh"])
            .arg(&script)
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    /// The TUI's process id: the pane's shell runs fctrace as its only
    /// child.
    fn tui_pid(&self) -> String {
        let out = self
            .cmd()
            .args(["list-panes", "-F", "#{pane_pid}"])
            .output()
            .unwrap();
        let shell = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let children = fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
        children
            .split_whitespace()
            .next()
            .unwrap_or_else(|| panic!("no child of the pane's shell {shell}"))
            .to_string()
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    /// Sends keys (tmux key names: `Enter`, `Down`, `C-c`, or text).
    fn keys(&self, keys: &[&str]) {
        let out = self.cmd().arg("send-keys").args(keys).output().unwrap();
        assert!(out.status.success(), "send-keys {keys:?} failed");
    }

    /// Types `text` literally.
    fn text(&self, text: &str) {
        let out = self.cmd().args(["send-keys", "-l", text]).output().unwrap();
        assert!(out.status.success(), "send-keys -l {text:?} failed");
    }

    /// The screen, as text (`escapes`: with the attributes).
    fn screen(&self, escapes: bool) -> String {
        let mut c = self.cmd();
        c.args(["capture-pane", "-p"]);
        if escapes {
            c.arg("-e");
        }
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the screen until `ok` holds; returns that screen.
    #[track_caller]
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen(false);
            if ok(&s) {
                return s;
            }
            if start.elapsed() > DEADLINE {
                panic!("the screen never showed {what}:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// Polls the screen until `check` passes on it; returns that screen.
    /// Checks are whole conditions on one screen: a frame half drawn
    /// fails them and is read again.
    #[track_caller]
    fn until(&self, what: &str, mut check: impl FnMut(&str) -> Result<(), String>) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen(false);
            match check(&s) {
                Ok(()) => return s,
                Err(e) if start.elapsed() > DEADLINE => {
                    panic!("the screen never showed {what} ({e}):\n{s}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(30)),
            }
        }
    }

    #[track_caller]
    fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("{text:?}"), |s| s.contains(text))
    }

    /// The selected row of the list (reverse video; the title line, also
    /// reversed, excluded), without its attributes; empty if none.
    fn selected(&self) -> String {
        let s = self.screen(true);
        let line = s.lines().skip(1).find(|l| reversed(l)).unwrap_or_default();
        strip_escapes(line)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// Whether a line of `capture-pane -e` turns reverse video on (an SGR
/// sequence with the parameter 7).
fn reversed(line: &str) -> bool {
    line.split("\x1b[").skip(1).any(|seq| {
        seq.split_once('m')
            .is_some_and(|(params, _)| params.split(';').any(|p| p == "7"))
    })
}

fn strip_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A row of the graph or the report: the columns and the function (with
/// its depth in the graph: 1 for the outermost calls).
#[derive(Debug, Clone, PartialEq)]
struct Row {
    /// Total and self time as shown: (ns, the resolution of the text).
    total: (u64, u64),
    self_time: (u64, u64),
    calls: u64,
    depth: usize,
    name: String,
    /// `[+]`, `[-]` or blank.
    mark: String,
}

/// A duration column (`  0.771 us`, ` 10.364 ms`, `  1.500 s `): the
/// nanoseconds and the resolution of the text (half a unit of its last
/// digit).
fn parse_duration(text: &str) -> Option<(u64, u64)> {
    let text = text.trim();
    let (value, unit) = text.split_once(' ').unwrap_or((text, "s"));
    let scale = match unit.trim() {
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    let v: f64 = value.parse().ok()?;
    Some((
        (v * scale).round() as u64,
        (scale / 1e3 / 2.0).ceil() as u64,
    ))
}

/// The rows between the column header and the status line.
fn rows(screen: &str) -> Vec<Row> {
    let lines: Vec<&str> = screen.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.contains("FUNCTION"))
        .unwrap_or_else(|| panic!("no header:\n{screen}"));
    lines[head + 1..]
        .iter()
        .filter_map(|l| {
            // TOTAL(10) SELF(10) CALLS(10), two spaces, the rest.
            let total = parse_duration(l.get(0..10)?)?;
            let self_time = parse_duration(l.get(11..21)?)?;
            let calls = l.get(22..32)?.trim().parse().ok()?;
            let rest = l.get(34..)?;
            let name_at = rest.len() - rest.trim_start().len();
            let tree = rest.get(name_at..)?;
            let (mark, name) = match tree.strip_prefix('[') {
                Some(_) => (tree[..3].to_string(), tree[4..].to_string()),
                None => ("   ".to_string(), tree.to_string()),
            };
            // Graph rows: 2 columns a level, then a 3-column mark and a
            // space before the name.
            let name_col = rest.len() - name.len();
            Some(Row {
                total,
                self_time,
                calls,
                depth: name_col.saturating_sub(4) / 2 + 1,
                name,
                mark,
            })
        })
        .collect()
}

/// The rows of the graph for the path `names` (outermost first): each row
/// whose callers shown above it are the path.
fn at_path<'a>(rows: &'a [Row], names: &[&str]) -> Vec<&'a Row> {
    let mut path: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    for r in rows {
        path.truncate(r.depth - 1);
        path.push(&r.name);
        if path == names {
            found.push(r);
        }
    }
    found
}

/// Fails a check of [`Tmux::until`] with a message.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!($($msg)*));
        }
    };
}

#[test]
fn a_real_session() {
    let exe = program();
    let native = run_native(&exe, &[]);
    assert_eq!(native.code(), Some(0), "{}", native.describe());
    let rec = record(&exe, &[], &[]);
    assert_eq!(rec.run.stdout, native.stdout);
    let report = report(&rec.dir.path);
    let info = info_json(&rec.dir.path);
    let tmux = Tmux::start(&[OsStr::new("-d"), rec.dir.path.as_os_str()]);

    // The graph, fully expanded (a small tree): the call paths of tui.c
    // with the counts of its source.
    tmux.until("the graph of tui.c", |s| {
        ensure!(s.contains(" Graph | all 2 tasks"), "no title");
        let g = rows(s);
        for (path, n) in [
            (&["main"][..], 1),
            (&["main", "parse_config"], 1),
            (&["main", "parse_config", "read_token"], 7),
            (&["main", "compute"], 3),
            (&["main", "compute", "helper_square"], 15),
            (&["main", "helper_square"], 2),
            (&["worker_main"], 1),
            (&["worker_main", "worker_step"], 4),
        ] {
            ensure!(
                calls_of(&g, path) == [n],
                "{path:?}: not one row of {n} calls"
            );
        }
        Ok(())
    });

    // Folding: search compute, Enter folds it (its helper_square row goes),
    // Enter again unfolds it.
    tmux.text("/compute");
    tmux.keys(&["Enter"]);
    tmux.until("compute found and selected", |s| {
        ensure!(s.contains("\"compute\": call path 1 of 1"), "no message");
        let sel = tmux.selected();
        ensure!(sel.ends_with("[-] compute"), "selected: {sel}");
        Ok(())
    });
    tmux.keys(&["Enter"]);
    tmux.until("compute folded", |s| {
        let g = rows(s);
        ensure!(s.contains("[+] compute"), "not folded");
        ensure!(
            at_path(&g, &["main", "compute", "helper_square"]).is_empty(),
            "its callee is still shown"
        );
        ensure!(
            calls_of(&g, &["main", "helper_square"]) == [2],
            "main's helper_square"
        );
        Ok(())
    });
    tmux.keys(&["Enter"]);
    tmux.until("compute unfolded", |s| {
        ensure!(s.contains("[-] compute"), "not unfolded");
        ensure!(
            calls_of(&rows(s), &["main", "compute", "helper_square"]) == [15],
            "its callee is not back"
        );
        Ok(())
    });
    // C folds everything: only the outermost calls are left.
    tmux.keys(&["C"]);
    tmux.until("everything folded", |s| {
        let g = rows(s);
        ensure!(s.contains("[+] main"), "main not folded");
        ensure!(g.iter().all(|r| r.depth == 1), "rows below the outermost");
        ensure!(
            g.iter().any(|r| r.name == "worker_main" && r.mark == "[+]"),
            "worker_main not folded"
        );
        Ok(())
    });

    // The report, sorted by each key: the order its numbers imply, and the
    // calls of tui.c's functions.
    let json: std::collections::HashMap<&str, &FnStat> = report
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f))
        .collect();
    let ours = ["helper_square", "read_token", "worker_step", "compute"];
    for (key, header, value) in [
        ("3", "CALLS*", (|f: &FnStat| f.calls) as fn(&FnStat) -> u64),
        ("2", "SELF*", |f: &FnStat| f.self_ns),
        ("1", "TOTAL*", |f: &FnStat| f.total_ns),
    ] {
        tmux.keys(&["R", key]);
        tmux.until(&format!("the report by {header}"), |s| {
            ensure!(s.contains(" Report |") && s.contains(header), "no header");
            let r = rows(s);
            for name in ours {
                ensure!(r.iter().any(|x| x.name == name), "no {name}");
            }
            let known: Vec<&Row> = r
                .iter()
                .filter(|x| json.contains_key(x.name.as_str()))
                .collect();
            for w in known.windows(2) {
                let (a, b) = (json[w[0].name.as_str()], json[w[1].name.as_str()]);
                ensure!(value(a) >= value(b), "{} before {}", a.name, b.name);
            }
            for x in &r {
                if let Some(f) = json.get(x.name.as_str()) {
                    ensure!(x.calls == f.calls, "{}: {} calls", x.name, x.calls);
                    for (what, (shown, res), ns) in [
                        ("total", x.total, f.total_ns),
                        ("self", x.self_time, f.self_ns),
                    ] {
                        ensure!(
                            shown.abs_diff(ns) <= res,
                            "{}: {what} {shown} ns shown, {ns} in the report",
                            x.name
                        );
                    }
                }
            }
            if key == "3" {
                // By calls: the counts of the source, in that order.
                let found: Vec<(String, u64)> = r
                    .iter()
                    .filter(|x| ours.contains(&x.name.as_str()))
                    .map(|x| (x.name.clone(), x.calls))
                    .collect();
                let want: Vec<(String, u64)> = ours
                    .iter()
                    .map(|n| n.to_string())
                    .zip([17, 7, 4, 3])
                    .collect();
                ensure!(found == want, "{found:?}");
            }
            Ok(())
        });
    }

    // Search in the report, then Enter: helper_square's two call paths in
    // the graph, the cursor on one, n to the other.
    tmux.text("/helper_sq");
    tmux.keys(&["Enter"]);
    tmux.until("helper_square found in the report", |s| {
        ensure!(s.contains("\"helper_sq\": helper_square"), "no message");
        let sel = tmux.selected();
        ensure!(sel.ends_with("  helper_square"), "selected: {sel}");
        Ok(())
    });
    tmux.keys(&["Enter"]);
    let row_calls = |line: &str| -> Option<u64> {
        line.ends_with("helper_square")
            .then(|| line.get(22..32)?.trim().parse().ok())?
    };
    let mut first = 0;
    tmux.until("the call paths of helper_square", |s| {
        ensure!(s.contains(" Graph |"), "not the graph");
        ensure!(
            s.contains("helper_square: 2 call paths, 17 calls"),
            "no message"
        );
        let g = rows(s);
        ensure!(
            calls_of(&g, &["main", "compute", "helper_square"]) == [15],
            "no path through compute"
        );
        ensure!(
            calls_of(&g, &["main", "helper_square"]) == [2],
            "no path from main"
        );
        // Only the paths to it are open.
        ensure!(
            g.iter().any(|r| r.name == "worker_main" && r.mark == "[+]"),
            "worker_main open"
        );
        ensure!(
            g.iter().all(|r| r.name != "read_token"),
            "parse_config open"
        );
        let sel = tmux.selected();
        first = row_calls(&sel).ok_or(format!("selected: {sel}"))?;
        Ok(())
    });
    tmux.keys(&["n"]);
    let mut second = 0;
    tmux.until("the other call path", |s| {
        ensure!(s.contains("helper_square: call path 2 of 2"), "no message");
        let sel = tmux.selected();
        second = row_calls(&sel).ok_or(format!("selected: {sel}"))?;
        Ok(())
    });
    let mut both = [first, second];
    both.sort();
    assert_eq!(both, [2, 15]);

    // The task list: the thread's task shows its own calls only.
    let thread_tid = info["tasks"][1]["tid"].as_u64().unwrap();
    tmux.keys(&["T"]);
    tmux.wait_for(" Tasks |");
    tmux.keys(&["Down", "Down", "Enter"]);
    tmux.until("the thread's graph", |s| {
        ensure!(
            s.contains(&format!(" Graph | task {thread_tid} ")),
            "no title"
        );
        let g = rows(s);
        ensure!(
            calls_of(&g, &["worker_main", "worker_step"]) == [4],
            "no worker_step"
        );
        ensure!(g.iter().all(|r| r.name != "main"), "main shown");
        Ok(())
    });

    // Help, closed by any key.
    tmux.keys(&["?"]);
    tmux.wait_for("this help (any key closes it)");
    tmux.keys(&["x"]);
    tmux.wait("the help closed", |s| {
        !s.contains("this help") && s.contains("worker_step")
    });

    // A tiny terminal, keys on it, then back.
    let out = tmux
        .cmd()
        .args(["resize-window", "-x", "20", "-y", "5"])
        .output()
        .unwrap();
    assert!(out.status.success());
    tmux.wait_for(" Graph | task");
    for k in [
        "R", "End", "T", "PageDown", "?", "x", "G", "E", "Up", "/", "z", "Enter",
    ] {
        tmux.keys(&[k]);
    }
    let out = tmux
        .cmd()
        .args(["resize-window", "-x", "120", "-y", "40"])
        .output()
        .unwrap();
    assert!(out.status.success());
    tmux.keys(&["T"]);
    tmux.wait_for(" Tasks | task");

    // q: the TUI ends with status 0, the shell's screen and terminal modes
    // are back.
    tmux.keys(&["q"]);
    let s = tmux.wait_for("modes-end");
    assert!(
        s.contains("before-tui") && s.contains("tui exited 0"),
        "{s}"
    );
    let modes: Vec<&str> = s
        .lines()
        .skip_while(|l| !l.starts_with("tui exited"))
        .skip(1)
        .take(2)
        .collect();
    assert!(modes.contains(&"icanon") && modes.contains(&"echo"), "{s}");
}

fn calls_of(rows: &[Row], path: &[&str]) -> Vec<u64> {
    at_path(rows, path).iter().map(|r| r.calls).collect()
}

/// Ctrl-C ends the TUI with status 0 and restores the terminal; a trace
/// without calls to show (all filtered out) shows an empty graph.
#[test]
fn ctrl_c_and_an_empty_graph() {
    let rec = record(&program(), &[], &[]);
    let tmux = Tmux::start(&[
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("--tid"),
        OsStr::new("1"),
    ]);
    tmux.wait_for("(no calls)");
    tmux.keys(&["R"]);
    tmux.wait("an empty report", |s| {
        s.contains(" Report |") && s.contains("(no calls)")
    });
    tmux.keys(&["C-c"]);
    let s = tmux.wait_for("modes-end");
    assert!(
        s.contains("before-tui") && s.contains("tui exited 0"),
        "{s}"
    );
    assert!(s.lines().any(|l| l == "icanon"), "{s}");
}

/// uftrace's `tui --report -f FIELDS -s KEYS`: the TUI opens on the
/// report with those columns, ordered by calls; each function's calls are
/// `fctrace report`'s (another reader of the same trace). `-s` without
/// `--report`, and a field the TUI lacks, are refused.
#[test]
fn report_fields_and_sort_from_the_command_line() {
    let rec = record(&program(), &[], &[]);
    let tmux = Tmux::start(&[
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("--report"),
        OsStr::new("-f"),
        OsStr::new("call,total-avg"),
        OsStr::new("-s"),
        OsStr::new("call"),
    ]);
    let screen = tmux.wait("the report", |s| {
        s.contains(" Report |") && s.contains("CALLS*  TOTAL-AVG  FUNCTION")
    });
    let want: std::collections::BTreeMap<String, u64> = report(&rec.dir.path)
        .functions
        .into_iter()
        .map(|f| (f.name, f.calls))
        .collect();
    let mut shown = Vec::new();
    for line in screen.lines().skip_while(|l| !l.contains("CALLS*")).skip(1) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(calls), Some(name)) = (words.first(), words.last()) else {
            break;
        };
        let Ok(calls) = calls.parse::<u64>() else {
            break;
        };
        assert_eq!(want.get(*name), Some(&calls), "{name}\n{screen}");
        shown.push(calls);
    }
    assert!(shown.len() >= 3, "{screen}");
    assert!(shown.windows(2).all(|w| w[0] >= w[1]), "{screen}");
    tmux.keys(&["q"]);
    tmux.wait_for("modes-end");

    for (args, said) in [
        (vec!["-s", "call"], "give it with --report"),
        (
            vec!["--report", "-f", "self-stdv"],
            "fctrace report -f self-stdv",
        ),
    ] {
        let mut all = vec![
            OsStr::new("tui"),
            OsStr::new("-d"),
            rec.dir.path.as_os_str(),
        ];
        all.extend(args.iter().map(OsStr::new));
        let r = fctrace(&all);
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(r.stderr.contains(said), "{}", r.describe());
    }
}

/// Without a terminal: a clear error, status 1.
#[test]
fn needs_a_terminal() {
    let rec = record(&program(), &[], &[]);
    let r = fctrace(&[
        OsStr::new("tui"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert_eq!(
        r.stderr,
        "fctrace: fctrace tui needs a terminal; use replay/report/graph\n",
        "{}",
        r.describe()
    );
}

/// `--exit-after-load` builds the model without a terminal; on a missing
/// or damaged trace it fails as replay does.
#[test]
fn loading_without_a_terminal_and_damaged_traces() {
    let rec = record(&program(), &[], &[]);
    // --show-runtime: every recorded event goes through the model (by
    // default the C runtime's calls are hidden, as in the tree).
    let load = |dir: &Path| {
        fctrace(&[
            OsStr::new("tui"),
            OsStr::new("--exit-after-load"),
            OsStr::new("--show-runtime"),
            OsStr::new("-d"),
            dir.as_os_str(),
        ])
    };
    let r = load(&rec.dir.path);
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let events = info_json(&rec.dir.path)["events"].as_u64().unwrap();
    assert!(
        r.stdout.starts_with(&format!("{events} events, 2 tasks, ")),
        "{}",
        r.describe()
    );

    // Its line to a full disk: an error said, no panic.
    let full = std::process::Command::new(fctrace_bin())
        .args(["tui", "--exit-after-load", "-d"])
        .arg(&rec.dir.path)
        .stdout(fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let missing = rec.dir.path.join("nothing-here");
    let (t, p) = (
        load(&missing),
        fctrace(&[OsStr::new("replay"), OsStr::new("-d"), missing.as_os_str()]),
    );
    assert_eq!(
        (t.code(), p.code()),
        (Some(1), Some(1)),
        "{}\n{}",
        t.describe(),
        p.describe()
    );
    assert_eq!(t.stderr, p.stderr);

    // A flipped byte in the main task's events.
    let file = info_json(&rec.dir.path)["tasks"][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    let path = rec.dir.path.join(file);
    let mut bytes = fs::read(&path).unwrap();
    assert!(bytes.len() > 60);
    bytes[60] ^= 0xff;
    fs::write(&path, bytes).unwrap();
    let t = load(&rec.dir.path);
    assert_eq!(t.code(), Some(1), "{}", t.describe());
    assert!(t.stderr.contains("checksum mismatch"), "{}", t.describe());
    // Without a terminal: that error (once the trace opened).
    let r = fctrace(&[
        OsStr::new("tui"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("needs a terminal"), "{}", r.describe());
}

/// A damaged trace in the TUI: the readable part is shown with the error
/// in the status line; quitting prints the error and exits with status 1.
#[test]
fn damaged_trace_in_the_tui() {
    let rec = record(&program(), &[], &[]);
    let file = info_json(&rec.dir.path)["tasks"][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    let path = rec.dir.path.join(file);
    let mut bytes = fs::read(&path).unwrap();
    bytes[60] ^= 0xff;
    fs::write(&path, bytes).unwrap();
    let tmux = Tmux::start(&[OsStr::new("-d"), rec.dir.path.as_os_str()]);
    tmux.wait("the error", |s| {
        s.contains("Any key closes this.") && s.contains("error: ") && s.contains("checksum")
    });
    tmux.keys(&["x"]);
    // The thread's calls are readable.
    tmux.wait("the graph", |s| {
        !s.contains("checksum") && s.contains(" Graph |") && s.contains("worker_step")
    });
    tmux.keys(&["q"]);
    let s = tmux.wait_for("modes-end");
    assert!(s.contains("tui exited 1"), "{s}");
    // (The message may be wrapped at the pane's width, anywhere: its
    // length depends on the trace's path.)
    assert!(s.replace('\n', "").contains("checksum mismatch"), "{s}");
}

/// SIGTERM sent to the TUI: it restores the terminal and exits with status
/// 143 (128 + 15), as a process ended by it.
#[test]
fn sigterm_restores_the_terminal() {
    let rec = record(&program(), &[], &[]);
    let tmux = Tmux::start(&[OsStr::new("-d"), rec.dir.path.as_os_str()]);
    tmux.wait_for(" Graph | all 2 tasks");
    let pid = tmux.tui_pid();
    let pid = pid.as_str();
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, fctrace_bin().canonicalize().unwrap());
    let kill = Command::new("kill").args(["-TERM", pid]).status().unwrap();
    assert!(kill.success());
    let s = tmux.wait_for("modes-end");
    assert!(
        s.contains("before-tui") && s.contains("tui exited 143"),
        "{s}"
    );
    assert!(s.contains("fctrace: tui ended by signal 15"), "{s}");
    assert!(
        s.lines().any(|l| l == "icanon") && s.lines().any(|l| l == "echo"),
        "{s}"
    );
}

/// The terminal closed under the TUI (its tmux server killed: the pty's
/// hangup): fctrace ends within seconds instead of spinning on the
/// closed terminal (crossterm's wait for a key reads end-of-file again
/// and again), as it once did at full CPU for hours.
#[test]
fn a_closed_terminal_ends_the_tui() {
    let rec = record(&program(), &[], &[]);
    let tmux = Tmux::start(&[OsStr::new("-d"), rec.dir.path.as_os_str()]);
    tmux.wait_for(" Graph | all 2 tasks");
    let pid = tmux.tui_pid();
    let out = tmux.cmd().arg("kill-server").output().unwrap();
    assert!(out.status.success());
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists()
        && fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("fctrace tui ({pid}) still runs 20 s after its terminal closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// tui_more.c built with -g (its functions' source lines in its DWARF).
fn more_program() -> PathBuf {
    c_program("tui_more.c", "-g", &["-O0", "-g"])
}

/// The line of `tests/programs/tui_more.c` that starts with `head` (as
/// `grep -n` finds it), and the source file's path.
fn defined_at(head: &str) -> (PathBuf, u64) {
    let path = program_source("tui_more.c");
    let text = fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with(head))
        .unwrap_or_else(|| panic!("no `{head}` in tui_more.c"))
        + 1;
    (path, line as u64)
}

/// The address of `symbol` in `exe`, as `nm` lists it.
fn nm_address(exe: &Path, symbol: &str) -> u64 {
    require_tool("nm", "binutils");
    let out = Command::new("nm").arg(exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let (addr, _, name) = (w.next()?, w.next()?, w.next()?);
            (name == symbol).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("nm: no {symbol} in {}", exe.display()))
}

/// A graph row's cells by the fields' widths (each cell then a space),
/// and the function's name after them.
fn cells(line: &str, widths: &[usize]) -> Option<(Vec<String>, String)> {
    let mut at = 0;
    let mut out = Vec::new();
    for w in widths {
        out.push(line.get(at..at + w)?.trim().to_string());
        at += w + 1;
    }
    let rest = line.get(at..)?.trim();
    let name = rest.rsplit(' ').next()?.to_string();
    Some((out, name))
}

/// `l` (the longest child), `f` (the fields), `O` (the source line in
/// $EDITOR) and `i` (the info view) on tui_more.c's trace.
#[test]
fn longest_child_fields_source_and_info() {
    let exe = more_program();
    let rec = record(&exe, &["once"], &[]);
    assert_eq!(rec.run.stdout, "parent\n");
    let scratch = tempfile::tempdir().unwrap();
    let args_file = scratch.path().join("editor-args");
    let editor = scratch.path().join("editor.sh");
    fs::write(
        &editor,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n",
            args_file.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&editor, fs::Permissions::from_mode(0o755)).unwrap();
    let tmux = Tmux::start_with(
        &[OsStr::new("-d"), rec.dir.path.as_os_str()],
        &[("EDITOR", editor.as_os_str())],
    );
    tmux.wait_for(" Graph | all 1 tasks");

    // l on waiter, folded first: nap_long (60 ms of the 5, 60 and 20 ms
    // naps it calls), waiter unfolded.
    tmux.text("/waiter");
    tmux.keys(&["Enter"]);
    tmux.until("waiter selected", |_| {
        let sel = tmux.selected();
        ensure!(sel.ends_with("[-] waiter"), "selected: {sel}");
        Ok(())
    });
    tmux.keys(&["Enter"]);
    tmux.wait_for("[+] waiter");
    tmux.keys(&["l"]);
    tmux.until("waiter's longest child", |s| {
        ensure!(s.contains("[-] waiter"), "waiter still folded");
        ensure!(
            s.contains("longest child of waiter: nap_long ("),
            "no message"
        );
        let sel = tmux.selected();
        ensure!(sel.ends_with("[-] nap_long"), "selected: {sel}");
        let ms = parse_duration(sel.get(0..10).unwrap_or_default()).map(|(ns, _)| ns / 1_000_000);
        ensure!(ms >= Some(60), "nap_long's total: {ms:?} ms");
        Ok(())
    });
    // Its only child, nap, whose only child is nanosleep, which calls
    // nothing.
    for (from, to) in [("nap_long", "[-] nap"), ("nap", "   nanosleep")] {
        tmux.keys(&["l"]);
        tmux.until(&format!("{from}'s longest child"), |_| {
            let sel = tmux.selected();
            ensure!(sel.ends_with(to), "selected: {sel}");
            Ok(())
        });
    }
    tmux.keys(&["l"]);
    tmux.wait_for("nanosleep calls nothing");

    // O on waiter: the editor gets +LINE FILE of waiter's definition in
    // tui_more.c, and the TUI comes back.
    let (source, line) = defined_at("__attribute__((noipa)) void waiter(void)");
    tmux.text("/waiter");
    tmux.keys(&["Enter"]);
    tmux.until("waiter selected again", |_| {
        let sel = tmux.selected();
        ensure!(sel.ends_with("] waiter"), "selected: {sel}");
        Ok(())
    });
    tmux.keys(&["O"]);
    tmux.wait_for(&format!("waiter: {}:{line}", source.display()));
    let start = Instant::now();
    let written = loop {
        match fs::read_to_string(&args_file) {
            Ok(t) if t.ends_with('\n') => break t,
            _ if start.elapsed() > DEADLINE => panic!("the editor never ran"),
            _ => std::thread::sleep(Duration::from_millis(30)),
        }
    };
    assert_eq!(written, format!("+{line}\n{}\n", source.display()));
    tmux.wait("the graph back", |s| {
        s.contains(" Graph | all 1 tasks") && s.contains("nap_long")
    });

    // f: total, total-avg, total-min, total-max, call and addr (self off).
    tmux.keys(&["f"]);
    tmux.wait_for("[x] total ");
    for k in [
        "Down", "Space", "Down", "Space", "Down", "Space", "Down", "Space", "Down", "Down", "Down",
        "Down", "Down", "Space", "f",
    ] {
        tmux.keys(&[k]);
    }
    tmux.wait_for("fields: total,total-avg,total-min,total-max,call,addr");
    let ticker_addr = nm_address(&exe, "ticker");
    let widths = [10, 10, 10, 10, 10, 14];
    tmux.until("ticker's fields", |s| {
        let head = s
            .lines()
            .find(|l| l.contains("FUNCTION"))
            .ok_or("no header")?;
        let (names, _) = cells(head, &widths).ok_or("short header")?;
        ensure!(
            names
                == [
                    "TOTAL",
                    "TOTAL-AVG",
                    "TOTAL-MIN",
                    "TOTAL-MAX",
                    "CALLS",
                    "ADDR"
                ],
            "header: {head}"
        );
        let row = s
            .lines()
            .filter_map(|l| cells(l, &widths))
            .find(|(_, name)| name == "ticker")
            .ok_or("no ticker row")?;
        let d = |i: usize| parse_duration(&row.0[i]).ok_or(format!("cell {i}: {:?}", row.0));
        let (total, avg, min, max) = (d(0)?, d(1)?, d(2)?, d(3)?);
        ensure!(row.0[4] == "4", "calls: {:?}", row.0);
        ensure!(
            row.0[5] == format!("{ticker_addr:#x}"),
            "addr {:?}, nm: {ticker_addr:#x}",
            row.0[5]
        );
        // 2, 4, 6 and 8 ms naps: the shortest at least 2 ms, the longest
        // at least 8; the average a quarter of the total.
        ensure!(min.0 >= 2_000_000, "min {min:?}");
        ensure!(max.0 >= 8_000_000, "max {max:?}");
        ensure!(min.0 <= avg.0 && avg.0 <= max.0, "{min:?} {avg:?} {max:?}");
        ensure!(
            (avg.0 * 4).abs_diff(total.0) <= 4 * avg.1 + total.1 + 4,
            "avg {avg:?} total {total:?}"
        );
        Ok(())
    });

    // i: the info view, with the command line this test ran.
    tmux.keys(&["i"]);
    tmux.until("the info view", |s| {
        ensure!(s.contains(" Info |"), "not the info view");
        ensure!(
            s.contains(&format!("Command line:   {} once", exe.display())),
            "no command line"
        );
        ensure!(
            s.contains(&format!("Program:        {}", exe.display())),
            "no program"
        );
        Ok(())
    });
    tmux.keys(&["q"]);
    let s = tmux.wait_for("modes-end");
    assert!(s.contains("tui exited 0"), "{s}");
}

/// `O` on a program built without -g: a message, no editor, no crash.
#[test]
fn source_line_without_debug_information() {
    let exe = c_program("tui_more.c", "-nog", &["-O0"]);
    let rec = record(&exe, &[], &[]);
    let scratch = tempfile::tempdir().unwrap();
    let ran = scratch.path().join("ran");
    let editor = format!("touch {}", ran.display());
    let tmux = Tmux::start_with(
        &[OsStr::new("-d"), rec.dir.path.as_os_str()],
        &[("EDITOR", OsStr::new(&editor))],
    );
    tmux.wait_for(" Graph | all 1 tasks");
    tmux.text("/waiter");
    tmux.keys(&["Enter"]);
    tmux.until("waiter selected", |_| {
        let sel = tmux.selected();
        ensure!(sel.ends_with("[-] waiter"), "selected: {sel}");
        Ok(())
    });
    tmux.keys(&["O"]);
    let file = exe.file_name().unwrap().to_string_lossy();
    tmux.wait_for(&format!(
        "waiter: no source line in {file}'s debug information"
    ));
    tmux.keys(&["q"]);
    let s = tmux.wait_for("modes-end");
    assert!(s.contains("tui exited 0"), "{s}");
    assert!(!ran.exists(), "the editor ran");
}

/// `S`: a trace of two sessions (tui_more.c execs itself) opens on the
/// session list, as uftrace's; each session shows its own program's calls.
#[test]
fn session_list() {
    let exe = more_program();
    let rec = record(&exe, &["again"], &[]);
    assert_eq!(rec.run.stdout, "parent\nchild 9\n");
    let tmux = Tmux::start(&[OsStr::new("-d"), rec.dir.path.as_os_str()]);
    // Wide enough for the program's path.
    let out = tmux
        .cmd()
        .args(["resize-window", "-x", "400", "-y", "40"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let pid = info_json(&rec.dir.path)["tasks"][0]["pid"]
        .as_u64()
        .unwrap();
    let program = exe.display().to_string();
    tmux.until("the session list", |s| {
        ensure!(s.contains(" Sessions | all 2 tasks"), "not the sessions");
        let rows: Vec<&str> = s
            .lines()
            .filter(|l| l.ends_with(&format!("  {program}")))
            .collect();
        ensure!(rows.len() == 2, "{rows:?}");
        for r in rows {
            let w: Vec<&str> = r.split_whitespace().collect();
            // SESSION PID TASKS CALLS TOTAL(2 words) PROGRAM
            ensure!(w.get(1) == Some(&pid.to_string().as_str()), "pid: {r}");
            ensure!(w.get(2) == Some(&"1"), "tasks: {r}");
        }
        Ok(())
    });
    // The second session: the exec'd run, main calling child_work 3 times.
    tmux.keys(&["Down", "Down", "Enter"]);
    tmux.until("the second session's graph", |s| {
        ensure!(s.contains(" Graph | session "), "no title");
        let g = rows(s);
        ensure!(
            calls_of(&g, &["main", "child_work"]) == [3],
            "no child_work"
        );
        ensure!(g.iter().all(|r| r.name != "waiter"), "waiter shown");
        Ok(())
    });
    tmux.keys(&["S"]);
    tmux.wait_for(" Sessions | session ");
    tmux.keys(&["Up", "Enter"]);
    tmux.until("the first session's graph", |s| {
        ensure!(s.contains(" Graph | session "), "no title");
        let g = rows(s);
        ensure!(calls_of(&g, &["main", "ticker"]) == [4], "no ticker");
        ensure!(g.iter().all(|r| r.name != "child_work"), "child_work shown");
        Ok(())
    });
    tmux.keys(&["q"]);
    let s = tmux.wait_for("modes-end");
    assert!(s.contains("tui exited 0"), "{s}");
}
