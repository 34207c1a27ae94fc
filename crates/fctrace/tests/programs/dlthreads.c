/*
 * dlthreads.c: threads keep calling the program's functions and, while it
 * is loaded, the plugin's (plugin.c), while the main thread loads and
 * unloads the plugin over and over.
 *
 *   dlthreads PLUGIN.so ROUNDS
 *
 * stdout is deterministic; stderr gives the counts that depend on timing:
 * "calls W P" (W: host_twice calls by the workers, P: plugin_square calls
 * by the workers).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define WORKERS 2

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static int (*square)(int);
static atomic_int stop;
static atomic_long worker_calls, plugin_calls_made;
static atomic_int progress, allowed;

void host_log(int v) { (void)v; }

__attribute__((noipa)) int host_twice(int x) { return 2 * x; }

__attribute__((noipa)) int host_callback(int x) { return host_twice(x); }

static void *worker(void *arg)
{
    (void)arg;
    long n = 0, p = 0;
    while (!atomic_load(&stop)) {
        /* iterations are handed out by the main thread, a few per phase */
        int have = atomic_load(&progress);
        if (have >= atomic_load(&allowed) ||
            !atomic_compare_exchange_weak(&progress, &have, have + 1))
            continue;
        host_twice((int)n);
        n++;
        pthread_rwlock_rdlock(&lock);
        if (square) {
            square((int)n);
            p++;
        }
        pthread_rwlock_unlock(&lock);
    }
    atomic_fetch_add(&worker_calls, n);
    atomic_fetch_add(&plugin_calls_made, p);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int rounds = atoi(argv[2]);
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    long sum = 0;
    for (int r = 1; r <= rounds; r++) {
        /* the workers run while the plugin is loaded and patched */
        atomic_fetch_add(&allowed, 40);
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        int (*compute)(int, int (*)(int)) = (int (*)(int, int (*)(int)))dlsym(h, "plugin_compute");
        pthread_rwlock_wrlock(&lock);
        square = (int (*)(int))dlsym(h, "plugin_square");
        pthread_rwlock_unlock(&lock);
        sum += compute(r, host_callback);
        /* and while it is loaded */
        int more = atomic_fetch_add(&allowed, 40) + 40;
        while (atomic_load(&progress) < more)
            ;
        pthread_rwlock_wrlock(&lock);
        square = NULL;
        pthread_rwlock_unlock(&lock);
        dlclose(h);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    printf("dlthreads: %d rounds, sum %ld\n", rounds, sum);
    fprintf(stderr, "calls %ld %ld\n", atomic_load(&worker_calls), atomic_load(&plugin_calls_made));
    return 0;
}
