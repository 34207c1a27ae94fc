//! Argument and return value specs: `-A FUNC@arg1,arg2/s,fparg1` and
//! `-R FUNC@retval/x` (uftrace's syntax).

use crate::pattern::FuncPattern;

/// How a value is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Signed decimal when it looks like a number, hex when it looks like
    /// an address (the default of `argN` and `retval`).
    Auto,
    /// `/i`, `/i8`..`/i64`: signed decimal of that many bytes.
    Signed(u8),
    /// `/u`, `/u8`..`/u64`: unsigned decimal.
    Unsigned(u8),
    /// `/x`, `/x8`..`/x64`: hexadecimal.
    Hex(u8),
    /// `/c`: a character.
    Char,
    /// `/s`: a NUL-terminated string read through the pointer.
    Str,
    /// `/p`: a pointer (hexadecimal address).
    Ptr,
    /// `/f`, `/f32`, `/f64`: floating point (fpargN, or a retval in xmm0);
    /// `fpargN/80%stack+M`: an x87 `long double` (10 bytes, on the stack).
    Float(u8),
    /// `/o`, `/o8`..`/o64`: octal (uftrace's, shown with a leading 0).
    Oct(u8),
    /// `/S`: a libstdc++ `std::string` (the argument is its address, as
    /// for a `const std::string &` or a `std::string` passed by value).
    StdString,
}

impl Format {
    /// Parses what follows the `/` of a spec item.
    pub fn parse(s: &str) -> Result<Format, String> {
        let (letter, bits) = s.split_at(s.len().min(1));
        let size = |default: u8| -> Result<u8, String> {
            match bits {
                "" => Ok(default),
                "8" => Ok(1),
                "16" => Ok(2),
                "32" => Ok(4),
                "64" => Ok(8),
                _ => Err(format!("`/{s}`: the size must be 8, 16, 32 or 64 bits")),
            }
        };
        Ok(match letter {
            "i" | "d" => Format::Signed(size(8)?),
            "u" => Format::Unsigned(size(8)?),
            "x" => Format::Hex(size(8)?),
            "o" => Format::Oct(size(8)?),
            "S" if bits.is_empty() => Format::StdString,
            "c" if bits.is_empty() => Format::Char,
            "s" if bits.is_empty() => Format::Str,
            "p" if bits.is_empty() => Format::Ptr,
            "f" => match bits {
                "" | "64" => Format::Float(8),
                "32" => Format::Float(4),
                "80" => Format::Float(10),
                _ => return Err(format!("`/{s}`: a float is 32 or 64 bits")),
            },
            _ => {
                return Err(format!(
                    "`/{s}` is not a format (d, i, u, x, o with an optional size 8..64, c, s, \
                     S, p, f)"
                ))
            }
        })
    }
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The N-th integer argument (1-based): rdi, rsi, rdx, rcx, r8, r9,
    /// then the stack.
    Int(u8),
    /// The N-th floating-point argument (1-based): xmm0..xmm7.
    Float(u8),
    /// The return value (rax, or xmm0 for a float format).
    Retval,
    /// `%stack+N` with a floating-point format: the N-th 8-byte slot
    /// above the return address.
    Stack(u8),
    /// `-A FUNC` without a spec: every argument, typed by the debug
    /// information or the C library prototypes (as `-a`, for FUNC only).
    AutoArgs,
    /// `-R FUNC` without a spec: the return value, typed likewise.
    AutoRetval,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub source: Source,
    pub format: Format,
}

/// Highest argument number accepted (`arg16`, or `%stack+10`: the
/// registers' six and ten 8-byte stack slots).
pub const MAX_INT_ARG: u8 = 16;
/// fparg1 to fparg8: the xmm registers (a later one is on the stack:
/// `fpargN%stack+M`).
pub const MAX_FLOAT_ARG: u8 = 8;
/// Highest `%stack+N` of a floating-point value.
pub const MAX_STACK_SLOT: u8 = 32;

