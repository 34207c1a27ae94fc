//! A task's kernel events (`record -k`): its system calls, recorded by the
//! kernel (tracepoints through `perf_event_open`), in a file of their own
//! next to the task's events (`tasks/<tid>.sys` beside `tasks/<tid>.dat`).
//!
//! ```text
//! file   := "fctrsys1" zstd-frame(record*)
//! record := kind:u8 nr:u16 ns:u64 body
//!   kind 1 (system call entered): body = args: 6 x u64
//!   kind 2 (system call returned): body = ret: i64
//!   kind 3 (the thread left the CPU): body = preempted: u8 (1: runnable)
//!   kind 4 (the thread is back on a CPU): no body
//!   kind 5 (a page fault): body = address: u64, ip: u64
//!   kind 6 (the path the system call in progress was given, copied when
//!           it returned, before its kind 2): body = len: u16, len bytes
//!   kind 7 (a signal delivered, nr = its number): body = code: i32,
//!           errno: i32, handler: u64, flags: u64
//!   kind 8 (a kernel function's name, before its first use): body =
//!           id: u32, len: u16, len bytes
//!   kind 9 (a kernel function entered): body = id: u32
//!   kind 10 (the kernel function entered last returned): body = id: u32,
//!           duration: u64
//!   kind 11 (an interrupt of the thread, `record -K`; nr = its class,
//!           [`INTERRUPT_CLASSES`]; ns = its start): body = duration: u64,
//!           number: u32 (the IRQ, the softirq's vector, the vector)
//! ```
//! (`nr` is 0 for kinds 3 to 5 and 8 to 10; `ns` is 0 for kind 8.)
//! Little-endian; `ns` is CLOCK_MONOTONIC, the timeline of the user
//! events. Records are in time order. docs/format.md has the same table.
//!
//! Readers see them merged with the task's events ([`super::TaskEvents`]):
//! a [`EventKind::Syscall`] event (`func` = the system call's number)
//! followed by 3 `Data` events holding the 48 bytes of its arguments, and
//! a [`EventKind::SyscallExit`] event followed by one `Data` event holding
//! the 8 bytes of its result.

use super::decoded::Event;
use super::error::StoreError;
use crate::event::EventKind;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The path argument of the system calls that take one: (number, index).
pub const PATH_ARGS: &[(i32, i16)] = &[
    (2, 0),   // open
    (4, 0),   // stat
    (6, 0),   // lstat
    (21, 0),  // access
    (59, 0),  // execve
    (76, 0),  // truncate
    (80, 0),  // chdir
    (82, 0),  // rename
    (83, 0),  // mkdir
    (84, 0),  // rmdir
    (85, 0),  // creat
    (86, 0),  // link
    (87, 0),  // unlink
    (88, 0),  // symlink (its target)
    (89, 0),  // readlink
    (90, 0),  // chmod
    (92, 0),  // chown
    (257, 1), // openat
    (258, 1), // mkdirat
    (262, 1), // newfstatat
    (263, 1), // unlinkat
    (264, 1), // renameat
    (267, 1), // readlinkat
    (268, 1), // fchmodat
    (269, 1), // faccessat
    (316, 1), // renameat2
    (322, 1), // execveat
    (332, 1), // statx
    (437, 1), // openat2
    (439, 1), // faccessat2
];

/// Which argument of system call `nr` is a path, if one is.
pub fn path_arg(nr: u32) -> Option<usize> {
    PATH_ARGS
        .iter()
        .find(|&&(n, _)| n as u32 == nr)
        .map(|&(_, i)| i as usize)
}

/// First 8 bytes of a kernel events file.
pub const SYS_MAGIC: [u8; 8] = *b"fctrsys1";
const KIND_ENTER: u8 = 1;
const KIND_EXIT: u8 = 2;
const KIND_OUT: u8 = 3;
const KIND_IN: u8 = 4;
const KIND_FAULT: u8 = 5;
const KIND_PATH: u8 = 6;
const KIND_SIGNAL: u8 = 7;
const KIND_NAME: u8 = 8;
const KIND_FUNC_ENTRY: u8 = 9;
const KIND_FUNC_EXIT: u8 = 10;
const KIND_INTERRUPT: u8 = 11;
/// The classes of interrupts (kind 11's `nr`), by the tracepoints that
/// mark them: the local APIC timer, a device's IRQ, a softirq, the
/// reschedule and function-call IPIs.
pub const INTERRUPT_CLASSES: [&str; 5] = ["timer", "irq", "softirq", "reschedule", "function call"];
/// Longest path kept.
pub const MAX_PATH: usize = 256;
/// Longest kernel function name kept.
pub const MAX_NAME: usize = 128;

/// One kernel event, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelEvent {
    /// A system call entered: its number and arguments.
    Enter { nr: u16, ns: u64, args: [u64; 6] },
    /// A system call returned: its number and result.
    Exit { nr: u16, ns: u64, ret: i64 },
    /// The thread left the CPU: preempted (still runnable) or blocked.
    Out { ns: u64, preempted: bool },
    /// The thread is back on a CPU.
    In { ns: u64 },
    /// A page fault at `addr`, by the instruction at `ip`.
    Fault { ns: u64, addr: u64, ip: u64 },
    /// The path system call `nr` was given (without the NUL; at most
    /// `MAX_PATH` bytes, a longer one is cut).
    Path { ns: u64, nr: u16, bytes: Box<[u8]> },
    /// A signal delivered (`signal:signal_deliver`): its number, `si_code`,
    /// `si_errno`, and the action the kernel took for it (handler: 0 the
    /// default action, 1 ignored, else the handler's address; its flags).
    Signal {
        ns: u64,
        sig: u16,
        code: i32,
        errno: i32,
        handler: u64,
        flags: u64,
    },
    /// A kernel function entered (ftrace's function_graph tracer).
    FuncEntry { ns: u64, name: Box<str> },
    /// The kernel function entered last returned, after `dur` ns.
    FuncExit { ns: u64, dur: u64, name: Box<str> },
    /// An interrupt ran on the thread's CPU while the thread was on it,
    /// from `ns` for `dur` ns: its class ([`INTERRUPT_CLASSES`]) and
    /// number.
    Interrupt {
        ns: u64,
        dur: u64,
        class: u16,
        num: u32,
    },
}

impl KernelEvent {
    /// Puts the event at `to` (its start, for an interrupt).
    pub fn set_ns(&mut self, to: u64) {
        match self {
            KernelEvent::Enter { ns, .. }
            | KernelEvent::Exit { ns, .. }
            | KernelEvent::Out { ns, .. }
            | KernelEvent::In { ns }
            | KernelEvent::Fault { ns, .. }
            | KernelEvent::Path { ns, .. }
            | KernelEvent::Signal { ns, .. }
            | KernelEvent::FuncEntry { ns, .. }
            | KernelEvent::FuncExit { ns, .. }
            | KernelEvent::Interrupt { ns, .. } => *ns = to,
        }
    }

