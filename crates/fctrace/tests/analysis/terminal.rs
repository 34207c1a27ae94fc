//! The terminal: colour (`--color`, NO_COLOR), the pager (`less -R`,
//! FCTRACE_PAGER, PAGER, `--no-pager`, quitting it early), `-o FILE`, the
//! listing of a bare `fctrace`, shell completions, the manual page, the
//! README's steps that install them (in a clean HOME), and
//! examples/demo.sh under CARGO_TARGET_DIR.
//!
//! A terminal is util-linux's `script`, which runs a command on a new
//! pseudo-terminal and copies what it shows (escape sequences included,
//! newlines as CR LF) to its own stdout; what is written to its stdin is
//! typed on that terminal.

use fctrace_testkit::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[91m";
const MAGENTA: &str = "\x1b[35m";
const RESET: &str = "\x1b[0m";

fn terminal_program() -> PathBuf {
    c_program("terminal.c", "O1", &["-O1"])
}

/// A recording of terminal.c's default run: `slow` (2 ms), `quick`, a
/// SIGUSR1 handler, `exit` two calls deep.
fn recorded() -> Recorded {
    let exe = terminal_program();
    let native = run_native(&exe, &[]);
    assert_eq!(native.stdout, "quick 42 signal 10\n");
    record(&exe, &[], &[])
}

/// A shell word for `script -c`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn shell_line(args: &[&str]) -> String {
    let mut line = quote(&fctrace_bin().to_string_lossy());
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line
}

/// `script`'s command with a clean terminal environment: no pager or
/// colour settings of the user, `env` added.
fn script_command(line: &str, env: &[(&str, &str)]) -> Command {
    // Signals as on a user's terminal even when the tests run as a
    // background job or under timeout(1), which leave some ignored (an
    // ignored disposition is inherited: less would not answer Ctrl-C).
    // `exec`: fctrace is the terminal's foreground process itself, as when
    // a user's interactive shell starts it. Without it a non-interactive
    // shell (dash, which `script` runs when $SHELL is /bin/sh) waits for
    // fctrace and dies of Ctrl-C itself.
    let line = format!("exec {line}");
    let mut cmd = Command::new("env");
    cmd.args([
        "--default-signal",
        "script",
        "-q",
        "-e",
        "-f",
        "-c",
        &line,
        "/dev/null",
    ]);
    for var in ["PAGER", "FCTRACE_PAGER", "LESS", "NO_COLOR", "LV"] {
        cmd.env_remove(var);
    }
    cmd.env("SHELL", "/bin/sh")
        .env("TERM", "xterm")
        .env("LINES", "24")
        .env("COLUMNS", "80");
    cmd.envs(env.iter().copied());
    cmd
}

/// Runs fctrace with `args` on a terminal (stdin: nothing typed).
fn on_terminal(args: &[&str], env: &[(&str, &str)]) -> Run {
    let r = run(&mut script_command(&shell_line(args), env));
    assert_no_panic(&r);
    r
}

/// What a terminal showed, as lines (CR LF back to LF).
fn shown(r: &Run) -> String {
    r.stdout.replace("\r\n", "\n")
}

/// The lines of `text` that hold `what`.
fn lines_with<'a>(text: &'a str, what: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(what)).collect()
}

/// A duration column whose unit is coloured: `   2.115 \e[32mms\e[0m`.
fn green_ms(line: &str) -> bool {
    let Some(rest) = line.get(9..) else {
        return false;
    };
    let number = &line[..9];
    number.trim().parse::<f64>().is_ok() && rest.starts_with(&format!("{GREEN}ms{RESET} ["))
}

