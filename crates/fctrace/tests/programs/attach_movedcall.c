/* attach_movedcall.c: a running process for `fctrace -p` whose function
 * `waiter` begins with a call among its first 5 bytes (sub $8,%rsp; call
 * block_read), which fctrace's patch moves into a stub: a thread blocked
 * in block_read while fctrace detaches returns into that stub. Built
 * without tail calls. One command per line on stdin:
 *   wait  waiter() reads one more line, blocked in read(2)
 *   quit  ends (exit status 3) */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char got[64];

/* One line from stdin, a byte at a time (no buffering ahead); 0 at its end. */
static int read_line(char *buf, size_t size) {
    size_t n = 0;
    char c;
    while (n + 1 < size && read(0, &c, 1) == 1) {
        buf[n++] = c;
        if (c == '\n')
            break;
    }
    buf[n] = 0;
    return n > 0;
}

__attribute__((noinline)) void block_read(void) {
    read_line(got, sizeof got);
}

__attribute__((noinline)) void waiter(void) {
    block_read();
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (read_line(line, sizeof line)) {
        if (!strncmp(line, "wait", 4)) {
            printf("waiting\n");
            fflush(stdout);
            waiter();
            printf("got %s", got);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        }
        printf("ok\n");
        fflush(stdout);
    }
    return 3;
}
