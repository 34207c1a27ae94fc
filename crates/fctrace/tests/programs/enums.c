/*
 * enums.c: enumerators whose values need their enum's signedness to be
 * read from the debug information: unsigned ones of 0x8000 and above
 * (0xffff, 0xffff0000, 0xffffffffffffffff), a signed enum with a negative
 * value and one of 0x8000, and one-byte (packed) enums of either sign.
 * Each show_* function returns its argument as an int; pick_* return an
 * enumerator. main prints the sum of what they return.
 */
#include <stdio.h>

#define NOIPA __attribute__((noipa))

enum wide { W_ONE = 1, W_FFFF = 0xffff, W_HIGH = 0xffff0000u };
enum mixed { M_MINUS = -2, M_ZERO = 0, M_8000 = 0x8000 };
enum __attribute__((packed)) ubyte { UB_80 = 0x80, UB_FF = 0xff };
enum __attribute__((packed)) sbyte { SB_MINUS = -1, SB_7F = 0x7f };
enum top { T_ALL = 0xffffffffffffffffull };

NOIPA long show_wide(enum wide w) { return (long)w; }
NOIPA long show_mixed(enum mixed m) { return (long)m; }
NOIPA long show_ubyte(enum ubyte b) { return (long)b; }
NOIPA long show_sbyte(enum sbyte b) { return (long)b; }
NOIPA long show_top(enum top t) { return (long)(t & 0xff); }
NOIPA enum wide pick_wide(int i) { return i ? W_HIGH : W_FFFF; }
NOIPA enum mixed pick_mixed(int i) { return i ? M_8000 : M_MINUS; }

int main(void)
{
    long sum = 0;
    sum += show_wide(W_FFFF);
    sum += show_wide(W_HIGH);
    sum += show_wide(W_ONE);
    sum += show_mixed(M_MINUS);
    sum += show_mixed(M_8000);
    sum += show_ubyte(UB_80);
    sum += show_ubyte(UB_FF);
    sum += show_sbyte(SB_MINUS);
    sum += show_sbyte(SB_7F);
    sum += show_top(T_ALL);
    sum += pick_wide(0) + pick_wide(1);
    sum += pick_mixed(0) + pick_mixed(1);
    /* An unsigned 4-byte enum in a register whose upper half is not
     * zero: only its low 4 bytes are the value. */
    sum += ((long (*)(unsigned long))show_wide)(0xdeadbeef0000ffffUL);
    printf("enums: %ld\n", sum);
    return 0;
}
