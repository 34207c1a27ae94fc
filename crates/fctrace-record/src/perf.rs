//! The kernel's tracing interfaces that `-k` and `-K` share: where tracefs
//! is (mounted if it is not), the tracepoints' ids, and perf_event_open
//! with its attribute struct and what to say when the kernel refuses it
//! (`kernel.rs` opens the system call tracepoints with them, `kgraph.rs`
//! finds ftrace, `bpf.rs` attaches its programs to a plain tracepoint).

use anyhow::{bail, Result};

/// `struct perf_event_attr` (PERF_ATTR_SIZE_VER5).
#[repr(C)]
#[derive(Default)]
pub struct PerfEventAttr {
    pub kind: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved: u16,
}

pub const PERF_TYPE_TRACEPOINT: u32 = 2;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;
pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_INHERIT: u64 = 1 << 1;
pub const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;
pub const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub const FLAG_CONTEXT_SWITCH: u64 = 1 << 26;
pub const PERF_RECORD_SWITCH: u32 = 14;
pub const PERF_RECORD_MISC_SWITCH_OUT: u16 = 1 << 13;
pub const PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
pub const PERF_FLAG_FD_CLOEXEC: u64 = 1 << 3;
pub const PERF_EVENT_IOC_SET_OUTPUT: u64 = 0x2405;
pub const PERF_EVENT_IOC_ID: u64 = 0x8008_2407;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// Where tracefs is mounted.
pub const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Mounts tracefs at `/sys/kernel/tracing` when it is mounted at neither
/// place, as perf does, if this process may (root, in a mount namespace
/// where sysfs has the directory); says so once on stderr. Anything else
/// is left to the callers' messages, which say what is missing.
pub fn mount_tracefs_if_needed() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mounted = |root: &str| std::path::Path::new(root).join("events").is_dir();
        if TRACEFS.iter().any(|r| mounted(r)) || !std::path::Path::new(TRACEFS[0]).is_dir() {
            return;
        }
        let (src, target, fstype) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
        // SAFETY: mount(2) with NUL-terminated strings and no data; it
        // only fails (EPERM for a user who may not mount) or mounts.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if r == 0 && mounted(TRACEFS[0]) {
            eprintln!("fctrace: mounted tracefs at /sys/kernel/tracing (it was not mounted)");
        }
    });
}

/// The id of tracepoint `group:name` (tracefs mounted first if need be);
/// what is missing said if it cannot be read.
pub fn tracepoint_id(group: &str, name: &str) -> Result<u64> {
    mount_tracefs_if_needed();
    let mut why = String::new();
    for root in TRACEFS {
        let p = format!("{root}/events/{group}/{name}/id");
        match std::fs::read_to_string(&p) {
            Ok(s) => match s.trim().parse() {
                Ok(id) => return Ok(id),
                Err(_) => why = format!("{p} holds no number"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "-k: this user may not read the kernel's tracepoints ({p}: {e}): run fctrace \
                 as root, or give this user tracefs (mount -o remount,mode=755 {root}) and \
                 perf events: {}",
                perf_rights()
            ),
            Err(e) if why.is_empty() => why = format!("{p}: {e}"),
            Err(_) => {}
        }
    }
    bail!(
        "-k: the kernel's tracepoint {group}:{name} is not available ({why}): tracefs must be \
         mounted (mount -t tracefs nodev /sys/kernel/tracing) and readable, and the kernel built \
         with CONFIG_FTRACE_SYSCALLS"
    )
}

/// perf_event_open(2) of `attr` for thread `pid` (-1: all) on `cpu` (-1:
/// all), in `group` (-1: none); the descriptor is close-on-exec.
pub fn perf_open(attr: &PerfEventAttr, pid: i32, cpu: i32, group: i32) -> std::io::Result<i32> {
    // SAFETY: perf_event_open reads `attr` (its size field set), and
    // returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            group,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd as i32)
    }
}

/// What an ordinary user needs for tracepoints through perf events.
fn perf_rights() -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!(
        "kernel.perf_event_paranoid is {paranoid}; tracepoints need it at -1 (sysctl \
         kernel.perf_event_paranoid=-1), or fctrace run as root or with CAP_PERFMON (setcap \
         cap_perfmon+ep $(which fctrace))"
    )
}

/// An enabled event of tracepoint `id` on the calling thread, without a
/// ring (for a BPF program to run at the tracepoint).
pub fn open_plain_tracepoint(id: u64) -> Result<i32> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: id,
        sample_period: 1,
        ..Default::default()
    };
    perf_open(&attr, 0, -1, -1).map_err(|e| anyhow::anyhow!("{}", permission_message(&e)))
}

/// Why perf_event_open refused, and how to allow it.
pub fn permission_message(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "-k: the kernel refuses fctrace its tracepoints ({e}): {}; tracefs must be readable \
             too",
            perf_rights()
        ),
        Some(libc::ENOSYS) => {
            "-k: this kernel has no perf_event_open (CONFIG_PERF_EVENTS)".to_string()
        }
        Some(libc::ENOENT) | Some(libc::EINVAL) => {
            format!("-k: the kernel does not offer these tracepoints through perf_event_open ({e})")
        }
        _ => format!("-k: perf_event_open failed: {e}"),
    }
}
