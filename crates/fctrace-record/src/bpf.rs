//! `-k`'s strings: the path a system call is given (`openat`, `stat`,
//! `execve`, `unlink`...), noted at its entry by a small BPF program on the
//! `raw_syscalls:sys_enter` tracepoint and copied at its return by another
//! on `sys_exit` (the call has read it then, so its pages are present: at
//! the entry a string in a page never touched yet cannot be copied, BPF
//! programs may not fault pages in), put out through a BPF output event
//! into the CPU's ring buffer just before the return's own sample
//! (`super::kernel`). Reading the process's memory later could show what
//! the buffer holds by then, not what the call was given.
//!
//! A tracepoint's BPF programs run for every thread that reaches it, not
//! only those fctrace follows: the program looks the thread's process up
//! in a map of the traced processes (`tgids`) first. A second program, on
//! `sched:sched_process_fork`, adds the processes those create; fctrace
//! puts in the process it attaches to, or itself as a parent only (value 2:
//! its children are traced, not it) before starting the program.
//!
//! The programs are assembled here (a few dozen instructions), loaded
//! with the `bpf` system call and attached with `PERF_EVENT_IOC_SET_BPF`.
//! Where the kernel refuses any of it, paths show as addresses, and
//! fctrace says why.

use anyhow::{bail, Result};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_PROG_LOAD: u32 = 5;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const PERF_EVENT_IOC_SET_BPF: u64 = 0x4004_2408;

/// Helper functions by number.
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const MAP_DELETE_ELEM: i32 = 3;
const GET_CURRENT_PID_TGID: i32 = 14;
const PERF_EVENT_OUTPUT: i32 = 25;
const PROBE_READ_USER_STR: i32 = 114;

/// Longest path copied (the kernel's PATH_MAX is 4096; a longer one is
/// cut, as strace's default of 32 would cut far more).
pub const MAX_PATH: usize = 256;
/// What the program puts out: nr (u32), length with the NUL (i32, <= 0 if
/// the copy failed), then the bytes.
pub const RECORD: usize = 8 + MAX_PATH;

use fctrace_format::store::kernel::PATH_ARGS;

#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

/// `dst = map fd` (a 64-bit immediate the loader turns into the map).
fn ld_map(dst: u8, fd: i32) -> [Insn; 2] {
    [insn(0x18, dst, 1, 0, fd), insn(0, 0, 0, 0, 0)]
}

fn bpf(cmd: u32, attr: &mut [u64]) -> std::io::Result<i32> {
    // SAFETY: the bpf system call reads (and for some commands writes)
    // the attribute union, whose bytes `attr` holds, zero beyond what is
    // set.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

fn map_create(kind: u32, key: u32, value: u32, entries: u32) -> std::io::Result<i32> {
    let mut a = [0u64; 16];
    a[0] = u64::from(kind) | u64::from(key) << 32;
    a[1] = u64::from(value) | u64::from(entries) << 32;
    bpf(BPF_MAP_CREATE, &mut a)
}

fn map_update(fd: i32, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let mut a = [0u64; 16];
    a[0] = fd as u32 as u64;
    a[1] = key.as_ptr() as u64;
    a[2] = value.as_ptr() as u64;
    a[3] = 0; // BPF_ANY
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

fn prog_load(insns: &[Insn]) -> Result<i32> {
    let license = c"GPL";
    let mut log = vec![0u8; 1 << 16];
    let mut a = [0u64; 16];
    // prog_type, insn_cnt, insns, license, log_level, log_size, log_buf.
    a[0] = u64::from(BPF_PROG_TYPE_TRACEPOINT) | (insns.len() as u64) << 32;
    a[1] = insns.as_ptr() as u64;
    a[2] = license.as_ptr() as u64;
    a[3] = 1 | (log.len() as u64) << 32;
    a[4] = log.as_mut_ptr() as u64;
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let n = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..n]);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            bail!("the kernel refused its BPF program ({e}): {last}")
        }
    }
}

