//! uftrace's `replay` options in fctrace: `-C` with uftrace's meaning
//! (the callers and the function as a leaf; `--caller-tree` keeps its
//! calls), `--flat`, `--no-comment`, `--task-newline`, `--column-view`,
//! `-f addr`, `--format html` and `--disable` at replay, on
//! uftrace_readers.c, whose header lists its calls; the expected lines
//! come from that structure, the tids it prints and its symbol table
//! (`nm`), in the shapes uftrace's documentation gives.

use fctrace_testkit::*;
use std::collections::BTreeMap;
use std::process::Command;

/// The program recorded, with the tids of its main thread and its worker.
pub(crate) fn recorded() -> (Recorded, u32, u32) {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let rec = record(&exe, &[], &[]);
    let tid = |who: &str| -> u32 {
        rec.run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(who)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{who}` tid in {}", rec.run.stdout))
    };
    let (main, worker) = (tid("main "), tid("worker "));
    (rec, main, worker)
}

/// The call lines of a replay per tid: the text after `[TID] | `, with
/// its indent.
fn by_tid(text: &str) -> BTreeMap<u32, Vec<String>> {
    let mut m: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((left, call)) = l.split_once(" | ") else {
            continue;
        };
        let Some(tid) = left
            .rsplit_once('[')
            .and_then(|(_, t)| t.split(']').next())
            .and_then(|t| t.trim().parse().ok())
        else {
            continue;
        };
        m.entry(tid).or_default().push(call.to_string());
    }
    m
}

/// `lines` without the calls not named in `keep` (libc calls).
fn only(lines: &[String], keep: &[&str]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            let t = l.trim_start();
            let name = t
                .strip_prefix("} /* ")
                .map(|r| r.trim_end_matches(" */"))
                .unwrap_or_else(|| t.split('(').next().unwrap_or(t));
            keep.contains(&name)
        })
        .cloned()
        .collect()
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn caller_filter_shows_the_function_as_a_leaf() {
    let (rec, main, worker) = recorded();
    let t = by_tid(&fctrace_on_quietly("replay", &rec.dir.path, &["-C", "b"]));
    // uftrace: "It makes the function as leaf and prints the parent
    // functions to the function" (c under b is hidden).
    let a_b = ["  a() {", "    b();", "  } /* a */"];
    let mut want_main = vec!["main() {"];
    want_main.extend(a_b);
    want_main.extend(a_b);
    want_main.push("} /* main */");
    let mut want_worker = vec!["worker() {"];
    want_worker.extend(a_b);
    want_worker.push("} /* worker */");
    assert_eq!(t[&main], strs(&want_main), "main's lines");
    assert_eq!(t[&worker], strs(&want_worker), "worker's lines");
    assert_eq!(t.len(), 2);

    // --caller-tree: b with everything under it.
    let t = by_tid(&fctrace_on_quietly(
        "replay",
        &rec.dir.path,
        &["-C", "b", "--caller-tree"],
    ));
    let want = strs(&[
        "worker() {",
        "  a() {",
        "    b() {",
        "      c() {",
        "        leaf();",
        "        leaf();",
        "      } /* c */",
        "    } /* b */",
        "  } /* a */",
        "} /* worker */",
    ]);
    let lines: Vec<String> = t[&worker]
        .iter()
        .map(|l| {
            l.split_once(';')
                .map_or(l.clone(), |(c, _)| format!("{c};"))
        })
        .map(|l| l.replace(" us", ""))
        .collect();
    assert_eq!(lines, want);
}

#[test]
fn flat_lists_every_entry_and_exit_in_uftrace_shape() {
    let (rec, _main, worker) = recorded();
    let text = fctrace_on_quietly("replay", &rec.dir.path, &["--flat"]);
    // `[N] ==> TID/DEPTH: ip (NAME), time (NS)` and
    // `[N] <== TID/DEPTH: ip (NAME), time (NS:DURATION)`.
    let mut seen = Vec::new();
    let mut open: Vec<(String, u64)> = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let rest = l
            .strip_prefix(&format!("[{n}] "))
            .unwrap_or_else(|| panic!("line {n} not numbered: {l}"));
        let (dir, rest) = rest.split_at(3);
        let (who, rest) = rest.trim_start().split_once(": ip (").expect(l);
        let (tid, depth) = who.split_once('/').expect(l);
        let (name, time) = rest.split_once("), time (").expect(l);
        let time = time.strip_suffix(')').expect(l);
        if tid.parse::<u32>().unwrap() != worker {
            continue;
        }
        let depth: usize = depth.parse().unwrap();
        match dir {
            "==>" => {
                assert_eq!(depth, open.len(), "{l}");
                open.push((name.to_string(), time.parse().unwrap()));
            }
            "<==" => {
                let (ns, dur) = time.split_once(':').expect(l);
                let (ns, dur): (u64, u64) = (ns.parse().unwrap(), dur.parse().unwrap());
                let (top, entry) = open.pop().expect(l);
                assert_eq!((top.as_str(), depth), (name, open.len()), "{l}");
                assert_eq!(dur, ns - entry, "{l}: duration is exit - entry");
            }
            _ => panic!("not an entry nor an exit: {l}"),
        }
        if ["worker", "a", "b", "c", "leaf"].contains(&name) {
            seen.push(format!("{dir} {name}/{depth}"));
        }
    }
    let want = [
        "==> worker/0",
        "==> a/1",
        "==> b/2",
        "==> c/3",
        "==> leaf/4",
        "<== leaf/4",
        "==> leaf/4",
        "<== leaf/4",
        "<== c/3",
        "<== b/2",
        "==> leaf/2",
        "<== leaf/2",
        "<== a/1",
        "<== worker/0",
    ];
    assert_eq!(seen, strs(&want));
}

#[test]
fn no_comment_task_newline_and_column_view() {
    let (rec, main, worker) = recorded();
    let dir = &rec.dir.path;
    // --no-comment: closing lines are a bare `}`.
    let t = by_tid(&fctrace_on_quietly("replay", dir, &["--no-comment"]));
    let w = &t[&worker];
    let opens = w.iter().filter(|l| l.ends_with("() {")).count();
    let closes = w.iter().filter(|l| l.trim() == "}").count();
    assert_eq!(
        (opens, closes),
        (4, 4),
        "worker, a, b, c open and close: {w:#?}"
    );
    assert!(w.iter().all(|l| !l.contains("/*")), "{w:#?}");

    // --task-newline: an empty line (fields blank, then `|`) exactly where
    // the task changes (a new task's header line `# task N: ...` is one).
    let text = fctrace_on_quietly("replay", dir, &["--task-newline"]);
    let mut prev: Option<u32> = None;
    let mut blank = false;
    let mut switches = 0;
    for l in text.lines().skip(1) {
        if l.starts_with("# task ") {
            blank = true;
            continue;
        }
        if l.trim() == "|" {
            assert!(!blank, "two empty lines in a row");
            blank = true;
            continue;
        }
        let tid: u32 = l
            .split('[')
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if let Some(p) = prev {
            assert_eq!(
                blank,
                p != tid,
                "an empty line iff the task changes, before: {l}"
            );
            switches += usize::from(p != tid);
        }
        prev = Some(tid);
        blank = false;
    }
    assert!(switches >= 2, "{text}");

    // --column-view: the worker, second to print, 5 levels (10 spaces)
    // further right.
    let t = by_tid(&fctrace_on_quietly(
        "replay",
        dir,
        &["--column-view", "--column-offset", "5"],
    ));
    assert_eq!(t[&main][0], "main() {");
    assert_eq!(t[&worker][0], "          worker() {");
    assert!(
        t[&worker].contains(&"            a() {".to_string()),
        "{:#?}",
        t[&worker]
    );
}

