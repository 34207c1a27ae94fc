//! Every command-line option of fctrace, in one place.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// Shown at the end of `fctrace --help`.
const EXAMPLES: &str = "Examples:
  fctrace ./app arg                       the call tree of a run
  fctrace -F main -D 3 ./app              main and two levels of calls under it
  fctrace -N printf -t 10us ./app         without printf's calls, nor calls under 10 us
  fctrace -a -F main ./app                with arguments and return values (debug info, libc)
  fctrace -A 'add@arg1,arg2' -R add@retval ./app
  fctrace record --disable --signal SIGUSR1@trace_on ./server   then: kill -USR1 <pid>
  fctrace record -T 'parse@depth=2' ./app && fctrace replay -C free
  fctrace report -s self -F '^sqlite3'    per-function times under sqlite3* functions
  fctrace graph malloc                    every chain of callers of malloc, with counts
  fctrace report -d old.data --diff new.data    what changed between two runs
  fctrace -o tree.txt ./app               the tree into tree.txt, the program's output on the terminal

docs/options.md describes every option; docs/ the engine, trace format and performance.";

/// Default trace directory, as uftrace's `uftrace.data`.
pub const DEFAULT_DIR: &str = "fctrace.data";

#[derive(Parser, Debug)]
#[command(
    name = "fctrace",
    version,
    about = "Show every function call a program makes, as a call tree with durations",
    long_about = "Show every function call a program makes, as a call tree with durations.\n\n\
        `fctrace PROGRAM [ARGS...]` runs PROGRAM, lets its output through untouched, and prints \
        its call tree when it ends. No recompilation and no debug information are needed.",
    after_long_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub terminal: TerminalArgs,
    #[command(flatten)]
    pub live: LiveArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a program and record its calls into a trace directory
    Record(Box<RecordArgs>),
    /// Print the call tree of a recorded trace
    Replay(ReplayArgs),
    /// Per-function statistics of a recorded trace
    Report(ReportArgs),
    /// The call graph: calls merged by call path, or who calls FUNC and what it calls
    Graph(GraphArgs),
    /// What a trace holds: program, tasks, instrumented functions, events
    Info(InfoArgs),
    /// Run a Python script over a recorded trace, calling its
    /// uftrace_begin(ctx), uftrace_entry(ctx), uftrace_exit(ctx) and
    /// uftrace_end() as uftrace's `script` does, e.g. `fctrace script -S
    /// count.py -d run1.data`
    Script(ScriptArgs),
    /// Write a recorded trace for other tools: Chrome trace-event JSON,
    /// Perfetto protobuf, folded stacks for flame graphs, Parquet tables,
    /// or (without a format flag) its events as text
    Dump(DumpArgs),
    /// Draw an interactive flame graph (SVG) of a recorded trace
    Flamegraph(FlamegraphArgs),
    /// Browse a recorded trace interactively: call graph, report, tasks
    Tui(TuiArgs),
    /// Pack a trace into one file to send, which every command reads with `-d FILE`
    ///
    /// The file (DIR.tar.zst unless -o says otherwise) is a tar of the
    /// trace directory compressed with zstd, private (0600), which `tar
    /// --zstd -xf FILE` unpacks too, e.g. `fctrace archive -d run1.data`,
    /// then on another machine `fctrace replay -d run1.data.tar.zst`
    Archive(ArchiveArgs),
    /// Ask a running `fctrace record --ring` to write a snapshot of the
    /// recent history now (as SIGUSR2 to it does), e.g. `fctrace snapshot -d DIR`
    Snapshot(SnapshotArgs),
    /// Receive traces sent by `fctrace record --host` and write them under
    /// a directory, as uftrace's `recv`
    ///
    /// Listens on 127.0.0.1 (--bind to change it) on port 8090 (--port);
    /// each trace arrives in DIR/NAME, NAME being the sender's -d
    /// directory's last component, e.g. `fctrace recv -d received --port
    /// 1234`, then elsewhere `fctrace record --host HOST --port 1234 -d
    /// run1.data ./app`, then `fctrace replay -d received/run1.data`.
    /// Ctrl-C ends it
    Recv(RecvArgs),
    /// Print a shell completion script, e.g. `source <(fctrace completions bash)`
    Completions(CompletionsArgs),
    /// Print the manual page (roff), e.g. `fctrace man | man -l -`
    Man(ManArgs),
}

/// When to colour the output.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorWhen {
    /// When the output goes to a terminal and NO_COLOR is not set
    #[default]
    Auto,
    /// Always, also into a file or a pipe (`| less -R`)
    Always,
    /// Never
    Never,
}

/// How the output looks on a terminal: options of every command, given
/// before or after the command's name.
#[derive(Args, Debug, Clone, Default)]
pub struct TerminalArgs {
    /// Colour long durations (the unit: ms green, s yellow, a minute or
    /// more red, as uftrace) and markers (signals, lost events, unwound
    /// and never-returned frames): auto (on a terminal, unless the NO_COLOR
    /// environment variable is set), always or never, e.g. `--color never`
    #[arg(
        long = "color",
        alias = "colour",
        value_name = "WHEN",
        value_enum,
        default_value_t = ColorWhen::Auto,
        global = true,
        help_heading = "Output"
    )]
    pub color: ColorWhen,
    /// Print directly instead of through a pager: on a terminal, `replay`,
    /// `report` and `info` page their output with $FCTRACE_PAGER, else
    /// $PAGER, else `less -R` (LESS=FRX unless LESS is set); live mode
    /// and `record` never page
    #[arg(long = "no-pager", global = true, help_heading = "Output")]
    pub no_pager: bool,
}

/// Where the output goes.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Write the output to FILE (created or truncated before anything
    /// runs) instead of stdout; in live mode the program's own output
    /// stays on stdout and the call tree goes to FILE, e.g. `-o tree.txt`
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        help_heading = "Output"
    )]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell, e.g. `fctrace completions zsh > ~/.zfunc/_fctrace`
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write fctrace.1 and one page per command (fctrace-record.1, ...)
    /// into DIR instead of printing fctrace.1, e.g. `--dir
    /// ~/.local/share/man/man1`
    #[arg(long = "dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Write the pages into the manual directory next to the fctrace
    /// binary, BIN/../share/man/man1 (~/.cargo/share/man/man1 after
    /// `cargo install`), where `man fctrace` finds them while BIN is on
    /// PATH; prints the directory
    #[arg(long = "install", conflicts_with = "dir")]
    pub install: bool,
}

