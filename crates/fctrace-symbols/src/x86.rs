//! The few x86 byte patterns this crate recognizes.

/// Length of the alignment-padding instruction at the start of `b`, if it is
/// one: `int3`, `nop`, `66 90` (any number of `66`), or `0f 1f /0` (the
/// multi-byte `nopl`/`nopw`) with any `66`/`2e` prefixes. The whole
/// instruction must fit in `b`.
pub(crate) fn padding_len(b: &[u8]) -> Option<usize> {
    match *b.first()? {
        0xcc | 0x90 => return Some(1),
        _ => {}
    }
    let prefixes = b.iter().take_while(|&&x| x == 0x66 || x == 0x2e).count();
    let rest = &b[prefixes..];
    let len = match *rest.first()? {
        0x90 if prefixes > 0 && b[..prefixes].iter().all(|&x| x == 0x66) => 1,
        0x0f if rest.get(1) == Some(&0x1f) => {
            let modrm = *rest.get(2)?;
            if (modrm >> 3) & 7 != 0 {
                return None;
            }
            let md = modrm >> 6;
            let rm = modrm & 7;
            let mut len = 3;
            if md != 3 {
                if rm == 4 {
                    let sib = *rest.get(3)?;
                    len += 1;
                    if md == 0 && sib & 7 == 5 {
                        len += 4;
                    }
                } else if md == 0 && rm == 5 {
                    len += 4;
                }
                len += match md {
                    1 => 1,
                    2 => 4,
                    _ => 0,
                };
            }
            len
        }
        _ => return None,
    };
    let total = prefixes + len;
    (total <= 15 && total <= b.len()).then_some(total)
}

/// Length of the run of padding instructions at the start of `b`.
pub(crate) fn padding_run(b: &[u8]) -> usize {
    let mut i = 0;
    while let Some(n) = padding_len(&b[i..]) {
        i += n;
    }
    i
}

/// If `b` (the bytes of a PLT entry at `addr`) is `[endbr64] [bnd] jmp
/// *disp32(%rip)`, the address of the GOT slot it jumps through.
pub(crate) fn plt_jump_slot(b: &[u8], addr: u64) -> Option<u64> {
    let mut i = 0;
    if b.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i = 4;
    }
    if b.get(i) == Some(&0xf2) {
        i += 1;
    }
    if b.get(i..i + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(b.get(i + 2..i + 6)?.try_into().ok()?);
    Some(
        addr.wrapping_add(i as u64 + 6)
            .wrapping_add(disp as i64 as u64),
    )
}

/// What a byte pattern found by [`branch_patterns`] does with its target.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pattern {
    /// `call rel32`.
    Call,
    /// `jmp`/`jcc` rel8 or rel32, `xbegin` (its abort target).
    Jump,
    /// `loop`, `loope`, `loopne`, `jrcxz` (rel8).
    Loop,
    /// `lea disp32(%rip)` (with or without a REX prefix before it).
    RipLea,
}

/// Every byte position of `code` (at `addr`) read as the opcode of a
/// direct call or jump or a rip-relative `lea`, the whole pattern inside
/// `code`: `f(offset, target, pattern)`, each once, in no particular
/// order. Bytes, not decoded instructions: every real instruction of
/// these kinds is found (a prefix before the opcode changes neither its
/// length after the opcode nor its target in 64-bit mode), and so are
/// patterns that lie inside other instructions, which a caller that needs
/// certainty decodes. Several times faster than decoding: start-up runs
/// it over every function of every traced module. [`far_patterns`] and
/// [`near_patterns`] are its two halves.
pub fn branch_patterns(code: &[u8], addr: u64, mut f: impl FnMut(usize, u64, Pattern)) {
    far_patterns(code, addr, &mut f);
    near_patterns(code, addr, 0..code.len(), f);
}

/// [`branch_patterns`]' patterns with a 4-byte displacement (`call`,
/// `jmp`, `jcc`, `lea`, `xbegin`), which may reach anywhere: found by
/// memchr's vectorised search for their first bytes (about one byte in
/// fifteen is one; a byte at a time, the branch on each byte's kind was
/// mispredicted for one byte in five).
pub fn far_patterns(code: &[u8], addr: u64, mut f: impl FnMut(usize, u64, Pattern)) {
    let rel32 = |k: usize| -> Option<i64> {
        let w = code.get(k..k + 4)?;
        Some(i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as i64)
    };
    for i in memchr::memchr3_iter(0xe8, 0xe9, 0x0f, code) {
        let (len, kind) = match code[i] {
            0xe8 => (5, Pattern::Call),
            0xe9 => (5, Pattern::Jump),
            _ if code.get(i + 1).is_some_and(|n| n & 0xf0 == 0x80) => (6, Pattern::Jump),
            _ => continue,
        };
        if let Some(r) = rel32(i + len - 4) {
            f(i, target(addr, i, len, r), kind);
        }
    }
    for i in memchr::memchr_iter(0x8d, code) {
        if code.get(i + 1).is_some_and(|m| m & 0xc7 == 0x05) {
            if let Some(r) = rel32(i + 2) {
                f(i, target(addr, i, 6, r), Pattern::RipLea);
            }
        }
    }
    // xbegin rel32, or rel16 after an operand-size prefix: both.
    for i in memchr::memmem::find_iter(code, &[0xc7, 0xf8]) {
        if let Some(r) = code.get(i + 2..i + 4) {
            let r = i16::from_le_bytes([r[0], r[1]]) as i64;
            f(i, target(addr, i, 4, r), Pattern::Jump);
        }
        if let Some(r) = rel32(i + 2) {
            f(i, target(addr, i, 6, r), Pattern::Jump);
        }
    }
}

