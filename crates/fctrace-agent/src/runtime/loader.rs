//! The dynamic loader's list of the program's objects (`_r_debug`, the
//! structure debuggers read), read without calling the loader: usable
//! before libc's initialisers have run, and without `dlopen`, which would
//! run initialisers out of their order.

use std::ffi::{c_char, c_void, CStr};

/// glibc's `struct r_debug` (<link.h>): the dynamic linker's list of the
/// program's namespace's objects and the function it calls at every change.
#[repr(C)]
pub struct RDebug {
    pub r_version: i32,
    pub r_map: *const LinkMap,
    pub r_brk: u64,
    pub r_state: i32,
    pub r_ldbase: u64,
}

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
pub struct LinkMap {
    pub l_addr: u64,
    pub l_name: *const c_char,
    pub l_ld: *const c_void,
    pub l_next: *const LinkMap,
    pub l_prev: *const LinkMap,
}

/// `r_state` when the list is consistent.
pub const RT_CONSISTENT: i32 = 0;

unsafe extern "C" {
    /// The dynamic loader's structure (exported by ld.so).
    static _r_debug: RDebug;
    /// This object's dynamic section (defined by the linker).
    static _DYNAMIC: u8;
}

/// The loader's structure.
pub fn r_debug() -> *const RDebug {
    std::ptr::addr_of!(_r_debug)
}

/// The address of this object's dynamic section.
pub fn own_dynamic() -> usize {
    std::ptr::addr_of!(_DYNAMIC) as usize
}

/// The first object of the program's namespace for which `pred` holds.
/// To be called where the list cannot change under the caller: at
/// start-up, inside the loader's notifications, or inside
/// `dl_iterate_phdr` (each holds a lock that writers of the list take).
pub fn find(mut pred: impl FnMut(&LinkMap) -> bool) -> Option<*const LinkMap> {
    // SAFETY: the loader's list is well formed, and stays as it is while
    // the caller runs (above).
    unsafe {
        let mut m = (*r_debug()).r_map;
        while !m.is_null() {
            if pred(&*m) {
                return Some(m);
            }
            m = (*m).l_next;
        }
    }
    None
}

/// This copy of the agent's `link_map`, if it is on the program's
/// namespace's list (the auditing copy, `audit.rs`, is not).
pub fn own_map() -> Option<*const LinkMap> {
    let own = own_dynamic();
    find(|m| m.l_ld as usize == own)
}

/// Whether an object loaded at `base` (its load bias) is on the program's
/// namespace's list.
pub fn on_program_list(base: u64) -> bool {
    find(|m| m.l_addr == base).is_some()
}

/// The loaded object whose path's file name is `file_name`.
pub fn find_named(file_name: &[u8]) -> Option<*const LinkMap> {
    find(|m| {
        // SAFETY: the loader's names are C strings.
        !m.l_name.is_null()
            && unsafe { CStr::from_ptr(m.l_name) }
                .to_bytes()
                .rsplit(|&b| b == b'/')
                .next()
                == Some(file_name)
    })
}

/// The address of the dynamic symbol `name` defined by the loaded object
/// `map` (its default version when it has several), read from its dynamic
/// section and GNU hash table. Unlike `dlsym` on a handle, it needs no
/// search list, which the loader makes for an object loaded at start-up
/// only once something `dlopen`s it.
pub fn lookup(map: *const LinkMap, name: &[u8]) -> Option<u64> {
    const DT_NULL: i64 = 0;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    const DT_VERSYM: i64 = 0x6fff_fff0;
    const SHN_UNDEF: u16 = 0;
    // SAFETY: `map` is a loaded object's `link_map`: its dynamic section,
    // hash table, symbols and strings are mapped and laid out as the ELF
    // specification says; the loader has relocated the section's
    // addresses (or they are offsets from the load bias, checked below).
    unsafe {
        let base = (*map).l_addr;
        let mut dyn_ = (*map).l_ld as *const [i64; 2];
        if dyn_.is_null() {
            return None;
        }
        let (mut strtab, mut symtab, mut gnu_hash, mut versym) = (0u64, 0u64, 0u64, 0u64);
        while (*dyn_)[0] != DT_NULL {
            let [tag, val] = *dyn_;
            let addr = if (val as u64) < base {
                base + val as u64
            } else {
                val as u64
            };
            match tag {
                DT_STRTAB => strtab = addr,
                DT_SYMTAB => symtab = addr,
                DT_GNU_HASH => gnu_hash = addr,
                DT_VERSYM => versym = addr,
                _ => {}
            }
            dyn_ = dyn_.add(1);
        }
        if strtab == 0 || symtab == 0 || gnu_hash == 0 {
            return None;
        }
        let h = name.iter().fold(5381u32, |h, &c| {
            h.wrapping_mul(33).wrapping_add(u32::from(c))
        });
        let words = gnu_hash as *const u32;
        let (nbuckets, symoffset, bloom_size) = (*words, *words.add(1), *words.add(2));
        if nbuckets == 0 {
            return None;
        }
        let buckets = words.add(4 + 2 * bloom_size as usize);
        let chains = buckets.add(nbuckets as usize);
        let mut i = *buckets.add((h % nbuckets) as usize);
        if i < symoffset {
            return None;
        }
        let mut found = None;
        loop {
            let ch = *chains.add((i - symoffset) as usize);
            if ch | 1 == h | 1 {
                // Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64.
                let sym = (symtab + 24 * u64::from(i)) as *const u8;
                let st_name = (sym as *const u32).read_unaligned();
                let shndx = (sym.add(6) as *const u16).read_unaligned();
                let value = (sym.add(8) as *const u64).read_unaligned();
                let s = CStr::from_ptr((strtab + u64::from(st_name)) as *const c_char);
                if s.to_bytes() == name && shndx != SHN_UNDEF && value != 0 {
                    // A hidden (non-default) version only if nothing else.
                    let hidden = versym != 0
                        && ((versym + 2 * u64::from(i)) as *const u16).read_unaligned() & 0x8000
                            != 0;
                    if !hidden {
                        return Some(base + value);
                    }
                    found.get_or_insert(base + value);
                }
            }
            if ch & 1 != 0 {
                return found;
            }
            i += 1;
        }
    }
}