#[test]
fn colour_always_paints_long_durations_and_markers_only() {
    let rec = recorded();
    let d = rec.dir.path.to_str().unwrap();
    let plain = fctrace(&["replay", "-d", d]);
    plain.expect_success();
    let painted = fctrace(&["replay", "-d", d, "--color", "always"]);
    painted.expect_success();
    // `slow` slept 2 ms: its unit is green, on its line and its caller's.
    let slow = lines_with(&painted.stdout, "} /* slow */");
    assert_eq!(slow.len(), 1, "{}", painted.describe());
    assert!(green_ms(slow[0]), "{:?}\n{}", slow[0], painted.describe());
    let main = lines_with(&painted.stdout, "} /* main */");
    assert_eq!(
        main,
        [format!(
            "            [{:>5}] | }} /* main */ {RED}(not returned){RESET}",
            tid(&plain.stdout)
        )
        .as_str()]
    );
    let signal = lines_with(&painted.stdout, "signal SIGUSR1");
    assert_eq!(signal.len(), 1);
    assert!(
        signal[0].ends_with(&format!("|     {MAGENTA}/* signal SIGUSR1 */{RESET}")),
        "{:?}",
        signal[0]
    );
    // Every duration in ms is painted (a plain `ms` unit is not).
    for line in painted.stdout.lines() {
        assert_ne!(line.get(9..11), Some("ms"), "{line:?}");
    }
    // Nothing else differs: without the escapes it is the plain tree.
    let stripped = painted
        .stdout
        .replace(GREEN, "")
        .replace(RED, "")
        .replace(MAGENTA, "")
        .replace(RESET, "");
    assert_eq!(stripped, plain.stdout);
    assert!(!plain.stdout.contains('\x1b'), "{}", plain.describe());
    // `--color never` and a pipe (auto) are the same plain text; the
    // option may come before the command's name.
    for args in [
        vec!["replay", "-d", d, "--color", "never"],
        vec!["--color=never", "replay", "-d", d],
    ] {
        assert_eq!(fctrace(&args).stdout, plain.stdout, "{args:?}");
    }
    let before = fctrace(&["--color", "always", "replay", "-d", d]);
    assert_eq!(before.stdout, painted.stdout);
}

/// The thread id of the tree's main task (its `main() {` line).
fn tid(tree: &str) -> String {
    let line = lines_with(tree, "| main() {")[0];
    let open = line.find('[').unwrap();
    let close = line.find(']').unwrap();
    line[open + 1..close].trim().to_string()
}

#[test]
fn report_paints_durations_of_a_millisecond_and_more() {
    let rec = recorded();
    let d = rec.dir.path.to_str().unwrap();
    // The default table (uftrace's: total, self, calls): the total of
    // its single 2 ms call is a green ms; self time (below a
    // millisecond) is not painted.
    let r = fctrace(&["report", "-d", d, "--color", "always"]);
    r.expect_success();
    let slow: Vec<&str> = r.stdout.lines().filter(|l| l.ends_with("  slow")).collect();
    assert_eq!(slow.len(), 1, "{}", r.describe());
    assert_eq!(
        slow[0].matches(&format!("{GREEN}ms{RESET}")).count(),
        1,
        "{:?}",
        slow[0]
    );
    assert_eq!(slow[0].matches('\x1b').count(), 2, "{:?}", slow[0]);
    // With -f: total, min, avg and max painted.
    let r = fctrace(&[
        "report",
        "-d",
        d,
        "--color",
        "always",
        "-f",
        "total,self,call,total-min,total-avg,total-max",
    ]);
    r.expect_success();
    let slow: Vec<&str> = r.stdout.lines().filter(|l| l.ends_with("  slow")).collect();
    assert_eq!(slow.len(), 1, "{}", r.describe());
    assert_eq!(
        slow[0].matches(&format!("{GREEN}ms{RESET}")).count(),
        4,
        "{:?}",
        slow[0]
    );
    assert_eq!(slow[0].matches('\x1b').count(), 8, "{:?}", slow[0]);
    let plain = fctrace(&["report", "-d", d]);
    assert!(!plain.stdout.contains('\x1b'));
}

