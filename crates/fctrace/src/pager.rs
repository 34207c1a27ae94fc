//! The terminal: the pager, and whether to colour the output.
//!
//! The pager ([`Pager::start`]) takes the place of stdout (and of stderr,
//! when that is the same terminal, so warnings are read in the pager and
//! do not draw over it), as git does. Colour itself is switched in the
//! renderings ([`fctrace_analysis::term`]); here `--color` and where the
//! output goes decide it ([`colour_wanted`]).

use crate::cli::ColorWhen;
use std::io::{self, IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};

/// Whether to colour output going to a terminal or not (`to_terminal`):
/// `auto` colours a terminal unless NO_COLOR is set to something
/// (no-color.org).
pub fn colour_wanted(when: ColorWhen, to_terminal: bool) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => to_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    }
}

/// A running pager that stdout (and maybe stderr) write into.
pub struct Pager {
    child: Child,
    /// The terminal that stdout was.
    saved_stdout: OwnedFd,
    /// The terminal that stderr was, if it goes to the pager too.
    saved_stderr: Option<OwnedFd>,
    ended: bool,
}

/// The pager command: $FCTRACE_PAGER, else $PAGER (run by `sh -c`, as git
/// runs them), else `less -R`; none when the chosen one is empty or `cat`.
fn pager_command() -> Option<Command> {
    let chosen = ["FCTRACE_PAGER", "PAGER"].iter().find_map(std::env::var_os);
    let mut command = match chosen {
        Some(cmd) => {
            let text = cmd.to_string_lossy();
            if text.trim().is_empty() || text.trim() == "cat" {
                return None;
            }
            let mut sh = Command::new("/bin/sh");
            sh.arg("-c").arg(&cmd);
            sh
        }
        None => {
            let mut less = Command::new("less");
            less.arg("-R");
            less
        }
    };
    // As git: less quits at once on a short output, shows colours and does
    // not clear the screen, unless the user configured it otherwise.
    if std::env::var_os("LESS").is_none() {
        command.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        command.env("LV", "-c");
    }
    Some(command)
}

impl Pager {
    /// Starts the pager when stdout is a terminal and one is configured.
    /// A pager that cannot be started is no pager: the output goes to the
    /// terminal directly.
    pub fn start() -> Option<Pager> {
        if !io::stdout().is_terminal() {
            return None;
        }
        let mut command = pager_command()?;
        let mut child = command.stdin(Stdio::piped()).spawn().ok()?;
        let pipe = OwnedFd::from(child.stdin.take()?);
        let saved_stdout = io::stdout().as_fd().try_clone_to_owned().ok()?;
        let stderr_too = io::stderr().is_terminal();
        let saved_stderr = if stderr_too {
            io::stderr().as_fd().try_clone_to_owned().ok()
        } else {
            None
        };
        let _ = io::stdout().flush();
        if rustix::stdio::dup2_stdout(&pipe).is_err() {
            drop(pipe);
            let _ = child.wait();
            return None;
        }
        if saved_stderr.is_some() {
            let _ = rustix::stdio::dup2_stderr(&pipe);
        }
        // Started first: the pager keeps the default dispositions.
        fctrace_record::ignore_terminal_interrupts();
        Some(Pager {
            child,
            saved_stdout,
            saved_stderr,
            ended: false,
        })
    }

    /// Ends the output (the pager sees its end) and waits for the user to
    /// quit the pager; stdout and stderr are the terminal again.
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let _ = io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(&self.saved_stdout);
        if let Some(fd) = self.saved_stderr.take() {
            let _ = rustix::stdio::dup2_stderr(&fd);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_and_never_ignore_the_terminal() {
        assert!(colour_wanted(ColorWhen::Always, false));
        assert!(!colour_wanted(ColorWhen::Never, true));
        assert!(!colour_wanted(ColorWhen::Auto, false));
    }
}
