/*
 * dense.c: a call-dense program (about 2.4 million calls) for comparing
 * fctrace's per-function call counts with callgrind's, at -O0 and -O2:
 * deep recursion, tiny leaf functions, calls through function pointers,
 * a qsort comparator called back from libc, and calls into libc.
 *
 * Everything is deterministic: the input of qsort comes from a fixed
 * linear congruential generator, never from time or addresses.
 * Known counts (at -O0, where gcc keeps every call as written):
 *   fib        2 * F(FIB_N + 1) - 1 = 392835 for FIB_N = 26
 *   add1, mul3, xor5   LOOPS / 3 each (through the function-pointer table)
 *   square     LOOPS
 *   apply      LOOPS
 *   cmp_int    whatever glibc's qsort needs (only callgrind knows)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIB_N 26
#define LOOPS 600000
#define SORT_N 40000
#define STR_N 20000

typedef unsigned (*op_fn)(unsigned);

__attribute__((noipa)) unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noipa)) unsigned add1(unsigned x) { return x + 1; }
__attribute__((noipa)) unsigned mul3(unsigned x) { return x * 3; }
__attribute__((noipa)) unsigned xor5(unsigned x) { return x ^ 5; }
__attribute__((noipa)) unsigned square(unsigned x) { return x * x; }

static const op_fn ops[3] = {add1, mul3, xor5};

__attribute__((noipa)) unsigned apply(op_fn f, unsigned x) { return f(x) + square(x); }

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static unsigned lcg_state = 12345;
static unsigned lcg(void)
{
    lcg_state = lcg_state * 1103515245u + 12345u;
    return lcg_state >> 8;
}

/* static and small: inlined at -O2, a real call at -O0 */
static unsigned mix(unsigned h, unsigned v) { return (h ^ v) * 16777619u; }

__attribute__((noipa)) unsigned strings(void)
{
    char buf[64];
    unsigned h = 2166136261u;
    for (int i = 0; i < STR_N; i++) {
        snprintf(buf, sizeof buf, "%d-%u", i, (unsigned)i * 7919u);
        h = mix(h, (unsigned)strlen(buf));
        h = mix(h, (unsigned)strtoul(buf, NULL, 10));
    }
    return h;
}

int main(void)
{
    unsigned acc = fib(FIB_N);

    for (unsigned i = 0; i < LOOPS; i++)
        acc = mix(acc, apply(ops[i % 3], i));

    int *v = malloc(SORT_N * sizeof *v);
    if (!v)
        return 1;
    for (int i = 0; i < SORT_N; i++)
        v[i] = (int)(lcg() % 100000);
    qsort(v, SORT_N, sizeof *v, cmp_int);
    for (int i = 1; i < SORT_N; i++)
        if (v[i - 1] > v[i])
            return 2;
    acc = mix(acc, (unsigned)v[SORT_N / 2]);
    free(v);

    acc = mix(acc, strings());
    printf("dense: fib(%d) ok, acc=%u\n", FIB_N, acc);
    return 0;
}
