//! Flame graphs: `fctrace dump --flame-graph` (folded stacks, by self time
//! or with --sample-count by calls) and `fctrace flamegraph` (inferno's
//! SVG). On real traces (flame.c, tree.cpp, SQLite) the weights of the
//! stacks ending in each function add up to the report's self time and
//! calls; flame.c's stacks are derived from its source; the SVG is
//! well-formed XML with the right totals per function, and headless
//! Chromium renders it.

use fctrace_testkit::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// `fctrace dump --flame-graph -d DIR [opts]`: the folded stacks, parsed
/// as `(frames, weight)`; asserts success and a well-formed text.
#[track_caller]
fn folded(dir: &Path, opts: &[&str]) -> Vec<(Vec<String>, u64)> {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("dump"),
        OsStr::new("--flame-graph"),
        OsStr::new("-d"),
        dir.as_os_str(),
    ];
    args.extend(opts.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(r.success(), "dump --flame-graph failed\n{}", r.describe());
    assert_eq!(r.stderr, "", "{}", r.describe());
    let mut seen = BTreeSet::new();
    r.stdout
        .lines()
        .map(|line| {
            let (stack, weight) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no weight in {line:?}"));
            let weight: u64 = weight
                .parse()
                .unwrap_or_else(|_| panic!("bad weight in {line:?}"));
            assert!(weight > 0, "a stack of weight 0: {line:?}");
            assert!(seen.insert(stack.to_string()), "stack twice: {line:?}");
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            assert!(frames.iter().all(|f| !f.is_empty()), "{line:?}");
            (frames, weight)
        })
        .collect()
}

/// Per leaf function (the last frame), the sum of the weights.
fn by_leaf(stacks: &[(Vec<String>, u64)]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (frames, w) in stacks {
        *m.entry(frames.last().unwrap().clone()).or_default() += w;
    }
    m
}

/// The weights per function add up to the report's self times (default)
/// and calls (--sample-count), function by function; every function the
/// report has a call of is in the stacks.
#[track_caller]
fn assert_weights_are_the_reports(dir: &Path, opts: &[&str]) {
    let mut with_report = vec!["--format", "json"];
    with_report.extend(opts);
    let mut args: Vec<&OsStr> = vec![OsStr::new("report"), OsStr::new("-d"), dir.as_os_str()];
    args.extend(with_report.iter().map(OsStr::new));
    let r = fctrace(&args);
    assert!(r.success(), "{}", r.describe());
    let report: Report = serde_json::from_str(&r.stdout).unwrap();
    let names = shown_names(&report);
    let mut calls = BTreeMap::new();
    let mut self_ns = BTreeMap::new();
    for (f, name) in report.functions.iter().zip(&names) {
        assert!(
            calls.insert(name.clone(), f.calls).is_none(),
            "two functions shown as {name}"
        );
        if f.self_ns > 0 {
            self_ns.insert(name.clone(), f.self_ns);
        }
    }
    let mut count_opts = vec!["--sample-count"];
    count_opts.extend(opts);
    let counted = by_leaf(&folded(dir, &count_opts));
    assert_eq!(counted, calls, "calls per function in {}", dir.display());
    let timed = by_leaf(&folded(dir, opts));
    assert_eq!(
        timed,
        self_ns,
        "self time per function in {}",
        dir.display()
    );
    assert!(!calls.is_empty());
}

/// flame.c's call paths, from its source: main parses 3 then 2 tokens,
/// creates and joins a thread that parses 4, computes fib(5) (1, 2, 4, 6
/// and 2 calls at depths 1 to 5 below main) and prints.
fn flame_c_stacks() -> BTreeMap<String, u64> {
    [
        ("main", 1),
        ("main;parse", 2),
        ("main;parse;lex", 3 + 2),
        ("main;pthread_create", 1),
        ("main;pthread_join", 1),
        ("main;fib", 1),
        ("main;fib;fib", 2),
        ("main;fib;fib;fib", 4),
        ("main;fib;fib;fib;fib", 6),
        ("main;fib;fib;fib;fib;fib", 2),
        ("main;printf", 1),
        ("worker", 1),
        ("worker;parse", 1),
        ("worker;parse;lex", 4),
    ]
    .into_iter()
    .map(|(s, n)| (s.to_string(), n))
    .collect()
}

fn joined(stacks: &[(Vec<String>, u64)]) -> BTreeMap<String, u64> {
    stacks.iter().map(|(f, w)| (f.join(";"), *w)).collect()
}

