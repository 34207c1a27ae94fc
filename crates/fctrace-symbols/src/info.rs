//! What the analysis of an ELF file returns: its description ([`ElfInfo`]:
//! kind, machine, interpreter, functions, PLT entries, GOT imports,
//! markers), the functions borrowed from its bytes ([`FuncRef`]), and the
//! error for a file that cannot be read ([`SymbolError`]).

use std::borrow::Cow;
use std::fmt;

use crate::golang::GoCode;
use crate::loader;

/// A user-facing error about an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolError(pub String);

impl fmt::Display for SymbolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SymbolError {}

/// What kind of linked ELF object this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElfKind {
    /// `ET_EXEC`: a position-dependent executable.
    Executable,
    /// `ET_DYN` flagged `DF_1_PIE`, or with `PT_INTERP` and no `DT_SONAME`.
    PieExecutable,
    /// Any other `ET_DYN` (including runnable libraries like `libc.so.6`).
    SharedObject,
}

/// Everything fctrace needs to know about one ELF file.
#[derive(Debug, Clone)]
pub struct ElfInfo {
    pub kind: ElfKind,
    /// Human name of `e_machine`: "x86_64", "aarch64", "i386", ...
    pub machine: String,
    /// 64-bit `EM_X86_64`.
    pub is_x86_64: bool,
    /// An executable without `PT_INTERP` (static, or static-pie). Always
    /// false for shared objects.
    pub is_static: bool,
    /// The program interpreter `PT_INTERP` names (the dynamic loader),
    /// if any.
    pub interp: Option<String>,
    /// `.symtab` has at least one defined function.
    pub has_symtab: bool,
    /// A `.gnu_debugdata` section (MiniDebugInfo: see
    /// [`crate::minidebug`]) names the functions `.symtab` would.
    pub has_minidebuginfo: bool,
    /// The Go code the file holds (built with cgo or as a c-shared
    /// library), if any (not looked for when only the headers are read).
    pub go: Option<GoCode>,
    /// `e_entry`.
    pub entry: u64,
    /// Contents of the `NT_GNU_BUILD_ID` note.
    pub build_id: Option<Vec<u8>>,
    /// The file name `.gnu_debuglink` names and the CRC-32 it gives for
    /// that file.
    pub debuglink: Option<(String, u32)>,
    /// A file without symbols for its local functions (no `.symtab`):
    /// the FDEs of its call frame information that are not function
    /// entries, by address, with the reason (see the `entries` module;
    /// the entries themselves are among the functions, unnamed).
    pub left_out: Vec<LeftOut>,
    /// Sorted by `addr`, one per address.
    pub functions: Vec<FuncSym>,
    /// Sorted by `addr`.
    pub plt: Vec<PltEntry>,
    /// Sorted by `got`.
    pub got_imports: Vec<GotImport>,
    /// Instrumentation hooks the binary carries, in this order when present:
    /// "mcount", "__fentry__", "__cyg_profile_func_enter",
    /// "__patchable_function_entries" (the section).
    pub markers: Vec<String>,
}

/// One function (one address, possibly several names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSym {
    /// The preferred name (see the crate docs).
    pub name: String,
    /// The other names at the same address, best first.
    pub aliases: Vec<String>,
    /// ELF virtual address (`st_value`).
    pub addr: u64,
    /// `st_size`, 0 if unknown.
    pub size: u64,
    /// Exclusive end of the alignment padding after `addr + size`
    /// (`== addr + size` if none, `== addr` if `size == 0`).
    pub pad_end: u64,
    /// The preferred name is not `STB_LOCAL`.
    pub global: bool,
    /// `STT_GNU_IFUNC`: `addr` is the resolver, not the function.
    pub ifunc: bool,
    /// Name of the containing section, e.g. ".text" (shared by the
    /// functions of a section: a program may have hundreds of thousands).
    pub section: std::sync::Arc<str>,
}

impl FuncSym {
    /// `addr + size`.
    pub fn end(&self) -> u64 {
        self.addr + self.size
    }

    /// Whether `name` is the preferred name or one of the aliases.
    pub fn has_name(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }
}