    pub fn ns(&self) -> u64 {
        match *self {
            KernelEvent::Enter { ns, .. }
            | KernelEvent::Exit { ns, .. }
            | KernelEvent::Out { ns, .. }
            | KernelEvent::In { ns }
            | KernelEvent::Fault { ns, .. }
            | KernelEvent::Path { ns, .. }
            | KernelEvent::Signal { ns, .. }
            | KernelEvent::FuncEntry { ns, .. }
            | KernelEvent::FuncExit { ns, .. }
            | KernelEvent::Interrupt { ns, .. } => ns,
        }
    }
}

/// Decoded events of one kernel unit (into `out`): `kind` and `func`
/// with a timestamp, then `Data` events holding `bytes`.
fn push_unit(out: &mut Vec<Event>, kind: EventKind, func: u32, ns: u64, bytes: &[u8]) {
    out.push(Event {
        kind,
        func,
        tsc: 0,
        ns,
    });
    for piece in bytes.chunks(16) {
        let mut b = [0u8; 16];
        b[..piece.len()].copy_from_slice(piece);
        out.push(Event {
            kind: EventKind::Data,
            func: piece.len() as u32,
            tsc: u64::from_le_bytes(b[..8].try_into().unwrap()),
            ns: u64::from_le_bytes(b[8..].try_into().unwrap()),
        });
    }
}

/// A kernel function's entry or exit, decoded (into `out`), and the
/// change of depth it makes.
fn push_func(out: &mut Vec<Event>, e: &KernelEvent) -> i32 {
    let named = |mut b: Vec<u8>, name: &str| {
        let len = name.len().min(MAX_NAME);
        b.extend_from_slice(&(len as u16).to_le_bytes());
        b.extend_from_slice(&name.as_bytes()[..len]);
        b
    };
    match e {
        KernelEvent::FuncEntry { ns, name } => {
            push_unit(
                out,
                EventKind::KernelEntry,
                0,
                *ns,
                &named(Vec::new(), name),
            );
            1
        }
        KernelEvent::FuncExit { ns, dur, name } => {
            push_unit(
                out,
                EventKind::KernelExit,
                0,
                *ns,
                &named(dur.to_le_bytes().to_vec(), name),
            );
            -1
        }
        _ => 0,
    }
}

/// x86_64 system call numbers and signal values the readers need.
const RT_SIGRETURN: u16 = 15;
const EXECVE: u16 = 59;
const EXECVEAT: u16 = 322;
const SIGTRAP: u16 = 5;
/// `si_code` of a signal the kernel raises itself (an int3's SIGTRAP).
const SI_KERNEL: i32 = 0x80;
/// How far past a SIGTRAP delivery the end of its frame is looked for.
const FRAME_LOOKAHEAD: usize = 4096;

/// The action flags of fctrace's agent's marker on crash signals
/// (SA_SIGINFO | SA_ONSTACK | SA_RESTART, and glibc's SA_RESTORER), and
/// those signals (SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV,
/// SIGSYS).
const AGENT_MARKER_FLAGS: u64 = 0x1c00_0004;
const CRASH_SIGNALS: [u16; 7] = [4, 5, 6, 7, 8, 11, 31];

/// How far (ns) a kernel function's time may lie past the system call it
/// ran in: ftrace prints microseconds, recorded as the end of theirs.
pub const FUNC_TIME_SLACK: u64 = 999;

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The path of the kernel events file of the task whose events file is
/// `dat` (relative to the trace directory, as `TaskInfo::file`).
pub fn sys_file_of(dat: &str) -> String {
    match dat.strip_suffix(".dat") {
        Some(stem) => format!("{stem}.sys"),
        None => format!("{dat}.sys"),
    }
}

/// The dynamic loader's work for fctrace's agent, in a thread's events
/// from a program's start (its `execve`'s return) to the agent's first
/// mark (its code's first system call): which of `events` are the
/// loader's calls on the agent's own files, left out (`true`).
/// `agents_file` says whether a path `openat` (or `open`) was given is
/// the agent's, or a library only the agent needs (a failed search along
/// the library path included). Those calls; then, on the descriptor one
/// returned until its `close`, `read`, `pread64`, `fstat`, `newfstatat`
/// and `mmap`; then `mmap`s at a fixed address, `mprotect`s and
/// `munmap`s inside what such an `mmap` mapped (the object's whole
/// reservation: its segments, its zeroed part, its RELRO made read-only
/// later). Each call goes with what happened inside it and its path.
pub fn agents_loading(events: &[KernelEvent], agents_file: &dyn Fn(&[u8]) -> bool) -> Vec<bool> {
    const READ: u16 = 0;
    const OPEN: u16 = 2;
    const CLOSE: u16 = 3;
    const FSTAT: u16 = 5;
    const MMAP: u16 = 9;
    const MPROTECT: u16 = 10;
    const MUNMAP: u16 = 11;
    const PREAD64: u16 = 17;
    const OPENAT: u16 = 257;
    const NEWFSTATAT: u16 = 262;
    const MAP_FIXED: u64 = 0x10;
    let mut agents = vec![false; events.len()];
    let mut fds: Vec<i64> = Vec::new();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let inside = |ranges: &[(u64, u64)], a: u64| ranges.iter().any(|&(s, e)| s <= a && a < e);
    let mut i = 0;
    while i < events.len() {
        let KernelEvent::Enter { nr, args, .. } = events[i] else {
            i += 1;
            continue;
        };
        let Some(j) = (i + 1..events.len())
            .find(|&k| matches!(events[k], KernelEvent::Exit { nr: n, .. } if n == nr))
        else {
            break;
        };
        let KernelEvent::Exit { ret, .. } = events[j] else {
            unreachable!()
        };
        // Its path: copied at its return (before it), or, in a trace of
        // an older fctrace, just before its entry.
        let before = i
            .checked_sub(1)
            .filter(|&b| matches!(events[b], KernelEvent::Path { nr: n, .. } if n == nr));
        let path = events[i + 1..j]
            .iter()
            .chain(before.map(|b| &events[b]))
            .find_map(|e| match e {
                KernelEvent::Path { nr: n, bytes, .. } if *n == nr => Some(&bytes[..]),
                _ => None,
            });
        let fd = |a: u64| fds.contains(&i64::from(a as i32));
        let theirs = match nr {
            OPEN | OPENAT => {
                let mine = path.is_some_and(agents_file);
                if mine && ret >= 0 {
                    fds.push(ret);
                }
                mine
            }
            READ | PREAD64 | FSTAT | NEWFSTATAT => fd(args[0]),
            CLOSE if fd(args[0]) => {
                fds.retain(|&f| f != i64::from(args[0] as i32));
                true
            }
            MMAP if fd(args[4]) => {
                if args[3] & MAP_FIXED == 0 && !(-4095..0).contains(&ret) {
                    ranges.push((ret as u64, (ret as u64).saturating_add(args[1])));
                }
                true
            }
            MMAP => args[3] & MAP_FIXED != 0 && inside(&ranges, args[0]),
            MPROTECT | MUNMAP => inside(&ranges, args[0]),
            _ => false,
        };
        if theirs {
            let from = before.unwrap_or(i);
            agents[from..=j].iter_mut().for_each(|a| *a = true);
        }
        i = j + 1;
    }
    agents
}

