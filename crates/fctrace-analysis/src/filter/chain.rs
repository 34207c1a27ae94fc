//! The chains of calls the agent records in an `Args` payload (open
//! where tracing resumed, open when fctrace attached, backtraces, end
//! marks): read from a task's events, and which of their calls the tree
//! opens without display filters ([`ChainChoice`]).

use super::flags::{exe_module, hidden};
use super::options::display_only;
use fctrace_format::event::EventKind;
use fctrace_format::store::{Event, TaskEvents, Trace};
use fctrace_format::symtab::SymTab;
use fctrace_options::pattern::name_forms_at;
use fctrace_options::{FuncPattern, Options};
use std::collections::VecDeque;

/// The calls open at an entry, recorded by the agent after it (outermost
/// first).
pub(super) struct Chain {
    pub(super) funcs: Vec<u32>,
    /// Recorded because tracing resumed there (else a backtrace).
    pub(super) resume: bool,
    /// An end mark: the call of `funcs[0]`, open where tracing resumed
    /// (entered while it was off), ends here.
    pub(super) end: bool,
    /// The calls open when fctrace attached (entries not recorded), at
    /// the start of a task.
    pub(super) attached: bool,
    /// With `attached`: the calls open where a flight recorder's history
    /// begins (a history chain).
    pub(super) history: bool,
}

/// Which calls of a chain the agent recorded (open when fctrace attached,
/// or where a `trace_on` trigger turned tracing on) the tree opens when it
/// reads the events unfiltered: those the recording's `-F`/`-N` chose (a
/// call is inside a `-F` function, or is one, and neither inside nor
/// itself a `-N` function, as the agent decides; the chain is the whole
/// stack), but the hidden ones ([`hidden`]). With display filters the
/// filter decides instead ([`Visibility::draw_opened`]).
pub struct ChainChoice {
    pub(super) filters: Vec<FuncPattern>,
    pub(super) notrace: Vec<FuncPattern>,
    pub(super) display: Options,
}

impl ChainChoice {
    /// For `trace` shown with the display options of `given`.
    pub fn new(trace: &Trace, given: &Options) -> ChainChoice {
        let recorded = Options::from_wire(&trace.info.options).unwrap_or_default();
        ChainChoice {
            filters: recorded.filters,
            notrace: recorded.notrace,
            display: display_only(given),
        }
    }

    /// Per call of `chain` (function ids of `table`, outermost first):
    /// whether it is shown.
    pub fn shown(&self, table: Option<&SymTab>, chain: &[u32]) -> Vec<bool> {
        let exe = table.map_or(0, exe_module);
        let (mut in_filter, mut in_notrace) = (false, false);
        chain
            .iter()
            .map(|&id| {
                let Some(func) = table.and_then(|t| t.function(id)) else {
                    return !in_notrace && (self.filters.is_empty() || in_filter);
                };
                let module = table
                    .and_then(|t| t.module(func.module))
                    .map_or("", |m| m.path.as_str());
                let display = fctrace_symbols::demangle(&func.name);
                let at = fctrace_format::symtab::unnamed_function_name(module, func.addr);
                let names = name_forms_at(&func.name, &display, &at);
                let filter = self.filters.iter().any(|p| p.matches(module, names));
                let notrace = self.notrace.iter().any(|p| p.matches(module, names));
                in_filter |= filter;
                in_notrace |= notrace;
                !in_notrace
                    && (self.filters.is_empty() || in_filter)
                    && !hidden(&self.display, func, exe)
            })
            .collect()
    }
}

/// The chain of calls open where tracing resumed, recorded by the agent
/// as the payload of the `Args` event right after the entry of `func`
/// whose next event `src` holds: the events read are put in `ahead`. A
/// backtrace (the same chain, for a `backtrace` trigger) serves too.
#[cold]
#[inline(never)]
pub(super) fn read_chain(
    func: u32,
    src: &mut TaskEvents,
    ahead: &mut VecDeque<Event>,
) -> Option<Chain> {
    let args = src.next_event()?;
    ahead.push_back(args);
    if args.kind != EventKind::Args || args.func != func {
        return None;
    }
    let mut bytes = Vec::new();
    while let Some(d) = src.next_event() {
        ahead.push_back(d);
        if d.kind != EventKind::Data {
            break;
        }
        crate::args::push_data(&d, &mut bytes);
    }
    fctrace_format::argval::decode_backtrace(&bytes)
        .filter(|b| !b.end && !b.attached)
        .map(|b| Chain {
            funcs: b.funcs,
            resume: b.resume,
            end: false,
            attached: false,
            history: false,
        })
}

/// For an `Args` event just read from `src`: its payload if it is an end
/// mark (`fctrace_format::argval`), whose `Data` events are then consumed;
/// else `None`, and the events read are put in `ahead`, in order.
#[cold]
#[inline(never)]
pub(super) fn read_end_mark(src: &mut TaskEvents, ahead: &mut VecDeque<Event>) -> Option<Chain> {
    let mut bytes = Vec::new();
    let mut data = Vec::new();
    let mut after = None;
    while let Some(d) = src.next_event() {
        if d.kind != EventKind::Data {
            after = Some(d);
            break;
        }
        crate::args::push_data(&d, &mut bytes);
        data.push(d);
    }
    let chain = fctrace_format::argval::decode_backtrace(&bytes)
        .filter(|b| (b.end && b.funcs.len() == 1) || b.attached)
        .map(|b| Chain {
            funcs: b.funcs,
            resume: !b.attached,
            end: b.end,
            attached: b.attached,
            history: b.history,
        });
    if chain.is_none() {
        ahead.extend(data);
    }
    ahead.extend(after);
    chain
}
