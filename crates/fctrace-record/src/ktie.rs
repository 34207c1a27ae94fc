//! `record -K`: ties each tree of kernel functions to the system call it
//! ran in, before the recorder sorts them with the system calls.
//!
//! A system call's entry and return (`-k`'s tracepoints) have nanosecond
//! times; ftrace prints its functions' times in microseconds, and the
//! parser (`kgraph.rs`) puts each at the last nanosecond of its
//! microsecond, so a function's time is at most 999 ns after the truth.
//! A short call (a read at the end of a file) can return, and the
//! thread's next call begin, within that microsecond: sorted by time, the
//! call's functions would come after its return, under the next call.
//!
//! The parser says which system call each tree is of (its root,
//! `__x64_sys_NAME`, kept even where `-F`/`-N` leave it out) and numbers
//! the trees of each thread. Each thread's trees of one system call are
//! matched, in order, with that thread's calls of it: a tree belongs to
//! the earliest call not matched before that entered before the tree
//! began and returned at most 999 ns before (or has not returned yet).
//! Its times past the call's return are put 1 ns before the return.
//! A tree outside system calls (a page fault's while the thread ran its
//! own code, as the parser says from its root) ran before the thread's
//! next system call: its times past that call's entry are put 1 ns
//! before it (else the end of a fault taken just before a call would
//! sort inside the call). Times never move otherwise, and the order
//! within a tree is kept.

use crate::kgraph::FuncEvent;
use fctrace_format::store::kernel::{KernelEvent, FUNC_TIME_SLACK};
use std::collections::{HashMap, VecDeque};

/// A thread's tree being tied: its number, the call it is tied to (its
/// number and entry time) and the time its events must stay below (where
/// its call returned, or the next call began), if known. A tree can
/// begin in one drain and end in a later one, after its call's return
/// was read: the limit is looked up again until it is known.
struct Open {
    tree: u64,
    call: Option<(u16, u64)>,
    limit: Option<u64>,
}

/// A call's window: its entry's time and its return's, if read yet.
type Window = (u64, Option<u64>);

/// The windows kept per thread and system call, and the entries per
/// thread, at most (older ones are dropped: a tree is never that late).
const KEPT: usize = 256;

/// What tying keeps from one drain to the next.
#[derive(Default)]
pub struct Ties {
    /// Per thread, the tree last seen.
    open: HashMap<u32, Open>,
    /// Per thread and system call, the entry time of the call last tied.
    last: HashMap<(u32, u16), u64>,
    /// Per thread and system call, its recent calls' windows in time
    /// order (a call can outlast many drains: its entry was written long
    /// before its functions and its return are read).
    calls: HashMap<(u32, u16), VecDeque<Window>>,
    /// Per thread, its recent system calls' entry times, in order.
    entries: HashMap<u32, VecDeque<u64>>,
    /// Events whose times were moved (for tests and notes).
    pub moved: u64,
}

fn set_ns(e: &mut KernelEvent, to: u64) {
    match e {
        KernelEvent::FuncEntry { ns, .. } | KernelEvent::FuncExit { ns, .. } => *ns = to,
        _ => {}
    }
}

impl Ties {
    /// Notes the system call entries and returns just read (`new`, each
    /// once, in any order).
    pub fn note(&mut self, new: &[(u32, KernelEvent)]) {
        let mut points: Vec<(u64, bool, u32, u16)> = new
            .iter()
            .filter_map(|(tid, e)| match *e {
                KernelEvent::Enter { nr, ns, .. } => Some((ns, false, *tid, nr)),
                KernelEvent::Exit { nr, ns, .. } => Some((ns, true, *tid, nr)),
                _ => None,
            })
            .collect();
        points.sort_unstable();
        for (ns, exit, tid, nr) in points {
            let calls = self.calls.entry((tid, nr)).or_default();
            if exit {
                // (A return whose entry came before the recording: none.)
                if let Some(last) = calls.back_mut().filter(|l| l.1.is_none()) {
                    last.1 = Some(ns);
                }
                continue;
            }
            calls.push_back((ns, None));
            if calls.len() > KEPT {
                calls.pop_front();
            }
            let entries = self.entries.entry(tid).or_default();
            entries.push_back(ns);
            if entries.len() > KEPT {
                entries.pop_front();
            }
        }
    }

