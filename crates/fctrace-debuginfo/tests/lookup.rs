//! Finding a stripped program's debug file in each place (a `--debug-dir`
//! by build-id, by debug-link name and by any file name; `/usr/lib/debug`;
//! a local debuginfod and its cache) and naming its functions from it,
//! checked against `nm` on the unstripped build; wrong files refused;
//! unreachable servers noted once, within the time-out.

mod common;

use common::{build, config, not_found, offline};
use fctrace_debuginfo::{name_symtab, Finder, Found, Source};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[test]
fn debug_dir_by_build_id_link_name_and_any_name() {
    let b = build(true);
    let other = build(true);
    // Nothing anywhere: nothing named, the table unchanged.
    not_found(&b, &mut offline(vec![]));

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = &b.build_id;
    let by_id = d
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    // Another program's debug file there is refused (another build-id).
    std::fs::copy(&other.debug, &by_id).unwrap();
    not_found(&b, &mut offline(vec![d.to_path_buf()]));
    std::fs::copy(&b.debug, &by_id).unwrap();
    let found = b.names_through(&mut offline(vec![
        PathBuf::from("/nonexistent"),
        d.to_path_buf(),
    ]));
    assert_eq!(
        found,
        Found {
            path: by_id.clone(),
            source: Source::DebugDir
        }
    );
    std::fs::remove_file(&by_id).unwrap();

    // By the debug link's name, directly in the directory...
    std::fs::copy(&b.debug, d.join("prog.debug")).unwrap();
    let found = b.names_through(&mut offline(vec![d.to_path_buf()]));
    assert_eq!(found.path, d.join("prog.debug"));
    std::fs::remove_file(d.join("prog.debug")).unwrap();
    // ...and under the module's directory.
    let mirrored = d.join(b.dir.strip_prefix("/").unwrap()).join("prog.debug");
    std::fs::create_dir_all(mirrored.parent().unwrap()).unwrap();
    std::fs::copy(&b.debug, &mirrored).unwrap();
    assert_eq!(
        b.names_through(&mut offline(vec![d.to_path_buf()])).path,
        mirrored
    );
    std::fs::remove_file(&mirrored).unwrap();

    // Any name, found by its build-id (another program's file beside it).
    std::fs::copy(&other.debug, d.join("a.dbg")).unwrap();
    std::fs::copy(&b.debug, d.join("symbols-of-prog")).unwrap();
    assert_eq!(
        b.names_through(&mut offline(vec![d.to_path_buf()])).path,
        d.join("symbols-of-prog")
    );
}

/// An address inside a sized function is named from its start
/// (`main+0x1`); past its end, none.
#[test]
fn addresses_inside_functions() {
    let b = build(true);
    let names = fctrace_debuginfo::symbols::FuncNames::read(&b.debug).unwrap();
    let (&addr, main) = b
        .functions
        .iter()
        .find(|(_, n)| n.contains(&"main".to_string()))
        .unwrap();
    assert_eq!(names.name_at(addr).as_deref(), Some("main"), "{main:?}");
    assert_eq!(names.name_at(addr + 1).as_deref(), Some("main+0x1"));
    assert_eq!(names.name_at(1), None);
}

