//! The task file encoding: file header, chunk header, the event code and
//! timestamp streams, LEB128 varints and the CRC-32 of chunks.
//! docs/format.md describes the same bytes.

use crate::event::EventKind;

/// First 8 bytes of a task file.
pub(crate) const FILE_MAGIC: [u8; 8] = *b"fctrtask";
/// Major version of the task file encoding written. Version 2 packs the
/// event kind in 3 bits of the code (version 1 had 2 bits and no
/// `Signal` kind); version 3 adds the data stream of `Args`/`Retval`
/// payloads; version 4 gives `Args`/`Retval` events no time delta and
/// writes a payload of integers like the one before it as the changes of
/// its values ([`PayloadMemory`]); readers accept all four.
pub(crate) const TASK_FILE_VERSION: u16 = 4;
/// Oldest major version readers accept.
pub(crate) const TASK_FILE_OLDEST: u16 = 1;
/// Minor version written (readers accept any minor of their major).
pub(crate) const TASK_FILE_MINOR: u16 = 0;
pub(crate) const FILE_HEADER_LEN: usize = 16;

/// First 4 bytes of every chunk.
pub(crate) const CHUNK_MAGIC: [u8; 4] = *b"FCCK";
pub(crate) const CHUNK_HEADER_LEN: usize = 40;
/// Codec of the chunk payload: zstd.
pub(crate) const CODEC_ZSTD: u32 = 1;

/// A chunk is written when it holds this many events...
pub(crate) const CHUNK_MAX_EVENTS: u32 = 65_536;
/// ... or when its encoded (uncompressed) streams reach this size.
pub(crate) const CHUNK_MAX_RAW: usize = 1 << 20;
/// Upper bounds a reader enforces before allocating (a corrupt length must
/// not make it allocate gigabytes). Writers stay far below them.
pub(crate) const READ_MAX_EVENTS: u32 = 1 << 20;
pub(crate) const READ_MAX_RAW: u32 = 1 << 25;
pub(crate) const READ_MAX_COMPRESSED: u32 = 1 << 25;

/// Depth of the shadow call stack that predicts exits.
pub(crate) const PREDICT_STACK_MAX: usize = 4096;

/// Bytes of one integer value in a payload: `TAG_INT fmt size bits:u64`
/// (`crate::argval`).
const INT_VALUE_LEN: usize = 11;
/// Payloads remembered per kind (`Args`, `Retval`), by function id modulo
/// this.
const PAYLOAD_SLOTS: usize = 8;

/// The last payload of integers only (`Args` or `Retval`) of each slot
/// (kind, function id mod [`PAYLOAD_SLOTS`]) in the chunk, kept alike by
/// encoder and decoder from version 4 on, empty at the start of each
/// chunk. A payload of integers only whose values have the same tags,
/// formats and sizes as its slot's is written as the change of each value
/// (`varint(n << 1 | 1)` then, per value, the zigzag varint of the
/// difference of the 64-bit values); any other as `varint(len << 1)` then
/// its bytes. Either way the decoder gives back the exact bytes.
#[derive(Default)]
pub(crate) struct PayloadMemory {
    slots: [Vec<u8>; 2 * PAYLOAD_SLOTS],
}

/// Most bytes [`PayloadMemory::encode`] writes for a payload of `len`
/// bytes: its length and bytes, or (never more) a varint per value.
fn encoded_max(len: usize) -> usize {
    10 + len
}

/// Whether `payload` is a sequence of integer values only.
#[inline(always)]
fn ints_only(payload: &[u8]) -> bool {
    let n = payload.len() / INT_VALUE_LEN;
    n > 0
        && payload.len() == n * INT_VALUE_LEN
        && (0..n).all(|k| payload[k * INT_VALUE_LEN] == crate::argval::TAG_INT)
}

/// Tag, format and size of the `k`th integer value of `payload`.
#[inline(always)]
fn int_head(payload: &[u8], k: usize) -> [u8; 3] {
    let o = k * INT_VALUE_LEN;
    [payload[o], payload[o + 1], payload[o + 2]]
}

/// The 64-bit value of the `k`th integer value of `payload`.
#[inline(always)]
fn int_bits(payload: &[u8], k: usize) -> u64 {
    let o = k * INT_VALUE_LEN + 3;
    let mut b = [0u8; 8];
    b.copy_from_slice(&payload[o..o + 8]);
    u64::from_le_bytes(b)
}