/// The sys_enter program: for a thread of a traced process and a system
/// call with a path, notes the path's address for the thread
/// (`pending`); keeps the sample (returns 1).
fn sys_enter_program(tgids: i32, pending: i32) -> Vec<Insn> {
    let mut p = vec![
        insn(0xbf, 6, 1, 0, 0),                    // r6 = ctx
        insn(0x85, 0, 0, 0, GET_CURRENT_PID_TGID), // r0 = tgid << 32 | tid
        insn(0x63, 10, 0, -8, 0),                  // *(u32 *)(fp - 8) = tid
        insn(0x77, 0, 0, 0, 32),                   // r0 >>= 32
        insn(0x63, 10, 0, -4, 0),                  // *(u32 *)(fp - 4) = tgid
    ];
    p.extend(ld_map(1, tgids));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),              // r2 = fp
        insn(0x07, 2, 0, 0, -4),              // r2 = &tgid
        insn(0x85, 0, 0, 0, MAP_LOOKUP_ELEM), // r0 = lookup(tgids, &tgid)
    ]);
    let to_out_1 = p.len();
    p.push(insn(0x15, 0, 0, 0, 0)); // if r0 == 0 goto out
    p.push(insn(0x71, 1, 0, 0, 0)); // r1 = *(u8 *)r0
    let to_out_2 = p.len();
    p.push(insn(0x55, 1, 0, 0, 1)); // if r1 != 1 goto out
    p.push(insn(0x79, 7, 6, 8, 0)); // r7 = id
    let mut cases = Vec::new();
    for &(nr, _) in PATH_ARGS {
        cases.push(p.len());
        p.push(insn(0x15, 7, 0, 0, nr)); // if r7 == nr goto case
    }
    let to_out_3 = p.len();
    p.push(insn(0x05, 0, 0, 0, 0)); // goto out
    let mut case_at = Vec::new();
    let mut to_note = Vec::new();
    for &(_, idx) in PATH_ARGS {
        case_at.push(p.len());
        p.push(insn(0x79, 8, 6, 16 + 8 * idx, 0)); // r8 = args[idx]
        to_note.push(p.len());
        p.push(insn(0x05, 0, 0, 0, 0)); // goto note
    }
    let note = p.len();
    p.push(insn(0x7b, 10, 8, -16, 0)); // *(u64 *)(fp - 16) = path
    p.extend(ld_map(1, pending));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -8), // &tid
        insn(0xbf, 3, 10, 0, 0),
        insn(0x07, 3, 0, 0, -16), // &path
        insn(0xb7, 4, 0, 0, 0),   // BPF_ANY
        insn(0x85, 0, 0, 0, MAP_UPDATE_ELEM),
    ]);
    let out_at = p.len();
    p.extend([insn(0xb7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)]); // return 1
    let rel = |from: usize, to: usize| (to as i64 - from as i64 - 1) as i16;
    p[to_out_1].off = rel(to_out_1, out_at);
    p[to_out_2].off = rel(to_out_2, out_at);
    p[to_out_3].off = rel(to_out_3, out_at);
    for (k, &at) in cases.iter().enumerate() {
        p[at].off = rel(at, case_at[k]);
    }
    for &at in &to_note {
        p[at].off = rel(at, note);
    }
    p
}