/// What to trace: shared by live mode and `record`.
#[derive(Args, Debug, Clone, Default)]
pub struct TraceOptions {
    /// Record the SDT probes provider:name (patterns, as -F's; e.g.
    /// `-E 'app:*' --match glob`) of the program and its libraries as
    /// events, `/* provider:name */` in the tree (uftrace's -E; see
    /// --list-event)
    #[arg(short = 'E', long = "event", value_name = "PROVIDER:NAME")]
    pub event: Vec<String>,
    /// List the SDT probes (`.note.stapsdt`, from <sys/sdt.h>'s
    /// STAP_PROBE) of the program and of the libraries it needs, as
    /// uftrace does (`[SDT event] provider:name arguments`), without
    /// running it, e.g. `fctrace --list-event ./app`
    #[arg(long = "list-event")]
    pub list_event: bool,
    /// After the program ends, run this Python script over the trace (as
    /// `fctrace script -S` does; it runs after recording, not while the
    /// program runs), e.g. `fctrace record -S count.py ./app`
    #[arg(short = 'S', long = "script", value_name = "FILE.py")]
    pub script: Option<PathBuf>,
    /// Also trace every function inside the shared libraries (not only the
    /// calls from the program into them), e.g. `fctrace -l ./app`
    #[arg(short = 'l', long = "nest-libcall")]
    pub nest_libcall: bool,
    /// Analyse and plan every module anew, without the start-up cache
    /// (each module's functions and patch plans, kept per user in
    /// $XDG_CACHE_HOME/fctrace or ~/.cache/fctrace; `rm -r` that
    /// directory to clear it), and add nothing to it
    #[arg(long = "no-cache")]
    pub no_cache: bool,
    /// Also record the system calls of the traced tasks, with their
    /// arguments and results (the kernel's tracepoints, through
    /// perf_event_open), shown under the functions that made them as
    /// strace prints them, e.g. `fctrace -k ./app`
    #[arg(short = 'k', long = "kernel", help_heading = "Kernel")]
    pub kernel: bool,
    /// DEPTH: also record kernel functions under each system call, DEPTH
    /// levels deep, where the kernel offers the function_graph tracer
    /// (implies -k); fctrace says what this kernel lacks, e.g. `-K 2`
    #[arg(
        short = 'K',
        long = "kernel-depth",
        value_name = "DEPTH",
        help_heading = "Kernel"
    )]
    pub kernel_depth: Option<u32>,
    /// Start with tracing off (a `trace_on` trigger or signal turns it
    /// on), e.g. `--disable -T handle_request@trace_on`
    #[arg(long = "disable", help_heading = "Triggers")]
    pub disable: bool,
    /// on|off: tracing's state at the start (uftrace's --trace; `off` is
    /// --disable), e.g. `--trace=off -T main@trace_on`
    #[arg(long = "trace", value_name = "STATE", value_parser = ["on", "off"], help_heading = "Triggers")]
    pub trace_state: Option<String>,
    /// SIG@ACTION[,ACTION]: a signal sent to the program switches tracing
    /// for every thread (actions: trace_on, trace_off, finish), e.g.
    /// `--disable --signal SIGUSR1@trace_on --signal SIGUSR2@trace_off`,
    /// then `kill -USR1 <pid>` when the program misbehaves
    #[arg(long = "signal", value_name = "SIG@ACTION", help_heading = "Triggers")]
    pub signal: Vec<String>,
    /// FUNC@arg1,arg2/s,fparg1,...: record these arguments of FUNC
    /// (integers arg1..16: /i signed, /u unsigned, /x hex, /o octal, with
    /// sizes /i8../i64, /c char, /s string, /S std::string, /p pointer
    /// (`&name` for a function); floating point fparg1..8 with /32, /64,
    /// /80; a location may follow: %rdi..%r9, %xmm0..7, %stack+N); FUNC
    /// alone (a name or pattern): every argument, typed from the debug
    /// information, e.g. `-A 'add@arg1,arg2' -A 'open@arg1/s,arg2/x'`,
    /// `-A '^parse_'`
    #[arg(
        short = 'A',
        long = "argument",
        value_name = "SPEC",
        help_heading = "Arguments"
    )]
    pub argument: Vec<String>,
    /// FUNC@retval[/FMT]: record the return value of FUNC (formats as for
    /// -A, /f64 for a double; FUNC alone: typed from the debug
    /// information), e.g. `-R add@retval -R 'greet@retval/s'`, `-R main`
    #[arg(
        short = 'R',
        long = "retval",
        value_name = "SPEC",
        help_heading = "Arguments"
    )]
    pub retval: Vec<String>,
    /// Record arguments and return values of every function described by
    /// debug information (-g, or a debug file under /usr/lib/debug), and
    /// of known C library functions (strlen, open, malloc, ...), e.g.
    /// `fctrace -a -F main ./app`
    #[arg(short = 'a', long = "auto-args", help_heading = "Arguments")]
    pub auto_args: bool,
    /// Longest string argument shown, in bytes, 1 to 1023 (longer ones
    /// end in `...`), e.g. `--max-string 200`
    #[arg(long = "max-string", value_name = "BYTES", default_value_t = fctrace_options::DEFAULT_STRING_MAX, value_parser = clap::value_parser!(u32).range(1..=1023), help_heading = "Arguments")]
    pub max_string: u32,
    /// Patch only FUNC (uftrace's -P; repeatable, `-P .` for all, the
    /// default): the other functions are left unpatched and cost nothing.
    /// With -U, the last of -P/-U that names a function decides, e.g.
    /// `-P '^parse_' -U parse_int`
    #[arg(short = 'P', long = "patch", value_name = "FUNC", value_parser = in_order, help_heading = "Which functions")]
    pub patch: Vec<(usize, String)>,
    /// Do not patch FUNC (uftrace's -U; repeatable): its calls are not
    /// recorded, the calls it makes are, e.g. `-U '^std::'`
    #[arg(short = 'U', long = "unpatch", value_name = "FUNC", value_parser = in_order, help_heading = "Which functions")]
    pub unpatch: Vec<(usize, String)>,
    /// Do not patch functions smaller than SIZE bytes (their symbol's
    /// size), e.g. `-Z 100`
    #[arg(
        short = 'Z',
        long = "size-filter",
        value_name = "SIZE",
        help_heading = "Which functions"
    )]
    pub size_filter: Option<u64>,
    /// At most N levels of nested calls recorded (uftrace's stack of
    /// traced calls, 1024 there by default; fctrace's grows, without a
    /// limit unless given): as -D N, e.g. `--max-stack 64`
    #[arg(long = "max-stack", value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Which functions")]
    pub max_stack: Option<u32>,
    /// Timestamps' clock: mono (CLOCK_MONOTONIC, the default, as in
    /// uftrace), mono_raw (CLOCK_MONOTONIC_RAW: not slewed by NTP) or
    /// boot (CLOCK_BOOTTIME: counts suspended time); the kernel's events
    /// (-k, -K) share it; realtime is refused
    #[arg(long = "clock", value_name = "CLOCK", default_value = "mono", value_parser = ["mono", "mono_raw", "boot", "realtime"])]
    pub clock: String,
    /// uftrace's estimate-return (record entries only, guess the
    /// returns): fctrace always records real returns, putting the real
    /// return addresses back wherever the program reads them, so this
    /// changes nothing
    #[arg(short = 'e', long = "estimate-return")]
    pub estimate_return: bool,
}

/// The value of an option whose order among others matters (`-P`, `-U`),
/// numbered in the order clap meets them on the command line.
fn in_order(s: &str) -> Result<(usize, String), String> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    Ok((
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        s.to_string(),
    ))
}

