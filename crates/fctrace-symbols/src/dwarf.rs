//! Function signatures for `-a`/`--auto-args`: the parameter and return
//! types of each function, from the DWARF debug information of an ELF file
//! (or of its separate debug file, found by build-id or `.gnu_debuglink`:
//! [`crate::debugfile`]), and for functions without any, a built-in
//! table of common C library prototypes ([`libc_prototype`]).
//!
//! [`arg_locations`] and [`ret_location`] then say where the System V
//! x86-64 calling convention puts each value at the function's entry and
//! exit.

use gimli::{AttributeValue, DwTag, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// A type, as far as showing a value of it goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    Void,
    Int {
        size: u8,
        signed: bool,
    },
    Bool {
        size: u8,
    },
    Char,
    Enum {
        size: u8,
        signed: bool,
        values: Vec<(i64, String)>,
    },
    /// `float` (4) or `double` (8).
    Float {
        size: u8,
    },
    /// A pointer or reference (shown as an address).
    Ptr,
    /// A pointer to `char` (shown as the string it points to).
    Str,
    /// A struct or class; `union` for a union (its fields overlap and
    /// are not shown).
    Struct {
        size: u32,
        fields: Vec<Field>,
        union: bool,
    },
    Array {
        size: u32,
        elem: Box<Ty>,
    },
    /// Anything else (`long double`, `__int128`, bit fields...): not
    /// shown (`{...}`), passed in memory.
    Other {
        size: u32,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub ty: Ty,
}

impl Ty {
    /// Size in bytes.
    pub fn size(&self) -> u32 {
        match self {
            Ty::Void => 0,
            Ty::Int { size, .. } | Ty::Bool { size } | Ty::Enum { size, .. } => u32::from(*size),
            Ty::Float { size } => u32::from(*size),
            Ty::Char => 1,
            Ty::Ptr | Ty::Str => 8,
            Ty::Struct { size, .. } | Ty::Array { size, .. } | Ty::Other { size } => *size,
        }
    }
}

/// A function's parameters and return type.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub params: Vec<Ty>,
    pub ret: Ty,
    /// Takes more arguments after `params` (`...`).
    pub variadic: bool,
}

/// Signatures by symbol name (the linkage name where there is one).
pub type Signatures = HashMap<String, Signature>;

pub use crate::debugfile::DEBUG_ROOT;

/// The signatures of the functions of the ELF file at `path` (from its own
/// DWARF, else from its separate debug file, found by build-id or
/// `.gnu_debuglink` as [`crate::debugfile`] says). Empty without debug
/// information.
pub fn signatures_of_file(path: &Path) -> Result<Signatures, String> {
    signatures_of_file_in(path, Path::new(DEBUG_ROOT))
}

/// [`signatures_of_file`] with separate debug files under `debug_root`.
pub fn signatures_of_file_in(path: &Path, debug_root: &Path) -> Result<Signatures, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.section_by_name(".debug_info").is_some() {
        return signatures(&file);
    }
    let Some(debug) = crate::debugfile::find_in(path, &data, debug_root) else {
        return Ok(Signatures::new());
    };
    let data = std::fs::read(&debug).map_err(|e| format!("{}: {e}", debug.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", debug.display()))?;
    signatures(&file)
}

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// The DWARF sections of `file`, decompressed (empty where it has none):
/// what [`signatures`] and `srcline::srclines` read.
pub(crate) fn sections<'a>(
    file: &'a object::File,
) -> Result<gimli::DwarfSections<Cow<'a, [u8]>>, String> {
    let load = |id: gimli::SectionId| -> Result<Cow<'a, [u8]>, gimli::Error> {
        Ok(match file.section_by_name(id.name()) {
            Some(s) => s.uncompressed_data().unwrap_or(Cow::Borrowed(&[])),
            None => Cow::Borrowed(&[]),
        })
    };
    gimli::DwarfSections::load(load).map_err(|e| e.to_string())
}

/// The signatures of the functions an ELF file's DWARF describes.
pub fn signatures(file: &object::File) -> Result<Signatures, String> {
    let sections = crate::dwarf::sections(file)?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, RunTimeEndian::Little));
    let mut out = Signatures::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let u = UnitCtx {
            dwarf: &dwarf,
            unit: &unit,
            gnu: produced_by_gcc(&dwarf, &unit),
        };
        let mut cursor = unit.entries();
        while let Some((_, entry)) = cursor.next_dfs().map_err(|e| e.to_string())? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let offset = entry.offset();
            if let Some((name, sig)) = u.subprogram(offset) {
                out.entry(name).or_insert(sig);
            }
        }
    }
    Ok(out)
}

struct UnitCtx<'a, 'd> {
    dwarf: &'a gimli::Dwarf<R<'d>>,
    unit: &'a gimli::Unit<R<'d>>,
    /// Produced by GCC (see [`enumerator_value`]).
    gnu: bool,
}

