/* syscalls.c: known system calls from named functions, for `record -k`.
 * Usage: syscalls SRC DST. copy_file copies SRC (of SIZE bytes, made by
 * the test) to DST 4096 bytes at a time; fail_opens opens FAILS missing
 * files; map_unmap maps and unmaps 64 KiB; nap sleeps a millisecond;
 * stat_it stats SRC; a thread calls getppid THREAD_CALLS times; a forked
 * child calls umask CHILD_CALLS times; tidy truncates, seeks and unlinks
 * DST. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAILS 5
#define THREAD_CALLS 7
#define CHILD_CALLS 3

__attribute__((noinline)) long copy_file(const char *src, const char *dst) {
    char buf[4096];
    int in = open(src, O_RDONLY);
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0)
        return -1;
    long total = 0;
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) {
        if (write(out, buf, n) != n)
            return -1;
        total += n;
    }
    close(in);
    close(out);
    return total;
}

__attribute__((noinline)) int fail_opens(void) {
    int failed = 0;
    for (int i = 0; i < FAILS; i++) {
        char path[64];
        snprintf(path, sizeof path, "/nonexistent/%d", i);
        if (open(path, O_RDONLY) < 0)
            failed++;
    }
    return failed;
}

__attribute__((noinline)) int map_unmap(void) {
    void *p = mmap(0, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    ((volatile char *)p)[0] = 1;
    return munmap(p, 65536);
}

__attribute__((noinline)) void nap(void) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, 0);
}

__attribute__((noinline)) long stat_it(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

__attribute__((noinline)) int tidy(const char *dst) {
    int fd = open(dst, O_WRONLY);
    if (fd < 0)
        return -1;
    int r = ftruncate(fd, 10) | (int)lseek(fd, 0, SEEK_END);
    close(fd);
    return r | unlink(dst);
}

static void *worker(void *arg) {
    long sum = 0;
    for (int i = 0; i < THREAD_CALLS; i++)
        sum += getppid();
    return (void *)sum;
}

__attribute__((noinline)) void child_work(void) {
    for (int i = 0; i < CHILD_CALLS; i++)
        umask(022);
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long copied = copy_file(argv[1], argv[2]);
    int failed = fail_opens();
    int unmapped = map_unmap();
    nap();
    long size = stat_it(argv[1]);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    pid_t child = fork();
    if (child == 0) {
        child_work();
        _exit(0);
    }
    int st;
    waitpid(child, &st, 0);
    int tidied = tidy(argv[2]);
    printf("copied %ld, failed %d, unmapped %d, size %ld, tidied %d\n", copied, failed, unmapped,
           size, tidied);
    return 0;
}
