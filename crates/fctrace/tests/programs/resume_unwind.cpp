// resume_unwind.cpp: tracing turns on (`--disable -T on@trace_on`) at
// on(), inside thrower < passthru < catcher < main, all entered while it
// was off; thrower then throws through passthru (no handler there) to
// catcher, which catches, calls leaf and returns. Prints 5
// (leaf(1) + leaf(2) = 2 + 3). tests/options/disabled_gaps.rs.
#include <cstdio>
#include <stdexcept>

__attribute__((noinline)) int leaf(int x)
{
    volatile int v = x;
    return v + 1;
}

__attribute__((noinline)) void on(int x) { leaf(x); }

__attribute__((noinline)) void thrower(int x)
{
    on(x);
    throw std::runtime_error("x");
}

__attribute__((noinline)) void passthru(int x)
{
    thrower(x);
    leaf(x);
}

__attribute__((noinline)) int catcher(int x)
{
    try {
        passthru(x);
    } catch (const std::exception &) {
        return leaf(x);
    }
    return 0;
}

int main()
{
    int s = catcher(1);
    s += leaf(2);
    printf("%d\n", s);
    return 0;
}
