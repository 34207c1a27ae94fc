/*
 * backtraces.c: a program that looks at its own stack, three traced frames
 * down (level1 -> level2 -> level3), with
 *   - glibc's backtrace(), each frame printed by dladdr as
 *     "module symbol+offset" (or "module +offset" without a symbol: the
 *     same with or without ASLR), then backtrace_symbols() and
 *     backtrace_symbols_fd() (which also print absolute addresses);
 *   - _Unwind_Backtrace called directly, each frame's IP printed the same
 *     way;
 *   - backtrace() inside a SIGUSR1 handler raise()d from level3.
 * Built with -rdynamic so that dladdr and backtrace_symbols name the
 * program's functions.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#define NOIPA __attribute__((noipa))
#define MAX 64

volatile int sink;

NOIPA void show(const char *what, void **addrs, int n)
{
    printf("%s: %d frames\n", what, n);
    for (int i = 0; i < n; i++) {
        Dl_info info;
        if (dladdr(addrs[i], &info) && info.dli_fname) {
            const char *base = strrchr(info.dli_fname, '/');
            base = base ? base + 1 : info.dli_fname;
            if (info.dli_sname)
                printf("  %s %s+%#lx\n", base, info.dli_sname,
                       (unsigned long)((uintptr_t)addrs[i] - (uintptr_t)info.dli_saddr));
            else
                printf("  %s +%#lx\n", base,
                       (unsigned long)((uintptr_t)addrs[i] - (uintptr_t)info.dli_fbase));
        } else {
            printf("  ?? %p\n", addrs[i]);
        }
    }
}

NOIPA void with_glibc(void)
{
    void *addrs[MAX];
    int n = backtrace(addrs, MAX);
    show("backtrace", addrs, n);
    char **names = backtrace_symbols(addrs, n);
    for (int i = 0; i < n; i++)
        printf("  %s\n", names[i]);
    free(names);
    fflush(stdout);
    backtrace_symbols_fd(addrs, n, 1);
}

struct collect {
    void *addrs[MAX];
    int n;
};

static _Unwind_Reason_Code one_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct collect *c = arg;
    if (c->n == MAX)
        return _URC_END_OF_STACK;
    c->addrs[c->n++] = (void *)_Unwind_GetIP(ctx);
    return _URC_NO_REASON;
}

NOIPA void with_unwind(void)
{
    struct collect c = {.n = 0};
    _Unwind_Reason_Code r = _Unwind_Backtrace(one_frame, &c);
    printf("_Unwind_Backtrace returned %d\n", (int)r);
    show("_Unwind_Backtrace", c.addrs, c.n);
}

static void *handler_addrs[MAX];
static volatile int handler_n;

NOIPA void on_usr1(int sig)
{
    handler_n = backtrace(handler_addrs, MAX);
    sink = sig;
}

NOIPA void with_signal(void)
{
    raise(SIGUSR1);
    show("in a signal handler", handler_addrs, handler_n);
}

NOIPA void level3(int mode)
{
    if (mode == 0)
        with_glibc();
    else if (mode == 1)
        with_unwind();
    else
        with_signal();
    sink = mode;
}

NOIPA void level2(int mode)
{
    level3(mode);
    sink = mode;
}

NOIPA void level1(int mode)
{
    level2(mode);
    sink = mode;
}

int main(void)
{
    signal(SIGUSR1, on_usr1);
    for (int mode = 0; mode < 3; mode++)
        level1(mode);
    return 0;
}