/// Which calls to show: on `record` and live mode they also limit what is
/// recorded; on `replay` and `report` they apply to the recorded trace.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only FUNC and the functions it calls (a name, or a regular
    /// expression when it has regex characters; FUNC@MODULE limits it to
    /// one library or the executable). Repeatable, e.g. `-F main`,
    /// `-F '^sqlite3Btree'`, `-F 'malloc@libc'`; actions may follow as in
    /// -T, e.g. `-F main@depth=2`
    #[arg(
        short = 'F',
        long = "filter",
        value_name = "FUNC",
        help_heading = "Filters"
    )]
    pub filter: Vec<String>,
    /// Hide FUNC and the functions it calls. Repeatable, e.g.
    /// `-N printf -N '^std::'`; actions may follow as in -T, e.g.
    /// `-F main@depth=2`
    #[arg(
        short = 'N',
        long = "notrace",
        value_name = "FUNC",
        help_heading = "Filters"
    )]
    pub notrace: Vec<String>,
    /// Show the calls of FUNC with the chain of callers that led to each,
    /// FUNC as a leaf (as uftrace: what it calls is not shown, see
    /// --caller-tree). Repeatable, e.g. `-C free`
    #[arg(
        short = 'C',
        long = "caller-filter",
        value_name = "FUNC",
        help_heading = "Filters"
    )]
    pub caller_filter: Vec<String>,
    /// With -C: also show what FUNC calls, its whole subtree under the
    /// chain of its callers, e.g. `-C parse --caller-tree`
    #[arg(
        long = "caller-tree",
        requires = "caller_filter",
        help_heading = "Filters"
    )]
    pub caller_tree: bool,
    /// Only the N outermost levels of calls (1: only the top-level calls),
    /// e.g. `-D 3`
    #[arg(short = 'D', long = "depth", value_name = "N", help_heading = "Filters", value_parser = clap::value_parser!(u32).range(1..))]
    pub depth: Option<u32>,
    /// Hide calls shorter than TIME (500ns, 10us, 2ms, 1s); their callers
    /// keep their full durations, e.g. `-t 10us`
    #[arg(
        short = 't',
        long = "time-filter",
        value_name = "TIME",
        help_heading = "Filters"
    )]
    pub time_filter: Option<String>,
    /// Only these threads (TID,TID,...; `fctrace info` lists them).
    /// Repeatable, e.g. `--tid 4242,4243`
    #[arg(long = "tid", value_name = "TID,...", help_heading = "Filters")]
    pub tid: Vec<String>,
    /// FUNC@ACTION[,ACTION...]: actions trace_on (trace-on, traceon),
    /// trace_off, depth=N, backtrace, finish, snapshot; they act on the
    /// thread that called FUNC, or on every thread with `global` (finish:
    /// always the whole process; snapshot: a flight recorder's snapshot,
    /// `record --ring`). uftrace's filter (as -F), notrace (as -N), hide
    /// (as -H), time=TIME (the time filter while FUNC runs), trace (shown
    /// whatever the time filter), auto-args (as -A FUNC -R FUNC) and a
    /// condition if:argN==V combine with them (`-T main@filter,depth=3`,
    /// `-T 'f@if:arg1>2,trace_off'`); recover and color= change nothing.
    /// Repeatable, e.g. `-T load_config@trace_off`,
    /// `-T 'handle_request@trace_on,global'`, `-T parse@depth=2`,
    /// `-T abort@backtrace`, `-T main_loop@finish`, `-T fail@snapshot`
    #[arg(
        short = 'T',
        long = "trigger",
        value_name = "FUNC@ACTION",
        help_heading = "Triggers"
    )]
    pub trigger: Vec<String>,
    /// Hide FUNC but not the calls it makes, shown in its place (as the
    /// trigger action `hide`). Repeatable, e.g. `-H '^std::'`
    #[arg(
        short = 'H',
        long = "hide",
        value_name = "FUNC",
        help_heading = "Filters"
    )]
    pub hide: Vec<String>,
    /// How FUNC patterns are read: regex (a regular expression when the
    /// name has regex characters, matching anywhere: uftrace's default) or
    /// glob (`*`, `?`, `[...]`, the whole name), e.g. `--match glob -F 'parse_*'`
    #[arg(long = "match", value_name = "TYPE", default_value = "regex", value_parser = ["regex", "glob"], help_heading = "Filters")]
    pub match_type: String,
    /// Also show the C runtime's own calls around `main` (`_init`,
    /// `frame_dummy`, `__libc_start_main`, `__do_global_dtors_aux`,
    /// `_fini`...): hidden by default, the calls they make (constructors,
    /// atexit handlers) being shown in their place
    #[arg(long = "show-runtime", help_heading = "Filters")]
    pub show_runtime: bool,
    /// Hide the calls into shared libraries (the calls they make back
    /// into the program, e.g. a qsort comparator, are shown in their
    /// place)
    #[arg(long = "no-libcall", help_heading = "Filters")]
    pub no_libcall: bool,
    /// START~STOP: only the calls running in that time range, each end an
    /// elapsed time since the trace began (`100ms~2s`, as `-f elapsed`
    /// shows) or a timestamp (`75059.205379813~`, as `-f time` shows);
    /// either may be left out, e.g. `-r 1s~`
    #[arg(
        short = 'r',
        long = "time-range",
        value_name = "START~STOP",
        help_heading = "Filters"
    )]
    pub time_range: Option<String>,
    /// How C++ and Rust names are shown: full (as c++filt), simple
    /// (without parameters, template arguments and return type), no (the
    /// raw symbols), e.g. `--demangle=simple`
    #[arg(
        long = "demangle",
        value_name = "HOW",
        default_value = "full",
        value_parser = ["full", "simple", "no"],
        help_heading = "Filters"
    )]
    pub demangle: String,
    /// Show where each function is defined, from the program's and
    /// libraries' DWARF debug information (built with -g): `main() { /*
    /// calc.c:26 */` in the tree, `main [calc.c:26]` in report and graph;
    /// given to `record`, it changes nothing (the readers look the lines
    /// up), as uftrace's --srcline
    #[arg(long = "srcline", help_heading = "Output")]
    pub srcline: bool,
    /// Show every function with its module's file name: `getpid@libc.so.6()`
    #[arg(long = "libname", help_heading = "Output")]
    pub libname: bool,
    /// Only the functions defined in a source file matching LOC (a regular
    /// expression on the file's path as DWARF gives it; `!LOC`: all but
    /// those), the calls they make shown in their place; functions
    /// without debug information are left out unless every LOC has `!`.
    /// Repeatable, e.g. `-L 'calc.c$'`
    #[arg(
        short = 'L',
        long = "loc-filter",
        value_name = "LOC",
        help_heading = "Filters"
    )]
    pub loc_filter: Vec<String>,
}

impl FilterArgs {
    /// `--tid`'s thread ids.
    pub fn tids(&self) -> anyhow::Result<Vec<u32>> {
        let mut v = Vec::new();
        for t in &self.tid {
            v.extend(
                fctrace_options::spec::parse_tids(t).map_err(|e| anyhow::anyhow!("--tid: {e}"))?,
            );
        }
        Ok(v)
    }

