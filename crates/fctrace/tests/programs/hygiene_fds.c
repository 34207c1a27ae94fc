/* Closes every descriptor above stderr, opens a file of its own (which
 * gets the lowest free number), loads a library (dlopen) and writes to
 * its file; then prints what the file holds. With -l, the agent writes
 * the library's symbol lines at the dlopen: they must not land in the
 * program's file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_line(int fd, const char *s) {
    return write(fd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    write_line(fd, "first line\n");
    void *h = dlopen("libm.so.6", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    double (*f)(double) = (double (*)(double))dlsym(h, "cbrt");
    printf("cbrt(8) = %.1f\n", f(8.0));
    write_line(fd, "second line\n");
    dlclose(h);
    write_line(fd, "third line\n");
    close(fd);

    char buf[4096];
    int in = open(argv[1], O_RDONLY);
    ssize_t n = read(in, buf, sizeof buf - 1);
    close(in);
    if (n < 0)
        return 1;
    buf[n] = 0;
    printf("file holds %zd bytes:\n%s", n, buf);
    return 0;
}