#[test]
fn colour_on_a_terminal_unless_no_color() {
    let rec = recorded();
    let d = rec.dir.path.to_str().unwrap();
    let r = on_terminal(&["replay", "-d", d, "--no-pager"], &[]);
    r.expect_success();
    let text = shown(&r);
    let slow = lines_with(&text, "} /* slow */");
    assert_eq!(slow.len(), 1, "{}", r.describe());
    assert!(green_ms(slow[0]), "{:?}", slow[0]);
    assert!(text.contains(&format!("{RED}(not returned){RESET}")));
    // NO_COLOR (set to anything) turns auto off, not `always`.
    let r = on_terminal(&["replay", "-d", d, "--no-pager"], &[("NO_COLOR", "1")]);
    r.expect_success();
    assert!(!r.stdout.contains('\x1b'), "{}", r.describe());
    assert!(r.stdout.contains("} /* slow */"));
    let r = on_terminal(
        &["replay", "-d", d, "--no-pager", "--color", "always"],
        &[("NO_COLOR", "1")],
    );
    assert!(
        shown(&r).contains(&format!("{GREEN}ms{RESET}")),
        "{}",
        r.describe()
    );
    // Live mode colours its tree on a terminal too.
    let exe = terminal_program();
    let r = on_terminal(&[exe.to_str().unwrap()], &[]);
    r.expect_success();
    let text = shown(&r);
    assert!(text.starts_with("quick 42 signal 10\n"), "{}", r.describe());
    assert!(
        green_ms(lines_with(&text, "} /* slow */")[0]),
        "{}",
        r.describe()
    );
}

#[test]
fn pager_takes_the_output_on_a_terminal_only() {
    let rec = recorded();
    let d = rec.dir.path.to_str().unwrap();
    let plain = fctrace(&["replay", "-d", d]).stdout;
    let prefixed: String = plain.lines().map(|l| format!("P:{l}\n")).collect();
    // $PAGER is run by the shell; every line went through it.
    let pager = [("PAGER", "sed s/^/P:/")];
    let r = on_terminal(&["replay", "-d", d, "--color", "never"], &pager);
    r.expect_success();
    assert_eq!(shown(&r), prefixed, "{}", r.describe());
    // FCTRACE_PAGER wins over PAGER.
    let r = on_terminal(
        &["replay", "-d", d, "--color", "never"],
        &[("PAGER", "false"), ("FCTRACE_PAGER", "sed s/^/P:/")],
    );
    assert_eq!(shown(&r), prefixed, "{}", r.describe());
    // --no-pager, before or after the command's name, and an empty or
    // `cat` pager: straight to the terminal.
    for (args, env) in [
        (
            vec!["replay", "-d", d, "--no-pager", "--color", "never"],
            pager,
        ),
        (
            vec!["--no-pager", "replay", "-d", d, "--color", "never"],
            pager,
        ),
        (vec!["replay", "-d", d, "--color", "never"], [("PAGER", "")]),
        (
            vec!["replay", "-d", d, "--color", "never"],
            [("PAGER", "cat")],
        ),
    ] {
        let r = on_terminal(&args, &env);
        r.expect_success();
        assert_eq!(shown(&r), plain, "{args:?} {env:?}\n{}", r.describe());
    }
    // Not a terminal: never paged.
    let r = run(Command::new(fctrace_bin())
        .args(["replay", "-d", d])
        .env("PAGER", "sed s/^/P:/")
        .env("FCTRACE_PAGER", "sed s/^/P:/"));
    assert_eq!(r.stdout, plain);
    // report and info are paged too; live mode and record never.
    for args in [vec!["report", "-d", d], vec!["info", "-d", d]] {
        let r = on_terminal(&args, &pager);
        r.expect_success();
        let text = shown(&r);
        assert!(
            !text.is_empty() && text.lines().all(|l| l.starts_with("P:")),
            "{args:?}\n{}",
            r.describe()
        );
    }
    let exe = terminal_program();
    let r = on_terminal(&[exe.to_str().unwrap()], &pager);
    r.expect_success();
    assert!(
        shown(&r).starts_with("quick 42 signal 10\n# DURATION"),
        "{}",
        r.describe()
    );
}

/// A long tree (6000 calls of `tick`: far more than a pipe holds).
fn long_recording() -> Recorded {
    let exe = terminal_program();
    let rec = record(&exe, &["repeat", "6000"], &[]);
    assert_eq!(rec.run.stdout, "repeat 6000 53997000\n");
    rec
}