    /// Moves the times of `funcs` (just parsed, in each thread's order)
    /// that lie past the end of where their tree ran: the return of its
    /// system call, or for a tree begun in the thread's own code the
    /// thread's next system call's entry; those as [`Ties::note`] was
    /// told.
    pub fn tie(&mut self, funcs: &mut [FuncEvent]) {
        for f in funcs.iter_mut() {
            let at = f.event.ns();
            let open = self.open.entry(f.tid).or_insert(Open {
                tree: 0,
                call: None,
                limit: None,
            });
            if open.tree != f.tree {
                open.tree = f.tree;
                open.call = None;
                open.limit = match f.syscall {
                    Some(nr) => {
                        let after = self.last.get(&(f.tid, nr)).copied();
                        let found = self.calls.get(&(f.tid, nr)).and_then(|calls| {
                            calls.iter().copied().find(|&(entry, ret)| {
                                after.is_none_or(|a| entry > a)
                                    && entry <= at
                                    && ret.is_none_or(|r| at <= r + FUNC_TIME_SLACK)
                            })
                        });
                        if let Some(call) = found {
                            self.last.insert((f.tid, nr), call.0);
                            open.call = Some((nr, call.0));
                        }
                        found.and_then(|(_, ret)| ret)
                    }
                    // It began at most 999 ns before its first time and
                    // ran before the thread's next system call.
                    None if f.user => self.entries.get(&f.tid).and_then(|v| {
                        let from = at.saturating_sub(FUNC_TIME_SLACK);
                        v.get(v.partition_point(|&e| e <= from)).copied()
                    }),
                    None => None,
                };
            } else if let (None, Some((nr, entry))) = (open.limit, open.call) {
                // Its call's return, read since the tree began.
                open.limit = self
                    .calls
                    .get(&(f.tid, nr))
                    .and_then(|calls| calls.iter().find(|w| w.0 == entry))
                    .and_then(|w| w.1);
            }
            if let Some(limit) = open.limit {
                if at >= limit {
                    set_ns(&mut f.event, limit.saturating_sub(1));
                    self.moved += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(tid: u32, nr: u16, ns: u64) -> (u32, KernelEvent) {
        (
            tid,
            KernelEvent::Enter {
                nr,
                ns,
                args: [0; 6],
            },
        )
    }

    fn exit(tid: u32, nr: u16, ns: u64) -> (u32, KernelEvent) {
        (tid, KernelEvent::Exit { nr, ns, ret: 0 })
    }

    fn func(tid: u32, nr: u16, tree: u64, ns: u64, entry: bool) -> FuncEvent {
        let name: Box<str> = "__x64_sys_read".into();
        FuncEvent {
            tid,
            event: if entry {
                KernelEvent::FuncEntry { ns, name }
            } else {
                KernelEvent::FuncExit { ns, dur: 0, name }
            },
            syscall: Some(nr),
            tree,
            user: false,
        }
    }

    /// The end-of-file read: entered at 1,000,100, returned at 1,000,600;
    /// the thread's close entered at 1,000,800. The read's tree was put
    /// at 1,000,999 (its microsecond's last nanosecond): it is moved to
    /// 1,000,599, inside the read, and sorts before the close.
    #[test]
    fn a_short_calls_tree_is_put_inside_it() {
        let pending = vec![
            enter(7, 0, 1_000_100),
            exit(7, 0, 1_000_600),
            enter(7, 3, 1_000_800),
        ];
        let mut funcs = vec![
            func(7, 0, 1, 1_000_999, true),
            func(7, 0, 1, 1_000_999, false),
        ];
        let mut t = Ties::default();
        t.note(&pending);
        t.tie(&mut funcs);
        assert!(funcs.iter().all(|f| f.event.ns() == 1_000_599));
        assert_eq!(t.moved, 2);
    }

    /// getppid three times in a row, each shorter than a microsecond: the
    /// k-th tree goes with the k-th call, not with a later one whose entry
    /// it follows.
    #[test]
    fn trees_go_with_calls_in_order() {
        let pending = vec![
            enter(7, 110, 2_000_100),
            exit(7, 110, 2_000_300),
            enter(7, 110, 2_000_400),
            exit(7, 110, 2_000_600),
            enter(7, 110, 2_000_700),
            exit(7, 110, 2_000_900),
        ];
        let mut funcs = vec![
            func(7, 110, 1, 2_000_999, true),
            func(7, 110, 1, 2_000_999, false),
            func(7, 110, 2, 2_000_999, true),
            func(7, 110, 2, 2_000_999, false),
            func(7, 110, 3, 2_000_999, true),
            func(7, 110, 3, 2_000_999, false),
        ];
        let mut t = Ties::default();
        t.note(&pending);
        t.tie(&mut funcs);
        let times: Vec<u64> = funcs.iter().map(|f| f.event.ns()).collect();
        assert_eq!(
            times,
            [2_000_299, 2_000_299, 2_000_599, 2_000_599, 2_000_899, 2_000_899]
        );
    }

    /// A tree inside its call's window, a call not returned yet, another
    /// thread's call and a tree of no system call: nothing moves.
    #[test]
    fn times_inside_their_calls_stay() {
        let pending = vec![
            enter(7, 0, 3_000_000),
            exit(7, 0, 3_009_000),
            enter(8, 0, 3_000_000),
            enter(7, 1, 3_010_000),
        ];
        let mut funcs = vec![
            func(7, 0, 1, 3_001_999, true),
            func(7, 0, 1, 3_008_999, false),
            func(7, 1, 2, 3_010_999, true),
            func(8, 0, 1, 3_020_999, true),
            FuncEvent {
                syscall: None,
                ..func(7, 0, 3, 3_030_999, true)
            },
        ];
        let before: Vec<u64> = funcs.iter().map(|f| f.event.ns()).collect();
        let mut t = Ties::default();
        t.note(&pending);
        t.tie(&mut funcs);
        let after: Vec<u64> = funcs.iter().map(|f| f.event.ns()).collect();
        assert_eq!(before, after);
        assert_eq!(t.moved, 0);
    }

    /// A page fault in user mode just before a system call: its times
    /// past the call's entry go just before it, the earlier ones stay.
    #[test]
    fn a_tree_outside_calls_stays_before_the_next_call() {
        let pending = vec![enter(7, 14, 5_000_500), exit(7, 14, 5_003_000)];
        let none = |ns, entry| FuncEvent {
            syscall: None,
            user: true,
            ..func(7, 0, 4, ns, entry)
        };
        let mut funcs = vec![
            none(4_999_999, true),
            none(5_000_999, true),
            none(5_000_999, false),
            none(5_001_999, false),
        ];
        let mut t = Ties::default();
        t.note(&pending);
        t.tie(&mut funcs);
        let times: Vec<u64> = funcs.iter().map(|f| f.event.ns()).collect();
        assert_eq!(times, [4_999_999, 5_000_499, 5_000_499, 5_000_499]);
    }

    /// A long read: its entry was read (and written) drains before its
    /// return and its functions; they are still tied to it.
    #[test]
    fn a_call_read_over_several_drains_is_still_tied() {
        let mut t = Ties::default();
        t.note(&[enter(7, 0, 6_000_000)]);
        t.note(&[exit(7, 0, 9_000_100), enter(7, 14, 9_000_300)]);
        let mut funcs = vec![
            func(7, 0, 1, 6_000_999, true),
            func(7, 0, 1, 9_000_999, false),
        ];
        t.tie(&mut funcs);
        let times: Vec<u64> = funcs.iter().map(|f| f.event.ns()).collect();
        assert_eq!(times, [6_000_999, 9_000_099]);
    }

    /// A tree parsed over two drains, its call's return read between
    /// them (ld.so's pread64, preempted): the second part's times past the
    /// return are tied to the call as well.
    #[test]
    fn a_tree_read_over_two_drains_is_tied_in_both() {
        let mut t = Ties::default();
        t.note(&[enter(7, 17, 7_000_000)]);
        let mut first = vec![func(7, 17, 1, 7_000_999, true)];
        t.tie(&mut first);
        assert_eq!(first[0].event.ns(), 7_000_999);
        t.note(&[exit(7, 17, 7_002_100), enter(7, 5, 7_002_300)]);
        let mut second = vec![
            func(7, 17, 1, 7_001_999, true),
            func(7, 17, 1, 7_002_999, false),
        ];
        t.tie(&mut second);
        let times: Vec<u64> = second.iter().map(|f| f.event.ns()).collect();
        assert_eq!(times, [7_001_999, 7_002_099]);
        assert_eq!(t.moved, 1);
    }

    /// A tree that began more than 999 ns after its call's return is not
    /// that call's (a lost return, another call): left where it is.
    #[test]
    fn a_tree_far_past_a_return_is_not_tied() {
        let pending = vec![enter(7, 0, 4_000_000), exit(7, 0, 4_000_500)];
        let mut funcs = vec![func(7, 0, 1, 4_001_999, true)];
        let mut t = Ties::default();
        t.note(&pending);
        t.tie(&mut funcs);
        assert_eq!(funcs[0].event.ns(), 4_001_999);
    }
}
