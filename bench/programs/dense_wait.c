/*
 * dense_wait.c: dense.c's workloads, started by a line on stdin and timed
 * by the program itself, for bench/run's `attach` case:
 *
 *   dense_wait leaf N    prints "ready", waits for a line on stdin (fctrace
 *                        attaches meanwhile), runs dense.c's `leaf N` and
 *                        prints "loop wall_ns W cpu_ns C": the workload's
 *                        wall-clock time (CLOCK_MONOTONIC) and its thread's
 *                        CPU time (CLOCK_THREAD_CPUTIME_ID)
 *
 * dense.c is included unchanged (its main renamed), so the workloads are
 * the same code as the other cases'; bench/run checks that `inc` is still
 * 4 bytes. Built -O2 by bench/run.
 */
#include <stdio.h>
#include <time.h>

#define main dense_main
#include "dense.c"
#undef main

static double now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    char line[64];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 3;
    double w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    int rc = dense_main(argc, argv);
    double w1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("loop wall_ns %.0f cpu_ns %.0f\n", w1 - w0, c1 - c0);
    return rc;
}
