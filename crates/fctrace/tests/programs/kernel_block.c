/* kernel_block.c: main waits in wait_for_data() on a pipe that a thread
 * writes into NAP_MS milliseconds after main is blocked in its read (as
 * /proc/self/task/TID/syscall says: a loaded machine may run main late);
 * main is off the CPU meanwhile;
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

/* Whether main (thread id = the pid) is inside read(2) on the pipe. */
static int main_in_read(void) {
    char path[64], line[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    int ok = fgets(line, sizeof line, f) != 0;
    fclose(f);
    int nr = -1;
    unsigned long fd = 0;
    return !ok || (sscanf(line, "%d 0x%lx", &nr, &fd) == 2 && nr == 0 && fd == (unsigned long)fds[0]);
}

static void *late_writer(void *arg) {
    struct timespec poll = {0, 1000000L}, t = {0, NAP_MS * 1000000L};
    for (int i = 0; i < 20000 && !main_in_read(); i++)
        nanosleep(&poll, 0);
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
