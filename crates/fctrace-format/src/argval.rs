//! The payload of `Args` and `Retval` events: a sequence of self-describing
//! values (the display side needs no type information).
//!
//! ```text
//! value := INT   fmt:u8 size:u8 bits:u64      (bits: the value, zero-extended)
//!        | FLOAT size:u8 bits:u64             (an f32 in the low 4 bytes)
//!        | STR   len:u16 bytes                (the whole string)
//!        | CUT   len:u16 bytes                (the first bytes of a longer one)
//!        | NULL                               (a null char pointer)
//!        | UNREADABLE addr:u64                (a pointer that could not be read)
//!        | ENUM  bits:u64 len:u8 name         (name empty: no enumerator matches)
//!        | STRUCT count:u8 (len:u8 name value){count}
//!        | OPAQUE                             (a value not shown: `{...}`)
//!        | MISSING                            (a value the agent could not get)
//! ```
//! An `Args` payload may instead be a *backtrace* (the whole payload, never
//! mixed with values): the chain of callers recorded by a `backtrace`
//! trigger, written right after the `Entry` of the trigger function (and
//! before its own `Args`, if any):
//! ```text
//! backtrace := BACKTRACE flags:u8 count:u16 (func:u32){count}
//! ```
//! `func`: function ids of the session, outermost caller first; flags bit
//! 0: outer callers are missing (the chain was cut to its innermost part);
//! bit 1: the chain is not a `backtrace` trigger's but the calls open
//! where tracing resumed for the thread (a `trace_on` trigger), for the
//! display filters, not shown; bits 1 and 2 (an *end mark*, one `func`,
//! written alone, not after an entry): that call, open where tracing
//! resumed but entered while it was off, returned or was unwound here;
//! bit 3 (an *attach chain*, written alone, first in a task's events): the
//! calls open on the thread when `fctrace -p` attached, whose entries were
//! not recorded but whose returns are; consecutive attach chains continue
//! one another (a chain holds at most [`MAX_ATTACH_CHAIN`] calls).
//! Every number is little-endian. docs/format.md has the same table.

pub const TAG_INT: u8 = 1;
pub const TAG_FLOAT: u8 = 2;
pub const TAG_STR: u8 = 3;
pub const TAG_CUT: u8 = 4;
pub const TAG_NULL: u8 = 5;
pub const TAG_UNREADABLE: u8 = 6;
pub const TAG_ENUM: u8 = 7;
pub const TAG_STRUCT: u8 = 8;
pub const TAG_OPAQUE: u8 = 9;
pub const TAG_MISSING: u8 = 10;
/// First byte of an `Args` payload that is a recorded backtrace.
pub const TAG_BACKTRACE: u8 = 11;
/// Flags of a backtrace payload: the calls open where tracing resumed.
pub const FLAG_RESUME: u8 = 2;
/// Flags of a backtrace payload: an end mark ([`Writer::end_mark`]).
pub const FLAG_END: u8 = 4;
/// Flags of a backtrace payload: calls open when fctrace attached
/// ([`Writer::attach_chain`]).
pub const FLAG_ATTACH: u8 = 8;
/// Flags of a backtrace payload, with [`FLAG_ATTACH`]: the calls open
/// where a flight recorder's kept history begins (`record --ring`): their
/// entries are older than the history ([`Writer::history_chain`]).
pub const FLAG_HISTORY: u8 = 16;
/// Calls one attach chain holds at most (a longer one is written as
/// several, outermost part first), so that it fits an event's payload.
pub const MAX_ATTACH_CHAIN: usize = 1000;
/// Callers a recorded backtrace holds at most (its innermost ones).
pub const MAX_BACKTRACE: usize = 256;

/// How an integer is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IntFmt {
    /// Signed decimal, or hex when it looks like an address.
    Auto = 0,
    Signed = 1,
    Unsigned = 2,
    Hex = 3,
    Char = 4,
    Ptr = 5,
    Bool = 6,
    /// Octal, with a leading 0 (uftrace's `/o`).
    Oct = 7,
}

impl IntFmt {
    pub fn from_u8(v: u8) -> Option<IntFmt> {
        Some(match v {
            0 => IntFmt::Auto,
            1 => IntFmt::Signed,
            2 => IntFmt::Unsigned,
            3 => IntFmt::Hex,
            4 => IntFmt::Char,
            5 => IntFmt::Ptr,
            6 => IntFmt::Bool,
            7 => IntFmt::Oct,
            _ => return None,
        })
    }
}

