/* attach_reopt.c: a running process for `fctrace -p` attached several
 * times with different options. Main waits on stdin; each line "go"
 * makes it call top(i) for i = 0 .. CALLS-1 and print the round's sum.
 * top(x) calls mid(x), leaf(x + 7) and the library's lib_outer(x);
 * mid(x) calls leaf(x). SIGUSR1 is counted by a handler (the count is
 * in the round's line); SIGUSR2 is left at its default action. "quit"
 * ends it (exit status 3). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define CALLS 100

int lib_outer(int x);

static volatile long sink;
static volatile sig_atomic_t usr1;

static void on_usr1(int sig) {
    (void)sig;
    usr1++;
}

__attribute__((noipa)) int leaf(int x) { return x + 1; }
__attribute__((noipa)) int mid(int x) { return leaf(x) * 2; }
__attribute__((noipa)) int top(int x) { return mid(x) + leaf(x + 7) + lib_outer(x); }

/* Main waits for its commands in here (a traced call in progress while
 * fctrace attaches or detaches). */
static volatile int commands;
__attribute__((noipa)) char *read_command(char *line, int n) {
    char *got = fgets(line, n, stdin);
    commands++;
    return got;
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    int round = 0;
    while (read_command(line, sizeof line)) {
        if (!strncmp(line, "quit", 4))
            break;
        long sum = 0;
        for (int i = 0; i < CALLS; i++)
            sum += top(i);
        sink = sum;
        printf("round %d: %ld, SIGUSR1 %d\n", ++round, sum, (int)usr1);
        fflush(stdout);
    }
    printf("done after %d rounds\n", round);
    return 3;
}
