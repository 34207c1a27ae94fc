/* attach_nap.c: a process that naps in usleep (nanosleep) between tiny
 * calls, for `fctrace -p`: fctrace mostly finds its thread asleep and
 * loads the agent from it at its next system call's entry. Runs until
 * SIGTERM, then prints whether it napped and exits with status 3. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile long sink;

__attribute__((noinline)) long count(long x) { return x + 1; }

__attribute__((noinline)) void nap(void) { usleep(20000); }

static void on_term(int sig) { stop = 1; }

int main(void) {
    signal(SIGTERM, on_term);
    printf("ready\n");
    fflush(stdout);
    long n = 0;
    while (!stop) {
        nap();
        n = count(n);
    }
    sink = n;
    printf("done: %s\n", n > 0 ? "napped" : "never napped");
    return 3;
}
