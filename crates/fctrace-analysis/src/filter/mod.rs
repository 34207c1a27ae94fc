//! The display-side filters: which recorded calls `replay`, `report` and
//! live mode show, driven by [`Options`] (`-F`, `-N`, `-C`, `-D`, `-t`,
//! `--tid`, `-T`), with uftrace's meaning.
//!
//! Display-only options ([`fctrace_options::display`]) act here too, for
//! every reader of the trace: the C runtime's own calls
//! ([`RUNTIME_FUNCTIONS`], unless `--show-runtime`) and with `--no-libcall`
//! the calls into shared libraries are hidden without their subtrees:
//! their entries, exits and values go, the calls they make are shown in
//! their place (at their depth in the tree; they are no level of `-D`).
//! Without any other option that is the only stage ([`Light`]: a flag
//! test per event); `-r START~STOP` is a last stage ([`Range`]) after the
//! others. `--demangle` acts on names ([`crate::names`]).
//!
//! A task's events go through up to three stages, each streaming:
//!
//! 1. **Visibility** (`-F`, `-N`, `-D`, `-T`), decided at a call's entry: a
//!    call is shown when tracing is on for its task, it is not inside (nor
//!    itself) a `-N` function, and, if any `-F` is given, it is inside (or
//!    itself) a `-F` function; then `-D N` keeps the N outermost levels of
//!    what is shown (levels count shown calls only: with `-F`, the `-F`
//!    function is level 1). Triggers act at the entry of their function,
//!    whether that call is shown or not: `trace_on` (the function itself is
//!    shown), `trace_off` (it is not), `depth=N` (the function's shown
//!    subtree is limited to N levels, the function being level 1, for as
//!    long as it runs; it only ever narrows `-D`), `backtrace` (a line
//!    `/* backtrace: main > a > b */`, the callers active at the entry,
//!    shown or not, is printed before the function in the tree), `finish`
//!    (nothing of the process is shown after it, not even the exits of the
//!    calls still open, which end as "not returned", as when the agent
//!    stops tracing; the function itself is not shown). `trace_on` and
//!    `trace_off` act on the task that hit them, or with `global` on every
//!    task of the same process; `finish` always acts on the whole process.
//!    Acting on other tasks goes in time order: a first pass over the
//!    process's tasks finds when (only when such a trigger is given). The exit of a shown call is
//!    shown; signal marks and argument values are shown when the call they
//!    happened in is; `Lost` marks are always shown. `--disable` and
//!    `--signal` are recording options only: the recorded trace already
//!    reflects them, and replay ignores them. Where a recorded `trace_on`
//!    trigger turned tracing on, the agent recorded the calls open then
//!    (entered while it was off) and marks where each ends: they count as
//!    open calls from that entry to that mark ([`Visibility::pull`]).
//!    For the tree, those of them shown, and those of an attach chain,
//!    are passed on as a chain for it to open ([`Visibility::draw_opened`];
//!    not with `-C`).
//! 2. **Callers** (`-C FUNC`): the calls of FUNC with their subtrees, and
//!    the chain of callers that led to each; every other call is hidden.
//!    A call outside FUNC is held until a call of FUNC is entered under it
//!    (it is then shown, with the rest of the chain) or it returns (it is
//!    then dropped): memory is one held entry per open call.
//! 3. **Time** (`-t TIME`): calls shorter than TIME are hidden with their
//!    subtrees; the calls around them keep their full durations (so their
//!    self time includes the hidden calls' time, in the report too). A call
//!    is held from its entry until it has lasted TIME (it is then shown:
//!    the time is taken from the later events) or it returns (it is then
//!    dropped): what is held is the entries of the open calls that have not
//!    yet lasted TIME and the marks inside them, never a finished subtree.
//!    Calls still open when the task's events end are shown (they never
//!    returned).
//!
//! `--tid` keeps only the tasks of those threads ([`Filter::wants_task`]).
//!
//! Patterns are resolved to function ids once per session symbol table (a
//! byte of flags per function), never per event; a trace read without any
//! of these options does not go through this module at all.
//!
//! The files, from the bottom up: [`source`] (the trait the readers read
//! a task's events through), [`flags`] (a byte per function, resolved
//! from the patterns), [`options`] (what the options ask), [`chain`] (the
//! chains of calls the agent records), [`warnings`] (patterns and tids
//! that name nothing); the stages [`light`], [`visibility`] (1), [`held`]
//! (2 and 3), [`range`] (`-r`), put together per task in [`events`]; and
//! [`pass`], the [`Filter`] of one pass over a trace, which builds them.

mod chain;
mod events;
mod flags;
mod held;
mod light;
mod options;
mod pass;
mod range;
mod source;
mod visibility;
mod warnings;

#[cfg(test)]
mod tests;

pub use chain::ChainChoice;
pub use events::FilteredEvents;
pub use flags::{is_runtime, RUNTIME_FUNCTIONS};
pub use options::{
    add_recorded_backtraces, display_only, filters_display, trace_start_ns, with_recorded_display,
};
pub use pass::Filter;
pub use source::EventSource;
pub use warnings::{unmatched_patterns, unmatched_tids, warn_tracing_gaps, warn_unmatched};