/// One function as [`crate::analyze_borrowed`] gives it: a [`FuncSym`] whose
/// name points into the file's bytes (nothing is allocated per function,
/// which matters for programs with hundreds of thousands of them), without
/// its aliases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncRef<'data> {
    /// The preferred name (see the crate docs); owned only when the
    /// symbol is not valid UTF-8. Empty for a function no symbol names,
    /// found from the file's call frame information (a stripped file):
    /// see [`FuncRef::is_unnamed`].
    pub name: Cow<'data, str>,
    /// ELF virtual address (`st_value`).
    pub addr: u64,
    /// `st_size`, 0 if unknown.
    pub size: u64,
    /// Exclusive end of the alignment padding after `addr + size`. From
    /// [`crate::analyze_functions_with_debug`], which reads no code: where a scan
    /// for that padding stops instead (the next symbol of any kind in the
    /// section, the section's end, or without a `.symtab` the next 16-byte
    /// boundary; `addr + size` if there is nothing to scan, `addr` for a
    /// size of 0); the padding's end is then `addr + size +`
    /// [`crate::padding_run`]`(bytes of [addr + size, pad_end))`.
    pub pad_end: u64,
    /// Index of the containing section in the file's section table.
    pub section: u32,
    /// The preferred name is not `STB_LOCAL`.
    pub global: bool,
    /// `STT_GNU_IFUNC`: `addr` is the resolver, not the function.
    pub ifunc: bool,
    /// Preference rank of the name's binding (lower is better).
    pub(crate) rank: u8,
}

/// A range of code with call frame information of its own (an FDE) that
/// is not a function entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// ELF virtual address of its first byte.
    pub addr: u64,
    /// The FDE's length.
    pub size: u64,
    /// Why it is not a function: a PLT stub, a split part, ...
    pub reason: String,
}

impl FuncRef<'_> {
    /// Whether no symbol names the function: a stripped file's function
    /// found by its FDE (its size is the FDE's length). fctrace names it
    /// after its module and address (`git+0x4a3f0`).
    pub fn is_unnamed(&self) -> bool {
        self.name.is_empty()
    }
}

/// A callable PLT stub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PltEntry {
    /// Address of the stub (what `call foo@plt` targets).
    pub addr: u64,
    /// Size of the stub (8 or 16).
    pub size: u64,
    /// The GOT slot the stub jumps through.
    pub got: u64,
    /// Imported symbol, without version ("strlen").
    pub name: String,
    /// Symbol version ("GLIBC_2.2.5"), if any.
    pub version: Option<String>,
}

/// A function imported through a `GLOB_DAT` GOT slot that has no PLT stub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GotImport {
    /// Address of the GOT slot.
    pub got: u64,
    /// Imported symbol, without version.
    pub name: String,
    /// Symbol version, if any.
    pub version: Option<String>,
}

impl ElfInfo {
    /// The function whose `[addr, addr + size)` contains `addr` (or which
    /// starts exactly at `addr`, for zero-size functions).
    pub fn function_containing(&self, addr: u64) -> Option<&FuncSym> {
        let i = self.functions.partition_point(|f| f.addr <= addr);
        let f = self.functions.get(i.checked_sub(1)?)?;
        (addr == f.addr || addr < f.end()).then_some(f)
    }

    /// Functions having `name` as name or alias.
    pub fn functions_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a FuncSym> + 'a {
        self.functions.iter().filter(move |f| f.has_name(name))
    }

    /// Whether the program is started by musl's dynamic loader, which
    /// cannot load fctrace's agent (built against glibc).
    pub fn is_musl(&self) -> bool {
        self.interp
            .as_deref()
            .is_some_and(|i| loader::is_musl(i.as_bytes()))
    }

    /// The pre-flight checks that make a program untraceable by fctrace:
    /// not x86_64, statically linked (nothing to preload into), or linked
    /// with musl (its loader cannot load the agent). A missing
    /// `.symtab` is not an error here; see [`ElfInfo::has_symtab`].
    pub fn check_traceable(&self) -> Result<(), SymbolError> {
        if !self.is_x86_64 {
            return Err(SymbolError(format!(
                "ELF for {}, fctrace traces x86_64 programs only",
                self.machine
            )));
        }
        if self.is_static {
            return Err(SymbolError(
                "statically linked program: fctrace needs a dynamically linked one \
                 (it preloads its agent through the dynamic loader)"
                    .into(),
            ));
        }
        if self.is_musl() {
            return Err(SymbolError(format!(
                "a musl program ({} starts it): fctrace's agent is built for glibc and \
                 musl's dynamic loader cannot load it, so fctrace does not run it; build \
                 the program against glibc (gcc) to trace it",
                self.interp.as_deref().unwrap_or("")
            )));
        }
        Ok(())
    }
}
