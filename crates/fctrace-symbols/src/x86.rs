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

/// Targets of every `call/jmp *disp32(%rip)` (`ff 15` / `ff 25`, as
/// bytes, without decoding instruction boundaries) in `code` at `addr`,
/// passed to `want`.
pub(crate) fn indirect_rip_targets(code: &[u8], addr: u64, mut want: impl FnMut(u64)) {
    if code.len() < 6 {
        return;
    }
    for i in 0..code.len() - 5 {
        if code[i] == 0xff && (code[i + 1] == 0x15 || code[i + 1] == 0x25) {
            let disp = i32::from_le_bytes([code[i + 2], code[i + 3], code[i + 4], code[i + 5]]);
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
