//! HTTP and HTTPS GETs for debuginfod's `GET /buildid/<hex>/debuginfo`,
//! through ureq (redirections, chunked bodies, connection and read
//! time-outs) with rustls for TLS. The body is handed over as a reader, so
//! a big debug file goes to the cache's temporary file without being held
//! in memory.
//!
//! Trust: the CA certificates OpenSSL and curl would use
//! (rustls-native-certs): `SSL_CERT_FILE` and `SSL_CERT_DIR` when set,
//! else the system store (Debian: `/etc/ssl/certs/ca-certificates.crt`),
//! so a corporate CA added there is trusted. No root list is built in: a
//! machine without a CA store gets a note saying where to put one.
//!
//! Cost (measured on fctrace's stripped release binary): ureq 2, rustls,
//! ring and rustls-native-certs add 1.83 MB (12.57 to 14.39 MB), 18
//! crates built on Linux and ring's C/asm build step; the hand-written
//! HTTP/1.1 client they replace had no TLS. Why ureq 2 rather than 3:
//! its read time-out bounds each read, as `DEBUGINFOD_TIMEOUT` asks
//! (ureq 3 bounds the whole body, too little for a big debug file).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

/// A server's answer: the body of a 200 to read, else the status.
pub enum Answer {
    Found(Box<dyn Read + Send + Sync>),
    Status(u16),
}

/// How many redirections are followed.
const MAX_REDIRECTS: u32 = 4;

/// An HTTP(S) client; `timeout` bounds the connection and each read.
pub struct Client {
    agent: ureq::Agent,
    timeout: Duration,
    /// Why https cannot be used (no CA certificate found), if so.
    no_trust: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("http::Client")
            .field("timeout", &self.timeout)
            .field("no_trust", &self.no_trust)
            .finish()
    }
}

impl Client {
    /// A client; `https` says whether TLS will be needed (the CA store is
    /// read only then).
    pub fn new(timeout: Duration, https: bool) -> Client {
        let (roots, no_trust) = if https {
            trusted_roots()
        } else {
            (rustls::RootCertStore::empty(), None)
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth());
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout_read(timeout)
            .timeout_write(timeout)
            .redirects(MAX_REDIRECTS)
            .user_agent("fctrace");
        let no_trust = match tls {
            Ok(config) => {
                builder = builder.tls_connector(Arc::new(Tls(Arc::new(config))));
                no_trust
            }
            Err(e) => Some(format!("TLS cannot be set up: {e}")),
        };
        Client {
            agent: builder.build(),
            timeout,
            no_trust,
        }
    }

    /// `GET url`. An error is a short phrase (why the server could not be
    /// asked).
    pub fn get(&self, url: &str) -> Result<Answer, String> {
        if url.starts_with("https://") {
            if let Some(why) = &self.no_trust {
                return Err(why.clone());
            }
        } else if !url.starts_with("http://") {
            return Err("not an http:// or https:// URL".to_string());
        }
        match self.agent.get(url).call() {
            Ok(response) if response.status() == 200 => {
                Ok(Answer::Found(Box::new(response.into_reader())))
            }
            Ok(response) => Ok(Answer::Status(response.status())),
            Err(ureq::Error::Status(status, _)) => Ok(Answer::Status(status)),
            Err(ureq::Error::Transport(t)) => Err(transport_error(&t, self.timeout)),
        }
    }

    /// A read error of a body, as a phrase.
    pub fn read_error(&self, e: &std::io::Error) -> String {
        io_phrase(e, self.timeout)
    }
}

/// TLS for ureq (its own, with a built-in root list, is not compiled in):
/// rustls over the connection ureq opened.
struct Tls(Arc<rustls::ClientConfig>);

impl ureq::TlsConnector for Tls {
    fn connect(
        &self,
        dns_name: &str,
        mut io: Box<dyn ureq::ReadWrite>,
    ) -> Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        let host = dns_name.trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut conn = rustls::ClientConnection::new(self.0.clone(), name)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        // The handshake now: a refused certificate is the connection's
        // error, not the first read's.
        while conn.is_handshaking() {
            conn.complete_io(&mut io)?;
        }
        Ok(Box::new(TlsStream(rustls::StreamOwned::new(conn, io))))
    }
}

/// A TLS connection as ureq reads and writes it.
#[derive(Debug)]
struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, Box<dyn ureq::ReadWrite>>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl std::io::Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl ureq::ReadWrite for TlsStream {
    fn socket(&self) -> Option<&std::net::TcpStream> {
        self.0.sock.socket()
    }
}

/// The CA certificates to trust, and why there are none if so.
fn trusted_roots() -> (rustls::RootCertStore, Option<String>) {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added > 0 {
        return (roots, None);
    }
    let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
    let why = format!(
        "no trusted CA certificate found{} (SSL_CERT_FILE, SSL_CERT_DIR, else the \
         system store: apt-get install ca-certificates)",
        if errors.is_empty() {
            String::new()
        } else {
            format!(": {}", errors.join("; "))
        }
    );
    (roots, Some(why))
}

/// A transport error (connection, TLS, time-out, bad answer) as a phrase.
fn transport_error(t: &ureq::Transport, timeout: Duration) -> String {
    use std::error::Error;
    let mut source = t.source();
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_phrase(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return tls_phrase(tls);
            }
            return io_phrase(io, timeout);
        }
        source = e.source();
    }
    match t.kind() {
        ureq::ErrorKind::TooManyRedirects => format!("more than {MAX_REDIRECTS} redirections"),
        _ => t
            .message()
            .map_or_else(|| t.kind().to_string(), str::to_string),
    }
}

/// A TLS failure as a phrase; an untrusted certificate says where trust
/// comes from.
fn tls_phrase(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(_) => format!(
            "TLS: {e} (the CAs trusted are SSL_CERT_FILE, SSL_CERT_DIR, else the system store)"
        ),
        _ => format!("TLS: {e}"),
    }
}

/// An I/O error as a phrase: a time-out says how long was waited.
fn io_phrase(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            format!("no answer within {} s", timeout.as_secs_f64())
        }
        _ => e.to_string(),
    }
}
