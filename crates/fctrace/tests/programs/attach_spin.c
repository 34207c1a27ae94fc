/* attach_spin.c: a process that only computes (no system call in its
 * loop), for `fctrace -p`: main calls the leaf `spin_step` until SIGTERM,
 * then prints whether it counted calls and exits with status 3. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile long sink;

__attribute__((noinline)) long spin_step(long x) { return x * 3 + 1; }

static void on_term(int sig) { stop = 1; }

int main(void) {
    signal(SIGTERM, on_term);
    printf("ready\n");
    fflush(stdout);
    long x = 0, n = 0;
    while (!stop) {
        x = spin_step(x);
        n++;
    }
    sink = x;
    printf("done: %s\n", n > 0 ? "counted" : "none");
    return 3;
}
