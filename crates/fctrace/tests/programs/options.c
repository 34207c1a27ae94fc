/*
 * options.c: calls of very different lengths, for the options that act on
 * a recorded trace (-t, -C). main calls quick() three times (a few
 * nanoseconds each), then slow() once, which sleeps 30 ms (a duration to
 * filter on, not a synchronisation), then prints the sum.
 */
#include <stdio.h>
#include <time.h>

/* Long enough to be patched (a volatile keeps it so at any -O). */
__attribute__((noipa)) int quick(int x)
{
    volatile int v = x;
    return v + 1;
}

__attribute__((noipa)) void slow(void)
{
    struct timespec t = {0, 30 * 1000 * 1000};
    nanosleep(&t, 0);
}

int main(void)
{
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += quick(i);
    slow();
    printf("sum %d\n", s);
    return 0;
}
