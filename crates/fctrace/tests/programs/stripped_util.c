/* stripped_*.c: the cold functions and the parsers, whose unlikely paths
 * (calls to cold functions) GCC splits into `.cold` parts, one of them
 * (digit's) in a function that keeps no frame. */
#include <stdio.h>
#include <stdlib.h>
#include "stripped.h"

void die(const char *what) {
    fprintf(stderr, "fatal: %s\n", what);
    exit(9);
}

void warn_cold(const char *what, long v) {
    fprintf(stderr, "warning: %s %ld\n", what, v);
}

/* No frame in the hot part: its cold part starts as an entry would. */
static __attribute__((noinline)) int digit(int c) {
    if (c < '0' || c > '9')
        die("not a digit");
    return c - '0';
}

/* A frame (callee-saved registers) set up before the cold branch. */
long parse_number(const char *s) {
    long n = 0;
    int k = 0;
    for (; *s; s++, k++) {
        n = n * 10 + digit(*s);
        if (n > 1000000000L)
            die("overflow");
    }
    return n + k;
}

/* A cold part that returns to the hot part. */
long sum_checked(const long *a, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] == 12345) {
            warn_cold("odd value", a[i]);
            s -= 7;
        }
        s += a[i];
    }
    return s;
}

int classify(int x, int y) {
    if (x < 0) {
        warn_cold("x < 0", x);
        return -1;
    }
    if (y < 0)
        die("y < 0");
    if (x > 1000) {
        warn_cold("x > 1000", x);
        x = 1000;
    }
    return x * y + (x ^ y);
}
