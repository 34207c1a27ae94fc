/* tests/analysis/terminal.rs: durations and markers whose colours are known.
 * `slow` sleeps 2 ms (a duration in ms: green), `quick` returns at once,
 * a SIGUSR1 handler runs (a signal marker), `repeat N` calls `tick` N
 * times (a long tree for the pager), and `leave` calls exit() two calls
 * deep (frames never returned from). Prints what it did on stdout. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t got;

__attribute__((noinline)) void on_usr1(int sig) { got = sig; }

__attribute__((noinline)) void slow(void) {
    struct timespec t = {0, 2000000};
    while (nanosleep(&t, &t) != 0) {
    }
}

__attribute__((noinline)) int quick(int x) { return x + 1; }

__attribute__((noinline)) int tick(int x) { return x * 3 + 1; }

__attribute__((noinline)) void leave(int code) {
    fflush(stdout);
    exit(code);
}

__attribute__((noinline)) void deep(int code) { leave(code); }

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "repeat") == 0) {
        int n = atoi(argv[2]), acc = 0;
        for (int i = 0; i < n; i++)
            acc += tick(i);
        printf("repeat %d %d\n", n, acc);
        return 0;
    }
    signal(SIGUSR1, on_usr1);
    slow();
    int q = quick(41);
    raise(SIGUSR1);
    printf("quick %d signal %d\n", q, (int)got);
    deep(0);
    return 1;
}
