/* stream.c: the program of tests/options/stream.rs (record --host and
 * recv). main calls a() three times, a calls b, b calls c: nothing else
 * without arguments. With a file name, it first creates that file (the
 * test checks it never ran); with "wait", it prints "ready" and waits for
 * a line on its stdin first (the test cuts the receiver meanwhile). */
#include <stdio.h>
#include <string.h>

int c(int x) { return x + 1; }
int b(int x) { return c(x) * 2; }
int a(int x) { return b(x) + 1; }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        char line[16];
        puts("ready");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 2;
    } else if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        if (f)
            fclose(f);
    }
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += a(i);
    return s == 15 ? 0 : 1;
}
