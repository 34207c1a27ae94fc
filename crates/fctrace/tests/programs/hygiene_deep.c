/* A recursion 200,000 calls deep, in main and in a thread (each on a
 * 256 MiB stack): far deeper than a shadow stack's first mapping. Each
 * level calls leaf() once, on the way back. */
#include <pthread.h>
#include <stdio.h>

#define DEPTH 200000

static volatile long sink;

__attribute__((noinline)) static void leaf(long x) { sink += x; }

__attribute__((noinline)) static long down(long n) {
    long r = n == 0 ? 0 : down(n - 1) + 1;
    leaf(r);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) static void *deep(void *arg) {
    (void)arg;
    return (void *)down(DEPTH - 1);
}

int main(void) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256u << 20);
    pthread_t t;
    if (pthread_create(&t, &attr, deep, NULL) != 0)
        return 1;
    void *r;
    pthread_join(t, &r);
    long m = (long)deep(NULL);
    printf("%ld %ld\n", (long)r, m);
    return 0;
}