#[test]
fn folded_stacks_of_a_c_program_are_its_call_paths() {
    let exe = flame_program();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, FLAME_OUTPUT, "{}", native.describe());
    let rec = record_same(&exe, &[]);
    let dir = &rec.dir.path;

    // The program's own paths: those that start in main or worker (the
    // C runtime's calls around main are other stacks).
    let all = folded(dir, &["--sample-count"]);
    let own: BTreeMap<String, u64> = joined(&all)
        .into_iter()
        .filter(|(s, _)| {
            let root = s.split(';').next().unwrap();
            root == "main" || root == "worker"
        })
        .collect();
    assert_eq!(own, flame_c_stacks(), "trace {}", dir.display());

    // The filters apply: -F main -F worker leaves exactly those.
    let filtered = joined(&folded(
        dir,
        &["--sample-count", "-F", "main", "-F", "worker"],
    ));
    assert_eq!(filtered, flame_c_stacks());
    // -D 2: main's and worker's direct calls only.
    let shallow = joined(&folded(
        dir,
        &["--sample-count", "-F", "main", "-F", "worker", "-D", "2"],
    ));
    let expected: BTreeMap<String, u64> = flame_c_stacks()
        .into_iter()
        .filter(|(s, _)| s.matches(';').count() < 2)
        .collect();
    assert_eq!(shallow, expected);

    // By self time: the same paths (each has time), each path's time is
    // within main's or worker's duration.
    let timed = joined(&folded(dir, &["-F", "main", "-F", "worker"]));
    assert_eq!(
        timed.keys().collect::<Vec<_>>(),
        flame_c_stacks().keys().collect::<Vec<_>>()
    );

    assert_weights_are_the_reports(dir, &[]);
    assert_weights_are_the_reports(dir, &["-F", "parse"]);

    // -o FILE writes the same text.
    let out = scratch("flame-out");
    let file = out.path.join("stacks.folded");
    let r = fctrace(&[
        OsStr::new("dump"),
        OsStr::new("--flame-graph"),
        OsStr::new("--sample-count"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("-o"),
        file.as_os_str(),
    ]);
    assert!(r.success() && r.stdout.is_empty(), "{}", r.describe());
    let text = std::fs::read_to_string(&file).unwrap();
    let from_file: BTreeMap<String, u64> = text
        .lines()
        .map(|l| {
            let (s, w) = l.rsplit_once(' ').unwrap();
            (s.to_string(), w.parse().unwrap())
        })
        .collect();
    assert_eq!(from_file, joined(&all));
}

#[test]
fn weights_add_up_to_the_report_on_cpp_and_sqlite() {
    let exe = cxx_program("tree.cpp", "-O0", &["-O0"]);
    let rec = record_same(&exe, &[]);
    assert_weights_are_the_reports(&rec.dir.path, &[]);

    let exe = sqlite_driver("-O2");
    let rec = record_same(&exe, &[]);
    assert_weights_are_the_reports(&rec.dir.path, &[]);
    assert_weights_are_the_reports(&rec.dir.path, &["-N", "sqlite3_step"]);
}

