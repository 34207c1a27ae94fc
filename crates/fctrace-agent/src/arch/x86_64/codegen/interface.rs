//! What the common block needs to know about its environment (`Params`,
//! `ExtState`, chosen with `ext_state`) and what an assembled block gives
//! back: its entry points and the windows a signal must not split
//! (`Common`, `RegionWindows`).

/// How the slow paths save and restore the extended (x87, SSE, AVX...)
/// state. Either way the area starts with FXSAVE's 512-byte legacy layout
/// (xmm0..15 at offset 160), which `recording::filter` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtState {
    /// `xsave64`/`xrstor64` of the components of `mask` (those enabled in
    /// XCR0 but AMX's tiles), into an area of `size` bytes.
    Xsave { size: u32, mask: u64 },
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

/// How this CPU's extended state is saved: with `xsave` when the OS
/// enabled it (CPUID.1:ECX.OSXSAVE), of the components enabled in XCR0
/// but AMX's tile configuration and data (bits 17 and 18: 8 KiB of tiles
/// that neither the agent nor the C library functions it calls touch, and
/// which on a CPU with AMX made each slow path take 11 KiB of the
/// program's stack: a coroutine's 6 KiB stack overflowed), in an area
/// sized to the last of them (standard layout: CPUID leaf 0xD gives each
/// component's offset and size); else with `fxsave` (x86-64 always has
/// it, and without XSAVE the OS cannot enable AVX or later state: x87 and
/// SSE are all there is).
pub fn ext_state() -> ExtState {
    let r = std::arch::x86_64::__cpuid(1);
    if r.ecx & (1 << 27) == 0 {
        return ExtState::Fxsave;
    }
    // SAFETY: xgetbv(0) reads XCR0; OSXSAVE (checked above) makes it
    // available in user mode.
    let xcr0 = unsafe { std::arch::x86_64::_xgetbv(0) };
    let mask = xcr0 & !AMX_TILES;
    ExtState::Xsave {
        size: area_size(mask),
        mask,
    }
}

/// The size of a standard-layout XSAVE area holding the components of
/// `mask`: the end of the last one (CPUID leaf 0xD, which exists on every
/// CPU with XSAVE, gives each one's offset and size), at least the legacy
/// area and the header.
fn area_size(mask: u64) -> u32 {
    (2..63)
        .filter(|i| mask & 1 << i != 0)
        .map(|i| {
            let r = std::arch::x86_64::__cpuid_count(0xD, i);
            r.ebx + r.eax
        })
        .max()
        .unwrap_or(0)
        .max(576)
}

/// XCR0's AMX components: the tile configuration and the tile data.
pub const AMX_TILES: u64 = 1 << 17 | 1 << 18;

#[cfg(test)]
mod tests {
    use super::*;

    /// This CPU's save area: AMX's tiles never in it, x87 and SSE always,
    /// its size reaching the end of the last component saved.
    #[test]
    fn the_save_area_leaves_amx_tiles_out() {
        let ExtState::Xsave { size, mask } = ext_state() else {
            return;
        };
        assert_eq!(mask & AMX_TILES, 0, "mask {mask:#x}");
        assert_eq!(mask & 3, 3, "mask {mask:#x}");
        // (The tile data alone is 8 KiB.)
        assert!(size < 8192, "size {size}");
        // AVX's upper halves (component 2) start at 576, 256 bytes.
        if mask & 4 != 0 {
            assert!(size >= 832, "size {size}");
        }
    }
}
