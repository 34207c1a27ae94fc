/* stripped_names.c: a program traced after `strip --strip-all`, its
 * functions named at read time from the separate debug file
 * (tests/analysis/stripped_names.rs). Each function is called a known
 * number of times; static and global ones, no .cold parts. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, noclone)) static int square(int x) { return x * x + (x & 1); }

__attribute__((noinline, noclone)) int sum_squares(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += square(i);
    return s;
}

__attribute__((noinline, noclone)) static long fold(const char *s) {
    long h = 7;
    while (*s)
        h = h * 31 + *s++;
    return h;
}

__attribute__((noinline, noclone)) int twice_sum(int n) { return sum_squares(n) + sum_squares(n / 2); }

int main(int argc, char **argv) {
    (void)argv;
    long total = 0;
    for (int i = 0; i < 5; i++)
        total += twice_sum(argc + i) + fold("stripped");
    printf("%ld\n", total);
    return 0;
}
