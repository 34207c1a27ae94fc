/* Display-side filters (tests/options/filters.rs): a call tree known by
 * construction, built at -O0 so that every call is kept as written.
 *
 * main (main thread):
 *   outer(1) via1(2) via2(3) quiet(4) outer(5) loud(6) outer(7) slow()
 *   pthread_create pthread_join printf
 * worker (a second thread): outer(8)
 *
 * outer -> inner (-> helper -> leaf, leaf), helper (-> leaf)
 * via1 -> target -> leaf;  via2 -> leaf, target -> leaf
 * quiet, loud -> leaf;     slow -> nanosleep (150 ms)
 *
 * Every call but slow and its nanosleep (and main) is a few instructions:
 * the time filter's tests put their threshold far between the two. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

int leaf(int x) { return x + 1; }
int helper(int x) { return leaf(x) * 2; }
int inner(int x) { return helper(x) + leaf(x); }
int outer(int x) { return inner(x) + helper(x); }
int target(int x) { return leaf(x); }
int via1(int x) { return target(x) + 1; }
int via2(int x) { return leaf(x) + target(x); }
int quiet(int x) { return leaf(x); }
int loud(int x) { return leaf(x); }

void slow(void)
{
    struct timespec ts = {0, 150 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *worker(void *arg) { return (void *)(long)outer((int)(long)arg); }

int main(void)
{
    int s = 0;
    s += outer(1);
    s += via1(2);
    s += via2(3);
    s += quiet(4);
    s += outer(5);
    s += loud(6);
    s += outer(7);
    slow();
    pthread_t t;
    void *r;
    pthread_create(&t, NULL, worker, (void *)8L);
    pthread_join(t, &r);
    s += (int)(long)r;
    printf("filters: %d\n", s);
    return 0;
}