    /// The filters as they were given on the command line (`-F main -D 3`),
    /// empty without any.
    pub fn shown_text(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut add = |flag: &str, values: &[String]| {
            for v in values {
                parts.push(format!("{flag} {v}"));
            }
        };
        add("-F", &self.filter);
        add("-N", &self.notrace);
        add("-C", &self.caller_filter);
        add(
            "-D",
            &self
                .depth
                .map(|d| d.to_string())
                .into_iter()
                .collect::<Vec<_>>(),
        );
        add("-t", &self.time_filter.iter().cloned().collect::<Vec<_>>());
        add("--tid", &self.tid);
        add("-T", &self.trigger);
        add("-H", &self.hide);
        parts.join(" ")
    }

    /// The display-only options given (the trace holds every call either
    /// way): `record` refuses them.
    pub fn display_only(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.show_runtime {
            v.push("--show-runtime");
        }
        if self.no_libcall {
            v.push("--no-libcall");
        }
        if self.time_range.is_some() {
            v.push("-r/--time-range");
        }
        if self.demangle != "full" {
            v.push("--demangle");
        }
        if self.libname {
            v.push("--libname");
        }
        if !self.loc_filter.is_empty() {
            v.push("-L/--loc-filter");
        }
        v
    }

    /// The filters as the options the agent and the output share.
    pub fn to_options(&self) -> anyhow::Result<fctrace_options::Options> {
        let o = self.to_options_with(&TraceOptions {
            max_string: fctrace_options::DEFAULT_STRING_MAX,
            ..TraceOptions::default()
        })?;
        if let Some(c) = o.conds.first() {
            anyhow::bail!(
                "`{}@if:{}`: conditions on arguments act while recording (record or live \
                 mode), where the arguments are read",
                c.pattern.as_str(),
                c.expr()
            );
        }
        Ok(o)
    }

    /// The filters together with the recording options of `trace`.
    pub fn to_options_with(
        &self,
        trace: &TraceOptions,
    ) -> anyhow::Result<fctrace_options::Options> {
        use fctrace_options as o;
        /// Each of `list` parsed by `parse`; the first error names `what`.
        fn all<'a, T>(
            list: impl IntoIterator<Item = &'a String>,
            what: &str,
            parse: impl Fn(&str) -> Result<T, String>,
        ) -> anyhow::Result<Vec<T>> {
            list.into_iter()
                .map(|s| parse(s).map_err(|e| anyhow::anyhow!("invalid {what}: {e}")))
                .collect()
        }
        let glob = self.match_type == "glob";
        let spelled = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| {
                    if glob {
                        o::uftrace::glob_spec(s)
                    } else {
                        s.clone()
                    }
                })
                .collect()
        };
        let mut opts = o::Options {
            filters: Vec::new(),
            notrace: Vec::new(),
            callers: all(
                &spelled(&self.caller_filter),
                "-C/--caller-filter",
                o::FuncPattern::parse,
            )?,
            caller_tree: self.caller_tree,
            depth: match (self.depth, trace.max_stack) {
                (Some(d), Some(m)) => Some(d.min(m)),
                (d, m) => d.or(m),
            },
            time_filter: all(&self.time_filter, "-t/--time-filter", o::parse_time)?.pop(),
            tids: all(&self.tid, "--tid", o::parse_tids)?.concat(),
            triggers: Vec::new(),
            hide: all(&spelled(&self.hide), "-H/--hide", o::FuncPattern::parse)?,
            patch: patch_rules(trace, glob)?,
            size_filter: trace.size_filter,
            events: all(&spelled(&trace.event), "-E/--event", o::FuncPattern::parse)?,
            conds: Vec::new(),
            time_actions: Vec::new(),
            disabled: trace.disable || trace.trace_state.as_deref() == Some("off"),
            signals: all(&trace.signal, "--signal", o::SignalTrigger::parse)?,
            args: all(&spelled(&trace.argument), "-A/--argument", |s| {
                o::ArgSpec::parse_option(s, false)
            })?
            .into_iter()
            .chain(all(&spelled(&trace.retval), "-R/--retval", |s| {
                o::ArgSpec::parse_option(s, true)
            })?)
            .collect(),
            auto_args: trace.auto_args,
            string_max: trace.max_string,
            show_runtime: self.show_runtime,
            no_libcall: self.no_libcall,
            time_range: all(&self.time_range, "-r/--time-range", o::TimeRange::parse)?.pop(),
            demangle: o::Demangle::parse(&self.demangle)
                .map_err(|e| anyhow::anyhow!("invalid --demangle: {e}"))?,
            srcline: self.srcline,
            libname: self.libname,
            loc_filters: all(&self.loc_filter, "-L/--loc-filter", |l| {
                o::LocFilter::parse(l).map(|_| l.to_string())
            })?,
        };
        for (flag, list) in [
            ("-F/--filter", &self.filter),
            ("-N/--notrace", &self.notrace),
            ("-T/--trigger", &self.trigger),
        ] {
            for spec in spelled(list) {
                add_uftrace_spec(&mut opts, flag, &spec)
                    .map_err(|e| anyhow::anyhow!("invalid {flag}: {e}"))?;
            }
        }
        Ok(opts)
    }
}

/// One `-F`, `-N` or `-T` spec added to `opts`, read as uftrace reads it:
/// `-T FUNC@filter,depth=3` is a `-F FUNC` and a `depth=3` trigger,
/// `-F FUNC@depth=1` the same, `hide` a `-H FUNC`.
fn add_uftrace_spec(
    opts: &mut fctrace_options::Options,
    flag: &str,
    spec: &str,
) -> Result<(), String> {
    use fctrace_options::{uftrace, FuncPattern};
    let plain = !flag.starts_with("-T") && !uftrace::has_actions(spec);
    if plain {
        let p = FuncPattern::parse(spec)?;
        match flag {
            "-F/--filter" => opts.filters.push(p),
            _ => opts.notrace.push(p),
        }
        return Ok(());
    }
    let e = uftrace::expand(spec)?;
    if e.filter || flag.starts_with("-F") {
        opts.filters.push(e.pattern.clone());
    }
    if e.notrace || flag.starts_with("-N") {
        opts.notrace.push(e.pattern.clone());
    }
    if e.hide {
        opts.hide.push(e.pattern.clone());
    }
    if let Some(t) = e.trigger {
        opts.triggers.push(t);
    }
    if let Some(t) = e.time {
        opts.time_actions.push((e.pattern.clone(), Some(t)));
    }
    if e.trace {
        opts.time_actions.push((e.pattern.clone(), None));
    }
    if let Some((arg, op, value)) = e.cond {
        opts.conds.push(uftrace::Cond {
            pattern: e.pattern.clone(),
            arg,
            op,
            value,
        });
    }
    if e.auto_args {
        // uftrace's `auto-args` action: as `-A FUNC -R FUNC`.
        let func = spec.split_once('@').map_or(spec, |(f, _)| f);
        let spec = match e.pattern.module() {
            Some(m) => format!("{func}@{m},auto-args,auto-retval"),
            None => format!("{func}@auto-args,auto-retval"),
        };
        opts.args.push(fctrace_options::ArgSpec::parse(&spec)?);
    }
    Ok(())
}

