// exceptions.cpp: C++ exceptions through several traced frames.
//
//   ./exceptions tree        one round of everything below, for the call tree
//   ./exceptions loop N      N rounds, for the call counts
//   ./exceptions terminate   an exception no handler catches: std::terminate
//
// One round (run_round):
//   - level3 throws (thrower), its Guard is destroyed by a cleanup landing
//     pad that then calls _Unwind_Resume; level2 has nothing to clean up;
//     level1 catches, prints and rethrows (`throw;`);
//   - nested: an inner try catches the rethrown exception and throws a new
//     one, which the outer try of the same function catches;
//   - then ordinary calls, which must nest under run_round again.
//
// Every function is noipa so that -O0 and -O2 make the same calls. The
// thrown type is a plain struct (no library constructor is called). Only
// printf is used for output. The expected trees are in tests/tracing/exceptions.rs;
// keep both in step.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NOIPA __attribute__((noipa))

struct Err {
    int code;
};

struct Guard {
    int tag;
    NOIPA explicit Guard(int t) : tag(t) {}
    NOIPA ~Guard() { std::printf("guard %d released\n", tag); }
};

static bool verbose = true;

NOIPA void thrower(int x)
{
    if (x > 0)
        throw Err{x};
}

NOIPA int level3(int x)
{
    Guard g(x);
    thrower(x);
    return x;
}

NOIPA int level2(int x) { return level3(x) + 1; }

NOIPA int level1(int x)
{
    try {
        return level2(x);
    } catch (Err &e) {
        if (verbose)
            std::printf("level1 saw %d\n", e.code);
        throw;
    }
}

NOIPA int nested(int x)
{
    try {
        try {
            level1(x);
        } catch (Err &e) {
            if (verbose)
                std::printf("inner caught %d\n", e.code);
            throw Err{e.code * 10};
        }
    } catch (Err &e) {
        if (verbose)
            std::printf("outer caught %d\n", e.code);
        return e.code;
    }
    return 0;
}

NOIPA int after(int x) { return x + 1; }

NOIPA int run_round(int x)
{
    int got = nested(x);
    return after(got);
}

NOIPA void doomed(int x)
{
    Guard g(x);
    thrower(x);
}

int main(int argc, char **argv)
{
    if (argc > 1 && std::strcmp(argv[1], "terminate") == 0) {
        std::printf("about to throw %d\n", 5);
        std::fflush(stdout);
        doomed(5);
        return 0;
    }
    if (argc > 2 && std::strcmp(argv[1], "loop") == 0) {
        verbose = false;
        int n = std::atoi(argv[2]);
        long sum = 0;
        for (int i = 0; i < n; i++)
            sum += run_round(i % 4 + 1);
        std::printf("sum=%ld\n", sum);
        return 0;
    }
    int r = run_round(3);
    std::printf("result %d\n", r);
    return 0;
}
