/*
 * thread_endings.c: threads that end abnormally.
 *
 *   ./thread_endings exit       a thread calls pthread_exit three frames
 *                               down (x_outer -> x_middle -> x_inner); a
 *                               cleanup handler pushed in x_middle runs
 *   ./thread_endings cancel     a thread blocked in read() three frames down
 *                               (c_outer -> c_middle -> c_inner) is
 *                               cancelled; cleanup handlers pushed in c_outer
 *                               and c_middle run, innermost first
 *   ./thread_endings detached   a detached thread is still blocked three
 *                               frames down when main returns
 *   ./thread_endings loop N     N threads of each of the first two kinds,
 *                               one after the other, for the counts
 *
 * Built as C (cleanup handlers registered with glibc and run by it) and
 * with -fexceptions (cleanup handlers run by the unwinder's landing pads),
 * and as C++ (g++: pthread_cleanup_push is an object whose destructor runs
 * the handler).
 * No sleeps: the cancelled thread tells main it is about to block with
 * sem_post (not a cancellation point), so cancellation acts inside read()
 * (the first cancellation point after it) whenever it arrives. Main waits
 * for the detached thread to be inside read() by watching its
 * /proc/self/task/TID/syscall (polling with sched_yield, in wait_in_read).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* gettid; g++ defines it already */
#endif
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

volatile int sink;
static int never[2];
static sem_t ready;
static volatile pid_t detached_tid;
static int cleanups;

NOIPA void cleanup(void *arg)
{
    cleanups++;
    sink = (int)(long)arg;
}

NOIPA void x_inner(int v)
{
    sink = v;
    pthread_exit((void *)(long)v);
}

NOIPA void x_middle(int v)
{
    pthread_cleanup_push(cleanup, (void *)1L);
    x_inner(v + 1);
    pthread_cleanup_pop(0);
    sink = v;
}

NOIPA void *x_outer(void *arg)
{
    x_middle((int)(long)arg);
    sink = 0;
    return NULL;
}

NOIPA void c_inner(int v)
{
    char c;
    sink = v;
    sem_post(&ready);
    if (read(never[0], &c, 1) >= 0)
        abort();
    sink = v;
}

NOIPA void c_middle(int v)
{
    pthread_cleanup_push(cleanup, (void *)2L);
    c_inner(v + 1);
    pthread_cleanup_pop(0);
    sink = v;
}

NOIPA void *c_outer(void *arg)
{
    pthread_cleanup_push(cleanup, (void *)3L);
    c_middle((int)(long)arg);
    pthread_cleanup_pop(0);
    return NULL;
}

NOIPA void d_inner(void)
{
    char c;
    detached_tid = gettid();
    sem_post(&ready);
    if (read(never[0], &c, 1) >= 0)
        abort();
}

NOIPA void *d_outer(void *arg)
{
    d_inner();
    sink = (int)(long)arg;
    return NULL;
}

/* Returns once thread `tid` is blocked in read(never[0], ...). */
NOIPA void wait_in_read(pid_t tid)
{
    char path[64], want[32], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    snprintf(want, sizeof want, "0 0x%x ", never[0]);
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            abort();
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            if (strncmp(buf, want, strlen(want)) == 0)
                return;
        }
        sched_yield();
    }
}

NOIPA void run_exit(int v)
{
    pthread_t t;
    void *ret;
    if (pthread_create(&t, NULL, x_outer, (void *)(long)v) != 0)
        abort();
    pthread_join(t, &ret);
    sink = (int)(long)ret;
}

NOIPA void run_cancel(int v)
{
    pthread_t t;
    void *ret;
    if (pthread_create(&t, NULL, c_outer, (void *)(long)v) != 0)
        abort();
    sem_wait(&ready);
    pthread_cancel(t);
    pthread_join(t, &ret);
    sink = ret == PTHREAD_CANCELED;
}

int main(int argc, char **argv)
{
    if (pipe(never) != 0 || sem_init(&ready, 0, 0) != 0)
        abort();
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "exit") == 0) {
        run_exit(41);
        printf("exit: cleanups=%d ret=%d\n", cleanups, sink);
    } else if (strcmp(mode, "cancel") == 0) {
        run_cancel(7);
        printf("cancel: cleanups=%d canceled=%d\n", cleanups, sink);
    } else if (strcmp(mode, "detached") == 0) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, d_outer, (void *)5L) != 0)
            abort();
        sem_wait(&ready);
        wait_in_read(detached_tid);
        printf("detached: main returns while the thread waits\n");
        return 3;
    } else if (argc > 2 && strcmp(mode, "loop") == 0) {
        int n = atoi(argv[2]);
        for (int i = 0; i < n; i++) {
            run_exit(i);
            run_cancel(i);
        }
        printf("loop: cleanups=%d\n", cleanups);
    } else {
        return 2;
    }
    return 0;
}
