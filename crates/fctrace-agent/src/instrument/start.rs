//! Instrumenting the process at start-up (or when attached): with -l its
//! libraries first, then the program and its imports; then, with -l, the
//! hook that follows libraries loaded later.

use super::dlopen::{self, Known};
use super::imports::forwarded_functions;
use super::loaded::{agent_module, loaded_modules};
use super::modules::{instrument_library, instrument_main, is_instrumentable_lib};
use super::session::{publish, Session, SymFile};
use crate::arch::x86_64::codegen::{self, Params};
use crate::runtime::shm::Shm;
use fctrace_format::symtab;

/// Instruments the process's modules. `stopped`: attaching, where its
/// stopped threads are (no patch may cut an instruction one of them is
/// about to run).
pub fn instrument_process(
    shm: &Shm,
    sid: u32,
    dir: &str,
    nest: bool,
    stopped: &[u64],
) -> Result<(), String> {
    let modules = loaded_modules();
    let main = modules.first().ok_or("no modules loaded")?;
    crate::runtime::log::set_trace_dir(dir);
    let mut out = SymFile::create(&format!("{dir}/sessions/{sid}.sym"))?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    symtab::write_header(&mut out, sid, pid, &main.path).map_err(|e| e.to_string())?;
    let interp = main.interp.clone();
    let params = Params {
        tls: crate::runtime::tls::offset(),
        buf_size: shm.layout.buf_size,
        slow_path: super::slow_path::slow_path as *const () as u64,
        lost_counter: &shm.header().lost_events as *const _ as u64,
        ext_state: codegen::ext_state(),
        filter: crate::recording::filter::active()
            .then_some(&crate::recording::filter::GLOBAL as *const _ as u64),
        finished: &crate::recording::filter::FINISHED as *const _ as u64,
    };
    let forwarded = if nest {
        forwarded_functions()
    } else {
        Vec::new()
    };
    let mut s = Session::new(out, params, stopped, forwarded);
    let me = agent_module().unwrap_or_default();
    super::startcache::init(dir, modules.iter().find(|m| m.path == me));

    // Libraries first (with -l), so that the program's PLT entries for
    // functions traced inside a library can be left alone.
    let mut lib_entries: std::collections::HashSet<u64> = Default::default();
    let mut known = Vec::new();
    for m in modules.iter().skip(1) {
        if !nest {
            break;
        }
        if !is_instrumentable_lib(m, me, &interp) {
            continue;
        }
        match instrument_library(&mut s, m) {
            Ok(entries) => {
                known.push(Known::new(m, &entries));
                lib_entries.extend(entries);
            }
            Err(e) => {
                crate::runtime::log::warn(&format!("{}: {e}", m.path));
                known.push(Known::new(m, &[]));
            }
        }
    }
    instrument_main(&mut s, main, &lib_entries)?;
    // -E: the SDT probes of every module.
    for m in modules.iter().filter(|m| m.path != me) {
        if let Err(e) = super::sdt::patch_probes(&mut s, m) {
            crate::runtime::log::warn(&format!("-E: {}: {e}", m.path));
        }
    }
    publish(&mut s)?;
    // Libraries loaded later are patched while their threads run on.
    s.stopped.clear();
    dlopen::follow(&modules, s, known, me, interp, pid, nest);
    Ok(())
}
