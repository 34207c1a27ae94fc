//! What is recorded: record-time filters and triggers, arguments and
//! return values, which functions are patched at all (`select`). Uses `runtime` (and `arch`) only.
pub mod args;
pub mod filter;
pub mod select;
