//! Finding a stripped program's debug file in each place (a `--debug-dir`
//! by build-id, by debug-link name and by any file name; `/usr/lib/debug`;
//! a local debuginfod and its cache) and naming its functions from it,
//! checked against `nm` on the unstripped build; wrong files refused;
//! unreachable servers noted once, within the time-out.

use fctrace_debuginfo::debuginfod::Settings;
use fctrace_debuginfo::{name_symtab, Config, Finder, Found, Origin, Source};
use fctrace_format::symtab::{
    unnamed_function_name, FuncKind, FuncStatus, Function, Module, SymTab,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static int square(int x) { return x * x + (x & 1); }
__attribute__((noinline)) int sum_squares(int n) { int s = 0; for (int i = 0; i < n; i++) s += square(i); return s; }
__attribute__((noinline)) static long fold(const char *s) { long h = 7; while (*s) h = h * 31 + *s++; return h; }
int main(int argc, char **argv) { printf("%d %ld\n", sum_squares(argc + 3), fold(argv[0])); return 0; }
"#;

#[track_caller]
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install gcc binutils)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A program built -O2 -g with a build-id of its own, stripped, its debug
/// kept apart, and linked to it.
struct Built {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    /// The stripped program, with a `.gnu_debuglink` to `prog.debug`.
    stripped: PathBuf,
    debug: PathBuf,
    build_id: String,
    crc: u32,
    /// nm's function symbols of the unstripped build: address -> names.
    functions: BTreeMap<u64, Vec<String>>,
}

fn build(with_build_id: bool) -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("prog.c"), SOURCE).unwrap();
    // A build-id no other test (or run) has: the time and pid in it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("{:032x}{:08x}", nanos, std::process::id());
    let id_flag = if with_build_id {
        format!("-Wl,--build-id=0x{id}")
    } else {
        "-Wl,--build-id=none".to_string()
    };
    let full = dir.join("prog.full");
    run(Command::new("gcc")
        .args(["-O2", "-g", &id_flag, "-o"])
        .arg(&full)
        .arg(dir.join("prog.c")));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(dir.join("prog.debug")));
    let bare = dir.join("prog.bare");
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&bare)
        .arg(&full));
    let stripped = dir.join("prog");
    run(Command::new("objcopy")
        .arg("--add-gnu-debuglink=prog.debug")
        .arg(&bare)
        .arg(&stripped)
        .current_dir(&dir));
    // Kept apart: not next to the program, where its debug link would
    // find it (the tests put it where they look).
    std::fs::create_dir(dir.join("kept")).unwrap();
    let debug = dir.join("kept").join("prog.debug");
    std::fs::rename(dir.join("prog.debug"), &debug).unwrap();
    let nm = run(Command::new("nm").arg("--defined-only").arg(&full));
    let mut functions: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in nm.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && (f[1] == "T" || f[1] == "t") {
            let addr = u64::from_str_radix(f[0], 16).unwrap();
            functions.entry(addr).or_default().push(f[2].to_string());
        }
    }
    assert!(run(Command::new("nm")
        .arg(&stripped)
        .stderr(std::process::Stdio::null()))
    .is_empty());
    // The CRC the debug link holds, as readelf shows it.
    let dump = run(Command::new("readelf")
        .args(["-x", ".gnu_debuglink"])
        .arg(&stripped));
    let words: Vec<&str> = dump
        .lines()
        .filter(|l| l.trim_start().starts_with("0x"))
        .flat_map(|l| l.split_whitespace().skip(1).take(4))
        .collect();
    let bytes: Vec<u8> = words
        .concat()
        .as_bytes()
        .chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
        .collect();
    let crc = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
    Built {
        _dir: tmp,
        dir,
        stripped,
        debug,
        build_id: if with_build_id { id } else { String::new() },
        crc,
        functions,
    }
}

impl Built {
    fn module(&self) -> Module {
        Module {
            build_id: self.build_id.clone(),
            debuglink: "prog.debug".into(),
            debuglink_crc: self.crc,
            ..Module::new(0, 0x5555_0000_0000, self.stripped.to_str().unwrap())
        }
    }

    /// The symbol table the agent writes for the stripped program: its
    /// functions by module-and-offset name.
    fn symtab(&self) -> SymTab {
        let path = self.stripped.to_str().unwrap();
        SymTab {
            session: 0,
            pid: 1,
            exe: path.into(),
            modules: vec![self.module()],
            functions: self
                .functions
                .keys()
                .enumerate()
                .map(|(i, &addr)| Function {
                    id: i as u32,
                    module: 0,
                    addr,
                    size: 1,
                    kind: FuncKind::Function,
                    status: FuncStatus::Traced,
                    name: unnamed_function_name(path, addr),
                })
                .collect(),
        }
    }

    /// Names the stripped program's table and checks every function got
    /// one of nm's names for its address; returns where the file was.
    #[track_caller]
    fn names_through(&self, finder: &mut Finder) -> Found {
        let mut table = self.symtab();
        let origins = name_symtab(&mut table, finder);
        let Origin::DebugFile {
            found,
            named,
            unnamed,
        } = &origins[0].origin
        else {
            panic!("no debug file found: {origins:?}");
        };
        assert_eq!(
            (*named, *unnamed),
            (self.functions.len(), self.functions.len())
        );
        for f in &table.functions {
            assert!(self.functions[&f.addr].contains(&f.name), "{f:?}");
        }
        let names: Vec<&str> = table.functions.iter().map(|f| f.name.as_str()).collect();
        for want in ["main", "sum_squares", "square", "fold"] {
            assert!(
                names.iter().any(|n| n.starts_with(want)),
                "{want} in {names:?}"
            );
        }
        found.clone()
    }
}

fn config(dirs: Vec<PathBuf>, root: &Path, servers: Vec<String>, cache: &Path) -> Config {
    Config {
        debug_dirs: dirs,
        standard_root: root.to_path_buf(),
        debuginfod: Settings {
            servers,
            cache: cache.to_path_buf(),
            timeout: Duration::from_secs(1),
        },
    }
}

fn offline(dirs: Vec<PathBuf>) -> Finder {
    Finder::new(config(
        dirs,
        Path::new("/nonexistent"),
        vec![],
        Path::new("/nonexistent"),
    ))
}

#[track_caller]
fn not_found(b: &Built, finder: &mut Finder) {
    let mut table = b.symtab();
    let origins = name_symtab(&mut table, finder);
    assert_eq!(
        origins[0].origin,
        Origin::NotFound {
            unnamed: b.functions.len()
        }
    );
    assert_eq!(table, b.symtab());
}

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
    let servers = vec![
        silent.clone(),
        "https://debuginfod.example".into(),
        liar.clone(),
    ];
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
    assert!(notes[1].contains("https is not supported"), "{notes:#?}");
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
