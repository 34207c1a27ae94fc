/*
 * depth.c: recursion N deep (default 1,000,000) on a thread with a 512 MiB
 * stack. down(n) calls down(n - 1) until n == 0: down is called N + 1
 * times, nested N + 1 deep under the thread's start routine.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOIPA __attribute__((noipa))

volatile long sink;

NOIPA long down(long n)
{
    if (n == 0)
        return 0;
    long r = down(n - 1);
    sink = r; /* keeps the recursive call a real call */
    return r + 1;
}

NOIPA void *deep(void *arg)
{
    long r = down((long)arg);
    sink = r;
    return (void *)r;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    pthread_attr_t attr;
    pthread_t t;
    void *r;
    pthread_attr_init(&attr);
    if (pthread_attr_setstacksize(&attr, (size_t)512 << 20) != 0)
        return 2;
    if (pthread_create(&t, &attr, deep, (void *)n) != 0)
        return 2;
    pthread_join(t, &r);
    printf("depth: %ld\n", (long)r);
    return 0;
}