/// One `-A` or `-R` spec.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgSpec {
    /// As the user wrote it.
    pub source: String,
    pub pattern: FuncPattern,
    pub items: Vec<Item>,
}

impl ArgSpec {
    /// Parses `FUNC@[MODULE,]ITEM[,ITEM...]`, where ITEM is `argN[/FMT]`,
    /// `fpargN[/f32|/f64]` or `retval[/FMT]`.
    pub fn parse(spec: &str) -> Result<ArgSpec, String> {
        let (func, rest) = spec.split_once('@').ok_or_else(|| {
            format!("`{spec}`: expected FUNC@arg1,arg2/s,fparg1,... or FUNC@retval[/FMT]")
        })?;
        let mut module = None;
        let mut items = Vec::new();
        for (i, raw) in rest.split(',').enumerate() {
            let raw = raw.trim();
            match parse_item(raw) {
                Some(item) => items.push(item.map_err(|e| format!("`{spec}`: {e}"))?),
                None if i == 0 && !raw.is_empty() => {
                    if let Some(what) = crate::action::action_word(raw) {
                        return Err(format!(
                            "`{spec}`: `{raw}` is {what}, not a module or an argument \
                             (argN[/FMT], fpargN, retval[/FMT]); for an action use -T '{func}@{raw}'"
                        ));
                    }
                    module = Some(raw)
                }
                None => {
                    return Err(format!(
                        "`{spec}`: `{raw}` is not argN[/FMT], fpargN or retval[/FMT]"
                    ))
                }
            }
        }
        if items.is_empty() {
            return Err(format!("`{spec}` names no argument or return value"));
        }
        let pattern =
            FuncPattern::with_module(func, module).map_err(|e| format!("`{spec}`: {e}"))?;
        Ok(ArgSpec {
            source: spec.to_string(),
            pattern,
            items,
        })
    }

    /// Whether it asks for the return value.
    pub fn has_retval(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.source, Source::Retval | Source::AutoRetval))
    }

    /// `-A SPEC` (`retval`: false) or `-R SPEC` as uftrace reads them: a
    /// FUNC without `@` (or with a module only) records every argument
    /// (the return value), typed from the debug information.
    pub fn parse_option(spec: &str, retval: bool) -> Result<ArgSpec, String> {
        let word = if retval { "auto-retval" } else { "auto-args" };
        match spec.split_once('@') {
            None => ArgSpec::parse(&format!("{spec}@{word}")),
            Some((f, rest))
                if !rest.contains(',')
                    && parse_item(rest.trim()).is_none()
                    && crate::action::action_word(rest.trim()).is_none() =>
            {
                ArgSpec::parse(&format!("{f}@{rest},{word}"))
            }
            _ => ArgSpec::parse(spec),
        }
    }
}

/// `None` if `s` does not start like an item (so it may be a module).
fn parse_item(s: &str) -> Option<Result<Item, String>> {
    match s {
        "auto-args" | "auto-retval" => {
            return Some(Ok(Item {
                source: if s == "auto-args" {
                    Source::AutoArgs
                } else {
                    Source::AutoRetval
                },
                format: Format::Auto,
            }))
        }
        _ => {}
    }
    let (s, loc) = match s.split_once('%') {
        Some((h, l)) => (h, Some(l)),
        None => (s, None),
    };
    let item = parse_plain_item(s)?;
    Some(item.and_then(|i| match loc {
        Some(l) => located(i, l).map_err(|e| format!("`{s}%{l}`: {e}")),
        None if i.format == Format::Float(10) => Err(format!(
            "`{s}`: a long double is passed on the stack: say where, `{s}%stack+N`"
        )),
        None => Ok(i),
    }))
}

/// The integer argument registers in order.
const INT_REGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];

