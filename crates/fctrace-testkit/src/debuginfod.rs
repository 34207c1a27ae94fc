//! A local `debuginfod` serving a directory on loopback, for the tests of
//! read-time naming; killed when dropped.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running debuginfod and its base URL.
pub struct Debuginfod {
    child: Child,
    pub url: String,
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Debuginfod {
    /// Serves the debug files in `dir` (its database in `db`), returned
    /// once it serves `build_id`'s (polled with that very request, at
    /// most 60 s).
    pub fn serve(dir: &Path, db: &Path, build_id: &str) -> Debuginfod {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(crate::process::require_tool("debuginfod", "debuginfod"))
            .arg("-F")
            .arg(dir)
            .args(["-p", &port.to_string(), "-d"])
            .arg(db)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("debuginfod: {e}"));
        let server = Debuginfod {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let start = Instant::now();
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                let request = format!(
                    "GET /buildid/{build_id}/debuginfo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                );
                let mut answer = Vec::new();
                if s.write_all(request.as_bytes()).is_ok() {
                    let _ = s.read_to_end(&mut answer);
                }
                if answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200") {
                    return server;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "debuginfod never served {build_id}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
