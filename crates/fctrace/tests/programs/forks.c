/*
 * forks.c: children that run on inside calls their parent entered before
 * they existed. main calls with_fork (fork: the child works, then _exits),
 * with_daemon (a child calls daemon(1, 1): the child _exits inside daemon,
 * the grandchild it made works, tells through a pipe and _exits; the
 * pipe's end of file tells main the grandchild is done) and with_vfork
 * (vfork, then the child execs this program with the argument "exec",
 * whose main works and returns 3). Each parent waits for its child before
 * it goes on, and flushes what it printed before the next fork, so the
 * output order is fixed. main returns 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noipa)) int leaf(int x)
{
    volatile int v = x;
    return v + 1;
}

__attribute__((noipa)) void child_work(const char *who)
{
    printf("%s %d\n", who, leaf(1));
    fflush(stdout);
}

__attribute__((noipa)) void with_fork(void)
{
    pid_t p = fork();
    if (p == 0) {
        child_work("forked");
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("fork: %d\n", WEXITSTATUS(st));
    fflush(stdout);
}

__attribute__((noipa)) void with_daemon(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return;
    pid_t p = fork();
    if (p == 0) {
        close(fds[0]);
        if (daemon(1, 1) == 0) {
            child_work("daemon");
            write(fds[1], "x", 1);
        }
        _exit(0);
    }
    close(fds[1]);
    int st = 0;
    waitpid(p, &st, 0);
    char buf[8];
    ssize_t n, total = 0;
    while ((n = read(fds[0], buf, sizeof buf)) > 0)
        total += n;
    printf("daemon: %d byte\n", (int)total);
    fflush(stdout);
}

__attribute__((noipa)) void with_vfork(const char *self)
{
    pid_t p = vfork();
    if (p == 0) {
        execl(self, self, "exec", (char *)0);
        _exit(127);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("vfork: %d\n", WEXITSTATUS(st));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        child_work(argv[1]);
        return 3;
    }
    with_fork();
    with_daemon();
    with_vfork(argv[0]);
    return 0;
}
