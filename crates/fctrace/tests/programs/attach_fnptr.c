/* attach_fnptr.c: a running process for `fctrace -p` that takes the
 * address of library functions while fctrace is attached and calls
 * through it after fctrace detached. One command per line on stdin:
 *   take  fp = strlen (its address, read from the program's GOT)
 *   call  prints fp("call\n")
 *   quit  ends (exit status 3)
 * Each command is answered on stdout. */
#include <stdio.h>
#include <string.h>

static size_t (*volatile fp)(const char *);

__attribute__((noinline)) void take(void) { fp = strlen; }

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "take", 4))
            take();
        else if (!strncmp(line, "call", 4))
            printf("called: %zu\n", fp(line));
        else if (!strncmp(line, "quit", 4))
            break;
        printf("ok %s", line);
        fflush(stdout);
    }
    return 3;
}
