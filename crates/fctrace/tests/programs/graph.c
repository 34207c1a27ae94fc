// graph.c: a call graph known from the source, for tests/analysis/graph.rs and
// tests/analysis/report_diff.rs (built at -O0: every call below is a real call).
//
//   ./graph N    (N defaults to 3)
//
// Calls, for N:
//   main > atoi                       1
//   main > twice                      N      (loop in main)
//   main > twice > leaf               2 per call of twice
//   main > outer                      1
//   main > outer > inner              2
//   main > outer > inner > leaf       N per call of inner
//   main > outer > twice              1
//   main > outer > twice > leaf       2
//   main > only_big                   1 when N > 20, else never
//   main > only_big > leaf            1
//   main > fib (fib(5), recursive)    1, then fib's own calls
//   main > printf                     1
// So leaf is reached by 3 distinct chains of callers (4 when N > 20).
#include <stdio.h>
#include <stdlib.h>

static volatile int sink;

void leaf(int x) { sink += x; }

void twice(int x)
{
    leaf(x);
    leaf(x + 1);
}

void inner(int n)
{
    for (int i = 0; i < n; i++)
        leaf(i);
}

void outer(int n)
{
    inner(n);
    inner(n);
    twice(n);
}

void only_big(void) { leaf(-1); }

int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < n; i++)
        twice(i);
    outer(n);
    if (n > 20)
        only_big();
    int f = fib(5);
    printf("graph: n=%d sink=%d fib=%d\n", n, sink, f);
    return 0;
}
