/*
 * endurance.c: THREADS threads (default 2) call a 4-byte leaf function as
 * fast as they can for SECONDS seconds each, to see whether fctrace's
 * recorder keeps up (lost events) and whether its memory stays bounded.
 *
 *   endurance SECONDS [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

NOINLINE int leaf(int x) { return x + 1; }

static double seconds;
static volatile int sink; /* keeps the calls' results alive */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 4096 leaf calls per round: the clock is read once per round. */
NOINLINE int round_of_calls(int s)
{
    for (int i = 0; i < 4096; i++)
        s = leaf(s);
    return s;
}

static void *worker(void *arg)
{
    long *calls = arg;
    double end = now() + seconds;
    int s = 0;
    long rounds = 0;
    while (now() < end) {
        s = round_of_calls(s);
        rounds++;
    }
    sink = s;
    *calls = rounds * 4097; /* leaf calls + round_of_calls calls */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: endurance SECONDS [THREADS]\n");
        return 2;
    }
    seconds = atof(argv[1]);
    int nthreads = argc > 2 ? atoi(argv[2]) : 2;
    pthread_t t[64];
    long calls[64] = {0};
    if (nthreads < 1 || nthreads > 64)
        return 2;
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, worker, &calls[i]);
    long total = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        total += calls[i];
    }
    /* Read by bench/run: the calls made by the workers' loops. */
    printf("calls %ld\n", total);
    return 0;
}