#[inline(always)]
fn set_int_bits(payload: &mut [u8], k: usize, v: u64) {
    let o = k * INT_VALUE_LEN + 3;
    payload[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

impl PayloadMemory {
    #[inline(always)]
    fn slot(&mut self, kind: EventKind, func: u32) -> &mut Vec<u8> {
        let k = usize::from(kind == EventKind::Retval);
        &mut self.slots[k * PAYLOAD_SLOTS + func as usize % PAYLOAD_SLOTS]
    }

    fn clear(&mut self) {
        for s in &mut self.slots {
            s.clear();
        }
    }

    /// Writes the data stream bytes of `payload` at `out[pos..]`, which
    /// has room for [`encoded_max`]`(payload.len())` bytes; returns the
    /// position after them.
    #[inline(always)]
    fn encode(
        &mut self,
        kind: EventKind,
        func: u32,
        payload: &[u8],
        out: &mut [u8],
        pos: usize,
    ) -> usize {
        let slot = self.slot(kind, func);
        let ints = ints_only(payload);
        let n = payload.len() / INT_VALUE_LEN;
        if ints
            && slot.len() == payload.len()
            && (0..n).all(|k| int_head(slot, k) == int_head(payload, k))
        {
            let mut p = put_varint_at(out, pos, (n as u64) << 1 | 1);
            for k in 0..n {
                let new = int_bits(payload, k);
                p = put_varint_at(out, p, zigzag(new.wrapping_sub(int_bits(slot, k)) as i64));
                set_int_bits(slot, k, new);
            }
            return p;
        }
        let p = put_varint_at(out, pos, (payload.len() as u64) << 1);
        out[p..p + payload.len()].copy_from_slice(payload);
        slot.clear();
        if ints {
            slot.extend_from_slice(payload);
        }
        p + payload.len()
    }

    /// Reads one payload of the data stream at `*xp` (as
    /// [`encode`](Self::encode) wrote it) into `out` (cleared first).
    fn decode(
        &mut self,
        kind: EventKind,
        func: u32,
        data: &[u8],
        xp: &mut usize,
        out: &mut Vec<u8>,
    ) -> Result<(), &'static str> {
        let h = get_varint(data, xp).ok_or("the data stream ends early")?;
        let slot = self.slot(kind, func);
        out.clear();
        if h & 1 == 1 {
            let n = usize::try_from(h >> 1).unwrap_or(usize::MAX);
            if n == 0 || slot.len() / INT_VALUE_LEN != n {
                return Err("a payload is written as changes to values that are not there");
            }
            for k in 0..n {
                let d = get_varint(data, xp).ok_or("the data stream ends early")?;
                let v = int_bits(slot, k).wrapping_add(unzigzag(d) as u64);
                set_int_bits(slot, k, v);
            }
            out.extend_from_slice(slot);
            return Ok(());
        }
        out.extend_from_slice(take_payload_bytes(data, xp, h >> 1)?);
        slot.clear();
        if ints_only(out) {
            slot.extend_from_slice(out);
        }
        Ok(())
    }
}

/// Bits of a code that hold the event kind, by task file major version:
/// the code of an event in the code stream is 0 for "exit of the function
/// on top of the shadow stack", anything else is
/// `((func << kind_bits) | kind) + 1`.
pub(crate) fn kind_bits_of_version(version: u16) -> u32 {
    if version <= 1 {
        2
    } else {
        3
    }
}

/// Kind bits of the version written.
pub(crate) const KIND_BITS: u32 = 3;

/// The shadow stack both encoder and decoder keep: entries push, an exit or
/// unwind of the function on top pops. It only serves to predict exits.
/// `stack[..depth]`, the storage growing to the deepest depth met (not
/// shrunk by pops: no length to keep in step).
#[derive(Default)]
pub(crate) struct ShadowStack {
    stack: Vec<u32>,
    depth: usize,
}

impl ShadowStack {
    #[inline(always)]
    pub(crate) fn top(&self) -> Option<u32> {
        self.depth
            .checked_sub(1)
            .and_then(|d| self.stack.get(d).copied())
    }
    #[inline(always)]
    fn push(&mut self, func: u32) {
        if let Some(slot) = self.stack.get_mut(self.depth) {
            *slot = func;
            self.depth += 1;
        } else if self.depth < PREDICT_STACK_MAX {
            self.stack.push(func);
            self.depth += 1;
        }
    }
    /// Pops `func` if it is on top; whether it was.
    #[inline(always)]
    fn pop_if(&mut self, func: u32) -> bool {
        if self.top() == Some(func) {
            self.depth -= 1;
            true
        } else {
            false
        }
    }
    #[inline(always)]
    pub(crate) fn apply(&mut self, kind: EventKind, func: u32) {
        match kind {
            EventKind::Entry => self.push(func),
            EventKind::Exit | EventKind::Unwind => {
                self.pop_if(func);
            }
            EventKind::Lost
            | EventKind::Signal
            | EventKind::Args
            | EventKind::Retval
            | EventKind::Data
            | EventKind::Syscall
            | EventKind::SyscallExit
            | EventKind::OffCpu
            | EventKind::PageFault
            | EventKind::KernelSignal
            | EventKind::KernelEntry
            | EventKind::KernelExit => {}
        }
    }
    pub(crate) fn clear(&mut self) {
        self.depth = 0;
    }

    /// Encodes the written entries and exits at the front of `records`
    /// (their codes at `codes[cp..]`, their deltas from `prev` at
    /// `deltas[dp..]`, each with room for 10 bytes a record) and stops at
    /// the first other record: `(records encoded, cp, dp, prev)`. The
    /// writer's hot loop: the same codes as the general one. Not inlined:
    /// the general loop's other paths (`-A`/`-R` records) keep their
    /// registers.
    #[inline(never)]
    fn plain_steps(
        &mut self,
        records: &[crate::event::RawEvent],
        codes: &mut [u8],
        mut cp: usize,
        deltas: &mut [u8],
        mut dp: usize,
        mut prev: u64,
    ) -> (usize, usize, usize, u64) {
        let mut depth = self.depth;
        // The storage as it is: an entry past it (the stack grows) ends
        // the run, for the general loop.
        let stack = &mut self.stack[..];
        let mut n = 0;
        for r in records {
            let (w, t) = (r.word, r.tsc);
            if w & NOT_PLAIN != 0 || t == 0 {
                break;
            }
            let func = (w >> crate::event::KIND_BITS) as u32;
            let code = if w & 1 == 1 {
                match depth.checked_sub(1).and_then(|d| stack.get(d)) {
                    Some(&top) if top == func => {
                        depth -= 1;
                        0
                    }
                    _ => ((u64::from(func) << KIND_BITS) | 1) + 1,
                }
            } else {
                let Some(slot) = stack.get_mut(depth) else {
                    break;
                };
                *slot = func;
                depth += 1;
                (u64::from(func) << KIND_BITS) + 1
            };
            cp = put_varint10(codes, cp, code);
            dp = put_varint10(deltas, dp, zigzag(t.wrapping_sub(prev) as i64));
            prev = t;
            n += 1;
        }
        self.depth = depth;
        (n, cp, dp, prev)
    }
}

/// Bits of a record's word that a written entry or exit has clear: any
/// kind but Entry (0) and Exit (1), anything above the function id.
const NOT_PLAIN: u64 =
    (((1 << crate::event::KIND_BITS) - 1) & !1) | !((1u64 << (crate::event::KIND_BITS + 32)) - 1);

/// [`put_varint_at`] into `buf[pos..pos + 10]` (which must exist): one
/// bounds check.
#[inline(always)]
fn put_varint10(buf: &mut [u8], pos: usize, v: u64) -> usize {
    let b: &mut [u8; 10] = (&mut buf[pos..pos + 10]).try_into().expect("10 bytes");
    if v < 0x80 {
        b[0] = v as u8;
        return pos + 1;
    }
    if v < 0x4000 {
        b[0] = (v as u8) | 0x80;
        b[1] = (v >> 7) as u8;
        return pos + 2;
    }
    let mut v = v;
    let mut k = 0;
    while v >= 0x80 && k < 9 {
        b[k] = (v as u8) | 0x80;
        v >>= 7;
        k += 1;
    }
    b[k] = v as u8;
    pos + k + 1
}

#[inline(always)]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    // Most codes and time deltas take one or two bytes.
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    if v < 0x4000 {
        out.extend_from_slice(&[(v as u8) | 0x80, (v >> 7) as u8]);
        return;
    }
    let mut buf = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    out.extend_from_slice(&buf[..=n]);
}

/// Writes `v` as a varint at `buf[pos..]` (which has room for 10 bytes);
/// returns the position after it.
#[inline(always)]
pub(crate) fn put_varint_at(buf: &mut [u8], pos: usize, mut v: u64) -> usize {
    if v < 0x80 {
        buf[pos] = v as u8;
        return pos + 1;
    }
    if v < 0x4000 {
        buf[pos] = (v as u8) | 0x80;
        buf[pos + 1] = (v >> 7) as u8;
        return pos + 2;
    }
    let mut p = pos;
    while v >= 0x80 {
        buf[p] = (v as u8) | 0x80;
        v >>= 7;
        p += 1;
    }
    buf[p] = v as u8;
    p + 1
}

