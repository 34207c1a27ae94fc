/*
 * interleave.c: two threads, then a forked child, whose calls come in an
 * order known from the source, for the time-ordered tree (tests/tracing/shape.rs).
 *
 * The threads take turns: `handoff` wakes the other thread and waits for
 * its turn to come back, with raw system calls (inline assembly: no
 * traced call), so that no traced event of one thread races with the
 * other's. Likewise the parent waits for its forked child inside
 * `do_fork`, with a raw wait4. Keep tests/tracing/shape.rs in step.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))
#define INLINE static inline __attribute__((always_inline))

static int to_worker[2], to_main[2];

INLINE long raw4(long n, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

INLINE void raw_put(int fd)
{
    char c = 'x';
    raw4(SYS_write, fd, (long)&c, 1, 0);
}

INLINE void raw_get(int fd)
{
    char c;
    while (raw4(SYS_read, fd, (long)&c, 1, 0) != 1) {
    }
}

NOIPA int ping(int x) { return x + 1; }

NOIPA int pong(int x) { return x * 2; }

/* Wakes the other thread, then waits for the turn to come back. */
NOIPA void handoff(int out, int in)
{
    raw_put(out);
    raw_get(in);
}

NOIPA void *worker(void *arg)
{
    (void)arg;
    raw_put(to_main[1]); /* started */
    raw_get(to_worker[0]);
    pong(1);
    handoff(to_main[1], to_worker[0]);
    pong(2);
    /* Never returns: the process exits while it waits. */
    handoff(to_main[1], to_worker[0]);
    return 0;
}

NOIPA int child_work(int x) { return x + 3; }

/* Forks; the parent returns only once the child has ended. */
NOIPA int do_fork(void)
{
    int pid = fork();
    if (pid > 0) {
        int status = 0;
        raw4(SYS_wait4, pid, (long)&status, 0, 0);
    }
    return pid;
}

NOIPA int threads(void)
{
    pthread_t t;
    if (pipe(to_worker) || pipe(to_main))
        return 1;
    if (pthread_create(&t, 0, worker, 0))
        return 1;
    raw_get(to_main[0]); /* the worker runs */
    ping(1);
    handoff(to_worker[1], to_main[0]);
    ping(2);
    handoff(to_worker[1], to_main[0]);
    ping(3);
    return 0;
}

NOIPA int forks(void)
{
    if (do_fork() == 0) {
        child_work(1);
        _exit(0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)argv;
    /* Any argument: fork. */
    int rc = argc > 1 ? forks() : threads();
    puts("done");
    return rc;
}