/// `-P` and `-U` in the order given.
fn patch_rules(
    trace: &TraceOptions,
    glob: bool,
) -> anyhow::Result<Vec<fctrace_options::uftrace::PatchRule>> {
    let mut all: Vec<(usize, bool, &String)> = trace
        .patch
        .iter()
        .map(|(i, s)| (*i, true, s))
        .chain(trace.unpatch.iter().map(|(i, s)| (*i, false, s)))
        .collect();
    all.sort_by_key(|&(i, _, _)| i);
    all.into_iter()
        .map(|(_, patch, s)| {
            let spec = if glob {
                fctrace_options::uftrace::glob_spec(s)
            } else {
                s.clone()
            };
            let pattern = fctrace_options::FuncPattern::parse(&spec).map_err(|e| {
                anyhow::anyhow!(
                    "invalid {}: {e}",
                    if patch { "-P/--patch" } else { "-U/--unpatch" }
                )
            })?;
            Ok(fctrace_options::uftrace::PatchRule { patch, pattern })
        })
        .collect()
}

/// How the call tree is laid out: `replay` and live mode.
#[derive(Args, Debug, Clone, Default)]
pub struct TreeArgs {
    /// Each task's calls after the previous task's (in the order they
    /// started), rather than every task's calls interleaved by time
    #[arg(long = "task-order", help_heading = "Output")]
    pub task_order: bool,
    /// FIELD,...: the columns before the function: duration, tid, addr
    /// (the function's address), time (time stamp), delta (since the
    /// task's previous line), elapsed (since the trace began), task
    /// (thread name), module; `+FIELD,...` adds to
    /// the default `duration,tid`, `none` shows none, e.g. `-f +time`,
    /// `-f elapsed,tid,module`
    #[arg(
        short = 'f',
        long = "output-fields",
        value_name = "FIELDS",
        help_heading = "Output"
    )]
    pub output_fields: Option<String>,
    /// Only each thread's last N calls, with the calls open around them,
    /// the thread that crashed first (then the others), e.g. `--last 20`
    #[arg(
        long = "last",
        value_name = "N",
        help_heading = "Output",
        value_parser = parse_last
    )]
    pub last: Option<u64>,
    /// Closing lines without the function's name: `}` rather than
    /// `} /* main */`
    #[arg(long = "no-comment", help_heading = "Output")]
    pub no_comment: bool,
    /// An empty line where the lines change from one task to another
    #[arg(long = "task-newline", help_heading = "Output")]
    pub task_newline: bool,
    /// Each task in a column of its own: its lines indented by
    /// --column-offset levels more than the previous task's (tasks in the
    /// order they first print)
    #[arg(long = "column-view", help_heading = "Output")]
    pub column_view: bool,
    /// With --column-view: the levels of indent (2 spaces each) between
    /// two tasks' columns, e.g. `--column-offset 10`
    #[arg(
        long = "column-offset",
        value_name = "DEPTH",
        default_value_t = 8,
        help_heading = "Output"
    )]
    pub column_offset: usize,
}

impl TreeArgs {
    pub fn style(&self) -> anyhow::Result<fctrace_analysis::tree::TreeStyle> {
        let fields = match &self.output_fields {
            Some(spec) => fctrace_analysis::tree::parse_fields(spec)
                .map_err(|e| anyhow::anyhow!("invalid -f/--output-fields: {e}"))?,
            None => None,
        };
        Ok(fctrace_analysis::tree::TreeStyle {
            task_order: self.task_order,
            fields,
            last: self.last,
            no_comment: self.no_comment,
            task_newline: self.task_newline,
            column_offset: self.column_view.then_some(self.column_offset),
            kernel: Default::default(),
        })
    }
}

/// `--last N`: a number of calls, 1 or more.
fn parse_last(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("the number of calls must be 1 or more".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of calls (1 or more)")),
    }
}

/// Where readers find names for the functions no symbol named at record
/// time (stripped files): the debug files looked for, after the standard
/// places and before debuginfod (DEBUGINFOD_URLS).
#[derive(Args, Debug, Clone, Default)]
pub struct NamingArgs {
    /// A directory of separate debug files, searched first (repeatable):
    /// as a root like /usr/lib/debug (`DIR/.build-id/xx/yyyy.debug`, the
    /// debug link's name in DIR or in DIR/<directory of the program>), or
    /// any file in DIR with the program's build-id, e.g. `--debug-dir ./dbg`
    #[arg(
        long = "debug-dir",
        alias = "with-syms",
        value_name = "DIR",
        help_heading = "Naming"
    )]
    pub debug_dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct LiveArgs {
    /// Before the tree, the per-function report of the run (as `fctrace
    /// report`), each under a `# fctrace report` / `# fctrace replay`
    /// heading, as uftrace's `live --report`
    #[arg(long = "report", help_heading = "Output")]
    pub report: bool,
    /// Keep the trace in ./fctrace.data (as `fctrace record` writes it)
    /// instead of a temporary directory, as uftrace's `live --record`
    #[arg(long = "record", help_heading = "Output")]
    pub record: bool,
    #[command(flatten)]
    pub trace: TraceOptions,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tree: TreeArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Trace directory to write, e.g. `-d /tmp/run1.data`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub trace: TraceOptions,
    #[command(flatten)]
    pub ring: RingArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Record no arguments nor return values: -A, -R and -a are
    /// dropped (uftrace's --no-args), e.g. to compare a run without them
    #[arg(long = "no-args", help_heading = "Arguments")]
    pub no_args: bool,
    #[command(flatten)]
    pub send: SendArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// `record --host`: the trace sent to an `fctrace recv`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// Also send the trace to `fctrace recv` on HOST (uftrace's --host):
    /// fctrace connects before the program starts (an error if no recv
    /// answers), writes the trace to -d as usual and sends that directory
    /// when the recording ends; if sending fails, the local trace is kept
    /// and fctrace says so, e.g. `fctrace record --host 10.0.0.2 ./app`
    #[arg(long = "host", value_name = "HOST", help_heading = "Sending")]
    pub host: Option<String>,
    /// With --host: the receiver's port (uftrace's default, 8090)
    #[arg(
        long = "port",
        value_name = "PORT",
        default_value_t = fctrace_format::stream::DEFAULT_PORT,
        requires = "host",
        help_heading = "Sending"
    )]
    pub port: u16,
}

/// `fctrace recv`.
#[derive(Args, Debug)]
pub struct RecvArgs {
    /// Directory under which received traces are written (created 0700
    /// if missing), each in DIR/NAME, e.g. `-d /srv/traces`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Port to listen on (uftrace's default, 8090; 0: any free port, the
    /// one chosen is printed)
    #[arg(long = "port", value_name = "PORT", default_value_t = fctrace_format::stream::DEFAULT_PORT)]
    pub port: u16,
    /// Address to listen on: 127.0.0.1 unless told otherwise, e.g.
    /// `--bind 0.0.0.0` to accept other machines' traces (anyone who
    /// reaches the port can then send one)
    #[arg(long = "bind", value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
    /// Shell command run after each trace arrives, with the trace's
    /// directory as $1, e.g. `--run-cmd 'fctrace replay -d "$1"'`
    #[arg(long = "run-cmd", value_name = "CMD")]
    pub run_cmd: Option<String>,
    /// The largest trace accepted, all its files together (K, M, G), e.g.
    /// `--max-size 1G`; a larger one is refused
    #[arg(long = "max-size", value_name = "SIZE", default_value = "16G", value_parser = parse_size)]
    pub max_size: u64,
}

