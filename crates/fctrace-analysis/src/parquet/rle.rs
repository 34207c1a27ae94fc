//! Parquet's "RLE / bit-packing hybrid" encoding of dictionary indices
//! (parquet-format, Encodings.md): runs of one value as a count and the
//! value, other values bit-packed by groups of 8. The parquet crate keeps
//! its encoder private unless its experimental feature (and Arrow) is on.

/// Bits per value for dictionary indices up to `max`: at least 1, as some
/// readers do not take a width of 0.
pub fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()).max(1) as u8
}

/// A run of at least this many equal values is written as a run.
const MIN_RUN: usize = 8;

/// Bit-packed groups of 8 values per literal run at most (63: the limit of
/// the oldest readers, which keep the header in one byte).
const MAX_GROUPS: usize = 63;

/// Appends the hybrid encoding of `values` (each below 2^`width`) to `out`.
/// The last bit-packed group is padded with zeros: the page's value count
/// says where the values end.
pub fn encode(values: &[u32], width: u8, out: &mut Vec<u8>) {
    let n = values.len();
    let mut i = 0;
    while i < n {
        let run = run_length(values, i, usize::MAX);
        if run >= MIN_RUN {
            varint((run as u64) << 1, out);
            let bytes = values[i].to_le_bytes();
            out.extend_from_slice(&bytes[..usize::from(width).div_ceil(8)]);
            i += run;
            continue;
        }
        // Groups of 8 until a run starts after one (the next group may
        // take the first values of that run: groups are whole).
        let start = i;
        let mut groups = 0;
        while i < n && groups < MAX_GROUPS {
            i += 8;
            groups += 1;
            if i < n && run_length(values, i, MIN_RUN) >= MIN_RUN {
                break;
            }
        }
        let end = i.min(n);
        varint(((groups as u64) << 1) | 1, out);
        pack(&values[start..end], groups * 8, width, out);
        i = end;
    }
}

/// Equal values from `i` on, counted up to `limit`.
fn run_length(values: &[u32], i: usize, limit: usize) -> usize {
    let v = values[i];
    values[i..]
        .iter()
        .take(limit)
        .take_while(|&&x| x == v)
        .count()
}

/// `count` values (`values`, then zeros), `width` bits each, least
/// significant bit first.
fn pack(values: &[u32], count: usize, width: u8, out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for k in 0..count {
        let v = u64::from(values.get(k).copied().unwrap_or(0));
        acc |= v << bits;
        bits += u32::from(width);
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    debug_assert_eq!(bits, 0, "groups of 8 values end on a byte");
}

/// ULEB128, as the run headers are written.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader written from the specification: `count` values.
    fn decode(mut data: &[u8], width: u8, count: usize) -> Vec<u32> {
        let mut out = Vec::new();
        while out.len() < count {
            let mut header = 0u64;
            let mut shift = 0;
            loop {
                let b = data[0];
                data = &data[1..];
                header |= u64::from(b & 0x7f) << shift;
                shift += 7;
                if b < 0x80 {
                    break;
                }
            }
            if header & 1 == 0 {
                let run = (header >> 1) as usize;
                let nbytes = usize::from(width).div_ceil(8);
                let mut v = [0u8; 4];
                v[..nbytes].copy_from_slice(&data[..nbytes]);
                data = &data[nbytes..];
                out.extend(std::iter::repeat_n(u32::from_le_bytes(v), run));
            } else {
                let values = (header >> 1) as usize * 8;
                let nbytes = values * usize::from(width) / 8;
                let (packed, rest) = data.split_at(nbytes);
                data = rest;
                for k in 0..values {
                    let mut v = 0u32;
                    for b in 0..usize::from(width) {
                        let bit = k * usize::from(width) + b;
                        v |= u32::from((packed[bit / 8] >> (bit % 8)) & 1) << b;
                    }
                    out.push(v);
                }
            }
        }
        assert!(data.is_empty(), "{} bytes left over", data.len());
        out.truncate(count);
        out
    }

    fn round_trip(values: &[u32]) -> usize {
        let width = bit_width(values.iter().copied().max().unwrap_or(0));
        let mut out = Vec::new();
        encode(values, width, &mut out);
        assert_eq!(decode(&out, width, values.len()), values, "width {width}");
        out.len()
    }

    #[test]
    fn runs_literals_and_their_borders() {
        assert_eq!(round_trip(&[]), 0);
        round_trip(&[0]);
        round_trip(&[5, 5, 5]);
        // One run: a header byte and the value.
        assert_eq!(round_trip(&[3; 1000]), 2 + 1);
        // Literals, then a run that gives its first values to the last group.
        let mut v: Vec<u32> = (0..13).collect();
        v.extend([7; 30]);
        v.extend(0..5);
        round_trip(&v);
        // Wide values (a run's value takes 3 bytes), and the widest.
        round_trip(&[0x12_3456; 9]);
        round_trip(&[u32::MAX, 0, 1, u32::MAX, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]);
        // Long literal stretches are split into runs of at most 63 groups.
        let v: Vec<u32> = (0..5000).map(|i| (i * 7919) % 1021).collect();
        round_trip(&v);
        // Every width from 1 to 32 bits.
        for w in 1..=32u32 {
            let max = if w == 32 { u32::MAX } else { (1 << w) - 1 };
            let v: Vec<u32> = (0..77u32)
                .map(|i| max.saturating_sub(i % 3))
                .chain([max; 10])
                .collect();
            round_trip(&v);
        }
    }

    #[test]
    fn width_is_never_zero() {
        assert_eq!(bit_width(0), 1);
        assert_eq!(bit_width(1), 1);
        assert_eq!(bit_width(2), 2);
        assert_eq!(bit_width(255), 8);
        assert_eq!(bit_width(256), 9);
        assert_eq!(bit_width(u32::MAX), 32);
    }
}