/// Reads a varint at `*pos`, advancing it; `None` if it runs past the end
/// or is longer than 10 bytes / overflows 64 bits.
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Incremental CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`).
#[derive(Clone)]
pub(crate) struct Crc32(crc32fast::Hasher);

impl Crc32 {
    pub(crate) fn new() -> Crc32 {
        Crc32(crc32fast::Hasher::new())
    }
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
    pub(crate) fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// The fixed-size header in front of each chunk's compressed payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    pub compressed_len: u32,
    pub raw_len: u32,
    pub events: u32,
    pub first_tsc: u64,
    pub last_tsc: u64,
    pub codec: u32,
    pub crc: u32,
}

impl ChunkHeader {
    /// The CRC covers header bytes 0..36 and then the compressed payload.
    pub(crate) fn to_bytes(self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4..8].copy_from_slice(&self.compressed_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.events.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_tsc.to_le_bytes());
        b[24..32].copy_from_slice(&self.last_tsc.to_le_bytes());
        b[32..36].copy_from_slice(&self.codec.to_le_bytes());
        b[36..40].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    /// `None` if the magic is wrong.
    pub(crate) fn from_bytes(b: &[u8; CHUNK_HEADER_LEN]) -> Option<ChunkHeader> {
        if b[0..4] != CHUNK_MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Some(ChunkHeader {
            compressed_len: u32_at(4),
            raw_len: u32_at(8),
            events: u32_at(12),
            first_tsc: u64_at(16),
            last_tsc: u64_at(24),
            codec: u32_at(32),
            crc: u32_at(36),
        })
    }

    pub(crate) fn checksum(header: &[u8; CHUNK_HEADER_LEN], payload: &[u8]) -> u32 {
        let mut crc = Crc32::new();
        crc.update(&header[..36]);
        crc.update(payload);
        crc.finish()
    }
}

pub(crate) fn file_header(tid: u32) -> [u8; FILE_HEADER_LEN] {
    let mut b = [0u8; FILE_HEADER_LEN];
    b[0..8].copy_from_slice(&FILE_MAGIC);
    b[8..10].copy_from_slice(&TASK_FILE_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&TASK_FILE_MINOR.to_le_bytes());
    b[12..16].copy_from_slice(&tid.to_le_bytes());
    b
}

/// Builds the uncompressed payload of one chunk from the agent's records.
///
/// The encoder keeps the same [`ShadowStack`] as the decoder, so that the
/// exit of the function on top of it is written as code 0 (one byte, and
/// the most frequent byte of the code stream).
#[derive(Default)]
pub(crate) struct ChunkEncoder {
    codes: Vec<u8>,
    deltas: Vec<u8>,
    /// Each `Args`/`Retval` payload, as [`PayloadMemory`] writes it.
    data: Vec<u8>,
    memory: PayloadMemory,
    /// The payload being encoded, gathered from its records.
    payload: PayloadBuf,
    events: u32,
    first_tsc: u64,
    prev_tsc: u64,
    stack: ShadowStack,
    /// Encoded bytes that make the chunk full; 0: [`CHUNK_MAX_RAW`]
    /// (a flight recorder's chunks are smaller: `super::ring`).
    max_raw: usize,
}

/// Most events one call of [`ChunkEncoder::push_records`] encodes: bounds
/// how far a chunk can go past [`CHUNK_MAX_RAW`] (20 bytes per event).
const PUSH_BATCH: usize = 4096;

/// Room to encode one batch into, shared by all of a writer's encoders.
pub(crate) struct EncodeScratch {
    codes: Box<[u8]>,
    deltas: Box<[u8]>,
    /// Payloads: appended to the chunk's data stream when nearly full and
    /// at the end of the batch.
    data: Box<[u8]>,
}

/// Bytes of [`EncodeScratch::data`].
const DATA_SCRATCH: usize = 64 << 10;
const _: () = assert!(DATA_SCRATCH >= 10 + crate::event::MAX_PAYLOAD);

impl Default for EncodeScratch {
    fn default() -> EncodeScratch {
        EncodeScratch {
            codes: vec![0; PUSH_BATCH * 10].into_boxed_slice(),
            deltas: vec![0; PUSH_BATCH * 10].into_boxed_slice(),
            data: vec![0; DATA_SCRATCH].into_boxed_slice(),
        }
    }
}

/// What [`ChunkEncoder::push_records`] did with a slice of records.
pub(crate) struct Pushed {
    /// Records consumed from the front of the slice.
    pub used: usize,
    /// Events stored.
    pub stored: u32,
    /// Records skipped because their kind is invalid.
    pub invalid: u32,
}

/// Room for the bytes of one payload.
pub(crate) struct PayloadBuf(Box<[u8; crate::event::MAX_PAYLOAD + crate::event::RawEvent::SIZE]>);

impl Default for PayloadBuf {
    fn default() -> PayloadBuf {
        PayloadBuf(Box::new(
            [0; crate::event::MAX_PAYLOAD + crate::event::RawEvent::SIZE],
        ))
    }
}

impl PayloadBuf {
    /// The first `len` bytes of the payload `records` (at most
    /// [`MAX_PAYLOAD`](crate::event::MAX_PAYLOAD), in as many records).
    #[inline(always)]
    fn gather(&mut self, records: &[crate::event::RawEvent], len: usize) -> &[u8] {
        let buf = &mut self.0[..];
        for (k, p) in records.iter().enumerate() {
            let o = k * crate::event::RawEvent::SIZE;
            buf[o..o + 8].copy_from_slice(&p.word.to_le_bytes());
            buf[o + 8..o + 16].copy_from_slice(&p.tsc.to_le_bytes());
        }
        &buf[..len]
    }
}

impl ChunkEncoder {
    /// Encodes one event (tests; the writer uses [`push_records`](Self::push_records)).
    #[cfg(test)]
    pub(crate) fn push(&mut self, kind: EventKind, func: u32, tsc: u64) {
        let p = self.push_records(
            &[crate::event::RawEvent::new(kind, func, tsc)],
            &mut EncodeScratch::default(),
        );
        debug_assert_eq!(p.stored, 1);
    }

    /// Encodes records from the front of `records` until they run out or
    /// the chunk is full. A record whose timestamp is 0 was reserved by the
    /// agent but never written (its process died in between): it is
    /// skipped and not counted. An `Args`/`Retval` record is taken with
    /// the payload records that follow it (even past the batch), as one
    /// event; without its timestamp (never completed) it is skipped with
    /// them. `records` must end at the end of what the agent wrote (a
    /// payload is never split across buffers): a payload running past it
    /// is counted as one invalid event.
    pub(crate) fn push_records(
        &mut self,
        records: &[crate::event::RawEvent],
        scratch: &mut EncodeScratch,
    ) -> Pushed {
        let room = if self.buffered() >= self.max_raw() {
            0
        } else {
            CHUNK_MAX_EVENTS.saturating_sub(self.events) as usize
        };
        let take = records.len().min(room).min(PUSH_BATCH);
        // The chunk's first timestamp is that of its first stored event.
        let mut first_pending = self.events == 0;
        // Encoded by index into the scratch (at most 10 + 10 bytes per
        // event), then appended.
        let codes = &mut scratch.codes[..];
        let deltas = &mut scratch.deltas[..];
        let data = &mut scratch.data[..];
        let (mut cp, mut dp, mut xp) = (0usize, 0usize, 0usize);
        let mut prev = self.prev_tsc;
        let mut stored = 0u32;
        let mut invalid = 0u32;
        let mut i = 0usize;
        let mut used = take;
        while i < take {
            let r = &records[i];
            i += 1;
            let kind_bits = r.word & ((1 << crate::event::KIND_BITS) - 1);
            // Nearly every record: a written entry or exit.
            if kind_bits <= EventKind::Exit as u64 && r.tsc != 0 && !first_pending {
                // The run of them from here.
                let (n, c, d, p) =
                    self.stack
                        .plain_steps(&records[i - 1..take], codes, cp, deltas, dp, prev);
                if n > 0 {
                    (cp, dp, prev) = (c, d, p);
                    stored += n as u32;
                    i += n - 1;
                    continue;
                }
                // This one grows the shadow stack (or has other bits).
                // (Encoded here, not by falling through to the general
                // code below: that made the `-A`/`-R` path 3 ns slower a
                // call, the loop compiled differently; measured.)
                let func = r.func();
                let code = if kind_bits == EventKind::Exit as u64 {
                    if self.stack.pop_if(func) {
                        0
                    } else {
                        ((u64::from(func) << KIND_BITS) | kind_bits) + 1
                    }
                } else {
                    self.stack.push(func);
                    ((u64::from(func) << KIND_BITS) | kind_bits) + 1
                };
                cp = put_varint_at(codes, cp, code);
                dp = put_varint_at(deltas, dp, zigzag(r.tsc.wrapping_sub(prev) as i64));
                prev = r.tsc;
                stored += 1;
                continue;
            }
            let kind = EventKind::from_u8(kind_bits as u8);
            if let Some(EventKind::Args | EventKind::Retval) = kind {
                let n = r.payload_records();
                let len = r.payload_len();
                let end = i + n;
                if end > records.len() || len > crate::event::MAX_PAYLOAD {
                    invalid += 1;
                    used = records.len();
                    break;
                }
                let payload = &records[i..end];
                i = end;
                used = used.max(end);
                if r.tsc == 0 {
                    continue;
                }
                if first_pending {
                    first_pending = false;
                    self.first_tsc = r.tsc;
                    prev = r.tsc;
                }
                let func = r.func();
                let step = r.with_call_step();
                if step && kind == Some(EventKind::Args) {
                    // The call's entry, then its arguments.
                    self.stack.push(func);
                    let code = ((u64::from(func) << KIND_BITS) | EventKind::Entry as u64) + 1;
                    cp = put_varint_at(codes, cp, code);
                    dp = put_varint_at(deltas, dp, zigzag(r.tsc.wrapping_sub(prev) as i64));
                    prev = r.tsc;
                    stored += 1;
                }
                let code = ((u64::from(func) << KIND_BITS) | kind_bits) + 1;
                cp = put_varint_at(codes, cp, code);
                // No time delta: it has the time of the event before it.
                let bytes = self.payload.gather(payload, len);
                if xp + encoded_max(len) > data.len() {
                    self.data.extend_from_slice(&data[..xp]);
                    xp = 0;
                }
                if let Some(kind) = kind {
                    xp = self.memory.encode(kind, func, bytes, data, xp);
                }
                stored += 1;
                if step && kind == Some(EventKind::Retval) {
                    // The return value, then the call's exit.
                    let code = if self.stack.pop_if(func) {
                        0
                    } else {
                        ((u64::from(func) << KIND_BITS) | EventKind::Exit as u64) + 1
                    };
                    cp = put_varint_at(codes, cp, code);
                    dp = put_varint_at(deltas, dp, zigzag(r.tsc.wrapping_sub(prev) as i64));
                    prev = r.tsc;
                    stored += 1;
                }
                continue;
            }
            if r.tsc == 0 {
                continue;
            }
            let Some(kind) = kind.filter(|&k| k != EventKind::Data) else {
                invalid += 1;
                continue;
            };
            if first_pending {
                first_pending = false;
                self.first_tsc = r.tsc;
                prev = r.tsc;
            }
            let func = r.func();
            let code = if kind == EventKind::Exit && self.stack.top() == Some(func) {
                0
            } else {
                ((u64::from(func) << KIND_BITS) | kind_bits) + 1
            };
            self.stack.apply(kind, func);
            cp = put_varint_at(codes, cp, code);
            dp = put_varint_at(deltas, dp, zigzag(r.tsc.wrapping_sub(prev) as i64));
            prev = r.tsc;
            stored += 1;
        }
        self.codes.extend_from_slice(&codes[..cp]);
        self.deltas.extend_from_slice(&deltas[..dp]);
        self.data.extend_from_slice(&data[..xp]);
        self.prev_tsc = prev;
        self.events += stored;
        Pushed {
            used,
            stored,
            invalid,
        }
    }

    pub(crate) fn events(&self) -> u32 {
        self.events
    }

    pub(crate) fn is_full(&self) -> bool {
        self.events >= CHUNK_MAX_EVENTS || self.buffered() >= self.max_raw()
    }

    fn max_raw(&self) -> usize {
        if self.max_raw == 0 {
            CHUNK_MAX_RAW
        } else {
            self.max_raw
        }
    }

    /// Chunks full at `bytes` encoded bytes (at most [`CHUNK_MAX_RAW`]).
    pub(crate) fn set_max_raw(&mut self, bytes: usize) {
        self.max_raw = bytes.clamp(1, CHUNK_MAX_RAW);
    }

    /// Bytes held (for the writer's memory budget).
    pub(crate) fn buffered(&self) -> usize {
        self.codes.len() + self.deltas.len() + self.data.len()
    }

    /// Writes the payload (`varint(len(codes)) codes varint(len(data))
    /// data deltas`) into `out` and returns its counts for the chunk
    /// header and where its deltas begin; resets the encoder.
    pub(crate) fn take_payload(&mut self, out: &mut Vec<u8>) -> ChunkSums {
        out.clear();
        put_varint(out, self.codes.len() as u64);
        out.extend_from_slice(&self.codes);
        put_varint(out, self.data.len() as u64);
        out.extend_from_slice(&self.data);
        let deltas_at = out.len();
        out.extend_from_slice(&self.deltas);
        let r = ChunkSums {
            events: self.events,
            first_tsc: self.first_tsc,
            last_tsc: self.prev_tsc,
            deltas_at,
        };
        self.codes.clear();
        self.deltas.clear();
        self.data.clear();
        self.events = 0;
        self.stack.clear();
        self.memory.clear();
        // Give back the memory of an unusually large chunk.
        if self.codes.capacity() > CHUNK_MAX_RAW {
            self.codes.shrink_to(CHUNK_MAX_RAW / 4);
        }
        if self.deltas.capacity() > CHUNK_MAX_RAW {
            self.deltas.shrink_to(CHUNK_MAX_RAW / 4);
        }
        if self.data.capacity() > CHUNK_MAX_RAW {
            self.data.shrink_to(CHUNK_MAX_RAW / 4);
        }
        r
    }
}

