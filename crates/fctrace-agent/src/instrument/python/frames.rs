//! Python functions through CPython's frame evaluation function (PEP 523),
//! where that sees every Python frame: 3.11.4 and later 3.11 (CPython
//! gh-104405 made the last specialised instruction that ran a frame
//! without it, `BINARY_SUBSCR_GETITEM`, respect it), and 3.12. The agent's
//! [`eval_frame`] is made the interpreter's: it records the frame's entry,
//! runs it with `_PyEval_EvalFrameDefault` (traced itself when the
//! interpreter's functions are: the Python function encloses its
//! evaluation loop) and records the exit: an `Unwind` when the frame
//! ended by an exception (it returned NULL).
//!
//! What the interpreter passes is its internal frame (`_PyInterpreterFrame`),
//! read at the version's offsets: the code object (checked to be one at
//! each code object's first sight), the globals (the module's name) and
//! the owner. A generator's, a coroutine's or an async generator's code
//! runs once to make the generator object, in a frame the thread owns; that
//! run is not a call (`sys.setprofile` sees none) and is not recorded. Each
//! resume is, in a frame the generator owns.
//!
//! With CPython's frame evaluation function replaced, CPython calls every
//! Python function through it rather than inline (3.11's and 3.12's
//! specialised calls check for it): about 30 ns more per call here,
//! against the 100 to 200 ns a profile function costs.

use super::codes::{first_sight, lookup, module_name, split, symbol, Code, Obj, API, NO_ID};
use super::events::record;
use crate::runtime::log;
use crate::runtime::shm;
use crate::runtime::tls;
use fctrace_format::event::EventKind;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

type EvalFn = unsafe extern "C" fn(Obj, Obj, c_int) -> Obj;

/// What this needs of the interpreter, found at start-up.
struct FrameApi {
    set: unsafe extern "C" fn(Obj, EvalFn),
    main_interp: unsafe extern "C" fn() -> Obj,
    get: unsafe extern "C" fn(Obj) -> *mut c_void,
    default_eval: EvalFn,
    code_type: usize,
    dict_type: usize,
    layout: Layout,
}

/// Offsets in `_PyInterpreterFrame`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Layout {
    code: usize,
    globals: usize,
    owner: usize,
}

/// 3.11: `f_func, f_globals, f_builtins, f_locals, f_code, frame_obj,
/// previous, prev_instr, stacktop (int), is_entry (bool), owner (char)`.
const LAYOUT_311: Layout = Layout {
    code: 32,
    globals: 8,
    owner: 69,
};
/// 3.12: `f_code, previous, f_funcobj, f_globals, f_builtins, f_locals,
/// frame_obj, prev_instr, stacktop (int), return_offset (u16), owner`.
const LAYOUT_312: Layout = Layout {
    code: 0,
    globals: 24,
    owner: 70,
};

/// `FRAME_OWNED_BY_THREAD`: a frame on the thread's own stack of frames.
const OWNED_BY_THREAD: u8 = 0;

static FRAME_API: OnceLock<FrameApi> = OnceLock::new();

/// Set when a frame's layout was not the one expected: frames then run
/// unrecorded (said once).
static OFF: AtomicBool = AtomicBool::new(false);

/// `_PyEval_EvalFrameDefault`, for the evaluation function's hot path.
static DEFAULT_EVAL: AtomicUsize = AtomicUsize::new(0);

/// The layout of this version's interpreter frames when every Python
/// frame goes through the frame evaluation function (see the file's top).
fn layout_for(version: &str) -> Option<Layout> {
    match layout_with_gaps(version)? {
        (layout, None) => Some(layout),
        (_, Some(_)) => None,
    }
}

/// The layout of this version's interpreter frames, and which Python calls
/// its interpreter runs without the frame evaluation function, if some
/// do: where no profile function can be set (attaching), the frame
/// evaluation function is used all the same, and the trace says what it
/// does not see.
fn layout_with_gaps(version: &str) -> Option<(Layout, Option<&'static str>)> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let micro: u32 = parts.next()?.parse().ok()?;
    match (major, minor) {
        (3, 11) if micro >= 4 => Some((LAYOUT_311, None)),
        (3, 11) => Some((LAYOUT_311, Some(GAP_GETITEM))),
        (3, 12) => Some((LAYOUT_312, None)),
        // (3.13's setter counts the change in the calling thread's
        // interpreter, which needs the GIL: not from outside; launched,
        // its profile function is exact.)
        _ => None,
    }
}

/// What 3.11.0 to 3.11.3 run without the frame evaluation function.
const GAP_GETITEM: &str = "`x[i]` on a class whose `__getitem__` is Python code is not seen \
     once CPython has specialised that `x[i]` (CPython gh-104405, fixed in 3.11.4)";

