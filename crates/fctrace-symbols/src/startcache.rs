//! The start-up cache's file format: one file per analysed module (its
//! functions, imports and left-out FDEs, and the agent's patch plans),
//! keyed by the module file's identity and the agent's build, so that an
//! unchanged file is not analysed and planned again on every run. The
//! agent writes new entries into the trace directory; the recorder
//! checks them and installs them in the cache directory; the agent reads
//! them there (docs/engine.md, "The start-up cache").
//!
//! A file is `MAGIC`, the format (u32), the body's length (u64) and the
//! body's CRC-32, then the body: the [`Key`] and the payload. Every number
//! is little-endian; a string or byte string is its length (u32) and its
//! bytes. Anything that does not check (magic, format, length, checksum,
//! a field beyond the end) makes the whole file unusable: [`open`] gives
//! `None`, never a partial entry.

use crate::golang::GoCode;
use crate::info::{ElfInfo, ElfKind, FuncRef, GotImport, LeftOut, PltEntry};
use std::borrow::Cow;

/// The first bytes of every cache file.
pub const MAGIC: &[u8; 8] = b"FCTCACHE";
/// The layout of the body; a file of another is ignored.
pub const FORMAT: u32 = 1;
/// Magic, format, body length, body CRC-32.
const HEAD: usize = 8 + 4 + 8 + 4;

/// What an entry describes: the module file it was made from, and by
/// which agent and how (`variant`: the options that change the analysis
/// or the plans). An entry is used only when every field equals the
/// live one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Key {
    /// The agent's own build-id: another build of fctrace plans
    /// differently.
    pub agent: Vec<u8>,
    /// The module's path, as the dynamic linker gave it.
    pub path: String,
    /// The file's device, inode, size, modification and change times
    /// (nanoseconds): a file rewritten or replaced is another file.
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// The build-id in the module's loaded notes (empty: none).
    pub build_id: Vec<u8>,
    /// The separate debug file the analysis took names from, as
    /// (device, inode, size, modification time); zeros: none.
    pub debug: [u64; 4],
    /// Bits of the options the entry was made under.
    pub variant: u32,
}

impl Key {
    /// The identity fields of the file at `path` (`stat`), the rest
    /// default.
    pub fn of_file(path: &str) -> Option<Key> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Key {
            path: path.to_string(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ..Key::default()
        })
    }

    /// Whether the file at `self.path` is still the one the key names
    /// (device, inode, size, times).
    pub fn file_unchanged(&self) -> bool {
        Key::of_file(&self.path).is_some_and(|k| {
            (k.dev, k.ino, k.size, k.mtime_ns, k.ctime_ns)
                == (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
        })
    }

    /// The file name of the entry in the cache directory: the build-id,
    /// a checksum of the path and the variant (two paths of one file, or
    /// two variants, are two entries).
    pub fn file_name(&self) -> String {
        let bid: String = if self.build_id.is_empty() {
            "none".to_string()
        } else {
            self.build_id.iter().map(|b| format!("{b:02x}")).collect()
        };
        format!(
            "{bid}-{:08x}-{:x}.fca",
            crc32fast::hash(self.path.as_bytes()),
            self.variant
        )
    }

    fn encode(&self, w: &mut Writer) {
        w.bytes(&self.agent);
        w.str(&self.path);
        w.u64(self.dev);
        w.u64(self.ino);
        w.u64(self.size);
        w.u64(self.mtime_ns as u64);
        w.u64(self.ctime_ns as u64);
        w.bytes(&self.build_id);
        for d in self.debug {
            w.u64(d);
        }
        w.u32(self.variant);
    }

    fn decode(r: &mut Reader) -> Option<Key> {
        Some(Key {
            agent: r.bytes()?.to_vec(),
            path: r.str()?.to_string(),
            dev: r.u64()?,
            ino: r.u64()?,
            size: r.u64()?,
            mtime_ns: r.u64()? as i64,
            ctime_ns: r.u64()? as i64,
            build_id: r.bytes()?.to_vec(),
            debug: [r.u64()?, r.u64()?, r.u64()?, r.u64()?],
            variant: r.u32()?,
        })
    }
}

/// The bytes of a cache file holding `payload` under `key`.
pub fn seal(key: &Key, payload: &[u8]) -> Vec<u8> {
    let mut body = Writer::default();
    key.encode(&mut body);
    body.0.extend_from_slice(payload);
    let mut out = Vec::with_capacity(HEAD + body.0.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(body.0.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body.0).to_le_bytes());
    out.extend_from_slice(&body.0);
    out
}

