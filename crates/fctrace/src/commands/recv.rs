//! `fctrace recv`: receive the traces `fctrace record --host` sends and
//! write each under the receiving directory (the protocol and every check
//! of what a sender names are `fctrace_format::stream`'s). One thread per
//! connection, a bounded number of them; a connection's error is reported
//! and ends that connection only. Ctrl-C (SIGINT, SIGTERM, SIGHUP) removes
//! the traces still arriving and ends it.

use crate::cli::RecvArgs;
use anyhow::Context;
use fctrace_format::stream;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The most connections received at once; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

pub fn run(args: RecvArgs) -> anyhow::Result<ExitCode> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    if !args.dir.is_dir() {
        anyhow::bail!("{} is not a directory", args.dir.display());
    }
    let listener = TcpListener::bind((args.bind, args.port))
        .with_context(|| format!("listening on {}:{}", args.bind, args.port))?;
    end_on_signals()?;
    let local = listener.local_addr()?;
    eprintln!(
        "fctrace recv: listening on {local}, traces go under {}",
        args.dir.display()
    );
    let open = Arc::new(AtomicUsize::new(0));
    let limits = stream::Limits {
        max_bytes: args.max_size,
    };
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("fctrace recv: accepting a connection: {e}");
                continue;
            }
        };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            eprintln!(
                "fctrace recv: {}: closed, {MAX_CONNECTIONS} connections are open already",
                peer(&conn)
            );
            continue;
        }
        let (open, dir, cmd) = (Arc::clone(&open), args.dir.clone(), args.run_cmd.clone());
        std::thread::spawn(move || {
            serve(&conn, &dir, limits, cmd.as_deref());
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn peer(conn: &TcpStream) -> String {
    conn.peer_addr()
        .map_or_else(|_| "a sender".to_string(), |a| a.to_string())
}

/// Receives one connection's trace, reports it, runs --run-cmd on it.
fn serve(conn: &TcpStream, dir: &Path, limits: stream::Limits, cmd: Option<&str>) {
    let from = peer(conn);
    match stream::receive(conn, dir, limits) {
        Ok(got) => {
            eprintln!(
                "fctrace recv: received {} from {from} ({} files, {} bytes) in {}",
                got.name,
                got.files,
                got.bytes,
                got.dir.display()
            );
            if let Some(cmd) = cmd {
                run_cmd(cmd, &got.dir);
            }
        }
        Err(e) => eprintln!("fctrace recv: {from}: refused: {e}"),
    }
}

/// `--run-cmd CMD`: `sh -c CMD` with the trace's directory as $1.
fn run_cmd(cmd: &str, trace: &Path) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .arg("fctrace-recv")
        .arg(trace)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => eprintln!("fctrace recv: --run-cmd ended with {s}"),
        Err(e) => eprintln!("fctrace recv: --run-cmd: cannot run sh: {e}"),
    }
}

/// Ctrl-C, SIGTERM, SIGHUP: the traces still arriving are removed, and
/// recv ends (status 0: that is how it is stopped).
fn end_on_signals() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("catching Ctrl-C")?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            stream::remove_incoming();
            eprintln!("fctrace recv: stopped (signal {sig})");
            std::process::exit(0);
        }
    });
    Ok(())
}
