/* kernel_signals.c: signals the kernel delivers, each from a named
 * function, with handlers installed for all three (SIGCHLD's default
 * action would discard it unseen, as it is without a tracer):
 *   raise_usr1()   raise(SIGUSR1) RAISES times (tgkill: SI_TKILL)
 *   kill_usr1()    kill(getpid(), SIGUSR1) KILLS times (SI_USER)
 *   poke_usr1()    pthread_kill(pthread_self(), SIGUSR1) once (SI_TKILL)
 *   reap_child()   CHILDREN times: a child that exits at once, waited for
 *                  (one SIGCHLD each, CLD_EXITED)
 *   wait_alarm()   ALARMS times: a 5 ms ITIMER_REAL (SIGALRM, SI_KERNEL);
 *                  its handler writes into a pipe the function reads
 *                  (SA_RESTART: the read goes on after the handler)
 * With an argument: crash_abort() (abort(): SIGABRT, SI_TKILL) or
 * crash_segv() (a write through NULL: SIGSEGV, SEGV_MAPERR), left at
 * their default actions.
 * Nothing sleeps to synchronise: waits and pipes. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define RAISES 3
#define KILLS 2
#define CHILDREN 2
#define ALARMS 2

static volatile sig_atomic_t usr1, chld, alrm;
static int fds[2];

__attribute__((noinline)) void on_usr1(int sig) { usr1 += sig > 0; }
__attribute__((noinline)) void on_chld(int sig) { chld += sig > 0; }
__attribute__((noinline)) void on_alrm(int sig) {
    alrm += sig > 0;
    if (write(fds[1], "a", 1) != 1)
        _exit(3);
}

static void handle(int sig, void (*h)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, 0);
}

__attribute__((noinline)) void raise_usr1(void) {
    for (int i = 0; i < RAISES; i++)
        raise(SIGUSR1);
}

__attribute__((noinline)) void kill_usr1(void) {
    for (int i = 0; i < KILLS; i++)
        kill(getpid(), SIGUSR1);
}

__attribute__((noinline)) void poke_usr1(void) { pthread_kill(pthread_self(), SIGUSR1); }

__attribute__((noinline)) int reap_child(void) {
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    return st;
}

__attribute__((noinline)) int wait_alarm(void) {
    struct itimerval t;
    memset(&t, 0, sizeof t);
    t.it_value.tv_usec = 5000;
    setitimer(ITIMER_REAL, &t, 0);
    char c;
    return (int)read(fds[0], &c, 1);
}

__attribute__((noinline)) void crash_abort(void) { abort(); }

__attribute__((noinline)) void crash_segv(volatile int *p) { *p = 1; }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "abort") == 0)
        crash_abort();
    if (argc > 1 && strcmp(argv[1], "segv") == 0)
        crash_segv((volatile int *)(argc - 2));
    if (pipe(fds) != 0)
        return 2;
    handle(SIGUSR1, on_usr1);
    handle(SIGCHLD, on_chld);
    handle(SIGALRM, on_alrm);
    raise_usr1();
    kill_usr1();
    poke_usr1();
    for (int i = 0; i < CHILDREN; i++)
        reap_child();
    for (int i = 0; i < ALARMS; i++)
        wait_alarm();
    printf("usr1 %d chld %d alrm %d\n", (int)usr1, (int)chld, (int)alrm);
    return 0;
}
