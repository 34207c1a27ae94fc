//! Integers as text without the formatting machinery, for code that writes
//! one line per function or per call (the agent's symbol table, replay) or
//! must not allocate (the agent's exec interposers).

/// `v` in decimal, in the tail of `buf`.
pub fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// `v` in lower-case hexadecimal without prefix, in the tail of `buf`.
pub fn hex(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_format_would() {
        let mut b = [0u8; 20];
        for v in [0, 1, 9, 10, 99, 12345, u32::MAX as u64, u64::MAX] {
            assert_eq!(decimal(v, &mut b), v.to_string().as_bytes());
            assert_eq!(hex(v, &mut b), format!("{v:x}").as_bytes());
        }
    }
}