/// `record --ring`: the flight recorder.
#[derive(Args, Debug)]
pub struct RingArgs {
    /// Keep only the most recent history, about SIZE of compressed events
    /// for all threads together (`64M`, `512K`, `1G`), in fctrace's
    /// memory; nothing is written until a snapshot: when the program dies
    /// by a signal, on SIGUSR2 or Ctrl-C to fctrace, `fctrace snapshot`,
    /// a `-T FUNC@snapshot` trigger, or at exit with --snapshot-at-exit,
    /// e.g. `fctrace record --ring 64M ./server`
    #[arg(long = "ring", value_name = "SIZE", value_parser = parse_size, help_heading = "Flight recorder")]
    pub ring: Option<u64>,
    /// With --ring: also write a snapshot when the program exits normally
    #[arg(
        long = "snapshot-at-exit",
        requires = "ring",
        help_heading = "Flight recorder"
    )]
    pub at_exit: bool,
}

#[derive(Args, Debug)]
pub struct ArchiveArgs {
    /// Trace directory to pack, e.g. `-d /tmp/run1.data`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// The archive to write (default: DIR.tar.zst next to DIR), e.g.
    /// `-o bug1234.tar.zst`
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace FILE if it exists (without it, an existing FILE is refused)
    #[arg(long = "force")]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Trace directory of the running `record --ring`, e.g. `-d /tmp/run1.data`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Do not wait for the snapshot to be written
    #[arg(long = "no-wait")]
    pub no_wait: bool,
}

/// What `record` and live mode trace: a program to start, or a running
/// process.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Attach to the running process PID instead of starting a program:
    /// trace its threads (all, or --tid's) until it ends, --duration passes
    /// or Ctrl-C, then detach, e.g. `fctrace record -p 1234`
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// With -p: detach after this long (`500ms`, `10s`, `2m`), e.g.
    /// `fctrace record -p 1234 --duration 10s`
    #[arg(long = "duration", value_name = "TIME", requires = "pid", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// The program to run, then its arguments
    #[arg(
        value_name = "PROGRAM",
        required_unless_present = "pid",
        trailing_var_arg = true,
        num_args = 1..
    )]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The program to start, or the process to attach to (`--tid` of
    /// `filter` choosing its threads).
    pub fn target(&self, filter: &FilterArgs) -> anyhow::Result<fctrace_record::Target<'_>> {
        Ok(match self.pid {
            Some(pid) => fctrace_record::Target::Attach(pid, self.duration, filter.tids()?),
            None => fctrace_record::Target::Launch(&self.command),
        })
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tree: TreeArgs,
    /// One line per event instead of the tree (uftrace's flat shape):
    /// `[N] ==> TID/DEPTH: ip (FUNC), time (NS)` at an entry, `[N] <==
    /// TID/DEPTH: ip (FUNC), time (NS:DURATION)` at an exit
    #[arg(long = "flat", help_heading = "Output")]
    pub flat: bool,
    /// normal (text) or html (the same lines as an HTML page), e.g.
    /// `--format html -o tree.html`
    #[arg(long = "format", value_name = "FORMAT", value_parser = ["normal", "html"], default_value = "normal", help_heading = "Output")]
    pub format: String,
    /// Start with tracing off: only the calls from a `trace_on` trigger
    /// (`-T FUNC@trace_on`) on are shown, as `--trace off`
    #[arg(long = "disable", help_heading = "Triggers")]
    pub disable: bool,
    /// Leave out the kernel's lines recorded with `record -k` (system
    /// calls, time off the CPU, page faults, signals delivered, kernel
    /// functions), as uftrace's --no-event leaves out its events
    #[arg(long = "no-event", help_heading = "Filters")]
    pub no_event: bool,
    /// on or off: whether tracing starts on (`off` as --disable)
    #[arg(long = "trace", value_name = "STATE", value_parser = ["on", "off"], help_heading = "Triggers")]
    pub trace: Option<String>,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The table (uftrace's `normal`)
    #[value(alias = "normal")]
    Text,
    Json,
    /// Comma-separated values, times in nanoseconds (uftrace's shape:
    /// a `#` header line)
    Csv,
    /// The table as an HTML page
    Html,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// KEY[,KEY...]: sort by these, in turn, largest first: total, self,
    /// calls (or call), total-avg, total-min, total-max, total-stdv,
    /// self-avg, self-min, self-max, self-stdv, size, func (by name); with
    /// --avg-total or --avg-self also avg, min, max, e.g. `-s self`, `-s
    /// call,total`
    #[arg(
        short = 's',
        long = "sort",
        value_name = "KEYS",
        default_value = "total"
    )]
    pub sort: String,
    /// FIELD,...: the table's columns, uftrace's names: total,
    /// total-avg, total-min, total-max, total-stdv (relative standard
    /// deviation, %), self, self-avg, self-min, self-max, self-stdv, call,
    /// size (bytes), all or none; with --task: total, self, tid, func.
    /// Without it: total, self, call (and the kernel time under each
    /// function when the trace has system calls, `record -k`), e.g. `-f
    /// total,self-max,call`
    #[arg(short = 'f', long = "output-fields", value_name = "FIELDS")]
    pub output_fields: Option<String>,
    /// The average, min, max and relative standard deviation of each
    /// function's total time (of its calls' durations)
    #[arg(long = "avg-total", conflicts_with_all = ["avg_self", "output_fields"])]
    pub avg_total: bool,
    /// The average, min, max and relative standard deviation of each
    /// function's self time
    #[arg(long = "avg-self", conflicts_with = "output_fields")]
    pub avg_self: bool,
    /// Per task (thread) instead of per function: total time (of its
    /// outermost calls), self time, tid, number of calls and name
    #[arg(long = "task", conflicts_with_all = ["diff", "kernel", "avg_total", "avg_self"])]
    pub task: bool,
    /// With --diff and the `full` policy: the column sorted by, 0 (this
    /// trace's values), 1 (OTHER's) or 2 (the change, default)
    #[arg(long = "sort-column", value_name = "IDX", requires = "diff", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub sort_column: Option<u8>,
    /// Output format: text (or normal), json, csv or html, e.g. `--format
    /// json`
    #[arg(long = "format", value_enum, default_value = "text")]
    pub format: Format,
    /// Compare with the trace in OTHER_DIR (or an archive of one): per
    /// function, calls and times in both and their differences (OTHER
    /// minus this one), the largest change first, e.g. `report -d
    /// fast.data --diff slow.data`
    #[arg(long = "diff", value_name = "OTHER_DIR")]
    pub diff: Option<PathBuf>,
    /// With --diff: POLICY[,POLICY...]: `abs` (sort by the size of the
    /// change, default) or `no-abs` (increases first, then decreases),
    /// `full` (both traces and the change, default) or `compact` (the
    /// change only), `percent` (the change in % of this trace's value) or
    /// `no-percent` (default), e.g. `--diff-policy compact,percent`
    #[arg(long = "diff-policy", value_name = "POLICY", requires = "diff")]
    pub diff_policy: Option<String>,
    /// The system calls recorded with `record -k`, as `strace -c` sums
    /// them: per system call its share of the time, seconds, microseconds
    /// per call, calls and errors, e.g. `fctrace report -k`
    #[arg(short = 'k', long = "kernel", conflicts_with = "diff")]
    pub kernel: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    /// The text (uftrace's `normal`)
    #[value(alias = "normal")]
    Text,
    /// The text as an HTML page
    Html,
    Json,
    /// Graphviz (`dot -Tsvg`)
    Dot,
    /// Mermaid flowchart
    Mermaid,
}

