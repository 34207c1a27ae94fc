/* Record-time filters and triggers (tests/options/record_filters.rs). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static jmp_buf jb;
static volatile int handled;

int leaf(int x) { return x + 1; }
int mid(int x) { return leaf(x) + leaf(x + 1); }
int top(int x) { return mid(x) + leaf(x); }
int other(int x) { return mid(x) * 2; }
int on(int x) { return leaf(x); }
int off(int x) { return leaf(x); }
void thrower(int x) { leaf(x); longjmp(jb, 1); }
int hidden(int x) { mid(x); thrower(x); return 0; }
int rec(int n) { return n <= 0 ? leaf(n) : rec(n - 1) + mid(n); }
void handler(int sig) { handled = leaf(sig); }

/* Threads: the worker calls off() while main waits for it in a loop
   without calls (no sleep), so main's later calls come after it. */
static int go, done;

static void *worker(void *arg) {
    while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST))
        ;
    int s = off((int)(long)arg);
    __atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
    s += top(2);
    return (void *)(long)s;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    int s = 0;
    if (!strcmp(mode, "basic")) {
        s += top(1);
        s += other(2);
        s += off(3);
        s += top(4);
        s += on(5);
        s += top(6);
    } else if (!strcmp(mode, "longjmp")) {
        if (!setjmp(jb))
            s += hidden(1);
        s += top(2);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t;
        void *r;
        s += top(1);
        pthread_create(&t, NULL, worker, (void *)1L);
        __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
        while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST))
            ;
        s += top(3);
        pthread_join(t, &r);
        s += (int)(long)r;
    } else if (!strcmp(mode, "signal")) {
        s += top(1);
        raise(SIGUSR1);
        s += top(2);
    } else if (!strcmp(mode, "handler")) {
        signal(SIGUSR1, handler);
        s += top(1);
        raise(SIGUSR1);
        s += top(2);
        s += handled;
    } else if (!strcmp(mode, "ignore")) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigaction(SIGUSR1, &sa, NULL);
        s += top(1);
        raise(SIGUSR1);
        s += top(2);
        sigaction(SIGUSR1, NULL, &old);
        s += old.sa_handler == SIG_IGN;
    } else if (!strcmp(mode, "recurse")) {
        s += top(1);
        s += rec(2);
        s += leaf(3);
        s += rec(1);
    } else if (!strcmp(mode, "loop")) {
        /* Many calls of leaf and mid from outside any function. */
        for (int i = 0; i < 1000; i++)
            s += leaf(i) + mid(i);
    }
    printf("%s %d\n", mode, s);
    return 0;
}
