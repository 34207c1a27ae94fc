/*
 * tui.c: a program whose call graph tests/analysis/tui.rs checks in `fctrace tui`.
 * Its counts follow from the source:
 *   main -> parse_config (1) -> read_token (7)
 *   main -> compute (3) -> helper_square (5 each: 15)
 *   main -> helper_square (2): 17 calls of helper_square on 2 call paths
 *   a thread: worker_main (1) -> worker_step (4)
 * It prints a checksum of the results and exits with status 0.
 */
#include <pthread.h>
#include <stdio.h>

__attribute__((noipa)) int read_token(int i) { return i * 3 + 1; }

__attribute__((noipa)) int parse_config(void)
{
    int sum = 0;
    for (int i = 0; i < 7; i++)
        sum += read_token(i);
    return sum;
}

__attribute__((noipa)) long helper_square(long x) { return x * x; }

__attribute__((noipa)) long compute(long n)
{
    long sum = 0;
    for (long i = 0; i < 5; i++)
        sum += helper_square(n + i);
    return sum;
}

__attribute__((noipa)) int worker_step(int s) { return s + 2; }

__attribute__((noipa)) void *worker_main(void *arg)
{
    int s = 0;
    for (int i = 0; i < 4; i++)
        s = worker_step(s);
    *(int *)arg = s;
    return NULL;
}

int main(void)
{
    int w = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, worker_main, &w) != 0)
        return 1;
    pthread_join(t, NULL);
    long total = parse_config();
    for (long n = 1; n <= 3; n++)
        total += compute(n);
    total += helper_square(4) + helper_square(5);
    printf("checksum %ld %d\n", total, w);
    return 0;
}
