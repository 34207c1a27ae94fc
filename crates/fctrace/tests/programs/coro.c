/*
 * coro.c: ucontext coroutines (makecontext/swapcontext/setcontext).
 *
 *   coro gen N      a generator: main pulls N values from a coroutine that
 *                   yields each one, then the generator function returns
 *                   (uc_link brings main back)
 *   coro ping N     two coroutines switching to each other N times; ping
 *                   finishes (uc_link: main), pong is abandoned suspended
 *   coro chain      a uc_link chain: a finishes into b (a fresh context),
 *                   b finishes into main
 *   coro jump N     getcontext + setcontext used like setjmp/longjmp inside
 *                   one context, N times
 *   coro all N      all of the above
 *   coro thread     a coroutine started on the main thread, resumed on
 *                   another thread, abandoned there
 *
 * Every function the tests count is noipa, so -O2 keeps the calls.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#define STACK (64 * 1024)

static ucontext_t main_ctx, gen_ctx, ping_ctx, pong_ctx, a_ctx, b_ctx;
/*
 * The coroutines' stacks, one array so that their order is known: every
 * fresh context starts on a stack below the one of the context that
 * starts it (callgrind tells calls from returns by the stack pointer).
 */
static char stacks[5][STACK] __attribute__((aligned(64)));
#define pong_stack stacks[0]
#define ping_stack stacks[1]
#define b_stack stacks[2]
#define a_stack stacks[3]
#define gen_stack stacks[4]
static char co_stack[STACK] __attribute__((aligned(64)));
static long gen_value, sum, bumps;
static int gen_done;

__attribute__((noipa)) long produce(long i) { return i * i + 1; }
__attribute__((noipa)) void consume(long v) { sum += v; }
__attribute__((noipa)) void bump(long k) { bumps += k; }

/* --- generator ------------------------------------------------------- */

__attribute__((noipa)) void yield_value(long v)
{
    gen_value = v;
    swapcontext(&gen_ctx, &main_ctx);
}

__attribute__((noipa)) void generator(int n)
{
    for (int i = 0; i < n; i++)
        yield_value(produce(i));
    gen_done = 1;
}

__attribute__((noipa)) int next_value(void)
{
    swapcontext(&main_ctx, &gen_ctx);
    return !gen_done;
}

__attribute__((noipa)) void run_generator(int n)
{
    getcontext(&gen_ctx);
    gen_ctx.uc_stack.ss_sp = gen_stack;
    gen_ctx.uc_stack.ss_size = sizeof gen_stack;
    gen_ctx.uc_link = &main_ctx;
    gen_done = 0;
    makecontext(&gen_ctx, (void (*)(void))generator, 1, n);
    int got = 0;
    while (next_value()) {
        consume(gen_value);
        got++;
    }
    printf("gen: %d values, sum %ld\n", got, sum);
}

/* --- ping-pong ------------------------------------------------------- */

static int rounds;

__attribute__((noipa)) void ping(void)
{
    for (int i = 0; i < rounds; i++) {
        bump(1);
        swapcontext(&ping_ctx, &pong_ctx);
    }
}

__attribute__((noipa)) void pong(void)
{
    bump(2);
    for (;;) {
        swapcontext(&pong_ctx, &ping_ctx);
        bump(2);
    }
}

__attribute__((noipa)) void run_pingpong(int n)
{
    rounds = n;
    getcontext(&ping_ctx);
    ping_ctx.uc_stack.ss_sp = ping_stack;
    ping_ctx.uc_stack.ss_size = sizeof ping_stack;
    ping_ctx.uc_link = &main_ctx;
    makecontext(&ping_ctx, ping, 0);
    getcontext(&pong_ctx);
    pong_ctx.uc_stack.ss_sp = pong_stack;
    pong_ctx.uc_stack.ss_size = sizeof pong_stack;
    pong_ctx.uc_link = NULL;
    makecontext(&pong_ctx, pong, 0);
    swapcontext(&main_ctx, &ping_ctx);
    printf("ping: %d rounds, bumps %ld\n", n, bumps);
}

/* --- uc_link chain ---------------------------------------------------- */

__attribute__((noipa)) void task_a(void) { bump(10); }
__attribute__((noipa)) void task_b(void) { bump(20); }

__attribute__((noipa)) void run_chain(void)
{
    getcontext(&b_ctx);
    b_ctx.uc_stack.ss_sp = b_stack;
    b_ctx.uc_stack.ss_size = sizeof b_stack;
    b_ctx.uc_link = &main_ctx;
    makecontext(&b_ctx, task_b, 0);
    getcontext(&a_ctx);
    a_ctx.uc_stack.ss_sp = a_stack;
    a_ctx.uc_stack.ss_size = sizeof a_stack;
    a_ctx.uc_link = &b_ctx;
    makecontext(&a_ctx, task_a, 0);
    swapcontext(&main_ctx, &a_ctx);
    printf("chain: bumps %ld\n", bumps);
}

/* --- getcontext/setcontext as setjmp/longjmp ------------------------- */

static ucontext_t jump_ctx;

__attribute__((noipa)) void leave(void) { setcontext(&jump_ctx); }
static volatile int depth_seen;

__attribute__((noipa)) void deep(int d)
{
    if (d == 0)
        leave();
    else
        deep(d - 1);
    depth_seen += d; /* never reached: keeps the recursion a real call */
}

__attribute__((noipa)) void run_jump(int n)
{
    volatile int count = 0;
    getcontext(&jump_ctx);
    if (count < n) {
        count++;
        deep(2);
    }
    printf("jump: %d\n", count);
}

/* --- a context resumed on another thread ----------------------------- */

static ucontext_t co_ctx, t1_ctx, t2_ctx;
static ucontext_t *co_back;

__attribute__((noipa)) void co_body(void)
{
    bump(100);
    swapcontext(&co_ctx, co_back);
    bump(200);
    swapcontext(&co_ctx, co_back);
}

__attribute__((noipa)) void *resumer(void *arg)
{
    (void)arg;
    co_back = &t2_ctx;
    swapcontext(&t2_ctx, &co_ctx);
    return NULL;
}

__attribute__((noipa)) void run_thread(void)
{
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = co_stack;
    co_ctx.uc_stack.ss_size = sizeof co_stack;
    co_ctx.uc_link = NULL;
    makecontext(&co_ctx, co_body, 0);
    co_back = &t1_ctx;
    swapcontext(&t1_ctx, &co_ctx);
    pthread_t t;
    pthread_create(&t, NULL, resumer, NULL);
    pthread_join(t, NULL);
    printf("thread: bumps %ld\n", bumps);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    int n = argc > 2 ? atoi(argv[2]) : 3;
    int all = !strcmp(what, "all");
    if (all || !strcmp(what, "gen"))
        run_generator(n);
    if (all || !strcmp(what, "ping"))
        run_pingpong(n);
    if (all || !strcmp(what, "chain"))
        run_chain();
    if (all || !strcmp(what, "jump"))
        run_jump(n);
    if (!strcmp(what, "thread"))
        run_thread();
    return 0;
}
