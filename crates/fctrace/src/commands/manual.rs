//! `fctrace completions SHELL` and `fctrace man`: the shell completion
//! scripts and the manual pages, generated from the command-line definition
//! of `cli` (clap_complete, clap_mangen), so they list exactly the options
//! fctrace takes.

use crate::cli::{CompletionsArgs, ManArgs};
use anyhow::Context;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Prints the completion script of the shell.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "fctrace", &mut out);
    write_stdout(&out)
}

/// What the generated page does not say: the environment fctrace reads.
const ENVIRONMENT: &str = r#".SH ENVIRONMENT
.TP
\fBFCTRACE_PAGER\fR, \fBPAGER\fR
The pager of \fBreplay\fR, \fBreport\fR and \fBinfo\fR on a terminal, run by \fB/bin/sh -c\fR; empty or \fBcat\fR: none. Without either, \fBless -R\fR.
.TP
\fBLESS\fR
Set to \fBFRX\fR for the pager when not set (as git does): less quits at once on an output that fits the screen, and shows colours.
.TP
\fBNO_COLOR\fR
When set and not empty, \fB\-\-color auto\fR does not colour.
.SH SEE ALSO
\fBfctrace\-record\fR(1), \fBfctrace\-replay\fR(1), \fBfctrace\-report\fR(1), \fBfctrace\-info\fR(1), \fBuftrace\fR(1), \fBstrace\fR(1)
"#;

/// Prints fctrace.1, or writes it and a page per command into `--dir`
/// or, with `--install`, next to the binary.
pub fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = crate::cli::command().disable_help_subcommand(true);
    cmd.build();
    let dir = if args.install {
        Some(install_dir()?)
    } else {
        args.dir
    };
    let code = write_pages(&cmd, dir.as_deref())?;
    match (args.install, &dir) {
        (true, Some(dir)) => {
            write_stdout(format!("manual pages written to {}\n", dir.display()).as_bytes())
        }
        _ => Ok(code),
    }
}

/// `BIN/../share/man/man1` of the running fctrace (BIN its directory),
/// created if missing. man-db adds `BIN/../share/man` to its search path
/// for each BIN on PATH, so the pages are found without MANPATH.
fn install_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the fctrace binary")?;
    let prefix = exe
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} has no parent directory", exe.display()))?;
    let dir = prefix.join("share/man/man1");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Prints fctrace.1 (no `dir`), or writes it and a page per command into
/// `dir`.
fn write_pages(cmd: &clap::Command, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    match dir {
        None => {
            let mut out = Vec::new();
            render(cmd, &mut out)?;
            write_stdout(&out)
        }
        Some(dir) => {
            let mut pages = vec![cmd.clone()];
            pages.extend(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
            for page in pages {
                let man = clap_mangen::Man::new(page.clone());
                let path = dir.join(man.get_filename());
                let mut text = Vec::new();
                render(&page, &mut text)?;
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The page of `cmd`: clap_mangen's sections, the examples of the
/// long help as an EXAMPLES section (kept as written), and for the
/// top-level page the environment.
fn render(cmd: &clap::Command, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone()).manual("fctrace manual");
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(out)?;
    }
    if let Some(after) = cmd.get_after_long_help() {
        out.extend_from_slice(examples_section(&after.to_string()).as_bytes());
    }
    if cmd.get_version().is_some() {
        man.render_version_section(out)?;
    }
    if cmd.get_name() == "fctrace" {
        out.extend_from_slice(ENVIRONMENT.as_bytes());
    }
    Ok(())
}

/// The `Examples:` text of the long help as a roff section whose lines
/// stay as they are (no filling), quotes and dashes as typed.
fn examples_section(text: &str) -> String {
    let mut roff = String::from(".SH EXAMPLES\n.nf\n");
    for line in text.lines().skip_while(|l| l.trim_end() == "Examples:") {
        if line.is_empty() {
            roff.push_str(".fi\n.PP\n.nf\n");
            continue;
        }
        let escaped = line
            .replace('\\', "\\e")
            .replace('-', "\\-")
            .replace('\'', "\\(aq");
        roff.push_str("\\&");
        roff.push_str(&escaped);
        roff.push('\n');
    }
    roff.push_str(".fi\n");
    roff
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(ExitCode::SUCCESS),
    }
}
