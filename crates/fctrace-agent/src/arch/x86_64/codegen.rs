//! Machine code that the agent generates at start-up, into an arena placed
//! within ±2 GiB of the module it instruments:
//!
//! - the *common block*: `entry` (record an entry, push a shadow entry),
//!   `entry_only` (record a call of a function whose return cannot be
//!   captured), `exit` (pop the shadow entry, record the exit, return to
//!   the real caller), and their slow paths into Rust; with record-time
//!   filters also the exits of regions and flagged frames, and the
//!   entries of flagged, `-F`, `-N` and fast flagged functions. Each is
//!   emitted by one builder (a method of `Gen`, named for the block), in
//!   the order `assemble_common` calls them;
//! - one *stub* per function (see `patch.rs`).
//!
//! The hot path touches only rax, rcx, rdx and r11, which it saves: every
//! other register (and all vector state) is left alone, because GCC's
//! inter-procedural register allocation lets callers keep values in
//! registers that a known callee does not clobber. It allocates nothing,
//! takes no lock and makes no system call. Per-thread data is reached with
//! one `fs:`-relative load at the agent's initial-exec TLS offset.

use crate::runtime::state::{
    B_NOFILTER, DEPTH_BITS, E_FASTRET, FASTRET_BITS, FASTRET_SHIFT, FD_ARGS_WORD, FD_COUNT,
    FD_DEPTH, FD_DEPTH_MASK, FD_ENTRY_WORD, FD_ID, FD_ITEMS, FD_PROV_WORD, FD_SHADOW_WORD,
    FD_TRIG_MASK, FD_TRIG_WANT, FD_WANT, FILTER_ENTRY_BITS, FI_HDR, FI_MASK, FI_SIZE,
    NOTRACE_ENTRY_BITS, OFF_BLOCK, OFF_BUF, OFF_FL, OFF_GEN, OFF_HIDDEN, OFF_LIMIT, OFF_MAX,
    OFF_SHADOW_BASE, OFF_SHADOW_END, OFF_SHADOW_TOP, PREV_MASK, PREV_SHIFT, SHADOW_ENTRY_SIZE,
    SLOW_FLAGGED_ENTRY, SLOW_FLAGGED_EXIT, SLOW_FULL, SLOW_GROW, SLOW_INIT, SLOW_MISMATCH,
    SLOW_RESYNC, SLOW_UNWINDING,
};
use crate::runtime::tls::BUSY_UNWINDING;
use fctrace_format::event::{EventKind, RawEvent, KIND_BITS, PAYLOAD_LEN_SHIFT, WITH_CALL_STEP};
use iced_x86::code_asm::*;
use iced_x86::{BlockEncoderOptions, IcedError};

/// How the slow paths save and restore the extended (x87, SSE, AVX...)
/// state. Either way the area starts with FXSAVE's 512-byte legacy layout
/// (xmm0..15 at offset 160), which `recording::filter` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtState {
    /// `xsave64`/`xrstor64` of every component enabled in XCR0, into an
    /// area of this many bytes.
    Xsave(u32),
    /// `fxsave64`/`fxrstor64` of a 512-byte area: x87 and SSE, the whole
    /// state of a CPU (or an OS) without XSAVE, which cannot enable AVX.
    Fxsave,
}

/// What the common block needs to know about its environment.
pub struct Params {
    /// TLS block offset from the thread pointer.
    pub tls: i64,
    /// Size of each shared-memory buffer.
    pub buf_size: u32,
    /// Address of `instrument::slow_path::slow_path`.
    pub slow_path: u64,
    /// Address of the shared lost-events counter.
    pub lost_counter: u64,
    /// How the slow paths save the extended state (chosen once, at start-up).
    pub ext_state: ExtState,
    /// With record-time filters (`crate::recording::filter`): the address of the
    /// global switch word. The common block is then the filtered variant.
    pub filter: Option<u64>,
    /// With filters: the address of the byte set by `finish`.
    pub finished: u64,
}

/// Addresses in the generated `-N` and `-F` region entries and exits
/// (see `signal::fix_interrupted`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionWindows {
    /// The `-N` entry's `mov ecx, SIZE` before its `xadd`: where it
    /// restarts after an interrupted reservation is undone.
    pub restart: u64,
    /// From the instruction after the `xadd` to (excluded) the first one
    /// after its last store.
    pub push_lo: u64,
    pub push_hi: u64,
    /// The `-N` exit's pop (the slot already holds the real return
    /// address), and the instruction after it.
    pub pop: u64,
    pub pop_next: u64,
    /// The `-N` exit, from the instruction after the region count's
    /// decrement to (excluded) the first one after the limit's store;
    /// and the exit's common tail (restores the registers, returns).
    pub close_lo: u64,
    pub close_hi: u64,
    pub tail: u64,
    /// The `-F` entry, from its first check (where it restarts) to
    /// (excluded) the first instruction after the region is open: its
    /// `xadd`'s next instruction, and the one after the count of open
    /// `-F` regions is incremented.
    pub f_check: u64,
    pub f_push_lo: u64,
    pub f_counted: u64,
    pub f_open_hi: u64,
    /// The `-F` exit, from the instruction after the slot's real return
    /// address is put back to (excluded) the first one after the region
    /// is closed: its pop, the instruction after the pop, and the one
    /// after the count is decremented.
    pub f_pop_lo: u64,
    pub f_pop: u64,
    pub f_uncounted: u64,
    pub f_close_hi: u64,
    /// The fast flagged entry: where it restarts (its checks, after its
    /// three pushes), and from the instruction after the `xadd` that
    /// reserves its shadow entry to (excluded) the first one after its
    /// last store (as `entry`'s).
    pub a_retry: u64,
    pub a_push_lo: u64,
    pub a_push_hi: u64,
    /// The fast `-R` exit: the two instructions after the slot's real
    /// return address is put back, up to the pop (included); and the one
    /// after the pop (as `exit`'s).
    pub r_pop_lo: u64,
    pub r_pop_store: u64,
    pub r_pop_next: u64,
    /// The fast flagged entry's depth limit, from `a_push_hi` (its
    /// shadow entry whole) to (excluded) the first instruction after the
    /// limit's store.
    pub d_hi: u64,
    /// The generated exit of a depth region, from the instruction after
    /// the pop (`r_pop_next`) to (excluded) the first one after the
    /// limit's store.
    pub d_close_lo: u64,
    pub d_close_hi: u64,
}

/// Entry points of an assembled common block.
#[derive(Clone, Copy, Debug)]
pub struct Common {
    pub entry: u64,
    /// The entry of flagged functions (filtered variant only; else `entry`).
    pub entry_flagged: u64,
    /// The entry of functions whose only flag is `-N` (filtered variant
    /// only; else `entry`).
    pub entry_notrace: u64,
    /// The entry of functions whose only flag is `-F` (filtered variant
    /// only; else `entry`).
    pub entry_filter: u64,
    /// The fast flagged entry (filtered variant only; else `entry`): rax
    /// holds the address of the function's `FastDesc`, not its id.
    pub entry_fast: u64,
    /// The updates of the `-N` and `-F` entries and exits that a signal
    /// must not split (`signal::fix_interrupted`); zero when unfiltered.
    pub region_windows: RegionWindows,
    pub entry_only: u64,
    pub exit: u64,
}

