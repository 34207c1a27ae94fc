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
    /// `/f`, `/f32`, `/f64`: floating point (fpargN, or a retval in xmm0).
    Float(u8),
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
            "c" if bits.is_empty() => Format::Char,
            "s" if bits.is_empty() => Format::Str,
            "p" if bits.is_empty() => Format::Ptr,
            "f" => match bits {
                "" | "64" => Format::Float(8),
                "32" => Format::Float(4),
                _ => return Err(format!("`/{s}`: a float is 32 or 64 bits")),
            },
            _ => {
                return Err(format!(
                    "`/{s}` is not a format (i, u, x with an optional size 8..64, c, s, p, f)"
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub source: Source,
    pub format: Format,
}

/// Highest argument number accepted.
pub const MAX_INT_ARG: u8 = 16;
pub const MAX_FLOAT_ARG: u8 = 8;

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
        self.items.iter().any(|i| i.source == Source::Retval)
    }
}

/// `None` if `s` does not start like an item (so it may be a module).
fn parse_item(s: &str) -> Option<Result<Item, String>> {
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
    let format = match fmt {
        None => default,
        Some(f) => match Format::parse(f) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        },
    };
    if let (Source::Float(_), Format::Float(_) | Format::Auto) = (source, format) {
    } else if let Source::Float(_) = source {
        return Some(Err(format!(
            "`{s}`: a floating-point argument takes /f32 or /f64"
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
        for bad in [
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
