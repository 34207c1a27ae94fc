/*
 * endings.c: a program that ends abnormally from deep inside, for
 * tests/processes/endings.rs. main -> descend(5) -> ... -> descend(0) -> leave(MODE):
 *   endings exit N     exit(N) (the atexit handler runs, traced)
 *   endings _exit N    _exit(N) (no atexit handler, stdio buffers lost)
 *   endings abort      abort(): SIGABRT
 *   endings segv       crash() writes through a null pointer: SIGSEGV
 *   endings wait FIFO  ready(FIFO) writes "ready <pid>\n" to the FIFO, then
 *                      wait_forever() blocks in pause() until a signal ends
 *                      the program (the test kills it)
 * Every line on stderr is written unbuffered, so what the program printed
 * is the same however it ends; stdout is buffered (lost by _exit and
 * signals, flushed by exit), the same with and without fctrace.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *mode;
static const char *arg;
volatile int sink;
int *volatile null_pointer;

__attribute__((noipa)) void cleanup_helper(void) { sink += 1; }

__attribute__((noipa)) void at_exit_handler(void)
{
    cleanup_helper();
    fputs("atexit handler\n", stderr);
}

__attribute__((noipa)) void crash(void)
{
    *null_pointer = 42;
}

__attribute__((noipa)) void ready(const char *fifo)
{
    int fd = open(fifo, O_WRONLY);
    if (fd < 0) {
        perror(fifo);
        exit(9);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "ready %d\n", (int)getpid());
    if (write(fd, line, (size_t)n) != n)
        exit(9);
    close(fd);
}

__attribute__((noipa)) void wait_forever(void)
{
    sink = 0; /* the loop must not start at the entry (at -O0 it would
                 branch into the bytes the tracer patches) */
    for (;;)
        pause();
}

__attribute__((noipa)) void leave(void)
{
    fputs("leaving\n", stderr);
    if (strcmp(mode, "exit") == 0)
        exit(atoi(arg));
    if (strcmp(mode, "_exit") == 0)
        _exit(atoi(arg));
    if (strcmp(mode, "abort") == 0)
        abort();
    if (strcmp(mode, "segv") == 0)
        crash();
    if (strcmp(mode, "wait") == 0) {
        ready(arg);
        wait_forever();
    }
    fputs("unknown mode\n", stderr);
}

__attribute__((noipa)) int descend(int n)
{
    if (n == 0)
        leave();
    else
        descend(n - 1);
    sink += n; /* not a tail call */
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("usage: endings exit N | _exit N | abort | segv | wait FIFO\n", stderr);
        return 2;
    }
    mode = argv[1];
    arg = argc > 2 ? argv[2] : "0";
    atexit(at_exit_handler);
    printf("buffered output of %s\n", mode);
    fputs("start\n", stderr);
    descend(5);
    fputs("not reached\n", stderr);
    return 1;
}
