//! Hand-built traces for the output tests: written with the real
//! TraceWriter into a temporary directory, read back with Trace::open.

use fctrace_format::event::{EventKind, RawEvent};
use fctrace_format::store::{
    Clock, ExitStatus, TaskInfo, TaskOrigin, Trace, TraceInfo, TraceWriter,
};
use fctrace_format::symtab::{self, FuncKind, FuncStatus, Function, Module, SymTab};
use tempfile::TempDir;

/// An event at time `t` (ns from the start of the fake trace). The record
/// holds `t + TSC_BASE`: the writer takes a zero timestamp for a record the
/// agent reserved but never wrote.
pub fn ev(kind: EventKind, func: u32, t: u64) -> RawEvent {
    RawEvent::new(kind, func, t + TSC_BASE)
}

/// Timestamp counter value at time 0 of the fake traces.
pub const TSC_BASE: u64 = 1_000;

/// An `Args`/`Retval` record of `func` at `t` and its payload records, as
/// the agent writes them; `fill` writes the values.
pub fn payload_events(
    kind: EventKind,
    func: u32,
    t: u64,
    fill: impl FnOnce(&mut fctrace_format::argval::Writer),
) -> Vec<RawEvent> {
    let mut buf = [0u8; 256];
    let mut w = fctrace_format::argval::Writer::new(&mut buf);
    fill(&mut w);
    let n = w.len();
    let mut v = vec![RawEvent::with_payload(kind, func, n as u16, t + TSC_BASE)];
    for piece in buf[..n.div_ceil(16) * 16].chunks(16) {
        v.push(RawEvent {
            word: u64::from_le_bytes(piece[..8].try_into().unwrap()),
            tsc: u64::from_le_bytes(piece[8..].try_into().unwrap()),
        });
    }
    v
}

pub struct FakeTask {
    /// The task id (defaults to the tid).
    pub id: u32,
    pub origin: TaskOrigin,
    /// The parent task's id.
    pub parent: Option<u32>,
    pub comm: String,
    pub tid: u32,
    pub pid: u32,
    pub ppid: u32,
    pub session: u32,
    pub events: Vec<RawEvent>,
}

impl FakeTask {
    /// The main thread of a process of session 0.
    pub fn main(tid: u32, events: Vec<RawEvent>) -> FakeTask {
        FakeTask {
            id: tid,
            origin: TaskOrigin::Start,
            parent: None,
            comm: "prog".into(),
            tid,
            pid: tid,
            ppid: 1,
            session: 0,
            events,
        }
    }
    /// Another thread of process `pid` (session 0), created by the task
    /// whose id is `pid`.
    pub fn thread(tid: u32, pid: u32, events: Vec<RawEvent>) -> FakeTask {
        FakeTask {
            pid,
            origin: TaskOrigin::Thread,
            parent: Some(pid),
            ..FakeTask::main(tid, events)
        }
    }
}

pub const PROG: &str = "/usr/bin/prog";
pub const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// Session `session` of PROG: ids 0 main, 1 parse_args, 2 strtol (PLT into
/// libc), 3 leaf, 4 `_Z3fooi`, 5 `_ZNK1S3getEv`, 6 `_setjmp` (entry-only),
/// 7 `tiny` (not traced).
pub fn default_symtab(session: u32) -> SymTab {
    let f = |id, module, name: &str, kind, status| Function {
        id,
        module,
        addr: 0x1000 + u64::from(id) * 0x20,
        size: 0x20,
        kind,
        status,
        name: name.to_string(),
    };
    SymTab {
        session,
        pid: 100 + session,
        exe: PROG.into(),
        modules: vec![
            Module::new(0, 0x5555_0000_0000, PROG),
            Module::new(1, 0x7fff_0000_0000, LIBC),
        ],
        functions: vec![
            f(0, 0, "main", FuncKind::Function, FuncStatus::Traced),
            f(1, 0, "parse_args", FuncKind::Function, FuncStatus::Traced),
            f(2, 1, "strtol", FuncKind::Plt, FuncStatus::Traced),
            f(3, 0, "leaf", FuncKind::Function, FuncStatus::Traced),
            f(4, 0, "_Z3fooi", FuncKind::Function, FuncStatus::Traced),
            f(5, 0, "_ZNK1S3getEv", FuncKind::Function, FuncStatus::Traced),
            f(6, 1, "_setjmp", FuncKind::Plt, FuncStatus::EntryOnly),
            f(
                7,
                0,
                "tiny",
                FuncKind::Function,
                FuncStatus::NotTraced("too short to patch (3 bytes)".into()),
            ),
        ],
        forked: None,
    }
}

/// A trace of `tasks` with `default_symtab(0)`; the `t` of [`ev`] is ns.
pub fn fake_trace(tasks: &[FakeTask]) -> (TempDir, Trace) {
    fake_trace_with(&[default_symtab(0)], tasks)
}

pub fn fake_trace_with(sessions: &[SymTab], tasks: &[FakeTask]) -> (TempDir, Trace) {
    let tmp = TempDir::new().unwrap();
    let mut writer = TraceWriter::create(tmp.path()).unwrap();
    for table in sessions {
        let mut text = Vec::new();
        symtab::write_symtab(&mut text, table).unwrap();
        std::fs::write(
            writer.sessions_dir().join(format!("{}.sym", table.session)),
            text,
        )
        .unwrap();
    }
    for t in tasks {
        writer.append_task(t.id, t.tid, &t.events).unwrap();
    }
    let info = TraceInfo {
        program: PROG.into(),
        args: vec!["prog".into(), "-v".into()],
        cwd: "/home/me".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        exit: Some(ExitStatus::Code(0)),
        tasks: tasks
            .iter()
            .map(|t| TaskInfo {
                id: t.id,
                origin: t.origin,
                parent: t.parent,
                file: String::new(),
                tid: t.tid,
                pid: t.pid,
                ppid: t.ppid,
                parent_tid: t
                    .parent
                    .and_then(|p| tasks.iter().find(|o| o.id == p))
                    .map(|p| p.tid),
                session: t.session,
                comm: t.comm.clone(),
                events: 0,
            })
            .collect(),
        clock: Clock {
            tsc_hz: 1e9,
            pairs: vec![(TSC_BASE, 0), (1_000_000_000 + TSC_BASE, 1_000_000_000)],
            ..Clock::default()
        },
        ..TraceInfo::default()
    };
    writer.finish(info).unwrap();
    let trace = Trace::open(tmp.path()).unwrap();
    (tmp, trace)
}