/// The value of `sym` in the symbol table of `exe` (`nm`).
fn nm_value(exe: &std::path::Path, sym: &str) -> u64 {
    let out = Command::new("nm")
        .arg(exe)
        .output()
        .expect("nm: apt-get install binutils");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (v, _, name) = (f.next()?, f.next()?, f.next()?);
            (name == sym).then(|| u64::from_str_radix(v, 16).ok())?
        })
        .unwrap_or_else(|| panic!("{sym} not in nm's output"))
}

#[test]
fn output_field_addr_is_the_functions_address() {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let (rec, _, _) = recorded();
    let text = fctrace_on_quietly("replay", &rec.dir.path, &["-f", "addr"]);
    assert!(
        text.lines().next().unwrap().contains("ADDRESS"),
        "{}",
        clip(&text, 500)
    );
    let mut addr: BTreeMap<String, u64> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (a, call) = l.split_once(" | ").expect(l);
        let name = call.trim().trim_start_matches("} /* ");
        let name = name.split(['(', ' ']).next().unwrap().to_string();
        let a = u64::from_str_radix(a.trim(), 16).expect(l);
        if let Some(old) = addr.insert(name.clone(), a) {
            assert_eq!(old, a, "{name} at two addresses");
        }
    }
    // The process's addresses are the file's moved by one load address.
    let base = addr["a"] - nm_value(&exe, "a");
    for f in ["main", "worker", "b", "c", "leaf"] {
        assert_eq!(addr[f] - base, nm_value(&exe, f), "{f}");
    }
}