/// Saves every caller-saved register and the whole extended state, calls
/// `slow_path(reason, arg)`, restores; ZF is clear when it returned non-zero. `arg_slot` (if any) passes the
/// stack address `rsp_at_call_site + arg_slot` as the argument.
fn slow_call(
    a: &mut CodeAssembler,
    p: &Params,
    reason: u64,
    arg_slot: Option<i32>,
) -> Result<(), IcedError> {
    for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rbx] {
        a.push(r)?;
    }
    a.mov(rbx, rsp)?;
    save_ext_state(a, p.ext_state)?;
    a.mov(rdi, reason)?;
    match arg_slot {
        Some(off) => a.lea(rsi, qword_ptr(rbx + (80 + off)))?,
        None => a.xor(esi, esi)?,
    }
    a.mov(rdx, qword_ptr(rbx + 72))?; // the saved rax: the function id on entry paths
    a.mov(rcx, rsp)?; // the extended state's area
    a.mov(r8, rbx)?; // the saved general registers
    a.mov(rax, p.slow_path)?;
    a.call(rax)?;
    // The result is passed back in ZF (nothing below changes the flags).
    a.test(rax, rax)?;
    restore_ext_state(a, p.ext_state)?;
    a.mov(rsp, rbx)?;
    for r in [rbx, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
        a.pop(r)?;
    }
    Ok(())
}

/// Reserves a 64-byte aligned area below rsp and saves the extended state
/// into it (rsp then points at it); clobbers rax and rdx.
fn save_ext_state(a: &mut CodeAssembler, ext: ExtState) -> Result<(), IcedError> {
    a.and(rsp, -64)?;
    match ext {
        ExtState::Xsave(size) => {
            a.sub(rsp, (size as i32 + 63) & !63)?;
            // The xsave header (bytes 512..576) must be clean for xrstor.
            for i in 0..8 {
                a.mov(qword_ptr(rsp + (512 + i * 8)), 0)?;
            }
            a.mov(eax, -1)?;
            a.mov(edx, -1)?;
            a.xsave64(ptr(rsp))
        }
        ExtState::Fxsave => {
            a.sub(rsp, 512)?;
            a.fxsave64(ptr(rsp))
        }
    }
}

/// Restores the extended state saved by [`save_ext_state`] at rsp; leaves
/// the flags alone (the slow path's result is in ZF), clobbers rax and rdx.
fn restore_ext_state(a: &mut CodeAssembler, ext: ExtState) -> Result<(), IcedError> {
    match ext {
        ExtState::Xsave(_) => {
            a.mov(eax, -1)?;
            a.mov(edx, -1)?;
            a.xrstor64(ptr(rsp))
        }
        ExtState::Fxsave => a.fxrstor64(ptr(rsp)),
    }
}

/// Appends the event word in rax to the current buffer of the thread whose
/// state is in r11; clobbers rax, rcx, rdx. Jumps to `full` when the buffer
/// has no room (rax still holds the word).
fn record(a: &mut CodeAssembler, p: &Params, full: CodeLabel) -> Result<(), IcedError> {
    a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
    a.mov(edx, RawEvent::SIZE as u32)?;
    a.xadd(qword_ptr(rcx), rdx)?; // reserve: signal-safe, single instruction
    a.cmp(rdx, (p.buf_size as usize - RawEvent::SIZE) as i32)?;
    a.ja(full)?;
    a.add(rcx, rdx)?;
    a.mov(qword_ptr(rcx), rax)?;
    stamp(a)
}

/// Writes the time stamp counter into the record at rcx (its timestamp,
/// written last: a record without one was never completed); clobbers rax
/// and rdx.
fn stamp(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rcx + 8), rax)
}

/// At `full`, with rcx = the buffer and rdx = a reservation's start that
/// did not fit: clears the reservation's records that lie in the buffer
/// (skipped as never written, as `buffer::reserve` does), then has the
/// slow path switch buffers and falls through after the call.
fn clear_reservation_then_switch(
    a: &mut CodeAssembler,
    p: &Params,
    full: &mut CodeLabel,
) -> Result<(), IcedError> {
    let mut cleared = a.create_label();
    a.set_label(full)?;
    a.cmp(rdx, p.buf_size as i32)?;
    a.jae(cleared)?;
    a.mov(qword_ptr(rcx + rdx), 0)?;
    a.mov(qword_ptr(rcx + rdx + 8), 0)?;
    a.add(rdx, RawEvent::SIZE as i32)?;
    a.jmp(*full)?;
    a.set_label(&mut cleared)?;
    slow_call(a, p, SLOW_FULL, None)
}

/// The start of the generated -F and -N entries: saves rcx, rdx and r11,
/// loads the thread's state into r11, and jumps to `slow` (the flagged
/// entry's retry, which expects those three saved) unless the call is a
/// usual one: the agent not busy, the thread's state made, the global
/// switch already applied.
fn usual_filtered_entry(
    a: &mut CodeAssembler,
    p: &Params,
    slow: CodeLabel,
) -> Result<(), IcedError> {
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(r11)?;
    usual_filtered_checks(a, p, slow)
}

/// The checks of [`usual_filtered_entry`] after its three pushes.
fn usual_filtered_checks(
    a: &mut CodeAssembler,
    p: &Params,
    slow: CodeLabel,
) -> Result<(), IcedError> {
    a.cmp(qword_ptr(p.tls + 8).fs(), 0)?;
    a.jne(slow)?;
    a.mov(r11, qword_ptr(p.tls).fs())?;
    a.test(r11, r11)?;
    a.jz(slow)?;
    a.mov(rcx, p.filter.unwrap_or(0))?;
    a.mov(ecx, dword_ptr(rcx))?;
    a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
    a.jne(slow)?;
    Ok(())
}

/// Fills the shadow entry that an `xadd` on the shadow-stack top just
/// reserved at rcx, or jumps to `full` when it lies past the end of the
/// shadow stack: the caller's return address (at rsp+40), its slot, and
/// the function id in rax with `bits` above it. Clobbers rdx only.
fn fill_shadow_entry(a: &mut CodeAssembler, bits: u64, full: CodeLabel) -> Result<(), IcedError> {
    a.cmp(rcx, qword_ptr(r11 + OFF_SHADOW_END))?;
    a.jae(full)?;
    a.mov(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx), rdx)?;
    a.lea(rdx, qword_ptr(rsp + 40))?;
    a.mov(qword_ptr(rcx + 8), rdx)?;
    if bits == 0 {
        a.mov(qword_ptr(rcx + 16), rax)?;
    } else {
        a.mov(rdx, bits)?;
        a.or(rdx, rax)?;
        a.mov(qword_ptr(rcx + 16), rdx)?;
    }
    Ok(())
}

/// rdx = the recorded calls open on the thread (in r11) below the
/// shadow-stack address `top`: its entries minus the hidden ones
/// (`filter::vdepth`); `inv3` labels the inverse of 3 modulo 2^64.
fn depth_of(a: &mut CodeAssembler, top: AsmRegister64, inv3: CodeLabel) -> Result<(), IcedError> {
    a.mov(rdx, top)?;
    a.sub(rdx, qword_ptr(r11 + OFF_SHADOW_BASE))?;
    a.shr(rdx, 3)?;
    a.imul_2(rdx, qword_ptr(inv3))?;
    a.sub(rdx, qword_ptr(r11 + OFF_HIDDEN))?;
    Ok(())
}