#[derive(Args, Debug)]
pub struct GraphArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Show the chains of callers that reached FUNC (its backtraces) and
    /// the graph of its calls below it, instead of the whole program's
    /// graph (a name or regular expression, FUNC@MODULE as for -F), e.g.
    /// `fctrace graph malloc`
    #[arg(value_name = "FUNC")]
    pub function: Option<String>,
    /// Output format, e.g. `--format dot | dot -Tsvg > graph.svg`
    #[arg(long = "format", value_enum, default_value = "text")]
    pub format: GraphFormat,
    /// One graph per task (thread or process) instead of one for all
    #[arg(long = "per-task")]
    pub per_task: bool,
    /// FIELD,...: the text's columns, uftrace's names: total, total-avg,
    /// total-min, total-max, self, self-avg, self-min, self-max, call, or
    /// none, e.g. `-f total,self-max,call`
    #[arg(short = 'f', long = "output-fields", value_name = "FIELDS")]
    pub output_fields: Option<String>,
    /// The task graph instead of the call graph (as uftrace): which task
    /// created which (`+----` a process, `+-` a thread), each with its
    /// lifetime as traced (first to last event), its time in traced calls
    /// (outermost), tid and name
    #[arg(long = "task", conflicts_with_all = ["function", "per_task"])]
    pub task: bool,
    /// fctrace's table instead of uftrace's shape: `Total time`, `Self
    /// time`, `Calls` and `Per call` columns, `+-` branches, the
    /// backtraces with their calls per caller
    #[arg(long = "table", conflicts_with = "task")]
    pub table: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

/// The formats of `fctrace dump`: at most one is given (none: the events
/// as text).
#[derive(Args, Debug)]
#[group(required = false, multiple = false)]
pub struct DumpFormat {
    /// Chrome trace-event JSON (one complete event per call), for Perfetto
    /// UI and chrome://tracing, e.g. `fctrace dump --chrome -o trace.json`
    #[arg(long = "chrome", help_heading = "Formats")]
    pub chrome: bool,
    /// Perfetto's protobuf trace (a track per thread, interned names), for
    /// Perfetto UI and its trace processor, also for traces too big for
    /// JSON, e.g. `fctrace dump --perfetto -o trace.pftrace`
    #[arg(long = "perfetto", help_heading = "Formats")]
    pub perfetto: bool,
    /// Folded stacks (`main;parse;lex 1234`), one line per call path,
    /// weighted by self time in nanoseconds (or calls, with
    /// --sample-count): the input of flamegraph.pl, inferno and
    /// speedscope, e.g. `fctrace dump --flame-graph | inferno-flamegraph > f.svg`
    #[arg(long = "flame-graph", help_heading = "Formats")]
    pub flame_graph: bool,
    /// Parquet tables calls.parquet, functions.parquet and tasks.parquet
    /// in the directory given with -o, for DuckDB, Polars, Spark, e.g.
    /// `fctrace dump --parquet -o run1.parquet`
    #[arg(long = "parquet", requires = "output", help_heading = "Formats")]
    pub parquet: bool,
    /// The call graph in Graphviz's DOT (as `--format graphviz`, or
    /// `fctrace graph --format dot`)
    #[arg(long = "graphviz", help_heading = "Formats")]
    pub graphviz: bool,
    /// The call graph as a Mermaid flowchart (as `--format mermaid`)
    #[arg(long = "mermaid", help_heading = "Formats")]
    pub mermaid: bool,
    /// FORMAT: uftrace's spelling of the flags above: normal (the events
    /// as text), chrome, perfetto, flame-graph, graphviz, mermaid,
    /// parquet, e.g. `--format=chrome`
    #[arg(long = "format", value_name = "FORMAT", value_parser = ["normal", "chrome", "perfetto", "flame-graph", "graphviz", "mermaid", "parquet"], help_heading = "Formats")]
    pub format: Option<String>,
}

impl DumpFormat {
    /// `--format`'s value, or the flag's.
    pub fn name(&self) -> &str {
        if let Some(f) = &self.format {
            return f;
        }
        [
            (self.chrome, "chrome"),
            (self.perfetto, "perfetto"),
            (self.flame_graph, "flame-graph"),
            (self.parquet, "parquet"),
            (self.graphviz, "graphviz"),
            (self.mermaid, "mermaid"),
        ]
        .into_iter()
        .find_map(|(on, name)| on.then_some(name))
        .unwrap_or("normal")
    }
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub format: DumpFormat,
    /// Where to write: a file (standard output without it), or for
    /// --parquet a directory (created if needed), e.g. `-o trace.json`
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// With --flame-graph: weigh each call path by its number of calls
    /// instead of its self time
    #[arg(long = "sample-count")]
    pub sample_count: bool,
    /// Every event of each task as stored (kind, function id, raw time
    /// stamp, nanoseconds), the bytes of argument values and return
    /// values in hex, before calls are paired (--tid chooses the tasks)
    #[arg(long = "debug", conflicts_with = "DumpFormat")]
    pub debug: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(Args, Debug)]