#[test]
fn html_format_and_disable_at_replay() {
    let (rec, main, _) = recorded();
    let dir = &rec.dir.path;
    let html = fctrace_on_quietly("replay", dir, &["--format", "html"]);
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", clip(&html, 300));
    assert!(html.trim_end().ends_with("</html>"));
    let pre = html
        .split_once("<pre>\n")
        .unwrap()
        .1
        .split_once("</pre>")
        .unwrap()
        .0;
    let t = by_tid(pre);
    assert_eq!(
        only(&t[&main], &["main", "a"]),
        strs(&[
            "main() {",
            "  a() {",
            "  } /* a */",
            "  a() {",
            "  } /* a */",
            "} /* main */"
        ])
    );

    // --disable: nothing until a trace_on trigger (c), everything after.
    let t = by_tid(&fctrace_on_quietly(
        "replay",
        dir,
        &["--disable", "-T", "c@trace_on"],
    ));
    let lines: Vec<String> = only(&t[&main], &["a", "b", "c", "leaf"])
        .iter()
        .map(|l| l.trim().to_string())
        .collect();
    let want = [
        "c() {",
        "leaf();",
        "leaf();",
        "} /* c */",
        "leaf();",
        "a() {",
        "b() {",
        "c() {",
        "leaf();",
        "leaf();",
        "} /* c */",
        "} /* b */",
        "leaf();",
        "} /* a */",
    ];
    assert_eq!(lines, strs(&want));
}

#[test]
fn no_event_leaves_out_the_kernel_lines() {
    let exe = c_program("uftrace_readers.c", "-O0", &["-O0", "-pthread"]);
    let rec = record(&exe, &[], &["-k"]);
    let worker: u32 = rec
        .run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("worker ")?.parse().ok())
        .unwrap();
    // With the kernel's lines: the worker's gettid system call returns its
    // tid, under syscall().
    let t = by_tid(&fctrace_on("replay", &rec.dir.path, &[]));
    assert!(
        t[&worker]
            .iter()
            .any(|l| l.trim() == format!("gettid() = {worker}")),
        "{:#?}",
        t[&worker]
    );
    // --no-event: the worker's calls only, as its source has them.
    let t = by_tid(&fctrace_on("replay", &rec.dir.path, &["--no-event"]));
    let lines: Vec<String> = t[&worker]
        .iter()
        .map(|l| l.split(" /*").next().unwrap().trim_end().to_string())
        .collect();
    let want = [
        "worker() {",
        "  syscall();",
        "  printf();",
        "  fflush();",
        "  a() {",
        "    b() {",
        "      c() {",
        "        leaf();",
        "        leaf();",
        "      }",
        "    }",
        "    leaf();",
        "  }",
        "}",
    ];
    assert_eq!(lines, strs(&want));
}
