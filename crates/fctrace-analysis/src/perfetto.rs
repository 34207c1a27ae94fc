//! `fctrace dump --perfetto`: Perfetto's native protobuf trace (a
//! `perfetto.protos.Trace`: TracePacket after TracePacket), which Perfetto
//! UI and its trace processor open, for traces of any length (hundreds of
//! millions of calls, where JSON would be tens of gigabytes).
//!
//! The messages are the official ones (crate fctrace-perfetto, generated
//! from Perfetto's perfetto_trace.proto). Per task (a thread of a program
//! image), one packet sequence (`trusted_packet_sequence_id`) and one
//! track:
//! - its first packet clears the sequence's incremental state
//!   (`SEQ_INCREMENTAL_STATE_CLEARED`), describes the thread's track
//!   (`TrackDescriptor` with a `ThreadDescriptor`: pid, tid, thread
//!   name; its parent, the process's track, is described once per
//!   process with a `ProcessDescriptor`: pid, name, command line) and
//!   makes that track the default of the sequence's events
//!   (`TracePacketDefaults`);
//! - each call is a `TYPE_SLICE_BEGIN` at its entry and a `TYPE_SLICE_END`
//!   when it ends, timestamps in nanoseconds (CLOCK_MONOTONIC, written as
//!   the trace's default clock); the slice's name is the demangled
//!   function name and its category the file name of the module that
//!   defines it, both interned (`InternedData` event_names and
//!   event_categories, iids valid within the sequence, sent with the
//!   first event that uses them; events carry `SEQ_NEEDS_INCREMENTAL_STATE`);
//! - arguments are a debug annotation `args` on the begin, the return
//!   value `retval` on the end, both as the tree prints them; a call that
//!   did not return has `end` = `unwound` or `not returned` on its end;
//! - signals, lost events and exits without a recorded entry are
//!   `TYPE_INSTANT` events.
//!
//! Every packet is encoded and written on its own as field 1 of `Trace`:
//! memory does not grow with the trace.

use super::args::format_payload;
use super::calls::{each_task, End, Functions, IdCache, Open, Pass, Step, StepSink};
use super::names::module_file;
use fctrace_format::store::{TaskInfo, TaskOrigin, Trace};
use fctrace_perfetto::protos::{
    debug_annotation, trace_packet, track_event, DebugAnnotation, EventCategory, EventName,
    InternedData, ProcessDescriptor, ThreadDescriptor, TracePacket, TracePacketDefaults,
    TrackDescriptor, TrackEvent, TrackEventDefaults,
};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

/// Track uuids: processes and tasks in two ranges.
const PROCESS_TRACK: u64 = 1 << 48;
const TASK_TRACK: u64 = 2 << 48;
/// Sequence ids: the task's index plus this (low ids are the tracing
/// service's own in traces Perfetto records).
const FIRST_SEQUENCE: u32 = 16;
/// The key of `Trace.packet` (field 1, length-delimited).
const PACKET_KEY: u8 = 1 << 3 | 2;
/// The key of `TracePacket.timestamp` (field 8, varint).
const TIMESTAMP_KEY: u8 = 8 << 3;

/// Writes `v` as a protobuf varint at the start of `out` (10 bytes at
/// most) and returns its length.
fn varint(mut v: u64, out: &mut [u8]) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = v as u8 | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// Writes the calls of `trace` that the display filters of `options` show
/// as a Perfetto protobuf trace to `out`.
pub fn write(
    trace: &Trace,
    options: &fctrace_options::Options,
    progress: bool,
    out: &mut impl Write,
) -> io::Result<Pass> {
    let mut sink = Perfetto {
        trace,
        out,
        functions: Functions::demangled(options.demangle),
        categories: HashMap::new(),
        category_of: Vec::new(),
        ids: IdCache::default(),
        session: 0,
        sequence: FIRST_SEQUENCE,
        tasks: 0,
        named_pids: HashSet::new(),
        names_sent: Vec::new(),
        categories_sent: Vec::new(),
        event: TracePacket {
            sequence_flags: Some(trace_packet::SequenceFlags::SeqNeedsIncrementalState as u32),
            data: Some(trace_packet::Data::TrackEvent(TrackEvent::default())),
            ..Default::default()
        },
        plain: Vec::new(),
        begins: Vec::new(),
        ends: (0, 0),
        buf: Vec::with_capacity(FLUSH_AT + 4096),
    };
    let pass = each_task(trace, options, "dump", progress, &mut sink)?;
    sink.out.write_all(&sink.buf)?;
    Ok(pass)
}

