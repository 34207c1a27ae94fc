/* kernel_block.c: main waits in wait_for_data() on a pipe that a thread
 * writes into after NAP_MS milliseconds (main is off the CPU meanwhile);
 * then touch_pages() maps PAGES fresh pages and writes one byte in each
 * (a page fault each). */
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGES 64
#define NAP_MS 30

static int fds[2];

static void *late_writer(void *arg) {
    struct timespec t = {0, NAP_MS * 1000000L};
    nanosleep(&t, 0);
    if (write(fds[1], "ready", 5) != 5)
        return arg;
    return 0;
}

__attribute__((noinline)) long wait_for_data(void) {
    char buf[16];
    return read(fds[0], buf, sizeof buf);
}

__attribute__((noinline)) long touch_pages(void) {
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(0, PAGES * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    for (int i = 0; i < PAGES; i++)
        p[i * page] = 1;
    munmap((void *)p, PAGES * page);
    return PAGES;
}

int main(void) {
    if (pipe(fds))
        return 1;
    pthread_t t;
    pthread_create(&t, 0, late_writer, 0);
    long n = wait_for_data();
    pthread_join(t, 0);
    long touched = touch_pages();
    printf("read %ld, touched %ld\n", n, touched);
    return 0;
}