/// The key and the payload of a cache file's bytes, if they check: the
/// magic, the format, the body's length (a truncated or extended file
/// fails) and its CRC-32 (a flipped byte fails).
pub fn open(file: &[u8]) -> Option<(Key, &[u8])> {
    let mut r = Reader::new(file);
    if r.take(8)? != MAGIC || r.u32()? != FORMAT {
        return None;
    }
    let len = r.u64()?;
    let crc = r.u32()?;
    let body = &file[HEAD..];
    if body.len() as u64 != len || crc32fast::hash(body) != crc {
        return None;
    }
    let mut r = Reader::new(body);
    let key = Key::decode(&mut r)?;
    Some((key, &body[r.at..]))
}

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    /// An optional string: a flag byte, then the string.
    pub fn opt_str(&mut self, s: Option<&str>) {
        self.u8(s.is_some() as u8);
        if let Some(s) = s {
            self.str(s);
        }
    }
}

/// Reads what [`Writer`] wrote; every read past the end gives `None`.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }
    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }
    /// Whether every byte has been read.
    pub fn done(&self) -> bool {
        self.at == self.b.len()
    }
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    /// A byte that must be 0 or 1.
    pub fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    pub fn opt_str(&mut self) -> Option<Option<&'a str>> {
        if self.flag()? {
            Some(Some(self.str()?))
        } else {
            Some(None)
        }
    }
    /// A count of items each at least `min` bytes long: refused when the
    /// rest could not hold them (no huge allocation from a bad count).
    pub fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n.checked_mul(min)? <= self.b.len() - self.at).then_some(n)
    }
}

/// Appends what the agent uses of a module's analysis: the description
/// (without `functions`, which the agent does not read: `funcs` stands
/// for them) and the functions.
pub fn encode_analysis(info: &ElfInfo, funcs: &[FuncRef], w: &mut Writer) {
    w.u8(match info.kind {
        ElfKind::Executable => 0,
        ElfKind::PieExecutable => 1,
        ElfKind::SharedObject => 2,
    });
    w.str(&info.machine);
    w.u8(info.is_x86_64 as u8);
    w.u8(info.is_static as u8);
    w.opt_str(info.interp.as_deref());
    w.u8(info.has_symtab as u8);
    w.u8(info.has_minidebuginfo as u8);
    w.u8(match &info.go {
        None => 0,
        Some(GoCode { text: None }) => 1,
        Some(GoCode { text: Some(_) }) => 2,
    });
    if let Some(GoCode { text: Some(t) }) = &info.go {
        w.u64(t.start);
        w.u64(t.end);
    }
    w.u64(info.entry);
    w.u8(info.build_id.is_some() as u8);
    if let Some(b) = &info.build_id {
        w.bytes(b);
    }
    w.opt_str(info.debuglink.as_ref().map(|d| d.0.as_str()));
    if let Some((_, crc)) = &info.debuglink {
        w.u32(*crc);
    }
    w.u32(info.left_out.len() as u32);
    for l in &info.left_out {
        w.u64(l.addr);
        w.u64(l.size);
        w.str(&l.reason);
    }
    w.u32(info.plt.len() as u32);
    for p in &info.plt {
        w.u64(p.addr);
        w.u64(p.size);
        w.u64(p.got);
        w.str(&p.name);
        w.opt_str(p.version.as_deref());
    }
    w.u32(info.got_imports.len() as u32);
    for g in &info.got_imports {
        w.u64(g.got);
        w.str(&g.name);
        w.opt_str(g.version.as_deref());
    }
    w.u32(info.markers.len() as u32);
    for m in &info.markers {
        w.str(m);
    }
    w.u32(funcs.len() as u32);
    for f in funcs {
        w.str(&f.name);
        w.u64(f.addr);
        w.u64(f.size);
        w.u64(f.pad_end);
        w.u32(f.section);
        w.u8(f.global as u8 | (f.ifunc as u8) << 1);
        w.u8(f.rank);
    }
}