#[test]
fn a_pager_that_quits_early_is_no_error() {
    let rec = long_recording();
    let d = rec.dir.path.to_str().unwrap();
    // The pager reads two lines and quits: fctrace's next writes fail
    // (a closed pipe), which ends it quietly with status 0.
    for args in [
        vec!["replay", "-d", d],
        vec!["report", "-d", d],
        vec!["info", "-d", d],
    ] {
        let r = on_terminal(&args, &[("PAGER", "head -n 2")]);
        assert!(r.success(), "{args:?}\n{}", r.describe());
        assert_eq!(shown(&r).lines().count(), 2, "{args:?}\n{}", r.describe());
        assert!(!r.stdout.contains("fctrace:"), "{args:?}\n{}", r.describe());
    }
}

/// A command on a terminal whose output is watched as it comes and to
/// which keys are typed.
struct Session {
    child: std::process::Child,
    keys: std::process::ChildStdin,
    chunks: mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Session {
    fn start(mut cmd: Command) -> Session {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start script");
        let mut out = child.stdout.take().unwrap();
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Session {
            keys: child.stdin.take().unwrap(),
            child,
            chunks,
            seen: Vec::new(),
        }
    }

    /// Waits until the terminal has shown `text` (the test fails after a
    /// minute).
    fn wait_for(&mut self, text: &str) {
        self.wait_for_after(0, text);
    }

    /// Waits until the terminal has shown `text` after the first `start`
    /// bytes it showed; returns where it ends.
    fn wait_for_after(&mut self, start: usize, text: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tail = String::from_utf8_lossy(self.seen.get(start..).unwrap_or_default());
            if let Some(at) = tail.find(text) {
                // (Offsets in the lossy text: the output here is ASCII.)
                return start + at + text.len();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "the terminal never showed {text:?}; it showed:\n{}",
                        String::from_utf8_lossy(&self.seen)
                    );
                }
            }
        }
    }

    /// Types `keys` without waiting.
    fn type_keys(&mut self, keys: &[u8]) {
        self.keys.write_all(keys).unwrap();
        self.keys.flush().unwrap();
    }

    /// Types `keys`, then waits for the end (killed after a minute).
    fn type_and_wait(self, keys: &[u8]) -> (std::process::ExitStatus, String) {
        self.wait_typing(keys, false)
    }

    /// Types `keys` again each half second until the end (killed after a
    /// minute), for a program that may drop keys typed at a bad moment.
    fn type_until_end(self, keys: &[u8]) -> (std::process::ExitStatus, String) {
        self.wait_typing(keys, true)
    }

    fn wait_typing(mut self, keys: &[u8], again: bool) -> (std::process::ExitStatus, String) {
        self.keys.write_all(keys).unwrap();
        self.keys.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next_keys = Instant::now() + Duration::from_millis(500);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if again && Instant::now() > next_keys {
                // The pty may be gone by now: the end is seen above.
                let _ = self.keys.write_all(keys).and_then(|_| self.keys.flush());
                next_keys = Instant::now() + Duration::from_millis(500);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "still running a minute after typing {keys:?}:\n{}",
                    String::from_utf8_lossy(&self.seen)
                );
            }
            // Polling for the time limit only.
            std::thread::sleep(Duration::from_millis(10));
        };
        while let Ok(chunk) = self.chunks.recv_timeout(Duration::from_secs(10)) {
            self.seen.extend(chunk);
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (
            status,
            String::from_utf8_lossy(&self.seen).into_owned() + &err,
        )
    }
}

#[test]
fn less_by_default_and_quitting_it_with_q() {
    require_tool("less", "less");
    let rec = long_recording();
    let d = rec.dir.path.to_str().unwrap();
    for args in [vec!["replay", "-d", d], vec!["report", "-d", d]] {
        let mut s = Session::start(script_command(&shell_line(&args), &[]));
        // less shows a screenful (24 lines) and waits at its prompt: the
        // 20th `tick` line of the tree, or the report's header.
        let screenful = if args[0] == "replay" {
            "| main() {"
        } else {
            "Total time"
        };
        s.wait_for(screenful);
        let (status, seen) = s.type_and_wait(b"q");
        assert!(status.success(), "{args:?} {status}\n{seen}");
        assert!(!seen.contains("fctrace:"), "{args:?}\n{seen}");
        assert!(!seen.to_lowercase().contains("broken pipe"), "{seen}");
        // Not all 6000 calls were shown: the user quit first.
        assert!(seen.matches("tick").count() < 100, "{seen}");
    }
}

