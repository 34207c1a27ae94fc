/* The flight recorder's test program (tests/processes/ring.rs). Every call of the
 * source is a call of the binary (built without inlining or tail calls).
 *
 *   ring crash N     N calls of work (each calls leaf twice), then a
 *                    SIGSEGV in run > parse > deref
 *   ring threads N   three threads make N calls each of tick, tock and
 *                    tack; after they all did, the tack thread crashes in
 *                    crash_parse > deref while the others wait in idle
 *   ring block N     N calls of work, prints its pid, then blocks in read
 *                    (the test kills it with SIGKILL)
 *   ring wait N      N calls of work, prints "ready", then blocks in read;
 *                    given a byte, crashes in run's parse > deref (end
 *                    of stdin: exits 0)
 *   ring stages N    N calls of work, then marker (a snapshot trigger),
 *                    then for each line read from stdin 3 calls of after;
 *                    exits 0 at the end of stdin
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long sink;
static int *volatile nowhere;
static pthread_barrier_t all_done;

__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long work(long i) { return leaf(i) + leaf(i + 1); }
__attribute__((noinline)) void deref(int *p) { *p = 42; }
__attribute__((noinline)) void parse(const char *s) { deref(s[0] == 'x' ? nowhere : (int *)&sink); }
__attribute__((noinline)) void run(long n) {
    for (long i = 0; i < n; i++)
        sink += work(i);
    parse("x");
}
__attribute__((noinline)) void marker(void) { sink = 0; }
__attribute__((noinline)) void after(int i) { sink += i; }

__attribute__((noinline)) void tick(long i) { sink += i; }
__attribute__((noinline)) void tock(long i) { sink -= i; }
__attribute__((noinline)) void tack(long i) { sink ^= i; }
__attribute__((noinline)) void crash_parse(void) { deref(nowhere); }
__attribute__((noinline)) void idle(void) { for (;;) pause(); }

static long per_thread;
static void *ticker(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++)
        tick(i);
    pthread_barrier_wait(&all_done);
    idle();
    return NULL;
}
static void *tocker(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++)
        tock(i);
    pthread_barrier_wait(&all_done);
    idle();
    return NULL;
}
static void *tacker(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++)
        tack(i);
    pthread_barrier_wait(&all_done);
    crash_parse();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long n = atol(argv[2]);
    if (!strcmp(argv[1], "crash")) {
        run(n);
    } else if (!strcmp(argv[1], "threads")) {
        pthread_t t[3];
        per_thread = n;
        pthread_barrier_init(&all_done, NULL, 3);
        pthread_create(&t[0], NULL, ticker, NULL);
        pthread_create(&t[1], NULL, tocker, NULL);
        pthread_create(&t[2], NULL, tacker, NULL);
        pthread_join(t[2], NULL);
    } else if (!strcmp(argv[1], "block")) {
        char c;
        for (long i = 0; i < n; i++)
            sink += work(i);
        printf("%d\n", (int)getpid());
        fflush(stdout);
        if (read(0, &c, 1) < 0)
            return 1;
    } else if (!strcmp(argv[1], "wait")) {
        char c;
        for (long i = 0; i < n; i++)
            sink += work(i);
        puts("ready");
        fflush(stdout);
        if (read(0, &c, 1) == 1)
            run(0);
    } else if (!strcmp(argv[1], "stages")) {
        char line[64];
        for (long i = 0; i < n; i++)
            sink += work(i);
        marker();
        while (fgets(line, sizeof line, stdin))
            for (int i = 0; i < 3; i++)
                after(i);
    } else {
        return 2;
    }
    return 0;
}