/// Writes one task's kernel events, streaming.
pub struct KernelWriter {
    out: zstd::stream::write::Encoder<'static, BufWriter<File>>,
    path: PathBuf,
    /// Events written.
    pub events: u64,
    /// Kernel function names written, with their ids.
    names: std::collections::HashMap<Box<str>, u32>,
}

impl KernelWriter {
    /// Writes into `file` (new and empty), whose path is `path`.
    pub fn new(file: File, path: &Path) -> Result<KernelWriter, StoreError> {
        let io_err = |e: io::Error| StoreError::io("cannot write", path, e);
        let mut f = BufWriter::new(file);
        f.write_all(&SYS_MAGIC).map_err(io_err)?;
        let out = zstd::stream::write::Encoder::new(f, 3).map_err(io_err)?;
        Ok(KernelWriter {
            out,
            path: path.to_path_buf(),
            events: 0,
            names: Default::default(),
        })
    }

    /// The id of kernel function `name`, its record written first if new.
    fn name_id(&mut self, name: &str) -> Result<u32, StoreError> {
        if let Some(&id) = self.names.get(name) {
            return Ok(id);
        }
        let id = self.names.len() as u32;
        let mut len = name.len().min(MAX_NAME);
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let mut rec = vec![KIND_NAME];
        rec.extend_from_slice(&[0u8; 10]);
        rec.extend_from_slice(&id.to_le_bytes());
        rec.extend_from_slice(&(len as u16).to_le_bytes());
        rec.extend_from_slice(&name.as_bytes()[..len]);
        self.out
            .write_all(&rec)
            .map_err(|e| StoreError::io("cannot write", &self.path, e))?;
        self.names.insert(name.into(), id);
        Ok(id)
    }

    pub fn write(&mut self, e: &KernelEvent) -> Result<(), StoreError> {
        let mut rec = [0u8; 13 + MAX_PATH];
        let n = match *e {
            KernelEvent::Enter { nr, ns, args } => {
                rec[0] = KIND_ENTER;
                rec[1..3].copy_from_slice(&nr.to_le_bytes());
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                for (i, a) in args.iter().enumerate() {
                    rec[11 + 8 * i..19 + 8 * i].copy_from_slice(&a.to_le_bytes());
                }
                11 + 48
            }
            KernelEvent::Exit { nr, ns, ret } => {
                rec[0] = KIND_EXIT;
                rec[1..3].copy_from_slice(&nr.to_le_bytes());
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..19].copy_from_slice(&ret.to_le_bytes());
                19
            }
            KernelEvent::Out { ns, preempted } => {
                rec[0] = KIND_OUT;
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11] = u8::from(preempted);
                12
            }
            KernelEvent::In { ns } => {
                rec[0] = KIND_IN;
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                11
            }
            KernelEvent::Fault { ns, addr, ip } => {
                rec[0] = KIND_FAULT;
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..19].copy_from_slice(&addr.to_le_bytes());
                rec[19..27].copy_from_slice(&ip.to_le_bytes());
                27
            }
            KernelEvent::Path { ns, nr, ref bytes } => {
                let len = bytes.len().min(MAX_PATH);
                rec[0] = KIND_PATH;
                rec[1..3].copy_from_slice(&nr.to_le_bytes());
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..13].copy_from_slice(&(len as u16).to_le_bytes());
                rec[13..13 + len].copy_from_slice(&bytes[..len]);
                13 + len
            }
            KernelEvent::Signal {
                ns,
                sig,
                code,
                errno,
                handler,
                flags,
            } => {
                rec[0] = KIND_SIGNAL;
                rec[1..3].copy_from_slice(&sig.to_le_bytes());
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..15].copy_from_slice(&code.to_le_bytes());
                rec[15..19].copy_from_slice(&errno.to_le_bytes());
                rec[19..27].copy_from_slice(&handler.to_le_bytes());
                rec[27..35].copy_from_slice(&flags.to_le_bytes());
                35
            }
            KernelEvent::FuncEntry { ns, ref name } => {
                let id = self.name_id(name)?;
                rec[0] = KIND_FUNC_ENTRY;
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..15].copy_from_slice(&id.to_le_bytes());
                15
            }
            KernelEvent::FuncExit { ns, dur, ref name } => {
                let id = self.name_id(name)?;
                rec[0] = KIND_FUNC_EXIT;
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..15].copy_from_slice(&id.to_le_bytes());
                rec[15..23].copy_from_slice(&dur.to_le_bytes());
                23
            }
            KernelEvent::Interrupt {
                ns,
                dur,
                class,
                num,
            } => {
                rec[0] = KIND_INTERRUPT;
                rec[1..3].copy_from_slice(&class.to_le_bytes());
                rec[3..11].copy_from_slice(&ns.to_le_bytes());
                rec[11..19].copy_from_slice(&dur.to_le_bytes());
                rec[19..23].copy_from_slice(&num.to_le_bytes());
                23
            }
        };
        self.out
            .write_all(&rec[..n])
            .map_err(|e| StoreError::io("cannot write", &self.path, e))?;
        self.events += 1;
        Ok(())
    }

    /// Ends the compressed stream and closes the file.
    pub fn finish(self) -> Result<u64, StoreError> {
        let path = self.path;
        let mut f = self
            .out
            .finish()
            .map_err(|e| StoreError::io("cannot write", &path, e))?;
        f.flush()
            .map_err(|e| StoreError::io("cannot write", &path, e))?;
        Ok(self.events)
    }
}

/// Reads one task's kernel events, streaming.
pub struct KernelReader {
    input: zstd::stream::read::Decoder<'static, BufReader<File>>,
    /// Kernel function names by id.
    names: Vec<Box<str>>,
}

impl KernelReader {
    /// `None` if the file does not exist or is not a kernel events file.
    pub fn open(path: &Path) -> Option<KernelReader> {
        let mut f = File::open(path).ok()?;
        let mut magic = [0u8; 8];
        f.read_exact(&mut magic).ok()?;
        if magic != SYS_MAGIC {
            return None;
        }
        let input = zstd::stream::read::Decoder::new(f).ok()?;
        Some(KernelReader {
            input,
            names: Vec::new(),
        })
    }

    /// The next event; `None` at the end (or where the file is damaged:
    /// the events before are good).
    pub fn next_event(&mut self) -> Option<KernelEvent> {
        loop {
            let e = self.next_record()?;
            if let Some(e) = e {
                return Some(e);
            }
        }
    }

