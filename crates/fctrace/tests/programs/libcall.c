/*
 * libcall.c: calls into libc that call back into the program (qsort's
 * comparator) or go deep inside libc (printf, fflush -> ... -> write).
 * For -l/--nest-libcall: with it, the functions libc runs inside those
 * calls are traced too, so the comparator nests under qsort below libc's
 * own frames, and fflush reaches write(2)'s wrapper. Without it, printf
 * and fflush are leaves.
 */
#include <stdio.h>
#include <stdlib.h>

#define N 16

__attribute__((noipa)) int cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    int v[N];
    for (int i = 0; i < N; i++)
        v[i] = (i * 7 + 3) % N; /* a permutation of 0..N-1 */
    qsort(v, N, sizeof v[0], cmp);
    printf("libcall: %d %d %d\n", v[0], v[N / 2], v[N - 1]);
    fflush(stdout);
    return 0;
}