/// The sys_exit program: for a thread with a path noted at its entry,
/// copies the path (the call has read it: its pages are present) and puts
/// out `RECORD` bytes just before the return's sample; keeps the sample.
fn sys_exit_program(pending: i32, out: i32) -> Vec<Insn> {
    let mut p = vec![
        insn(0xbf, 6, 1, 0, 0),                    // r6 = ctx
        insn(0x85, 0, 0, 0, GET_CURRENT_PID_TGID), // r0 = tgid << 32 | tid
        insn(0x63, 10, 0, -4, 0),                  // *(u32 *)(fp - 4) = tid
    ];
    p.extend(ld_map(1, pending));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -4),
        insn(0x85, 0, 0, 0, MAP_LOOKUP_ELEM), // r0 = lookup(pending, &tid)
    ]);
    let to_out = p.len();
    p.push(insn(0x15, 0, 0, 0, 0)); // if r0 == 0 goto out
    p.push(insn(0x79, 8, 0, 0, 0)); // r8 = *(u64 *)r0: the path
    p.extend(ld_map(1, pending));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -4),
        insn(0x85, 0, 0, 0, MAP_DELETE_ELEM),
        insn(0x79, 7, 6, 8, 0),                         // r7 = id
        insn(0xbf, 1, 10, 0, 0),                        // r1 = fp
        insn(0x07, 1, 0, 0, -(MAX_PATH as i32) - 8),    // r1 = fp - 264
        insn(0xb7, 2, 0, 0, MAX_PATH as i32),           // r2 = 256
        insn(0xbf, 3, 8, 0, 0),                         // r3 = path
        insn(0x85, 0, 0, 0, PROBE_READ_USER_STR),       // r0 = copy
        insn(0x63, 10, 0, -(RECORD as i16) - 8 + 4, 0), // *(u32 *)(fp - 268) = r0
        insn(0x63, 10, 7, -(RECORD as i16) - 8, 0),     // *(u32 *)(fp - 272) = nr
        insn(0xbf, 1, 6, 0, 0),                         // r1 = ctx
    ]);
    p.extend(ld_map(2, out));
    p.extend([
        insn(0xb4, 3, 0, 0, -1),                   // w3 = BPF_F_CURRENT_CPU
        insn(0xbf, 4, 10, 0, 0),                   // r4 = fp
        insn(0x07, 4, 0, 0, -(RECORD as i32) - 8), // r4 = fp - 272
        insn(0xb7, 5, 0, 0, RECORD as i32),        // r5 = 264
        insn(0x85, 0, 0, 0, PERF_EVENT_OUTPUT),
    ]);
    let out_at = p.len();
    p.extend([insn(0xb7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)]);
    p[to_out].off = (out_at as i64 - to_out as i64 - 1) as i16;
    p
}

/// The fork program: a process (or thread) made by a traced process, or
/// by fctrace, is traced. Drops the sample (returns 0).
fn fork_program(tgids: i32, child_off: i16) -> Vec<Insn> {
    let mut p = vec![
        insn(0xbf, 6, 1, 0, 0),                    // r6 = ctx
        insn(0x85, 0, 0, 0, GET_CURRENT_PID_TGID), // r0 = tgid << 32 | tid
        insn(0x77, 0, 0, 0, 32),                   // r0 >>= 32
        insn(0x63, 10, 0, -4, 0),                  // *(u32 *)(fp - 4) = tgid
    ];
    p.extend(ld_map(1, tgids));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -4),
        insn(0x85, 0, 0, 0, MAP_LOOKUP_ELEM),
    ]);
    let to_out = p.len();
    p.push(insn(0x15, 0, 0, 0, 0)); // if r0 == 0 goto out
    p.extend([
        insn(0x61, 1, 6, child_off, 0), // r1 = child_pid (u32)
        insn(0x63, 10, 1, -8, 0),       // *(u32 *)(fp - 8) = child
        insn(0x62, 10, 0, -12, 1),      // *(u32 *)(fp - 12) = 1 (value, u8 used)
    ]);
    p.extend(ld_map(1, tgids));
    p.extend([
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -8), // key
        insn(0xbf, 3, 10, 0, 0),
        insn(0x07, 3, 0, 0, -12), // value
        insn(0xb7, 4, 0, 0, 0),   // BPF_ANY
        insn(0x85, 0, 0, 0, MAP_UPDATE_ELEM),
    ]);
    let out_at = p.len();
    p.extend([insn(0xb7, 0, 0, 0, 0), insn(0x95, 0, 0, 0, 0)]);
    p[to_out].off = (out_at as i64 - to_out as i64 - 1) as i16;
    p
}

/// A field's offset in a tracepoint's record, from its tracefs format.
fn field_offset(format: &str, field: &str) -> Option<i16> {
    format.lines().find_map(|l| {
        let (decl, rest) = l.trim().strip_prefix("field:")?.split_once(';')?;
        decl.split_whitespace().last().filter(|n| *n == field)?;
        rest.trim()
            .strip_prefix("offset:")?
            .split(';')
            .next()?
            .parse()
            .ok()
    })
}