/// Assembles the common block at address `at`: the entry, the entry of
/// functions whose return cannot be captured, the exit, and with filters
/// the region exits and the flagged, `-F`, `-N` and fast flagged entries,
/// in that order, each with its slow paths.
pub fn assemble_common(at: u64, p: &Params) -> Result<(Vec<u8>, Common), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let l = Labels::new(&mut a);
    let mut g = Gen { a, p, l };
    g.entry()?;
    g.entry_only()?;
    g.exit()?;
    if p.filter.is_some() {
        g.slow_exits()?;
        g.flagged_entry()?;
        g.filter_entry()?;
        g.notrace_entry()?;
        g.fast_entry()?;
        // The inverse of 3 modulo 2^64: a multiple of 3 times it is the
        // exact quotient (depths: shadow-stack bytes / 8 / 3).
        g.a.set_label(&mut g.l.inv3)?;
        g.a.db(&0xAAAA_AAAA_AAAA_AAABu64.to_le_bytes())?;
    }
    let res =
        g.a.assemble_options(at, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let common = g.l.common(&res, p.filter.is_some())?;
    Ok((res.inner.code_buffer, common))
}

/// The common block being assembled: each method emits one block of it,
/// after the ones before it.
struct Gen<'p> {
    a: CodeAssembler,
    p: &'p Params,
    l: Labels,
}

/// The labels that more than one block jumps to, and those whose
/// addresses [`Common`] reports.
struct Labels {
    entry: CodeLabel,
    /// `entry`'s checks, after its pushes.
    retry: CodeLabel,
    /// `entry`'s record of the event word in rax.
    rec: CodeLabel,
    /// Restores `entry`'s registers, returns with ZF=0 (not traced).
    pass: CodeLabel,
    entry_only: CodeLabel,
    exit: CodeLabel,
    /// The exit's record of the event word in rax.
    xrec: CodeLabel,
    /// The exit's common tail: restores the registers, returns.
    xtail: CodeLabel,
    /// The exits of frames that ask for more than a record (filtered).
    slow_exit: CodeLabel,
    flagged: CodeLabel,
    /// The flagged entry's checks, after its pushes: the slow path.
    fretry: CodeLabel,
    filter: CodeLabel,
    notrace: CodeLabel,
    fast: CodeLabel,
    /// The constant of [`depth_of`].
    inv3: CodeLabel,
    /// The instructions that bound [`RegionWindows`].
    npop: CodeLabel,
    npop_next: CodeLabel,
    nclose_lo: CodeLabel,
    nclose_hi: CodeLabel,
    nrestart: CodeLabel,
    npush_lo: CodeLabel,
    npush_hi: CodeLabel,
    fcheck: CodeLabel,
    fpush_lo: CodeLabel,
    fcounted: CodeLabel,
    fopen_hi: CodeLabel,
    fpop_lo: CodeLabel,
    fpop: CodeLabel,
    fpop_next: CodeLabel,
    funcounted: CodeLabel,
    fclose_hi: CodeLabel,
    aretry: CodeLabel,
    apush_lo: CodeLabel,
    apush_hi: CodeLabel,
    rpop_lo: CodeLabel,
    rpop_store: CodeLabel,
    rpop_next: CodeLabel,
    dclose_hi: CodeLabel,
    dhi: CodeLabel,
}

impl Labels {
    fn new(a: &mut CodeAssembler) -> Labels {
        let mut c = || a.create_label();
        Labels {
            entry: c(),
            retry: c(),
            rec: c(),
            pass: c(),
            entry_only: c(),
            exit: c(),
            xrec: c(),
            xtail: c(),
            slow_exit: c(),
            flagged: c(),
            fretry: c(),
            filter: c(),
            notrace: c(),
            fast: c(),
            inv3: c(),
            npop: c(),
            npop_next: c(),
            nclose_lo: c(),
            nclose_hi: c(),
            nrestart: c(),
            npush_lo: c(),
            npush_hi: c(),
            fcheck: c(),
            fpush_lo: c(),
            fcounted: c(),
            fopen_hi: c(),
            fpop_lo: c(),
            fpop: c(),
            fpop_next: c(),
            funcounted: c(),
            fclose_hi: c(),
            aretry: c(),
            apush_lo: c(),
            apush_hi: c(),
            rpop_lo: c(),
            rpop_store: c(),
            rpop_next: c(),
            dclose_hi: c(),
            dhi: c(),
        }
    }

    /// The entry points and windows of the assembled block (`filtered`:
    /// the filtered variant, else every entry is `entry` and there are no
    /// windows).
    fn common(&self, res: &CodeAssemblerResult, filtered: bool) -> Result<Common, IcedError> {
        let ip = |l: &CodeLabel| res.label_ip(l);
        let entry = ip(&self.entry)?;
        let or_entry = |l: &CodeLabel| if filtered { ip(l) } else { Ok(entry) };
        Ok(Common {
            entry,
            entry_flagged: or_entry(&self.flagged)?,
            entry_notrace: or_entry(&self.notrace)?,
            entry_filter: or_entry(&self.filter)?,
            entry_fast: or_entry(&self.fast)?,
            region_windows: if filtered {
                RegionWindows {
                    restart: ip(&self.nrestart)?,
                    push_lo: ip(&self.npush_lo)?,
                    push_hi: ip(&self.npush_hi)?,
                    pop: ip(&self.npop)?,
                    pop_next: ip(&self.npop_next)?,
                    close_lo: ip(&self.nclose_lo)?,
                    close_hi: ip(&self.nclose_hi)?,
                    tail: ip(&self.xtail)?,
                    f_check: ip(&self.fcheck)?,
                    f_push_lo: ip(&self.fpush_lo)?,
                    f_counted: ip(&self.fcounted)?,
                    f_open_hi: ip(&self.fopen_hi)?,
                    f_pop_lo: ip(&self.fpop_lo)?,
                    f_pop: ip(&self.fpop)?,
                    f_uncounted: ip(&self.funcounted)?,
                    f_close_hi: ip(&self.fclose_hi)?,
                    a_retry: ip(&self.aretry)?,
                    a_push_lo: ip(&self.apush_lo)?,
                    a_push_hi: ip(&self.apush_hi)?,
                    r_pop_lo: ip(&self.rpop_lo)?,
                    r_pop_store: ip(&self.rpop_store)?,
                    r_pop_next: ip(&self.rpop_next)?,
                    d_hi: ip(&self.dhi)?,
                    d_close_lo: ip(&self.rpop_next)?,
                    d_close_hi: ip(&self.dclose_hi)?,
                }
            } else {
                RegionWindows::default()
            },
            entry_only: ip(&self.entry_only)?,
            exit: ip(&self.exit)?,
        })
    }
}

/// The thread's state pointer (`tls::State`'s first word) and its busy word.
fn tls_words(p: &Params) -> (AsmMemoryOperand, AsmMemoryOperand) {
    (qword_ptr(p.tls).fs(), qword_ptr(p.tls + 8).fs())
}

