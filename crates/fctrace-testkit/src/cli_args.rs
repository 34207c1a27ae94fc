//! cli_args.c, the small program that prints its arguments (the
//! command-line, script and nesting tests run it).

use crate::programs::c_program;

use std::path::PathBuf;

/// cli_args.c at -O0: prints its arguments, then `top: T`; top calls mid,
/// mid calls leaf; exits with 3 when given arguments.
pub fn cli_args_program() -> PathBuf {
    c_program("cli_args.c", "-O0", &["-O0"])
}

/// What cli_args.c prints for `args` (its argv[1..]): each argument on a
/// line, then `top: T` with top(argc) = 2 * (argc + 1) + 1.
pub fn cli_args_output(args: &[&str]) -> String {
    let argc = args.len() as i64 + 1;
    let mut s: String = args.iter().map(|a| format!("{a}\n")).collect();
    s.push_str(&format!("top: {}\n", 2 * (argc + 1) + 1));
    s
}