struct Perfetto<'t, 'o, W: Write> {
    trace: &'t Trace,
    out: &'o mut W,
    functions: Functions,
    /// Category (module file name) -> its iid.
    categories: HashMap<String, u64>,
    /// By function index: its category's iid.
    category_of: Vec<u64>,
    /// By function id of the current session: the function index + 1 (0:
    /// not looked up yet).
    ids: IdCache,
    session: u32,
    /// The current task's sequence id.
    sequence: u32,
    /// Tasks started.
    tasks: u32,
    /// Processes whose track was described.
    named_pids: HashSet<u32>,
    /// By function index: whether its name was interned in the current
    /// sequence.
    names_sent: Vec<bool>,
    /// By category iid: whether it was interned in the current sequence.
    categories_sent: Vec<bool>,
    /// The packet of the next event (kept, with its vectors, from event
    /// to event: only what changes is set).
    event: TracePacket,
    /// The encodings without timestamp of the current sequence's plain
    /// packets (no interned data, no annotation): `ends`, then by function
    /// index in `begins`, ranges of `plain`.
    plain: Vec<u8>,
    begins: Vec<(u32, u32)>,
    ends: (u32, u32),
    /// The packets not written yet (see [`Perfetto::done`]).
    buf: Vec<u8>,
}

/// The size of [`Perfetto::buf`] from which it is written out (the size
/// of dump's `BufWriter`: written past it, not copied into it).
const FLUSH_AT: usize = 1 << 20;

/// Which plain packet an event is.
#[derive(Clone, Copy)]
enum Plain {
    /// The begin of a call of a function index.
    Begin(usize),
    End,
}

/// A debug annotation `name` = `value` (text).
fn annotation(name: &str, value: String) -> DebugAnnotation {
    DebugAnnotation {
        name_field: Some(debug_annotation::NameField::Name(name.to_string())),
        value: Some(debug_annotation::Value::StringValue(value)),
        ..Default::default()
    }
}

impl<W: Write> Perfetto<'_, '_, W> {
    /// The function index of function `func` of the current session.
    fn function(&mut self, func: u32) -> usize {
        if let Some(x) = self.ids.get(func) {
            return x;
        }
        let x = self.functions.index(self.trace, self.session, func);
        while self.category_of.len() < self.functions.list.len() {
            let f = &self.functions.list[self.category_of.len()];
            let name = module_file(&f.module);
            let next = self.categories.len() as u64 + 1;
            let iid = *self.categories.entry(name.to_string()).or_insert(next);
            self.category_of.push(iid);
        }
        self.ids.set(func, x);
        x
    }