/// Whether the compilation unit was produced by GCC (`DW_AT_producer`
/// "GNU C17 12.2.0 ...", "GNU C++17 ...").
fn produced_by_gcc(dwarf: &gimli::Dwarf<R>, unit: &gimli::Unit<R>) -> bool {
    let mut cursor = unit.entries();
    let Ok(Some((_, root))) = cursor.next_dfs() else {
        return false;
    };
    root.attr_value(gimli::DW_AT_producer)
        .ok()
        .flatten()
        .and_then(|v| dwarf.attr_string(unit, v).ok())
        .is_some_and(|s| s.starts_with(b"GNU "))
}

/// The value of an enumerator of an enum of `size` bytes, signed or not,
/// as the agent reads a value of that enum from a register: sign-extended
/// from `size` bytes for a signed enum, zero-extended for an unsigned one.
///
/// `DW_FORM_data1/2/4/8` carry no sign: the type gives it. A form as wide
/// as the enum holds all its bits. A narrower one is read as the
/// producer writes it: GCC writes the value unsigned in the smallest form
/// that holds it and negative values as `DW_FORM_sdata` (`32768` of a
/// signed enum is `data2 0x8000`), other producers (LLVM) sign-extend a
/// signed value from the form (`-2` is `data1 0xfe`).
fn enumerator_value(v: AttributeValue<R>, size: u8, signed: bool, gnu: bool) -> Option<i64> {
    let (bits, width) = match v {
        AttributeValue::Sdata(v) => (v, 8),
        AttributeValue::Udata(v) => (v as i64, 8),
        AttributeValue::Data1(v) => (i64::from(v), 1),
        AttributeValue::Data2(v) => (i64::from(v), 2),
        AttributeValue::Data4(v) => (i64::from(v), 4),
        AttributeValue::Data8(v) => (v as i64, 8),
        _ => return None,
    };
    let extend = |v: i64, bytes: u8, signed: bool| -> i64 {
        if bytes >= 8 {
            return v;
        }
        let shift = 64 - u32::from(bytes) * 8;
        if signed {
            (v << shift) >> shift
        } else {
            ((v as u64) << shift >> shift) as i64
        }
    };
    let v = if width < 8 && signed && (width >= size || !gnu) {
        extend(bits, width, true)
    } else {
        bits
    };
    Some(extend(v, size, signed))
}

/// Deepest nesting of types followed.
const MAX_TYPE_DEPTH: u32 = 8;

impl UnitCtx<'_, '_> {
    fn string(&self, v: AttributeValue<R>) -> Option<String> {
        let s = self.dwarf.attr_string(self.unit, v).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn attr(&self, off: UnitOffset, at: gimli::DwAt) -> Option<AttributeValue<R<'_>>> {
        let e = self.unit.entry(off).ok()?;
        e.attr_value(at).ok().flatten()
    }

    fn name_of(&self, off: UnitOffset, at: gimli::DwAt) -> Option<String> {
        self.string(self.attr(off, at)?)
    }

    fn unit_ref(&self, v: Option<AttributeValue<R>>) -> Option<UnitOffset> {
        match v? {
            AttributeValue::UnitRef(o) => Some(o),
            _ => None,
        }
    }

    fn udata(&self, off: UnitOffset, at: gimli::DwAt) -> Option<u64> {
        self.attr(off, at)?.udata_value()
    }

    /// A function's name and signature, for a definition, an abstract
    /// instance, or a concrete instance of one with a linkage name of its
    /// own (the C1/C2 variants of a C++ constructor); not a declaration.
    fn subprogram(&self, off: UnitOffset) -> Option<(String, Signature)> {
        let e = self.unit.entry(off).ok()?;
        if e.attr_value(gimli::DW_AT_declaration)
            .ok()
            .flatten()
            .is_some()
        {
            return None;
        }
        if let Some(origin) = e.attr_value(gimli::DW_AT_abstract_origin).ok().flatten() {
            let name = self
                .name_of(off, gimli::DW_AT_linkage_name)
                .or_else(|| self.name_of(off, gimli::DW_AT_MIPS_linkage_name))?;
            let (_, sig) = self.described(self.unit_ref(Some(origin))?)?;
            return Some((name, sig));
        }
        self.described(off)
    }

    /// The name and signature a subprogram entry describes (itself or
    /// through the declaration it completes).
    fn described(&self, off: UnitOffset) -> Option<(String, Signature)> {
        let e = self.unit.entry(off).ok()?;
        // An out-of-class definition names its declaration.
        let spec = self.unit_ref(e.attr_value(gimli::DW_AT_specification).ok().flatten());
        let named = |at| {
            self.name_of(off, at)
                .or_else(|| spec.and_then(|s| self.name_of(s, at)))
        };
        let name = named(gimli::DW_AT_linkage_name)
            .or_else(|| named(gimli::DW_AT_MIPS_linkage_name))
            .or_else(|| named(gimli::DW_AT_name))?;
        let ret_ty = e
            .attr_value(gimli::DW_AT_type)
            .ok()
            .flatten()
            .or_else(|| spec.and_then(|s| self.attr(s, gimli::DW_AT_type)));
        let ret = match self.unit_ref(ret_ty) {
            Some(t) => self.ty(t, 0),
            None => Ty::Void,
        };
        let mut params = Vec::new();
        let mut variadic = false;
        let mut tree = self.unit.entries_tree(Some(off)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let c = child.entry();
            match c.tag() {
                gimli::DW_TAG_formal_parameter => {
                    let t = self.unit_ref(c.attr_value(gimli::DW_AT_type).ok().flatten());
                    params.push(match t {
                        Some(t) => self.ty(t, 0),
                        None => Ty::Other { size: 8 },
                    });
                }
                gimli::DW_TAG_unspecified_parameters => variadic = true,
                _ => {}
            }
        }
        Some((
            name,
            Signature {
                params,
                ret,
                variadic,
            },
        ))
    }

