//! The orders a table of a trace can be sorted in (`report -s`, `report
//! --diff`, `report -k`): a plain value the command line converts its
//! option into.

/// What a table is sorted by, largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// The total time.
    Total,
    /// The self time (`report -k`: the time, as `Total`).
    SelfTime,
    /// The number of calls.
    Calls,
}
