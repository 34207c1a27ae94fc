//! The flight recorder's memory (`record --ring SIZE`): each task's most
//! recent chunks, compressed as a task file holds them, kept in memory
//! instead of written, the oldest dropped when all tasks together hold
//! more than SIZE bytes; and the calls open where each kept chunk begins,
//! so that a snapshot's history starts at its real depth.
//!
//! The split between threads: when the ring is over its size, the oldest
//! chunk goes first, taken from a task that holds more than one chunk or
//! has ended; only when every task holding chunks is a live thread with
//! one chunk left does the oldest of those go. So a busy thread pushes out
//! its own past and that of ended threads, never the last chunk of a quiet
//! live thread while it has more than one of its own.

use super::codec::CHUNK_MAX_RAW;
use crate::argval::{decode_backtrace, Writer, MAX_ATTACH_CHAIN, TAG_BACKTRACE};
use crate::event::{EventKind, RawEvent, MAX_PAYLOAD};
use std::collections::{BTreeMap, VecDeque};

/// Deepest call stack tracked per task (deeper entries are not pushed).
const MAX_OPEN: usize = 1 << 16;

/// A chunk kept in memory: its header and compressed payload, as written
/// in a task file.
pub(crate) struct KeptChunk {
    pub bytes: Vec<u8>,
    pub events: u32,
    pub first_tsc: u64,
    pub last_tsc: u64,
    /// The calls open where it begins, outermost first.
    pub open: Vec<u32>,
}

/// One task's part of the ring.
#[derive(Default)]
pub(crate) struct TaskRing {
    pub chunks: VecDeque<KeptChunk>,
    /// The calls open after the last event appended, outermost first.
    pub open: Vec<u32>,
    /// The calls open where the chunk being encoded begins.
    pub chunk_open: Vec<u32>,
    /// The thread has ended: its chunks are not kept in preference.
    pub ended: bool,
}

pub(crate) struct Ring {
    pub size: u64,
    /// Bytes of the kept chunks.
    pub held: u64,
    pub tasks: BTreeMap<u32, TaskRing>,
    /// Events dropped from the ring so far.
    pub evicted_events: u64,
    /// Snapshots written so far.
    pub snapshots: u32,
    /// Ended tasks whose chunks are all gone (their state dropped here),
    /// for the writer to forget too.
    pub forgotten: Vec<u32>,
}

impl Ring {
    pub(crate) fn new(size: u64) -> Ring {
        Ring {
            size,
            held: 0,
            tasks: BTreeMap::new(),
            evicted_events: 0,
            snapshots: 0,
            forgotten: Vec::new(),
        }
    }

    /// Encoded (uncompressed) bytes that make a chunk full: small enough
    /// that a chunk is a small part of the ring (the unit dropped).
    pub(crate) fn chunk_raw(&self) -> usize {
        ((self.size / 32) as usize).clamp(16 << 10, CHUNK_MAX_RAW)
    }

    /// Encoded bytes buffered in all tasks' chunks being built before they
    /// are all sealed (they are memory outside the ring's count).
    pub(crate) fn buffer_limit(&self) -> usize {
        ((self.size / 4) as usize).max(1 << 20)
    }

    /// Keeps a sealed chunk of task `id` and drops the oldest as needed.
    pub(crate) fn keep(&mut self, id: u32, chunk: KeptChunk) {
        self.held += chunk.bytes.len() as u64;
        self.tasks.entry(id).or_default().chunks.push_back(chunk);
        self.evict();
    }

    /// Bytes of chunks kept at most: a sixteenth of the size is left for
    /// what a snapshot adds (file headers, history chains, the live
    /// events), so that its task files stay under the size.
    fn budget(&self) -> u64 {
        self.size - self.size / 16
    }

    fn evict(&mut self) {
        while self.held > self.budget() {
            let oldest = |spare: bool| {
                self.tasks
                    .iter()
                    .filter(|(_, t)| {
                        !t.chunks.is_empty() && (!spare || t.chunks.len() > 1 || t.ended)
                    })
                    .min_by_key(|(_, t)| t.chunks[0].last_tsc)
                    .map(|(&id, _)| id)
            };
            let Some(id) = oldest(true).or_else(|| oldest(false)) else {
                return;
            };
            let Some(t) = self.tasks.get_mut(&id) else {
                return;
            };
            if let Some(c) = t.chunks.pop_front() {
                self.held -= c.bytes.len() as u64;
                self.evicted_events += u64::from(c.events);
            }
            if t.ended && t.chunks.is_empty() {
                self.tasks.remove(&id);
                self.forgotten.push(id);
            }
        }
    }

