//! `fctrace archive`: packs a trace directory into one file to send
//! (fctrace_format's `store::pack`), and the clean-up of an archive's
//! temporary files when a signal ends a command that reads or writes one.

use super::info::human_bytes;
use crate::cli::ArchiveArgs;
use fctrace_format::store::{archive, pack};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::Path;
use std::process::ExitCode;

pub fn run(args: ArchiveArgs) -> anyhow::Result<ExitCode> {
    let out = match args.output {
        Some(out) => out,
        None => pack::default_output(&args.dir)?,
    };
    clean_up_on_signals();
    let packed = pack::pack(&args.dir, &out, args.force)?;
    for path in &packed.skipped {
        eprintln!(
            "fctrace: warning: {} left out: not a regular file or directory",
            path.display()
        );
    }
    eprintln!(
        "fctrace: {} written: {} ({} files of {}); `fctrace replay -d {}` reads it anywhere, \
         `tar --zstd -xf` unpacks it",
        out.display(),
        human_bytes(packed.archive_bytes),
        packed.files,
        human_bytes(packed.trace_bytes),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// For a command about to read `paths`: when one is a file (an archive,
/// unpacked into a temporary directory), a signal that ends the process
/// (Ctrl-C, SIGTERM, SIGHUP) first removes the temporary directory, then
/// ends it as it would have.
pub fn clean_up_if_archive(paths: &[&Path]) {
    if paths.iter().any(|p| p.is_file()) {
        clean_up_on_signals();
    }
}

/// On SIGINT, SIGTERM or SIGHUP: [`archive::remove_pending`], then the
/// signal's default action (the process ends by it, as without this).
fn clean_up_on_signals() {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            archive::remove_pending();
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            std::process::exit(128 + sig);
        }
    });
}