    fn tag(&self, off: UnitOffset) -> Option<DwTag> {
        Some(self.unit.entry(off).ok()?.tag())
    }

    /// The `DW_AT_encoding` of the base type at `off`, through typedefs
    /// and qualifiers.
    fn base_encoding(&self, off: UnitOffset, depth: u32) -> Option<gimli::DwAte> {
        if depth > MAX_TYPE_DEPTH {
            return None;
        }
        match self.tag(off)? {
            gimli::DW_TAG_base_type => match self.attr(off, gimli::DW_AT_encoding)? {
                AttributeValue::Encoding(e) => Some(e),
                _ => None,
            },
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type => {
                let t = self.unit_ref(self.attr(off, gimli::DW_AT_type))?;
                self.base_encoding(t, depth + 1)
            }
            _ => None,
        }
    }

    /// The type at `off`, through typedefs and qualifiers.
    fn ty(&self, off: UnitOffset, depth: u32) -> Ty {
        self.ty_inner(off, depth).unwrap_or(Ty::Other { size: 8 })
    }

    /// The type at `off` (see [`Ty`]), `None` when its description is
    /// broken or nested deeper than [`MAX_TYPE_DEPTH`].
    fn ty_inner(&self, off: UnitOffset, depth: u32) -> Option<Ty> {
        if depth > MAX_TYPE_DEPTH {
            return None;
        }
        let tag = self.tag(off)?;
        let size = self.udata(off, gimli::DW_AT_byte_size);
        Some(match tag {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => match self.under(off) {
                Some(t) => self.ty_inner(t, depth + 1)?,
                None => Ty::Void,
            },
            gimli::DW_TAG_base_type => self.base_ty(off, size?)?,
            gimli::DW_TAG_pointer_type => {
                let is_char = self
                    .under(off)
                    .map(|t| self.ty_inner(t, depth + 1))
                    .is_some_and(|t| t == Some(Ty::Char));
                if is_char {
                    Ty::Str
                } else {
                    Ty::Ptr
                }
            }
            gimli::DW_TAG_reference_type | gimli::DW_TAG_rvalue_reference_type => Ty::Ptr,
            gimli::DW_TAG_enumeration_type => self.enum_ty(off, size, depth)?,
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                self.struct_ty(off, size? as u32, tag == gimli::DW_TAG_union_type, depth)?
            }
            gimli::DW_TAG_array_type => self.array_ty(off, depth)?,
            _ => Ty::Other {
                size: size.unwrap_or(8) as u32,
            },
        })
    }

    /// The type the entry at `off` refers to (`DW_AT_type`).
    fn under(&self, off: UnitOffset) -> Option<UnitOffset> {
        self.unit_ref(self.attr(off, gimli::DW_AT_type))
    }

    /// The base type at `off`, of `size` bytes, by its encoding.
    fn base_ty(&self, off: UnitOffset, size: u64) -> Option<Ty> {
        let size = size as u8;
        let enc = match self.attr(off, gimli::DW_AT_encoding)? {
            AttributeValue::Encoding(e) => e,
            _ => return None,
        };
        Some(match enc {
            gimli::DW_ATE_boolean => Ty::Bool { size },
            gimli::DW_ATE_float if size == 4 || size == 8 => Ty::Float { size },
            gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char if size == 1 => Ty::Char,
            gimli::DW_ATE_signed | gimli::DW_ATE_signed_char if matches!(size, 1 | 2 | 4 | 8) => {
                Ty::Int { size, signed: true }
            }
            gimli::DW_ATE_unsigned | gimli::DW_ATE_unsigned_char | gimli::DW_ATE_UTF
                if matches!(size, 1 | 2 | 4 | 8) =>
            {
                Ty::Int {
                    size,
                    signed: false,
                }
            }
            _ => Ty::Other {
                size: u32::from(size),
            },
        })
    }

    /// The enumeration at `off` (of `size` bytes when it says): its size,
    /// whether it is signed, and its enumerators' values and names.
    fn enum_ty(&self, off: UnitOffset, size: Option<u64>, depth: u32) -> Option<Ty> {
        let size = size.or_else(|| {
            // No byte size of its own: its underlying type's.
            self.under(off)
                .and_then(|t| self.ty_inner(t, depth + 1))
                .map(|t| u64::from(t.size()))
        });
        let size = match size {
            Some(s @ (1 | 2 | 4 | 8)) => s as u8,
            _ => 4,
        };
        let mut raw = Vec::new();
        let mut tree = self.unit.entries_tree(Some(off)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let c = child.entry();
            if c.tag() != gimli::DW_TAG_enumerator {
                continue;
            }
            let Some(v) = c.attr_value(gimli::DW_AT_const_value).ok().flatten() else {
                continue;
            };
            let name = c
                .attr_value(gimli::DW_AT_name)
                .ok()
                .flatten()
                .and_then(|n| self.string(n))
                .unwrap_or_default();
            raw.push((v, name));
        }
        // Signed or not: the encoding gcc puts on the enum itself,
        // else its underlying type's (DW_AT_type), else (old DWARF
        // without either) signed when a value is negative, as C
        // compilers choose.
        let encoding = match self.attr(off, gimli::DW_AT_encoding) {
            Some(AttributeValue::Encoding(e)) => Some(e),
            _ => self
                .under(off)
                .and_then(|t| self.base_encoding(t, depth + 1)),
        };
        let signed = match encoding {
            Some(e) => matches!(e, gimli::DW_ATE_signed | gimli::DW_ATE_signed_char),
            None => raw
                .iter()
                .any(|(v, _)| matches!(v, AttributeValue::Sdata(x) if *x < 0)),
        };
        let values = raw
            .into_iter()
            .filter_map(|(v, name)| Some((enumerator_value(v, size, signed, self.gnu)?, name)))
            .collect();
        Some(Ty::Enum {
            size,
            signed,
            values,
        })
    }

    /// The structure, class or union (`union`) at `off`, of `size` bytes:
    /// its data members, or [`Ty::Other`] when its layout is more than
    /// members at constant offsets (a base class, a bit field, a computed
    /// offset).
    fn struct_ty(&self, off: UnitOffset, size: u32, union: bool, depth: u32) -> Option<Ty> {
        let mut fields = Vec::new();
        let mut tree = self.unit.entries_tree(Some(off)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        let mut complex = false;
        while let Ok(Some(child)) = children.next() {
            let c = child.entry();
            match c.tag() {
                gimli::DW_TAG_member => {}
                gimli::DW_TAG_inheritance => {
                    complex = true;
                    continue;
                }
                _ => continue,
            }
            if c.attr_value(gimli::DW_AT_external).ok().flatten().is_some()
                || c.attr_value(gimli::DW_AT_declaration)
                    .ok()
                    .flatten()
                    .is_some()
            {
                continue; // a static member
            }
            if c.attr_value(gimli::DW_AT_bit_size).ok().flatten().is_some() {
                complex = true;
            }
            // A location expression (not a constant offset) is complex.
            let offset = match c
                .attr_value(gimli::DW_AT_data_member_location)
                .ok()
                .flatten()
            {
                None => 0,
                Some(v) => match v.udata_value().and_then(|v| u32::try_from(v).ok()) {
                    Some(v) => v,
                    None => {
                        complex = true;
                        0
                    }
                },
            };
            let name = c
                .attr_value(gimli::DW_AT_name)
                .ok()
                .flatten()
                .and_then(|n| self.string(n))
                .unwrap_or_default();
            let t = self.unit_ref(c.attr_value(gimli::DW_AT_type).ok().flatten());
            let ty = match t {
                Some(t) => self.ty(t, depth + 1),
                None => Ty::Other { size: 0 },
            };
            fields.push(Field { name, offset, ty });
        }
        Some(if complex {
            Ty::Other { size }
        } else {
            Ty::Struct {
                size,
                fields,
                union,
            }
        })
    }

    /// The array at `off`: its element type and, from its first
    /// subrange, its size (0 when its length is not a constant).
    fn array_ty(&self, off: UnitOffset, depth: u32) -> Option<Ty> {
        let elem = self.ty(self.under(off)?, depth + 1);
        let mut count = None;
        let mut tree = self.unit.entries_tree(Some(off)).ok()?;
        let root = tree.root().ok()?;
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            let c = child.entry();
            if c.tag() == gimli::DW_TAG_subrange_type {
                let constant = |at| c.attr_value(at).ok().flatten()?.udata_value();
                count = constant(gimli::DW_AT_count)
                    .or_else(|| constant(gimli::DW_AT_upper_bound).map(|v| v.saturating_add(1)));
                break;
            }
        }
        let size = count.map_or(0, |n| n.saturating_mul(u64::from(elem.size()))) as u32;
        Some(Ty::Array {
            size,
            elem: Box::new(elem),
        })
    }
}

