//! Which functions are patched at all: uftrace's `-P FUNC`/`-U FUNC`
//! (the last rule that names a function decides; without a `-P` every
//! function is) and `-Z SIZE` (functions smaller than SIZE bytes are
//! not). A function left out gets no patch: its calls run untouched and
//! cost nothing, and the symbol table says why it was not traced.
//! Set once at start-up (and again at each attach) by [`init`], before
//! any module is instrumented; without those options nothing here runs.

use fctrace_options::pattern::name_forms_at;
use fctrace_options::uftrace::{patched, PatchRule};
use fctrace_options::Options;
use std::sync::atomic::{AtomicPtr, Ordering};

struct Select {
    rules: Vec<PatchRule>,
    min_size: u64,
}

/// The rules in force (leaked when replaced: a reference taken from one
/// stays valid); null without `-P`, `-U` or `-Z`.
static SELECT: AtomicPtr<Select> = AtomicPtr::new(std::ptr::null_mut());

/// Takes `-P`, `-U` and `-Z` from the options.
pub fn init(opts: &Options) {
    let s = (!opts.patch.is_empty() || opts.size_filter.is_some()).then(|| Select {
        rules: opts.patch.clone(),
        min_size: opts.size_filter.unwrap_or(0),
    });
    let p = s.map_or(std::ptr::null_mut(), |s| Box::leak(Box::new(s)) as *mut _);
    SELECT.store(p, Ordering::Release);
}

/// Whether `-P`, `-U` or `-Z` selects the functions patched.
pub fn active() -> bool {
    !SELECT.load(Ordering::Acquire).is_null()
}

/// Why a function (or a PLT entry, as in uftrace: its entry's size)
/// `size` bytes long is not patched under `-Z`, if it is not.
pub fn too_small(size: u64) -> Option<String> {
    let p = SELECT.load(Ordering::Acquire);
    let min = if p.is_null() {
        0
    } else {
        // SAFETY: published values are leaked, never mutated after
        // publication.
        unsafe { &*p }.min_size
    };
    (size < min).then(|| format!("smaller than {min} bytes (-Z)"))
}

/// Why the function `raw` (empty: unnamed) at `addr` of the module at
/// `module_path`, `size` bytes long, is not patched, if it is not.
pub fn left_out(module_path: &str, raw: &str, addr: u64, size: u64) -> Option<String> {
    let p = SELECT.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    if let Some(why) = too_small(size) {
        return Some(why);
    }
    // SAFETY: published values are leaked, never mutated after publication.
    let s = unsafe { &*p };
    if s.rules.is_empty() {
        return None;
    }
    let display = if raw.starts_with("_Z") || raw.starts_with("_R") {
        fctrace_symbols::demangle_in_process(raw)
    } else {
        raw.to_string()
    };
    let at = fctrace_format::symtab::unnamed_function_name(module_path, addr);
    let forms = name_forms_at(raw, &display, &at);
    (!patched(&s.rules, module_path, forms)).then(|| "not selected by -P/-U".to_string())
}
