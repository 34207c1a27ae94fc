/*
 * tui_more.c: a program for the TUI's info view, session list, fields,
 * longest child and source line keys (tests/analysis/tui.rs). By
 * construction:
 *   waiter calls nap_short (5 ms), nap_long (60 ms) and nap_mid (20 ms),
 *   in that order: its longest child is nap_long;
 *   ticker is called 4 times from main, sleeping 2, 4, 6 and 8 ms: its
 *   shortest call is at least 2 ms, its longest at least 8 ms;
 *   with the argument "again", main then execs itself with "child": a
 *   second session, whose main calls child_work 3 times and nothing else.
 * It prints "parent" (and "child 9" from the second session).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noipa)) void nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

__attribute__((noipa)) void nap_short(void) { nap(5); }

__attribute__((noipa)) void nap_long(void) { nap(60); }

__attribute__((noipa)) void nap_mid(void) { nap(20); }

__attribute__((noipa)) void waiter(void) {
    nap_short();
    nap_long();
    nap_mid();
}

__attribute__((noipa)) void ticker(long ms) { nap(ms); }

__attribute__((noipa)) int child_work(int x) { return x * 2 + 1; }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int s = 0;
        for (int i = 0; i < 3; i++)
            s += child_work(i);
        printf("child %d\n", s);
        return 0;
    }
    waiter();
    for (long ms = 2; ms <= 8; ms += 2)
        ticker(ms);
    printf("parent\n");
    if (argc > 1 && strcmp(argv[1], "again") == 0) {
        fflush(stdout);
        execl(argv[0], argv[0], "child", (char *)NULL);
        return 1;
    }
    return 0;
}