/// What [`ChunkEncoder::take_payload`] wrote: the chunk header's event
/// count and first and last timestamps, and the offset in the payload
/// where its `deltas` stream begins (the writer compresses it apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkSums {
    pub events: u32,
    pub first_tsc: u64,
    pub last_tsc: u64,
    pub deltas_at: usize,
}

/// Decodes the events of uncompressed chunk payloads, a whole chunk at a
/// time.
pub(crate) struct ChunkDecoder {
    /// The shadow stack of [`ShadowStack`] (same rule: entries push up to
    /// [`PREDICT_STACK_MAX`] deep, an exit or unwind of the function on top
    /// pops), held in a fixed array: `stack[..depth]`.
    stack: Box<[u32; PREDICT_STACK_MAX]>,
    /// Bits of a code holding the kind (by the file's version).
    kind_bits: u32,
    /// Whether chunks have a data stream (version 3 on).
    has_data: bool,
    /// Whether `Args`/`Retval` events have a time delta and their
    /// payloads are written whole (version 3), or neither (version 4).
    v3_payloads: bool,
    memory: PayloadMemory,
    /// The payload being decoded.
    payload: Vec<u8>,
}

/// Reads a varint at `*pos` as [`get_varint`] does, with the one- and
/// two-byte forms (nearly every code and time delta) inline.
#[inline(always)]
fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let p = *pos;
    if let Some(&b0) = buf.get(p) {
        if b0 < 0x80 {
            *pos = p + 1;
            return Some(u64::from(b0));
        }
        if let Some(&b1) = buf.get(p + 1) {
            if b1 < 0x80 {
                *pos = p + 2;
                return Some(u64::from(b0 & 0x7f) | (u64::from(b1) << 7));
            }
        }
    }
    get_varint(buf, pos)
}

/// Events are gathered in blocks this long before they are appended.
const DECODE_BLOCK: usize = 64;

impl ChunkDecoder {
    /// A decoder for a task file of major version `version`.
    pub(crate) fn new(version: u16) -> ChunkDecoder {
        ChunkDecoder {
            stack: Box::new([0; PREDICT_STACK_MAX]),
            kind_bits: kind_bits_of_version(version),
            has_data: version >= 3,
            v3_payloads: version <= 3,
            memory: PayloadMemory::default(),
            payload: Vec::new(),
        }
    }