    /// A packet was added to `buf`: it goes out with the packets before
    /// it once they fill [`FLUSH_AT`] bytes (each packet composed in place,
    /// not copied once more into the writer's buffer).
    fn done(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Encodes `packet` as field 1 of `Trace` and writes it.
    fn write(&mut self, packet: &TracePacket) -> io::Result<()> {
        prost::encoding::message::encode(1, packet, &mut self.buf);
        self.done()
    }

    /// A packet of the current sequence.
    fn packet(&self) -> TracePacket {
        TracePacket {
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                    self.sequence,
                ),
            ),
            ..Default::default()
        }
    }

    /// The track event of the next packet.
    fn ev(&mut self) -> &mut TrackEvent {
        if !matches!(self.event.data, Some(trace_packet::Data::TrackEvent(_))) {
            self.event.data = Some(trace_packet::Data::TrackEvent(TrackEvent::default()));
        }
        match &mut self.event.data {
            Some(trace_packet::Data::TrackEvent(e)) => e,
            _ => unreachable!("set just above"),
        }
    }

    /// Writes the event packet at `ns`, with `interned` data, then clears
    /// what the next event may not have.
    ///
    /// Most packets are `plain`: a call's begin or end without interned
    /// data or annotation, the same bytes for every call of a function in
    /// a sequence but for the timestamp. Their encoding without timestamp
    /// is kept, and such a packet is written as the encoding of a packet
    /// with only the timestamp followed by it: protobuf reads concatenated
    /// encodings of a message as one (and since the timestamp has the
    /// lowest field number of the packet, the bytes are those of the whole
    /// packet's encoding).
    fn emit(
        &mut self,
        ns: u64,
        interned: Option<InternedData>,
        plain: Option<Plain>,
    ) -> io::Result<()> {
        let plain = plain.filter(|_| interned.is_none() && self.ev().debug_annotations.is_empty());
        let written = match plain {
            Some(kind) => {
                let (start, len) = match self.plain_range(kind) {
                    Some(range) => range,
                    None => {
                        self.event.timestamp = None;
                        let start = self.plain.len();
                        self.event
                            .encode(&mut self.plain)
                            .map_err(io::Error::other)?;
                        let range = (start as u32, (self.plain.len() - start) as u32);
                        match kind {
                            Plain::Begin(x) => {
                                if self.begins.len() <= x {
                                    self.begins.resize(x + 1, (0, 0));
                                }
                                self.begins[x] = range;
                            }
                            Plain::End => self.ends = range,
                        }
                        range
                    }
                };
                self.write_stamped(ns, (start, len))
            }
            None => {
                self.event.timestamp = Some(ns);
                self.event.interned_data = interned;
                prost::encoding::message::encode(1, &self.event, &mut self.buf);
                self.event.interned_data = None;
                self.done()
            }
        };
        let e = self.ev();
        e.category_iids.clear();
        e.debug_annotations.clear();
        e.r#type = None;
        e.name_field = None;
        written
    }

    /// Writes the plain packet of `range` (in `plain`) at `ns`: the key
    /// of field 1 of `Trace`, the packet's length, then the encoding of
    /// `TracePacket.timestamp` (the key of field 8, varint: 0x40; the
    /// bytes prost writes for a packet with only a timestamp, spelt out:
    /// no message walk per event) and the kept rest.
    fn write_stamped(&mut self, ns: u64, (start, len): (u32, u32)) -> io::Result<()> {
        let rest = &self.plain[start as usize..(start + len) as usize];
        let mut stamp = [0u8; 11];
        stamp[0] = TIMESTAMP_KEY;
        let n = 1 + varint(ns, &mut stamp[1..]);
        let mut head = [0u8; 11];
        head[0] = PACKET_KEY;
        let h = 1 + varint((n + rest.len()) as u64, &mut head[1..]);
        self.buf.extend_from_slice(&head[..h]);
        self.buf.extend_from_slice(&stamp[..n]);
        self.buf.extend_from_slice(rest);
        self.done()
    }

    /// The kept encoding of a plain packet of the current sequence.
    fn plain_range(&self, kind: Plain) -> Option<(u32, u32)> {
        let range = match kind {
            Plain::Begin(x) => self.begins.get(x).copied().unwrap_or((0, 0)),
            Plain::End => self.ends,
        };
        (range.1 > 0).then_some(range)
    }

    /// Sets the event's name and category to function index `x`'s, and
    /// returns the interned data they need in this sequence, if any.
    fn name_event(&mut self, x: usize) -> Option<InternedData> {
        let cat = self.category_of[x];
        let e = self.ev();
        e.name_field = Some(track_event::NameField::NameIid(x as u64 + 1));
        e.category_iids.push(cat);
        if self.names_sent.len() <= x {
            self.names_sent.resize(x + 1, false);
        }
        if self.categories_sent.len() <= cat as usize {
            self.categories_sent.resize(cat as usize + 1, false);
        }
        if self.names_sent[x] && self.categories_sent[cat as usize] {
            return None;
        }
        let mut data = InternedData::default();
        if !self.names_sent[x] {
            self.names_sent[x] = true;
            data.event_names.push(EventName {
                iid: Some(x as u64 + 1),
                name: Some(self.functions.list[x].name.clone()),
            });
        }
        if !self.categories_sent[cat as usize] {
            self.categories_sent[cat as usize] = true;
            data.event_categories.push(EventCategory {
                iid: Some(cat),
                name: Some(module_file(&self.functions.list[x].module).to_string()),
            });
        }
        Some(data)
    }

    /// An instant event named `name` (not interned).
    fn instant(&mut self, name: String, ns: u64) -> io::Result<()> {
        let e = self.ev();
        e.r#type = Some(track_event::Type::Instant as i32);
        e.name_field = Some(track_event::NameField::Name(name));
        self.emit(ns, None, None)
    }
}

