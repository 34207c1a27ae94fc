/*
 * threads.c: 100 threads, each with a number of calls known by
 * construction. Thread i (0..99) calls work() i + 1 times; every work()
 * calls leaf() twice. So: thread_main 100 calls, work 5050, leaf 10100,
 * and 101 tasks (the main thread and the 100 it creates).
 * All threads are created before any is joined; the order in which they
 * run does not change any count.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NTHREADS 100

__attribute__((noipa)) unsigned leaf(unsigned x) { return x * 2654435761u; }

__attribute__((noipa)) unsigned work(unsigned x) { return leaf(x) ^ leaf(x + 1); }

__attribute__((noipa)) void *thread_main(void *arg)
{
    unsigned long n = (unsigned long)arg + 1; /* thread i works i + 1 times */
    unsigned acc = 0;
    for (unsigned long k = 0; k < n; k++)
        acc += work((unsigned)k);
    return (void *)(unsigned long)acc;
}

int main(void)
{
    pthread_t tids[NTHREADS];
    for (unsigned long i = 0; i < NTHREADS; i++)
        if (pthread_create(&tids[i], NULL, thread_main, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    unsigned long total = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *ret;
        if (pthread_join(tids[i], &ret) != 0) {
            perror("pthread_join");
            return 1;
        }
        total += (unsigned long)ret;
    }
    printf("threads: %d joined, total=%lu\n", NTHREADS, total);
    return 0;
}
