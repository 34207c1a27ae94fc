/* What fctrace's failures must not do to a program (tests/processes/robustness.rs).
 *
 *   robust calls THREADS N        THREADS threads, each calling work() N times
 *   robust pause THREADS N        the same, after printing "ready <pid>" and
 *                                 reading a line from stdin (the test kills
 *                                 fctrace in between)
 *   robust scribble THREADS N     writes garbage over fctrace's shared memory
 *                                 (found in /proc/self/maps), then as `calls`
 *   robust seccomp THREADS N      installs a seccomp filter that kills the
 *                                 process on nanosleep/clock_nanosleep, then
 *                                 as `calls`
 *   robust serial THREADS N       THREADS threads one after the other
 *   robust slow THREADS N         as `calls`, each call taking some time
 *                                 (a thread keeps a buffer for long)
 *
 * Every mode prints the sum of what work() returned and exits 0. The
 * program's own functions called per thread: worker once, work N times.
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static long calls_per_thread;
static long spin; /* iterations of an empty loop in each work() call */

__attribute__((noinline)) long work(long i) {
    for (long j = 0; j < spin; j++)
        __asm__ volatile("");
    return (i * 7) % 13;
}

__attribute__((noinline)) void *worker(void *arg) {
    long sum = 0;
    for (long i = 0; i < calls_per_thread; i++)
        sum += work(i);
    *(long *)arg = sum;
    return NULL;
}

static long run_threads(int n, int serial) {
    pthread_t *t = calloc(n, sizeof *t);
    long *sums = calloc(n, sizeof *sums);
    long total = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, worker, &sums[i]) != 0) {
            perror("pthread_create");
            exit(2);
        }
        if (serial)
            pthread_join(t[i], NULL);
    }
    for (int i = 0; i < n; i++) {
        if (!serial)
            pthread_join(t[i], NULL);
        total += sums[i];
    }
    free(t);
    free(sums);
    return total;
}

/* The fctrace shared memory's mapping: [lo, hi). */
static int find_shm(uintptr_t *lo, uintptr_t *hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "memfd:fctrace-shm")) {
            unsigned long a, b;
            if (sscanf(line, "%lx-%lx", &a, &b) == 2) {
                *lo = a;
                *hi = b;
                found = 1;
                break;
            }
        }
    }
    if (f)
        fclose(f);
    return found;
}

static void scribble(void) {
    uintptr_t lo, hi;
    if (!find_shm(&lo, &hi))
        return; /* not traced: nothing to damage */
    unsigned char *base = (unsigned char *)lo;
    uint32_t buf_count, task_slots;
    memcpy(&buf_count, base + 12, 4);
    memcpy(&task_slots, base + 20, 4);
    /* The header after its sizes, and both lists of buffer indices. */
    size_t queues = 4096 + (size_t)task_slots * 64;
    size_t queues_len = (size_t)buf_count * 16 * 2;
    uint32_t x = 12345;
    for (size_t i = 24; i < 4096; i++) {
        x = x * 1103515245u + 12345u;
        base[i] = x >> 24;
    }
    for (size_t i = 0; i < queues_len && queues + i < hi - lo; i++) {
        x = x * 1103515245u + 12345u;
        base[queues + i] = x >> 24;
    }
}

static void forbid_sleeping(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_nanosleep, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clock_nanosleep, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: robust MODE THREADS N\n");
        return 2;
    }
    const char *mode = argv[1];
    int threads = atoi(argv[2]);
    calls_per_thread = atol(argv[3]);
    int serial = 0;
    if (!strcmp(mode, "pause")) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return 4;
    } else if (!strcmp(mode, "scribble")) {
        scribble();
    } else if (!strcmp(mode, "seccomp")) {
        forbid_sleeping();
    } else if (!strcmp(mode, "serial")) {
        serial = 1;
    } else if (!strcmp(mode, "slow")) {
        spin = 20000;
    } else if (strcmp(mode, "calls")) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    long total = run_threads(threads, serial);
    printf("%s: %d threads x %ld calls: sum %ld\n", mode, threads, calls_per_thread, total);
    return 0;
}
