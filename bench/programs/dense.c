/*
 * dense.c: call-dense workloads for bench/run.
 *
 *   dense fib N      naive recursive fib(N): deep recursion, ~2*fib(N+1) calls
 *   dense leaf N     N calls of a 4-byte leaf function (lea 0x1(%rdi),%eax; ret)
 *   dense leaf8 N    N calls of an 8-byte leaf (uftrace -P . cannot patch `inc`)
 *   dense libc N     N rounds of strlen + memcpy (through the PLT) and a qsort
 *                    of 8 ints whose comparison callback lives in this program
 *
 * Built -O2 by bench/run. The functions are noinline/noclone so that GCC
 * keeps every call; bench/run checks the size of `inc` with objdump.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

NOINLINE int inc(int x) { return x + 1; }

/* 8 bytes (lea 0x3e8(%rdi,%rdi,2),%eax; ret): long enough for uftrace -P . */
NOINLINE int inc8(int x) { return x * 3 + 1000; }

NOINLINE long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

NOINLINE int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static char text[256];
static char copy[256];

NOINLINE long libc_round(unsigned seed, int len)
{
    int v[8];
    for (int i = 0; i < 8; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (int)(seed >> 16) & 1023;
    }
    text[len] = '\0';
    size_t n = strlen(text);
    memcpy(copy, text, n + 1);
    text[len] = 'x';
    qsort(v, 8, sizeof v[0], cmp_int);
    return (long)n + v[0] + copy[0];
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: dense fib|leaf|libc N\n");
        return 2;
    }
    long n = atol(argv[2]);
    long r = 0;
    if (!strcmp(argv[1], "fib")) {
        r = fib((int)n);
    } else if (!strcmp(argv[1], "leaf")) {
        int s = 0;
        for (long i = 0; i < n; i++)
            s = inc(s);
        r = s;
    } else if (!strcmp(argv[1], "leaf8")) {
        int s = 0;
        for (long i = 0; i < n; i++)
            s = inc8(s);
        r = s;
    } else if (!strcmp(argv[1], "libc")) {
        memset(text, 'x', sizeof text - 1);
        for (long i = 0; i < n; i++)
            r += libc_round((unsigned)i, (int)(16 + (i & 127)));
    } else {
        fprintf(stderr, "dense: unknown mode %s\n", argv[1]);
        return 2;
    }
    printf("%s %ld = %ld\n", argv[1], n, r);
    return 0;
}
