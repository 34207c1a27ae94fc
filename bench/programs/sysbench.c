/* sysbench.c: `sysbench sys N` makes N calls of `one`, each making one
 * system call (getppid); `sysbench leaf N` makes N calls of the 4-byte
 * leaf `inc`, no system call. For bench/run's `kernel` case: the cost of
 * -k per system call, and per call of a function without one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long one(void) { return getppid(); }
__attribute__((noinline)) long inc(long x) { return x + 1; }

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long n = atol(argv[2]);
    long s = 0;
    if (!strcmp(argv[1], "sys")) {
        for (long i = 0; i < n; i++)
            s += one();
    } else {
        for (long i = 0; i < n; i++)
            s = inc(s);
    }
    sink = s;
    return 0;
}