/// Writes values into a fixed buffer without allocating (the agent's
/// side). A value that does not fit is not written and marks the writer
/// `full`; a string is cut to fit first.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    full: bool,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8]) -> Writer<'a> {
        Writer {
            buf,
            len: 0,
            full: false,
        }
    }
    /// Bytes written.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether a value was dropped for lack of room.
    pub fn is_full(&self) -> bool {
        self.full
    }
    /// Room left.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }
    fn put(&mut self, parts: &[&[u8]]) -> bool {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        if self.full || n > self.room() {
            self.full = true;
            return false;
        }
        for p in parts {
            self.buf[self.len..self.len + p.len()].copy_from_slice(p);
            self.len += p.len();
        }
        true
    }
    pub fn int(&mut self, fmt: IntFmt, size: u8, bits: u64) -> bool {
        self.put(&[&[TAG_INT, fmt as u8, size], &bits.to_le_bytes()])
    }
    pub fn float(&mut self, size: u8, bits: u64) -> bool {
        self.put(&[&[TAG_FLOAT, size], &bits.to_le_bytes()])
    }
    /// A string: `cut` if `bytes` are only its first bytes. Cut further
    /// (and marked so) to fit the room left.
    pub fn string(&mut self, bytes: &[u8], cut: bool) -> bool {
        let room = self.room().saturating_sub(3);
        let (bytes, cut) = if bytes.len() > room {
            (&bytes[..room], true)
        } else {
            (bytes, cut)
        };
        let n = (bytes.len().min(u16::MAX as usize)) as u16;
        let tag = if cut { TAG_CUT } else { TAG_STR };
        self.put(&[&[tag], &n.to_le_bytes(), &bytes[..n as usize]])
    }
    pub fn null(&mut self) -> bool {
        self.put(&[&[TAG_NULL]])
    }
    pub fn unreadable(&mut self, addr: u64) -> bool {
        self.put(&[&[TAG_UNREADABLE], &addr.to_le_bytes()])
    }
    pub fn enumerator(&mut self, bits: u64, name: &str) -> bool {
        let name = &name.as_bytes()[..name.len().min(255)];
        self.put(&[&[TAG_ENUM], &bits.to_le_bytes(), &[name.len() as u8], name])
    }
    /// Starts a struct of `count` fields: each then takes [`field`](Self::field)
    /// and one value.
    pub fn struct_begin(&mut self, count: u8) -> bool {
        self.put(&[&[TAG_STRUCT, count]])
    }
    pub fn field(&mut self, name: &str) -> bool {
        let name = &name.as_bytes()[..name.len().min(255)];
        self.put(&[&[name.len() as u8], name])
    }
    pub fn opaque(&mut self) -> bool {
        self.put(&[&[TAG_OPAQUE]])
    }
    pub fn missing(&mut self) -> bool {
        self.put(&[&[TAG_MISSING]])
    }
    /// A whole backtrace payload: `funcs` outermost first; `cut` when outer
    /// callers are missing. Nothing is written if it does not fit.
    pub fn backtrace(&mut self, funcs: &[u32], cut: bool) -> bool {
        self.chain(funcs, cut, false)
    }
    /// An end mark: the call of `func` open where tracing resumed (not
    /// recorded: entered while tracing was off) returned or was unwound.
    pub fn end_mark(&mut self, func: u32) -> bool {
        if self.full || 8 > self.room() {
            self.full = true;
            return false;
        }
        self.put(&[
            &[TAG_BACKTRACE, FLAG_END | FLAG_RESUME],
            &1u16.to_le_bytes(),
        ]);
        self.put(&[&func.to_le_bytes()]);
        true
    }
    /// An attach chain: `funcs` (at most [`MAX_ATTACH_CHAIN`], outermost
    /// first) were open when fctrace attached, entries not recorded.
    pub fn attach_chain(&mut self, funcs: &[u32]) -> bool {
        self.open_chain(funcs, FLAG_ATTACH)
    }
    /// A history chain: `funcs` (at most [`MAX_ATTACH_CHAIN`], outermost
    /// first) were open where the kept history of a flight recorder
    /// begins; read as an attach chain, shown `(entry not in history)`.
    pub fn history_chain(&mut self, funcs: &[u32]) -> bool {
        self.open_chain(funcs, FLAG_ATTACH | FLAG_HISTORY)
    }
    fn open_chain(&mut self, funcs: &[u32], flags: u8) -> bool {
        let n = funcs.len().min(MAX_ATTACH_CHAIN);
        if self.full || 4 + 4 * n > self.room() {
            self.full = true;
            return false;
        }
        self.put(&[&[TAG_BACKTRACE, flags], &(n as u16).to_le_bytes()]);
        for f in &funcs[..n] {
            self.put(&[&f.to_le_bytes()]);
        }
        true
    }
    /// A whole chain payload: a backtrace (`resume` false) or the calls
    /// open where tracing resumed (`resume`: flags bit 1).
    pub fn chain(&mut self, funcs: &[u32], cut: bool, resume: bool) -> bool {
        let n = funcs.len().min(u16::MAX as usize);
        if self.full || 4 + 4 * n > self.room() {
            self.full = true;
            return false;
        }
        let flags = cut as u8 | if resume { FLAG_RESUME } else { 0 };
        self.put(&[&[TAG_BACKTRACE, flags], &(n as u16).to_le_bytes()]);
        for f in &funcs[..n] {
            self.put(&[&f.to_le_bytes()]);
        }
        true
    }
}

