/* attach_reopt.c: a running process for `fctrace -p` attached several
 * times with different options. Main waits on stdin; each line "go"
 * makes it call top(i) for i = 0 .. CALLS-1 and print the round's sum.
 * top(x) calls mid(x), leaf(x + 7) and the library's lib_outer(x);
 * mid(x) calls leaf(x). "quit" ends it (exit status 3). */
#include <stdio.h>
#include <string.h>

#define CALLS 100

int lib_outer(int x);

static volatile long sink;

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
        printf("round %d: %ld\n", ++round, sum);
        fflush(stdout);
    }
    printf("done after %d rounds\n", round);
    return 3;
}