#[test]
fn debug_link_without_build_id_checks_the_crc() {
    let b = build(false);
    assert!(b.build_id.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A file of that name with other contents (another CRC) is refused.
    let other = build(false);
    std::fs::copy(&other.debug, d.join("prog.debug")).unwrap();
    not_found(&b, &mut offline(vec![d.to_path_buf()]));
    std::fs::copy(&b.debug, d.join("prog.debug")).unwrap();
    assert_eq!(
        b.names_through(&mut offline(vec![d.to_path_buf()])).path,
        d.join("prog.debug")
    );
}

/// Removes a file when dropped, and its directory if that is then empty
/// (a `.build-id/xx` the test created).
struct Remove(PathBuf);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
fn standard_places() {
    let b = build(true);
    // Next to the module, by its debug link (the module file is there).
    let no_servers =
        |root: &Path| Finder::new(config(vec![], root, vec![], Path::new("/nonexistent")));
    let beside = b.dir.join("prog.debug");
    std::fs::copy(&b.debug, &beside).unwrap();
    let found = b.names_through(&mut no_servers(Path::new("/nonexistent")));
    assert_eq!(
        found,
        Found {
            path: beside.clone(),
            source: Source::Standard
        }
    );
    // Not when the file at the module's path is another build.
    let other = build(true);
    std::fs::copy(&other.stripped, &b.stripped).unwrap();
    not_found(&b, &mut no_servers(Path::new("/nonexistent")));
    std::fs::remove_file(&beside).unwrap();
    let moved = b.debug.clone();

    // In /usr/lib/debug/.build-id (a file of this test's own build-id).
    let id = &b.build_id;
    let root = Path::new(fctrace_symbols::debugfile::DEBUG_ROOT);
    let at = root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let _guard = Remove(at.clone());
    std::fs::copy(&moved, &at).unwrap();
    let found = b.names_through(&mut no_servers(root));
    assert_eq!(
        found,
        Found {
            path: at,
            source: Source::Standard
        }
    );
}

/// A process killed and waited for when dropped.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on (yet).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `debuginfod` serving `dir`, once it serves `build_id`.
fn debuginfod(dir: &Path, db: &Path, build_id: &str) -> (Kill, String) {
    let port = free_port();
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(dir)
        .args(["-p", &port.to_string(), "-d"])
        .arg(db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("debuginfod: {e} (apt-get install debuginfod)"));
    let server = Kill(child);
    let url = format!("http://127.0.0.1:{port}");
    // Polled with the real request until its first scan serves the file.
    let start = Instant::now();
    loop {
        let mut s = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "debuginfod never listened"
                );
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        write!(
            s,
            "GET /buildid/{build_id}/debuginfo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        if answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200") {
            return (server, url);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "debuginfod never served {build_id}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn debuginfod_then_its_cache() {
    let b = build(true);
    let served = tempfile::tempdir().unwrap();
    std::fs::copy(&b.debug, served.path().join("prog.debug")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let (server, url) = debuginfod(served.path(), &work.path().join("db.sqlite"), &b.build_id);
    let refused = free_port();
    let servers = vec![format!("http://127.0.0.1:{refused}"), url.clone()];
    let mut finder = Finder::new(config(
        vec![],
        Path::new("/nonexistent"),
        servers.clone(),
        &cache,
    ));
    let found = b.names_through(&mut finder);
    let cached = cache.join(&b.build_id).join("debuginfo");
    assert_eq!(
        found,
        Found {
            path: cached.clone(),
            source: Source::Debuginfod(url)
        }
    );
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(served.path().join("prog.debug")).unwrap()
    );
    let notes = finder.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!("127.0.0.1:{refused}")) && notes[0].contains("refused"),
        "{notes:?}"
    );
    // No temporary file left beside it.
    assert_eq!(
        std::fs::read_dir(cached.parent().unwrap()).unwrap().count(),
        1
    );

    // The server gone: the cache serves.
    drop(server);
    let mut finder = Finder::new(config(vec![], Path::new("/nonexistent"), servers, &cache));
    let found = b.names_through(&mut finder);
    assert_eq!(
        found,
        Found {
            path: cached,
            source: Source::DebuginfodCache
        }
    );
}

/// A server that answers every request with `answer`, or (None) accepts
/// and never answers.
fn fake_server(answer: Option<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut conn in listener.incoming().flatten() {
            let Some(body) = &answer else {
                held.push(conn);
                continue;
            };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(body);
        }
    });
    url
}