/// The built-in prototypes of common C library functions, for `-a` on
/// functions without debug information.
pub fn libc_prototype(name: &str) -> Option<Signature> {
    use Ty::*;
    let int = Int {
        size: 4,
        signed: true,
    };
    let uint = Int {
        size: 4,
        signed: false,
    };
    let long = Int {
        size: 8,
        signed: true,
    };
    let size_t = Int {
        size: 8,
        signed: false,
    };
    let sig = |params: Vec<Ty>, ret: Ty| Signature {
        params,
        ret,
        variadic: false,
    };
    let var = |params: Vec<Ty>, ret: Ty| Signature {
        params,
        ret,
        variadic: true,
    };
    Some(match name {
        "strlen" => sig(vec![Str], size_t),
        "strnlen" => sig(vec![Str, size_t.clone()], size_t),
        "strcmp" | "strcasecmp" | "strcoll" => sig(vec![Str, Str], int),
        "strncmp" | "strncasecmp" => sig(vec![Str, Str, size_t], int),
        "strcpy" | "strcat" | "stpcpy" => sig(vec![Ptr, Str], Ptr),
        "strncpy" | "strncat" => sig(vec![Ptr, Str, size_t], Ptr),
        "strdup" => sig(vec![Str], Str),
        "strndup" => sig(vec![Str, size_t], Str),
        "strchr" | "strrchr" => sig(vec![Str, int], Ptr),
        "strstr" => sig(vec![Str, Str], Ptr),
        "strtol" | "strtoul" | "strtoll" | "strtoull" => sig(vec![Str, Ptr, int], long),
        "strtod" => sig(vec![Str, Ptr], Float { size: 8 }),
        "atoi" => sig(vec![Str], int),
        "atol" | "atoll" => sig(vec![Str], long),
        "atof" => sig(vec![Str], Float { size: 8 }),
        "getenv" | "secure_getenv" => sig(vec![Str], Str),
        "setenv" => sig(vec![Str, Str, int.clone()], int),
        "unsetenv" | "putenv" => sig(vec![Str], int),
        "open" | "open64" => var(
            vec![
                Str,
                Int {
                    size: 4,
                    signed: false,
                },
            ],
            int,
        ),
        "openat" => var(vec![int.clone(), Str, uint], int),
        "creat" => sig(vec![Str, uint], int),
        "close" | "dup" => sig(vec![int.clone()], int),
        "dup2" => sig(vec![int.clone(), int.clone()], int),
        "read" | "write" => sig(vec![int, Ptr, size_t], long),
        "pread" | "pwrite" | "pread64" | "pwrite64" => {
            sig(vec![int, Ptr, size_t, long.clone()], long)
        }
        "lseek" | "lseek64" => sig(vec![int.clone(), long.clone(), int], long),
        "unlink" | "rmdir" | "chdir" => sig(vec![Str], int),
        "mkdir" => sig(vec![Str, uint], int),
        "access" => sig(vec![Str, int.clone()], int),
        "rename" => sig(vec![Str, Str], int),
        "malloc" | "valloc" => sig(vec![size_t], Ptr),
        "calloc" => sig(vec![size_t.clone(), size_t], Ptr),
        "realloc" => sig(vec![Ptr, size_t], Ptr),
        "reallocarray" => sig(vec![Ptr, size_t.clone(), size_t], Ptr),
        "free" => sig(vec![Ptr], Void),
        "aligned_alloc" | "memalign" => sig(vec![size_t.clone(), size_t], Ptr),
        "posix_memalign" => sig(vec![Ptr, size_t.clone(), size_t], int),
        "memcpy" | "memmove" | "mempcpy" => sig(vec![Ptr, Ptr, size_t], Ptr),
        "memset" => sig(vec![Ptr, int, size_t], Ptr),
        "memcmp" => sig(vec![Ptr, Ptr, size_t], int),
        "memchr" => sig(vec![Ptr, int, size_t], Ptr),
        "printf" => var(vec![Str], int),
        "fprintf" | "dprintf" => var(vec![Ptr, Str], int),
        "sprintf" => var(vec![Ptr, Str], int),
        "snprintf" => var(vec![Ptr, size_t, Str], int),
        "puts" => sig(vec![Str], int),
        "fputs" => sig(vec![Str, Ptr], int),
        "putchar" => sig(vec![Char], int),
        "fputc" | "putc" => sig(vec![Char, Ptr], int),
        "fopen" | "fopen64" => sig(vec![Str, Str], Ptr),
        "fdopen" => sig(vec![int, Str], Ptr),
        "fclose" | "fflush" | "fileno" | "fgetc" | "getc" => sig(vec![Ptr], int),
        "fread" | "fwrite" => sig(
            vec![Ptr, size_t.clone(), size_t, Ptr],
            Int {
                size: 8,
                signed: false,
            },
        ),
        "fgets" => sig(vec![Ptr, int, Ptr], Ptr),
        "fseek" => sig(vec![Ptr, long, int.clone()], int),
        "ftell" => sig(vec![Ptr], long),
        "exit" | "_exit" => sig(vec![int], Void),
        "abs" => sig(vec![int.clone()], int),
        "labs" => sig(vec![long.clone()], long),
        "sleep" => sig(vec![uint.clone()], uint),
        "usleep" => sig(vec![uint], int),
        "getpid" | "getppid" => sig(vec![], int),
        "kill" => sig(vec![int.clone(), int.clone()], int),
        "raise" => sig(vec![int.clone()], int),
        "system" => sig(vec![Str], int),
        "qsort" => sig(vec![Ptr, size_t.clone(), size_t, Ptr], Void),
        "sqrt" | "sin" | "cos" | "exp" | "log" | "floor" | "ceil" | "fabs" => {
            sig(vec![Float { size: 8 }], Float { size: 8 })
        }
        "pow" | "atan2" | "fmod" => sig(
            vec![Float { size: 8 }, Float { size: 8 }],
            Float { size: 8 },
        ),
        "sqrtf" | "sinf" | "cosf" | "fabsf" => sig(vec![Float { size: 4 }], Float { size: 4 }),
        _ => return None,
    })
}

