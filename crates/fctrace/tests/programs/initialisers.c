/* Uses a library whose initialisers call its own functions and this
 * program's program_hook before main runs (tests/initialisers.rs). */
#include <stdio.h>

int lib_sum(int n);
int lib_value(void);
int cxx_total(void);

static int hook_calls;

__attribute__((noinline)) void program_hook(int value) {
    hook_calls += value > 0;
}

int main(void) {
    printf("%d %d %d %d\n", lib_sum(2), lib_value(), cxx_total(), hook_calls);
    return 0;
}
