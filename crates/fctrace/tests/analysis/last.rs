//! `replay --last N`: each thread's last N calls, with the calls open
//! around them, the thread that crashed first. Programs built here make
//! many calls and then crash with SIGSEGV deep in a chain of calls; the
//! expected lines come from a model of the calls each program makes (as
//! its source says), cut as `--last` cuts it.

use fctrace_testkit::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Calls of `step` in the loop of [`CRASH`].
const CALLS: usize = 100_000;

/// main > run (CALLS calls of step) > parse > step, check, deref_null:
/// a read through a null pointer.
const CRASH: &str = r#"
#define CALLS 100000
static volatile int sink;
static int *volatile nowhere;

__attribute__((noinline)) void step(int i) { sink += i; }
__attribute__((noinline)) int check(int v) { return v == sink; }
__attribute__((noinline)) int deref_null(void) { return *nowhere; }
__attribute__((noinline)) int parse(int n) {
    step(n);
    check(n);
    return deref_null();
}
__attribute__((noinline)) int run(int n) {
    for (int i = 0; i < n; i++)
        step(i);
    return parse(n);
}
int main(void) { return run(CALLS); }
"#;

/// Calls of `tick`, `tock` in the threads' loops of [`THREADS`], and of
/// `ping` in main's.
const THREAD_CALLS: usize = 50_000;
const PINGS: usize = 1000;

/// main: PINGS calls of ping, then a worker thread that makes
/// THREAD_CALLS calls of tick and one of finish_work and returns (joined),
/// then a thread that makes THREAD_CALLS calls of tock and crashes in
/// crash_parse > deref_null while main waits for it in pthread_join.
const THREADS: &str = r#"
#include <pthread.h>
#include <stddef.h>
#define THREAD_CALLS 50000
#define PINGS 1000
static volatile int sink;
static int *volatile nowhere;

__attribute__((noinline)) void ping(int i) { sink += i; }
__attribute__((noinline)) void tick(int i) { sink += i; }
__attribute__((noinline)) void tock(int i) { sink -= i; }
__attribute__((noinline)) void finish_work(void) { sink = 0; }
__attribute__((noinline)) int deref_null(void) { return *nowhere; }
__attribute__((noinline)) int crash_parse(void) { return deref_null(); }

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < THREAD_CALLS; i++)
        tick(i);
    finish_work();
    return NULL;
}
static void *crasher(void *arg) {
    (void)arg;
    for (int i = 0; i < THREAD_CALLS; i++)
        tock(i);
    crash_parse();
    return NULL;
}
int main(void) {
    pthread_t w, c;
    for (int i = 0; i < PINGS; i++)
        ping(i);
    pthread_create(&w, NULL, worker, NULL);
    pthread_join(w, NULL);
    pthread_create(&c, NULL, crasher, NULL);
    pthread_join(c, NULL);
    return 0;
}
"#;

/// Built without inlining or tail calls, so that every call of the source
/// is a call of the binary.
fn build(name: &str, source: &str, libs: &[&str]) -> PathBuf {
    let src = write_cached_source(&format!("{name}.c"), source);
    Build::new(
        Lang::C,
        name,
        &[src],
        &["-O0", "-fno-inline", "-fno-optimize-sibling-calls"],
    )
    .libs(libs)
    .build()
}

