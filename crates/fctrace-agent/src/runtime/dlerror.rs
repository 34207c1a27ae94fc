//! The program's pending `dlerror()` message, kept across the agent's own
//! `dlsym`/`dlopen` calls. glibc keeps one per thread (since 2.34, the
//! thread's `__libc_dlerror_result`): every `dlsym` clears it, so a
//! program that calls `dlsym`, fails, and calls `dlerror()` after calling
//! a function the agent interposes (whose real function the agent looks
//! up then) would get NULL instead of the message. [`Kept`] takes the
//! pending result out of the thread's slot for the agent's calls and puts
//! it back after; a result one of them left (a failed lookup) is freed
//! first, as glibc frees it (two `dlerror()` calls).
//!
//! The slot is found without the dynamic linker's lookup functions (they
//! would clear the state this keeps): `__libc_dlerror_result` in libc's
//! GNU hash table, a TLS symbol of libc's static TLS block, at a fixed
//! offset from every thread's thread pointer. Without it (an older glibc,
//! another C library), nothing is done. The same lookup finds a function
//! the program or a library exports without `dlsym` ([`global_function`]).

use crate::runtime::tls::thread_pointer;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, Ordering};

/// The slot's offset from the thread pointer; `NOT_YET` or `NONE`.
static OFFSET: AtomicI64 = AtomicI64::new(NOT_YET);
const NOT_YET: i64 = i64::MIN;
const NONE: i64 = i64::MIN + 1;

/// While alive, the thread's pending `dlerror` result is set aside.
pub struct Kept(Option<(*mut usize, usize)>);

impl Kept {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Kept {
        let Some(slot) = slot() else {
            return Kept(None);
        };
        // SAFETY: this thread's `__libc_dlerror_result`, a pointer-sized
        // word of libc's static TLS block.
        let saved = unsafe { slot.read() };
        // SAFETY: as above; glibc treats NULL as "no call made yet".
        unsafe { slot.write(0) };
        Kept(Some((slot, saved)))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let Some((slot, saved)) = self.0 else { return };
        // SAFETY: as in `new`. A result the agent's calls left is
        // delivered, then freed by glibc's own second `dlerror()`, which
        // clears the slot.
        unsafe {
            if slot.read() != 0 {
                libc::dlerror();
                libc::dlerror();
            }
            slot.write(saved);
        }
    }
}

/// This thread's `__libc_dlerror_result`, if glibc has it.
fn slot() -> Option<*mut usize> {
    let mut off = OFFSET.load(Ordering::Relaxed);
    if off == NOT_YET {
        off = find().map_or(NONE, |a| a as i64 - thread_pointer() as i64);
        OFFSET.store(off, Ordering::Relaxed);
    }
    (off != NONE).then(|| (thread_pointer() as i64 + off) as *mut usize)
}

/// The calling thread's `__libc_dlerror_result`, found in libc's dynamic
/// symbols.
fn find() -> Option<u64> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; data is the Option below.
        unsafe {
            let info = &*info;
            if info.dlpi_name.is_null() || info.dlpi_tls_data.is_null() {
                return 0;
            }
            let name = std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes();
            let base = name.rsplit(|&c| c == b'/').next().unwrap_or(name);
            if !base.starts_with(b"libc.so") {
                return 0;
            }
            if let Some(v) = tls_symbol(info, b"__libc_dlerror_result") {
                *(data as *mut Option<u64>) = Some(info.dlpi_tls_data as u64 + v);
            }
            1
        }
    }
    let mut found: Option<u64> = None;
    // SAFETY: the callback only reads what dl_iterate_phdr passes it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut _ as *mut c_void) };
    found
}

const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const STT_TLS: u8 = 6;

/// The value (offset in the module's TLS block) of the defined TLS symbol
/// `name` of a loaded object, through its GNU hash table.
///
/// # Safety
/// `info` describes a loaded object (its dynamic section and tables are
/// mapped).
unsafe fn tls_symbol(info: &libc::dl_phdr_info, name: &[u8]) -> Option<u64> {
    // SAFETY: as the caller promises.
    unsafe { defined_symbol(info, name, STT_TLS) }
}

