//! Deciding what is recorded: filters, triggers and arguments.
pub mod args;
pub mod filter;
