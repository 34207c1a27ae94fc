//! User statically defined tracing probes (SDT, USDT): the `.note.stapsdt`
//! notes that `<sys/sdt.h>`'s `STAP_PROBE` macros leave in an ELF file (as
//! `readelf -n` lists them), and the search paths (`DT_RUNPATH`,
//! `DT_RPATH`) a file names for its libraries, to find the probes of a
//! program's libraries. Malformed notes end the list, never panic.

/// One probe: `provider:name`, its address in the file (the probe's
/// 1-byte `nop`), and the locations of its arguments as the note spells
/// them (`-4@%eax 8@-16(%rbp)`; empty without arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdtProbe {
    pub provider: String,
    pub name: String,
    pub addr: u64,
    /// The semaphore's address (0: none), a counter that tools raise to
    /// turn on a probe's argument computation.
    pub semaphore: u64,
    pub args: String,
}

const NT_STAPSDT: u32 = 3;

/// The SDT probes of an ELF file's `.note.stapsdt` section, in their
/// order; none for a file without it or that is not a 64-bit ELF file.
pub fn probes(data: &[u8]) -> Vec<SdtProbe> {
    use object::read::elf::ElfFile64;
    use object::{Object, ObjectSection};
    let Ok(f) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Some(section) = f.section_by_name(".note.stapsdt") else {
        return Vec::new();
    };
    let Ok(notes) = section.data() else {
        return Vec::new();
    };
    parse_notes(notes)
}

fn u32_le(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_le(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// The notes of a section's bytes: `namesz`, `descsz`, `type`, the name
/// and the description, each padded to 4 bytes.
fn parse_notes(b: &[u8]) -> Vec<SdtProbe> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let (Some(namesz), Some(descsz), Some(kind)) =
        (u32_le(b, at), u32_le(b, at + 4), u32_le(b, at + 8))
    {
        let name_at = at + 12;
        let Some(desc_at) = align4(namesz as usize).and_then(|n| name_at.checked_add(n)) else {
            break;
        };
        let Some(end) = align4(descsz as usize).and_then(|n| desc_at.checked_add(n)) else {
            break;
        };
        let (Some(name), Some(desc)) = (
            b.get(name_at..name_at + namesz as usize),
            b.get(desc_at..desc_at + descsz as usize),
        ) else {
            break;
        };
        if kind == NT_STAPSDT && name == b"stapsdt\0" {
            if let Some(p) = probe(desc) {
                out.push(p);
            }
        }
        at = end;
    }
    out
}

/// A description: the probe's address, the base (`.stapsdt.base`'s
/// address at link time), the semaphore's address, then three strings.
fn probe(desc: &[u8]) -> Option<SdtProbe> {
    let addr = u64_le(desc, 0)?;
    let semaphore = u64_le(desc, 16)?;
    let mut strings = desc.get(24..)?.split(|&c| c == 0);
    let mut next = || {
        strings
            .next()
            .map(|s| String::from_utf8_lossy(s).into_owned())
    };
    Some(SdtProbe {
        provider: next()?,
        name: next()?,
        args: next().unwrap_or_default(),
        addr,
        semaphore,
    })
}

/// Whether an ELF file holds Go code (a section only the Go linker
/// writes): its probes are left alone, as Go's own signal handler must
/// see no int3 it does not know.
pub fn holds_go(data: &[u8]) -> bool {
    use object::read::elf::ElfFile64;
    use object::{Object, ObjectSection};
    let Ok(f) = ElfFile64::<object::Endianness>::parse(data) else {
        return false;
    };
    f.sections().any(|s| {
        s.name()
            .is_ok_and(|n| crate::golang::GO_SECTIONS.contains(&n))
    })
}

/// The library search paths an ELF file names (`DT_RUNPATH`, else
/// `DT_RPATH`), split at `:`, `$ORIGIN` left for the caller to replace.
pub fn run_paths(data: &[u8]) -> Vec<String> {
    use object::read::elf::ElfFile64;
    let Ok(f) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(table) = f.elf_section_table().dynamic_table(f.endian(), data) else {
        return Vec::new();
    };
    let of = |tag| -> Vec<String> {
        table
            .iter()
            .filter(|d| d.tag == tag)
            .filter_map(|d| table.string(d).ok())
            .flat_map(|s| {
                String::from_utf8_lossy(s)
                    .split(':')
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let run = of(object::elf::DT_RUNPATH);
    if run.is_empty() {
        of(object::elf::DT_RPATH)
    } else {
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(kind: u32, name: &[u8], desc: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend((name.len() as u32).to_le_bytes());
        b.extend((desc.len() as u32).to_le_bytes());
        b.extend(kind.to_le_bytes());
        b.extend(name);
        b.resize(align4(b.len()).unwrap(), 0);
        b.extend(desc);
        b.resize(align4(b.len()).unwrap(), 0);
        b
    }

    #[test]
    fn notes_are_read_and_bad_ones_end_the_list() {
        let mut desc = Vec::new();
        desc.extend(0x1139u64.to_le_bytes());
        desc.extend(0x2000u64.to_le_bytes());
        desc.extend(0u64.to_le_bytes());
        desc.extend(b"app\0step\0-4@%eax\0");
        let mut b = note(3, b"stapsdt\0", &desc);
        b.extend(note(1, b"GNU\0", &[0; 16]));
        b.extend(note(3, b"stapsdt\0", &desc[..20]));
        b.extend([1, 2, 3]);
        let p = parse_notes(&b);
        assert_eq!(
            p,
            [SdtProbe {
                provider: "app".into(),
                name: "step".into(),
                addr: 0x1139,
                semaphore: 0,
                args: "-4@%eax".into()
            }]
        );
        let mut huge = note(3, b"stapsdt\0", &desc);
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_notes(&huge).is_empty());
    }
}
