/*
 * shape.c: the tree's shape as uftrace users know it (tests/tracing/shape.rs).
 * A constructor and an atexit handler run outside main, called by the C
 * runtime; measure returns a value (-R measure@retval); qsort calls back
 * into the program (--no-libcall); with the argument `phases`, three
 * phases 400 ms apart (-r). Keep tests/tracing/shape.rs in step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

volatile int sink;

NOIPA int twice(int x) { return 2 * x; }

__attribute__((constructor)) NOIPA void setup(void) { sink = twice(1); }

NOIPA void teardown(void) { sink = twice(2); }

/* measure(3) = 6, through a call, so that it is not a leaf. */
NOIPA int measure(int x) { return twice(x); }

NOIPA int cmp(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

NOIPA void phase1(void) { sink = 1; }
NOIPA void phase2(void) { sink = 2; }
NOIPA void phase3(void) { sink = 3; }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "phases") == 0) {
        phase1();
        usleep(400000);
        phase2();
        usleep(400000);
        phase3();
        return 0;
    }
    atexit(teardown);
    int v[2] = {2, 1};
    qsort(v, 2, sizeof v[0], cmp);
    printf("%d %d %d\n", measure(3), v[0], v[1]);
    return 0;
}
