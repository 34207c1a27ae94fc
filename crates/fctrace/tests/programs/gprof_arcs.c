// gprof_arcs.c: built with -pg; known call arcs for gprof's call graph:
// main calls a and c 10 times each and b once; c calls a and b once each;
// a calls leaf twice, b three times.
#include <stdio.h>

__attribute__((noipa)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noipa)) int a(int x) { return leaf(x) + leaf(x + 1); }

__attribute__((noipa)) int b(int x) {
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += leaf(x + i);
    return s;
}

__attribute__((noipa)) int c(int x) { return a(x) + b(x); }

int main(void) {
    int s = 0;
    for (int i = 0; i < 10; i++) {
        s += a(i);
        s += c(i);
    }
    s += b(1);
    printf("sum %d\n", s);
    return 0;
}