impl<W: Write> StepSink for Perfetto<'_, '_, W> {
    fn begin_task(&mut self, task: &TaskInfo) -> io::Result<()> {
        if task.session != self.session || self.ids.is_empty() {
            self.session = task.session;
            self.ids.clear();
        }
        self.sequence = FIRST_SEQUENCE.saturating_add(self.tasks);
        self.tasks += 1;
        self.event.optional_trusted_packet_sequence_id = Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(self.sequence),
        );
        self.names_sent.iter_mut().for_each(|b| *b = false);
        self.plain.clear();
        self.begins.iter_mut().for_each(|r| *r = (0, 0));
        self.ends = (0, 0);
        self.categories_sent.iter_mut().for_each(|b| *b = false);
        let track = TASK_TRACK | u64::from(task.id);
        let process_track = PROCESS_TRACK | u64::from(task.pid);

        // The sequence starts: its state is new, its events go on the
        // task's track.
        let mut first = self.packet();
        first.first_packet_on_sequence = Some(true);
        first.sequence_flags = Some(trace_packet::SequenceFlags::SeqIncrementalStateCleared as u32);
        first.trace_packet_defaults = Some(TracePacketDefaults {
            track_event_defaults: Some(TrackEventDefaults {
                track_uuid: Some(track),
                ..Default::default()
            }),
            ..Default::default()
        });
        first.data = Some(trace_packet::Data::TrackDescriptor(TrackDescriptor {
            uuid: Some(track),
            parent_uuid: Some(process_track),
            thread: Some(ThreadDescriptor {
                pid: Some(task.pid as i32),
                tid: Some(i64::from(task.tid)),
                thread_name: (!task.comm.is_empty()).then(|| task.comm.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }));
        self.write(&first)?;

        if self.named_pids.insert(task.pid) {
            let info = &self.trace.info;
            let name = if task.comm.is_empty() {
                module_file(&info.program).to_string()
            } else {
                task.comm.clone()
            };
            let cmdline = if task.origin == TaskOrigin::Start {
                info.args.clone()
            } else {
                Vec::new()
            };
            let mut p = self.packet();
            p.data = Some(trace_packet::Data::TrackDescriptor(TrackDescriptor {
                uuid: Some(process_track),
                process: Some(ProcessDescriptor {
                    pid: Some(task.pid as i32),
                    process_name: Some(name),
                    cmdline,
                    ..Default::default()
                }),
                ..Default::default()
            }));
            self.write(&p)?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Step, stack: &[Open]) -> io::Result<()> {
        match step {
            Step::Enter { func, ns } => {
                let x = self.function(*func);
                let args = stack.last().and_then(|o| o.args.as_deref());
                if args.is_none() {
                    if let Some(range) = self.plain_range(Plain::Begin(x)) {
                        return self.write_stamped(*ns, range);
                    }
                }
                self.ev().r#type = Some(track_event::Type::SliceBegin as i32);
                let interned = self.name_event(x);
                if let Some(args) = args {
                    self.ev()
                        .debug_annotations
                        .push(annotation("args", format_payload(args)));
                }
                self.emit(*ns, interned, Some(Plain::Begin(x)))
            }
            Step::Leave(call) => {
                if call.retval.is_none() && call.end == End::Returned {
                    if let Some(range) = self.plain_range(Plain::End) {
                        return self.write_stamped(call.end_ns, range);
                    }
                }
                let e = self.ev();
                e.r#type = Some(track_event::Type::SliceEnd as i32);
                if let Some(retval) = &call.retval {
                    e.debug_annotations
                        .push(annotation("retval", format_payload(retval)));
                }
                let end = match call.end {
                    End::Returned => None,
                    End::Unwound => Some("unwound"),
                    End::NotReturned => Some("not returned"),
                };
                if let Some(end) = end {
                    e.debug_annotations.push(annotation("end", end.to_string()));
                }
                self.emit(call.end_ns, None, Some(Plain::End))
            }
            Step::Unmatched { func, ns, .. } => {
                let x = self.function(*func);
                self.ev().r#type = Some(track_event::Type::Instant as i32);
                let interned = self.name_event(x);
                self.ev().debug_annotations.push(annotation(
                    "note",
                    "exit without a recorded entry".to_string(),
                ));
                self.emit(*ns, interned, None)
            }
            Step::Signal { signal, ns } => {
                let name = match fctrace_options::known_signal_name(*signal as i32) {
                    Some(s) => format!("signal {s}"),
                    None => format!("signal {signal}"),
                };
                self.instant(name, *ns)
            }
            Step::Lost { count, ns } => self.instant(format!("lost {count} events"), *ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{ev, fake_trace, FakeTask};
    use fctrace_format::event::EventKind::*;
    use fctrace_perfetto::protos::Trace as PerfettoTrace;

    #[test]
    fn slices_nest_and_names_are_interned_once_per_sequence() {
        let (_dir, trace) = fake_trace(&[
            FakeTask::main(
                10,
                vec![
                    ev(Entry, 1, 0),
                    ev(Entry, 2, 10),
                    ev(Exit, 2, 20),
                    ev(Entry, 2, 30),
                    ev(Signal, 10, 35),
                    ev(Exit, 2, 40),
                    ev(Exit, 1, 50),
                ],
            ),
            FakeTask::thread(11, 10, vec![ev(Entry, 2, 5), ev(Exit, 2, 6)]),
        ]);
        let mut out = Vec::new();
        write(&trace, &Default::default(), false, &mut out).unwrap();
        let decoded = PerfettoTrace::decode(&out[..]).unwrap();
        let mut per_seq: HashMap<u32, Vec<String>> = HashMap::new();
        let mut names: HashMap<(u32, u64), String> = HashMap::new();
        let mut threads = Vec::new();
        for p in &decoded.packet {
            let Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq)) =
                p.optional_trusted_packet_sequence_id
            else {
                panic!("no sequence id: {p:?}")
            };
            if let Some(d) = &p.interned_data {
                for n in &d.event_names {
                    assert!(
                        names.insert((seq, n.iid()), n.name().to_string()).is_none(),
                        "interned twice"
                    );
                }
            }
            match &p.data {
                Some(trace_packet::Data::TrackDescriptor(t)) => {
                    if let Some(th) = &t.thread {
                        threads.push(th.tid());
                    }
                }
                Some(trace_packet::Data::TrackEvent(e)) => {
                    let what = match (e.r#type(), &e.name_field) {
                        (
                            track_event::Type::SliceBegin,
                            Some(track_event::NameField::NameIid(i)),
                        ) => format!("B {}", names[&(seq, *i)]),
                        (track_event::Type::SliceEnd, _) => "E".to_string(),
                        (track_event::Type::Instant, Some(track_event::NameField::Name(n))) => {
                            n.clone()
                        }
                        other => panic!("{other:?}"),
                    };
                    per_seq.entry(seq).or_default().push(what);
                }
                _ => panic!("{p:?}"),
            }
        }
        assert_eq!(threads, [10, 11]);
        let mut seqs: Vec<_> = per_seq.into_iter().collect();
        seqs.sort();
        let f1 = &trace.sessions[&0].function(1).unwrap().name;
        let f2 = &trace.sessions[&0].function(2).unwrap().name;
        let b = |f: &str| format!("B {f}");
        assert_eq!(
            seqs[0].1,
            [
                b(f1),
                b(f2),
                "E".into(),
                b(f2),
                "signal SIGUSR1".into(),
                "E".into(),
                "E".into()
            ]
        );
        assert_eq!(seqs[1].1, [b(f2), "E".into()]);
    }
}
