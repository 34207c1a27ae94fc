//! Redirecting a library function's entry to the agent (libgcc_s's
//! `_Unwind_ForcedUnwind`, sanitizer runtimes' stack collectors): its first
//! instructions (at least 14 bytes after any `endbr64`, none of them a
//! branch) move to a trampoline near the function, RIP-relative operands
//! relocated, which jumps back after them; an absolute jump to a thunk
//! takes their place. The thunk loads the trampoline's address into `r11`
//! (scratch at a function's entry) and jumps to the hook, so one hook can
//! serve several redirected copies of a function and call the original
//! through `r11`.

use super::arena::Arena;
use crate::runtime::journal;
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, FlowControl, InstructionBlock,
};
use std::ffi::c_void;

/// Bytes of `jmp qword ptr [rip]; dq target`.
const ABS_JMP_LEN: usize = 14;

fn abs_jmp(target: u64) -> [u8; ABS_JMP_LEN] {
    let mut b = [0u8; ABS_JMP_LEN];
    b[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    b[6..].copy_from_slice(&target.to_le_bytes());
    b
}

/// Redirects the function at `target` to `hook` (entered with the
/// function's arguments and stack, and the trampoline running the
/// original in `r11`). Returns the trampoline. Not atomic: to be done
/// while no other thread can be running the function's first bytes;
/// `stopped`: where the process's other threads are stopped (attaching),
/// none of them may be strictly inside the bytes replaced.
pub fn redirect(target: u64, hook: u64, stopped: &[u64]) -> Result<u64, String> {
    // SAFETY: the function's code is mapped and readable; the 64 bytes read
    // lie within its module's text (every function redirected is longer,
    // and is followed by more code).
    let code = unsafe { std::slice::from_raw_parts(target as *const u8, 64) };
    let start = if code[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        4 // endbr64 stays in place
    } else {
        0
    };
    let mut dec = Decoder::with_ip(
        64,
        &code[start..],
        target + start as u64,
        DecoderOptions::NONE,
    );
    let mut moved = Vec::new();
    let mut len = 0;
    while len < ABS_JMP_LEN {
        let ins = dec.decode();
        if ins.is_invalid() || ins.flow_control() != FlowControl::Next {
            return Err(format!(
                "its first instructions cannot be moved (at {:#x})",
                ins.ip()
            ));
        }
        len += ins.len();
        moved.push(ins);
    }
    let at = target + start as u64;
    if let Some(ip) = stopped.iter().find(|&&ip| ip > at && ip < at + len as u64) {
        return Err(format!(
            "a thread was stopped inside its first bytes (at {ip:#x}) when fctrace attached"
        ));
    }
    let mut arena = Arena::near(at, at + len as u64, 4096)
        .ok_or("no memory for a trampoline within reach of it")?;
    let tramp = arena.cursor();
    let block = InstructionBlock::new(&moved, tramp);
    let res = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
        .map_err(|e| format!("cannot relocate its first instructions: {e}"))?;
    let mut t = res.code_buffer;
    t.extend_from_slice(&abs_jmp(at + len as u64));
    arena.put(&t);
    // The thunk: movabs r11, tramp; jmp [rip]; dq hook.
    let mut thunk = vec![0x49, 0xbb];
    thunk.extend_from_slice(&tramp.to_le_bytes());
    thunk.extend_from_slice(&abs_jmp(hook));
    let thunk_at = arena.put(&thunk);
    arena.seal();
    let mut patch = vec![0xccu8; len];
    patch[..ABS_JMP_LEN].copy_from_slice(&abs_jmp(thunk_at));
    let lo = at & !4095;
    let hi = (at + len as u64 + 4095) & !4095;
    // SAFETY: the module's text pages, made writable for the copy only;
    // the bytes replaced are whole instructions, now run by the trampoline.
    unsafe {
        let rwx = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
        if libc::mprotect(lo as *mut c_void, (hi - lo) as usize, rwx) != 0 {
            return Err("cannot write its code".into());
        }
        journal::before_write(at, len);
        std::ptr::copy_nonoverlapping(patch.as_ptr(), at as *mut u8, len);
        libc::mprotect(
            lo as *mut c_void,
            (hi - lo) as usize,
            libc::PROT_READ | libc::PROT_EXEC,
        );
    }
    Ok(tramp)
}
