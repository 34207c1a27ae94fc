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
//! Files, bottom first: `codegen/interface.rs` (what the block needs and
//! gives: `Params`, `Common`), `codegen/emit.rs` (sequences several blocks
//! share: the slow-path call, a record, a shadow entry), `codegen/builder.rs`
//! (`Gen` and the labels blocks share), then the builders:
//! `codegen/entry_exit.rs` (`entry`, `entry_only`, `exit`),
//! `codegen/region_exits.rs` and `codegen/flagged_entries.rs` (the filtered
//! variant's); this file assembles them in order.
//!
//! The hot path touches only rax, rcx, rdx and r11, which it saves: every
//! other register (and all vector state) is left alone, because GCC's
//! inter-procedural register allocation lets callers keep values in
//! registers that a known callee does not clobber. It allocates nothing,
//! takes no lock and makes no system call. Per-thread data is reached with
//! one `fs:`-relative load at the agent's initial-exec TLS offset.

mod builder;
mod emit;
mod entry_exit;
mod flagged_entries;
mod interface;
mod region_exits;

use builder::{Gen, Labels};
use iced_x86::code_asm::*;
use iced_x86::{BlockEncoderOptions, IcedError};
pub use interface::{ext_state, Common, Params, RegionWindows};

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

#[cfg(test)]
mod tests {
    use super::interface::ExtState;
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
                ExtState::Xsave {
                    size: 576,
                    mask: 0x3,
                },
                ExtState::Xsave {
                    size: 832,
                    mask: 0x7,
                },
                ExtState::Xsave {
                    size: 2696,
                    mask: 0x2e7,
                },
                ExtState::Xsave {
                    size: 2696,
                    mask: 0x802e7,
                },
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
}
