/*
 * signals.c: signal handlers, traced under the function they interrupt.
 *
 *   ./signals raise       a SIGUSR1 raised two calls deep; its handler calls
 *   ./signals nested      a SIGUSR1 handler raises SIGUSR2: nested handlers
 *   ./signals altstack    handlers on an alternate signal stack (sigaltstack)
 *   ./signals siginfo     an SA_SIGINFO handler reads si_signo/si_code/si_value
 *   ./signals resethand   SA_RESETHAND: the handler runs once, then SIGUSR1
 *                         kills the process
 *   ./signals resetsegv   SA_RESETHAND on SIGSEGV: the handler runs once,
 *                         the fault then kills the process
 *   ./signals api         signal(), bsd_signal, sysv_signal, sigset; what
 *                         they and sigaction() report back
 *   ./signals timer N     N timer signals at a high rate land anywhere in
 *                         call-dense code; the handler calls too
 *   ./signals timer N bt  the same, and the handler takes a backtrace (a
 *                         sampling profiler)
 *   ./signals segv        a NULL write two calls deep, no handler
 *   ./signals abort       abort() two calls deep, no handler
 *   ./signals blocked     SIGSEGV blocked, then the NULL write: the kernel
 *                         kills without running any handler
 *   ./signals overflow    unbounded recursion with an alternate signal stack
 *                         and no handler: dies by SIGSEGV
 *
 * Every function is noipa so that -O0 and -O2 make the same calls. The
 * expected trees are in tests/processes/signals.rs; keep both in step.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

/* Declared by <signal.h> only for old X/Open levels. */
extern sighandler_t bsd_signal(int, sighandler_t);
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#pragma GCC diagnostic ignored "-Winfinite-recursion"

volatile int sink;
static volatile sig_atomic_t hits;
static char *alt_lo, *alt_hi;
static volatile int on_alt;

NOIPA void leaf(int x) { sink += x; }

NOIPA void handler_work(int sig) { leaf(sig); sink++; }

NOIPA void on_usr1(int sig) { handler_work(sig); hits++; }

NOIPA void on_usr2(int sig) { leaf(sig); hits++; }

NOIPA void on_usr1_nesting(int sig)
{
    handler_work(sig);
    raise(SIGUSR2);
    hits++;
}

NOIPA void inner(int sig) { raise(sig); sink++; }

NOIPA void outer(int sig)
{
    inner(sig);
    leaf(1);
}

static void install(int sig, void (*h)(int), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        exit(2);
    }
}

/* ---- altstack ---- */

NOIPA int depth(int n)
{
    if (n == 0)
        return 0;
    int r = depth(n - 1);
    sink += r; /* keeps the recursion a real one at -O2 */
    return r + 1;
}

NOIPA void on_alt_usr1(int sig)
{
    char here;
    on_alt = &here >= alt_lo && &here < alt_hi;
    sink += depth(3);
    raise(SIGUSR2); /* nested, also on the alternate stack */
    hits++;
}

NOIPA void on_alt_usr2(int sig)
{
    char here;
    on_alt = on_alt && &here >= alt_lo && &here < alt_hi;
    leaf(sig);
    sink++;
}

/* ---- siginfo ---- */

static volatile int got_signo, got_code, got_value;

NOIPA void on_info(int sig, siginfo_t *si, void *uc)
{
    got_signo = si->si_signo;
    got_code = si->si_code;
    got_value = si->si_value.sival_int;
    leaf(sig);
    sink++;
}

/* ---- resethand / resetsegv ---- */

NOIPA void on_once(int sig) { leaf(sig); hits++; }

static int *volatile null_ptr;

NOIPA void fault(void) { *null_ptr = 1; sink++; }

NOIPA void crash(void)
{
    fault();
    leaf(2);
}

NOIPA void do_abort(void) { abort(); }

NOIPA int runaway(int n)
{
    volatile char pad[64];
    pad[n & 63] = (char)n;
    return runaway(n + 1) + pad[(n + 1) & 63];
}

/* ---- timer ---- */

static volatile int ticks_left;
static int take_backtrace;
static volatile int frames_ok;

NOIPA int step(int x) { return x * 3 + 1; }

NOIPA int work(int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += step(i) & 7;
    return s;
}

NOIPA void tick(void) { leaf(1); sink++; }

NOIPA void on_alarm(int sig)
{
    if (ticks_left <= 0)
        return; /* one more may have been on its way when the timer stopped */
    tick();
    if (take_backtrace) {
        void *frames[64];
        int n = backtrace(frames, 64);
        /* The handler, the kernel's restorer, and more: never fewer. */
        frames_ok += n >= 3;
    }
    if (--ticks_left == 0) {
        struct itimerval off;
        memset(&off, 0, sizeof off);
        setitimer(ITIMER_REAL, &off, NULL);
    }
}

