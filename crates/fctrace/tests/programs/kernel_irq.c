/* Long system calls that run on the CPU (reads of /dev/zero, 128 MiB each:
 * the kernel clears the buffer, tens of milliseconds, so the timer
 * interrupts them), for `record -K`'s interrupt marks (tests/kernel). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define READS 4
#define SIZE (128u << 20)

__attribute__((noinline)) long big_read(int fd, char *buf) {
    return read(fd, buf, SIZE);
}

int main(void) {
    char *buf = malloc(SIZE);
    int fd = open("/dev/zero", O_RDONLY);
    if (!buf || fd < 0)
        return 2;
    long total = 0;
    for (int i = 0; i < READS; i++)
        total += big_read(fd, buf);
    close(fd);
    printf("read %ld\n", total);
    return 0;
}
