/*
 * processes.c: every way a traced program makes new tasks. main works,
 * starts a thread, forks, vforks and execs itself, posix_spawns itself,
 * runs itself through system() and popen(), and finally execs itself. Each run of
 * itself with an argument works once and exits with status 3.
 *
 * Every child is waited for before the next starts, so the output order is
 * fixed.
 */
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

__attribute__((noipa)) int leaf(int x) { return x + 1; }

__attribute__((noipa)) void work(const char *who)
{
    printf("%s %d\n", who, leaf(1));
    fflush(stdout);
}

__attribute__((noipa)) void *thread_main(void *arg)
{
    work("thread");
    return arg;
}

/* What a child run does: the environment must look as without fctrace. */
__attribute__((noipa)) int child_main(const char *who)
{
    work(who);
    const char *pre = getenv("LD_PRELOAD");
    int ours = 0;
    for (char **e = environ; *e; e++)
        if ((*e)[0] == 'F' && (*e)[1] == 'C' && (*e)[2] == 'T' && (*e)[3] == 'R')
            ours++;
    printf("%s: LD_PRELOAD=%s, FCTRACE variables: %d\n", who, pre ? pre : "(unset)", ours);
    return 3;
}

__attribute__((noipa)) int status_of(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

__attribute__((noipa)) void do_fork(void)
{
    pid_t p = fork();
    if (p == 0) {
        work("forked");
        _exit(5);
    }
    printf("fork: %d\n", status_of(p));
}

__attribute__((noipa)) void do_vfork(const char *self)
{
    pid_t p = vfork();
    if (p == 0) {
        execl(self, self, "vforked", (char *)0);
        _exit(127);
    }
    printf("vfork: %d\n", status_of(p));
}

__attribute__((noipa)) void do_spawn(const char *self)
{
    char *args[] = {(char *)self, (char *)"spawned", 0};
    pid_t p;
    if (posix_spawn(&p, self, 0, 0, args, environ) != 0) {
        printf("posix_spawn failed\n");
        return;
    }
    printf("posix_spawn: %d\n", status_of(p));
}

__attribute__((noipa)) void do_system(const char *self)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' system", self);
    int r = system(cmd);
    printf("system: %d\n", WIFEXITED(r) ? WEXITSTATUS(r) : -1);
}

__attribute__((noipa)) void do_popen(const char *self)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' popen", self);
    FILE *f = popen(cmd, "r");
    if (!f) {
        printf("popen failed\n");
        return;
    }
    char line[256];
    int lines = 0;
    while (fgets(line, sizeof line, f))
        lines++;
    int r = pclose(f);
    printf("popen: %d lines, status %d\n", lines, WIFEXITED(r) ? WEXITSTATUS(r) : -1);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return child_main(argv[1]);
    work("main");
    pthread_t t;
    pthread_create(&t, 0, thread_main, 0);
    pthread_join(t, 0);
    do_fork();
    do_vfork(argv[0]);
    do_spawn(argv[0]);
    do_system(argv[0]);
    do_popen(argv[0]);
    fflush(stdout);
    /* A failing exec first: the program goes on. */
    execl("/nonexistent/program", "x", (char *)0);
    perror("execl /nonexistent/program");
    execlp(argv[0], argv[0], "execd", (char *)0);
    return 1;
}