/// `item` read from location `loc` (`rdi`..`r9`, `xmm0`..`xmm7`,
/// `stack+N`) instead of its position.
fn located(item: Item, loc: &str) -> Result<Item, String> {
    let float = matches!(item.format, Format::Float(_));
    let source = if let Some(i) = INT_REGS.iter().position(|r| *r == loc) {
        if float || !matches!(item.source, Source::Int(_)) {
            return Err(format!("%{loc} holds an integer argument (argN)"));
        }
        Source::Int(i as u8 + 1)
    } else if let Some(n) = loc.strip_prefix("xmm") {
        let n: u8 = n.parse().map_err(|_| format!("unknown register %{loc}"))?;
        if n >= MAX_FLOAT_ARG || !matches!(item.source, Source::Float(_)) {
            return Err("%xmm0 to %xmm7 hold floating-point arguments (fpargN)".to_string());
        }
        if item.format == Format::Float(10) {
            return Err("a long double is passed on the stack".to_string());
        }
        Source::Float(n + 1)
    } else if let Some(n) = loc.strip_prefix("stack") {
        let n: u8 = n
            .trim_start_matches('+')
            .parse()
            .map_err(|_| format!("`%{loc}`: expected %stack+N"))?;
        if float {
            if n == 0 || n > MAX_STACK_SLOT {
                return Err(format!(
                    "the stack slots are %stack+1 to %stack+{MAX_STACK_SLOT}"
                ));
            }
            Source::Stack(n)
        } else {
            if n == 0 || n > MAX_INT_ARG - 6 || item.source == Source::Retval {
                return Err(format!(
                    "an argument's stack slots are %stack+1 to %stack+{}",
                    MAX_INT_ARG - 6
                ));
            }
            Source::Int(6 + n)
        }
    } else {
        return Err(format!(
            "unknown location %{loc} (rdi, rsi, rdx, rcx, r8, r9, xmm0..xmm7, stack+N)"
        ));
    };
    if item.source == Source::Retval {
        return Err("a return value has no location".to_string());
    }
    Ok(Item { source, ..item })
}