/// [`branch_patterns`]' patterns with a 1-byte displacement (`jmp`,
/// `jcc`, `loop`, `jrcxz`), which reach 128 bytes at most, at the offsets
/// `at` of `code` only.
pub fn near_patterns(
    code: &[u8],
    addr: u64,
    at: std::ops::Range<usize>,
    mut f: impl FnMut(usize, u64, Pattern),
) {
    let end = at.end.min(code.len());
    let mut each = |i: usize, b: u8| {
        let kind = match NEAR[b as usize] {
            0 => return,
            1 => Pattern::Jump,
            _ => Pattern::Loop,
        };
        if let Some(&r) = code.get(i + 1) {
            f(i, target(addr, i, 2, r as i8 as i64), kind);
        }
    };
    // Eight bytes at a time: the high bit of each byte that starts a
    // pattern, from exact byte compares without carries between bytes
    // (about one byte in twelve does; a byte at a time, the branch on it
    // was mispredicted often).
    let mut i = at.start;
    while i + 8 <= end {
        let v = u64::from_le_bytes([
            code[i],
            code[i + 1],
            code[i + 2],
            code[i + 3],
            code[i + 4],
            code[i + 5],
            code[i + 6],
            code[i + 7],
        ]);
        let mut m = zero_bytes((v & (0xf0 * ONES)) ^ (0x70 * ONES))
            | zero_bytes(v ^ (0xeb * ONES))
            | zero_bytes((v & (0xfc * ONES)) ^ (0xe0 * ONES));
        while m != 0 {
            let j = i + (m.trailing_zeros() / 8) as usize;
            m &= m - 1;
            each(j, code[j]);
        }
        i += 8;
    }
    for (j, &b) in code[..end].iter().enumerate().skip(i) {
        each(j, b);
    }
}

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of each byte of `x` that is zero, and no other bit.
fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// The first bytes of [`near_patterns`]' patterns: 1 `jmp`/`jcc`, 2
/// `loop`/`jrcxz`, 0 none.
const NEAR: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut k = 0x70;
    while k <= 0x7f {
        t[k] = 1;
        k += 1;
    }
    t[0xeb] = 1;
    let mut k = 0xe0;
    while k <= 0xe3 {
        t[k] = 2;
        k += 1;
    }
    t
};

/// The target of a pattern at offset `i` of code at `addr`, `len` bytes
/// long, with displacement `rel`.
fn target(addr: u64, i: usize, len: usize, rel: i64) -> u64 {
    addr.wrapping_add((i + len) as u64).wrapping_add(rel as u64)
}

/// Every 4-byte little-endian word of `code` (at any offset) whose value
/// lies in `lo..=hi`: `f(offset, value)`. The absolute addresses a
/// position-dependent program's code holds as immediates and
/// displacements.
pub fn words_in(code: &[u8], lo: u32, hi: u32, mut f: impl FnMut(usize, u32)) {
    let span = hi.wrapping_sub(lo);
    // One 8-byte load gives the words at five offsets.
    let mut i = 0;
    for q in code.windows(8).step_by(5) {
        let q = u64::from_le_bytes([q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]]);
        for j in 0..5 {
            let v = (q >> (8 * j)) as u32;
            if v.wrapping_sub(lo) <= span {
                f(i + j, v);
            }
        }
        i += 5;
    }
    for (k, w) in code.get(i..).unwrap_or(&[]).windows(4).enumerate() {
        let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        if v.wrapping_sub(lo) <= span {
            f(i + k, v);
        }
    }
}

