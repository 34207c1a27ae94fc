/* sigcount.c: counts the SIGINTs and SIGTERMs it gets. `sigcount FIFO
 * MODE`: installs its handlers (MODE `info`: sigaction with SA_SIGINFO,
 * noting each signal's si_code and si_pid; `plain`: signal(), counting
 * only, and a query of its SIGTERM action must not show SA_SIGINFO),
 * writes `ready <pid>` to FIFO (empty: nothing), waits in pause()
 * for a signal, then counts whatever else arrives in the next half
 * second (a second copy of the same signal would), prints
 * `count N code C from P` (C and P of the last signal; -1 in plain mode)
 * and exits 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t count, code = -1, from = -1;

static void on_info(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)uc;
    count++;
    code = info->si_code;
    from = info->si_pid;
}

static void on_plain(int sig) {
    (void)sig;
    count++;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    if (strcmp(argv[2], "info") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_info;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    } else {
        signal(SIGINT, on_plain);
        signal(SIGTERM, on_plain);
        /* What it installed, as a query shows it. */
        struct sigaction q;
        sigaction(SIGTERM, NULL, &q);
        if (q.sa_flags & SA_SIGINFO)
            printf("SIGTERM's action has SA_SIGINFO\n");
    }
    if (argv[1][0]) {
        FILE *f = fopen(argv[1], "w");
        if (!f)
            return 2;
        fprintf(f, "ready %d\n", (int)getpid());
        fclose(f);
    }
    while (count == 0)
        pause();
    struct timespec t = {0, 500 * 1000 * 1000};
    while (nanosleep(&t, &t) == -1 && errno == EINTR)
        ;
    printf("count %d code %d from %d\n", (int)count, (int)code, (int)from);
    return 0;
}
