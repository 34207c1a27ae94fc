//! Print what fctrace-symbols sees in an ELF file:
//! `cargo run -p fctrace-symbols --example elfdump -- FILE [-v]`
//! (`-v` lists every function: address, size, padding, G(lobal)/l(ocal),
//! i(func), name, aliases; and the FDEs left out, with why).

use std::io::Write;
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: elfdump FILE [-v]");
        std::process::exit(2);
    };
    let verbose = args.any(|a| a == "-v");
    let info = match fctrace_symbols::read_file(&path) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = dump(&info, verbose, &mut std::io::stdout().lock()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

fn version(v: &Option<String>) -> String {
    v.as_deref().map(|v| format!("@{v}")).unwrap_or_default()
}

fn dump(
    info: &fctrace_symbols::ElfInfo,
    verbose: bool,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let build_id = info
        .build_id
        .as_ref()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .unwrap_or_else(|| "-".into());
    writeln!(
        out,
        "kind={:?} machine={} x86_64={} static={} symtab={} entry={:#x} build_id={build_id}",
        info.kind, info.machine, info.is_x86_64, info.is_static, info.has_symtab, info.entry,
    )?;
    if let Err(e) = info.check_traceable() {
        writeln!(out, "not traceable: {e}")?;
    }
    writeln!(out, "markers: {:?}", info.markers)?;
    let padded = info
        .functions
        .iter()
        .filter(|f| f.pad_end > f.end())
        .count();
    let zero = info.functions.iter().filter(|f| f.size == 0).count();
    writeln!(
        out,
        "{} functions ({zero} zero-size, {padded} with padding), {} PLT entries, {} GOT imports",
        info.functions.len(),
        info.plt.len(),
        info.got_imports.len()
    )?;
    if verbose {
        for f in &info.functions {
            writeln!(
                out,
                "  {:#x} {:>6} pad+{:<3} {}{} {} {:?}",
                f.addr,
                f.size,
                f.pad_end.saturating_sub(f.end()),
                if f.global { "G" } else { "l" },
                if f.ifunc { "i" } else { " " },
                f.name,
                f.aliases
            )?;
        }
        for l in &info.left_out {
            writeln!(out, "  left out {:#x} {:>6} {}", l.addr, l.size, l.reason)?;
        }
    }
    for p in &info.plt {
        let v = version(&p.version);
        writeln!(
            out,
            "  plt {:#x}/{} got {:#x} {}{v}",
            p.addr, p.size, p.got, p.name
        )?;
    }
    for g in &info.got_imports {
        writeln!(out, "  got {:#x} {}{}", g.got, g.name, version(&g.version))?;
    }
    Ok(())
}