const ENT: i32 = SHADOW_ENTRY_SIZE as i32;

/// The local labels of `entry`'s slow paths.
struct EntrySlow {
    busy: CodeLabel,
    overflow: CodeLabel,
    init: CodeLabel,
    full: CodeLabel,
    resync: CodeLabel,
}

impl Gen<'_> {
    /// `entry`, the entry of unflagged functions: eax = function id;
    /// [rsp] = return into the stub, [rsp+8] = the stub's saved rax,
    /// [rsp+16] = the caller's return address. Pushes the shadow entry
    /// and records the entry. Returns ZF=1 when the call is traced (the
    /// stub then takes over the return), ZF=0 to pass straight through.
    /// Filtered, the global switch is applied first and one comparison
    /// with the thread's limit decides (hidden: no record, no shadow
    /// entry).
    fn entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut s = EntrySlow {
            busy: a.create_label(),
            overflow: a.create_label(),
            init: a.create_label(),
            full: a.create_label(),
            resync: a.create_label(),
        };
        a.set_label(&mut l.entry)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?; // the caller's return slot is now at rsp+40
        a.set_label(&mut l.retry)?;
        a.cmp(tls_busy, 0)?;
        a.jne(s.busy)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(s.init)?;
        if let Some(g) = p.filter {
            a.mov(rcx, g)?;
            a.mov(ecx, dword_ptr(rcx))?;
            a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
            a.jne(s.resync)?;
            a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
            a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
            a.jae(l.pass)?;
        }
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve the shadow entry first
        fill_shadow_entry(a, 0, s.overflow)?;
        a.shl(rax, KIND_BITS)?; // EventKind::Entry == 0
        a.set_label(&mut l.rec)?;
        record(a, p, s.full)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: traced
        a.ret()?;
        a.set_label(&mut l.pass)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.test(rsp, rsp)?; // ZF=0: pass through
        a.ret()?;
        self.entry_slow_paths(&mut s)
    }

    /// `entry`'s slow paths: an unwinder running, the shadow stack full,
    /// the thread's first call, the buffer full, the global switch
    /// changed (filtered).
    fn entry_slow_paths(&mut self, s: &mut EntrySlow) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (_, tls_busy) = tls_words(p);
        a.set_label(&mut s.busy)?;
        // An unwinder is running: the slow path records the call without
        // taking over its return (ZF=1), or sees that the unwinding is over,
        // repairs the shadow stack and asks for a retry (ZF=0).
        a.cmp(tls_busy, BUSY_UNWINDING as i32)?;
        a.jne(l.pass)?;
        slow_call(a, p, SLOW_UNWINDING, Some(40))?;
        a.jnz(l.retry)?;
        a.jmp(l.pass)?;
        a.set_label(&mut s.overflow)?;
        // The shadow stack is full: grown, the call starts over; else it is
        // not traced and counted as lost.
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        slow_call(a, p, SLOW_GROW, None)?;
        a.jnz(l.retry)?;
        a.mov(rcx, p.lost_counter)?;
        a.lock().add(qword_ptr(rcx), 2)?; // this call's entry and exit
        a.jmp(l.pass)?;
        a.set_label(&mut s.init)?;
        slow_call(a, p, SLOW_INIT, None)?;
        a.jmp(l.retry)?;
        a.set_label(&mut s.full)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(l.rec)?;
        if p.filter.is_some() {
            a.set_label(&mut s.resync)?;
            slow_call(a, p, SLOW_RESYNC, None)?;
            a.jmp(l.retry)?;
        }
        Ok(())
    }

    /// `entry_only`: eax = function id; records an entry and an exit at
    /// the same time, never touches the return address (a function whose
    /// return cannot be captured). Filtered, the global switch is applied
    /// and the thread's limit decides, as in `entry`.
    fn entry_only(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut eo_rec = a.create_label();
        let mut eo_rec2 = a.create_label();
        let mut eo_done = a.create_label();
        let mut eo_full = a.create_label();
        let mut eo_full2 = a.create_label();
        a.set_label(&mut l.entry_only)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.push(rax)?;
        a.cmp(tls_busy, 0)?;
        a.jne(eo_done)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(eo_done)?;
        if let Some(g) = p.filter {
            let mut synced = a.create_label();
            a.mov(rcx, g)?;
            a.mov(ecx, dword_ptr(rcx))?;
            a.cmp(ecx, dword_ptr(r11 + OFF_GEN))?;
            a.je(synced)?;
            slow_call(a, p, SLOW_RESYNC, None)?;
            a.set_label(&mut synced)?;
            a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
            a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
            a.jae(eo_done)?;
        }
        a.shl(rax, KIND_BITS)?;
        a.set_label(&mut eo_rec)?;
        record(a, p, eo_full)?;
        a.mov(rax, qword_ptr(rsp))?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.set_label(&mut eo_rec2)?;
        record(a, p, eo_full2)?;
        a.set_label(&mut eo_done)?;
        a.pop(rax)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.ret()?;
        a.set_label(&mut eo_full)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(eo_rec)?;
        a.set_label(&mut eo_full2)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(eo_rec2)
    }

    /// `exit`: reached by a jmp from the stub after the function body
    /// returned; rsp = the caller's return slot + 8. Pops the shadow
    /// entry, puts the real return address back into the slot, records
    /// the exit and returns through the slot, so the CPU's return-stack
    /// predictions stay paired. Filtered, frames that ask for more go to
    /// [`Gen::slow_exits`], and nothing is recorded after `finish`.
    fn exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, _) = tls_words(p);
        let mut again = a.create_label();
        let mut mismatch = a.create_label();
        let mut xfull = a.create_label();
        a.set_label(&mut l.exit)?;
        a.lea(rsp, qword_ptr(rsp - 8))?;
        a.push(rax)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?; // slot at rsp+32
        a.mov(r11, tls_state)?;
        a.set_label(&mut again)?;
        a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
        a.sub(rcx, ENT)?;
        a.lea(rdx, qword_ptr(rsp + 32))?;
        a.cmp(qword_ptr(rcx + 8), rdx)?;
        a.jne(mismatch)?;
        if p.filter.is_some() {
            // A region owner or a -R function (crate::recording::filter::E_SLOW_EXIT).
            a.test(byte_ptr(rcx + 20), 1)?;
            a.jnz(l.slow_exit)?;
        }
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // pop after reading it all
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        if p.filter.is_some() {
            // After `finish`, not even the exits of open calls are recorded.
            a.mov(rcx, p.finished)?;
            a.cmp(byte_ptr(rcx), 0)?;
            a.jne(l.xtail)?;
        }
        a.set_label(&mut l.xrec)?;
        record(a, p, xfull)?;
        a.set_label(&mut l.xtail)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.pop(rax)?;
        a.ret()?;
        a.set_label(&mut mismatch)?;
        slow_call(a, p, SLOW_MISMATCH, Some(32))?;
        a.jmp(again)?;
        a.set_label(&mut xfull)?;
        slow_call(a, p, SLOW_FULL, None)?;
        a.jmp(l.xrec)
    }

    /// The filtered exit of a frame whose shadow entry asks for more than
    /// a record (rcx = that entry, the slot at rsp+32): a `-N` region's
    /// exit, a `-F` region's, a `-R` or depth frame's made by the fast
    /// flagged entry, each generated; any other goes to the slow path.
    fn slow_exits(&mut self) -> Result<(), IcedError> {
        let mut not_notrace = self.a.create_label();
        let mut not_filter = self.a.create_label();
        let mut real_slow = self.a.create_label();
        self.notrace_exit(not_notrace)?;
        self.a.set_label(&mut not_notrace)?;
        self.filter_exit(not_filter)?;
        self.a.set_label(&mut not_filter)?;
        self.fast_exit(real_slow)?;
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.set_label(&mut real_slow)?;
        slow_call(a, p, SLOW_FLAGGED_EXIT, Some(32))?;
        a.jmp(l.xtail)
    }

    /// The exit of a -N region made by the generated -N entry
    /// ([`Gen::notrace_entry`]), else a jump to `other`: pop, count the
    /// region closed, and if nothing else blocks recording and there is
    /// no depth limit, open again.
    fn notrace_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.set_label(&mut l.slow_exit)?;
        let mut reopen_slow = a.create_label();
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.shr(rax, 32)?;
        a.cmp(eax, (NOTRACE_ENTRY_BITS >> 32) as i32)?;
        a.jne(other)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut l.npop)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut l.npop_next)?;
        a.sub(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        a.sub(dword_ptr(r11 + OFF_BLOCK), 1)?;
        // From here to the limit's store, a signal handler that changes
        // the state (a `--signal` trace_off) would have its limit
        // overwritten: `signal::fix_interrupted` completes the closing
        // from the state instead.
        a.set_label(&mut l.nclose_lo)?;
        a.jnz(l.xtail)?;
        a.cmp(dword_ptr(r11 + OFF_MAX), -1)?;
        a.jne(reopen_slow)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), -1)?;
        a.set_label(&mut l.nclose_hi)?;
        a.jmp(l.xtail)?;
        a.set_label(&mut reopen_slow)?;
        slow_call(a, p, SLOW_RESYNC, None)?;
        a.jmp(l.xtail)
    }

    /// The exit of a -F region made by the generated -F entry
    /// ([`Gen::filter_entry`], or by the slow path, the same entry), else
    /// a jump to `other`: pop, count the region closed, close recording
    /// if it was the last one, record the exit. A signal from the slot's
    /// store up to the closed region completes the pop and the closing
    /// first (`signal::fix_interrupted`).
    fn filter_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        a.cmp(eax, (FILTER_ENTRY_BITS >> 32) as i32)?;
        a.jne(other)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut l.fpop_lo)?;
        a.mov(eax, dword_ptr(rcx + 16))?;
        a.set_label(&mut l.fpop)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut l.fpop_next)?;
        a.sub(dword_ptr(r11 + OFF_FL), 1)?;
        a.set_label(&mut l.funcounted)?;
        a.jnz(l.fclose_hi)?;
        a.or(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), 0)?;
        a.set_label(&mut l.fclose_hi)?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.jmp(l.xrec)
    }

    /// The exit of a frame the fast flagged entry made ([`Gen::fast_entry`]),
    /// else a jump to `other`: pop, then the `-R` return value
    /// ([`Gen::retval_exit`]) or the depth region's closing
    /// ([`Gen::depth_exit`]). A signal between the slot's store and the
    /// pop completes the pop (`signal::fix_interrupted`, as for `exit`).
    fn fast_exit(&mut self, other: CodeLabel) -> Result<(), IcedError> {
        let a = &mut self.a;
        let mut fast_pop = a.create_label();
        let mut fast_ret = a.create_label();
        a.cmp(al, FASTRET_BITS as i8 as i32)?;
        a.je(fast_pop)?;
        a.cmp(al, DEPTH_BITS as i8 as i32)?;
        a.jne(other)?;
        a.set_label(&mut fast_pop)?;
        a.mov(rax, qword_ptr(rcx))?;
        a.mov(qword_ptr(rsp + 32), rax)?;
        a.set_label(&mut self.l.rpop_lo)?;
        a.mov(rax, qword_ptr(rcx + 16))?;
        a.set_label(&mut self.l.rpop_store)?;
        a.mov(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?;
        a.set_label(&mut self.l.rpop_next)?;
        a.bt(rax, E_FASTRET.trailing_zeros() as i32)?;
        a.jc(fast_ret)?;
        self.depth_exit()?;
        self.a.set_label(&mut fast_ret)?;
        self.retval_exit()
    }

    /// The exit of a depth=N region made by the fast flagged entry (what
    /// `filter::release` does), after the pop: the depth limit from
    /// before the call put back, `limit` made from the state as
    /// `filter::recompute` makes it; then the exit recorded. A signal
    /// from here to the limit's store makes them from the state instead
    /// (`signal::fix_interrupted`). rcx = the top.
    fn depth_exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut c1 = a.create_label();
        let mut c_zero = a.create_label();
        let mut c_inf = a.create_label();
        let mut c_store = a.create_label();
        a.mov(rdx, rax)?;
        a.shr(rdx, PREV_SHIFT)?;
        a.and(edx, PREV_MASK as u32)?;
        a.cmp(edx, PREV_MASK as u32)?;
        a.jne(c1)?;
        a.mov(edx, u32::MAX)?;
        a.set_label(&mut c1)?;
        a.mov(dword_ptr(r11 + OFF_MAX), edx)?;
        a.cmp(dword_ptr(r11 + OFF_BLOCK), 0)?;
        a.jne(c_zero)?;
        a.cmp(edx, -1)?;
        a.je(c_inf)?;
        a.mov(qword_ptr(rsp - 8), rdx)?;
        depth_of(a, rcx, l.inv3)?;
        a.neg(rdx)?;
        a.add(rdx, qword_ptr(rsp - 8))?;
        a.imul_3(rdx, rdx, ENT)?;
        a.add(rdx, rcx)?;
        a.test(rdx, rdx)?;
        a.jns(c_store)?;
        a.set_label(&mut c_zero)?;
        a.xor(edx, edx)?;
        a.jmp(c_store)?;
        a.set_label(&mut c_inf)?;
        a.mov(rdx, -1i64)?;
        a.set_label(&mut c_store)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), rdx)?;
        a.set_label(&mut l.dclose_hi)?;
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.mov(eax, eax)?;
        a.shl(rax, KIND_BITS)?;
        a.or(rax, EventKind::Exit as i32)?;
        a.jmp(l.xrec)
    }

    /// The exit of a -R frame whose return value the generated code
    /// records (`E_FASTRET`, made by the fast flagged entry), after the
    /// pop: the `Retval` record, its payload and the `Exit` record in one
    /// reservation, as `filter::flagged_exit` writes them.
    fn retval_exit(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        // After `finish`, nothing more (as the plain exit).
        a.mov(rcx, p.finished)?;
        a.cmp(byte_ptr(rcx), 0)?;
        a.jne(l.xtail)?;
        a.push(rsi)?;
        a.push(rdi)?;
        // rsi: the return value (the saved rax) cut to its size; rdi:
        // the value's header (tag, format, size).
        a.mov(rsi, qword_ptr(rsp + 40))?;
        a.mov(rcx, rax)?;
        a.shr(rcx, 56)?;
        a.neg(ecx)?;
        a.lea(ecx, dword_ptr(rcx * 8 + 64))?;
        a.shl(rsi, cl)?;
        a.shr(rsi, cl)?;
        a.mov(rdi, rax)?;
        a.shr(rdi, FASTRET_SHIFT)?;
        let mut r_rec = a.create_label();
        let mut r_full = a.create_label();
        let want = 2 * RawEvent::SIZE as i32;
        a.set_label(&mut r_rec)?;
        a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
        a.mov(edx, want as u32)?;
        a.xadd(qword_ptr(rcx), rdx)?;
        a.cmp(rdx, p.buf_size as i32 - want)?;
        a.ja(r_full)?;
        a.add(rcx, rdx)?;
        a.mov(edx, eax)?;
        a.shl(rdx, KIND_BITS)?;
        a.or(rdx, EventKind::Retval as i32)?;
        a.bts(rdx, WITH_CALL_STEP.trailing_zeros() as i32)?;
        // One Retval record that is also the exit (`WITH_CALL_STEP`). It
        // first says "never completed" with the whole reservation as
        // payload (as `buffer::emit`), then the payload, then its word,
        // then the timestamp.
        a.mov(r11, (RawEvent::SIZE as u64) << PAYLOAD_LEN_SHIFT)?;
        a.or(r11, rdx)?;
        a.mov(qword_ptr(rcx), r11)?;
        a.mov(qword_ptr(rcx + 8), 0)?;
        a.mov(qword_ptr(rcx + 16), 0)?;
        a.mov(qword_ptr(rcx + 24), 0)?;
        a.mov(dword_ptr(rcx + 16), edi)?;
        a.mov(qword_ptr(rcx + 19), rsi)?;
        a.mov(r11, 11u64 << PAYLOAD_LEN_SHIFT)?;
        a.or(r11, rdx)?;
        a.mov(qword_ptr(rcx), r11)?;
        stamp(a)?;
        a.pop(rdi)?;
        a.pop(rsi)?;
        a.jmp(l.xtail)?;
        clear_reservation_then_switch(a, p, &mut r_full)?;
        a.jmp(r_rec)
    }

    /// The entry of flagged functions (filtered variant): always the slow
    /// path, which does what the flags ask in Rust; its checks (`fretry`)
    /// are where the generated flagged entries go with anything unusual.
    fn flagged_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let (tls_state, tls_busy) = tls_words(p);
        let mut fbusy = a.create_label();
        let mut finit = a.create_label();
        a.set_label(&mut l.flagged)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.fretry)?;
        a.cmp(tls_busy, 0)?;
        a.jne(fbusy)?;
        a.mov(r11, tls_state)?;
        a.test(r11, r11)?;
        a.jz(finit)?;
        slow_call(a, p, SLOW_FLAGGED_ENTRY, Some(40))?;
        // ZF=1 (the slow path returned 0): traced.
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.ret()?;
        a.set_label(&mut fbusy)?;
        a.cmp(tls_busy, BUSY_UNWINDING as i32)?;
        a.jne(l.pass)?;
        slow_call(a, p, SLOW_UNWINDING, Some(40))?;
        a.jnz(l.fretry)?;
        a.jmp(l.pass)?;
        a.set_label(&mut finit)?;
        slow_call(a, p, SLOW_INIT, None)?;
        a.jmp(l.fretry)
    }

    /// The entry of a function whose only flag is -F. Inside a -F region
    /// already (a recursive or repeated -F function), it is a plain call:
    /// another -F frame changes nothing that a plain one does not. The
    /// outermost one opens the region here when nothing else blocks
    /// recording and there is no depth limit (what `filter::flagged_entry`
    /// does then): its shadow entry is pushed whole first
    /// (`FILTER_ENTRY_BITS`, so that its exit is generated too), then the
    /// region is counted and opened, then the entry is recorded. Anything
    /// else goes to the slow path. A signal from the first check up to
    /// the open region undoes what was done and restarts at the checks
    /// (`signal::fix_interrupted`): a handler sees the state from before
    /// the call, and the region is never opened over a change the
    /// handler made.
    fn filter_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut fplain = a.create_label();
        let mut ffull = a.create_label();
        a.set_label(&mut l.filter)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.fcheck)?;
        usual_filtered_checks(a, p, l.fretry)?;
        a.test(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.jz(fplain)?;
        a.cmp(dword_ptr(r11 + OFF_BLOCK), B_NOFILTER as i32)?;
        a.jne(l.fretry)?;
        a.cmp(dword_ptr(r11 + OFF_MAX), -1)?;
        a.jne(l.fretry)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.fpush_lo)?;
        fill_shadow_entry(a, FILTER_ENTRY_BITS, ffull)?;
        a.add(dword_ptr(r11 + OFF_FL), 1)?;
        a.set_label(&mut l.fcounted)?;
        a.and(dword_ptr(r11 + OFF_BLOCK), !B_NOFILTER as i32)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), -1)?;
        a.set_label(&mut l.fopen_hi)?;
        a.shl(rax, KIND_BITS)?; // EventKind::Entry == 0
        a.jmp(l.rec)?;
        a.set_label(&mut fplain)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.jmp(l.entry)?;
        a.set_label(&mut ffull)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.jmp(l.fretry)
    }

    /// The entry of a function whose only flag is -N: a hidden region
    /// entry, without the slow path. Anything unusual (busy, first call,
    /// global switch, full shadow stack) goes to the flagged entry's slow
    /// path, which does the same in Rust.
    fn notrace_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut nfull = a.create_label();
        a.set_label(&mut l.notrace)?;
        usual_filtered_entry(a, p, l.fretry)?;
        // Closed first, so that a signal handler running from here on
        // records nothing either.
        a.add(dword_ptr(r11 + OFF_BLOCK), 1)?;
        a.add(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), 0)?;
        a.set_label(&mut l.nrestart)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.npush_lo)?;
        fill_shadow_entry(a, NOTRACE_ENTRY_BITS, nfull)?;
        a.set_label(&mut l.npush_hi)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: its return is taken over
        a.ret()?;
        a.set_label(&mut nfull)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.sub(dword_ptr(r11 + OFF_BLOCK), 1)?;
        a.sub(qword_ptr(r11 + OFF_HIDDEN), 1)?;
        slow_call(a, p, SLOW_RESYNC, None)?;
        // Grown: the entry starts over (its checks see the state again).
        slow_call(a, p, SLOW_GROW, None)?;
        a.jnz(l.fretry)?;
        a.jmp(l.pass)
    }

    /// The fast flagged entry: rax = the function's `FastDesc`
    /// (`recording::filter::fast_desc`). When nothing unusual is going
    /// on and its trigger condition holds, it does what
    /// `filter::flagged_entry` would: the limit decides as for an
    /// unflagged call; a recorded call pushes its shadow entry (with the
    /// `-R` bits), applies a depth trigger, then records its entry
    /// ([`Gen::fast_entry_args`] with arguments). Anything else goes to
    /// the flagged entry's slow path with the id in eax. A signal between
    /// the shadow entry's reservation and its last store undoes it and
    /// restarts at the checks (`signal::fix_interrupted`, as for `entry`).
    fn fast_entry(&mut self) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut f = FastSlow {
            slow: a.create_label(),
            overflow: a.create_label(),
            args: a.create_label(),
        };
        a.set_label(&mut l.fast)?;
        a.push(rcx)?;
        a.push(rdx)?;
        a.push(r11)?;
        a.set_label(&mut l.aretry)?;
        usual_filtered_checks(a, p, f.slow)?;
        a.mov(ecx, dword_ptr(r11 + OFF_BLOCK))?;
        a.and(ecx, dword_ptr(rax + FD_TRIG_MASK))?;
        a.cmp(ecx, dword_ptr(rax + FD_TRIG_WANT))?;
        a.jne(f.slow)?;
        a.mov(rcx, qword_ptr(r11 + OFF_SHADOW_TOP))?;
        a.cmp(rcx, qword_ptr(r11 + OFF_LIMIT))?;
        a.jae(l.pass)?;
        // The shadow entry's word: with a depth trigger, the depth limit
        // from before the call above the bits (`E_DEPTH`, as
        // `filter::flagged_entry` writes it); kept in the red zone
        // (signal frames are put below it).
        let mut prev_ok = a.create_label();
        a.mov(edx, dword_ptr(r11 + OFF_MAX))?;
        a.cmp(rdx, PREV_MASK as i32)?;
        a.jbe(prev_ok)?;
        a.mov(edx, PREV_MASK as u32)?;
        a.set_label(&mut prev_ok)?;
        a.shl(rdx, PREV_SHIFT)?;
        a.and(rdx, qword_ptr(rax + FD_DEPTH_MASK))?;
        a.or(rdx, qword_ptr(rax + FD_SHADOW_WORD))?;
        a.mov(qword_ptr(rsp - 8), rdx)?;
        a.mov(ecx, ENT as u32)?;
        a.xadd(qword_ptr(r11 + OFF_SHADOW_TOP), rcx)?; // reserve first
        a.set_label(&mut l.apush_lo)?;
        a.cmp(rcx, qword_ptr(r11 + OFF_SHADOW_END))?;
        a.jae(f.overflow)?;
        a.mov(rdx, qword_ptr(rsp + 40))?;
        a.mov(qword_ptr(rcx), rdx)?;
        a.lea(rdx, qword_ptr(rsp + 40))?;
        a.mov(qword_ptr(rcx + 8), rdx)?;
        a.mov(rdx, qword_ptr(rsp - 8))?;
        a.mov(qword_ptr(rcx + 16), rdx)?;
        a.set_label(&mut l.apush_hi)?;
        self.fast_entry_depth()?;
        let a = &mut self.a;
        a.cmp(dword_ptr(rax + FD_COUNT), 0)?;
        a.jne(f.args)?;
        // No arguments: the entry's own record, as `entry` writes it.
        a.mov(rax, qword_ptr(rax + FD_ENTRY_WORD))?;
        a.jmp(self.l.rec)?;
        self.fast_entry_args(&mut f)
    }

    /// The fast flagged entry's depth trigger, if its `FastDesc` has one,
    /// after its shadow entry is pushed (rcx): the limit becomes N levels
    /// from the call (`st.max = min(max, v + N)`, v the recorded calls
    /// open before it), and `limit` the top at which it is reached. A
    /// signal from here to the limit's store puts the old limit back,
    /// takes the shadow entry back and restarts at the checks
    /// (`signal::fix_interrupted`).
    fn fast_entry_depth(&mut self) -> Result<(), IcedError> {
        let (a, l) = (&mut self.a, &mut self.l);
        let mut a_nodepth = a.create_label();
        let mut d1 = a.create_label();
        let mut d2 = a.create_label();
        a.cmp(qword_ptr(rax + FD_DEPTH_MASK), 0)?;
        a.je(a_nodepth)?;
        depth_of(a, rcx, l.inv3)?;
        a.mov(qword_ptr(rsp - 16), rdx)?;
        a.add(rdx, qword_ptr(rax + FD_DEPTH))?;
        a.cmp(rdx, (PREV_MASK - 1) as i32)?;
        a.jbe(d1)?;
        a.mov(edx, (PREV_MASK - 1) as u32)?;
        a.set_label(&mut d1)?;
        a.cmp(edx, dword_ptr(r11 + OFF_MAX))?;
        a.jbe(d2)?;
        a.mov(edx, dword_ptr(r11 + OFF_MAX))?;
        a.set_label(&mut d2)?;
        a.mov(dword_ptr(r11 + OFF_MAX), edx)?;
        a.sub(rdx, qword_ptr(rsp - 16))?;
        a.imul_3(rdx, rdx, ENT)?;
        a.add(rdx, rcx)?;
        a.mov(qword_ptr(r11 + OFF_LIMIT), rdx)?;
        a.set_label(&mut l.dhi)?;
        a.nop()?;
        a.set_label(&mut a_nodepth)
    }

    /// The fast flagged entry of a function with arguments to record: the
    /// `Args` record that is also the entry and its payload, reserved at
    /// once and written (payload, words, then the timestamp); then the
    /// fast entry's own slow paths.
    fn fast_entry_args(&mut self, f: &mut FastSlow) -> Result<(), IcedError> {
        let (a, p, l) = (&mut self.a, self.p, &mut self.l);
        let mut a_rec = a.create_label();
        let mut a_zero = a.create_label();
        let mut a_item = a.create_label();
        let mut a_full = a.create_label();
        a.set_label(&mut f.args)?;
        // The argument registers in order on the stack: rdi at [rsp],
        // rsi, rdx, rcx (saved above), r8, r9.
        a.push(r9)?;
        a.push(r8)?;
        a.push(qword_ptr(rsp + 32))?; // the saved rcx
        a.push(qword_ptr(rsp + 32))?; // the saved rdx
        a.push(rsi)?;
        a.push(rdi)?;
        a.mov(edx, dword_ptr(rax + FD_WANT))?;
        a.set_label(&mut a_rec)?;
        a.mov(rcx, qword_ptr(r11 + OFF_BUF))?;
        a.mov(rsi, rdx)?;
        a.xadd(qword_ptr(rcx), rdx)?;
        a.lea(rdi, qword_ptr(rdx + rsi))?;
        a.cmp(rdi, p.buf_size as i32)?;
        a.ja(a_full)?;
        // The Args record that is also the entry (`WITH_CALL_STEP`), its
        // payload at +16.
        a.add(rcx, rdx)?;
        a.mov(rdx, qword_ptr(rax + FD_PROV_WORD))?;
        a.mov(qword_ptr(rcx), rdx)?;
        a.mov(qword_ptr(rcx + 8), 0)?;
        a.lea(rdi, qword_ptr(rcx + 16))?;
        a.add(rsi, rcx)?;
        a.set_label(&mut a_zero)?;
        a.mov(qword_ptr(rdi), 0)?;
        a.mov(qword_ptr(rdi + 8), 0)?;
        a.add(rdi, RawEvent::SIZE as i32)?;
        a.cmp(rdi, rsi)?;
        a.jb(a_zero)?;
        // Each value: INT fmt size (the item's header), then its bits.
        a.lea(rdi, qword_ptr(rcx + 16))?;
        a.lea(rsi, qword_ptr(rax + FD_ITEMS))?;
        a.mov(r11d, dword_ptr(rax + FD_COUNT))?;
        a.imul_3(r11, r11, FI_SIZE)?;
        a.add(r11, rsi)?;
        a.set_label(&mut a_item)?;
        a.mov(edx, dword_ptr(rsi + FI_HDR))?;
        a.mov(dword_ptr(rdi), edx)?;
        a.movzx(edx, byte_ptr(rsi))?;
        a.mov(rdx, qword_ptr(rsp + rdx * 8))?;
        a.and(rdx, qword_ptr(rsi + FI_MASK))?;
        a.mov(qword_ptr(rdi + 3), rdx)?;
        a.add(rdi, 11)?;
        a.add(rsi, FI_SIZE)?;
        a.cmp(rsi, r11)?;
        a.jb(a_item)?;
        a.mov(rdx, qword_ptr(rax + FD_ARGS_WORD))?;
        a.mov(qword_ptr(rcx), rdx)?;
        stamp(a)?;
        a.pop(rdi)?;
        a.pop(rsi)?;
        a.add(rsp, 32)?;
        a.pop(r11)?;
        a.pop(rdx)?;
        a.pop(rcx)?;
        a.cmp(eax, eax)?; // ZF=1: traced
        a.ret()?;
        clear_reservation_then_switch(a, p, &mut a_full)?;
        a.mov(edx, dword_ptr(rax + FD_WANT))?;
        a.jmp(a_rec)?;
        a.set_label(&mut f.overflow)?;
        a.sub(qword_ptr(r11 + OFF_SHADOW_TOP), ENT)?;
        a.set_label(&mut f.slow)?;
        a.mov(eax, dword_ptr(rax + FD_ID))?;
        a.jmp(l.fretry)
    }
}

