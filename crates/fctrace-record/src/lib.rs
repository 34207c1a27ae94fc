//! fctrace-record: everything that produces a trace directory. It starts a
//! program with the agent preloaded, or attaches to a running process and
//! loads the agent into it, and drains the agent's shared memory into a
//! trace until the program ends or fctrace detaches. This is fctrace's
//! process-control crate: its unsafe code (ptrace, signals, mappings)
//! lives here, each block with a `// SAFETY:` comment.
//!
//! Modules:
//! - `record`: the recording from start to end ([`record()`]), in phases;
//!   the agent embedded (built by build.rs).
//! - `process`: launching the program, its signals, reaping, what its
//!   sessions left behind.
//! - `shm`: the shared memory the agents write and the recorder drains.
//! - `attach`: attaching to and detaching from a running process (ptrace);
//!   `stacks`: the stopped threads' stacks unwound; `ends`: how an
//!   attached process ended (the kernel's process events).
//! - `kernel`: `-k`'s system call tracepoints through perf_event_open;
//!   `bpf`: the BPF programs that copy paths; `kgraph`: `-K`'s kernel
//!   functions (ftrace's function_graph); `ktie`: their trees tied to
//!   the system calls they ran in; `kload`: the agent's own loading
//!   left out of the kernel's events; `perf`: tracefs and perf_event_open,
//!   which these share.
//! - `clock`: the recording's clock (`--clock`), shared with the kernel's
//!   events.
//! - `startcache`: the start-up cache's directory, and the entries the
//!   agents made installed there.

mod attach;
mod bpf;
pub mod clock;
mod ends;
mod facts;
mod flight;
mod kernel;
mod kgraph;
mod kload;
mod kstate;
mod kthread;
mod ktie;
mod perf;
mod process;
mod record;
mod shm;
mod sink;
mod stacks;
mod startcache;

pub use facts::system_facts;
pub use fctrace_format::store::RECORDER_PID_FILE;
pub use flight::RingOptions;
pub use process::{exit_like, ignore_terminal_interrupts};
pub use record::{end_like, record, AttachEnd, Outcome, RecordSettings, Target};
pub use startcache::default_dir as default_cache_dir;