/// Where a value is, 8 bytes at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Integer argument register 0..6 (rdi, rsi, rdx, rcx, r8, r9), or
    /// for a return value 0..2 (rax, rdx).
    Gpr(u8),
    /// Vector register 0..8 (its low 8 bytes).
    Xmm(u8),
    /// The stack, this many bytes above the return address's slot.
    Stack(u32),
}

/// Where a whole value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loc {
    /// In up to two eightbytes (a scalar, or a small struct).
    Pieces(Vec<Piece>),
    /// In memory on the stack (a struct passed by value in memory), this
    /// many bytes above the return address's slot.
    Stack { offset: u32, size: u32 },
    /// In memory at the address returned in rax (a large returned struct).
    AtRax { size: u32 },
    /// Nothing (void).
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Int,
    Sse,
}

/// The class of each eightbyte of a type (System V x86-64 ABI): one per
/// eightbyte, or `Memory`.
fn classify(ty: &Ty) -> Result<Vec<Class>, ()> {
    let size = ty.size();
    match ty {
        Ty::Void => return Ok(vec![]),
        Ty::Float { .. } => return Ok(vec![Class::Sse]),
        Ty::Int { .. } | Ty::Bool { .. } | Ty::Char | Ty::Enum { .. } | Ty::Ptr | Ty::Str => {
            return Ok(vec![Class::Int])
        }
        Ty::Other { .. } => return Err(()),
        Ty::Struct { .. } | Ty::Array { .. } => {}
    }
    if size == 0 || size > 16 {
        return Err(());
    }
    let mut classes = vec![None::<Class>; size.div_ceil(8) as usize];
    fn leaves(ty: &Ty, at: u32, classes: &mut [Option<Class>]) -> Result<(), ()> {
        match ty {
            Ty::Struct { fields, .. } => {
                for f in fields {
                    leaves(&f.ty, at + f.offset, classes)?;
                }
                Ok(())
            }
            Ty::Array { elem, size } => {
                let es = elem.size();
                if es == 0 {
                    return Err(());
                }
                for i in 0..size / es {
                    leaves(elem, at + i * es, classes)?;
                }
                Ok(())
            }
            Ty::Other { .. } | Ty::Void => Err(()),
            _ => {
                let c = if matches!(ty, Ty::Float { .. }) {
                    Class::Sse
                } else {
                    Class::Int
                };
                let slot = classes.get_mut((at / 8) as usize).ok_or(())?;
                *slot = Some(match (*slot, c) {
                    (Some(Class::Int), _) | (_, Class::Int) => Class::Int,
                    _ => Class::Sse,
                });
                Ok(())
            }
        }
    }
    leaves(ty, 0, &mut classes)?;
    Ok(classes
        .into_iter()
        .map(|c| c.unwrap_or(Class::Sse))
        .collect())
}