/// The local labels of the fast flagged entry that its parts share.
struct FastSlow {
    /// To the flagged entry's slow path (rax still the `FastDesc`).
    slow: CodeLabel,
    /// The shadow stack is full.
    overflow: CodeLabel,
    /// The function has arguments to record.
    args: CodeLabel,
}

/// How this CPU's extended state is saved: with `xsave` when the OS
/// enabled it (CPUID.1:ECX.OSXSAVE), sized for the components enabled in
/// XCR0; else with `fxsave` (x86-64 always has it, and without XSAVE the
/// OS cannot enable AVX or later state: x87 and SSE are all there is).
pub fn ext_state() -> ExtState {
    let r = std::arch::x86_64::__cpuid(1);
    if r.ecx & (1 << 27) == 0 {
        return ExtState::Fxsave;
    }
    // cpuid leaf 0xD exists on every CPU with xsave.
    let r = std::arch::x86_64::__cpuid_count(0xD, 0);
    ExtState::Xsave(r.ebx.max(576))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};
    use std::collections::BTreeSet;

    /// Every kind of common block the agent asks for (unfiltered and
    /// filtered, each way of saving the extended state, with the sizes
    /// XCR0's usual component sets give), at a few TLS offsets and buffer
    /// sizes, with a distinct value for every address it embeds: each
    /// with the address it is assembled at.
    fn configurations() -> Vec<(u64, Params)> {
        let mut out = Vec::new();
        for filter in [None, Some(0x7f3a_1122_3340)] {
            for ext_state in [
                ExtState::Fxsave,
                ExtState::Xsave(576),
                ExtState::Xsave(832),
                ExtState::Xsave(2696),
                ExtState::Xsave(11008),
            ] {
                for buf_size in [4096, 1 << 20, 1 << 24] {
                    for tls in [-0x40, -0x2_3450] {
                        out.push((
                            0x5555_5555_0000 + out.len() as u64 * 0x1_0000,
                            Params {
                                tls,
                                buf_size,
                                slow_path: 0x7f3a_0000_1230,
                                lost_counter: 0x7f39_8000_0458,
                                ext_state,
                                filter,
                                finished: 0x7f3a_1122_3348,
                            },
                        ));
                    }
                }
            }
        }
        out
    }

    /// Every address in `c`, in a fixed order.
    fn addresses(c: &Common) -> Vec<u64> {
        let w = &c.region_windows;
        vec![
            c.entry,
            c.entry_flagged,
            c.entry_notrace,
            c.entry_filter,
            c.entry_fast,
            c.entry_only,
            c.exit,
            w.restart,
            w.push_lo,
            w.push_hi,
            w.pop,
            w.pop_next,
            w.close_lo,
            w.close_hi,
            w.tail,
            w.f_check,
            w.f_push_lo,
            w.f_counted,
            w.f_open_hi,
            w.f_pop_lo,
            w.f_pop,
            w.f_uncounted,
            w.f_close_hi,
            w.a_retry,
            w.a_push_lo,
            w.a_push_hi,
            w.r_pop_lo,
            w.r_pop_store,
            w.r_pop_next,
            w.d_hi,
            w.d_close_lo,
            w.d_close_hi,
        ]
    }

    /// FNV-1a, 64 bits: a digest that no toolchain changes.
    fn fnv(h: &mut u64, bytes: &[u8]) {
        for &b in bytes {
            *h ^= b as u64;
            *h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The code does not depend on where it is placed (the arena sizes it
    /// assembled at 0, `instrument::stubs::open_arena`), every address it reports is
    /// the start of one of its instructions, and the filtered variant's
    /// entries are distinct.
    #[test]
    fn every_configuration_assembles_the_same_code_anywhere() {
        for (at, p) in configurations() {
            let (code0, c0) = assemble_common(0, &p).unwrap();
            let (code, c) = assemble_common(at, &p).unwrap();
            assert_eq!(code0, code, "{:?}", p.ext_state);
            let starts: BTreeSet<u64> = Decoder::with_ip(64, &code, at, DecoderOptions::NONE)
                .into_iter()
                .map(|i| i.ip())
                .collect();
            for (a0, a) in addresses(&c0).into_iter().zip(addresses(&c)) {
                if p.filter.is_none() && a == 0 {
                    continue; // a region window of the filtered variant
                }
                assert_eq!(a0 + at, a);
                assert!(starts.contains(&a), "{a:#x} is no instruction's start");
            }
            let entries = [c.entry, c.entry_flagged, c.entry_notrace, c.entry_filter];
            let distinct: BTreeSet<u64> = entries.iter().chain([&c.entry_fast]).copied().collect();
            assert_eq!(distinct.len(), if p.filter.is_some() { 5 } else { 1 });
        }
    }

    /// The bytes and addresses of every configuration, as the single
    /// `assemble_common` made them before it was split into one builder
    /// per block (digest recorded from that code, commit 0478740).
    #[test]
    fn the_code_is_the_one_before_the_split() {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for (at, p) in configurations() {
            let (code, c) = assemble_common(at, &p).unwrap();
            fnv(&mut h, &(code.len() as u64).to_le_bytes());
            fnv(&mut h, &code);
            for a in addresses(&c) {
                fnv(&mut h, &a.to_le_bytes());
            }
        }
        assert_eq!(h, 0x5e9a_2f9e_f1ab_0f7e, "digest {h:#018x}");
    }
}