static void show_action(const char *what, int sig)
{
    struct sigaction old;
    sigaction(sig, NULL, &old);
    const char *h = old.sa_handler == SIG_DFL ? "SIG_DFL"
                    : old.sa_handler == SIG_IGN ? "SIG_IGN"
                    : old.sa_handler == on_usr1 ? "on_usr1"
                    : old.sa_handler == on_usr2 ? "on_usr2"
                    : old.sa_handler == on_once ? "on_once"
                                                 : "other";
    unsigned long mask = 0;
    for (int s = 1; s < 32; s++)
        if (sigismember(&old.sa_mask, s))
            mask |= 1ul << s;
    printf("%s: %s flags=%#x mask=%#lx\n", what, h, old.sa_flags, mask);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "raise";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (strcmp(mode, "raise") == 0) {
        install(SIGUSR1, on_usr1, 0);
        outer(SIGUSR1);
        leaf(3);
        printf("raise: hits=%d\n", hits);
    } else if (strcmp(mode, "nested") == 0) {
        install(SIGUSR1, on_usr1_nesting, 0);
        install(SIGUSR2, on_usr2, 0);
        outer(SIGUSR1);
        printf("nested: hits=%d\n", hits);
    } else if (strcmp(mode, "altstack") == 0) {
        stack_t ss;
        size_t size = 1 << 16;
        alt_lo = malloc(size);
        alt_hi = alt_lo + size;
        ss.ss_sp = alt_lo;
        ss.ss_size = size;
        ss.ss_flags = 0;
        if (sigaltstack(&ss, NULL) != 0) {
            perror("sigaltstack");
            return 2;
        }
        install(SIGUSR1, on_alt_usr1, SA_ONSTACK);
        install(SIGUSR2, on_alt_usr2, SA_ONSTACK);
        outer(SIGUSR1);
        printf("altstack: hits=%d on_alt=%d sink=%d\n", hits, on_alt, sink);
    } else if (strcmp(mode, "siginfo") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_info;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGRTMIN, &sa, NULL);
        union sigval v;
        v.sival_int = 4242;
        sigqueue(getpid(), SIGRTMIN, v);
        printf("siginfo: signo_ok=%d code_is_queue=%d value=%d\n", got_signo == SIGRTMIN,
               got_code == SI_QUEUE, got_value);
    } else if (strcmp(mode, "resethand") == 0) {
        install(SIGUSR1, on_once, SA_RESETHAND);
        show_action("before", SIGUSR1);
        outer(SIGUSR1);
        show_action("after", SIGUSR1);
        printf("resethand: hits=%d\n", hits);
        outer(SIGUSR1); /* default action now: terminates */
        printf("not reached\n");
    } else if (strcmp(mode, "resetsegv") == 0) {
        install(SIGSEGV, on_once, SA_RESETHAND | SA_NODEFER);
        crash(); /* handler once, then the re-executed write kills */
        printf("not reached\n");
    } else if (strcmp(mode, "api") == 0) {
        show_action("segv", SIGSEGV);
        show_action("abrt", SIGABRT);
        sighandler_t old = signal(SIGUSR1, on_usr2);
        printf("signal: old_dfl=%d\n", old == SIG_DFL);
        show_action("signal", SIGUSR1);
        old = signal(SIGUSR1, on_usr1);
        printf("signal: old_is_usr2=%d\n", old == on_usr2);
        outer(SIGUSR1);
        old = bsd_signal(SIGUSR1, SIG_IGN);
        printf("bsd_signal: old_is_usr1=%d\n", old == on_usr1);
        outer(SIGUSR1); /* ignored */
        old = sysv_signal(SIGUSR2, on_once);
        printf("sysv_signal: old_dfl=%d\n", old == SIG_DFL);
        show_action("sysv", SIGUSR2);
        outer(SIGUSR2);
        show_action("sysv after", SIGUSR2);
        old = sigset(SIGUSR2, on_usr2);
        printf("sigset: old_dfl=%d\n", old == SIG_DFL);
        outer(SIGUSR2);
        old = sigset(SIGUSR2, SIG_HOLD);
        printf("sigset hold: old_is_usr2=%d\n", old == on_usr2);
        old = signal(SIGSEGV, SIG_DFL);
        printf("signal segv: old_dfl=%d\n", old == SIG_DFL);
        old = signal(SIGSEGV, on_usr1);
        printf("signal segv: old_dfl=%d\n", old == SIG_DFL);
        old = signal(SIGSEGV, SIG_DFL);
        printf("signal segv: old_is_usr1=%d\n", old == on_usr1);
        show_action("segv", SIGSEGV);
        printf("api: hits=%d\n", hits);
    } else if (strcmp(mode, "timer") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 2000;
        take_backtrace = argc > 3 && strcmp(argv[3], "bt") == 0;
        if (take_backtrace) { /* loads libgcc_s before any signal */
            void *f[4];
            backtrace(f, 4);
        }
        ticks_left = n;
        install(SIGALRM, on_alarm, SA_RESTART);
        struct itimerval it;
        it.it_interval.tv_sec = 0;
        it.it_interval.tv_usec = 20;
        it.it_value = it.it_interval;
        setitimer(ITIMER_REAL, &it, NULL);
        long total = 0;
        for (int r = 0; r < 200; r++)
            total += work(2500);
        while (ticks_left > 0) /* no calls: the counts stay exact */
            ;
        printf("timer: total=%ld ticks=%d\n", total, n);
        if (take_backtrace)
            printf("backtraces: %d\n", frames_ok);
    } else if (strcmp(mode, "segv") == 0) {
        crash();
        printf("not reached\n");
    } else if (strcmp(mode, "blocked") == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGSEGV);
        sigprocmask(SIG_BLOCK, &set, NULL);
        crash();
        printf("not reached\n");
    } else if (strcmp(mode, "overflow") == 0) {
        stack_t ss;
        ss.ss_size = 1 << 16;
        ss.ss_sp = malloc(ss.ss_size);
        ss.ss_flags = 0;
        sigaltstack(&ss, NULL);
        sink = runaway(0);
        printf("not reached\n");
    } else if (strcmp(mode, "abort") == 0) {
        do_abort();
        printf("not reached\n");
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