#[test]
fn ctrl_c_in_the_pager_leaves_fctrace_waiting_for_it() {
    let rec = long_recording();
    let d = rec.dir.path.to_str().unwrap();
    let mut s = Session::start(script_command(&shell_line(&["replay", "-d", d]), &[]));
    s.wait_for("| main() {");
    // Ctrl-C goes to fctrace and less (one process group): less takes it,
    // fctrace must not die (its pager would be left behind); `q` then
    // ends both, quietly. less answers Ctrl-C with a bell and redraws the
    // screen up to its prompt (keys typed before that are dropped).
    let before = s.seen.len();
    s.type_keys(b"\x03");
    s.wait_for_after(before, "\x07");
    // less may redraw its screen after the bell, or not; a `q` typed
    // during a redraw is dropped, so `q` is typed again until it is taken.
    let (status, seen) = s.type_until_end(b"q");
    assert!(status.success(), "{status}\n{seen}");
    assert!(!seen.contains("fctrace:"), "{seen}");
}

/// The same through an archive (`fctrace archive`): Ctrl-C in the pager
/// leaves fctrace waiting, and its temporary directory goes when `q`
/// ends it.
#[test]
fn ctrl_c_in_the_pager_on_an_archive_leaves_no_temporary_directory() {
    let rec = long_recording();
    let work = scratch("pager-archive");
    let packed = work.path.join("t.tar.zst");
    let r = fctrace(&[
        std::ffi::OsStr::new("archive"),
        std::ffi::OsStr::new("-d"),
        rec.dir.path.as_os_str(),
        std::ffi::OsStr::new("-o"),
        packed.as_os_str(),
    ]);
    assert!(r.success(), "{}", r.describe());
    let tmp = scratch("pager-archive-tmp");
    let tmpdir = tmp.path.to_str().unwrap();
    let line = shell_line(&["replay", "-d", packed.to_str().unwrap()]);
    let mut s = Session::start(script_command(&line, &[("TMPDIR", tmpdir)]));
    s.wait_for("| main() {");
    assert_eq!(
        std::fs::read_dir(&tmp.path).unwrap().count(),
        1,
        "the archive unpacked"
    );
    let before = s.seen.len();
    s.type_keys(b"\x03");
    s.wait_for_after(before, "\x07");
    let (status, seen) = s.type_until_end(b"q");
    assert!(status.success(), "{status}\n{seen}");
    assert!(!seen.contains("fctrace:"), "{seen}");
    assert_eq!(
        std::fs::read_dir(&tmp.path).unwrap().count(),
        0,
        "temporary files left"
    );
}

#[test]
fn output_file_keeps_the_tree_apart_from_the_programs_output() {
    let exe = terminal_program();
    let native = run_native(&exe, &[]);
    let dir = scratch("terminal-o");
    let file = dir.path.join("tree.txt");
    let r = fctrace(&["-o", file.to_str().unwrap(), exe.to_str().unwrap()]);
    r.expect_success();
    assert_eq!(r.stdout, native.stdout, "{}", r.describe());
    let tree = std::fs::read_to_string(&file).unwrap();
    assert!(tree.starts_with("# DURATION"), "{tree}");
    assert_eq!(lines_with(&tree, "} /* slow */").len(), 1, "{tree}");
    assert!(!tree.contains("quick 42"), "{tree}");
    assert!(!tree.contains('\x1b'));
    // On a terminal too: the tree is not coloured (a file), and no pager.
    let file2 = dir.path.join("tree2.txt");
    let r = on_terminal(
        &["-o", file2.to_str().unwrap(), exe.to_str().unwrap()],
        &[("PAGER", "false")],
    );
    r.expect_success();
    assert_eq!(shown(&r), native.stdout);
    let tree2 = std::fs::read_to_string(&file2).unwrap();
    assert!(
        !tree2.contains('\x1b') && tree2.contains("} /* slow */"),
        "{tree2}"
    );

    // A file that cannot be created: an error before the program runs.
    let bad = dir.path.join("no/such/dir/tree.txt");
    let r = fctrace(&["-o", bad.to_str().unwrap(), exe.to_str().unwrap()]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert_eq!(r.stdout, "", "the program ran\n{}", r.describe());
    assert_eq!(
        r.stderr,
        format!(
            "fctrace: cannot create {}: No such file or directory (os error 2)\n",
            bad.display()
        )
    );

    // replay, report and info: the same text into the file, none on stdout.
    let rec = recorded();
    let d = rec.dir.path.to_str().unwrap();
    for cmd in ["replay", "report", "info"] {
        let out = dir.path.join(format!("{cmd}.txt"));
        let r = fctrace(&[cmd, "-d", d, "-o", out.to_str().unwrap()]);
        r.expect_success();
        assert_eq!(r.stdout, "");
        let direct = fctrace(&[cmd, "-d", d]);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            direct.stdout,
            "{cmd}"
        );
    }
}

