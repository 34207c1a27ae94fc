// dlcoro_lib.c: a C shared library that dlthrow_host.c loads in place of
// dlthrow_lib.cpp (-DDLTHROW_LIB): lib_work(n) resumes a coroutine
// (makecontext/swapcontext) 10 * n times; each time it runs co_mid >
// co_deep, which switches back to the caller from inside them, and returns
// the sum of the values it handed over.
#include <stdlib.h>
#include <ucontext.h>

static ucontext_t caller, coroutine;
static int handed;

__attribute__((noipa)) int co_deep(int x) {
    handed = x;
    swapcontext(&coroutine, &caller);
    return x + 1;
}

__attribute__((noipa)) int co_mid(int x) { return co_deep(x) + 1; }

static void co_main(void) {
    for (int i = 0;; i++)
        co_mid(i);
}

__attribute__((noipa)) int co_step(void) {
    swapcontext(&caller, &coroutine);
    return handed;
}

int lib_work(int n) {
    static char *stack;
    if (!stack) {
        stack = malloc(1 << 16);
        getcontext(&coroutine);
        coroutine.uc_stack.ss_sp = stack;
        coroutine.uc_stack.ss_size = 1 << 16;
        coroutine.uc_link = 0;
        makecontext(&coroutine, co_main, 0);
    }
    int sum = 0;
    for (int i = 0; i < n * 10; i++)
        sum += co_step();
    return sum;
}
