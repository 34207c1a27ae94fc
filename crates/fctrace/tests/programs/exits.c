/*
 * exits.c: ends the way it is told, for fctrace record's exit status.
 *   exits code N    returns N from main
 *   exits signal N  kills itself with signal N (after a call, so the trace
 *                   has something to show)
 *   exits args ...  prints its arguments, one per line
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noipa)) int work(int x) { return x * 2 + 1; }

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "code") == 0)
        return work(0) == 1 ? atoi(argv[2]) : 99;
    if (argc >= 3 && strcmp(argv[1], "signal") == 0) {
        int sig = atoi(argv[2]);
        work(sig);
        fflush(stdout);
        raise(sig);
        return 98; /* not reached for a fatal signal */
    }
    if (argc >= 2 && strcmp(argv[1], "args") == 0) {
        for (int i = 2; i < argc; i++)
            printf("[%s]\n", argv[i]);
        return 0;
    }
    fprintf(stderr, "usage: exits code N | signal N | args ...\n");
    return 2;
}
