//! fctrace's data formats.
//!
//! - [`event`]: the 16-byte event record the agent writes.
//! - [`symtab`]: the per-session symbol table text file (`sessions/<id>.sym`),
//!   written incrementally by the agent, parsed by the readers. Needs only std.
//! - [`shm`]: the shared-memory protocol between the agent and the recorder.
//! - [`syscall_table`]: x86_64 system call and error names by number (the
//!   recorder ties kernel functions to their system calls, readers print them).
//! - [`store`] (feature `store`): the on-disk trace directory, writer and
//!   reader. See `docs/format.md` for the byte-level description.
//! - [`stream`] (feature `store`): the network protocol of `record --host`
//!   and `recv`, which sends a trace directory over TCP.

#![forbid(unsafe_code)]

pub mod argval;
pub mod digits;
pub mod event;
pub mod shm;
pub mod symtab;
pub mod syscall_table;

#[cfg(feature = "store")]
pub mod store;
#[cfg(feature = "store")]
pub mod stream;