    fn u32(&mut self) -> Option<u32> {
        let mut b = [0u8; 4];
        self.input.read_exact(&mut b).ok()?;
        Some(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Option<u64> {
        let mut b = [0u8; 8];
        self.input.read_exact(&mut b).ok()?;
        Some(u64::from_le_bytes(b))
    }

    fn name(&self, id: u32) -> Option<Box<str>> {
        self.names.get(id as usize).cloned()
    }

    /// The next record: `Some(None)` for a name's (no event).
    fn next_record(&mut self) -> Option<Option<KernelEvent>> {
        let mut head = [0u8; 11];
        self.input.read_exact(&mut head).ok()?;
        let nr = u16::from_le_bytes([head[1], head[2]]);
        let ns = u64::from_le_bytes(head[3..11].try_into().unwrap());
        let e = match head[0] {
            KIND_ENTER => {
                let mut b = [0u8; 48];
                self.input.read_exact(&mut b).ok()?;
                let mut args = [0u64; 6];
                for (i, a) in args.iter_mut().enumerate() {
                    *a = u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
                }
                Some(KernelEvent::Enter { nr, ns, args })
            }
            KIND_EXIT => {
                let mut b = [0u8; 8];
                self.input.read_exact(&mut b).ok()?;
                Some(KernelEvent::Exit {
                    nr,
                    ns,
                    ret: i64::from_le_bytes(b),
                })
            }
            KIND_OUT => {
                let mut b = [0u8; 1];
                self.input.read_exact(&mut b).ok()?;
                Some(KernelEvent::Out {
                    ns,
                    preempted: b[0] != 0,
                })
            }
            KIND_IN => Some(KernelEvent::In { ns }),
            KIND_PATH => {
                let mut l = [0u8; 2];
                self.input.read_exact(&mut l).ok()?;
                let len = u16::from_le_bytes(l);
                if len as usize > MAX_PATH {
                    return None;
                }
                let mut bytes = vec![0u8; len as usize];
                self.input.read_exact(&mut bytes).ok()?;
                Some(KernelEvent::Path {
                    ns,
                    nr,
                    bytes: bytes.into_boxed_slice(),
                })
            }
            KIND_FAULT => {
                let mut b = [0u8; 16];
                self.input.read_exact(&mut b).ok()?;
                Some(KernelEvent::Fault {
                    ns,
                    addr: u64::from_le_bytes(b[..8].try_into().unwrap()),
                    ip: u64::from_le_bytes(b[8..].try_into().unwrap()),
                })
            }
            KIND_SIGNAL => {
                let code = self.u32()? as i32;
                let errno = self.u32()? as i32;
                Some(KernelEvent::Signal {
                    ns,
                    sig: nr,
                    code,
                    errno,
                    handler: self.u64()?,
                    flags: self.u64()?,
                })
            }
            KIND_NAME => {
                let id = self.u32()?;
                let mut l = [0u8; 2];
                self.input.read_exact(&mut l).ok()?;
                let len = u16::from_le_bytes(l) as usize;
                if len > MAX_NAME || id as usize != self.names.len() {
                    return None;
                }
                let mut bytes = vec![0u8; len];
                self.input.read_exact(&mut bytes).ok()?;
                self.names
                    .push(String::from_utf8_lossy(&bytes).into_owned().into());
                return Some(None);
            }
            KIND_FUNC_ENTRY => {
                let id = self.u32()?;
                Some(KernelEvent::FuncEntry {
                    ns,
                    name: self.name(id)?,
                })
            }
            KIND_FUNC_EXIT => {
                let id = self.u32()?;
                let dur = self.u64()?;
                Some(KernelEvent::FuncExit {
                    ns,
                    dur,
                    name: self.name(id)?,
                })
            }
            KIND_INTERRUPT => {
                let dur = self.u64()?;
                Some(KernelEvent::Interrupt {
                    ns,
                    dur,
                    class: nr,
                    num: self.u32()?,
                })
            }
            _ => None,
        };
        e.map(Some)
    }
}

/// What [`KernelMerge::read_call`] read of a system call: the time the
/// thread spent off the CPU inside it, the interrupts it was interrupted
/// by (how many, how long), the kernel functions it ran and how many of
/// them are still open, and its return.
struct CallBody {
    off: u64,
    irqs: u64,
    irq_ns: u64,
    funcs: Vec<Event>,
    depth: i32,
    exit: Option<KernelEvent>,
}

/// A task's kernel events merged into its decoded events, a chunk at a
/// time ([`super::TaskEvents`]).
///
/// A system call's entry and return go in together, placed by the middle
/// of the call: the thread ran none of its own code meanwhile, and the
/// kernel's clock and the user events' (the timestamp counter converted
/// through the recording's calibration) may disagree by some tens of
/// nanoseconds, less than half of any system call.
pub(crate) struct KernelMerge {
    reader: KernelReader,
    /// The next unit's decoded events, and where it goes in time.
    next: Vec<Event>,
    key: Option<u64>,
    /// Read ahead while making a unit.
    ahead: std::collections::VecDeque<KernelEvent>,
    scratch: Vec<Event>,
}

impl KernelMerge {
    pub(crate) fn new(reader: KernelReader) -> KernelMerge {
        let mut m = KernelMerge {
            reader,
            next: Vec::new(),
            key: None,
            ahead: Default::default(),
            scratch: Vec::new(),
        };
        m.advance();
        m
    }

    fn read(&mut self) -> Option<KernelEvent> {
        self.ahead.pop_front().or_else(|| self.reader.next_event())
    }

    /// Makes the next unit: a system call with its return and the time
    /// the thread spent off the CPU inside it; a stretch off the CPU
    /// outside any; a page fault; or a lone event.
    fn advance(&mut self) {
        // (A loop: the agent's units, left out, can be thousands in a row.)
        while !self.make_unit() {}
    }

    /// [`KernelMerge::advance`]'s unit; false when what it read made none
    /// (the agent's, or nothing to show alone): read on.
    fn make_unit(&mut self) -> bool {
        self.next.clear();
        self.key = None;
        let Some((first, path)) = self.read_first() else {
            return true;
        };
        match first {
            // A call the agent tagged (the rt_sigreturn of a signal frame
            // that was its alone; any other the recorder has left out):
            // with its return.
            KernelEvent::Enter { nr, args, .. } if crate::shm::kernel_tagged(&args) => {
                self.skip_call(nr);
                return false;
            }
            KernelEvent::Enter { nr, ns, args } => self.syscall_unit(nr, ns, &args, path),
            KernelEvent::Exit { nr, ns, ret } => {
                push_unit(
                    &mut self.next,
                    EventKind::SyscallExit,
                    u32::from(nr),
                    ns,
                    &words(&[ret as u64, 0]),
                );
                self.key = Some(ns);
            }
            KernelEvent::Out { ns, preempted } => self.off_cpu_unit(ns, preempted),
            // Back without having been seen leaving (the first switch).
            KernelEvent::In { .. } => return false,
            KernelEvent::Fault { ns, addr, ip } => {
                push_unit(
                    &mut self.next,
                    EventKind::PageFault,
                    0,
                    ns,
                    &words(&[addr, ip]),
                );
                self.key = Some(ns);
            }
            KernelEvent::Path { .. } => return false,
            // The agent's marker on a crash signal the program left at its
            // default action: the delivery to it, then the same signal's
            // again at the default action (raised again, or the
            // instruction faulting again): the second is the program's.
            KernelEvent::Signal {
                sig,
                handler,
                flags,
                ..
            } if handler > 1
                && flags == AGENT_MARKER_FLAGS
                && CRASH_SIGNALS.contains(&sig)
                && self.delivered_again(sig) =>
            {
                return false
            }
            // An int3 of the agent's trap fallback: its frame ends with
            // the agent's tagged rt_sigreturn.
            KernelEvent::Signal {
                sig: SIGTRAP,
                code: SI_KERNEL,
                handler,
                ..
            } if handler > 1 && self.frame_is_agents() => return false,
            KernelEvent::Signal {
                ns,
                sig,
                code,
                errno,
                handler,
                flags,
            } => {
                push_unit(
                    &mut self.next,
                    EventKind::KernelSignal,
                    u32::from(sig),
                    ns,
                    &words(&[code as i64 as u64, errno as i64 as u64, handler, flags]),
                );
                self.key = Some(ns);
            }
            f @ KernelEvent::FuncEntry { .. } => self.func_tree_unit(&f),
            // The end of one whose entry was not recorded.
            KernelEvent::FuncExit { .. } => return false,
            // Outside system calls: not shown (docs/options.md, -K).
            KernelEvent::Interrupt { .. } => return false,
        }
        true
    }

    /// Puts `e`, read one too far, back to be read next.
    fn unread(&mut self, e: Option<KernelEvent>) {
        if let Some(e) = e {
            self.ahead.push_front(e);
        }
    }

    /// The first event of the next unit, with the path read just before
    /// it when it is the entry of the system call the path is for;
    /// `None` at the end.
    fn read_first(&mut self) -> Option<(KernelEvent, Option<Box<[u8]>>)> {
        let mut first = self.read()?;
        // A path comes just before its system call's entry.
        let mut path: Option<Box<[u8]>> = None;
        while let KernelEvent::Path { nr, bytes, .. } = first {
            match self.read() {
                Some(next @ KernelEvent::Enter { nr: n, .. }) if n == nr => {
                    path = Some(bytes);
                    first = next;
                }
                Some(next) => first = next,
                None => return None,
            }
        }
        Some((first, path))
    }

    /// The unit of system call `nr` entered at `ns` with `args` (and
    /// `path`, read before its entry): its entry, the kernel functions it
    /// ran, and its return with the time the thread spent off the CPU
    /// inside it, placed by the middle of the call.
    fn syscall_unit(&mut self, nr: u16, ns: u64, args: &[u64; 6], mut path: Option<Box<[u8]>>) {
        let CallBody {
            off,
            irqs,
            irq_ns,
            mut funcs,
            depth,
            exit,
        } = self.read_call(nr, &mut path);
        if let Some(KernelEvent::Exit { ns: end, .. }) = exit {
            self.read_late_funcs(end, depth, &mut funcs);
        }
        // Its arguments, then the path it was given (length, bytes).
        let mut payload = words(args);
        if let Some(bytes) = path {
            let len = bytes.len().min(MAX_PATH);
            payload.extend_from_slice(&(len as u16).to_le_bytes());
            payload.extend_from_slice(&bytes[..len]);
        }
        push_unit(
            &mut self.next,
            EventKind::Syscall,
            u32::from(nr),
            ns,
            &payload,
        );
        self.next.append(&mut funcs);
        match exit {
            Some(KernelEvent::Exit { ns: end, ret, .. }) => {
                push_unit(
                    &mut self.next,
                    EventKind::SyscallExit,
                    u32::from(nr),
                    end,
                    &words(&[ret as u64, off, irqs, irq_ns][..if irqs == 0 { 2 } else { 4 }]),
                );
                self.key = Some(ns / 2 + end / 2);
            }
            _ => self.key = Some(ns),
        }
    }

    /// Reads what the thread did inside system call `nr`, whose entry was
    /// just read, up to its return (in [`CallBody::exit`]; `None` when
    /// something else came first, left to be read next); a path copied at
    /// its return replaces `path`.
    fn read_call(&mut self, nr: u16, path: &mut Option<Box<[u8]>>) -> CallBody {
        let mut off = 0u64;
        let (mut irqs, mut irq_ns) = (0u64, 0u64);
        let mut out_at = None;
        // The kernel functions it ran (-K), and their depth.
        let mut funcs = Vec::new();
        let mut depth = 0i32;
        let exit = loop {
            match self.read() {
                Some(f @ (KernelEvent::FuncEntry { .. } | KernelEvent::FuncExit { .. })) => {
                    if matches!(f, KernelEvent::FuncExit { .. }) && depth == 0 {
                        // The end of one entered before the call.
                        continue;
                    }
                    depth += push_func(&mut funcs, &f);
                }
                Some(KernelEvent::Out { ns, .. }) => out_at = Some(ns),
                Some(KernelEvent::In { ns }) => {
                    if let Some(o) = out_at.take() {
                        off += ns.saturating_sub(o);
                    }
                }
                // (Faults of the kernel's copies to user memory.)
                Some(KernelEvent::Fault { .. }) => {}
                Some(KernelEvent::Interrupt { dur, .. }) => {
                    irqs += 1;
                    irq_ns += dur;
                }
                // The path it was given, copied at its return.
                Some(KernelEvent::Path { nr: n, bytes, .. }) if n == nr => *path = Some(bytes),
                Some(x @ KernelEvent::Exit { nr: n, .. }) if n == nr => break Some(x),
                other => {
                    self.unread(other);
                    break None;
                }
            }
        };
        CallBody {
            off,
            irqs,
            irq_ns,
            funcs,
            depth,
            exit,
        }
    }

    /// Reads on after a system call's return at `end`, `depth` kernel
    /// functions of it still open: its kernel functions' times are
    /// ftrace's microseconds, so the returns of those still open, and the
    /// functions begun before it returned, are its (added to `funcs`).
    fn read_late_funcs(&mut self, end: u64, mut depth: i32, funcs: &mut Vec<Event>) {
        loop {
            match self.read() {
                Some(f @ KernelEvent::FuncExit { .. }) if depth > 0 => {
                    depth += push_func(funcs, &f);
                }
                Some(f @ KernelEvent::FuncEntry { ns: at, .. }) if at <= end + FUNC_TIME_SLACK => {
                    depth += push_func(funcs, &f);
                }
                // (After the return: outside the call, not shown.)
                Some(KernelEvent::Interrupt { .. }) => {}
                other => {
                    self.unread(other);
                    break;
                }
            }
        }
    }

    /// The unit of a stretch off the CPU from `ns` (`preempted`, or
    /// blocked) outside any system call, up to the thread's return to a
    /// CPU (none read: an empty stretch).
    fn off_cpu_unit(&mut self, ns: u64, preempted: bool) {
        let back = match self.read() {
            Some(KernelEvent::In { ns: b }) => b,
            other => {
                self.unread(other);
                ns
            }
        };
        push_unit(
            &mut self.next,
            EventKind::OffCpu,
            0,
            ns,
            &words(&[back.saturating_sub(ns), u64::from(preempted)]),
        );
        self.key = Some(ns / 2 + back / 2);
    }

    /// The unit of kernel functions outside any system call (a page
    /// fault's, an interrupt's) from `first`, their first entry: the whole
    /// tree, placed where it began.
    fn func_tree_unit(&mut self, first: &KernelEvent) {
        let mut depth = push_func(&mut self.next, first);
        while depth > 0 {
            match self.read() {
                Some(g @ (KernelEvent::FuncEntry { .. } | KernelEvent::FuncExit { .. })) => {
                    depth += push_func(&mut self.next, &g);
                }
                // (Outside system calls: not shown.)
                Some(KernelEvent::Interrupt { .. }) => {}
                other => {
                    self.unread(other);
                    break;
                }
            }
        }
        self.key = Some(first.ns());
    }

    /// Reads past the return of system call `nr`, whose entry was just
    /// read, and what the thread did inside it.
    fn skip_call(&mut self, nr: u16) {
        loop {
            match self.read() {
                Some(KernelEvent::Exit { nr: n, .. }) if n == nr => return,
                Some(
                    KernelEvent::Out { .. }
                    | KernelEvent::In { .. }
                    | KernelEvent::Fault { .. }
                    | KernelEvent::Path { .. }
                    | KernelEvent::FuncEntry { .. }
                    | KernelEvent::FuncExit { .. }
                    | KernelEvent::Interrupt { .. },
                ) => {}
                other => {
                    if let Some(o) = other {
                        self.ahead.push_front(o);
                    }
                    return;
                }
            }
        }
    }

    /// Whether the signal frame just delivered is the agent's alone: the
    /// `rt_sigreturn` that ends it (the next one, past the frames of
    /// signals delivered on top of it, which end first) carries the
    /// agent's tag. Looked for among the next [`FRAME_LOOKAHEAD`] events
    /// (kept for the next units): the agent makes no system call in the
    /// frame of one of its int3s.
    fn frame_is_agents(&mut self) -> bool {
        let mut depth = 0u32;
        for i in 0..FRAME_LOOKAHEAD {
            if i == self.ahead.len() {
                match self.reader.next_event() {
                    Some(e) => self.ahead.push_back(e),
                    None => return false,
                }
            }
            match &self.ahead[i] {
                KernelEvent::Signal { handler, .. } if *handler > 1 => depth += 1,
                KernelEvent::Enter {
                    nr: RT_SIGRETURN,
                    args,
                    ..
                } => {
                    if depth == 0 {
                        return crate::shm::kernel_tagged(args);
                    }
                    depth -= 1;
                }
                // The frames are gone.
                KernelEvent::Enter {
                    nr: EXECVE | EXECVEAT,
                    ..
                } => return false,
                _ => {}
            }
        }
        false
    }

    /// Whether signal `sig` is delivered again at its default action
    /// among the next few events (kept for the next units).
    fn delivered_again(&mut self, sig: u16) -> bool {
        for i in 0..16 {
            if i == self.ahead.len() {
                match self.reader.next_event() {
                    Some(e) => self.ahead.push_back(e),
                    None => return false,
                }
            }
            if let KernelEvent::Signal {
                sig: s, handler, ..
            } = self.ahead[i]
            {
                return s == sig && handler == 0;
            }
        }
        false
    }

    /// Where the next unit goes in time.
    fn key(&self) -> Option<u64> {
        self.key
    }

    fn push_next(&mut self, out: &mut Vec<Event>) {
        out.extend_from_slice(&self.next);
        self.advance();
    }

    pub(crate) fn has_more(&self) -> bool {
        self.key.is_some()
    }

    /// Puts the kernel events up to the time of `batch`'s last timed
    /// event (all of them when `last`) among its events, in time order:
    /// before the first `Entry`, `Exit`, `Unwind`, `Signal` or `Lost` event
    /// that comes after them (never between an event and its values).
    pub(crate) fn merge(&mut self, batch: &mut Vec<Event>, last: bool) {
        let limit = if last {
            u64::MAX
        } else {
            match batch.iter().rev().find(|e| e.kind.is_call_step()) {
                Some(e) => e.ns,
                None => return,
            }
        };
        if self.key().is_none_or(|k| k > limit) {
            return;
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.reserve(batch.len() + 64);
        for e in batch.iter() {
            if e.kind.is_call_step() {
                while self.key().is_some_and(|k| k < e.ns) {
                    self.push_next(&mut out);
                }
            }
            out.push(*e);
        }
        while self.key().is_some_and(|k| k <= limit) {
            self.push_next(&mut out);
        }
        std::mem::swap(batch, &mut out);
        self.scratch = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interrupts (`-K`): kept in the file, added up on the return of
    /// the system call they ran in, left out elsewhere.
    #[test]
    fn interrupts_are_counted_on_their_calls() {
        let dir = std::env::temp_dir().join(format!("fctrace-irq-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.sys");
        let mut w = KernelWriter::new(File::create(&path).unwrap(), &path).unwrap();
        let irq = |ns, dur, class, num| KernelEvent::Interrupt {
            ns,
            dur,
            class,
            num,
        };
        let evs = [
            irq(120, 5, 0, 236),
            KernelEvent::Enter {
                nr: 0,
                ns: 150,
                args: [0; 6],
            },
            irq(152, 3, 0, 236),
            irq(156, 2, 2, 1),
            KernelEvent::Exit {
                nr: 0,
                ns: 160,
                ret: 7,
            },
        ];
        for e in &evs {
            w.write(e).unwrap();
        }
        w.finish().unwrap();
        let mut r = KernelReader::open(&path).unwrap();
        for e in &evs {
            assert_eq!(r.next_event().as_ref(), Some(e));
        }
        let mut m = KernelMerge::new(KernelReader::open(&path).unwrap());
        let mut batch = Vec::new();
        m.merge(&mut batch, true);
        let kinds: Vec<EventKind> = batch.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(kinds, [Syscall, Data, Data, Data, SyscallExit, Data, Data]);
        let (b, _) = batch[6].data_bytes();
        let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((word(0), word(1)), (2, 5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_trip_and_merge() {
        let dir = std::env::temp_dir().join(format!("fctrace-kernel-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.sys");
        let mut w = KernelWriter::new(File::create(&path).unwrap(), &path).unwrap();
        let evs = [
            KernelEvent::Enter {
                nr: 0,
                ns: 150,
                args: [3, 0x7fff_0000, 512, 0, 0, 0],
            },
            KernelEvent::Exit {
                nr: 0,
                ns: 160,
                ret: -2,
            },
            KernelEvent::Enter {
                nr: 231,
                ns: 400,
                args: [0; 6],
            },
        ];
        for e in &evs {
            w.write(e).unwrap();
        }
        assert_eq!(w.finish().unwrap(), 3);
        let mut r = KernelReader::open(&path).unwrap();
        for e in &evs {
            assert_eq!(r.next_event().as_ref(), Some(e));
        }
        assert_eq!(r.next_event(), None);

        let ev = |kind, func, ns| Event {
            kind,
            func,
            tsc: 0,
            ns,
        };
        let mut m = KernelMerge::new(KernelReader::open(&path).unwrap());
        let mut batch = vec![ev(EventKind::Entry, 1, 100), ev(EventKind::Exit, 1, 200)];
        m.merge(&mut batch, false);
        let kinds: Vec<EventKind> = batch.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [Entry, Syscall, Data, Data, Data, SyscallExit, Data, Exit]
        );
        assert_eq!(batch[1].func, 0);
        // The result's bytes, and no time off the CPU.
        let (b, n) = batch[6].data_bytes();
        assert_eq!(
            (i64::from_le_bytes(b[..8].try_into().unwrap()), n),
            (-2, 16)
        );
        assert_eq!(u64::from_le_bytes(b[8..].try_into().unwrap()), 0);
        // The last one waits for a later batch, or the end.
        assert!(m.has_more());
        let mut rest = Vec::new();
        m.merge(&mut rest, true);
        assert_eq!(rest[0].kind, Syscall);
        assert_eq!(rest[0].func, 231);
        assert!(!m.has_more());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn signals_and_kernel_functions_round_trip_and_nest() {
        let dir = std::env::temp_dir().join(format!("fctrace-kernel-test2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.sys");
        let mut w = KernelWriter::new(File::create(&path).unwrap(), &path).unwrap();
        let f = |ns, name: &str| KernelEvent::FuncEntry {
            ns,
            name: name.into(),
        };
        let x = |ns, dur, name: &str| KernelEvent::FuncExit {
            ns,
            dur,
            name: name.into(),
        };
        let evs = [
            KernelEvent::Enter {
                nr: 0,
                ns: 1_000,
                args: [0; 6],
            },
            f(1_999, "ksys_read"),
            f(1_999, "vfs_read"),
            x(2_300, 301, "vfs_read"),
            KernelEvent::Exit {
                nr: 0,
                ns: 2_500,
                ret: 5,
            },
            // Printed in the microsecond the call returned in: its own.
            x(2_999, 1_200, "ksys_read"),
            KernelEvent::Signal {
                ns: 3_000,
                sig: 10,
                code: -6,
                errno: 0,
                handler: 0x1234,
                flags: 0x0400_0000,
            },
            // Outside any system call.
            f(5_999, "handle_mm_fault"),
            x(5_999, 400, "handle_mm_fault"),
        ];
        for e in &evs {
            w.write(e).unwrap();
        }
        assert_eq!(w.finish().unwrap(), evs.len() as u64);
        let mut r = KernelReader::open(&path).unwrap();
        for e in &evs {
            assert_eq!(r.next_event().as_ref(), Some(e));
        }
        assert_eq!(r.next_event(), None);

        let mut m = KernelMerge::new(KernelReader::open(&path).unwrap());
        let mut out = Vec::new();
        m.merge(&mut out, true);
        use EventKind::*;
        let kinds: Vec<EventKind> = out.iter().map(|e| e.kind).filter(|k| *k != Data).collect();
        assert_eq!(
            kinds,
            [
                Syscall,
                KernelEntry,
                KernelEntry,
                KernelExit,
                KernelExit,
                SyscallExit,
                KernelSignal,
                KernelEntry,
                KernelExit
            ]
        );
        let sig = out.iter().position(|e| e.kind == KernelSignal).unwrap();
        assert_eq!(out[sig].func, 10);
        let (b, _) = out[sig + 1].data_bytes();
        assert_eq!(i64::from_le_bytes(b[..8].try_into().unwrap()), -6);
        // An exit's duration, then its name.
        let exit = out.iter().position(|e| e.kind == KernelExit).unwrap();
        let (b, n) = out[exit + 1].data_bytes();
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 301);
        assert_eq!(&b[8..10], &8u16.to_le_bytes());
        assert_eq!(n, 16);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The agent's marker on a crash signal: its delivery is followed by
    /// the same signal's at the default action, the one shown; a
    /// program's handler (other flags) is shown with its own.
    #[test]
    fn the_agents_marker_delivery_is_not_shown() {
        let dir = std::env::temp_dir().join(format!("fctrace-kernel-test3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.sys");
        let mut w = KernelWriter::new(File::create(&path).unwrap(), &path).unwrap();
        let sig = |ns, sig, handler, flags| KernelEvent::Signal {
            ns,
            sig,
            code: 1,
            errno: 0,
            handler,
            flags,
        };
        for e in [
            // A program handler, then its re-raise at the default action.
            sig(100, 11, 0x5555_0000, 0x0400_0004),
            sig(200, 11, 0, 0x0400_0000),
            // The marker, rt_sigreturn, the fault again.
            sig(300, 11, 0x7f00_0000, AGENT_MARKER_FLAGS),
            KernelEvent::Enter {
                nr: 15,
                ns: 310,
                args: [0; 6],
            },
            KernelEvent::Fault {
                ns: 320,
                addr: 0,
                ip: 0x5555_1000,
            },
            sig(330, 11, 0, 0x0400_0000),
        ] {
            w.write(&e).unwrap();
        }
        w.finish().unwrap();
        let mut m = KernelMerge::new(KernelReader::open(&path).unwrap());
        let mut out = Vec::new();
        m.merge(&mut out, true);
        let shown: Vec<u64> = out
            .iter()
            .filter(|e| e.kind == EventKind::KernelSignal)
            .map(|e| e.ns)
            .collect();
        assert_eq!(shown, [100, 200, 330]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An int3 of the agent's trap fallback: its SIGTRAP delivery and the
    /// tagged rt_sigreturn that ends its frame are not shown, even with a
    /// program's signal delivered on top of it (whose frame ends first);
    /// a program's own int3 (its handler's rt_sigreturn is not tagged)
    /// is shown.
    #[test]
    fn the_agents_trap_frames_are_not_shown() {
        let dir = std::env::temp_dir().join(format!("fctrace-kernel-test4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.sys");
        let mut w = KernelWriter::new(File::create(&path).unwrap(), &path).unwrap();
        let trap = |ns| KernelEvent::Signal {
            ns,
            sig: SIGTRAP,
            code: SI_KERNEL,
            errno: 0,
            handler: 0x7f00_0000,
            flags: 0x0400_0004,
        };
        let sigreturn = |ns, tagged: bool| {
            let mut args = [0u64; 6];
            if tagged {
                args[4] = crate::shm::KERNEL_TAG[0];
                args[5] = crate::shm::KERNEL_TAG[1];
            }
            [
                KernelEvent::Enter {
                    nr: RT_SIGRETURN,
                    ns,
                    args,
                },
                KernelEvent::Exit {
                    nr: RT_SIGRETURN,
                    ns: ns + 1,
                    ret: 0,
                },
            ]
        };
        let mut events = vec![trap(100)];
        events.extend(sigreturn(110, true));
        // The program's int3, to its handler, which makes a call.
        events.push(trap(200));
        events.push(KernelEvent::Enter {
            nr: 39,
            ns: 210,
            args: [0; 6],
        });
        events.push(KernelEvent::Exit {
            nr: 39,
            ns: 211,
            ret: 7,
        });
        events.extend(sigreturn(220, false));
        // The agent's int3, then SIGUSR1 delivered on top of its frame.
        events.push(trap(300));
        events.push(KernelEvent::Signal {
            ns: 301,
            sig: 10,
            code: 0,
            errno: 0,
            handler: 0x7f00_0000,
            flags: 0x0400_0004,
        });
        events.extend(sigreturn(310, false));
        events.extend(sigreturn(320, true));
        for e in &events {
            w.write(e).unwrap();
        }
        w.finish().unwrap();
        let mut m = KernelMerge::new(KernelReader::open(&path).unwrap());
        let mut out = Vec::new();
        m.merge(&mut out, true);
        let shown: Vec<(EventKind, u64)> = out
            .iter()
            .filter(|e| e.kind != EventKind::Data)
            .map(|e| (e.kind, e.ns))
            .collect();
        use EventKind::*;
        assert_eq!(
            shown,
            [
                (KernelSignal, 200),
                (Syscall, 210),
                (SyscallExit, 211),
                (Syscall, 220),
                (SyscallExit, 221),
                (KernelSignal, 301),
                (Syscall, 310),
                (SyscallExit, 311),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The loader's work for the agent's files, from a program's start:
    /// the agent's `openat`, calls on its descriptor, mappings inside its
    /// reservation (later too: RELRO), a library only it needs (its failed
    /// search included); the program's libraries and the rest kept.
    #[test]
    fn the_loaders_work_for_the_agent_is_the_agents() {
        let mut ns = 0;
        let mut t = Vec::new();
        let mut call =
            |t: &mut Vec<KernelEvent>, nr: u16, args: [u64; 6], path: Option<&str>, ret: i64| {
                ns += 10;
                t.push(KernelEvent::Enter { nr, ns, args });
                if let Some(p) = path {
                    t.push(KernelEvent::Path {
                        ns: ns + 1,
                        nr,
                        bytes: p.as_bytes().into(),
                    });
                }
                t.push(KernelEvent::Exit {
                    nr,
                    ns: ns + 2,
                    ret,
                });
            };
        let at = 0xffff_ff9c; // AT_FDCWD
        let (a, l, g) = (
            0x7f00_0000_0000u64,
            0x7f10_0000_0000u64,
            0x7f20_0000_0000u64,
        );
        // 0..=8: the agent (a path of fctrace's own /proc, its memfd).
        call(&mut t, 257, [at, 1, 0, 0, 0, 0], Some("/proc/77/fd/4"), 3);
        call(&mut t, 0, [3, 2, 832, 0, 0, 0], None, 832);
        call(&mut t, 262, [3, 2, 3, 0x1000, 0, 0], Some(""), 0);
        call(&mut t, 9, [0, 0x1000, 1, 0x802, 3, 0], None, a as i64);
        let fault = t.len();
        t.push(KernelEvent::Fault {
            ns: 0,
            addr: a,
            ip: 1,
        });
        call(
            &mut t,
            9,
            [a + 0x100, 0x200, 5, 0x812, 3, 0x100],
            None,
            (a + 0x100) as i64,
        );
        call(
            &mut t,
            9,
            [a + 0x800, 0x100, 3, 0x32, u64::MAX, 0],
            None,
            (a + 0x800) as i64,
        );
        call(&mut t, 3, [3, 0, 0, 0, 0, 0], None, 0);
        // 9..: the program's: the cache, libc (the same descriptor again).
        let program = t.len();
        call(
            &mut t,
            257,
            [at, 1, 0, 0, 0, 0],
            Some("/etc/ld.so.cache"),
            3,
        );
        call(&mut t, 262, [3, 2, 3, 0x1000, 0, 0], Some(""), 0);
        call(&mut t, 3, [3, 0, 0, 0, 0, 0], None, 0);
        call(&mut t, 257, [at, 1, 0, 0, 0, 0], Some("/lib/libc.so.6"), 3);
        call(&mut t, 0, [3, 2, 832, 0, 0, 0], None, 832);
        call(&mut t, 9, [0, 0x1000, 1, 0x802, 3, 0], None, l as i64);
        call(
            &mut t,
            9,
            [l + 0x100, 0x200, 5, 0x812, 3, 0x100],
            None,
            (l + 0x100) as i64,
        );
        call(&mut t, 3, [3, 0, 0, 0, 0, 0], None, 0);
        let agents_dep = t.len();
        // A library only the agent needs: its search, then it.
        call(
            &mut t,
            257,
            [at, 1, 0, 0, 0, 0],
            Some("/opt/lib/libgcc_s.so.1"),
            -2,
        );
        call(
            &mut t,
            257,
            [at, 1, 0, 0, 0, 0],
            Some("/lib/libgcc_s.so.1"),
            3,
        );
        call(&mut t, 9, [0, 0x1000, 1, 0x802, 3, 0], None, g as i64);
        call(&mut t, 3, [3, 0, 0, 0, 0, 0], None, 0);
        let relro = t.len();
        call(&mut t, 10, [l + 0x100, 0x100, 1, 0, 0, 0], None, 0);
        call(&mut t, 10, [g + 0x100, 0x100, 1, 0, 0, 0], None, 0);
        call(&mut t, 10, [a + 0x100, 0x100, 1, 0, 0, 0], None, 0);
        // A read of the program's on descriptor 3, now its own.
        call(&mut t, 0, [3, 2, 8, 0, 0, 0], None, 8);
        let only = |p: &[u8]| p == b"/proc/77/fd/4" || p.ends_with(b"/libgcc_s.so.1");
        let theirs = agents_loading(&t, &only);
        let kept: Vec<usize> = (0..t.len()).filter(|&i| !theirs[i]).collect();
        let expected: Vec<usize> = (program..agents_dep)
            .chain(relro..relro + 2)
            .chain(relro + 6..t.len())
            .collect();
        // (the agent's fault between two of its calls is not a call: kept)
        assert_eq!(kept, [vec![fault], expected].concat(), "{t:#?}");
        // A path recorded before its entry (an older trace) goes with it.
        let old = vec![
            KernelEvent::Path {
                ns: 1,
                nr: 257,
                bytes: b"/proc/self/fd/5".as_slice().into(),
            },
            KernelEvent::Enter {
                nr: 257,
                ns: 2,
                args: [at, 1, 0, 0, 0, 0],
            },
            KernelEvent::Exit {
                nr: 257,
                ns: 3,
                ret: 4,
            },
            KernelEvent::Enter {
                nr: 3,
                ns: 4,
                args: [4, 0, 0, 0, 0, 0],
            },
            KernelEvent::Exit {
                nr: 3,
                ns: 5,
                ret: 0,
            },
        ];
        assert_eq!(
            agents_loading(&old, &|p| p.starts_with(b"/proc/self/fd/")),
            [true; 5]
        );
    }
}