/// The analysis [`encode_analysis`] wrote (the functions' names borrowed
/// from `r`'s bytes), if it reads whole.
pub fn decode_analysis<'a>(r: &mut Reader<'a>) -> Option<(ElfInfo, Vec<FuncRef<'a>>)> {
    let kind = match r.u8()? {
        0 => ElfKind::Executable,
        1 => ElfKind::PieExecutable,
        2 => ElfKind::SharedObject,
        _ => return None,
    };
    let machine = r.str()?.to_string();
    let is_x86_64 = r.flag()?;
    let is_static = r.flag()?;
    let interp = r.opt_str()?.map(str::to_string);
    let has_symtab = r.flag()?;
    let has_minidebuginfo = r.flag()?;
    let go = match r.u8()? {
        0 => None,
        1 => Some(GoCode { text: None }),
        2 => Some(GoCode {
            text: Some(r.u64()?..r.u64()?),
        }),
        _ => return None,
    };
    let entry = r.u64()?;
    let build_id = if r.flag()? {
        Some(r.bytes()?.to_vec())
    } else {
        None
    };
    let debuglink = match r.opt_str()? {
        Some(name) => Some((name.to_string(), r.u32()?)),
        None => None,
    };
    let mut left_out = Vec::with_capacity(r.count(20)?);
    for _ in 0..left_out.capacity() {
        left_out.push(LeftOut {
            addr: r.u64()?,
            size: r.u64()?,
            reason: r.str()?.to_string(),
        });
    }
    let mut plt = Vec::with_capacity(r.count(29)?);
    for _ in 0..plt.capacity() {
        plt.push(PltEntry {
            addr: r.u64()?,
            size: r.u64()?,
            got: r.u64()?,
            name: r.str()?.to_string(),
            version: r.opt_str()?.map(str::to_string),
        });
    }
    let mut got_imports = Vec::with_capacity(r.count(13)?);
    for _ in 0..got_imports.capacity() {
        got_imports.push(GotImport {
            got: r.u64()?,
            name: r.str()?.to_string(),
            version: r.opt_str()?.map(str::to_string),
        });
    }
    let mut markers = Vec::with_capacity(r.count(4)?);
    for _ in 0..markers.capacity() {
        markers.push(r.str()?.to_string());
    }
    let mut funcs = Vec::with_capacity(r.count(34)?);
    for _ in 0..funcs.capacity() {
        let name = r.str()?;
        let (addr, size, pad_end, section) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
        let bits = r.u8()?;
        if bits > 3 {
            return None;
        }
        funcs.push(FuncRef {
            name: Cow::Borrowed(name),
            addr,
            size,
            pad_end,
            section,
            global: bits & 1 != 0,
            ifunc: bits & 2 != 0,
            rank: r.u8()?,
        });
    }
    let info = ElfInfo {
        kind,
        machine,
        is_x86_64,
        is_static,
        interp,
        has_symtab,
        has_minidebuginfo,
        go,
        entry,
        build_id,
        debuglink,
        left_out,
        functions: Vec::new(),
        plt,
        got_imports,
        markers,
    };
    Some((info, funcs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            agent: vec![1, 2, 3],
            path: "/usr/bin/x".into(),
            dev: 5,
            ino: 6,
            size: 7,
            mtime_ns: 8,
            ctime_ns: 9,
            build_id: vec![0xab; 20],
            debug: [0, 0, 0, 0],
            variant: 3,
        }
    }

    #[test]
    fn a_sealed_file_opens_and_any_damage_is_refused() {
        let file = seal(&key(), b"payload");
        let (k, p) = open(&file).expect("opens");
        assert_eq!((k, p), (key(), &b"payload"[..]));
        for cut in 0..file.len() {
            assert!(open(&file[..cut]).is_none(), "truncated at {cut}");
        }
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert!(open(&bad).is_none(), "byte {at} flipped");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert!(open(&longer).is_none());
    }

    #[test]
    fn the_analysis_of_a_real_file_reads_back_equal() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let (info, funcs) = crate::analyze_borrowed(&data).unwrap();
        let mut w = Writer::default();
        encode_analysis(&info, &funcs, &mut w);
        let mut r = Reader::new(&w.0);
        let (back, back_funcs) = decode_analysis(&mut r).expect("decodes");
        assert!(r.done());
        assert_eq!(back_funcs, funcs);
        assert!(!funcs.is_empty());
        assert_eq!(
            (&back.plt, &back.got_imports, &back.left_out, &back.markers),
            (&info.plt, &info.got_imports, &info.left_out, &info.markers)
        );
        assert_eq!(
            (
                back.entry,
                &back.build_id,
                &back.debuglink,
                &back.go,
                back.kind
            ),
            (
                info.entry,
                &info.build_id,
                &info.debuglink,
                &info.go,
                info.kind
            )
        );
        let step = (w.0.len() / 300).max(1);
        for cut in (0..w.0.len()).step_by(step) {
            let mut r = Reader::new(&w.0[..cut]);
            assert!(decode_analysis(&mut r).is_none());
        }
    }
}
