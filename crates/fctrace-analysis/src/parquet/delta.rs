//! Parquet's DELTA_BINARY_PACKED encoding of integers (parquet-format,
//! Encodings.md): the first value, then per block of 128 values the
//! smallest delta between consecutive values and, per miniblock of 32,
//! each delta minus that smallest one bit-packed at the miniblock's width.
//! Timestamps that grow steadily and short durations take a few bits a
//! value, without a general-purpose compressor's work.

/// Values per block, and per miniblock.
const BLOCK: usize = 128;
const MINIBLOCK: usize = 32;
const MINIBLOCKS: usize = BLOCK / MINIBLOCK;

/// Appends the encoding of `values` to `out`.
pub fn encode(values: &[i64], out: &mut Vec<u8>) {
    uleb(BLOCK as u64, out);
    uleb(MINIBLOCKS as u64, out);
    uleb(values.len() as u64, out);
    let Some((&first, rest)) = values.split_first() else {
        uleb(0, out);
        return;
    };
    uleb(zigzag(first), out);
    let mut previous = first;
    let mut deltas = [0i64; BLOCK];
    for block in rest.chunks(BLOCK) {
        let mut min = i64::MAX;
        for (d, &v) in deltas.iter_mut().zip(block) {
            *d = v.wrapping_sub(previous);
            previous = v;
            min = min.min(*d);
        }
        let n = block.len();
        uleb(zigzag(min), out);
        // The widths, then the miniblocks that hold values (the widths of
        // the others are written as 0, their bodies left out).
        let mut widths = [0u8; MINIBLOCKS];
        let used = n.div_ceil(MINIBLOCK);
        for (m, w) in widths.iter_mut().enumerate().take(used) {
            let end = ((m + 1) * MINIBLOCK).min(n);
            let max = deltas[m * MINIBLOCK..end]
                .iter()
                .map(|&d| d.wrapping_sub(min) as u64)
                .fold(0, |a, b| a | b);
            *w = (64 - max.leading_zeros()) as u8;
        }
        out.extend_from_slice(&widths);
        for (m, &w) in widths.iter().enumerate().take(used) {
            let end = ((m + 1) * MINIBLOCK).min(n);
            pack(&deltas[m * MINIBLOCK..end], min, w, out);
        }
    }
}

/// 32 values (`deltas` minus `min`, then zeros), `width` bits each,
/// least significant bit first.
fn pack(deltas: &[i64], min: i64, width: u8, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let width = u32::from(width);
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for k in 0..MINIBLOCK {
        let v = deltas.get(k).map_or(0, |&d| d.wrapping_sub(min) as u64);
        acc |= u128::from(v) << bits;
        bits += width;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    // 32 values end on a byte.
    let bytes = (bits / 8) as usize;
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..bytes]);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn uleb(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader written from the specification.
    fn decode(mut data: &[u8]) -> Vec<i64> {
        fn uleb(data: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let b = data[0];
                *data = &data[1..];
                v |= u64::from(b & 0x7f) << shift;
                shift += 7;
                if b < 0x80 {
                    return v;
                }
            }
        }
        let unzigzag = |v: u64| ((v >> 1) as i64) ^ -((v & 1) as i64);
        let block = uleb(&mut data) as usize;
        let miniblocks = uleb(&mut data) as usize;
        let count = uleb(&mut data) as usize;
        let mut out = Vec::new();
        let mut v = unzigzag(uleb(&mut data));
        if count == 0 {
            return out;
        }
        out.push(v);
        let per = block / miniblocks;
        while out.len() < count {
            let min = unzigzag(uleb(&mut data));
            let widths: Vec<usize> = data[..miniblocks].iter().map(|&w| w as usize).collect();
            data = &data[miniblocks..];
            for w in widths {
                if out.len() == count {
                    break;
                }
                let (packed, rest) = data.split_at(per * w / 8);
                data = rest;
                for k in 0..per {
                    let mut d = 0u64;
                    for b in 0..w {
                        let bit = k * w + b;
                        d |= u64::from((packed[bit / 8] >> (bit % 8)) & 1) << b;
                    }
                    if out.len() < count {
                        v = v.wrapping_add(min).wrapping_add(d as i64);
                        out.push(v);
                    }
                }
            }
        }
        assert!(data.is_empty(), "{} bytes left over", data.len());
        out
    }

    fn round_trip(values: &[i64]) {
        let mut out = Vec::new();
        encode(values, &mut out);
        assert_eq!(decode(&out), values);
    }

    #[test]
    fn values_of_every_kind() {
        round_trip(&[]);
        round_trip(&[42]);
        round_trip(&[5, 5, 5, 5]);
        // Timestamps, one block and a bit, and many blocks.
        let ts: Vec<i64> = (0..130).map(|i| 1_000_000_000 + i * 37 + (i % 5)).collect();
        round_trip(&ts);
        let ts: Vec<i64> = (0..10_000).map(|i| 7_000_000_000 + i * i % 977).collect();
        round_trip(&ts);
        // Going down, and the widest deltas (wrapping).
        round_trip(&(0..300).rev().collect::<Vec<i64>>());
        round_trip(&[i64::MIN, i64::MAX, 0, -1, i64::MAX, i64::MIN, 3]);
        // Every miniblock count of a last block.
        for n in [2, 32, 33, 64, 65, 97, 128, 129, 257] {
            let v: Vec<i64> = (0..n).map(|i| (i * 7919) % 1000).collect();
            round_trip(&v);
        }
    }
}