/// The loaded programs and maps (closed on drop).
pub struct Strings {
    fds: Vec<i32>,
    tgids: i32,
    sys_enter: i32,
    sys_exit: i32,
}

impl Strings {
    /// Creates the maps and programs; `outputs` are the per-CPU BPF output
    /// events (by CPU index) whose samples go into the rings.
    pub fn load(outputs: &[(u32, i32)], tracefs: &str, fork_id: u64) -> Result<Strings> {
        let mut s = Strings {
            fds: Vec::new(),
            tgids: -1,
            sys_enter: -1,
            sys_exit: -1,
        };
        let ncpu = outputs.iter().map(|&(c, _)| c + 1).max().unwrap_or(1);
        let tgids = map_create(BPF_MAP_TYPE_HASH, 4, 4, 65536)
            .map_err(|e| anyhow::anyhow!("cannot create a BPF map: {e}"))?;
        s.fds.push(tgids);
        s.tgids = tgids;
        let out = map_create(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, ncpu)
            .map_err(|e| anyhow::anyhow!("cannot create a BPF map: {e}"))?;
        s.fds.push(out);
        for &(cpu, fd) in outputs {
            map_update(out, &cpu.to_le_bytes(), &fd.to_le_bytes())
                .map_err(|e| anyhow::anyhow!("cannot fill a BPF map: {e}"))?;
        }
        let format =
            std::fs::read_to_string(format!("{tracefs}/events/sched/sched_process_fork/format"))
                .unwrap_or_default();
        let child = field_offset(&format, "child_pid")
            .ok_or_else(|| anyhow::anyhow!("sched:sched_process_fork has no child_pid field"))?;
        let pending = map_create(BPF_MAP_TYPE_HASH, 4, 8, 65536)
            .map_err(|e| anyhow::anyhow!("cannot create a BPF map: {e}"))?;
        s.fds.push(pending);
        s.sys_enter = prog_load(&sys_enter_program(tgids, pending))?;
        s.fds.push(s.sys_enter);
        s.sys_exit = prog_load(&sys_exit_program(pending, out))?;
        s.fds.push(s.sys_exit);
        let fork_prog = prog_load(&fork_program(tgids, child))?;
        s.fds.push(fork_prog);
        // The fork program runs where sched_process_fork has a perf event:
        // one on fctrace's own thread is enough (the programs of a
        // tracepoint run for every thread that reaches it).
        let fork_fd = crate::perf::open_plain_tracepoint(fork_id)?;
        s.fds.push(fork_fd);
        // SAFETY: attaches the loaded program to the event (both ours).
        if unsafe { libc::ioctl(fork_fd, PERF_EVENT_IOC_SET_BPF as _, fork_prog) } != 0 {
            bail!(
                "cannot attach the BPF fork program: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(s)
    }

    /// Attaches the programs to a sys_enter and a sys_exit event.
    pub fn attach(&self, sys_enter_fd: i32, sys_exit_fd: i32) -> Result<()> {
        for (fd, prog) in [(sys_enter_fd, self.sys_enter), (sys_exit_fd, self.sys_exit)] {
            // SAFETY: attaches a loaded program to an event (both ours).
            if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_BPF as _, prog) } != 0 {
                bail!(
                    "cannot attach the BPF program: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(())
    }

    /// Follows process `tgid` (value 1), or only the processes it
    /// creates (value 2: fctrace itself before it starts the program).
    pub fn follow(&self, tgid: u32, children_only: bool) -> Result<()> {
        let v: u32 = if children_only { 2 } else { 1 };
        map_update(self.tgids, &tgid.to_le_bytes(), &v.to_le_bytes())
            .map_err(|e| anyhow::anyhow!("cannot fill a BPF map: {e}"))
    }
}

impl Drop for Strings {
    fn drop(&mut self) {
        for &fd in self.fds.iter().rev() {
            // SAFETY: descriptors this struct made.
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_from_a_format() {
        let f = "\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\
                 \tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
        assert_eq!(field_offset(f, "child_pid"), Some(20));
        assert_eq!(field_offset(f, "parent_pid"), None);
    }
}
