//! The process's memory map (/proc/self/maps), for the set-up and detach
//! paths that change code and GOT pages' protection.

/// One line of /proc/self/maps.
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub prot: i32,
    pub offset: u64,
    /// The file's device (`makedev(major, minor)`) and inode.
    pub dev: u64,
    pub inode: u64,
    /// The file, if a file's and not deleted.
    pub path: Option<String>,
}

/// The process's mappings, from /proc/self/maps.
pub fn mappings() -> Vec<Mapping> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?.as_bytes(), f.next()?);
            let (dev, inode) = (f.next()?, f.next()?);
            let (major, minor) = dev.split_once(':')?;
            let dev = libc::makedev(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            );
            let rest: Vec<&str> = f.collect();
            let path = (rest.len() == 1 && rest[0].starts_with('/')).then(|| rest[0].to_string());
            let (a, b) = range.split_once('-')?;
            let mut prot = 0;
            if perms.first() == Some(&b'r') {
                prot |= libc::PROT_READ;
            }
            if perms.get(1) == Some(&b'w') {
                prot |= libc::PROT_WRITE;
            }
            if perms.get(2) == Some(&b'x') {
                prot |= libc::PROT_EXEC;
            }
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                prot,
                offset: u64::from_str_radix(offset, 16).ok()?,
                dev,
                inode: inode.parse().ok()?,
                path,
            })
        })
        .collect()
}

/// The protection of the mapping that holds `addr`.
pub fn prot_of(addr: u64) -> Option<i32> {
    mappings()
        .into_iter()
        .find(|m| addr >= m.start && addr < m.end)
        .map(|m| m.prot)
}