/// The commands `fctrace --help` lists (its `Commands:` section).
fn commands_in_help() -> Vec<String> {
    let help = fctrace(&["--help"]);
    help.expect_success();
    help.stdout
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn bare_fctrace_names_the_commands() {
    let r = fctrace::<&str>(&[]);
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    assert_eq!(r.stdout, "");
    let commands = commands_in_help();
    for name in ["record", "replay", "report", "info", "completions", "man"] {
        assert!(
            commands.iter().any(|c| c == name),
            "{name} not in --help: {commands:?}"
        );
    }
    for name in &commands {
        assert!(
            r.stderr
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{name} "))),
            "{name} is not listed\n{}",
            r.describe()
        );
    }
    assert!(r.stderr.starts_with("Usage: fctrace "), "{}", r.describe());
    // A program named like a command runs after `--`.
    let exe = terminal_program();
    let dir = scratch("terminal-dashdash");
    std::fs::copy(&exe, dir.path.join("info")).unwrap();
    let r = run(Command::new(fctrace_bin())
        .args(["--", "./info"])
        .current_dir(&dir.path));
    r.expect_success();
    assert!(
        r.stdout.starts_with("quick 42 signal 10\n# DURATION"),
        "{}",
        r.describe()
    );
}

#[test]
fn completions_load_in_bash_zsh_and_fish() {
    let script = fctrace(&["completions", "bash"]);
    script.expect_success();
    // Loaded, registered for fctrace, and completing `fctrace rep`.
    let dir = scratch("terminal-completions");
    let file = dir.path.join("fctrace.bash");
    std::fs::write(&file, &script.stdout).unwrap();
    // (In the scratch directory: no file there completes `rep`.)
    let r = run(Command::new("bash")
        .current_dir(&dir.path)
        .arg("-c")
        .arg(format!(
            "source {}; complete -p fctrace; COMP_WORDS=(fctrace rep); COMP_CWORD=1; \
         COMP_LINE='fctrace rep'; COMP_POINT=11; _fctrace fctrace rep fctrace; \
         echo \"${{COMPREPLY[*]}}\"",
            quote(file.to_str().unwrap())
        )));
    r.expect_success();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with("complete ") && lines[0].ends_with(" fctrace"),
        "{}",
        r.describe()
    );
    let mut words: Vec<&str> = lines[1].split_whitespace().collect();
    words.sort();
    assert_eq!(words, ["replay", "report"], "{}", r.describe());

    {
        require_tool("zsh", "zsh");
        let file = dir.path.join("_fctrace");
        std::fs::write(&file, fctrace(&["completions", "zsh"]).stdout).unwrap();
        let r = run(Command::new("zsh")
            .current_dir(&dir.path)
            .arg("-fc")
            .arg(format!(
            "autoload -Uz compinit && compinit -u -D && source {} && print -r -- $_comps[fctrace]",
            quote(file.to_str().unwrap())
        )));
        r.expect_success();
        assert_eq!(r.stdout.trim(), "_fctrace", "{}", r.describe());
    }
    {
        require_tool("fish", "fish");
        let file = dir.path.join("fctrace.fish");
        std::fs::write(&file, fctrace(&["completions", "fish"]).stdout).unwrap();
        let r = run(Command::new("fish")
            .current_dir(&dir.path)
            .arg("-c")
            .arg(format!(
                "source {}; complete -C 'fctrace rep'",
                quote(file.to_str().unwrap())
            )));
        r.expect_success();
        let mut words: Vec<&str> = r
            .stdout
            .lines()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        words.sort();
        assert_eq!(words, ["replay", "report"], "{}", r.describe());
    }
}