/// Makes ready to use the frame evaluation function when this version
/// allows it and the process exports what it takes. `with_gaps`
/// (attaching): also where some Python calls do not go through it (the
/// trace says which, once). Ok(false): not this version; Err: what the
/// process lacks.
pub(super) fn prepare(version: &str, with_gaps: bool) -> Result<bool, String> {
    let layout = if with_gaps {
        match layout_with_gaps(version) {
            Some((layout, gap)) => {
                if let Some(gap) = gap {
                    let short = version.split(' ').next().unwrap_or(version);
                    log::note(&format!("Python {short}, attached: {gap}"));
                }
                Some(layout)
            }
            None => None,
        }
    } else {
        layout_for(version)
    };
    let Some(layout) = layout else {
        return Ok(false);
    };
    let set = symbol(c"_PyInterpreterState_SetEvalFrameFunc");
    let get = symbol(c"_PyInterpreterState_GetEvalFrameFunc");
    let default_eval = symbol(c"_PyEval_EvalFrameDefault");
    let main_interp = symbol(c"PyInterpreterState_Main");
    let code_type = crate::runtime::dlerror::global_object(c"PyCode_Type");
    let dict_type = crate::runtime::dlerror::global_object(c"PyDict_Type");
    let (Some(code_type), Some(dict_type)) = (code_type, dict_type) else {
        return Err("PyCode_Type or PyDict_Type is not exported".into());
    };
    if set.is_null() || get.is_null() || default_eval.is_null() || main_interp.is_null() {
        return Err("the frame evaluation API is not exported".into());
    }
    // SAFETY: the four are CPython's functions of these signatures
    // (`_PyInterpreterState_SetEvalFrameFunc(interp, func)`,
    // `_PyInterpreterState_GetEvalFrameFunc(interp)`,
    // `_PyEval_EvalFrameDefault(tstate, frame, throwflag)`,
    // `PyInterpreterState_Main()`), for the versions `layout_for` accepts.
    let api = unsafe {
        FrameApi {
            set: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Obj, EvalFn)>(set),
            get: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Obj) -> *mut c_void>(get),
            default_eval: std::mem::transmute::<*mut c_void, EvalFn>(default_eval),
            main_interp: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Obj>(
                main_interp,
            ),
            code_type: code_type as usize,
            dict_type: dict_type as usize,
            layout,
        }
    };
    DEFAULT_EVAL.store(default_eval as usize, Ordering::Relaxed);
    let _ = FRAME_API.set(api);
    Ok(true)
}

/// The interpreter [`eval_frame`] was made the evaluation function of
/// while attached (0: none), for [`remove`].
static ATTACHED_TO: AtomicUsize = AtomicUsize::new(0);

/// Attaching (`-p`, every other thread of the process stopped): makes
/// [`eval_frame`] the main interpreter's evaluation function. On these
/// versions that is one pointer stored in the interpreter's state
/// (`interp->eval_frame`), read by each thread at each Python call:
/// calls made from then on are recorded; frames already running are not,
/// nor their returns (they did not enter through it). Err: why not.
pub(super) fn install_attached() -> Result<(), String> {
    let fa = FRAME_API
        .get()
        .ok_or("the frame evaluation API is missing")?;
    // SAFETY: `PyInterpreterState_Main` reads a global; the getter and
    // setter read and store the interpreter's evaluation function, with
    // every other thread stopped (no Python code runs meanwhile).
    unsafe {
        let interp = (fa.main_interp)();
        if interp.is_null() {
            return Err("the interpreter is not initialised".into());
        }
        let current = (fa.get)(interp) as usize;
        if current == eval_frame as EvalFn as usize {
            // (An earlier attach's, not removed: the agent stayed loaded.)
        } else if current != fa.default_eval as usize && current != 0 {
            return Err(
                "another frame evaluation function is installed (a debugger or a JIT)".into(),
            );
        }
        (fa.set)(interp, eval_frame);
        ATTACHED_TO.store(interp as usize, Ordering::Relaxed);
    }
    Ok(())
}

/// Detaching (every other thread stopped): CPython's evaluation function
/// back. Frames running in [`eval_frame`] return through it (the agent's
/// code stays mapped) and record nothing more.
pub(super) fn remove() {
    let interp = ATTACHED_TO.swap(0, Ordering::Relaxed);
    let Some(fa) = FRAME_API.get() else { return };
    if interp != 0 {
        // SAFETY: the interpreter it was installed in (the main one, which
        // lives as long as the process), every other thread stopped.
        unsafe { (fa.set)(interp as Obj, fa.default_eval) };
    }
}

/// Makes [`eval_frame`] the interpreter's frame evaluation function (the
/// GIL held: from the audit hook). False when the profile function is to
/// be used: this version does not allow it, or another evaluation
/// function is installed (a debugger's, a JIT's: left in place).
pub(super) fn install() -> bool {
    let (Some(fa), Some(api)) = (FRAME_API.get(), API.get()) else {
        return false;
    };
    // SAFETY: called with the GIL held, the interpreter initialised; the
    // functions as `prepare` found them.
    unsafe {
        let interp = (api.interp_get)();
        if interp.is_null() {
            return false;
        }
        let current = (fa.get)(interp) as usize;
        if current != fa.default_eval as usize && current != 0 {
            log::note(
                "Python: another frame evaluation function is installed (a debugger or a JIT): \
                 its functions are traced through a profile function",
            );
            return false;
        }
        (fa.set)(interp, eval_frame);
    }
    true
}

