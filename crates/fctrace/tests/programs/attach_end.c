/* attach_end.c: a process that ends while `fctrace record -p` records it.
 * main reads commands on stdin: "go" calls the leaf `work` 100 times and
 * prints the round; "exit" returns 3 from main. It prints "ready" first,
 * then blocks in read(2) between commands (SIGTERM: the default action). */
#include <stdio.h>
#include <string.h>

static volatile long sink;

__attribute__((noinline)) long work(long x) { return x * 7 + 1; }

int main(void) {
    char line[64];
    int round = 0;
    setvbuf(stdin, NULL, _IONBF, 0);
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "exit", 4) == 0)
            return 3;
        long x = 0;
        for (int i = 0; i < 100; i++)
            x = work(x);
        sink = x;
        printf("round %d\n", ++round);
        fflush(stdout);
    }
    return 0;
}