/// The shell lines of README.md between its `install-steps` markers.
fn readme_install_steps() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let start = readme
        .find("<!-- install-steps: begin")
        .expect("no install-steps markers in README.md");
    let end = readme[start..].find("<!-- install-steps: end -->").unwrap() + start;
    readme[start..end]
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A shell of a `cargo install` user: HOME is `home`, PATH its
/// `.cargo/bin` and the system's, nothing else from the test's
/// environment.
fn in_home(home: &Path, program: &str, args: &[&str]) -> Run {
    let path = format!("{}:/usr/bin:/bin", home.join(".cargo/bin").display());
    run(Command::new(program)
        .args(args)
        .current_dir(home)
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("TERM", "dumb")
        .env("MANWIDTH", "100"))
}

/// The README's steps for the manual pages and completions, run as
/// written in a clean HOME holding fctrace in ~/.cargo/bin (where
/// `cargo install` puts it): then `man fctrace` finds the pages, an
/// interactive bash (no bash-completion package needed), zsh and fish
/// complete fctrace.
#[test]
fn readme_install_steps_work_in_a_clean_home() {
    for (tool, package) in [("man", "man-db"), ("zsh", "zsh"), ("fish", "fish")] {
        require_tool(tool, package);
    }
    let dir = scratch("terminal-clean-home");
    let home = dir.path.join("home");
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::fs::copy(fctrace_bin(), home.join(".cargo/bin/fctrace")).unwrap();
    let steps = readme_install_steps();
    let r = in_home(&home, "bash", &["-euc", &steps]);
    assert!(
        r.success(),
        "the README's steps failed:\n{steps}\n{}",
        r.describe()
    );

    let r = in_home(&home, "man", &["-w", "fctrace"]);
    assert_eq!(
        r.stdout.trim(),
        home.join(".cargo/share/man/man1/fctrace.1")
            .to_str()
            .unwrap(),
        "{}",
        r.describe()
    );
    let r = in_home(&home, "man", &["fctrace-replay"]);
    assert!(
        r.success() && r.stdout.contains("--caller-filter"),
        "{}",
        r.describe()
    );

    let r = in_home(&home, "bash", &["-ic", "complete -p fctrace"]);
    assert!(
        r.stdout.starts_with("complete ") && r.stdout.trim_end().ends_with(" fctrace"),
        "bash: {}",
        r.describe()
    );
    let r = in_home(&home, "zsh", &["-ic", "print -r -- $_comps[fctrace]"]);
    assert_eq!(r.stdout.trim(), "_fctrace", "zsh: {}", r.describe());
    let r = in_home(&home, "fish", &["-c", "complete -C 'fctrace rep'"]);
    let mut words: Vec<&str> = r
        .stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    words.sort();
    assert_eq!(words, ["replay", "report"], "fish: {}", r.describe());
}

/// A manual page rendered as text by groff.
fn render_page(page: &Path) -> String {
    let r = run(Command::new("groff")
        .args(["-man", "-Tutf8", "-P", "-c", "-ww"])
        .arg(page));
    r.expect_success();
    assert!(r.stderr.is_empty(), "groff warned\n{}", r.describe());
    // Bold and underlined text as plain text.
    let mut text = String::new();
    let mut chars = r.stdout.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        text.push(c);
    }
    text
}