/// The interpreter's frame evaluation function while tracing: the frame's
/// entry, CPython's evaluation, its exit.
extern "C" fn eval_frame(tstate: Obj, frame: Obj, throwflag: c_int) -> Obj {
    let recorded = enter(frame);
    // SAFETY: `_PyEval_EvalFrameDefault`, whose address `prepare` stored
    // before this function was installed, called with what CPython passed.
    let result = unsafe {
        let eval: EvalFn =
            std::mem::transmute::<usize, EvalFn>(DEFAULT_EVAL.load(Ordering::Relaxed));
        eval(tstate, frame, throwflag)
    };
    if let Some(id) = recorded {
        leave(id, result);
    }
    result
}

/// Records the entry of `frame`'s function; its id when it was recorded.
#[inline]
fn enter(frame: Obj) -> Option<u32> {
    if tls::busy() != 0 || OFF.load(Ordering::Relaxed) {
        return None;
    }
    let shm = shm::get()?;
    let fa = FRAME_API.get()?;
    let _busy = tls::Busy::quiet();
    // SAFETY: `frame` is the interpreter frame CPython is about to run;
    // its code object is at the version's offset (checked at each code
    // object's first sight to be a code object).
    let code = unsafe { *(frame as *const u8).add(fa.layout.code).cast::<Obj>() };
    let c = match lookup(code as usize) {
        Some(c) => c,
        None => first_sight_frame(fa, code, frame)?,
    };
    let (id, generator) = split(c.entry);
    if id == NO_ID {
        return None;
    }
    // SAFETY: as above: the owner byte of the frame.
    if generator && unsafe { *(frame as *const u8).add(fa.layout.owner) } == OWNED_BY_THREAD {
        // The run that makes the generator object.
        return None;
    }
    record(shm, EventKind::Entry, false, || (id, c.flags), || frame).then_some(id)
}

/// Records the exit of a frame whose entry was recorded, which returned
/// `result` (NULL: an exception left it).
#[inline]
fn leave(id: u32, result: Obj) {
    let Some(shm) = shm::get() else { return };
    let _busy = tls::Busy::quiet();
    let kind = if result.is_null() {
        EventKind::Unwind
    } else {
        EventKind::Exit
    };
    record(shm, kind, false, || (id, 0), || result);
}

/// A code object not in the table yet: checked to be a code object (else
/// the layout is not the one expected, and recording stops, said once),
/// then named and entered.
#[cold]
fn first_sight_frame(fa: &FrameApi, code: Obj, frame: Obj) -> Option<Code> {
    let api = API.get()?;
    // SAFETY: a Python object's type is its second word; `code` is read
    // from a live frame (null or not an object when the layout is wrong,
    // which the type check catches for anything mapped).
    let is_code = !code.is_null() && unsafe { *(code as *const usize).add(1) } == fa.code_type;
    if !is_code {
        if !OFF.swap(true, Ordering::Relaxed) {
            log::note(
                "Python: an interpreter frame did not hold a code object where expected: \
                 its functions are no longer traced",
            );
        }
        return None;
    }
    Some(first_sight(api, code, |api| {
        // SAFETY: the frame's globals (a borrowed reference), used when
        // they are a dict, the GIL held.
        unsafe {
            let globals = *(frame as *const u8).add(fa.layout.globals).cast::<Obj>();
            if globals.is_null() || *(globals as *const usize).add(1) != fa.dict_type {
                return String::new();
            }
            module_name(api, globals)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_whose_frames_all_go_through_the_evaluation_function() {
        assert_eq!(layout_for("3.11.2 (main, Apr 28 2025) [GCC 12.2.0]"), None);
        assert_eq!(layout_for("3.11.3 (main) [GCC]"), None);
        assert_eq!(layout_for("3.11.4 (main) [GCC]"), Some(LAYOUT_311));
        assert_eq!(layout_for("3.11.7 (main) [GCC]"), Some(LAYOUT_311));
        assert_eq!(layout_for("3.12.1 (main) [GCC]"), Some(LAYOUT_312));
        assert_eq!(layout_for("3.13.0 (main) [GCC]"), None);
        assert_eq!(layout_for("3.10.13"), None);
        // Attaching, with what each misses.
        let gaps = |v| layout_with_gaps(v).map(|(l, g)| (l, g.is_some()));
        assert_eq!(gaps("3.11.2 (main)"), Some((LAYOUT_311, true)));
        assert_eq!(gaps("3.11.7 (main)"), Some((LAYOUT_311, false)));
        assert_eq!(gaps("3.12.1 (main)"), Some((LAYOUT_312, false)));
        assert_eq!(gaps("3.13.0 (main)"), None);
        assert_eq!(gaps("3.14.0 (main)"), None);
    }
}
