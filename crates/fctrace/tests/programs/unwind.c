/*
 * unwind.c: frames left by longjmp. main -> outer -> middle -> deepest,
 * and deepest longjmps back to main's setjmp. outer, middle and deepest
 * (and the longjmp call itself) never return: they are unwound. After
 * that main makes ordinary calls, which must nest under main again.
 */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile int sink;

__attribute__((noipa)) int after(int x) { return x * 3; }

__attribute__((noipa)) void deepest(int x)
{
    sink = x;
    longjmp(env, x + 1);
}

__attribute__((noipa)) void middle(int x)
{
    deepest(x + 1);
    sink = 0; /* not reached */
}

__attribute__((noipa)) void outer(int x)
{
    middle(x + 1);
    sink = 0; /* not reached */
}

int main(void)
{
    int got = setjmp(env);
    if (got == 0) {
        outer(1);
        return 1; /* not reached */
    }
    int r = after(got);
    printf("unwind: got=%d r=%d\n", got, r);
    return 0;
}
