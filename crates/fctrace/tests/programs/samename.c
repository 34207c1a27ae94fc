/*
 * samename.c: two functions named helper(), one in the program, one in
 * libsamename.so (samename_lib.c). main calls the program's helper(1),
 * which calls the library's lib_entry(1), which calls the library's
 * helper(1) (11); the program's helper returns 11 + 100; main prints it.
 */
#include <stdio.h>

int lib_entry(int x);

__attribute__((noipa)) static int helper(int x) { return lib_entry(x) + 100; }

int main(void)
{
    printf("%d\n", helper(1));
    return 0;
}