/// Where each parameter is at the function's entry, for a function
/// returning `ret` (returned in memory, it takes rdi for its address).
pub fn arg_locations(params: &[Ty], ret: &Ty) -> Vec<Loc> {
    let hidden = matches!(ret_location(ret), Loc::AtRax { .. });
    let (mut gp, mut sse, mut stack) = (u8::from(hidden), 0u8, 8u32);
    let mut out = Vec::with_capacity(params.len());
    for ty in params {
        let size = ty.size();
        match classify(ty) {
            Ok(classes) if !classes.is_empty() => {
                let need_gp = classes.iter().filter(|&&c| c == Class::Int).count() as u8;
                let need_sse = classes.iter().filter(|&&c| c == Class::Sse).count() as u8;
                if gp + need_gp <= 6 && sse + need_sse <= 8 {
                    out.push(Loc::Pieces(registers(&classes, &mut gp, &mut sse)));
                } else {
                    out.push(if classes.len() == 1 {
                        Loc::Pieces(vec![Piece::Stack(stack)])
                    } else {
                        Loc::Stack {
                            offset: stack,
                            size,
                        }
                    });
                    stack += (classes.len() as u32) * 8;
                }
            }
            Ok(_) => out.push(Loc::None),
            Err(()) => {
                out.push(Loc::Stack {
                    offset: stack,
                    size,
                });
                stack += size.div_ceil(8) * 8;
            }
        }
    }
    out
}

