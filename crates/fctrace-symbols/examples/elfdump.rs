//! Print what fctrace-symbols sees in an ELF file:
//! `cargo run -p fctrace-symbols --example elfdump -- FILE [-v]`.

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
    println!(
        "kind={:?} machine={} x86_64={} static={} symtab={} entry={:#x} build_id={}",
        info.kind,
        info.machine,
        info.is_x86_64,
        info.is_static,
        info.has_symtab,
        info.entry,
        info.build_id
            .as_ref()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
            .unwrap_or_else(|| "-".into())
    );
    if let Err(e) = info.check_traceable() {
        println!("not traceable: {e}");
    }
    println!("markers: {:?}", info.markers);
    let padded = info
        .functions
        .iter()
        .filter(|f| f.pad_end > f.addr + f.size)
        .count();
    let zero = info.functions.iter().filter(|f| f.size == 0).count();
    println!(
        "{} functions ({} zero-size, {} with padding), {} PLT entries, {} GOT imports",
        info.functions.len(),
        zero,
        padded,
        info.plt.len(),
        info.got_imports.len()
    );
    if verbose {
        for f in &info.functions {
            println!(
                "  {:#x} {:>6} pad+{:<3} {}{}{} {} {:?}",
                f.addr,
                f.size,
                f.pad_end - (f.addr + f.size).min(f.pad_end),
                if f.global { "G" } else { "l" },
                if f.ifunc { "i" } else { " " },
                "",
                f.name,
                f.aliases
            );
        }
    }
    for p in &info.plt {
        println!(
            "  plt {:#x}/{} got {:#x} {}{}",
            p.addr,
            p.size,
            p.got,
            p.name,
            p.version
                .as_deref()
                .map(|v| format!("@{v}"))
                .unwrap_or_default()
        );
    }
    for g in &info.got_imports {
        println!(
            "  got {:#x} {}{}",
            g.got,
            g.name,
            g.version
                .as_deref()
                .map(|v| format!("@{v}"))
                .unwrap_or_default()
        );
    }
}
