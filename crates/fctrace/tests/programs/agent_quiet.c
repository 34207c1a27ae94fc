/* agent_quiet.c: a threaded program with a signal handler (so the agent's slow
 * paths block signals) whose threads make enough traced calls to switch
 * buffers many times, a forked child, an exec of itself, and, in mode
 * "trap", a function only the trap fallback can trace (tests/kernel/kernel.rs:
 * `report -k` equals `strace -f -c` of a native run). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 2
#define CALLS 200000
#define TRAP_CALLS 3000

int tail2(int n);
int half(int n);
int after(int n);
/* tail2 is two bytes (a jmp rel8) right before another function: no jump
 * fits, only the trap fallback's int3. */
asm("    .text\n"
    "    .p2align 4\n"
    "    .globl half\n"
    "    .type half, @function\n"
    "half:\n"
    "    movl %edi, %eax\n"
    "    sarl %eax\n"
    "    ret\n"
    "    .size half, .-half\n"
    "    .globl tail2\n"
    "    .type tail2, @function\n"
    "tail2:\n"
    "    jmp half\n"
    "    .size tail2, .-tail2\n"
    "    .globl after\n"
    "    .type after, @function\n"
    "after:\n"
    "    leal 1(%rdi), %eax\n"
    "    ret\n"
    "    .size after, .-after\n");

static volatile long sink;
static volatile sig_atomic_t got;

__attribute__((noinline)) void leaf(long i) { sink += i; }

static void on_usr1(int s) {
    (void)s;
    got++;
}

static void *worker(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++)
        leaf(i);
    getppid();
    return 0;
}

/* Joins without a futex wait whose count depends on timing: the thread
 * has ended when tryjoin succeeds (no system call while it is running). */
static void join(pthread_t t) {
    while (pthread_tryjoin_np(t, 0) == EBUSY)
        ;
}

__attribute__((noinline)) void run_threads(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], 0, worker, (void *)(long)CALLS);
    for (int i = 0; i < THREADS; i++)
        join(t[i]);
}

__attribute__((noinline)) void run_child(void) {
    pid_t p = fork();
    if (p == 0) {
        worker((void *)(long)CALLS);
        umask(022);
        _exit(0);
    }
    int st;
    waitpid(p, &st, 0);
}

__attribute__((noinline)) long run_traps(void) {
    long s = 0;
    for (int i = 0; i < TRAP_CALLS; i++)
        s += tail2(i) + after(i);
    return s;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "plain";
    if (!strcmp(mode, "trap")) {
        printf("traps: %ld\n", run_traps());
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    run_threads();
    kill(getpid(), SIGUSR1);
    run_child();
    worker((void *)(long)CALLS);
    printf("%s: signals %d\n", mode, (int)got);
    fflush(stdout);
    if (!strcmp(mode, "plain")) {
        execl("/proc/self/exe", argv[0], "again", (char *)0);
        return 1;
    }
    return 0;
}
