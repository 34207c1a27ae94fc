//! Helpers shared by signals.rs and self_inspect.rs: replay trees with
//! signal markers, and recording programs that may die by a signal.

#![allow(dead_code)]

use crate::common::*;
use std::path::Path;

/// The label a signal marker gets in expected trees: `@SIGUSR1`.
pub fn marker_label(token: &str) -> String {
    let t = token.trim();
    let num: Option<i32> = t
        .strip_prefix("SIG")
        .unwrap_or(t)
        .parse()
        .ok()
        .or_else(|| {
            t.strip_prefix("SIGRTMIN+")
                .and_then(|n| n.parse::<i32>().ok().map(|n| 34 + n))
        })
        .or_else(|| (t == "SIGRTMIN").then_some(34));
    let name = match num {
        Some(5) => "SIGTRAP".to_string(),
        Some(6) => "SIGABRT".to_string(),
        Some(10) => "SIGUSR1".to_string(),
        Some(11) => "SIGSEGV".to_string(),
        Some(12) => "SIGUSR2".to_string(),
        Some(14) => "SIGALRM".to_string(),
        Some(34) => "SIGRTMIN".to_string(),
        Some(n) => format!("SIG{n}"),
        None => t.to_string(),
    };
    format!("@{name}")
}

/// Replay's text with every signal marker line turned into a leaf call
/// labelled `@SIGNAME` at the same depth, so that the harness's parser
/// checks its place in the tree like any call's.
pub fn with_markers_as_leaves(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let Some(bar) = line.find("] | ") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let rest = &line[bar + 4..];
        let body = rest.trim_start();
        let indent = &rest[..rest.len() - body.len()];
        let marker = body
            .strip_prefix("/*")
            .and_then(|b| b.trim_end().strip_suffix("*/"))
            .and_then(|b| b.trim().strip_prefix("signal "));
        match marker {
            Some(tok) if !body.starts_with('}') => {
                let tid_part = &line[line.find('[').unwrap_or(0)..bar + 1];
                out.push_str(&format!(
                    "   0.000 us {tid_part} | {indent}{};\n",
                    marker_label(tok)
                ));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The replay of `dir`, parsed (well nested) with markers as leaves.
#[track_caller]
pub fn replay_with_markers(dir: &Path) -> (Replay, String) {
    let text = replay_text(dir);
    let conv = with_markers_as_leaves(&text);
    let r = parse_replay(&conv).unwrap_or_else(|e| {
        panic!(
            "replay of {} is not a well-formed call tree: {e}\n--- replay ---\n{}",
            dir.display(),
            clip(&text, 8000)
        )
    });
    (r, text)
}

/// `fctrace record -d DIR exe args`, whatever its status: when a signal
/// kills the program, fctrace ends by the same signal.
#[track_caller]
pub fn record_dying(exe: &Path, args: &[&str]) -> Recorded {
    let dir = TraceDir::new("signals");
    let r = run_with_timeout(
        std::process::Command::new(fctrace_bin())
            .arg("record")
            .arg("-d")
            .arg(&dir.path)
            .arg(exe)
            .args(args),
        FCTRACE_TIMEOUT,
    );
    assert!(
        !r.stderr.contains("panicked"),
        "fctrace panicked\n{}",
        r.describe()
    );
    Recorded { dir, run: r }
}

/// The exit status as a shell shows it (128+N for signal N).
pub fn status_of(r: &Run) -> i32 {
    match (r.code(), r.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => unreachable!(),
    }
}

/// Runs `exe args` natively and under fctrace: same stdout and stderr,
/// same exit status or signal. Returns the recording.
#[track_caller]
pub fn record_same(exe: &Path, args: &[&str]) -> Recorded {
    let native = run(std::process::Command::new(exe).args(args));
    let rec = record_dying(exe, args);
    assert_eq!(
        rec.run.stdout,
        native.stdout,
        "stdout differs\n{}",
        rec.run.describe()
    );
    // fctrace itself prints nothing but warnings: none expected.
    assert_eq!(
        rec.run.stderr,
        native.stderr,
        "stderr differs\n{}",
        rec.run.describe()
    );
    assert_eq!(
        status_of(&rec.run),
        status_of(&native),
        "exit status differs: native {}\n{}",
        native.describe(),
        rec.run.describe()
    );
    rec
}