    /// Task `id` has ended (the chunk it was building, if any, is kept
    /// already).
    pub(crate) fn ended(&mut self, id: u32) {
        if let Some(t) = self.tasks.get_mut(&id) {
            t.ended = true;
            if t.chunks.is_empty() {
                self.tasks.remove(&id);
                self.forgotten.push(id);
            }
        }
        self.evict();
    }
}

/// Follows the calls open in a task through `records` (the agent's, as
/// given to the writer): an entry opens a call, an exit or unwind closes it
/// and any call opened inside it that did not return; an attach chain
/// opens the calls it names.
pub(crate) fn track(open: &mut Vec<u32>, records: &[RawEvent]) {
    let mut i = 0;
    while i < records.len() {
        let r = &records[i];
        i += 1;
        let kind = r.kind();
        if let Some(EventKind::Args | EventKind::Retval) = kind {
            let end = (i + r.payload_records()).min(records.len());
            let body = &records[i..end];
            i = end;
            if r.tsc != 0 && r.with_call_step() {
                step(open, kind == Some(EventKind::Args), r.func());
            }
            if kind == Some(EventKind::Args)
                && r.tsc != 0
                && body.first().is_some_and(|p| p.word as u8 == TAG_BACKTRACE)
            {
                let mut bytes = Vec::with_capacity(body.len() * RawEvent::SIZE);
                for p in body {
                    bytes.extend_from_slice(&p.word.to_le_bytes());
                    bytes.extend_from_slice(&p.tsc.to_le_bytes());
                }
                bytes.truncate(r.payload_len());
                if let Some(chain) = decode_backtrace(&bytes).filter(|c| c.attached) {
                    for f in chain.funcs {
                        if open.len() < MAX_OPEN {
                            open.push(f);
                        }
                    }
                }
            }
            continue;
        }
        if r.tsc == 0 {
            continue;
        }
        match kind {
            Some(EventKind::Entry) => step(open, true, r.func()),
            Some(EventKind::Exit | EventKind::Unwind) => step(open, false, r.func()),
            _ => {}
        }
    }
}

/// A call of `func` entered (`entry`) or left in `open`.
fn step(open: &mut Vec<u32>, entry: bool, func: u32) {
    if entry {
        if open.len() < MAX_OPEN {
            open.push(func);
        }
    } else if let Some(at) = open.iter().rposition(|&o| o == func) {
        open.truncate(at);
    }
}

