//! The dynamic loader's list of the program's namespace's objects
//! (`_r_debug`, the structure debuggers read), and the function it calls
//! at every change of the list.

use std::ffi::{c_char, c_void};

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
}

/// The loader's structure.
pub fn r_debug() -> *const RDebug {
    std::ptr::addr_of!(_r_debug)
}

/// Whether an object loaded at `base` (its load bias) is on the program's
/// namespace's list (`dlmopen` loads objects into other namespaces). To be
/// called where the list cannot change under the caller: at start-up,
/// inside the loader's notifications, or inside `dl_iterate_phdr` (each
/// holds a lock that writers of the list take).
pub fn on_program_list(base: u64) -> bool {
    // SAFETY: the loader's list is well formed, and stays as it is while
    // the caller runs (above).
    unsafe {
        let mut m = (*r_debug()).r_map;
        while !m.is_null() {
            if (*m).l_addr == base {
                return true;
            }
            m = (*m).l_next;
        }
    }
    false
}
