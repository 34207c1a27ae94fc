//! The flight recorder (`record --ring`): its settings, which tasks
//! ended, the snapshots asked for (by a trigger, a signal, the end) and
//! the reason each is written or not written again.

use crate::facts::{clock_of, task_info, RunFacts};
use crate::sink::Sink;
use crate::{process, shm};
use fctrace_format::event::RawEvent;
use fctrace_format::store::{TraceInfo, TraceWriter};

/// `record --ring`: the flight recorder's settings.
#[derive(Clone, Copy, Debug)]
pub struct RingOptions {
    /// Bytes of compressed events kept for all tasks together.
    pub size: u64,
    /// Also a snapshot when the program exits normally.
    pub at_exit: bool,
}

/// Snapshots asked for by triggers are written at most this often (a
/// trigger on a hot function would otherwise write them back to back).
pub(crate) const TRIGGER_SNAPSHOT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The flight recorder at work (`record --ring`): which tasks ended, and
/// the snapshots asked for.
pub(crate) struct Flight {
    pub(crate) opts: RingOptions,
    ended: std::collections::HashSet<u32>,
    last_check: std::time::Instant,
    /// Trigger requests seen (the shared memory's count).
    requests: u64,
    last_trigger: Option<std::time::Instant>,
    /// Snapshots written.
    pub(crate) written: u32,
    /// Why the last snapshot was written, and the records the recorder
    /// had seen then (those handed over and those read live).
    last: Option<(String, u64)>,
}

impl Flight {
    pub(crate) fn new(opts: RingOptions) -> Flight {
        Flight {
            opts,
            ended: Default::default(),
            last_check: std::time::Instant::now(),
            // The shared memory is new: every request counts, also one
            // made before the loop first looks (a trigger hit right
            // after the program started).
            requests: 0,
            last_trigger: None,
            written: 0,
            last: None,
        }
    }

    /// In the recorder's loop: tells the ring which tasks ended (every
    /// second), and writes the snapshots asked for (SIGUSR2, Ctrl-C,
    /// `fctrace snapshot`, triggers).
    pub(crate) fn poll(
        &mut self,
        mem: &shm::SharedMemory,
        sink: &mut Sink<'_>,
        facts: &RunFacts<'_>,
        warnings: &[String],
    ) {
        if self.last_check.elapsed() >= std::time::Duration::from_secs(1) {
            self.last_check = std::time::Instant::now();
            for id in mem.newly_ended_tasks(&mut self.ended) {
                if let Err(e) = sink.writer.ring_task_ended(id) {
                    sink.fail(&e);
                }
            }
        }
        let mut reason = process::take_snapshot_request().map(fctrace_options::spec::signal_name);
        let requests = mem.snapshot_requests();
        if reason.is_none()
            && requests != self.requests
            && self
                .last_trigger
                .is_none_or(|t| t.elapsed() >= TRIGGER_SNAPSHOT_INTERVAL)
        {
            self.requests = requests;
            self.last_trigger = Some(std::time::Instant::now());
            reason = Some("trigger".to_string());
        }
        let Some(reason) = reason else { return };
        // Everything handed over so far, then what the threads are
        // writing (again if buffers were handed over meanwhile).
        let mut live = Vec::new();
        for _ in 0..4 {
            let before = mem.handed_over();
            let _ = mem.drain_some(&mut |t, ev| sink.take(mem, t, ev));
            live = mem.live_events();
            if mem.handed_over() == before {
                break;
            }
        }
        let live: Vec<_> = live
            .into_iter()
            .filter(|(t, _)| t.slot < mem.task_count())
            .map(|(t, recs)| (t.slot, t.tid, recs))
            .collect();
        let seen = sink.records + live.iter().map(|l| l.2.len() as u64).sum::<u64>();
        let slots = mem.tasks();
        let info = TraceInfo {
            tasks: slots.iter().map(|t| task_info(t, &slots)).collect(),
            clock: clock_of(facts.first, shm::clock_pair()),
            lost_events: mem.lost_events(),
            warnings: warnings.to_vec(),
            ..facts.base_info()
        };
        match self.write(sink.writer, info, &reason, live, None) {
            Ok(()) => self.last = Some((reason, seen)),
            Err(e) => eprintln!("fctrace: {e}"),
        }
    }

