/* Uses known resources, for `fctrace info`'s run facts: touches 64 MiB
 * (at least 64 MiB of max RSS, 16384 minor page faults of 4 KiB pages)
 * and sleeps once (at least one voluntary context switch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIZE (64u << 20)

int main(void) {
    char *p = malloc(SIZE);
    if (!p)
        return 1;
    memset(p, 1, SIZE);
    usleep(1000);
    unsigned long sum = 0;
    for (unsigned i = 0; i < SIZE; i += 4096)
        sum += (unsigned char)p[i];
    printf("%lu\n", sum);
    free(p);
    return 0;
}