#[test]
fn bad_input_is_a_clear_error() {
    let r = fctrace(&["dump", "-d", "/nonexistent/trace.data", "--flame-graph"]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.starts_with("fctrace: "), "{}", r.describe());
    let r = fctrace(&["dump", "--flame-graph", "--parquet", "-o", "x"]);
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    // Without a format dump writes the events as text: --sample-count
    // has nothing to weigh.
    let r = fctrace(&["dump", "--sample-count"]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("--sample-count applies to --flame-graph only"),
        "{}",
        r.describe()
    );

    let rec = record(&flame_program(), &[], &[]);
    let r = fctrace(&[
        OsStr::new("flamegraph"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("/nonexistent/dir/flame.svg"),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("cannot create /nonexistent/dir/flame.svg"),
        "{}",
        r.describe()
    );
    let r = fctrace(&[
        OsStr::new("flamegraph"),
        OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        OsStr::new("-F"),
        OsStr::new("no_such_function"),
        OsStr::new("-o"),
        rec.dir.path.join("empty.svg").as_os_str(),
    ]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("no calls to draw"), "{}", r.describe());
}

/// A frame of inferno's SVG: its function and count, from its `<title>`
/// (`name (1,234 calls, 12.50%)`).
fn svg_frames(svg: &str) -> Vec<(String, u64)> {
    // inferno's SVG starts with the SVG 1.1 DOCTYPE.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(svg, options).expect("the SVG is well-formed XML");
    let mut frames = Vec::new();
    for g in doc.descendants().filter(|n| n.has_tag_name("g")) {
        let Some(title) = g.children().find(|c| c.has_tag_name("title")) else {
            continue;
        };
        let text = title.text().unwrap_or_default();
        let (name, rest) = text
            .rsplit_once(" (")
            .unwrap_or_else(|| panic!("frame title {text:?}"));
        let count = rest
            .split_once(' ')
            .map(|(n, _)| n.replace(',', ""))
            .unwrap_or_else(|| panic!("frame title {text:?}"));
        frames.push((name.to_string(), count.parse().unwrap()));
    }
    frames
}

#[test]
fn the_svg_has_a_frame_per_function_and_opens_in_chromium() {
    let exe = flame_program();
    let rec = record_same(&exe, &[]);
    let dir = &rec.dir.path;
    let out = output_dir("flame-svg");
    let svg_path = out.join("flame.svg");
    let r = fctrace(&[
        OsStr::new("flamegraph"),
        OsStr::new("--sample-count"),
        OsStr::new("--min-width"),
        OsStr::new("0"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("-o"),
        svg_path.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let frames = svg_frames(&svg);

    // The stacks it was drawn from (checked against the report above).
    let stacks = folded(dir, &["--sample-count"]);
    let total: u64 = stacks.iter().map(|(_, w)| w).sum();
    let all: Vec<_> = frames.iter().filter(|(n, _)| n == "all").collect();
    assert_eq!(all, [&("all".to_string(), total)], "{}", svg_path.display());

    // A function that is at most once on any stack: its frames together
    // hold the weight of every stack it is on.
    let mut on_stacks: HashMap<&str, u64> = HashMap::new();
    let mut recursive = BTreeSet::new();
    for (f, w) in &stacks {
        let distinct: BTreeSet<&str> = f.iter().map(String::as_str).collect();
        if distinct.len() < f.len() {
            recursive.extend(f.iter().map(String::as_str));
        }
        for name in distinct {
            *on_stacks.entry(name).or_default() += w;
        }
    }
    let mut in_svg: HashMap<&str, u64> = HashMap::new();
    for (name, n) in frames.iter().filter(|(n, _)| n != "all") {
        *in_svg.entry(name.as_str()).or_default() += n;
    }
    assert_eq!(
        in_svg.keys().collect::<BTreeSet<_>>(),
        on_stacks.keys().collect::<BTreeSet<_>>(),
        "a frame per function"
    );
    for (name, n) in &on_stacks {
        if !recursive.contains(name) {
            assert_eq!(in_svg[name], *n, "{name} in {}", svg_path.display());
        }
    }
    assert_eq!(on_stacks["main"], 1 + 2 + 5 + 1 + 1 + 15 + 1);
    assert_eq!(on_stacks["lex"], 9);
    // Titled with the command line, and the weight named.
    assert!(svg.contains(&exe.display().to_string()), "title");
    assert!(svg.contains("width: number of calls"), "subtitle");

    // Headless Chromium renders it: a PNG that is not blank.
    require_tool("chromium", "chromium");
    let png_path = out.join("flame.png");
    let mut cmd = Command::new("chromium");
    cmd.args(["--headless", "--disable-gpu", "--hide-scrollbars"]);
    if is_root() {
        cmd.arg("--no-sandbox");
    }
    cmd.arg(format!("--screenshot={}", png_path.display()))
        .arg("--window-size=1200,700")
        .arg(format!("file://{}", svg_path.display()));
    let r = run_with_timeout(&mut cmd, std::time::Duration::from_secs(120));
    assert!(
        png_path.exists(),
        "chromium wrote no screenshot\n{}",
        r.describe()
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let pixels = &buf[..info.buffer_size()];
    let step = info.color_type.samples() * (info.bit_depth as usize / 8).max(1);
    let colours: BTreeSet<&[u8]> = pixels.chunks(step).collect();
    assert!(
        colours.len() > 10,
        "the screenshot {} has {} colours: blank",
        png_path.display(),
        colours.len()
    );
}

/// Whether the tests run as root (Chromium's sandbox refuses root).
fn is_root() -> bool {
    let r = run(Command::new("id").arg("-u"));
    r.stdout.trim() == "0"
}

/// endings.c exits from deep inside (main -> descend x6 -> leave ->
/// exit, whose atexit handler's calls return): calls that never returned
/// count as calls without time, as in the report; `segv` ends in a signal.
#[test]
fn calls_that_never_returned_weigh_as_in_the_report() {
    let exe = c_program("endings.c", "-O0", &["-O0"]);
    for args in [&["exit", "3"][..], &["segv"]] {
        let native = run(std::process::Command::new(&exe).args(args));
        let rec = record_any(&exe, args, &[]);
        assert_same_behaviour(&native, &rec.run, &format!("endings {args:?}"));
        assert_weights_are_the_reports(&rec.dir.path, &[]);
        let stacks = joined(&folded(&rec.dir.path, &["--sample-count"]));
        let deep = "main;descend;descend;descend;descend;descend;descend;leave";
        assert_eq!(stacks.get(deep), Some(&1), "{stacks:?}");
        // main never returned: no self time of its own.
        let timed = joined(&folded(&rec.dir.path, &[]));
        assert!(!timed.contains_key("main"), "{timed:?}");
    }
}
