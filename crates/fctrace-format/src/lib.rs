//! fctrace's data formats.
//!
//! - [`event`]: the 16-byte event record the agent writes.
//! - [`symtab`]: the per-session symbol table text file (`sessions/<id>.sym`),
//!   written incrementally by the agent, parsed by the readers. Needs only std.
//! - [`shm`]: the shared-memory protocol between the agent and the recorder.
//! - [`store`] (feature `store`): the on-disk trace directory, writer and
//!   reader. See `docs/format.md` for the byte-level description.

#![forbid(unsafe_code)]

pub mod argval;
pub mod digits;
pub mod event;
pub mod shm;
pub mod symtab;

#[cfg(feature = "store")]
pub mod store;
