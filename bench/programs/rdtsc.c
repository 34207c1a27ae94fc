/*
 * rdtsc.c: the cost of one rdtsc (and of rdtscp) on this machine, for
 * docs/performance.md: a loop of 10 M back-to-back reads, timed with
 * the thread's CPU clock (not wall time: other load does not count). Prints
 * ns per read.
 */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    const long n = 10000000;
    uint64_t sink = 0;
    unsigned aux;
    double best_tsc = 1e9, best_tscp = 1e9, best_empty = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            sink += __rdtsc();
        double t1 = now();
        for (long i = 0; i < n; i++)
            sink += __rdtscp(&aux);
        double t2 = now();
        for (long i = 0; i < n; i++) {
            sink += i;
            __asm__ volatile("" : "+r"(sink));
        }
        double t3 = now();
        if (t1 - t0 < best_tsc) best_tsc = t1 - t0;
        if (t2 - t1 < best_tscp) best_tscp = t2 - t1;
        if (t3 - t2 < best_empty) best_empty = t3 - t2;
    }
    printf("rdtsc %.2f ns, rdtscp %.2f ns, empty loop %.2f ns per iteration (best of 5 x %ld)%s\n",
           best_tsc / n * 1e9, best_tscp / n * 1e9, best_empty / n * 1e9, n, sink == 42 ? "!" : "");
    return 0;
}
