//! Sanitizer reports with their addresses and ids normalised.

/// A report with its run-dependent numbers replaced: hexadecimal
/// addresses, `==PID==`, `(pid=N)`, `tid=N`.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if let Some(hex) = rest.strip_prefix("0x") {
            let n = hex.bytes().take_while(|c| c.is_ascii_hexdigit()).count();
            out.push_str("ADDR");
            i += 2 + n;
            continue;
        }
        let number_after = ["==", "pid=", "tid="].into_iter().find(|p| {
            rest.starts_with(p) && rest[p.len()..].starts_with(|c: char| c.is_ascii_digit())
        });
        if let Some(p) = number_after {
            let n = rest[p.len()..]
                .bytes()
                .take_while(|c| c.is_ascii_digit())
                .count();
            out.push_str(p);
            out.push('N');
            i += p.len() + n;
            continue;
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The frame lines of a report (`#N ... in function file:line`) and its
/// headlines, normalised.
pub fn frames(text: &str) -> Vec<String> {
    normalise(text)
        .lines()
        .filter(|l| {
            l.trim_start().starts_with('#')
                || l.contains("ERROR:")
                || l.contains("SUMMARY:")
                || l.contains(" by thread ")
                || l.contains("created by")
        })
        .map(str::to_string)
        .collect()
}