/// The records of the history chains naming `open` (outermost first), at
/// time `tsc`: `Args` events of the outermost function whose payloads are
/// [`Writer::history_chain`]s of at most [`MAX_ATTACH_CHAIN`] calls each.
pub(crate) fn history_records(open: &[u32], tsc: u64) -> Vec<RawEvent> {
    let mut out = Vec::new();
    let outermost = open.first().copied().unwrap_or(0);
    let mut buf = vec![0u8; MAX_PAYLOAD];
    for part in open.chunks(MAX_ATTACH_CHAIN) {
        buf.fill(0);
        let mut w = Writer::new(&mut buf);
        if !w.history_chain(part) {
            continue;
        }
        let len = w.len();
        out.push(RawEvent::with_payload(
            EventKind::Args,
            outermost,
            len as u16,
            tsc.max(1),
        ));
        for rec in buf[..len.div_ceil(RawEvent::SIZE) * RawEvent::SIZE].chunks_exact(RawEvent::SIZE)
        {
            out.push(RawEvent {
                word: u64::from_le_bytes(rec[0..8].try_into().expect("8 bytes")),
                tsc: u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes")),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(bytes: usize, events: u32, tsc: u64) -> KeptChunk {
        KeptChunk {
            bytes: vec![0; bytes],
            events,
            first_tsc: tsc,
            last_tsc: tsc,
            open: Vec::new(),
        }
    }

    #[test]
    fn a_busy_thread_pushes_out_its_own_past_not_a_quiet_threads_last_chunk() {
        let mut r = Ring::new(1000);
        r.keep(1, chunk(300, 10, 1)); // quiet thread, one chunk
        for t in 2..20 {
            r.keep(2, chunk(300, 10, t)); // busy thread
        }
        assert!(r.held <= 1000);
        assert_eq!(r.tasks[&1].chunks.len(), 1);
        assert_eq!(r.tasks[&2].chunks.len(), 2);
        assert_eq!(r.tasks[&2].chunks[0].last_tsc, 18);
        assert_eq!(r.evicted_events, 16 * 10);
        // Ended, the quiet thread's chunk is the oldest and goes first.
        r.ended(1);
        r.keep(2, chunk(300, 10, 30));
        assert!(!r.tasks.contains_key(&1));
        assert_eq!(r.forgotten, [1], "the writer forgets it too");
        assert_eq!(r.tasks[&2].chunks.len(), 3);
    }

    #[test]
    fn every_live_thread_down_to_one_chunk_gives_up_the_oldest() {
        let mut r = Ring::new(500);
        r.keep(1, chunk(300, 1, 5));
        r.keep(2, chunk(300, 1, 3));
        assert_eq!(r.held, 300);
        assert!(r.tasks[&2].chunks.is_empty());
        assert_eq!(r.tasks[&1].chunks.len(), 1);
    }

    fn ev(kind: EventKind, func: u32) -> RawEvent {
        RawEvent::new(kind, func, 7)
    }

    #[test]
    fn tracks_the_open_calls() {
        let mut open = Vec::new();
        track(
            &mut open,
            &[
                ev(EventKind::Entry, 1),
                ev(EventKind::Entry, 2),
                ev(EventKind::Entry, 3),
                ev(EventKind::Exit, 3),
                ev(EventKind::Entry, 4),
                ev(EventKind::Entry, 5),
                // 5 never returned: 4's unwind closes both.
                ev(EventKind::Unwind, 4),
                ev(EventKind::Entry, 6),
            ],
        );
        assert_eq!(open, vec![1, 2, 6]);
        // An exit of a call not open changes nothing; a record never
        // written (no timestamp) neither.
        track(
            &mut open,
            &[ev(EventKind::Exit, 9), RawEvent::new(EventKind::Exit, 6, 0)],
        );
        assert_eq!(open, vec![1, 2, 6]);
        // An attach chain opens its calls, values are skipped.
        let mut recs = history_records(&[7, 8], 9);
        let mut buf = [0u8; 16];
        let mut w = Writer::new(&mut buf);
        assert!(w.int(crate::argval::IntFmt::Signed, 4, 5));
        let n = w.len();
        recs.push(RawEvent::with_payload(EventKind::Args, 8, n as u16, 9));
        recs.push(RawEvent {
            word: u64::from_le_bytes(buf[0..8].try_into().unwrap()),
            tsc: u64::from_le_bytes(buf[8..16].try_into().unwrap()),
        });
        track(&mut open, &recs);
        assert_eq!(open, vec![1, 2, 6, 7, 8]);
        // An Args record that is also the entry opens its call, a Retval
        // record that is also the exit closes it; never written, neither.
        let with_step = |kind, func, tsc| {
            let mut r = RawEvent::with_payload(kind, func, 11, tsc);
            r.word |= crate::event::WITH_CALL_STEP;
            [r, RawEvent { word: 0, tsc: 0 }]
        };
        track(&mut open, &with_step(EventKind::Args, 10, 5));
        track(&mut open, &with_step(EventKind::Args, 11, 0));
        assert_eq!(open, vec![1, 2, 6, 7, 8, 10]);
        track(&mut open, &with_step(EventKind::Retval, 8, 0));
        assert_eq!(open, vec![1, 2, 6, 7, 8, 10]);
        track(&mut open, &with_step(EventKind::Retval, 8, 6));
        assert_eq!(open, vec![1, 2, 6, 7]);
    }

    #[test]
    fn history_records_decode_as_history_chains() {
        let open: Vec<u32> = (0..2500).collect();
        let recs = history_records(&open, 42);
        let mut i = 0;
        let mut funcs = Vec::new();
        while i < recs.len() {
            let r = &recs[i];
            assert_eq!(r.kind(), Some(EventKind::Args));
            assert_eq!(r.func(), 0);
            assert_eq!(r.tsc, 42);
            let n = r.payload_records();
            let mut bytes = Vec::new();
            for p in &recs[i + 1..i + 1 + n] {
                bytes.extend_from_slice(&p.word.to_le_bytes());
                bytes.extend_from_slice(&p.tsc.to_le_bytes());
            }
            bytes.truncate(r.payload_len());
            let chain = decode_backtrace(&bytes).unwrap();
            assert!(chain.attached && chain.history);
            funcs.extend(chain.funcs);
            i += 1 + n;
        }
        assert_eq!(funcs, open);
    }
}