pub struct ScriptArgs {
    /// The Python script (FILE.py) whose uftrace_begin(ctx),
    /// uftrace_entry(ctx), uftrace_exit(ctx) and uftrace_end() are called;
    /// ctx holds tid, depth, timestamp, address, name, args (an entry's,
    /// when recorded), duration and retval (an exit's, when recorded);
    /// uftrace_begin's ctx: record, version, cmds. An optional
    /// UFTRACE_FUNCS list of regular expressions limits the functions.
    /// Run by the system's python3
    #[arg(short = 'S', long = "script", value_name = "FILE.py")]
    pub script: PathBuf,
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Give the script no arguments nor return values (uftrace's
    /// --no-args): ctx has no `args` nor `retval`
    #[arg(long = "no-args")]
    pub no_args: bool,
    /// Record COMMAND first (as `fctrace record -d DIR COMMAND`), then run
    /// the script over its trace, as uftrace's `script --record`, e.g.
    /// `fctrace script -S count.py --record ./app arg1`
    #[arg(
        long = "record",
        value_name = "COMMAND",
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub record: Vec<std::ffi::OsString>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// List every function that is not instrumented with its reason (more
    /// than 20 are otherwise counted per reason), e.g. `fctrace info -v`
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Only the tasks, as the tree of who created whom (uftrace's shape:
    /// `[TID] NAME`, 6 spaces deeper per level)
    #[arg(long = "task", conflicts_with_all = ["symbols", "system"])]
    pub task: bool,
    /// Only the traced functions of each session: `Normal symbols`
    /// (defined in the executable) and `Dynamic symbols` (its calls into
    /// libraries), `[N] name (0xADDRESS) size: BYTES`, addresses as in
    /// the file; and `Python functions`, `[N] module.qualname (FILE:LINE)`
    #[arg(long = "symbols", conflicts_with = "system")]
    pub symbols: bool,
    /// The running system's information (CPU, memory, kernel, hostname,
    /// distribution, perf_event_paranoid, kptr_restrict), without reading
    /// a trace
    #[arg(long = "system")]
    pub system: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(Args, Debug)]
pub struct TuiArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// Build the TUI's model, print its size and load time, and exit
    /// without a terminal (to measure loading a big trace)
    #[arg(long = "exit-after-load")]
    pub exit_after_load: bool,
    /// Open on the report (the per-function statistics) instead of the
    /// call graph, e.g. `--report -s call`
    #[arg(long = "report")]
    pub report: bool,
    /// The graph's fields (total, total-avg, total-min, total-max, self,
    /// self-avg, self-min, self-max, call, addr; default
    /// total,self,call), or with --report the report's (total,
    /// total-avg, total-min, total-max, self, self-avg, self-min,
    /// self-max, call, size); `+FIELD` adds to the default, `none` shows
    /// none, e.g. `-f +addr`, `--report -f call,total-avg`
    #[arg(short = 'f', long = "output-fields", value_name = "FIELD,...")]
    pub fields: Option<String>,
    /// With --report: sort by these keys in turn (the report's fields and
    /// func), e.g. `--report -s call,total`
    #[arg(short = 's', long = "sort", value_name = "KEY,...")]
    pub sort: Option<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    /// Trace directory to read, or an archive of one (`fctrace
    /// archive`), e.g. `-d /tmp/run1.data`, `-d run1.data.tar.zst`
    #[arg(short = 'd', long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub dir: PathBuf,
    /// The SVG file to write, e.g. `-o flame.svg`
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Frame widths by number of calls instead of self time
    #[arg(long = "sample-count")]
    pub sample_count: bool,
    /// Leave out frames narrower than this many pixels (of 1200), e.g.
    /// `--min-width 0` to keep every frame
    #[arg(long = "min-width", value_name = "PIXELS", default_value_t = 0.1)]
    pub min_width: f64,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub naming: NamingArgs,
}

/// The command line; a bare `fctrace` prints [`short_usage`] on stderr and
/// exits with status 2, as clap does for other usage errors.
pub fn parse() -> Cli {
    if std::env::args_os().len() <= 1 {
        eprint!("{}", short_usage());
        std::process::exit(2);
    }
    let args = terminal_options_after_command(std::env::args_os().collect());
    let cli = Cli::parse_from(&args);
    with_script_options(cli, args)
}

/// `record -S FILE.py` and live `-S`: the record options the script asks
/// for on its `uftrace-option:` lines ([`script_record_options`]), taken
/// as if given first after the command's name.
fn with_script_options(cli: Cli, mut args: Vec<OsString>) -> Cli {
    let (script, at) = match &cli.command {
        Some(Command::Record(r)) => (r.trace.script.as_ref(), 2),
        None => (cli.live.trace.script.as_ref(), 1),
        _ => return cli,
    };
    // A script that cannot be read is said where it is run.
    let Some(words) = script.and_then(|s| script_record_options(s).ok()) else {
        return cli;
    };
    if words.is_empty() || args.len() < at {
        return cli;
    }
    args.splice(at..at, words);
    Cli::parse_from(args)
}

/// The record options a script asks for, as uftrace reads them: the words
/// after `uftrace-option:` on its comment lines (`# uftrace-option: -A
/// a@arg1 -R b@retval`).
pub fn script_record_options(script: &std::path::Path) -> anyhow::Result<Vec<OsString>> {
    let text = std::fs::read_to_string(script)
        .map_err(|e| anyhow::anyhow!("cannot read the script {}: {e}", script.display()))?;
    Ok(text
        .lines()
        .filter(|l| l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once("uftrace-option:"))
        .flat_map(|(_, rest)| rest.split_whitespace().map(Into::into).collect::<Vec<_>>())
        .collect())
}

/// `fctrace --no-pager replay ...` as `fctrace replay --no-pager ...`
/// (as git takes `git --no-pager log`): the terminal options
/// ([`TerminalArgs`]) before a command's name are moved after it. Any
/// other option before a name makes live mode run a program of that name.
pub fn terminal_options_after_command(args: Vec<OsString>) -> Vec<OsString> {
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        i += match arg {
            "--no-pager" => 1,
            "--color" | "--colour" => 2,
            _ if arg.starts_with("--color=") || arg.starts_with("--colour=") => 1,
            _ => break,
        };
    }
    let Some(name) = args.get(i).and_then(|a| a.to_str()) else {
        return args;
    };
    if i == 1 || !command().get_subcommands().any(|c| c.get_name() == name) {
        return args;
    }
    let mut moved = vec![args[0].clone(), args[i].clone()];
    moved.extend_from_slice(&args[1..i]);
    moved.extend_from_slice(&args[i + 1..]);
    moved
}

/// The clap definition of the whole command line (for help, the manual
/// page and completion scripts).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// What a bare `fctrace` prints: the usage lines and every command with
/// its one-line description, as clap's definition has them (a command
/// added to [`Command`] shows up here by itself).
pub fn short_usage() -> String {
    let mut cmd = command();
    let mut text = format!("{}\n\nCommands:\n", cmd.render_usage());
    let commands: Vec<(String, String)> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), about)
        })
        .collect();
    let width = commands.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, about) in &commands {
        text.push_str(&format!("  {name:width$}  {about}\n"));
    }
    text.push_str(
        "\n`fctrace PROGRAM [ARGS...]` traces PROGRAM and prints its call tree.\n\
         `fctrace --help` lists every option, `fctrace COMMAND --help` a command's.\n",
    );
    text
}

/// `--duration`: a time as `-t` takes it (`500ms`, `10s`, `2m`).
/// A size in bytes: a number with an optional K, M or G (powers of 1024),
/// at least 64K.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let mult: u64 = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => {
            return Err(format!(
                "`{s}`: a size is a number with K, M or G, e.g. 64M"
            ))
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}`: a size is a number with K, M or G, e.g. 64M"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("`{s}`: too large"))?;
    if bytes < 64 << 10 {
        return Err(format!("`{s}`: a size must be at least 64K"));
    }
    Ok(bytes)
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    fctrace_options::spec::parse_time(s).map(std::time::Duration::from_nanos)
}
