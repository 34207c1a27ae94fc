//! The function names of a debug file's `.symtab`, by address.
//!
//! An address at a symbol's start gets the symbol's raw (mangled) name, as
//! the record-time symbols would have given it; an address inside a sized
//! function symbol (a call frame entry that starts in the middle of a
//! function: glibc's hand-written syscall tails) gets `name+0xoffset`, as
//! gdb and perf show such an address. Among several names of one address
//! the global one wins over a weak one over a local one, then the one
//! with fewer leading underscores, then the shorter.

use object::{Object, ObjectSymbol, SymbolKind};
use std::path::Path;

/// One name per function start, sorted by address.
#[derive(Debug, Default)]
pub struct FuncNames {
    starts: Vec<Start>,
}

#[derive(Debug)]
struct Start {
    addr: u64,
    size: u64,
    name: String,
    rank: (u8, usize, usize),
}

impl FuncNames {
    /// The function symbols of the ELF file at `path`.
    pub fn read(path: &Path) -> Result<FuncNames, String> {
        let data =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        FuncNames::parse(&data).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The function symbols of an ELF file's bytes.
    pub fn parse(data: &[u8]) -> Result<FuncNames, String> {
        let file = object::File::parse(data).map_err(|e| format!("not an ELF file ({e})"))?;
        let mut starts: Vec<Start> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                let raw = s.name().ok()?;
                let name = raw.split('@').next().unwrap_or(raw);
                if name.is_empty() {
                    return None;
                }
                let bind = if s.is_global() {
                    0
                } else if s.is_weak() {
                    1
                } else {
                    2
                };
                let underscores = name.bytes().take_while(|&b| b == b'_').count();
                Some(Start {
                    addr: s.address(),
                    size: s.size(),
                    name: name.to_string(),
                    rank: (bind, underscores, name.len()),
                })
            })
            .collect();
        starts.sort_by(|a, b| (a.addr, a.rank, &a.name).cmp(&(b.addr, b.rank, &b.name)));
        // The best name of each address first; the largest size of its
        // names kept.
        let mut out: Vec<Start> = Vec::with_capacity(starts.len());
        for s in starts {
            match out.last_mut() {
                Some(last) if last.addr == s.addr => last.size = last.size.max(s.size),
                _ => out.push(s),
            }
        }
        Ok(FuncNames { starts: out })
    }

    /// How many function starts the file names.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The name of the function at `addr` (an ELF virtual address of the
    /// module): the symbol starting there, or `sym+0xoff` inside a sized
    /// one; `None` elsewhere.
    pub fn name_at(&self, addr: u64) -> Option<String> {
        let i = self
            .starts
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let s = &self.starts[i];
        if s.addr == addr {
            return Some(s.name.clone());
        }
        let off = addr - s.addr;
        (off < s.size).then(|| format!("{}+{off:#x}", s.name))
    }
}