/// Targets of every `call/jmp *disp32(%rip)` (`ff 15` / `ff 25`, as
/// bytes, without decoding instruction boundaries) in `code` at `addr`,
/// passed to `want` (those of `ff 15` first). memchr's vectorised search
/// finds the two byte pairs: this runs over the whole code of every
/// library with untyped imports, at the traced program's start.
pub(crate) fn indirect_rip_targets(code: &[u8], addr: u64, mut want: impl FnMut(u64)) {
    for pair in [[0xff, 0x15], [0xff, 0x25]] {
        for i in memchr::memmem::find_iter(code, &pair) {
            let Some(d) = code.get(i + 2..i + 6) else {
                continue;
            };
            let disp = i32::from_le_bytes([d[0], d[1], d[2], d[3]]);
            want(
                addr.wrapping_add(i as u64 + 6)
                    .wrapping_add(disp as i64 as u64),
            );
        }
    }
}

/// The 64-bit register loads from rip-relative addresses (`mov r64,
/// [rip + disp32]`: REX.W 8B /r, mod 00, r/m 101) in `code` (at `addr`):
/// `want(instruction address, address loaded from)`. A byte scan: a match
/// inside another instruction is possible (callers decode from it).
pub fn rip_loads(code: &[u8], addr: u64, mut want: impl FnMut(u64, u64)) {
    if code.len() < 7 {
        return;
    }
    for i in 0..code.len() - 6 {
        if code[i] & 0xf8 == 0x48 && code[i + 1] == 0x8b && code[i + 2] & 0xc7 == 0x05 {
            let disp = i32::from_le_bytes([code[i + 3], code[i + 4], code[i + 5], code[i + 6]]);
            want(
                addr + i as u64,
                addr.wrapping_add(i as u64 + 7)
                    .wrapping_add(disp as i64 as u64),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from a fixed pseudo-random sequence (xorshift), with the
    /// pattern bytes made frequent.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pick = [
                    0xe8, 0xe9, 0x0f, 0x85, 0xeb, 0x74, 0xe2, 0x8d, 0x05, 0x00, 0xff, 0xc7, 0xf8,
                ];
                if x.is_multiple_of(3) {
                    pick[(x >> 8) as usize % pick.len()]
                } else {
                    (x >> 16) as u8
                }
            })
            .collect()
    }

    #[test]
    fn branch_patterns_are_those_of_a_plain_reading() {
        for seed in 1..40 {
            let code = noise(seed as usize * 37, seed);
            let addr = 0x40_1000;
            let mut got = Vec::new();
            branch_patterns(&code, addr, |i, t, k| got.push((i, t, k)));
            got.sort_by_key(|&(i, t, _)| (i, t));
            let mut want = Vec::new();
            let rel32 = |k: usize| {
                (k + 4 <= code.len())
                    .then(|| i32::from_le_bytes(code[k..k + 4].try_into().unwrap()) as i64)
            };
            let to = |i: usize, len: usize, r: i64| (addr as i64 + (i + len) as i64 + r) as u64;
            for i in 0..code.len() {
                let next = code.get(i + 1).copied();
                let found = match code[i] {
                    0xe8 => rel32(i + 1).map(|r| (to(i, 5, r), Pattern::Call)),
                    0xe9 => rel32(i + 1).map(|r| (to(i, 5, r), Pattern::Jump)),
                    0x0f if next.is_some_and(|n| (0x80..=0x8f).contains(&n)) => {
                        rel32(i + 2).map(|r| (to(i, 6, r), Pattern::Jump))
                    }
                    0x70..=0x7f | 0xeb => next.map(|n| (to(i, 2, n as i8 as i64), Pattern::Jump)),
                    0xe0..=0xe3 => next.map(|n| (to(i, 2, n as i8 as i64), Pattern::Loop)),
                    0x8d if next.is_some_and(|n| n & 0xc7 == 5) => {
                        rel32(i + 2).map(|r| (to(i, 6, r), Pattern::RipLea))
                    }
                    0xc7 if next == Some(0xf8) => {
                        if i + 4 <= code.len() {
                            let r = i16::from_le_bytes([code[i + 2], code[i + 3]]) as i64;
                            want.push((i, to(i, 4, r), Pattern::Jump));
                        }
                        rel32(i + 2).map(|r| (to(i, 6, r), Pattern::Jump))
                    }
                    _ => None,
                };
                if let Some((t, k)) = found {
                    want.push((i, t, k));
                }
            }
            want.sort_by_key(|&(i, t, _)| (i, t));
            assert_eq!(got, want, "seed {seed}");
            // The near ones of a window only.
            let w = (seed as usize * 5) % code.len()..(seed as usize * 11) % code.len() + 3;
            let mut near = Vec::new();
            near_patterns(&code, addr, w.clone(), |i, t, k| near.push((i, t, k)));
            let in_window: Vec<_> = want
                .iter()
                .filter(|&&(i, _, k)| {
                    w.contains(&i)
                        && (k == Pattern::Loop || code[i] & 0xf0 == 0x70 || code[i] == 0xeb)
                })
                .copied()
                .collect();
            assert_eq!(near, in_window, "seed {seed} window {w:?}");
        }
        // jne back to the start, call forward, lea.
        let code = [
            0x75, 0xfe, 0xe8, 0x10, 0, 0, 0, 0x48, 0x8d, 0x05, 0xf0, 0xff, 0xff, 0xff,
        ];
        let mut got = Vec::new();
        branch_patterns(&code, 0x1000, |i, t, k| got.push((i, t, k)));
        got.sort_by_key(|&(i, _, _)| i);
        assert_eq!(
            got,
            [
                (0, 0x1000, Pattern::Jump),
                (2, 0x1017, Pattern::Call),
                (8, 0x1000 + 14 - 16, Pattern::RipLea)
            ]
        );
    }

    #[test]
    fn words_in_reads_every_offset() {
        for seed in 1..40 {
            let code = noise(seed as usize * 7, seed);
            let (lo, hi) = (0x0000_1000, 0x8fff_ffff);
            let mut got = Vec::new();
            words_in(&code, lo, hi, |i, v| got.push((i, v)));
            let want: Vec<(usize, u32)> = code
                .windows(4)
                .enumerate()
                .map(|(i, w)| (i, u32::from_le_bytes(w.try_into().unwrap())))
                .filter(|&(_, v)| (lo..=hi).contains(&v))
                .collect();
            assert_eq!(got, want, "seed {seed}");
        }
    }

    #[test]
    fn rip_loads_are_found() {
        // mov rax, [rip+0x10]; call [rip+0x20]; mov r11, [rip-8]
        let code = [
            0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0xff, 0x15, 0x20, 0, 0, 0, 0x4c, 0x8b, 0x1d, 0xf8,
            0xff, 0xff, 0xff, 0x90,
        ];
        let mut got = Vec::new();
        rip_loads(&code, 0x1000, |at, t| got.push((at, t)));
        assert_eq!(
            got,
            [(0x1000, 0x1000 + 7 + 0x10), (0x100d, 0x1000 + 20 - 8)]
        );
    }

    #[test]
    fn padding_forms() {
        let cases: &[&[u8]] = &[
            &[0x90],
            &[0xcc],
            &[0x66, 0x90],
            &[0x0f, 0x1f, 0x00],
            &[0x0f, 0x1f, 0x40, 0x00],
            &[0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x0f, 0x1f, 0x80, 0, 0, 0, 0],
            &[0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
            &[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
            &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
            &[0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
            &[
                0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0,
            ],
        ];
        for c in cases {
            assert_eq!(padding_len(c), Some(c.len()), "{c:02x?}");
            // Truncated: not padding.
            if c.len() > 1 {
                assert_eq!(padding_len(&c[..c.len() - 1]), None, "{c:02x?}");
            }
        }
        // Not padding: ret, endbr64, push rbp, ud2, 0f 1f /1, 2e 90, zero.
        for c in [
            &[0xc3][..],
            &[0xf3, 0x0f, 0x1e, 0xfa],
            &[0x55],
            &[0x0f, 0x0b],
            &[0x0f, 0x1f, 0x48, 0x00],
            &[0x2e, 0x90],
            &[0x00, 0x00],
            &[],
        ] {
            assert_eq!(padding_len(c), None, "{c:02x?}");
        }
        assert_eq!(padding_run(&[0xcc, 0x66, 0x90, 0x90, 0xc3, 0x90]), 4);
    }

    #[test]
    fn plt_forms() {
        // jmp *0x2fca(%rip) at 0x1030 -> 0x4000
        assert_eq!(
            plt_jump_slot(&[0xff, 0x25, 0xca, 0x2f, 0, 0, 0x68, 0, 0, 0, 0], 0x1030),
            Some(0x4000)
        );
        // endbr64; jmp *0x2f46(%rip) at 0x10b0 -> 0x4000
        assert_eq!(
            plt_jump_slot(
                &[0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0x25, 0x46, 0x2f, 0, 0],
                0x10b0
            ),
            Some(0x4000)
        );
        // endbr64; bnd jmp
        assert_eq!(
            plt_jump_slot(
                &[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x45, 0x2f, 0, 0],
                0x10b0
            ),
            Some(0x4000)
        );
        // PLT0 (push; jmp) and IBT lazy stub (endbr64; push; jmp rel32)
        assert_eq!(
            plt_jump_slot(&[0xff, 0x35, 0, 0, 0, 0, 0xff, 0x25], 0),
            None
        );
        assert_eq!(
            plt_jump_slot(&[0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xe9], 0),
            None
        );
        // negative displacement
        assert_eq!(
            plt_jump_slot(&[0xff, 0x25, 0xfa, 0xff, 0xff, 0xff], 0x1000),
            Some(0x1000)
        );
    }
}
