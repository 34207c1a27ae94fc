//! `-a` shows enumerators by name whatever their value: unsigned ones of
//! 0x8000 and above (0xffff, 0xffff0000, all 64 bits set), a signed enum's
//! negative value and its 0x8000, one-byte enums of either sign, as
//! arguments and as return values, at -O0 and -O2. DWARF's
//! `DW_FORM_data1/2/4/8` constants carry no sign: the enum's type gives it.

use fctrace_testkit::*;

/// What enums.c prints: the sum of the values its functions return.
fn expected_stdout() -> String {
    let wide = [0xffff_i64, 0xffff_0000, 1];
    let mixed = [-2_i64, 0x8000];
    let ubyte = [0x80_i64, 0xff];
    let sbyte = [-1_i64, 0x7f];
    let top = 0xff_i64;
    let picks = 0xffff + 0xffff_0000 + -2 + 0x8000;
    // The call with garbage above the enum's 4 bytes returns its 4 bytes.
    let garbage = 0xffff;
    let sum = wide.iter().sum::<i64>()
        + mixed.iter().sum::<i64>()
        + ubyte.iter().sum::<i64>()
        + sbyte.iter().sum::<i64>()
        + top
        + picks
        + garbage;
    format!("enums: {sum}\n")
}

#[test]
fn enumerators_by_name() {
    let printed = format!("  printf(\"enums: %ld\\n\") = {};", expected_stdout().len());
    let expected = [
        "main() {",
        "  show_wide(W_FFFF) = 65535;",
        "  show_wide(W_HIGH) = 4294901760;",
        "  show_wide(W_ONE) = 1;",
        "  show_mixed(M_MINUS) = -2;",
        "  show_mixed(M_8000) = 32768;",
        "  show_ubyte(UB_80) = 128;",
        "  show_ubyte(UB_FF) = 255;",
        "  show_sbyte(SB_MINUS) = -1;",
        "  show_sbyte(SB_7F) = 127;",
        "  show_top(T_ALL) = 255;",
        "  pick_wide(0) = W_FFFF;",
        "  pick_wide(1) = W_HIGH;",
        "  pick_mixed(0) = M_MINUS;",
        "  pick_mixed(1) = M_8000;",
        "  show_wide(W_FFFF) = 65535;",
        &printed,
        "} = 0; /* main */",
    ];
    for opt in ["-O0", "-O2"] {
        let exe = c_program("enums.c", &format!("-g{opt}"), &["-g", opt, "-fno-builtin"]);
        let native = run_native(&exe, &[]);
        assert_eq!(native.stdout, expected_stdout(), "{opt}");
        let rec = record(&exe, &[], &["-a", "-F", "main"]);
        assert_same_behaviour(&native, &rec.run, opt);
        let text = replay_text(&rec.dir.path);
        assert_eq!(call_lines(&text), expected, "{opt}\n{text}");
    }
}
