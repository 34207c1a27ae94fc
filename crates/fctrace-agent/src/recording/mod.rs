//! What is recorded: record-time filters and triggers, arguments and
//! return values. Uses `runtime` (and `arch`) only.
pub mod args;
pub mod filter;