    /// Decodes every event of `payload` (the chunk `header` describes) and
    /// appends them to `out`, each with `ns = to_ns(tsc)`. `Err` with a
    /// reason if the payload does not hold what its header says: the
    /// events appended before the fault are good (in order, the same events
    /// an event-at-a-time decoder would give before failing).
    pub(crate) fn decode(
        &mut self,
        payload: &[u8],
        header: &ChunkHeader,
        out: &mut Vec<super::decoded::Event>,
        to_ns: impl Fn(u64) -> u64 + Copy,
    ) -> Result<(), String> {
        let mut pos = 0;
        let codes_len =
            get_varint(payload, &mut pos).ok_or("the code stream length is unreadable")?;
        let codes_end = usize::try_from(codes_len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&end| end <= payload.len())
            .ok_or("the code stream is longer than the chunk")?;
        let codes = &payload[pos..codes_end];
        let mut pos = codes_end;
        let data = if self.has_data {
            let data_len =
                get_varint(payload, &mut pos).ok_or("the data stream length is unreadable")?;
            let data_end = usize::try_from(data_len)
                .ok()
                .and_then(|l| pos.checked_add(l))
                .filter(|&end| end <= payload.len())
                .ok_or("the data stream is longer than the chunk")?;
            let data = &payload[pos..data_end];
            pos = data_end;
            data
        } else {
            &[]
        };
        let deltas = &payload[pos..];
        // Each event takes at least one byte of each stream: a corrupt
        // count does not make this reserve more than the payload's size.
        out.reserve((header.events as usize).min(deltas.len()));
        self.memory.clear();
        let (fault, prev) = if self.kind_bits == 2 {
            self.events::<2, true>(codes, deltas, data, header, out, to_ns)
        } else if self.v3_payloads {
            self.events::<3, true>(codes, deltas, data, header, out, to_ns)
        } else {
            self.events::<3, false>(codes, deltas, data, header, out, to_ns)
        };
        if let Some(reason) = fault {
            return Err(reason.into());
        }
        if prev != header.last_tsc {
            return Err("the last timestamp does not match the chunk header".into());
        }
        Ok(())
    }

    /// The loop of [`decode`](Self::decode), for `BITS` bits of kind and
    /// `V3` payloads (version 3 and before) or not: the fault that stopped
    /// it, if any, and the last timestamp. The events go through [`run`]
    /// (the hot loop, which stops at an `Args` or `Retval` event) and the
    /// payloads through [`push_payload`].
    #[inline(always)]
    fn events<const BITS: u32, const V3: bool>(
        &mut self,
        codes: &[u8],
        deltas: &[u8],
        data: &[u8],
        header: &ChunkHeader,
        out: &mut Vec<super::decoded::Event>,
        to_ns: impl Fn(u64) -> u64 + Copy,
    ) -> (Option<&'static str>, u64) {
        let mut c = Cursor {
            cp: 0,
            dp: 0,
            prev: header.first_tsc,
            depth: 0,
        };
        let mut xp = 0usize;
        // Events decoded: those appended but the `Data` events.
        let start = out.len();
        let mut data_events = 0usize;
        let fault = loop {
            let done = out.len() - start - data_events;
            let left = (header.events as usize).saturating_sub(done) as u32;
            match run::<BITS, V3>(&mut self.stack[..], &mut c, codes, deltas, out, to_ns, left) {
                Stop::End => break None,
                Stop::Fault(f) => break Some(f),
                Stop::Payload(kind, func) => {
                    let read = if V3 {
                        whole_payload(data, &mut xp, &mut self.payload)
                    } else {
                        self.memory
                            .decode(kind, func, data, &mut xp, &mut self.payload)
                    };
                    if let Err(f) = read {
                        break Some(f);
                    }
                    data_events += push_payload(&self.payload, kind, func, c.prev, &to_ns, out);
                }
            }
        };
        let fault = fault.or_else(|| {
            (c.cp != codes.len() || c.dp != deltas.len() || xp != data.len())
                .then_some("the chunk has bytes after its last event")
        });
        (fault, c.prev)
    }
}

/// Where [`run`] is in a chunk's streams.
struct Cursor {
    cp: usize,
    dp: usize,
    prev: u64,
    depth: usize,
}

/// Why [`run`] stopped.
enum Stop {
    /// No events left.
    End,
    Fault(&'static str),
    /// An `Args`/`Retval` event of this function (its delta applied):
    /// its payload is next in the data stream.
    Payload(EventKind, u32),
}

/// Decodes up to `n` events into `out`; stops before that at a corrupt
/// one or one with a payload (which has a time delta if `V3`).
#[inline(always)]
fn run<const BITS: u32, const V3: bool>(
    stack: &mut [u32],
    c: &mut Cursor,
    codes: &[u8],
    deltas: &[u8],
    out: &mut Vec<super::decoded::Event>,
    to_ns: impl Fn(u64) -> u64,
    n: u32,
) -> Stop {
    let (mut cp, mut dp, mut prev, mut depth) = (c.cp, c.dp, c.prev, c.depth);
    let blank = super::decoded::Event {
        kind: EventKind::Entry,
        func: 0,
        tsc: 0,
        ns: 0,
    };
    let mut block = [blank; DECODE_BLOCK];
    let mut filled = 0usize;
    let mut stop = Stop::End;
    for _ in 0..n {
        let Some(code) = read_varint(codes, &mut cp) else {
            stop = Stop::Fault("the code stream ends early");
            break;
        };
        let (kind, func) = if code == 0 {
            match depth.checked_sub(1).map(|top| stack[top]) {
                Some(func) => {
                    // The exit of the function on top: it pops.
                    depth -= 1;
                    (EventKind::Exit, func)
                }
                None => {
                    stop = Stop::Fault("an exit is predicted but no function is open");
                    break;
                }
            }
        } else {
            let v = code - 1;
            let Ok(func) = u32::try_from(v >> BITS) else {
                stop = Stop::Fault("function id out of range");
                break;
            };
            let kind = match v & ((1 << BITS) - 1) {
                0 => {
                    if let Some(slot) = stack.get_mut(depth) {
                        *slot = func;
                        depth += 1;
                    }
                    EventKind::Entry
                }
                b @ (1 | 2) => {
                    if depth > 0 && stack[depth - 1] == func {
                        depth -= 1;
                    }
                    if b == 1 {
                        EventKind::Exit
                    } else {
                        EventKind::Unwind
                    }
                }
                3 => EventKind::Lost,
                4 => EventKind::Signal,
                b => {
                    // Args or Retval (7: not a kind): the payload is for
                    // the caller.
                    stop = match b {
                        5 => Stop::Payload(EventKind::Args, func),
                        6 => Stop::Payload(EventKind::Retval, func),
                        _ => Stop::Fault("unknown event kind"),
                    };
                    if b < 7 && V3 {
                        let Some(delta) = read_varint(deltas, &mut dp) else {
                            stop = Stop::Fault("the timestamp stream ends early");
                            break;
                        };
                        prev = prev.wrapping_add(unzigzag(delta) as u64);
                    }
                    break;
                }
            };
            (kind, func)
        };
        let Some(delta) = read_varint(deltas, &mut dp) else {
            stop = Stop::Fault("the timestamp stream ends early");
            break;
        };
        let tsc = prev.wrapping_add(unzigzag(delta) as u64);
        prev = tsc;
        block[filled] = super::decoded::Event {
            kind,
            func,
            tsc,
            ns: to_ns(tsc),
        };
        filled += 1;
        if filled == DECODE_BLOCK {
            out.extend_from_slice(&block);
            filled = 0;
        }
    }
    out.extend_from_slice(&block[..filled]);
    *c = Cursor {
        cp,
        dp,
        prev,
        depth,
    };
    stop
}

/// Reads a version 3 payload (`varint(len)` then its bytes) of `data` at
/// `*xp` into `out` (cleared first).
fn whole_payload(data: &[u8], xp: &mut usize, out: &mut Vec<u8>) -> Result<(), &'static str> {
    let len = get_varint(data, xp).ok_or("the data stream ends early")?;
    out.clear();
    out.extend_from_slice(take_payload_bytes(data, xp, len)?);
    Ok(())
}

