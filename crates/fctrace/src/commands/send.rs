//! `record --host HOST --port PORT`: the connection to an `fctrace recv`,
//! made and accepted before the program starts, and the trace directory
//! sent over it once the recording ended (the protocol is
//! `fctrace_format::stream`'s). A failure to send keeps the local trace
//! and says so; it never changes how the program ran nor fctrace's exit
//! status, which is the program's.

use anyhow::Context;
use fctrace_format::stream;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// How long connecting to one address of the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A receiver that accepted the trace's name.
pub struct Connected {
    sender: stream::Sender,
    to: String,
}

/// Connects to `host:port` and announces the trace (named after `dir`'s
/// last component, as uftrace's recv names it): an error when no receiver
/// answers or it refuses, before anything runs.
pub fn connect(host: &str, port: u16, dir: &Path) -> anyhow::Result<Connected> {
    let to = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let name = dir.file_name().and_then(|n| n.to_str()).with_context(|| {
        format!(
            "--host: the trace is named after -d's last component, and {} has none a \
                 receiver takes (give -d a name, e.g. -d run1.data)",
            dir.display()
        )
    })?;
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("--host: cannot resolve {host}"))?
        .collect();
    let mut last = None;
    let mut conn = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let conn = conn.with_context(|| {
        format!(
            "--host: cannot connect to {to}: {} (is `fctrace recv --port {port}` running \
             there?); the program was not started",
            last.map_or_else(|| "no address".to_string(), |e| e.to_string())
        )
    })?;
    // The receiver answers the name at once; a peer that does not is no
    // fctrace recv.
    conn.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    let sender = stream::Sender::connect(conn, name)
        .map_err(|e| anyhow::anyhow!("--host {to}: {e}; the program was not started"))?;
    Ok(Connected { sender, to })
}

impl Connected {
    /// Sends the finished trace directory; on failure the local copy is
    /// kept and fctrace says so.
    pub fn send(self, dir: &Path) {
        match self.sender.send_dir(dir) {
            Ok(sent) => eprintln!(
                "fctrace: trace sent to {} ({} files, {} bytes); also kept in {}",
                self.to,
                sent.files,
                sent.bytes,
                dir.display()
            ),
            Err(e) => eprintln!(
                "fctrace: sending the trace to {} failed: {e}; the trace is kept in {}",
                self.to,
                dir.display()
            ),
        }
    }
}
