/* 40,000 short threads, made and joined in batches of 8, under an address
 * space limit (RLIMIT_AS) the program sets itself: what it had at start
 * plus 1 GiB. Then it allocates (and touches) 256 MiB, which fits natively.
 * Each thread calls work() once, which calls leaf() twice. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define THREADS 40000
#define BATCH 8

static volatile long sink;

__attribute__((noinline)) static long leaf(long x) {
    sink += x;
    return x + 1;
}

__attribute__((noinline)) static long work(long i) {
    return leaf(i) + leaf(i + 1);
}

static void *thread_main(void *arg) {
    work((long)arg);
    return NULL;
}

static unsigned long vm_size(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * 4096;
}

int main(void) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = vm_size() + (1ul << 30);
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        perror("setrlimit");
        return 1;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int made = 0;
    for (int i = 0; i < THREADS; i += BATCH) {
        pthread_t t[BATCH];
        for (int j = 0; j < BATCH; j++) {
            int e = pthread_create(&t[j], &attr, thread_main, (void *)(long)(i + j));
            if (e != 0) {
                fprintf(stderr, "pthread_create %d: %s\n", i + j, strerror(e));
                return 1;
            }
            made++;
        }
        for (int j = 0; j < BATCH; j++)
            pthread_join(t[j], NULL);
    }
    size_t big = 256u << 20;
    char *p = malloc(big);
    if (!p) {
        fprintf(stderr, "malloc of 256 MiB failed\n");
        return 1;
    }
    memset(p, 1, big);
    printf("%d threads, 256 MiB allocated\n", made);
    free(p);
    return 0;
}