/// The `len` bytes of a payload at `data[*xp..]` (at most
/// [`MAX_PAYLOAD`](crate::event::MAX_PAYLOAD)), `*xp` moved past them.
fn take_payload_bytes<'d>(
    data: &'d [u8],
    xp: &mut usize,
    len: u64,
) -> Result<&'d [u8], &'static str> {
    let end = usize::try_from(len)
        .ok()
        .filter(|&l| l <= crate::event::MAX_PAYLOAD)
        .and_then(|l| xp.checked_add(l))
        .filter(|&end| end <= data.len())
        .ok_or("an argument payload is longer than the data stream")?;
    let bytes = &data[*xp..end];
    *xp = end;
    Ok(bytes)
}

/// Appends an `Args`/`Retval` event and the `Data` events of its payload
/// `bytes`; returns the number of `Data` events.
#[inline(never)]
fn push_payload(
    bytes: &[u8],
    kind: EventKind,
    func: u32,
    tsc: u64,
    to_ns: &impl Fn(u64) -> u64,
    out: &mut Vec<super::decoded::Event>,
) -> usize {
    out.push(super::decoded::Event {
        kind,
        func,
        tsc,
        ns: to_ns(tsc),
    });
    for piece in bytes.chunks(16) {
        // Bytes 0..8 in `tsc`, 8..16 in `ns` (see `Event::data_bytes`).
        let mut b = [0u8; 16];
        b[..piece.len()].copy_from_slice(piece);
        let v = u128::from_le_bytes(b);
        out.push(super::decoded::Event {
            kind: EventKind::Data,
            func: piece.len() as u32,
            tsc: v as u64,
            ns: (v >> 64) as u64,
        });
    }
    bytes.len().div_ceil(16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::RawEvent;

    #[test]
    fn varints() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut pos = 0;
            assert_eq!(get_varint(&b, &mut pos), Some(v));
            assert_eq!(pos, b.len());
            // Every strict prefix is incomplete.
            for end in 0..b.len() {
                let mut pos = 0;
                assert_eq!(get_varint(&b[..end], &mut pos), None);
            }
        }
        // 11 continuation bytes: rejected, not an overflow panic.
        let mut pos = 0;
        assert_eq!(get_varint(&[0xff; 11], &mut pos), None);
        let mut pos = 0;
        assert_eq!(
            get_varint(
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                &mut pos
            ),
            None
        );
    }

    #[test]
    fn zigzags() {
        for v in [0i64, 1, -1, 2, -2, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    /// `(kind, func, tsc)` of every event of a payload.
    fn decode_all(
        version: u16,
        payload: &[u8],
        header: &ChunkHeader,
    ) -> Result<Vec<(EventKind, u32, u64)>, String> {
        let mut out = Vec::new();
        ChunkDecoder::new(version).decode(payload, header, &mut out, |t| t.wrapping_mul(3))?;
        assert!(out.iter().all(|e| e.ns == e.tsc.wrapping_mul(3)));
        Ok(out.iter().map(|e| (e.kind, e.func, e.tsc)).collect())
    }

    fn round_trip(events: &[(EventKind, u32, u64)]) -> Vec<(EventKind, u32, u64)> {
        let mut enc = ChunkEncoder::default();
        for &(k, f, t) in events {
            enc.push(k, f, t);
        }
        take_and_decode(&mut enc)
    }

    /// The encoder's chunk, taken and decoded.
    fn take_and_decode(enc: &mut ChunkEncoder) -> Vec<(EventKind, u32, u64)> {
        let mut payload = Vec::new();
        let ChunkSums {
            events: n,
            first_tsc: first,
            last_tsc: last,
            ..
        } = enc.take_payload(&mut payload);
        let header = ChunkHeader {
            compressed_len: 0,
            raw_len: payload.len() as u32,
            events: n,
            first_tsc: first,
            last_tsc: last,
            codec: CODEC_ZSTD,
            crc: 0,
        };
        decode_all(TASK_FILE_VERSION, &payload, &header).unwrap()
    }

    /// A xorshift64 generator (the tests' random streams, reproducible).
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// Random entries, exits (of the call on top or of another), unwinds,
    /// losses, signals, recursion past the predicting stack's limit, time
    /// deltas of every size and backwards: what is decoded is what was
    /// encoded, through the writer's batches.
    #[test]
    fn random_streams_round_trip() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut events = Vec::new();
        let mut open: Vec<u32> = Vec::new();
        let mut tsc = 1_000_000u64;
        while events.len() < 60_000 {
            let r = next();
            tsc = match r % 50 {
                0 => tsc.wrapping_sub(r % 5000),
                1 => tsc + (r % (1 << 40)),
                2..=9 => tsc + 100 + r % 20_000,
                _ => tsc + r % 120,
            };
            let (kind, func) = match (r >> 8) % 20 {
                0..=8 => (EventKind::Entry, ((r >> 16) % 40) as u32),
                9..=16 => (EventKind::Exit, open.last().copied().unwrap_or(3)),
                17 => (EventKind::Exit, ((r >> 16) % 40) as u32),
                18 => (EventKind::Unwind, open.first().copied().unwrap_or(5)),
                _ => match (r >> 16) % 3 {
                    0 => (EventKind::Lost, ((r >> 20) % 1000) as u32),
                    1 => (EventKind::Signal, 11),
                    _ => {
                        // A recursion deeper than the predicting stack.
                        for _ in 0..(PREDICT_STACK_MAX + 50) {
                            tsc += 7;
                            events.push((EventKind::Entry, 9, tsc));
                        }
                        for _ in 0..(PREDICT_STACK_MAX + 50) {
                            tsc += 9;
                            events.push((EventKind::Exit, 9, tsc));
                        }
                        continue;
                    }
                },
            };
            match kind {
                EventKind::Entry => open.push(func),
                EventKind::Exit | EventKind::Unwind => {
                    if let Some(at) = open.iter().rposition(|&f| f == func) {
                        open.truncate(at);
                    }
                }
                _ => {}
            }
            events.push((kind, func, tsc));
        }
        let records: Vec<crate::event::RawEvent> = events
            .iter()
            .map(|&(k, f, t)| crate::event::RawEvent::new(k, f, t))
            .collect();
        let mut got = Vec::new();
        let mut enc = ChunkEncoder::default();
        let mut scratch = EncodeScratch::default();
        let mut rest = &records[..];
        while !rest.is_empty() {
            let p = enc.push_records(rest, &mut scratch);
            assert_eq!(p.invalid, 0);
            rest = &rest[p.used..];
            if enc.is_full() || rest.is_empty() {
                got.extend(take_and_decode(&mut enc));
            }
        }
        assert_eq!(got.len(), events.len());
        for (i, (g, e)) in got.iter().zip(&events).enumerate() {
            assert_eq!(g, e, "event {i}");
        }
    }

    #[test]
    fn every_kind_round_trips() {
        use EventKind::*;
        let events = vec![
            (Entry, 0, 100),
            (Signal, 11, 105),
            (Entry, 7, 110),
            (Signal, 10, 111),
            (Entry, 8, 112),
            (Exit, 8, 113),
            (Exit, 7, 120),
            (Unwind, 0, 130),
            (Lost, 5, 131),
            (Signal, 64, 140),
            (Signal, u32::MAX, 141),
            (Entry, u32::MAX, 150),
            (Exit, u32::MAX, 151),
            (Signal, 0, 152),
        ];
        assert_eq!(round_trip(&events), events);
    }

    /// The payload and header of a chunk with these codes, data stream
    /// (`None` for versions before 3, which have none) and timestamp
    /// deltas, from tsc 10.
    fn raw_chunk(codes: &[u64], data: Option<&[u8]>, deltas: &[i64]) -> (Vec<u8>, ChunkHeader) {
        let mut code_bytes = Vec::new();
        for &c in codes {
            put_varint(&mut code_bytes, c);
        }
        let mut payload = Vec::new();
        put_varint(&mut payload, code_bytes.len() as u64);
        payload.extend_from_slice(&code_bytes);
        if let Some(data) = data {
            put_varint(&mut payload, data.len() as u64);
            payload.extend_from_slice(data);
        }
        for &d in deltas {
            put_varint(&mut payload, zigzag(d));
        }
        let header = ChunkHeader {
            compressed_len: 0,
            raw_len: payload.len() as u32,
            events: codes.len() as u32,
            first_tsc: 10,
            last_tsc: 10 + deltas.iter().sum::<i64>() as u64,
            codec: CODEC_ZSTD,
            crc: 0,
        };
        (payload, header)
    }

    #[test]
    fn version_1_codes_still_decode() {
        // Version 1: kind in 2 bits. Entry f=3, exit predicted, Lost 9.
        let (payload, header) = raw_chunk(
            &[(3u64 << 2) + 1, 0, ((9u64 << 2) | 3) + 1],
            None,
            &[0, 5, 1],
        );
        assert_eq!(
            decode_all(1, &payload, &header).unwrap(),
            vec![
                (EventKind::Entry, 3, 10),
                (EventKind::Exit, 3, 15),
                (EventKind::Lost, 9, 16)
            ]
        );
    }

    #[test]
    fn unknown_kinds_are_corrupt() {
        for (kind, reason) in [
            (5u64, "the data stream ends early"),
            (6, "the data stream ends early"),
            (7, "unknown event kind"),
        ] {
            let (payload, header) = raw_chunk(&[((1u64 << 3) | kind) + 1], Some(&[]), &[0]);
            assert_eq!(
                decode_all(TASK_FILE_VERSION, &payload, &header),
                Err(reason.to_string())
            );
        }
    }

    /// The records of an `Args`/`Retval` event with `payload`.
    fn with_payload(kind: EventKind, func: u32, tsc: u64, payload: &[u8]) -> Vec<RawEvent> {
        let mut v = vec![RawEvent::with_payload(
            kind,
            func,
            payload.len() as u16,
            tsc,
        )];
        for piece in payload.chunks(16) {
            let mut b = [0u8; 16];
            b[..piece.len()].copy_from_slice(piece);
            v.push(RawEvent {
                word: u64::from_le_bytes(b[..8].try_into().unwrap()),
                tsc: u64::from_le_bytes(b[8..].try_into().unwrap()),
            });
        }
        v
    }

    /// Encodes records (in batches of `batch`) and decodes the chunk:
    /// events, with the payloads gathered from their `Data` events.
    fn records_round_trip(records: &[RawEvent]) -> Vec<(EventKind, u32, Vec<u8>)> {
        let mut enc = ChunkEncoder::default();
        let mut scratch = EncodeScratch::default();
        let mut rest = records;
        while !rest.is_empty() {
            let p = enc.push_records(rest, &mut scratch);
            assert!(p.used > 0);
            rest = &rest[p.used..];
        }
        let mut payload = Vec::new();
        let ChunkSums {
            events: n,
            first_tsc: first,
            last_tsc: last,
            ..
        } = enc.take_payload(&mut payload);
        let header = ChunkHeader {
            compressed_len: 0,
            raw_len: payload.len() as u32,
            events: n,
            first_tsc: first,
            last_tsc: last,
            codec: CODEC_ZSTD,
            crc: 0,
        };
        let mut out = Vec::new();
        ChunkDecoder::new(TASK_FILE_VERSION)
            .decode(&payload, &header, &mut out, |t| t)
            .unwrap();
        let mut r: Vec<(EventKind, u32, Vec<u8>)> = Vec::new();
        for e in out {
            if e.kind == EventKind::Data {
                let (b, n) = e.data_bytes();
                r.last_mut().unwrap().2.extend_from_slice(&b[..n]);
            } else {
                r.push((e.kind, e.func, Vec::new()));
            }
        }
        r
    }

    #[test]
    fn payloads_round_trip() {
        use EventKind::*;
        let long: Vec<u8> = (0..200u8).collect();
        let mut records = vec![RawEvent::new(Entry, 3, 100)];
        records.extend(with_payload(Args, 3, 101, b"abc"));
        records.push(RawEvent::new(Entry, 4, 102));
        records.extend(with_payload(Args, 4, 103, &long));
        records.extend(with_payload(Retval, 4, 104, &[]));
        records.push(RawEvent::new(Exit, 4, 105));
        records.extend(with_payload(Retval, 3, 106, &[7; 16]));
        // Never completed (no timestamp): skipped with its payload.
        records.extend(with_payload(Args, 9, 0, &[0xff; 40]));
        records.push(RawEvent::new(Exit, 3, 107));
        let got = records_round_trip(&records);
        assert_eq!(
            got,
            vec![
                (Entry, 3, vec![]),
                (Args, 3, b"abc".to_vec()),
                (Entry, 4, vec![]),
                (Args, 4, long.clone()),
                (Retval, 4, vec![]),
                (Exit, 4, vec![]),
                (Retval, 3, vec![7; 16]),
                (Exit, 3, vec![]),
            ]
        );
        // A chunk that starts with a payload event.
        let records = with_payload(Args, 1, 50, b"x");
        assert_eq!(records_round_trip(&records), vec![(Args, 1, b"x".to_vec())]);
    }

    /// `Args`/`Retval` records that are also the call's entry/exit (as the
    /// agent's generated code writes them) decode as the two events.
    #[test]
    fn records_with_call_steps_round_trip() {
        use EventKind::*;
        let step = |kind, func, tsc, payload: &[u8]| {
            let mut v = with_payload(kind, func, tsc, payload);
            v[0].word |= crate::event::WITH_CALL_STEP;
            v
        };
        // First in the chunk, nested, one never completed (skipped with
        // its payload, its entry too), an exit not on top.
        let mut records = step(Args, 3, 100, b"abc");
        records.extend(step(Args, 4, 101, &[1; 20]));
        records.extend(step(Retval, 4, 102, b"r"));
        records.extend(step(Args, 5, 0, b"lost"));
        records.extend(step(Retval, 9, 103, b""));
        records.extend(step(Retval, 3, 104, &[2; 11]));
        assert_eq!(
            records_round_trip(&records),
            vec![
                (Entry, 3, vec![]),
                (Args, 3, b"abc".to_vec()),
                (Entry, 4, vec![]),
                (Args, 4, vec![1; 20]),
                (Retval, 4, b"r".to_vec()),
                (Exit, 4, vec![]),
                (Retval, 9, vec![]),
                (Exit, 9, vec![]),
                (Retval, 3, vec![2; 11]),
                (Exit, 3, vec![]),
            ]
        );
        let mut enc = ChunkEncoder::default();
        let p = enc.push_records(&records, &mut EncodeScratch::default());
        assert_eq!((p.used, p.stored, p.invalid), (records.len(), 10, 0));
        // Times: the entry has the Args record's, the exit the Retval's.
        let mut payload = Vec::new();
        let sums = enc.take_payload(&mut payload);
        assert_eq!((sums.events, sums.first_tsc, sums.last_tsc), (10, 100, 104));
    }

    #[test]
    fn payload_past_the_records_is_invalid() {
        let mut records = with_payload(EventKind::Args, 1, 50, &[1; 40]);
        records.pop();
        let mut enc = ChunkEncoder::default();
        let p = enc.push_records(&records, &mut EncodeScratch::default());
        assert_eq!((p.used, p.stored, p.invalid), (records.len(), 0, 1));
    }

    #[test]
    fn version_2_chunks_still_decode() {
        // Version 2: no data stream. Entry f=3, exit predicted, Signal 9.
        let (payload, header) = raw_chunk(
            &[(3u64 << 3) + 1, 0, ((9u64 << 3) | 4) + 1],
            None,
            &[0, 5, 1],
        );
        assert_eq!(
            decode_all(2, &payload, &header).unwrap(),
            vec![
                (EventKind::Entry, 3, 10),
                (EventKind::Exit, 3, 15),
                (EventKind::Signal, 9, 16)
            ]
        );
    }

    #[test]
    fn corrupt_payloads_are_errors() {
        // Version 3: an Args event whose payload length runs past the data
        // stream.
        let (payload, header) = raw_chunk(
            &[(1u64 << 3) + 1, ((1u64 << 3) | 5) + 1],
            Some(&[9, 1]),
            &[0, 0],
        );
        assert_eq!(
            decode_all(3, &payload, &header),
            Err("an argument payload is longer than the data stream".to_string())
        );
        // Version 4 (no delta for Args): the same, length 9 written as 18.
        let codes = [(1u64 << 3) + 1, ((1u64 << 3) | 5) + 1];
        let (payload, header) = raw_chunk(&codes, Some(&[18, 1]), &[0]);
        assert_eq!(
            decode_all(4, &payload, &header),
            Err("an argument payload is longer than the data stream".to_string())
        );
        // Changes to one integer when no payload of integers came before.
        let (payload, header) = raw_chunk(&codes, Some(&[3, 2]), &[0]);
        assert_eq!(
            decode_all(4, &payload, &header),
            Err("a payload is written as changes to values that are not there".to_string())
        );
        // Changes to two integers after a payload of one.
        let mut data = vec![22];
        data.extend_from_slice(&int_value(2, 8, 5));
        data.extend_from_slice(&[5, 2, 2]);
        let codes = [codes[0], codes[1], codes[1]];
        let (payload, header) = raw_chunk(&codes, Some(&data), &[0]);
        assert_eq!(
            decode_all(4, &payload, &header),
            Err("a payload is written as changes to values that are not there".to_string())
        );
        // The change runs past the data stream.
        data.truncate(data.len() - 3);
        data.push(3);
        let (payload, header) = raw_chunk(&codes, Some(&data), &[0]);
        assert_eq!(
            decode_all(4, &payload, &header),
            Err("the data stream ends early".to_string())
        );
    }

    /// The bytes of an integer value (`crate::argval`).
    fn int_value(fmt: u8, size: u8, bits: u64) -> [u8; INT_VALUE_LEN] {
        let mut v = [0u8; INT_VALUE_LEN];
        v[0] = crate::argval::TAG_INT;
        v[1] = fmt;
        v[2] = size;
        v[3..].copy_from_slice(&bits.to_le_bytes());
        v
    }

    #[test]
    fn version_3_payloads_still_decode() {
        // Entry f=1, Args f=1 (its own delta), Exit f=1: version 3 has a
        // delta for every event and payloads written whole.
        let (payload, header) = raw_chunk(
            &[(1u64 << 3) + 1, ((1u64 << 3) | 5) + 1, 0],
            Some(&[2, b'h', b'i']),
            &[0, 0, 4],
        );
        let mut out = Vec::new();
        ChunkDecoder::new(3)
            .decode(&payload, &header, &mut out, |t| t)
            .unwrap();
        let got: Vec<_> = out.iter().map(|e| (e.kind, e.func, e.tsc)).collect();
        assert_eq!(
            got,
            vec![
                (EventKind::Entry, 1, 10),
                (EventKind::Args, 1, 10),
                (EventKind::Data, 2, 0x6968),
                (EventKind::Exit, 1, 14)
            ]
        );
    }

    /// Payloads of integers (written as changes to the last payload of the
    /// same kind and slot) mixed with others, functions sharing a slot,
    /// shapes that change, values of every size and direction: the exact
    /// bytes come back, and a run of like payloads takes a few bytes each.
    #[test]
    fn integer_payloads_round_trip() {
        use EventKind::*;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut records = Vec::new();
        let mut want = Vec::new();
        let mut tsc = 1000u64;
        let mut value = 0u64;
        for _ in 0..5000 {
            let r = next();
            // Functions 2 and 10 share a slot, 3 has its own.
            let func = [2u32, 10, 3][(r % 3) as usize];
            let kind = if r & 8 == 0 { Args } else { Retval };
            value = match (r >> 4) % 8 {
                0 => next(),
                1 => value.wrapping_sub(r % 1000),
                2 => u64::MAX,
                _ => value.wrapping_add(r % 3),
            };
            let mut payload = Vec::new();
            match (r >> 8) % 16 {
                // Another shape: one value of another format or size.
                0 => payload.extend_from_slice(&int_value(3, 4, value)),
                // Not integers only: a string after an integer.
                1 => {
                    payload.extend_from_slice(&int_value(0, 8, value));
                    payload.extend_from_slice(&[crate::argval::TAG_STR, 2, 0, b'o', b'k']);
                }
                2 => payload.extend_from_slice(&[crate::argval::TAG_NULL]),
                3 => {}
                // Two or three values.
                4..=6 => {
                    for k in 0..(2 + (r >> 12) % 2) {
                        payload.extend_from_slice(&int_value(k as u8, 8, value ^ k));
                    }
                }
                _ => payload.extend_from_slice(&int_value(0, 8, value)),
            }
            tsc += 1 + r % 50;
            records.push(RawEvent::new(Entry, func, tsc));
            want.push((Entry, func, vec![]));
            records.extend(with_payload(kind, func, tsc + 1, &payload));
            want.push((kind, func, payload));
            records.push(RawEvent::new(Exit, func, tsc + 2));
            want.push((Exit, func, vec![]));
        }
        assert_eq!(records_round_trip(&records), want);

        // A run of calls with one changing integer argument and return
        // value: a few bytes of data stream each.
        let mut enc = ChunkEncoder::default();
        let mut scratch = EncodeScratch::default();
        for i in 0..1000u64 {
            let mut records = vec![RawEvent::new(Entry, 7, 10 * i + 1)];
            records.extend(with_payload(Args, 7, 10 * i + 2, &int_value(0, 8, i)));
            records.extend(with_payload(Retval, 7, 10 * i + 3, &int_value(0, 4, i + 1)));
            records.push(RawEvent::new(Exit, 7, 10 * i + 4));
            assert_eq!(enc.push_records(&records, &mut scratch).stored, 4);
        }
        assert!(
            enc.data.len() <= 2 * 2 * 1000 + 2 * 12,
            "{}",
            enc.data.len()
        );
    }

    #[test]
    fn crc_matches_reference() {
        let mut c = Crc32::new();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0xCBF4_3926);
    }
}
