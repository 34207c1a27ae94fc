//! A plain HTTP/1.1 GET over a TCP connection, enough for debuginfod's
//! `GET /buildid/<hex>/debuginfo` (no TLS: an `https://` URL is refused
//! with a message saying so).
//!
//! Why no HTTP crate (measured on a hello-world GET binary, stripped
//! release, this machine): std alone 368 KB; ureq 2 without TLS 856 KB
//! (+41 crates, 13 s to build); ureq 2 with rustls, ring and webpki-roots
//! 2,523 KB (+73 crates, 69 s, a C/asm build step), for https servers
//! only.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A server's answer: its status, and the body of a 200.
#[derive(Debug)]
pub enum Answer {
    Found(Vec<u8>),
    Status(u16),
}

/// How many redirections are followed.
const MAX_REDIRECTS: usize = 4;

/// `GET url`; `timeout` bounds the connection and each read. An error is a
/// short phrase (why the server could not be asked).
pub fn get(url: &str, timeout: Duration) -> Result<Answer, String> {
    let mut url = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let (authority, path) = split_url(&url)?;
        let (status, headers, body) = exchange(authority, path, timeout)?;
        match status {
            200 => return Ok(Answer::Found(body)),
            301 | 302 | 303 | 307 | 308 => {
                let Some(to) = header(&headers, "location") else {
                    return Ok(Answer::Status(status));
                };
                url = if to.starts_with('/') {
                    format!("http://{authority}{to}")
                } else {
                    to.to_string()
                };
            }
            _ => return Ok(Answer::Status(status)),
        }
    }
    Err(format!("more than {MAX_REDIRECTS} redirections"))
}

/// `http://host[:port]/path` as its authority and path.
fn split_url(url: &str) -> Result<(&str, &str), String> {
    if url.starts_with("https://") {
        return Err("https is not supported (fctrace speaks plain http only): \
                    use an http:// server, e.g. a local debuginfod or a caching proxy"
            .to_string());
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| "not an http:// URL".to_string())?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    })
}

/// One request on a new connection: status, headers, body.
fn exchange(
    authority: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String, Vec<u8>), String> {
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.contains(']'))
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addrs = with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?;
    let mut last = format!("{authority} has no address");
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = plain_error(&e, timeout),
        }
    }
    let mut stream = stream.ok_or(last)?;
    let io = |e: std::io::Error| plain_error(&e, timeout);
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // One write: a server may answer (and close) after the first part.
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: fctrace\r\n\
         Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse_response(raw)
}

/// An I/O error as a phrase: a time-out says how long was waited.
fn plain_error(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            format!("no answer within {} s", timeout.as_secs_f64())
        }
        _ => e.to_string(),
    }
}

/// Status, headers and body of a whole response.
fn parse_response(mut raw: Vec<u8>) -> Result<(u16, String, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the server's answer is not HTTP (no end of headers)")?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let body = raw.split_off(end + 4);
    let status = head
        .lines()
        .next()
        .filter(|l| l.starts_with("HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("the server's answer is not HTTP (no status line)")?;
    let body = if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        unchunk(&body)?
    } else if let Some(len) = header(&head, "content-length") {
        let len: usize = len.parse().map_err(|_| "a bad Content-Length")?;
        if body.len() < len {
            return Err(format!(
                "the connection closed after {} of {len} bytes",
                body.len()
            ));
        }
        body[..len].to_vec()
    } else {
        body
    };
    Ok((status, head, body))
}

/// The value of a header (case-insensitive name).
fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A chunked body, decoded.
fn unchunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a truncated chunked body")?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "a bad chunk size")?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("a truncated chunked body".to_string());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef".to_vec());
        assert_eq!(r.unwrap().2, b"abc");
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;x\r\nc\r\n0\r\n\r\n"
                .to_vec(),
        );
        assert_eq!(r.unwrap().2, b"abc");
        let r = parse_response(b"HTTP/1.0 404 Not Found\r\n\r\n".to_vec()).unwrap();
        assert_eq!(r.0, 404);
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab".to_vec())
                .unwrap_err()
                .contains("2 of 9")
        );
        assert!(parse_response(b"SSH-2.0\r\n\r\n".to_vec()).is_err());
        assert!(split_url("https://debuginfod.debian.net")
            .unwrap_err()
            .contains("https is not supported"));
        assert_eq!(split_url("http://h:8/x").unwrap(), ("h:8", "/x"));
    }
}