/// A recorded backtrace (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backtrace {
    /// Function ids, outermost caller first.
    pub funcs: Vec<u32>,
    /// Outer callers are missing.
    pub cut: bool,
    /// The calls open where tracing resumed (not a `backtrace` trigger's:
    /// not shown).
    pub resume: bool,
    /// An end mark: the one call of `funcs`, open where tracing resumed,
    /// ended here.
    pub end: bool,
    /// An attach chain: calls open when fctrace attached (outermost
    /// first), entries not recorded.
    pub attached: bool,
    /// With `attached`: a history chain, the calls open where a flight
    /// recorder's kept history begins (entries older than the history).
    pub history: bool,
}

/// The backtrace an `Args` payload holds, if it is one (`None` for values,
/// or a corrupt backtrace).
pub fn decode_backtrace(payload: &[u8]) -> Option<Backtrace> {
    let (&tag, rest) = payload.split_first()?;
    if tag != TAG_BACKTRACE || rest.len() < 3 {
        return None;
    }
    let n = u16::from_le_bytes([rest[1], rest[2]]) as usize;
    let body = &rest[3..];
    if body.len() != 4 * n {
        return None;
    }
    Some(Backtrace {
        funcs: body
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        cut: rest[0] & 1 != 0,
        resume: rest[0] & FLAG_RESUME != 0,
        end: rest[0] & FLAG_END != 0,
        attached: rest[0] & FLAG_ATTACH != 0,
        history: rest[0] & FLAG_ATTACH != 0 && rest[0] & FLAG_HISTORY != 0,
    })
}

/// A decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int { fmt: IntFmt, size: u8, bits: u64 },
    Float { size: u8, bits: u64 },
    Str { bytes: Vec<u8>, cut: bool },
    Null,
    Unreadable(u64),
    Enum { bits: u64, name: String },
    Struct(Vec<(String, Value)>),
    Opaque,
    Missing,
}

