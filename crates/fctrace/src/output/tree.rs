//! PLACEHOLDER (lead): a raw dump until the real tree printer lands.
use fctrace_format::store::Trace;
pub fn print_tree(trace: &Trace, w: &mut dyn std::io::Write) -> anyhow::Result<()> {
    for t in &trace.info.tasks {
        let sym = trace.sessions.get(&t.session);
        let mut depth = 0usize;
        for e in trace.events(t.tid)? {
            let e = e?;
            let name = sym.and_then(|s| s.function(e.func)).map(|f| f.name.clone()).unwrap_or_default();
            match e.kind {
                fctrace_format::event::EventKind::Entry => { writeln!(w, "[{}] {}{}() {{", t.tid, "  ".repeat(depth), name)?; depth += 1; }
                _ => { depth = depth.saturating_sub(1); writeln!(w, "[{}] {}}} /* {} */ {:?} {}", t.tid, "  ".repeat(depth), name, e.kind, e.ns)?; }
            }
        }
    }
    Ok(())
}
