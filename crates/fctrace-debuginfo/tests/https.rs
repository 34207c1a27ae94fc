//! debuginfod over https: a TLS server started by the test (its CA and
//! certificate for 127.0.0.1 made with the openssl CLI) serves a
//! debuginfod tree; with its CA in `SSL_CERT_FILE` the debug file is
//! fetched, cached and names the stripped program's functions; a server
//! whose certificate no trusted CA signed gets one clear note, in time,
//! and nothing is cached.
//!
//! One test in its own binary: it sets `SSL_CERT_FILE` for the process.

mod common;

use common::{build, config, not_found, run};
use fctrace_debuginfo::{Finder, Found, Source};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e} (apt-get install openssl)"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `NAME-ca.pem` and a server certificate `NAME.pem` (key
/// `NAME.key`) it signed, for 127.0.0.1 and localhost.
fn certificates(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let ca = format!("{name}-ca.pem");
    let ca_key = format!("{name}-ca.key");
    let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
    args.extend(ec);
    args.extend(["-keyout", &ca_key, "-out", &ca]);
    let subject = format!("/CN=fctrace test CA {name}");
    args.extend(["-subj", &subject]);
    args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    args.extend(["-addext", "keyUsage=critical,keyCertSign"]);
    openssl(dir, &args);
    let (key, csr, cert) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let mut args = vec!["req", "-nodes"];
    args.extend(ec);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"]);
    openssl(dir, &args);
    let ext = format!("{name}.ext");
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &cert,
            "-extfile",
            &ext,
        ],
    );
    (dir.join(ca), dir.join(cert), dir.join(key))
}

/// A debuginfod over TLS on 127.0.0.1 serving `debug` for `build_id`
/// (chunked) and 404 for anything else; its URL and request count. The
/// socket listens before this returns: no waiting for it.
fn tls_server(
    cert: &Path,
    key: &Path,
    build_id: &str,
    debug: Vec<u8>,
) -> (String, Arc<AtomicUsize>) {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let count = requests.clone();
    let wanted = format!("GET /buildid/{build_id}/debuginfo ");
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            if !request.ends_with(b"\r\n\r\n") {
                continue; // the handshake failed: the client did not trust us
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = if request.starts_with(wanted.as_bytes()) {
                answer_chunked(&mut tls, &debug)
            } else {
                tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            };
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (url, requests)
}

fn answer_chunked(out: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")?;
    for chunk in body.chunks(10_000) {
        write!(out, "{:x}\r\n", chunk.len())?;
        out.write_all(chunk)?;
        out.write_all(b"\r\n")?;
    }
    out.write_all(b"0\r\n\r\n")
}

#[test]
fn debuginfod_over_https() {
    let b = build(true);
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(certs.path(), "trusted");
    // The other server's CA is trusted nowhere.
    let (_, rogue_cert, rogue_key) = certificates(certs.path(), "rogue");
    assert!(run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(&ca)
        .arg(&cert))
    .contains(": OK"));
    std::env::remove_var("SSL_CERT_DIR");
    std::env::set_var("SSL_CERT_FILE", &ca);
    let debug = std::fs::read(&b.debug).unwrap();

    let (url, requests) = tls_server(&cert, &key, &b.build_id, debug.clone());
    let cache = tempfile::tempdir().unwrap();
    let finder = || {
        Finder::new(config(
            vec![],
            Path::new("/nonexistent"),
            vec![url.clone()],
            cache.path(),
        ))
    };
    let mut first = finder();
    let found = b.names_through(&mut first);
    let cached = cache.path().join(&b.build_id).join("debuginfo");
    assert_eq!(
        found,
        Found {
            path: cached.clone(),
            source: Source::Debuginfod(url.clone())
        }
    );
    assert_eq!(first.take_notes(), Vec::<String>::new());
    assert_eq!(std::fs::read(&cached).unwrap(), debug);
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    // The next reader: from the cache, the server not asked.
    let found = b.names_through(&mut finder());
    assert_eq!(found.source, Source::DebuginfodCache);
    assert_eq!(requests.load(Ordering::SeqCst), 1);

    // A certificate no trusted CA signed: one note, in time, nothing kept.
    let (rogue, rogue_requests) = tls_server(&rogue_cert, &rogue_key, &b.build_id, debug);
    let other_cache = tempfile::tempdir().unwrap();
    let mut finder = Finder::new(config(
        vec![],
        Path::new("/nonexistent"),
        vec![rogue.clone()],
        other_cache.path(),
    ));
    let start = Instant::now();
    not_found(&b, &mut finder);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let notes = finder.take_notes();
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(
        notes[0].starts_with(&format!("debuginfod server {rogue} cannot be used: TLS: "))
            && notes[0].contains("invalid peer certificate: UnknownIssuer")
            && notes[0].contains("SSL_CERT_FILE")
            && !notes[0].contains('\n'),
        "{notes:#?}"
    );
    assert_eq!(rogue_requests.load(Ordering::SeqCst), 0);
    assert_eq!(std::fs::read_dir(other_cache.path()).unwrap().count(), 0);

    // The CA in a directory of SSL_CERT_DIR (hashed as `openssl rehash`
    // and update-ca-certificates leave it): trusted too.
    let dir = certs.path().join("cert-dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&ca, dir.join("company-ca.pem")).unwrap();
    openssl(certs.path(), &["rehash", dir.to_str().unwrap()]);
    std::env::remove_var("SSL_CERT_FILE");
    std::env::set_var("SSL_CERT_DIR", &dir);
    let by_dir = |cache: &Path| {
        Finder::new(config(
            vec![],
            Path::new("/nonexistent"),
            vec![url.clone()],
            cache,
        ))
    };
    let third_cache = tempfile::tempdir().unwrap();
    let found = b.names_through(&mut by_dir(third_cache.path()));
    assert_eq!(found.source, Source::Debuginfod(url.clone()));
    assert_eq!(requests.load(Ordering::SeqCst), 2);

    // No CA certificate at all: one note saying where they are looked for.
    let empty = certs.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    std::env::remove_var("SSL_CERT_DIR");
    std::env::set_var("SSL_CERT_FILE", &empty);
    let fourth_cache = tempfile::tempdir().unwrap();
    let mut finder = by_dir(fourth_cache.path());
    not_found(&b, &mut finder);
    let notes = finder.take_notes();
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(
        notes[0].contains("no trusted CA certificate found")
            && notes[0].contains("apt-get install ca-certificates"),
        "{notes:#?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}