/// What a thread does, call by call, as the program's source says.
enum Step {
    /// A call that makes calls (or never returns).
    Enter(&'static str),
    /// The return of the innermost call entered.
    Leave,
    /// A call that makes none and returns.
    Leaf(&'static str),
    /// A signal delivered (here: the fatal one).
    Signal(&'static str),
}

/// A line the tree must show: whether it has a duration, its depth, its
/// text.
type Line = (bool, usize, String);

/// The lines `--last n` shows of a thread doing `steps`, without the calls
/// of `hidden` (leaves only), and how many calls it counts.
fn last_lines(steps: &[Step], n: usize, hidden: &[&str]) -> (Vec<Line>, usize) {
    let steps: Vec<&Step> = steps
        .iter()
        .filter(|s| !matches!(s, Step::Leaf(f) if hidden.contains(f)))
        .collect();
    let total = steps
        .iter()
        .filter(|s| matches!(s, Step::Enter(_) | Step::Leaf(_)))
        .count();
    let first = total.saturating_sub(n);
    let mut lines = Vec::new();
    let mut stack: Vec<&str> = Vec::new();
    let mut entries = 0;
    let mut shown = first == 0;
    for s in steps {
        if let Step::Enter(_) | Step::Leaf(_) = s {
            if entries == first && !shown {
                shown = true;
                for (depth, f) in stack.iter().enumerate() {
                    lines.push((false, depth, format!("{f}() {{")));
                }
            }
            entries += 1;
        }
        let depth = stack.len();
        match *s {
            Step::Enter(f) => {
                if shown {
                    lines.push((false, depth, format!("{f}() {{")));
                }
                stack.push(f);
            }
            Step::Leave => {
                let f = stack.pop().unwrap();
                if shown {
                    lines.push((true, depth - 1, format!("}} /* {f} */")));
                }
            }
            Step::Leaf(f) => {
                if shown {
                    lines.push((true, depth, format!("{f}();")));
                }
            }
            Step::Signal(sig) => {
                if shown {
                    lines.push((false, depth, format!("/* signal {sig} */")));
                }
            }
        }
    }
    while let Some(f) = stack.pop() {
        lines.push((false, stack.len(), format!("}} /* {f} */ (not returned)")));
    }
    (lines, total)
}

/// The steps of [`CRASH`]'s only thread.
fn crash_steps() -> Vec<Step> {
    let mut s = vec![Step::Enter("main"), Step::Enter("run")];
    s.extend((0..CALLS).map(|_| Step::Leaf("step")));
    s.extend([
        Step::Enter("parse"),
        Step::Leaf("step"),
        Step::Leaf("check"),
        Step::Enter("deref_null"),
        Step::Signal("SIGSEGV"),
    ]);
    s
}

/// One thread's part of `--last`'s output.
#[derive(Debug)]
struct Part {
    header: String,
    note: String,
    tid: u64,
    lines: Vec<Line>,
    /// The lines as printed.
    text: Vec<String>,
}

/// Splits `--last`'s output into its parts, checking the layout: the
/// tree's header line, then per task its `# task` header, a note line,
/// its lines (all of its tid), a blank line before the next part.
fn parts(out: &str) -> Vec<Part> {
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("# DURATION     TID     FUNCTION"),
        "{out}"
    );
    let mut parts: Vec<Part> = Vec::new();
    let mut blank = false;
    while let Some(l) = lines.next() {
        if l.is_empty() {
            assert!(!blank && !parts.is_empty(), "blank line where?\n{out}");
            blank = true;
            continue;
        }
        if l.starts_with("# task ") {
            assert!(
                parts.is_empty() || blank,
                "no blank line before {l:?}\n{out}"
            );
            blank = false;
            let tid = l
                .split_once(", tid ")
                .and_then(|(_, t)| t.split(' ').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("no tid in {l:?}"));
            let note = lines.next().unwrap_or_default().to_string();
            assert!(note.starts_with("# "), "{note:?} after {l:?}\n{out}");
            parts.push(Part {
                header: l.to_string(),
                note,
                tid,
                lines: Vec::new(),
                text: Vec::new(),
            });
            continue;
        }
        assert!(!blank, "a line after a blank line: {l:?}\n{out}");
        let part = parts.last_mut().unwrap_or_else(|| panic!("{l:?}\n{out}"));
        let r = split_replay_line(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{out}"));
        assert_eq!(r.tid, part.tid, "a line of another thread: {l:?}\n{out}");
        part.lines
            .push((!r.duration.is_empty(), r.depth, r.text.to_string()));
        part.text.push(l.to_string());
    }
    parts
}

fn replay_last(dir: &Path, opts: &[&str]) -> String {
    fctrace_on("replay", dir, &[&["--last"], opts].concat())
}

/// Lines as a readable block, for assertion messages.
fn show(lines: &[Line]) -> String {
    lines
        .iter()
        .map(|(d, depth, t)| {
            format!(
                "{} {}{t}\n",
                if *d { "T" } else { " " },
                "  ".repeat(*depth)
            )
        })
        .collect()
}

#[track_caller]
fn assert_part(part: &Part, want: &[Line], note: &str, ctx: &str) {
    assert_eq!(
        show(&part.lines),
        show(want),
        "{ctx}: lines of {}\n{}",
        part.header,
        part.text.join("\n")
    );
    assert_eq!(part.note, note, "{ctx}");
}

#[test]
fn the_last_calls_before_a_crash() {
    let exe = build("last_crash", CRASH, &[]);
    let native = run(&mut Command::new(&exe));
    assert_eq!(
        native.signal(),
        Some(libc::SIGSEGV),
        "{}",
        native.describe()
    );
    let rec = record_any(&exe, &[], &[]);
    let ctx = format!("trace {}", rec.dir.path.display());
    // fctrace record ends as the program did: killed by SIGSEGV.
    assert_same_behaviour(&native, &rec.run, &ctx);
    assert_eq!(rec.run.signal(), Some(libc::SIGSEGV), "{ctx}");

    let steps = crash_steps();
    let out = replay_last(&rec.dir.path, &["5"]);
    let p = parts(&out);
    assert_eq!(p.len(), 1, "{out}");
    let (want, total) = last_lines(&steps, 5, &[]);
    assert_eq!(total, CALLS + 6);
    // The model's lines, spelled out: the chain around the last 5 calls,
    // those calls, the crash in deref_null.
    let spelled: Vec<Line> = [
        (false, 0, "main() {"),
        (false, 1, "run() {"),
        (true, 2, "step();"),
        (false, 2, "parse() {"),
        (true, 3, "step();"),
        (true, 3, "check();"),
        (false, 3, "deref_null() {"),
        (false, 4, "/* signal SIGSEGV */"),
        (false, 3, "} /* deref_null */ (not returned)"),
        (false, 2, "} /* parse */ (not returned)"),
        (false, 1, "} /* run */ (not returned)"),
        (false, 0, "} /* main */ (not returned)"),
    ]
    .iter()
    .map(|&(d, depth, t)| (d, depth, t.to_string()))
    .collect();
    assert_eq!(show(&want), show(&spelled));
    assert_part(
        &p[0],
        &want,
        &format!("# last 5 of {total} calls; the task that crashed (SIGSEGV)"),
        &ctx,
    );
    assert!(p[0].header.ends_with(", the program started"), "{out}");

    // From the first call shown on, the lines are the whole tree's (same
    // durations): the whole replay ends with them.
    let whole = replay_text(&rec.dir.path);
    let whole: Vec<&str> = whole.lines().filter(|l| !l.starts_with('#')).collect();
    let tail = &p[0].text[2..];
    assert_eq!(&whole[whole.len() - tail.len()..], tail, "{ctx}");

    // Calls are counted as the filters show them: without check, the last
    // two are parse's step and deref_null, inside main > run > parse.
    let out = replay_last(&rec.dir.path, &["2", "-N", "check"]);
    let p = parts(&out);
    let (want, total) = last_lines(&steps, 2, &["check"]);
    let openers: Vec<&str> = want[..3].iter().map(|l| l.2.as_str()).collect();
    assert_eq!(openers, ["main() {", "run() {", "parse() {"]);
    assert_eq!(want[3], (true, 3, "step();".to_string()));
    assert_part(
        &p[0],
        &want,
        &format!("# last 2 of {total} calls; the task that crashed (SIGSEGV)"),
        &ctx,
    );

    // More than there are: the whole task.
    let out = replay_last(&rec.dir.path, &["1000000"]);
    let p = parts(&out);
    let (want, total) = last_lines(&steps, 1_000_000, &[]);
    assert_part(
        &p[0],
        &want,
        &format!("# all {total} calls; the task that crashed (SIGSEGV)"),
        &ctx,
    );
    assert_eq!(p[0].text, whole, "{ctx}");
}

#[test]
fn the_thread_that_crashed_comes_first() {
    let exe = build("last_threads", THREADS, &["-pthread"]);
    let native = run(&mut Command::new(&exe));
    assert_eq!(
        native.signal(),
        Some(libc::SIGSEGV),
        "{}",
        native.describe()
    );
    let rec = record_any(&exe, &[], &[]);
    let ctx = format!("trace {}", rec.dir.path.display());
    assert_same_behaviour(&native, &rec.run, &ctx);
    assert_eq!(rec.run.signal(), Some(libc::SIGSEGV), "{ctx}");

    let mut crasher = vec![Step::Enter("crasher")];
    crasher.extend((0..THREAD_CALLS).map(|_| Step::Leaf("tock")));
    crasher.extend([
        Step::Enter("crash_parse"),
        Step::Enter("deref_null"),
        Step::Signal("SIGSEGV"),
    ]);
    let mut main = vec![Step::Enter("main")];
    main.extend((0..PINGS).map(|_| Step::Leaf("ping")));
    main.extend([
        Step::Leaf("pthread_create"),
        Step::Leaf("pthread_join"),
        Step::Leaf("pthread_create"),
        // Waiting for the crasher when it crashes.
        Step::Enter("pthread_join"),
    ]);
    let mut worker = vec![Step::Enter("worker")];
    worker.extend((0..THREAD_CALLS).map(|_| Step::Leaf("tick")));
    worker.extend([Step::Leaf("finish_work"), Step::Leave]);

    for n in [5, 1] {
        let out = replay_last(&rec.dir.path, &[&n.to_string()]);
        let p = parts(&out);
        assert_eq!(p.len(), 3, "{out}");
        // The crasher first, then the others in the order they started.
        let expected = [
            (&crasher, "; the task that crashed (SIGSEGV)"),
            (&main, ""),
            (&worker, ""),
        ];
        for (part, (steps, first)) in p.iter().zip(expected) {
            let (want, total) = last_lines(steps, n, &[]);
            assert_part(
                part,
                &want,
                &format!("# last {n} of {total} calls{first}"),
                &ctx,
            );
        }
        assert!(p[1].header.ends_with(", the program started"), "{out}");
        for t in [&p[0], &p[2]] {
            assert!(t.header.contains(", thread of task "), "{out}");
            assert_ne!(t.tid, p[1].tid, "{out}");
        }
        // Each thread's part is a well-formed tree once its calls open
        // (the context lines open them all here).
        parse_replay(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    }
}

#[test]
fn a_count_that_is_not_one_or_more_is_an_error() {
    let rec = record_any(&build("last_crash", CRASH, &[]), &[], &[]);
    for bad in ["0", "x", "1.5", ""] {
        let r = fctrace(&[
            OsStr::new("replay"),
            OsStr::new("-d"),
            rec.dir.path.as_os_str(),
            OsStr::new("--last"),
            OsStr::new(bad),
        ]);
        assert!(!r.success(), "--last {bad:?}\n{}", r.describe());
        assert!(
            r.stderr.contains("--last") && r.stderr.contains("1 or more"),
            "--last {bad:?}\n{}",
            r.describe()
        );
        assert!(r.stdout.is_empty(), "{}", r.describe());
    }
}