#[test]
fn unreachable_and_lying_servers() {
    let b = build(true);
    let other = build(true);
    let cache = tempfile::tempdir().unwrap();
    let silent = fake_server(None);
    let liar = fake_server(Some(std::fs::read(&other.debug).unwrap()));
    let closed = format!("https://127.0.0.1:{}", free_port());
    let servers = vec![silent.clone(), closed.clone(), liar.clone()];
    let mut finder = Finder::new(config(
        vec![],
        Path::new("/nonexistent"),
        servers,
        cache.path(),
    ));
    let start = Instant::now();
    // Two modules: each server is noted once, the silent one waited for
    // once (time-out 1 s).
    not_found(&b, &mut finder);
    let mut second = b.symtab();
    second.modules[0].build_id = other.build_id.replace('0', "1").replace('a', "b");
    assert_ne!(second.modules[0].build_id, other.build_id);
    name_symtab(&mut second, &mut finder);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let notes = finder.take_notes();
    assert_eq!(notes.len(), 4, "{notes:#?}");
    assert!(
        notes[0].contains(&silent) && notes[0].contains("no answer within 1 s"),
        "{notes:#?}"
    );
    assert!(
        notes[1].contains(&closed) && notes[1].contains("refused"),
        "{notes:#?}"
    );
    assert!(
        notes[2].contains(&liar) && notes[2].contains("does not carry it"),
        "{notes:#?}"
    );
    assert!(
        notes[3].contains(&liar) && notes[3].contains("does not carry it"),
        "{notes:#?}"
    );
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

/// A plain HTTP server counting the requests it gets: 404 to each until
/// it is given a body to send.
struct Counting {
    url: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    body: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
}

impl Counting {
    fn start() -> Counting {
        use std::sync::{atomic::Ordering, Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let body: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
        let (count, served) = (requests.clone(), body.clone());
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let answer = served.lock().unwrap().clone();
                let _ = match answer {
                    Some(b) => write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                        b.len()
                    )
                    .and_then(|_| conn.write_all(&b)),
                    None => conn.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    ),
                };
            }
        });
        Counting {
            url,
            requests,
            body,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `debuginfod-find debuginfo ID` (elfutils' client) with this server and
/// cache: whether it found the file.
fn elfutils_find(url: &str, cache: &Path, build_id: &str) -> bool {
    Command::new("debuginfod-find")
        .args(["debuginfo", build_id])
        .env("DEBUGINFOD_URLS", url)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env("DEBUGINFOD_TIMEOUT", "5")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("debuginfod-find: {e} (apt-get install debuginfod)"))
        .success()
}

/// A build-id every server answered 404 for is kept in the cache as
/// elfutils keeps it (an empty file of mode 000): the next reader does
/// not ask again while it is younger than `cache_miss_s`, and elfutils'
/// own client honours it, as fctrace honours elfutils' entries.
#[test]
fn negative_cache_shared_with_elfutils() {
    use std::os::unix::fs::PermissionsExt;
    let b = build(true);
    let server = Counting::start();
    let cache = tempfile::tempdir().unwrap();
    let finder = || {
        Finder::new(config(
            vec![],
            Path::new("/nonexistent"),
            vec![server.url.clone()],
            cache.path(),
        ))
    };
    let mut first = finder();
    not_found(&b, &mut first);
    assert_eq!(server.requests(), 1);
    assert_eq!(first.take_notes(), Vec::<String>::new());
    let entry = cache.path().join(&b.build_id).join("debuginfo");
    let meta = std::fs::metadata(&entry).unwrap();
    assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (0, 0));
    // Another reader: not asked again, and the entry is no debug file.
    not_found(&b, &mut finder());
    assert_eq!(server.requests(), 1);
    // elfutils' client does not ask either.
    assert!(!elfutils_find(&server.url, cache.path(), &b.build_id));
    assert_eq!(server.requests(), 1);

    // cache_miss_s 0: the entry is forgotten, the server asked again; it
    // has the file now, which replaces the entry.
    std::fs::write(cache.path().join("cache_miss_s"), "0").unwrap();
    *server.body.lock().unwrap() = Some(std::fs::read(&b.debug).unwrap());
    let found = b.names_through(&mut finder());
    assert_eq!(server.requests(), 2);
    assert_eq!(
        found,
        Found {
            path: entry.clone(),
            source: Source::Debuginfod(server.url.clone())
        }
    );

    // An entry elfutils' client made (another build-id, 404) is honoured.
    std::fs::remove_file(cache.path().join("cache_miss_s")).unwrap();
    *server.body.lock().unwrap() = None;
    let other = build(true);
    assert!(!elfutils_find(&server.url, cache.path(), &other.build_id));
    assert_eq!(server.requests(), 3);
    not_found(&other, &mut finder());
    assert_eq!(server.requests(), 3);
}
