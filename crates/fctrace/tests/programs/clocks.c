/* `record --clock`: reads clock argv[1] (1 CLOCK_MONOTONIC, 4
 * CLOCK_MONOTONIC_RAW, 7 CLOCK_BOOTTIME) just before and just after
 * calling mark(), which makes a system call, and prints both readings in
 * nanoseconds: mark()'s entry and its getppid must be between them on the
 * trace's timeline (tests/options/uftrace_record.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int mark(void) {
    return getppid() > 0;
}

static unsigned long long now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    clockid_t c = (clockid_t)atoi(argv[1]);
    unsigned long long before = now(c);
    int ok = mark();
    unsigned long long after = now(c);
    printf("%llu %llu %d\n", before, after, ok);
    return 0;
}
