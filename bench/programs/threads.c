/* Threads beyond cores, and the recorder's failures (bench/run `threads`
 * and `loss`).
 *
 *   threads T CALLS          T threads share CALLS calls of a small leaf
 *   threads T CALLS pause    the same after printing "ready <pid>" and
 *                            reading a line from stdin (bench/run kills
 *                            fctrace in between)
 *
 * Prints the number of calls made and the sum of the leaf's results.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long per_thread;

__attribute__((noinline)) long leaf(long i) {
    __asm__ volatile("");
    return i & 3;
}

static void *run(void *arg) {
    long s = 0;
    for (long i = 0; i < per_thread; i++)
        s += leaf(i);
    *(long *)arg = s;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: threads T CALLS [pause]\n");
        return 2;
    }
    int n = atoi(argv[1]);
    long total = atol(argv[2]);
    if (n < 1)
        return 2;
    per_thread = total / n;
    if (argc > 3 && !strcmp(argv[3], "pause")) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 3;
    }
    pthread_t *t = calloc(n, sizeof *t);
    long *r = calloc(n, sizeof *r);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, run, &r[i]) != 0)
            return 4;
    long s = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        s += r[i];
    }
    printf("calls %ld sum %ld\n", per_thread * n, s);
    return 0;
}
