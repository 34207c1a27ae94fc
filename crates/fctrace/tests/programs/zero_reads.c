/* Usage: zero_reads N. Reads 4 MiB from /dev/zero N times with one read
 * each (long system calls: a timer's interrupt comes inside them), then
 * prints the bytes read. The kernel tests' interrupt check (-K). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SIZE (4 << 20)

__attribute__((noinline)) long read_zeroes(int fd, char *buf) {
    return read(fd, buf, SIZE);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    char *buf = malloc(SIZE);
    int fd = open("/dev/zero", O_RDONLY);
    if (!buf || fd < 0)
        return 1;
    long total = 0;
    for (int i = 0; i < n; i++)
        total += read_zeroes(fd, buf);
    printf("%ld\n", total);
    return 0;
}
