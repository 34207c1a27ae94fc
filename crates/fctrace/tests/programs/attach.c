/* attach.c: a running process for `fctrace -p`. Two compute threads call
 * the tiny leaf `tick` as fast as they can; a reader thread blocks in
 * read(2) on a pipe; main waits on stdin. Each line "go" on stdin makes
 * main call `step` STEPS times, wait until each compute thread has made
 * TICKS more calls of `tick`, and write a message into the pipe, which
 * the reader reads whole (an EINTR would show in its line) and hands to
 * `got`. "fork" does the same in a child process it forks and waits for
 * (the child calls `step` STEPS times and `got` once, then exits).
 * "stay" forks a child that calls `step` every millisecond until main
 * quits, then does a round. "quit" ends the threads (and such a child)
 * and the program (exit status 3). */
#include <errno.h>
#include <poll.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 1000
#define TICKS 1000

static volatile int stop;
static volatile long sink;
static int fds[2];
static volatile long ticks[2];
/* The child "stay" forked, and the pipe that keeps it going. */
static pid_t stay_pid;
static int stay_fd = -1;

__attribute__((noinline)) int tick(int x) { return x + 1; }
__attribute__((noinline)) long step(long x) { sink += x; return sink; }
__attribute__((noinline)) void got(const char *msg, long n) {
    printf("reader: %ld bytes: %.*s\n", n, (int)n, msg);
    fflush(stdout);
}

/* Main waits for its commands in here (a traced call in progress while
 * fctrace attaches or detaches). */
static volatile int commands;
__attribute__((noinline)) char *read_command(char *line, int n) {
    char *got = fgets(line, n, stdin);
    commands++; /* (not a tail call: read_command stays on the stack) */
    return got;
}

static void *compute(void *arg) {
    volatile long *n = &ticks[(long)arg];
    int (*volatile f)(int) = tick;
    int x = 0;
    while (!stop) {
        x = f(x);
        ++*n;
    }
    return (void *)(long)x;
}

static void *reader(void *arg) {
    char buf[128];
    for (;;) {
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0) {
            printf("reader: read failed: %s\n", strerror(errno));
            fflush(stdout);
            continue;
        }
        if (n == 0)
            return 0;
        got(buf, n);
    }
}

int main(void) {
    if (pipe(fds))
        return 1;
    pthread_t c[2], r;
    for (int i = 0; i < 2; i++)
        pthread_create(&c[i], 0, compute, (void *)(long)i);
    pthread_create(&r, 0, reader, 0);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    int round = 0;
    while (read_command(line, sizeof line)) {
        if (!strncmp(line, "quit", 4))
            break;
        if (!strncmp(line, "stay", 4) && !stay_pid) {
            int p[2];
            if (pipe(p))
                return 2;
            fflush(stdout);
            pid_t child = fork();
            if (child == 0) {
                close(p[1]);
                struct pollfd pf = {p[0], POLLIN, 0};
                /* Until main closes its end (end of file). */
                for (long i = 0; poll(&pf, 1, 1) == 0; i++)
                    step(i);
                _exit(0);
            }
            close(p[0]);
            stay_fd = p[1];
            stay_pid = child;
        }
        if (!strncmp(line, "fork", 4)) {
            fflush(stdout);
            pid_t child = fork();
            if (child == 0) {
                for (long i = 0; i < STEPS; i++)
                    step(i);
                char msg[64];
                int n = snprintf(msg, sizeof msg, "forked child %d", round + 1);
                got(msg, n);
                _exit(0);
            }
            int st;
            waitpid(child, &st, 0);
        }
        long from[2] = {ticks[0], ticks[1]};
        for (long i = 0; i < STEPS; i++)
            step(i);
        for (int i = 0; i < 2; i++)
            while (ticks[i] < from[i] + TICKS)
                usleep(100);
        char msg[64];
        int n = snprintf(msg, sizeof msg, "round %d", ++round);
        if (write(fds[1], msg, n) != n)
            return 2;
    }
    if (stay_pid) {
        int st;
        close(stay_fd);
        waitpid(stay_pid, &st, 0);
    }
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(c[i], 0);
    close(fds[1]);
    pthread_join(r, 0);
    printf("done after %d rounds\n", round);
    return 3;
}
