/* The program of the tests of uftrace's reader options (replay, report,
 * graph, info, live --report): a known call structure in two threads.
 *
 *   main:   a() twice, around a worker thread that calls a() once
 *   a():    b(), then leaf(3)
 *   b():    c()
 *   c():    leaf(1), leaf(2)
 *
 * So a, b and c are called 3 times, leaf 9 times (3 from a, 6 from c),
 * worker once, main once. Each thread prints its tid first, so the tests
 * know which lines are whose. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile int sink;

__attribute__((noinline)) void leaf(int i) { sink += i; }
__attribute__((noinline)) void c(void) { leaf(1); leaf(2); }
__attribute__((noinline)) void b(void) { c(); }
__attribute__((noinline)) void a(void) { b(); leaf(3); }

void *worker(void *arg) {
    (void)arg;
    printf("worker %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    a();
    return NULL;
}

int main(void) {
    pthread_t t;
    printf("main %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    a();
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    a();
    return 0;
}
