/* stripped_filters.c: a program traced stripped, with record-time filters
   (tests/options/stripped_filters.rs). Built with -rdynamic its functions stay in
   .dynsym; without it they are found from their FDEs, named by address. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fill(char *dst, const char *src, size_t n) { memcpy(dst, src, n); }

int work(int i) {
    char a[64], b[64];
    memset(a, 'a' + i, sizeof a);
    fill(b, a, (size_t)(40 + i));
    return b[i];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += work(i);
    printf("sum %d\n", sum);
    return 0;
}