    /// The snapshot at the recording's end, for `reason` (None: none is
    /// due), `records` seen in all, `interrupted`: fctrace detached on a
    /// Ctrl-C. One event, one snapshot: the program's death by the Ctrl-C
    /// that asked for the last snapshot completes that snapshot, in place;
    /// so does an end with no event since the last snapshot, which then
    /// holds the program's last events and says how it ended.
    pub(crate) fn finish(
        &mut self,
        writer: &mut TraceWriter,
        info: TraceInfo,
        reason: Option<String>,
        (records, interrupted): (u64, bool),
    ) -> std::result::Result<(), String> {
        // A Ctrl-C or `fctrace snapshot` not served before the loop ended.
        let requested = reason.is_none();
        let reason = reason
            .or_else(|| process::take_snapshot_request().map(fctrace_options::spec::signal_name));
        let Some(reason) = reason else {
            return Ok(());
        };
        let again = match &self.last {
            Some((last, _))
                if last == "SIGINT"
                    && (reason == "SIGINT" || (reason == "detach" && interrupted)) =>
            {
                Some(Again::SameEvent)
            }
            Some((_, seen)) if *seen == records => {
                Some(Again::NothingNew(ending_of(&reason, requested)))
            }
            _ => None,
        };
        let reason = match (&again, &self.last) {
            (Some(_), Some((last, _))) => last.clone(),
            _ => reason,
        };
        self.write(writer, info, &reason, Vec::new(), again)
    }

    /// Writes a snapshot and says so; the error as a note.
    pub(crate) fn write(
        &mut self,
        writer: &mut TraceWriter,
        info: TraceInfo,
        reason: &str,
        live: Vec<(u32, u32, Vec<RawEvent>)>,
        again: Option<Again>,
    ) -> std::result::Result<(), String> {
        let (_, now_ns) = shm::clock_pair();
        let written = match &again {
            Some(_) => writer.rewrite_snapshot(info, reason, now_ns, &live),
            None => writer.snapshot(info, reason, now_ns, &live),
        };
        match written {
            Ok(s) => {
                let what = match again {
                    None => {
                        self.written += 1;
                        format!("snapshot {} ({reason})", s.number)
                    }
                    Some(Again::SameEvent) => format!(
                        "snapshot {} ({reason}) brought up to the program's end, which the \
                         same Ctrl-C caused",
                        s.number
                    ),
                    Some(Again::NothingNew(ending)) => {
                        eprintln!(
                            "fctrace: {ending} with no event since snapshot {n} ({reason}): \
                             no new snapshot, the end is in snapshot {n} (its info now says \
                             how the program ended), in {}",
                            s.dir.display(),
                            n = s.number
                        );
                        return Ok(());
                    }
                };
                let earlier = s
                    .earlier
                    .map(|p| format!("; snapshot {} moved to {}", s.number - 1, p.display()))
                    .unwrap_or_default();
                eprintln!(
                    "fctrace: {what}: the last {} events ({} bytes; {} before them not kept) \
                     in {}{earlier}",
                    s.events,
                    s.bytes,
                    s.events_before,
                    s.dir.display()
                );
                Ok(())
            }
            Err(e) => Err(format!("snapshot ({reason}) not written: {e}")),
        }
    }
}

/// Why a snapshot at the recording's end is the last one written again.
pub(crate) enum Again {
    /// The program died of the Ctrl-C that asked for the last snapshot
    /// (or fctrace detached on it).
    SameEvent,
    /// No event since the last snapshot; how the recording ended.
    NothingNew(String),
}

/// How the recording ended, said for an end snapshot's `reason` (or the
/// signal that asked for a snapshot as it ended, `requested`).
pub(crate) fn ending_of(reason: &str, requested: bool) -> String {
    match reason {
        signal if requested => format!("{signal} asked for a snapshot at the end"),
        "exit" => "the program exited".to_string(),
        "detach" => "fctrace detached".to_string(),
        "end" => "the recording ended".to_string(),
        signal => format!("the program was killed by {signal}"),
    }
}