#[test]
fn manual_pages_render() {
    let dir = scratch("terminal-man");
    let page = fctrace(&["man"]);
    page.expect_success();
    let file = dir.path.join("fctrace.1");
    std::fs::write(&file, &page.stdout).unwrap();
    let text = render_page(&file);
    for want in [
        "NAME",
        "fctrace - Show every function call",
        "SYNOPSIS",
        "--no-pager",
        "--color",
        "--filter",
        "replay",
        "ENVIRONMENT",
        "NO_COLOR",
        "FCTRACE_PAGER",
        "fctrace -o tree.txt ./app",
    ] {
        assert!(text.contains(want), "{want:?} not in the page:\n{text}");
    }
    {
        require_tool("man", "man-db");
        let r = run(Command::new("man")
            .args(["-l", "-P", "cat"])
            .arg(&file)
            .env("MANWIDTH", "100"));
        r.expect_success();
        assert!(r.stdout.contains("--no-pager"), "{}", r.describe());
    }
    // --dir: a page per command, each rendering with its own options.
    let pages = dir.path.join("man1");
    std::fs::create_dir(&pages).unwrap();
    fctrace(&["man", "--dir", pages.to_str().unwrap()]).expect_success();
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = commands_in_help()
        .iter()
        .filter(|c| *c != "help")
        .map(|c| format!("fctrace-{c}.1"))
        .collect();
    expected.push("fctrace.1".into());
    expected.sort();
    assert_eq!(names, expected);
    let replay = render_page(&pages.join("fctrace-replay.1"));
    assert!(
        replay.contains("--caller-filter") && replay.contains("--output"),
        "{replay}"
    );
    assert_eq!(
        std::fs::read_to_string(pages.join("fctrace.1")).unwrap(),
        page.stdout
    );
}

#[test]
fn demo_script_finds_fctrace_under_cargo_target_dir() {
    // examples/demo.sh runs `cargo build --release`, then fctrace from
    // cargo's target directory. Here cargo's `build` is a stand-in that
    // builds nothing (the real build is minutes), and that directory holds
    // the fctrace of these tests: the script must find it there, not in
    // ./target.
    let dir = scratch("terminal-demo");
    let target = dir.path.join("target dir");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(fctrace_bin(), target.join("release/fctrace")).unwrap();
    let bin = dir.path.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let real_cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let stub = bin.join("cargo");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = build ]; then echo \"$@\" >> {log}; echo built >&2; exit 0; fi\n\
             exec {real} \"$@\"\n",
            log = quote(dir.path.join("builds").to_str().unwrap()),
            real = quote(&real_cargo)
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.sh");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let r = run(Command::new("bash")
        .arg(&demo)
        .arg("1+2*3")
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_NET_OFFLINE", "true"));
    assert!(r.success(), "{}", r.describe());
    assert!(r.stdout.starts_with("7\n# DURATION"), "{}", r.describe());
    assert_eq!(
        lines_with(&r.stdout, "| main() {").len(),
        1,
        "{}",
        r.describe()
    );
    assert_eq!(
        std::fs::read_to_string(dir.path.join("builds")).unwrap(),
        "build --release --quiet -p fctrace\n"
    );
    // It says it builds, before the (silent, long) build.
    assert!(
        r.stderr.starts_with(
            "demo.sh: building fctrace (cargo build --release), a few minutes the first \
             time...\nbuilt\n"
        ),
        "{}",
        r.describe()
    );
    assert!(target.join("examples/calc").exists());
}

/// Ctrl-C typed on the terminal of `fctrace -p`: the process, in another
/// process group, gets nothing from the terminal; fctrace detaches from it
/// and ends with status 0, and the process runs on as natively.
#[test]
fn ctrl_c_on_the_terminal_detaches_an_attached_process() {
    let exe = c_program("attach.c", "-O2", &["-O2", "-pthread"]);
    let native = {
        let mut p = Driven::start(&mut Command::new(&exe));
        p.wait_for("ready");
        p.send("go");
        p.wait_for("round 1");
        p.send("quit");
        p.finish()
    };
    let mut prog = Driven::start(&mut Command::new(&exe));
    prog.wait_for("ready");
    let pid = prog.child.id();
    let dir = TraceDir::new("terminal-attach");
    let line = shell_line(&[
        "record",
        "-d",
        dir.path.to_str().unwrap(),
        "-p",
        &pid.to_string(),
    ]);
    let mut s = Session::start(script_command(&line, &[]));
    s.wait_for("attached");
    let (status, shown) = s.type_and_wait(b"\x03");
    assert_eq!(status.code(), Some(0), "{shown}");
    assert!(
        shown.contains(&format!("detached from process {pid}")),
        "{shown}"
    );
    // Untraced now, and as natively: the round runs, quit ends it.
    prog.send("go");
    prog.wait_for("round 1");
    prog.send("quit");
    let (out, st) = prog.finish();
    assert_eq!(out, native.0);
    assert_eq!(st.code(), native.1.code());
}
