//! The call tree, uftrace style:
//!
//! ```text
//! # DURATION     TID     FUNCTION
//! # task 0: pid 4321, tid 4321 (prog), /usr/bin/prog, the program started
//!             [ 4321] | main() {
//!             [ 4321] |   parse_args() {
//!    0.210 us [ 4321] |     strtol();
//!    0.902 us [ 4321] |   } /* parse_args */
//!    0.118 us [ 4321] |   leaf();
//!    5.774 us [ 4321] | } /* main */
//! ```
//!
//! Every task of the trace is printed in one stream in time order (as
//! uftrace does; [`merge`]): each line has its task's tid, each task its
//! own indentation; a task's header line `# task ID: pid P, tid T (COMM),
//! PROGRAM, ORIGIN` (ORIGIN: `the program started`, `thread of task N`,
//! `forked by task N`, `exec by task N`, `spawned by task N`) comes before
//! its first line. A forked child starts with the calls its parent had
//! open at the fork (their opening lines, at their depths). With
//! `--task-order` ([`TreeStyle`]) the tasks are printed one after the other
//! in the order of info.json (order of creation), tasks after the first
//! preceded by an empty line. Memory does not grow with the trace: with
//! the tasks running at one time and their depths. Within a task:
//! - a function whose exit directly follows its entry is a leaf, one line
//!   `name();` with its duration;
//!   (in time order: whose exit is the next event of its task, even if
//!   other tasks' lines come during it; the line is at its entry's time);
//! - otherwise `name() {` at entry and `} /* name */` with the duration at
//!   exit; 2 spaces of indent per depth, from depth 0;
//! - a recorded return value (`-R`, `-a`) reads as uftrace prints it: on
//!   a leaf `measure(3) = 6;`, on a closing line `} = 6; /* measure */`;
//! - beyond depth [`MAX_INDENT_DEPTH`] the indent stops growing: such lines
//!   have the indent of that depth followed by `(depth N) `, N the real
//!   depth (so lines stay short and the output linear in the events);
//! - an exit by `Unwind` adds ` (unwound)`;
//! - an exit of a function that is open but not on top closes the frames
//!   above it with `} /* name */ (not returned)`, without duration; so do
//!   the frames still open when a task's events end (the process exited or
//!   was killed below them, the thread was killed);
//! - an exit of a function that is not open at all (its entry was not
//!   recorded) prints `} /* name */ (entry not recorded)`;
//! - the calls an attach chain names (open when fctrace attached:
//!   `fctrace_format::argval`) open the task, `main() { /* entered before
//!   the trace began */`; those of a history chain (open where a flight
//!   recorder's kept history begins) have no opening line; what follows
//!   is at its depth inside them; their returns print `} /* name */
//!   (entry not recorded)`, or `(entry not in history)` for a history
//!   chain, without duration;
//! - the calls open where a `trace_on` trigger turned tracing on (a
//!   resume chain), entered while it was off, open there, `main() { /*
//!   entered while tracing was off */`, and close at their end marks,
//!   `} /* main */ (entry not recorded)`;
//! - of both chains, only the calls `-F`/`-N` show open: the recording's
//!   filters are applied to the chain here
//!   ([`ChainChoice`](crate::filter::ChainChoice)), a display filter
//!   passes on a chain of the calls it shows (an `Args` event without
//!   function; a resume chain there opens all its calls) and their end
//!   marks as returns;
//! - a `Signal` record prints `/* signal SIGUSR1 */` (or `/* signal 40 */`)
//!   at the current depth, without duration: the calls of the handler
//!   follow at the same depth, as calls of the interrupted function; a
//!   fatal signal is the last line of its task before the frames closed as
//!   not returned;
//! - a `Lost` record prints `... N events lost ...`.
//!
//! With `--last N` ([`last`]) each task shows only its last N calls, with
//! the calls open around them, the task that crashed first.
//!
//! With colour on (`--color`, see [`crate::term`]), the unit of a duration
//! of a millisecond or more and the markers above are painted; the
//! common lines take the same code either way.
//!
//! The files, from the bottom up: [`style`] (the header, the task headers
//! and the `-f` columns), [`frame`] (an open call), [`sink`] (where a
//! task's lines are composed), [`task`] (one task's lines), [`merge`] (the
//! tasks in time order), [`last`] (`--last N`) and [`write`] (the entry
//! points).

mod frame;
mod last;
mod merge;
mod sink;
mod style;
mod task;
mod write;

#[cfg(test)]
mod tests;

pub use style::{
    parse_fields, session_program, Field, KernelShown, TreeStyle, TreeSummary, HEADER,
    KERNEL_MODULE, MAX_INDENT_DEPTH,
};
#[cfg(any(test, feature = "testutil"))]
pub use write::{print_tree, print_tree_with, write_tree, write_tree_with};
pub use write::{print_tree_styled, write_tree_styled};