/// Decodes a whole payload; `Err` says what is wrong with a corrupt one.
pub fn decode(payload: &[u8]) -> Result<Vec<Value>, String> {
    let mut r = Reader { b: payload, pos: 0 };
    let mut out = Vec::new();
    while r.pos < payload.len() {
        out.push(r.value(0)?);
    }
    Ok(out)
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| format!("argument payload ends early (at byte {})", self.pos))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn name(&mut self) -> Result<String, String> {
        let n = self.u8()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn size(&mut self) -> Result<u8, String> {
        match self.u8()? {
            s @ (1 | 2 | 4 | 8) => Ok(s),
            s => Err(format!("argument payload: bad value size {s}")),
        }
    }
    fn value(&mut self, depth: u32) -> Result<Value, String> {
        if depth > 8 {
            return Err("argument payload: structs nested too deep".into());
        }
        let at = self.pos;
        Ok(match self.u8()? {
            TAG_INT => {
                let f = self.u8()?;
                let fmt = IntFmt::from_u8(f)
                    .ok_or_else(|| format!("argument payload: bad integer format {f}"))?;
                let size = self.size()?;
                Value::Int {
                    fmt,
                    size,
                    bits: self.u64()?,
                }
            }
            TAG_FLOAT => {
                let size = self.size()?;
                if size != 4 && size != 8 {
                    return Err(format!("argument payload: bad float size {size}"));
                }
                Value::Float {
                    size,
                    bits: self.u64()?,
                }
            }
            t @ (TAG_STR | TAG_CUT) => {
                let n = u16::from_le_bytes([self.u8()?, self.u8()?]) as usize;
                Value::Str {
                    bytes: self.take(n)?.to_vec(),
                    cut: t == TAG_CUT,
                }
            }
            TAG_NULL => Value::Null,
            TAG_UNREADABLE => Value::Unreadable(self.u64()?),
            TAG_ENUM => {
                let bits = self.u64()?;
                Value::Enum {
                    bits,
                    name: self.name()?,
                }
            }
            TAG_STRUCT => {
                let n = self.u8()?;
                let mut fields = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let name = self.name()?;
                    fields.push((name, self.value(depth + 1)?));
                }
                Value::Struct(fields)
            }
            TAG_OPAQUE => Value::Opaque,
            TAG_MISSING => Value::Missing,
            t => {
                return Err(format!(
                    "argument payload: unknown value tag {t} at byte {at}"
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 256];
        let mut w = Writer::new(&mut buf);
        assert!(w.int(IntFmt::Signed, 4, (-5i32) as u32 as u64));
        assert!(w.float(8, 2.5f64.to_bits()));
        assert!(w.string(b"hi\n", false));
        assert!(w.string(b"abc", true));
        assert!(w.null());
        assert!(w.unreadable(1));
        assert!(w.enumerator(2, "BLUE"));
        assert!(w.struct_begin(2));
        assert!(w.field("x"));
        assert!(w.int(IntFmt::Signed, 4, 1));
        assert!(w.field("y"));
        assert!(w.opaque());
        assert!(w.missing());
        let n = w.len();
        let v = decode(&buf[..n]).unwrap();
        assert_eq!(v.len(), 9);
        assert_eq!(
            v[0],
            Value::Int {
                fmt: IntFmt::Signed,
                size: 4,
                bits: 0xffff_fffb
            }
        );
        assert_eq!(
            v[3],
            Value::Str {
                bytes: b"abc".to_vec(),
                cut: true
            }
        );
        assert_eq!(
            v[6],
            Value::Enum {
                bits: 2,
                name: "BLUE".into()
            }
        );
        assert_eq!(
            v[7],
            Value::Struct(vec![
                (
                    "x".into(),
                    Value::Int {
                        fmt: IntFmt::Signed,
                        size: 4,
                        bits: 1
                    }
                ),
                ("y".into(), Value::Opaque)
            ])
        );
        // Every strict prefix is an error, not a panic.
        for end in 1..n {
            let _ = decode(&buf[..end]);
        }
        assert!(decode(&[99]).is_err());
        assert!(decode(&[TAG_INT, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn backtrace_round_trip() {
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        assert!(w.backtrace(&[7, 0, 70000], true));
        let n = w.len();
        assert_eq!(n, 4 + 12);
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![7, 0, 70000],
                cut: true,
                resume: false,
                end: false,
                attached: false,
                history: false,
            })
        );
        // Not a value payload, and values are not a backtrace.
        assert!(decode(&buf[..n]).is_err());
        for end in 0..n {
            assert_eq!(decode_backtrace(&buf[..end]), None);
        }
        let mut w = Writer::new(&mut buf);
        assert!(w.backtrace(&[], false));
        let n = w.len();
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![],
                cut: false,
                resume: false,
                end: false,
                attached: false,
                history: false,
            })
        );
        let mut w = Writer::new(&mut buf);
        assert!(w.chain(&[3, 4], false, true));
        let n = w.len();
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![3, 4],
                cut: false,
                resume: true,
                end: false,
                attached: false,
                history: false,
            })
        );
        let mut w = Writer::new(&mut buf);
        assert!(w.end_mark(9));
        let n = w.len();
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![9],
                cut: false,
                resume: true,
                end: true,
                attached: false,
                history: false,
            })
        );
        let mut w = Writer::new(&mut buf);
        assert!(w.attach_chain(&[1, 2, 3]));
        let n = w.len();
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![1, 2, 3],
                cut: false,
                resume: false,
                end: false,
                attached: true,
                history: false,
            })
        );
        let mut w = Writer::new(&mut buf);
        assert!(w.history_chain(&[4, 5]));
        let n = w.len();
        assert_eq!(
            decode_backtrace(&buf[..n]),
            Some(Backtrace {
                funcs: vec![4, 5],
                cut: false,
                resume: false,
                end: false,
                attached: true,
                history: true,
            })
        );
        // A longer chain than one holds is cut to MAX_ATTACH_CHAIN (the
        // writer of several does the rest).
        let mut big = vec![0u8; 8192];
        let mut w = Writer::new(&mut big);
        let many: Vec<u32> = (0..2000).collect();
        assert!(w.attach_chain(&many));
        let n = w.len();
        assert_eq!(n, 4 + 4 * MAX_ATTACH_CHAIN);
        let mut w = Writer::new(&mut buf);
        assert!(w.int(IntFmt::Signed, 4, 1));
        let n = w.len();
        assert_eq!(decode_backtrace(&buf[..n]), None);
        let mut small = [0u8; 8];
        let mut w = Writer::new(&mut small);
        assert!(!w.backtrace(&[1, 2], false));
        assert!(w.is_empty());
    }

    #[test]
    fn strings_are_cut_to_fit() {
        let mut buf = [0u8; 10];
        let mut w = Writer::new(&mut buf);
        assert!(w.string(b"0123456789abc", false));
        let n = w.len();
        assert_eq!(
            decode(&buf[..n]).unwrap(),
            vec![Value::Str {
                bytes: b"0123456".to_vec(),
                cut: true
            }]
        );
        let mut w = Writer::new(&mut buf);
        assert!(w.unreadable(0));
        assert!(!w.unreadable(0));
        assert!(w.is_full());
    }
}
