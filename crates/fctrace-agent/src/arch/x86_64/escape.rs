//! Whether a function pointer loaded into a register is only called
//! through, or may be kept (stored, passed, compared): followed through
//! the code after the load, both ways at branches, until the register is
//! overwritten. Attached, the agent leaves alone the GOT slots whose
//! values may be kept (`instrument::imports`): a pointer to a stub would
//! outlive the detach.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, OpAccess, OpKind, Register,
};

/// Instructions followed at most per load; beyond, the value counts as
/// kept.
const BUDGET: usize = 256;

/// Registers that pass a call's integer arguments (System V).
fn argument(r: Register) -> bool {
    matches!(
        r,
        Register::RDI | Register::RSI | Register::RDX | Register::RCX | Register::R8 | Register::R9
    )
}

/// Registers a call may change (System V).
fn caller_saved(r: Register) -> bool {
    matches!(
        r,
        Register::RAX
            | Register::RCX
            | Register::RDX
            | Register::RSI
            | Register::RDI
            | Register::R8
            | Register::R9
            | Register::R10
            | Register::R11
    )
}

/// `code` is mapped at `base`; `at` is the address of a `mov r64,
/// [rip+disp]` in it. True if the loaded value may be used other than as
/// the target of `call reg` / `jmp reg` before the register is written
/// again (or when that cannot be told: an indirect jump, code outside
/// `code`, too long a walk).
pub fn pointer_may_be_kept(code: &[u8], base: u64, at: u64) -> bool {
    let decode_at = |ip: u64| {
        let off = ip.checked_sub(base)? as usize;
        let bytes = code.get(off..)?;
        let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let i = d.decode();
        (!i.is_invalid()).then_some(i)
    };
    let Some(load) = decode_at(at) else {
        return true;
    };
    if load.op_count() != 2 || load.op0_kind() != OpKind::Register {
        return true;
    }
    let reg = load.op0_register().full_register();
    let mut info = InstructionInfoFactory::new();
    let mut todo = vec![load.next_ip()];
    let mut seen = std::collections::HashSet::new();
    let mut steps = 0;
    while let Some(mut ip) = todo.pop() {
        loop {
            if !seen.insert(ip) {
                break;
            }
            steps += 1;
            if steps > BUDGET {
                return true;
            }
            let Some(i) = decode_at(ip) else { return true };
            let through_reg = i.op_count() == 1
                && i.op0_kind() == OpKind::Register
                && i.op0_register().full_register() == reg;
            // A call elsewhere may be given the value as an argument.
            if matches!(
                i.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            ) && !through_reg
                && argument(reg)
            {
                return true;
            }
            match i.flow_control() {
                FlowControl::IndirectCall if through_reg => {
                    if caller_saved(reg) {
                        break;
                    }
                    ip = i.next_ip();
                    continue;
                }
                FlowControl::IndirectBranch if through_reg => break,
                _ => {}
            }
            let used = info.info(&i);
            let mut writes = false;
            for u in used.used_registers() {
                if u.register().full_register() != reg {
                    continue;
                }
                match u.access() {
                    OpAccess::Write => writes = true,
                    OpAccess::None | OpAccess::NoMemAccess => {}
                    _ => return true,
                }
            }
            if writes {
                break;
            }
            match i.flow_control() {
                FlowControl::Next => ip = i.next_ip(),
                FlowControl::Return | FlowControl::Interrupt | FlowControl::Exception => break,
                FlowControl::UnconditionalBranch => ip = i.near_branch_target(),
                FlowControl::ConditionalBranch => {
                    todo.push(i.near_branch_target());
                    ip = i.next_ip();
                }
                FlowControl::Call => {
                    if caller_saved(reg) {
                        break;
                    }
                    ip = i.next_ip();
                }
                // An indirect jump or call elsewhere, xbegin...: unknown.
                _ => return true,
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: &[u8]) -> bool {
        pointer_may_be_kept(code, 0x1000, 0x1000)
    }

    #[test]
    fn calls_through_the_register_keep_nothing() {
        // mov rbx,[rip+x]; L: call rbx; test eax,eax; jne L; pop rbx; ret
        assert!(!check(&[
            0x48, 0x8b, 0x1d, 0, 0, 0, 0, 0xff, 0xd3, 0x85, 0xc0, 0x75, 0xfa, 0x5b, 0xc3
        ]));
        // mov rax,[rip+x]; jmp rax
        assert!(!check(&[0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xff, 0xe0]));
    }

    #[test]
    fn a_stored_or_passed_pointer_may_be_kept() {
        // mov rax,[rip+x]; mov [rip+y],rax; ret
        assert!(check(&[
            0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x89, 0x05, 0, 0, 0, 0, 0xc3
        ]));
        // mov rdx,[rip+x]; mov rsi,rdx; ret
        assert!(check(&[
            0x48, 0x8b, 0x15, 0, 0, 0, 0, 0x48, 0x89, 0xd6, 0xc3
        ]));
        // mov rdx,[rip+x]; call rel32: passed as an argument (__cxa_throw's
        // destructor)
        assert!(check(&[
            0x48, 0x8b, 0x15, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0xc3
        ]));
        // mov rax,[rip+x]; call rel32: rax is no argument, the call ends it
        assert!(!check(&[
            0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0xc3
        ]));
        // After a branch: mov rbx,[rip+x]; jne L; ret; L: push rbx
        assert!(check(&[
            0x48, 0x8b, 0x1d, 0, 0, 0, 0, 0x75, 0x01, 0xc3, 0x53, 0xc3
        ]));
        // Code past the end: unknown.
        assert!(check(&[0x48, 0x8b, 0x1d, 0, 0, 0, 0]));
    }
}
