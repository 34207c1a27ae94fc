/*
 * longjmp.c: error handling the way interpreters do it. pcall() is a
 * protected call: it sets a jmp_buf as the current handler and evaluates;
 * an error deep down (throw_error) longjmps back to the innermost pcall,
 * leaving every frame in between. pcalls nest. sig_pcall() does the same
 * with sigsetjmp/siglongjmp (saving the signal mask), and sig_handler_pcall
 * leaves a signal handler with siglongjmp.
 *
 *   ./longjmp tree        one of each, for the call tree
 *   ./longjmp loop N      N rounds of each, for the call counts
 *   ./longjmp signal N    N rounds of siglongjmp out of a SIGUSR1 handler
 *   ./longjmp flat N      N jumps back to main, which calls setjmp again
 *                         right away (no other call in between)
 *   ./longjmp late N      one jump, then N rounds of a busy loop before the
 *                         next call: the frames left end at the jump
 *
 * Every function is noipa so that -O0 and -O2 make the same calls. The
 * expected trees are in tests/tracing/longjmp.rs; keep both in step.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOIPA __attribute__((noipa))

static jmp_buf *handler;
static sigjmp_buf *sig_handler;
static volatile sig_atomic_t in_handler;
volatile int sink; /* stores after recursive calls keep them real calls */

NOIPA void throw_error(int code)
{
    longjmp(*handler, code);
}

NOIPA int eval(int depth, int fail);

/* A protected call: 0 ok -> the value, error -> minus the error code. */
NOIPA int pcall(int depth, int fail)
{
    jmp_buf buf;
    jmp_buf *prev = handler;
    int r;
    handler = &buf;
    int code = setjmp(buf);
    if (code == 0)
        r = eval(depth, fail);
    else
        r = -code;
    handler = prev;
    return r;
}

/* depth < 0: a nested protected call that fails at depth 2, then go on. */
NOIPA int eval(int depth, int fail)
{
    if (depth < 0) {
        int p = pcall(2, 5);
        int e = eval(-depth - 1, fail);
        sink = e;
        return p + e;
    }
    if (depth == 0) {
        if (fail)
            throw_error(fail);
        return 1;
    }
    int r = eval(depth - 1, fail);
    sink = r;
    return r + 1;
}

NOIPA void sig_throw(int code)
{
    siglongjmp(*sig_handler, code);
}

NOIPA int sig_eval(int depth)
{
    if (depth == 0) {
        sig_throw(9);
        return 0;
    }
    int r = sig_eval(depth - 1);
    sink = r;
    return r + 1;
}

NOIPA int sig_pcall(int depth)
{
    sigjmp_buf buf;
    sigjmp_buf *prev = sig_handler;
    int r;
    sig_handler = &buf;
    int code = sigsetjmp(buf, 1);
    if (code == 0)
        r = sig_eval(depth);
    else
        r = -code;
    sig_handler = prev;
    return r;
}

NOIPA void on_usr1(int sig)
{
    in_handler = sig;
    siglongjmp(*sig_handler, sig);
}

NOIPA int signal_depth(int depth)
{
    if (depth == 0) {
        raise(SIGUSR1);
        return 0;
    }
    int r = signal_depth(depth - 1);
    sink = r;
    return r + 1;
}

NOIPA int sig_handler_pcall(int depth)
{
    sigjmp_buf buf;
    sigjmp_buf *prev = sig_handler;
    int r;
    sig_handler = &buf;
    int code = sigsetjmp(buf, 1);
    if (code == 0)
        r = signal_depth(depth);
    else
        r = -code;
    sig_handler = prev;
    return r;
}

static jmp_buf flat_env;

NOIPA void flat_fail(int i)
{
    longjmp(flat_env, i + 1);
}

NOIPA void flat_deep(int i)
{
    flat_fail(i);
    sink = i;
}

NOIPA int after(int x)
{
    sink = x;
    return x + 1;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "flat") == 0) {
        int n = atoi(argv[2]);
        volatile int jumps = 0;
        for (volatile int i = 0; i < n; i++) {
            if (setjmp(flat_env) == 0)
                flat_deep(i);
            else
                jumps++;
        }
        printf("flat: jumps=%d\n", jumps);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "late") == 0) {
        long n = atol(argv[2]);
        if (setjmp(flat_env) == 0)
            flat_deep(1);
        for (volatile long i = 0; i < n; i++)
            ;
        printf("late: %d\n", after(1));
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "signal") == 0) {
        signal(SIGUSR1, on_usr1);
        int n = atoi(argv[2]);
        long sum = 0;
        for (int i = 0; i < n; i++)
            sum += sig_handler_pcall(i % 3);
        sigset_t cur;
        sigprocmask(SIG_BLOCK, NULL, &cur);
        printf("signal: sum=%ld usr1-blocked=%d\n", sum, sigismember(&cur, SIGUSR1));
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "loop") == 0) {
        int n = atoi(argv[2]);
        long sum = 0;
        for (int i = 0; i < n; i++) {
            sum += pcall(i % 4, i % 3);
            sum += pcall(-(i % 3) - 1, 0);
            sum += sig_pcall(i % 5);
        }
        printf("loop: sum=%ld\n", sum);
        return 0;
    }
    int a = pcall(1, 0);
    int b = pcall(2, 7);
    int c = pcall(-1, 0);
    int d = sig_pcall(1);
    printf("tree: a=%d b=%d c=%d d=%d\n", a, b, c, d);
    return 0;
}
