//! Argument and return values as the tree shows them: `add(2, 3) = 5;`,
//! `greet("world") {` ... `} = "hello world"; /* greet */`, `pick(RED) =
//! BLUE;`. Strings are quoted and escaped, a cut string ends in `...`, a
//! pointer that could not be read shows as its address, a null string
//! pointer as `NULL`, a value the agent could not get as `?`.

use fctrace_format::argval::{self, IntFmt, Value};
use fctrace_format::event::EventKind;
use fctrace_format::store::Event;
use std::fmt::Write;

/// Appends the payload bytes of a `Data` event to `out`.
pub fn push_data(event: &Event, out: &mut Vec<u8>) {
    if event.kind == EventKind::Data {
        let (b, n) = event.data_bytes();
        out.extend_from_slice(&b[..n]);
    }
}

/// The values of a payload, separated by `, `; a corrupt payload shows
/// as `<corrupt: reason>`.
pub fn format_payload(payload: &[u8]) -> String {
    let mut s = String::new();
    match argval::decode(payload) {
        Ok(values) => {
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                format_value(v, &mut s);
            }
        }
        Err(e) => {
            let _ = write!(s, "<corrupt: {e}>");
        }
    }
    s
}

fn sign_extend(bits: u64, size: u8) -> i64 {
    if size >= 8 {
        bits as i64
    } else {
        let shift = 64 - u32::from(size) * 8;
        ((bits << shift) as i64) >> shift
    }
}

fn mask(bits: u64, size: u8) -> u64 {
    if size >= 8 {
        bits
    } else {
        bits & ((1u64 << (u32::from(size) * 8)) - 1)
    }
}

/// Appends one value.
pub fn format_value(v: &Value, s: &mut String) {
    match v {
        Value::Int { fmt, size, bits } => match fmt {
            IntFmt::Auto => {
                let x = sign_extend(*bits, *size);
                // Small numbers (and small negative ones) in decimal,
                // anything that looks like an address in hex.
                if (-0x10000..0x1_0000_0000).contains(&x) {
                    let _ = write!(s, "{x}");
                } else {
                    let _ = write!(s, "{:#x}", mask(*bits, *size));
                }
            }
            IntFmt::Signed => {
                let _ = write!(s, "{}", sign_extend(*bits, *size));
            }
            IntFmt::Unsigned => {
                let _ = write!(s, "{}", mask(*bits, *size));
            }
            IntFmt::Hex | IntFmt::Ptr => {
                let _ = write!(s, "{:#x}", mask(*bits, *size));
            }
            IntFmt::Oct => {
                // As C's `%#o`: 0, 017.
                let v = mask(*bits, *size);
                let _ = if v == 0 {
                    write!(s, "0")
                } else {
                    write!(s, "0{v:o}")
                };
            }
            IntFmt::Char => {
                s.push('\'');
                escape_byte(*bits as u8, b'\'', s);
                s.push('\'');
            }
            IntFmt::Bool => s.push_str(if mask(*bits, *size) != 0 {
                "true"
            } else {
                "false"
            }),
        },
        Value::Float { size, bits } => {
            if *size == 4 {
                let _ = write!(s, "{:?}", f32::from_bits(*bits as u32));
            } else {
                let _ = write!(s, "{:?}", f64::from_bits(*bits));
            }
        }
        Value::Str { bytes, cut } => {
            s.push('"');
            for &b in bytes {
                escape_byte(b, b'"', s);
            }
            s.push('"');
            if *cut {
                s.push_str("...");
            }
        }
        Value::Null => s.push_str("NULL"),
        Value::Unreadable(addr) => {
            let _ = write!(s, "{addr:#x}");
        }
        Value::Enum { bits, name } => {
            if name.is_empty() {
                let _ = write!(s, "{}", *bits as i64);
            } else {
                s.push_str(name);
            }
        }
        Value::Struct(fields) => {
            s.push('{');
            for (i, (name, v)) in fields.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                if !name.is_empty() {
                    s.push_str(name);
                    s.push_str(": ");
                }
                format_value(v, s);
            }
            s.push('}');
        }
        Value::Opaque => s.push_str("{...}"),
        Value::Missing => s.push('?'),
    }
}

/// A byte of a quoted string or char (`quote` is escaped).
fn escape_byte(b: u8, quote: u8, s: &mut String) {
    match b {
        b'\n' => s.push_str("\\n"),
        b'\t' => s.push_str("\\t"),
        b'\r' => s.push_str("\\r"),
        0 => s.push_str("\\0"),
        b'\\' => s.push_str("\\\\"),
        _ if b == quote => {
            s.push('\\');
            s.push(b as char);
        }
        0x20..=0x7e => s.push(b as char),
        _ => {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fctrace_format::argval::Writer;

    #[test]
    fn formats() {
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf);
        w.int(IntFmt::Auto, 8, 2);
        w.int(IntFmt::Auto, 8, (-3i64) as u64);
        w.int(IntFmt::Auto, 8, 0x7fff_1234_5678);
        w.int(IntFmt::Signed, 1, 0xff);
        w.int(IntFmt::Unsigned, 2, 0xffff);
        w.int(IntFmt::Hex, 4, 0xbeef);
        w.int(IntFmt::Char, 1, b'A' as u64);
        w.int(IntFmt::Char, 1, b'\n' as u64);
        w.int(IntFmt::Bool, 1, 1);
        w.float(8, 2.5f64.to_bits());
        w.float(4, u64::from(1.25f32.to_bits()));
        w.string(b"he said \"hi\"\n", false);
        w.string(b"abc", true);
        w.null();
        w.unreadable(1);
        w.enumerator(2, "BLUE");
        w.enumerator(7, "");
        w.struct_begin(2);
        w.field("x");
        w.int(IntFmt::Signed, 4, 1);
        w.field("y");
        w.opaque();
        w.missing();
        let n = w.len();
        assert_eq!(
            format_payload(&buf[..n]),
            "2, -3, 0x7fff12345678, -1, 65535, 0xbeef, 'A', '\\n', true, 2.5, 1.25, \
             \"he said \\\"hi\\\"\\n\", \"abc\"..., NULL, 0x1, BLUE, 7, {x: 1, y: {...}}, ?"
        );
        assert!(format_payload(&[200]).starts_with("<corrupt: "));
        assert_eq!(format_payload(&[]), "");
    }
}
