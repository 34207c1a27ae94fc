//! ELF symbols (readelf) and disassembly (objdump) of the test programs.

use crate::process::tool;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

/// A function symbol (FUNC or IFUNC, defined) of an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub global: bool,
}

/// Function symbols of `.symtab` and `.dynsym` (by `readelf -sW`), without
/// version suffixes, deduplicated.
pub fn function_symbols(elf: &Path) -> Vec<Sym> {
    let r = tool(
        "readelf",
        &[OsStr::new("-sW"), OsStr::new("--dyn-syms"), elf.as_os_str()],
    );
    let mut set = BTreeSet::new();
    let mut out = Vec::new();
    for line in r.stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        if f.len() < 8
            || !f[0].ends_with(':')
            || !(f[3] == "FUNC" || f[3] == "IFUNC")
            || f[6] == "UND"
        {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(f[1], 16) else {
            continue;
        };
        let size = if let Some(h) = f[2].strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap_or(0)
        } else {
            f[2].parse().unwrap_or(0)
        };
        let name = f[7].split('@').next().unwrap().to_string();
        if set.insert((name.clone(), addr)) {
            out.push(Sym {
                name,
                addr,
                size,
                global: f[4] != "LOCAL",
            });
        }
    }
    out
}

/// One instruction of the disassembly.
#[derive(Debug, Clone)]
pub struct Insn {
    pub addr: u64,
    /// Without prefixes such as `bnd` or `notrack`.
    pub mnemonic: String,
    /// The direct target of a jump or call.
    pub target: Option<u64>,
    pub text: String,
}

/// A function of the disassembly (objdump's `<name>:` blocks).
#[derive(Debug, Clone)]
pub struct DisFunc {
    pub name: String,
    pub start: u64,
    pub insns: Vec<Insn>,
}

impl DisFunc {
    pub fn is_jump(i: &Insn) -> bool {
        i.mnemonic.starts_with('j')
    }
    pub fn is_call(i: &Insn) -> bool {
        i.mnemonic.starts_with("call")
    }
    /// Direct jumps (conditional or not) from inside the function to its
    /// own first instruction.
    pub fn self_entry_jumps(&self) -> Vec<&Insn> {
        self.insns
            .iter()
            .filter(|i| Self::is_jump(i) && i.target == Some(self.start))
            .collect()
    }
    /// Direct calls of its own first instruction.
    pub fn self_calls(&self) -> Vec<&Insn> {
        self.insns
            .iter()
            .filter(|i| Self::is_call(i) && i.target == Some(self.start))
            .collect()
    }
}

const PREFIXES: &[&str] = &[
    "bnd", "notrack", "rep", "repz", "repnz", "repe", "repne", "lock", "data16", "cs", "ds",
    "addr32",
];

/// `objdump -d` of all executable sections of `elf`.
pub fn disassemble(elf: &Path) -> Vec<DisFunc> {
    let r = tool(
        "objdump",
        &[
            OsStr::new("-d"),
            OsStr::new("--no-show-raw-insn"),
            elf.as_os_str(),
        ],
    );
    parse_objdump(&r.stdout)
}

pub fn parse_objdump(text: &str) -> Vec<DisFunc> {
    let mut funcs: Vec<DisFunc> = Vec::new();
    for line in text.lines() {
        // Function header: `0000000000001250 <spin_entry>:`
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((addr, name)) = rest.split_once(" <") {
                if let Ok(a) = u64::from_str_radix(addr.trim(), 16) {
                    funcs.push(DisFunc {
                        name: name.to_string(),
                        start: a,
                        insns: Vec::new(),
                    });
                    continue;
                }
            }
        }
        // Instruction: `    1253:\tjg     1250 <spin_entry>`
        let Some((addr, rest)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(a) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let Some(f) = funcs.last_mut() else { continue };
        let mut toks = rest.split_whitespace().peekable();
        while let Some(t) = toks.peek() {
            if PREFIXES.contains(t) {
                toks.next();
            } else {
                break;
            }
        }
        let mnemonic = toks.next().unwrap_or("").to_string();
        let target = toks.next().and_then(|op| {
            // A direct target is `<hex> <symbol+off>`.
            if rest.contains(&format!("{op} <")) {
                u64::from_str_radix(op, 16).ok()
            } else {
                None
            }
        });
        f.insns.push(Insn {
            addr: a,
            mnemonic,
            target,
            text: rest.trim().to_string(),
        });
    }
    funcs
}

pub fn find_function<'a>(funcs: &'a [DisFunc], name: &str) -> &'a DisFunc {
    funcs
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no function `{name}` in the disassembly"))
}

/// The disassembly of one function, as text, for messages.
pub fn listing(f: &DisFunc) -> String {
    let mut s = format!("{:x} <{}>:\n", f.start, f.name);
    for i in &f.insns {
        let _ = writeln!(s, "  {:x}: {}", i.addr, i.text);
    }
    s
}
