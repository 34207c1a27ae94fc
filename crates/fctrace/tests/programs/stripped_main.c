/* stripped_*.c: static and extern functions, recursion, calls through
 * function pointers and a tail call, over the parsers of stripped_util.c. */
#include <stdio.h>
#include "stripped.h"

static __attribute__((noinline)) long leaf(long x) {
    __asm__ volatile("" ::: "memory");
    return x * 3 + 1;
}

/* Its call of leaf is a tail call (a jmp). */
static __attribute__((noinline)) long via_tail(long x) {
    __asm__ volatile("" ::: "memory");
    return leaf(x + 1);
}

static __attribute__((noinline)) long twice(long x) { return 2 * x; }
static __attribute__((noinline)) long negate(long x) { return -x; }

static long (*const ops[])(long) = {twice, negate, via_tail};

static __attribute__((noinline)) long fib(int n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

long walk(int depth) {
    if (depth == 0)
        return leaf(depth);
    return walk(depth - 1) + depth;
}

int main(int argc, char **argv) {
    static const char *numbers[] = {"12", "345", "6789", "0"};
    long a[16];
    for (int i = 0; i < 16; i++)
        a[i] = i * (argc + 1);
    long t = 0;
    for (int r = 0; r < 50; r++) {
        t += parse_number(numbers[r % 4]);
        t += sum_checked(a, 16) + classify(r * 30, argc);
        t += ops[r % 3](r);
    }
    t += fib(15) + walk(20);
    if (argc > 1)
        t += parse_number(argv[1]);
    printf("%ld\n", t);
    return argc > 1 ? 3 : 0;
}
