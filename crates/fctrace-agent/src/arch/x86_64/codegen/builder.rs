//! The state of the common block being assembled (`Gen`): the assembler,
//! the parameters, and the labels that blocks share or whose addresses
//! `Common` reports. Each block's builder is a method of `Gen`, in the
//! file of its kind (`entry_exit`, `region_exits`, `flagged_entries`).

use super::interface::{Common, Params, RegionWindows};
use iced_x86::code_asm::*;
use iced_x86::IcedError;

/// The common block being assembled: each method emits one block of it,
/// after the ones before it.
pub(super) struct Gen<'p> {
    pub(super) a: CodeAssembler,
    pub(super) p: &'p Params,
    pub(super) l: Labels,
}

/// The labels that more than one block jumps to, and those whose
/// addresses [`Common`] reports.
pub(super) struct Labels {
    pub(super) entry: CodeLabel,
    /// `entry`'s checks, after its pushes.
    pub(super) retry: CodeLabel,
    /// `entry`'s record of the event word in rax.
    pub(super) rec: CodeLabel,
    /// Restores `entry`'s registers, returns with ZF=0 (not traced).
    pub(super) pass: CodeLabel,
    pub(super) entry_only: CodeLabel,
    pub(super) exit: CodeLabel,
    /// The exit's record of the event word in rax.
    pub(super) xrec: CodeLabel,
    /// The exit's common tail: restores the registers, returns.
    pub(super) xtail: CodeLabel,
    /// The exits of frames that ask for more than a record (filtered).
    pub(super) slow_exit: CodeLabel,
    pub(super) flagged: CodeLabel,
    /// The flagged entry's checks, after its pushes: the slow path.
    pub(super) fretry: CodeLabel,
    pub(super) filter: CodeLabel,
    pub(super) notrace: CodeLabel,
    pub(super) fast: CodeLabel,
    /// The constant of [`depth_of`].
    pub(super) inv3: CodeLabel,
    /// The instructions that bound [`RegionWindows`].
    pub(super) npop: CodeLabel,
    pub(super) npop_next: CodeLabel,
    pub(super) nclose_lo: CodeLabel,
    pub(super) nclose_hi: CodeLabel,
    pub(super) nrestart: CodeLabel,
    pub(super) npush_lo: CodeLabel,
    pub(super) npush_hi: CodeLabel,
    pub(super) fcheck: CodeLabel,
    pub(super) fpush_lo: CodeLabel,
    pub(super) fcounted: CodeLabel,
    pub(super) fopen_hi: CodeLabel,
    pub(super) fpop_lo: CodeLabel,
    pub(super) fpop: CodeLabel,
    pub(super) fpop_next: CodeLabel,
    pub(super) funcounted: CodeLabel,
    pub(super) fclose_hi: CodeLabel,
    pub(super) aretry: CodeLabel,
    pub(super) apush_lo: CodeLabel,
    pub(super) apush_hi: CodeLabel,
    pub(super) rpop_lo: CodeLabel,
    pub(super) rpop_store: CodeLabel,
    pub(super) rpop_next: CodeLabel,
    pub(super) dclose_hi: CodeLabel,
    pub(super) dhi: CodeLabel,
}

impl Labels {
    pub(super) fn new(a: &mut CodeAssembler) -> Labels {
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
    pub(super) fn common(
        &self,
        res: &CodeAssemblerResult,
        filtered: bool,
    ) -> Result<Common, IcedError> {
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