const STT_FUNC: u8 = 2;

/// The address of the function `name` that the first loaded object
/// defining it exports (the program, then its libraries, in the loader's
/// order), found in their GNU hash tables: no `dlsym`, whose failure
/// allocates through the program's `malloc` (a program with its own
/// allocator would count those calls). None without a GNU hash table.
pub fn global_function(name: &std::ffi::CStr) -> Option<u64> {
    global_symbol(name, STT_FUNC)
}

const STT_OBJECT: u8 = 1;

/// The address of the data object `name` exported as
/// [`global_function`] finds functions.
pub fn global_object(name: &std::ffi::CStr) -> Option<u64> {
    global_symbol(name, STT_OBJECT)
}

fn global_symbol(name: &std::ffi::CStr, kind: u8) -> Option<u64> {
    struct Query<'a>(&'a [u8], u8, Option<u64>);
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call; data is the Query below.
        unsafe {
            let info = &*info;
            let q = &mut *(data as *mut Query);
            match defined_symbol(info, q.0, q.1) {
                Some(v) => {
                    q.2 = Some(info.dlpi_addr + v);
                    1
                }
                None => 0,
            }
        }
    }
    let mut q = Query(name.to_bytes(), kind, None);
    // SAFETY: the callback only reads what dl_iterate_phdr passes it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut q as *mut _ as *mut c_void) };
    q.2
}

/// The value of the defined symbol `name` of type `kind` of a loaded
/// object, through its GNU hash table.
///
/// # Safety
/// `info` describes a loaded object (its dynamic section and tables are
/// mapped).
unsafe fn defined_symbol(info: &libc::dl_phdr_info, name: &[u8], kind: u8) -> Option<u64> {
    // SAFETY: the object's program headers, dynamic section, hash table,
    // symbol and string tables, all mapped while it is loaded (the
    // caller's precondition); indices stay within the tables as the
    // GNU hash format defines them.
    unsafe {
        let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
        let mut d = (info.dlpi_addr + dynamic.p_vaddr) as *const [u64; 2];
        let (mut strtab, mut symtab, mut hash) = (0, 0, 0);
        // The loader relocates these entries in place (absolute); an
        // entry below the load address is still an offset.
        let abs = |v: u64| {
            if v < info.dlpi_addr {
                v + info.dlpi_addr
            } else {
                v
            }
        };
        while (*d)[0] != 0 {
            match (*d)[0] as i64 {
                DT_STRTAB => strtab = abs((*d)[1]),
                DT_SYMTAB => symtab = abs((*d)[1]),
                DT_GNU_HASH => hash = abs((*d)[1]),
                _ => {}
            }
            d = d.add(1);
        }
        if strtab == 0 || symtab == 0 || hash == 0 {
            return None;
        }
        let h = name
            .iter()
            .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
        let head = hash as *const u32;
        let (nbuckets, symoffset, bloom_words) = (*head, *head.add(1), *head.add(2));
        if nbuckets == 0 {
            return None;
        }
        let buckets = head.add(4 + 2 * bloom_words as usize);
        let chain = buckets.add(nbuckets as usize);
        let mut i = *buckets.add((h % nbuckets) as usize);
        if i < symoffset {
            return None;
        }
        loop {
            let c = *chain.add((i - symoffset) as usize);
            if c | 1 == h | 1 {
                let sym = (symtab + 24 * i as u64) as *const u8;
                let st_name = (sym as *const u32).read_unaligned();
                let st_info = *sym.add(4);
                let st_shndx = (sym.add(6) as *const u16).read_unaligned();
                let s = std::ffi::CStr::from_ptr((strtab + st_name as u64) as *const i8);
                if s.to_bytes() == name && st_info & 0xf == kind && st_shndx != 0 {
                    return Some((sym.add(8) as *const u64).read_unaligned());
                }
            }
            if c & 1 != 0 {
                return None;
            }
            i += 1;
        }
    }
}