/// The registers of a value of these classes: the next general-purpose
/// ones (from `*gp`) and the next vector ones (from `*sse`), in order.
fn registers(classes: &[Class], gp: &mut u8, sse: &mut u8) -> Vec<Piece> {
    classes
        .iter()
        .map(|c| match c {
            Class::Int => {
                *gp += 1;
                Piece::Gpr(*gp - 1)
            }
            _ => {
                *sse += 1;
                Piece::Xmm(*sse - 1)
            }
        })
        .collect()
}

/// Where the return value is at the function's exit.
pub fn ret_location(ty: &Ty) -> Loc {
    match classify(ty) {
        Ok(classes) if classes.is_empty() => Loc::None,
        Ok(classes) => {
            let (mut gp, mut sse) = (0u8, 0u8);
            Loc::Pieces(registers(&classes, &mut gp, &mut sse))
        }
        Err(()) => Loc::AtRax { size: ty.size() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(fields: &[(u32, Ty)]) -> Ty {
        let size = fields
            .iter()
            .map(|(o, t)| o + t.size())
            .max()
            .unwrap_or(0)
            .div_ceil(8)
            * 8;
        Ty::Struct {
            size,
            fields: fields
                .iter()
                .enumerate()
                .map(|(i, (o, t))| Field {
                    name: format!("f{i}"),
                    offset: *o,
                    ty: t.clone(),
                })
                .collect(),
            union: false,
        }
    }

    #[test]
    fn sysv_locations() {
        let int = Ty::Int {
            size: 4,
            signed: true,
        };
        let dbl = Ty::Float { size: 8 };
        let point = st(&[(0, int.clone()), (4, int.clone())]);
        let mixed = st(&[(0, dbl.clone()), (8, int.clone())]);
        let big = st(&[(0, dbl.clone()), (8, dbl.clone()), (16, dbl.clone())]);
        let locs = arg_locations(
            &[
                int.clone(),
                dbl.clone(),
                point.clone(),
                mixed.clone(),
                big.clone(),
                int.clone(),
                int.clone(),
                int.clone(),
                int.clone(),
            ],
            &Ty::Void,
        );
        use Piece::*;
        assert_eq!(
            locs,
            vec![
                Loc::Pieces(vec![Gpr(0)]),
                Loc::Pieces(vec![Xmm(0)]),
                Loc::Pieces(vec![Gpr(1)]),
                Loc::Pieces(vec![Xmm(1), Gpr(2)]),
                Loc::Stack {
                    offset: 8,
                    size: 24
                },
                Loc::Pieces(vec![Gpr(3)]),
                Loc::Pieces(vec![Gpr(4)]),
                Loc::Pieces(vec![Gpr(5)]),
                Loc::Pieces(vec![Stack(32)]),
            ]
        );
        assert_eq!(ret_location(&mixed), Loc::Pieces(vec![Xmm(0), Gpr(0)]));
        assert_eq!(ret_location(&big), Loc::AtRax { size: 24 });
        assert_eq!(ret_location(&Ty::Void), Loc::None);
        // Returned in memory: rdi holds the address to return it at.
        assert_eq!(
            arg_locations(std::slice::from_ref(&int), &big),
            vec![Loc::Pieces(vec![Gpr(1)])]
        );
        // Registers used up: the rest goes to the stack; a struct of two
        // eightbytes with one register left goes to the stack whole.
        let mut many = vec![int.clone(); 6];
        many.push(point.clone());
        many.push(int.clone());
        let locs = arg_locations(&many, &Ty::Void);
        assert_eq!(locs[6], Loc::Pieces(vec![Stack(8)]));
        assert_eq!(locs[7], Loc::Pieces(vec![Stack(16)]));
        let two = st(&[(0, int.clone()), (8, int.clone())]);
        let mut many = vec![int.clone(); 5];
        many.push(two);
        assert_eq!(
            arg_locations(&many, &int)[5],
            Loc::Stack {
                offset: 8,
                size: 16
            }
        );
    }

    /// A real `-g` program, compiled here.
    #[test]
    fn signatures_of_a_c_program() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("t.c");
        std::fs::write(
            &src,
            r#"
            #include <stdbool.h>
            enum color { RED, GREEN = 5, BLUE = -2 };
            typedef struct { int x; double y; } point;
            struct big { long a, b, c; };
            union u { int i; float f; };
            enum color pick(enum color c, bool b, const char *s, char ch,
                            unsigned short us, float f, point p, struct big *bp,
                            struct big bv, union u un, long double ld, int *ip,
                            char buf[4]) { return c; }
            void nothing(void) {}
            int vari(int n, ...) { return n; }
            int main(void) { return 0; }
            "#,
        )
        .unwrap();
        let exe = dir.path().join("t");
        let st = std::process::Command::new("cc")
            .args(["-g", "-O0", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        let sigs = signatures_of_file(&exe).unwrap();
        let pick = &sigs["pick"];
        let color = Ty::Enum {
            size: 4,
            signed: true,
            values: vec![(0, "RED".into()), (5, "GREEN".into()), (-2, "BLUE".into())],
        };
        assert_eq!(pick.ret, color);
        assert_eq!(pick.params[0], color);
        assert_eq!(pick.params[1], Ty::Bool { size: 1 });
        assert_eq!(pick.params[2], Ty::Str);
        assert_eq!(pick.params[3], Ty::Char);
        assert_eq!(
            pick.params[4],
            Ty::Int {
                size: 2,
                signed: false
            }
        );
        assert_eq!(pick.params[5], Ty::Float { size: 4 });
        assert_eq!(
            pick.params[6],
            Ty::Struct {
                size: 16,
                union: false,
                fields: vec![
                    Field {
                        name: "x".into(),
                        offset: 0,
                        ty: Ty::Int {
                            size: 4,
                            signed: true
                        }
                    },
                    Field {
                        name: "y".into(),
                        offset: 8,
                        ty: Ty::Float { size: 8 }
                    },
                ]
            }
        );
        assert_eq!(pick.params[7], Ty::Ptr);
        assert!(matches!(pick.params[8], Ty::Struct { size: 24, .. }));
        assert!(matches!(
            pick.params[9],
            Ty::Struct {
                size: 4,
                union: true,
                ..
            }
        ));
        assert!(matches!(pick.params[10], Ty::Other { size: 16 }));
        assert_eq!(pick.params[11], Ty::Ptr);
        assert_eq!(pick.params[12], Ty::Str);
        assert!(!pick.variadic);
        assert_eq!(
            sigs["nothing"],
            Signature {
                params: vec![],
                ret: Ty::Void,
                variadic: false
            }
        );
        assert!(sigs["vari"].variadic);

        // Stripped, with its debug information in a separate file found
        // by build-id.
        let root = dir.path().join("debug");
        let run = |args: &[&std::ffi::OsStr]| {
            let st = std::process::Command::new(args[0])
                .args(&args[1..])
                .status()
                .unwrap();
            assert!(st.success(), "{args:?}");
        };
        let stripped = dir.path().join("t-stripped");
        let dbg = dir.path().join("t.debug");
        run(&[
            "objcopy".as_ref(),
            "--only-keep-debug".as_ref(),
            exe.as_os_str(),
            dbg.as_os_str(),
        ]);
        run(&[
            "objcopy".as_ref(),
            "--strip-debug".as_ref(),
            exe.as_os_str(),
            stripped.as_os_str(),
        ]);
        let data = std::fs::read(&stripped).unwrap();
        let file = object::File::parse(&*data).unwrap();
        assert!(file.section_by_name(".debug_info").is_none());
        let id = file
            .build_id()
            .unwrap()
            .expect("a build-id (gcc's default)");
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let at = root.join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::copy(&dbg, at.join(format!("{}.debug", &hex[2..]))).unwrap();
        assert!(
            signatures_of_file_in(&stripped, &dir.path().join("nowhere"))
                .unwrap()
                .is_empty()
        );
        let sigs2 = signatures_of_file_in(&stripped, &root).unwrap();
        assert_eq!(sigs2["pick"], sigs["pick"]);
    }

    /// Enumerator constants read by the enum's signedness and size.
    #[test]
    fn enumerator_values() {
        use AttributeValue::*;
        let v = |a, size, signed, gnu| enumerator_value(a, size, signed, gnu).unwrap();
        // Unsigned 4-byte enum: never sign-extended, whatever the form.
        assert_eq!(v(Data2(0xffff), 4, false, true), 0xffff);
        assert_eq!(v(Data4(0xffff_0000), 4, false, true), 0xffff_0000);
        assert_eq!(v(Data4(0xffff_0000), 4, false, false), 0xffff_0000);
        assert_eq!(v(Udata(0xffff_0000), 4, false, false), 0xffff_0000);
        // ... nor from a signed form (as the agent zero-extends it).
        assert_eq!(v(Sdata(-65536), 4, false, false), 0xffff_0000);
        // 8 bytes: all bits (compared as the agent's `bits as i64`).
        assert_eq!(v(Data8(u64::MAX), 8, false, true), -1);
        // Signed 4-byte enum: GCC writes 0x8000 unsigned in data2 and -2
        // as sdata; LLVM sign-extends from the form (-2: data1 0xfe,
        // 0x8000: data4).
        assert_eq!(v(Data2(0x8000), 4, true, true), 0x8000);
        assert_eq!(v(Sdata(-2), 4, true, true), -2);
        assert_eq!(v(Data1(0xfe), 4, true, false), -2);
        assert_eq!(v(Data4(0x8000), 4, true, false), 0x8000);
        // A form as wide as the enum holds all its bits.
        assert_eq!(v(Data4(0xffff_fffe), 4, true, true), -2);
        assert_eq!(v(Data1(0x80), 1, true, true), -128);
        assert_eq!(v(Data1(0x80), 1, false, true), 0x80);
        assert!(enumerator_value(Flag(true), 4, true, true).is_none());
    }

    #[test]
    fn prototypes() {
        assert_eq!(libc_prototype("strlen").unwrap().params, vec![Ty::Str]);
        assert!(libc_prototype("printf").unwrap().variadic);
        assert!(libc_prototype("no_such_function").is_none());
    }
}
