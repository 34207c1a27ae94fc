/*
 * Blocks in read(2) on a small stack surrounded by other data, as a
 * goroutine's stack is in Go's heap (cgo), or a coroutine's: main switches
 * to a 6 KiB stack inside `region` (the rest filled with a pattern) and
 * reads a command there. fctrace attaches while it waits; on "go" it
 * returns to main, which checks that nothing below the stack was written
 * (fctrace's work in the process must use a stack of its own), calls a
 * traced function and exits with 3.
 */
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define REGION (256 * 1024)
#define STACK_AT (128 * 1024)
#define STACK (6 * 1024)

static unsigned char region[REGION] __attribute__((aligned(4096)));
static ucontext_t main_ctx, co_ctx;
static char command[64];

__attribute__((noinline)) void wait_command(void) {
    ssize_t n = read(0, command, sizeof command - 1);
    command[n > 0 ? n : 0] = 0;
}

__attribute__((noinline)) int work(int x) { return x * 2 + 1; }

int main(void) {
    memset(region, 0xa5, REGION);
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = region + STACK_AT;
    co_ctx.uc_stack.ss_size = STACK;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, wait_command, 0);
    printf("ready\n");
    fflush(stdout);
    swapcontext(&main_ctx, &co_ctx);
    size_t bad = 0;
    for (size_t i = 0; i < STACK_AT; i++)
        bad += region[i] != 0xa5;
    for (size_t i = STACK_AT + STACK; i < REGION; i++)
        bad += region[i] != 0xa5;
    int sum = 0;
    for (int i = 0; i < 100; i++)
        sum += work(i);
    printf("command %s", command);
    printf("bytes written outside the stack: %zu\n", bad);
    printf("sum %d\n", sum);
    return 3;
}