/// An item without its location.
fn parse_plain_item(s: &str) -> Option<Result<Item, String>> {
    let (name, fmt) = match s.split_once('/') {
        Some((n, f)) => (n, Some(f)),
        None => (s, None),
    };
    let (source, default) = if name == "retval" {
        (Source::Retval, Format::Auto)
    } else if let Some(n) = name.strip_prefix("fparg") {
        let n = n.parse::<u8>().ok()?;
        if n == 0 || n > MAX_FLOAT_ARG {
            return Some(Err(format!(
                "`{s}`: floating-point arguments are fparg1 to fparg{MAX_FLOAT_ARG}"
            )));
        }
        (Source::Float(n), Format::Float(8))
    } else if let Some(n) = name.strip_prefix("arg") {
        let n = n.parse::<u8>().ok()?;
        if n == 0 || n > MAX_INT_ARG {
            return Some(Err(format!(
                "`{s}`: arguments are arg1 to arg{MAX_INT_ARG}"
            )));
        }
        (Source::Int(n), Format::Auto)
    } else {
        return None;
    };
    let format = match (fmt, source) {
        (None, _) => default,
        // uftrace's fpargN/32, /64, /80: the size alone.
        (Some("32"), Source::Float(_)) => Format::Float(4),
        (Some("64"), Source::Float(_)) => Format::Float(8),
        (Some("80"), Source::Float(_)) => Format::Float(10),
        (Some(f), _) => match Format::parse(f) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        },
    };
    if let (Source::Float(_), Format::Float(_) | Format::Auto) = (source, format) {
    } else if let Source::Float(_) = source {
        return Some(Err(format!(
            "`{s}`: a floating-point argument takes /32, /64 (/f32, /f64) or /80"
        )));
    }
    if let (Source::Retval, Format::Float(10) | Format::StdString) = (source, format) {
        return Some(Err(format!(
            "`{s}`: fctrace does not read this return value (a long double is returned in \
             st0, a std::string through memory the caller gave)"
        )));
    }
    if let (Source::Int(_), Format::Float(_)) = (source, format) {
        return Some(Err(format!(
            "`{s}`: a floating-point argument is fpargN (it is passed in an xmm register)"
        )));
    }
    Some(Ok(Item { source, format }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let a = ArgSpec::parse("add@arg1,arg2/x,arg3/s,fparg1,arg4/u32,arg5/c").unwrap();
        assert_eq!(
            a.items,
            vec![
                Item {
                    source: Source::Int(1),
                    format: Format::Auto
                },
                Item {
                    source: Source::Int(2),
                    format: Format::Hex(8)
                },
                Item {
                    source: Source::Int(3),
                    format: Format::Str
                },
                Item {
                    source: Source::Float(1),
                    format: Format::Float(8)
                },
                Item {
                    source: Source::Int(4),
                    format: Format::Unsigned(4)
                },
                Item {
                    source: Source::Int(5),
                    format: Format::Char
                },
            ]
        );
        assert!(!a.has_retval());
        let r = ArgSpec::parse("greet@retval/s").unwrap();
        assert_eq!(
            r.items,
            vec![Item {
                source: Source::Retval,
                format: Format::Str
            }]
        );
        let m = ArgSpec::parse("strlen@libc,arg1/s").unwrap();
        assert_eq!(m.pattern.module(), Some("libc"));
        assert_eq!(
            ArgSpec::parse("f@arg1/i8").unwrap().items[0].format,
            Format::Signed(1)
        );
        assert_eq!(
            ArgSpec::parse("f@fparg2/f32").unwrap().items[0],
            Item {
                source: Source::Float(2),
                format: Format::Float(4)
            }
        );
        let items = |s: &str| ArgSpec::parse(s).unwrap().items;
        let it = |source, format| Item { source, format };
        assert_eq!(
            items("f@fparg1/32,fparg2/64,fparg3/80%stack+2"),
            vec![
                it(Source::Float(1), Format::Float(4)),
                it(Source::Float(2), Format::Float(8)),
                it(Source::Stack(2), Format::Float(10)),
            ]
        );
        assert_eq!(
            items("f@arg1%rsi,arg2/x%r9,fparg1%xmm3,arg3/u32%stack+1,arg4/o,arg5/S"),
            vec![
                it(Source::Int(2), Format::Auto),
                it(Source::Int(6), Format::Hex(8)),
                it(Source::Float(4), Format::Float(8)),
                it(Source::Int(7), Format::Unsigned(4)),
                it(Source::Int(4), Format::Oct(8)),
                it(Source::Int(5), Format::StdString),
            ]
        );
        assert_eq!(
            ArgSpec::parse_option("f", false).unwrap().items,
            vec![it(Source::AutoArgs, Format::Auto)]
        );
        let r = ArgSpec::parse_option("^str@libc", true).unwrap();
        assert_eq!(r.items, vec![it(Source::AutoRetval, Format::Auto)]);
        assert_eq!(r.pattern.module(), Some("libc"));
        assert!(r.has_retval());
        assert_eq!(
            ArgSpec::parse_option("f@arg2", false).unwrap().items,
            vec![it(Source::Int(2), Format::Auto)]
        );
        for bad in [
            "f@fparg1/80",
            "f@fparg1/80%xmm0",
            "f@arg1%xmm0",
            "f@fparg1%rdi",
            "f@arg1%stack+11",
            "f@arg1%stack+0",
            "f@arg1%rbx",
            "f@retval%rax",
            "f@retval/f80",
            "f@arg1/S8",
            "f",
            "f@",
            "f@arg0",
            "f@arg1/q",
            "f@arg1/i12",
            "f@x,y",
            "f@arg1/f",
            "f@fparg1/s",
            "f@fparg9",
            "f@depth=1,arg1",
            "f@trace_on,retval",
        ] {
            assert!(ArgSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
