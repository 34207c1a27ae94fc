/* trap_shapes.cpp: functions no jump fits, traced through the trap
 * fallback (an int3 handled by the agent's SIGTRAP handler), and what the
 * program does with SIGTRAP itself (tests/tracing/trap_fallback.rs). Built with
 * -O2 -falign-functions=1: no alignment padding between functions.
 *
 *   in_parent   C, 4 bytes (lea; ret), the next function right after it
 *   S::S(int)   C++ constructor, 3 bytes (mov [rdi], esi; ret)
 *   tail2       asm, 2 bytes: a tail jump (jmp rel8) to half, and the
 *               next function right after it
 *   rloop       asm: its loop branches back to its first instruction, and
 *               it calls leafc and itself
 *
 * Modes (argv[1]): plain, threads, handler (the program's own SIGTRAP
 * handler, installed late, runs its own int3 and calls the shapes),
 * blocked (SIGTRAP blocked by sigprocmask/pthread_sigmask), exec_blocked
 * (blocked by the raw system call, then exec'd as plain), ignored
 * (SIGTRAP set to SIG_IGN), altstack (the shapes called from a handler on
 * an alternate stack), resethand (a SIGTRAP handler with SA_RESETHAND runs
 * once, at the program's int3, then the default action through signal()),
 * int3 (the program's own int3 without a handler: killed by SIGTRAP). Each
 * prints the calls it made.
 */
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" {
int tail2(int n);
int half(int n);
void rloop(int n);
long leafc_calls;
__attribute__((noinline)) void leafc(int n) { leafc_calls += n > 0; }
}

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
    /* void rloop(int n): while (n > 0) { leafc(n); if (n == 3) rloop(1);
       n--; }, the loop's head being the entry. */
    "    .globl rloop\n"
    "    .type rloop, @function\n"
    "rloop:\n"
    "    testl %edi, %edi\n"
    "    jle 9f\n"
    "    pushq %rbx\n"
    "    movl %edi, %ebx\n"
    "    call leafc\n"
    "    cmpl $3, %ebx\n"
    "    jne 1f\n"
    "    movl $1, %edi\n"
    "    call rloop\n"
    "1:  leal -1(%rbx), %edi\n"
    "    popq %rbx\n"
    "    jmp rloop\n"
    "9:  ret\n"
    "    .size rloop, .-rloop\n");

extern "C" __attribute__((noinline)) int in_parent(int n) { return n * 2; }

extern "C" __attribute__((noinline)) int after_parent(int n) { return n * 3 + in_parent(n); }

struct S {
    int v;
    __attribute__((noinline)) explicit S(int x) : v(x) {}
};

static volatile long sink;
/* Calls made by one round: in_parent 2 (one through after_parent),
 * after_parent 1, S::S 1, tail2 1, half 1, rloop 2 (one nested), leafc 6. */
static void round_of_calls(int i) {
    sink = sink + in_parent(i) + after_parent(i);
    S s(i);
    sink = sink + s.v + tail2(i);
    rloop(5);
}

static void print_counts(const char *mode, long rounds) {
    std::printf("%s: rounds=%ld in_parent=%ld after_parent=%ld S::S(int)=%ld tail2=%ld half=%ld "
                "rloop=%ld leafc=%ld\n",
                mode, rounds, 2 * rounds, rounds, rounds, rounds, rounds, 2 * rounds,
                leafc_calls);
}

static volatile sig_atomic_t traps_seen;
static long handler_rounds;
static volatile int on_alt_stack;

static void on_trap(int) {
    traps_seen = traps_seen + 1;
    round_of_calls(7); /* the shapes, from inside the SIGTRAP handler */
    handler_rounds++;
}

static void *thread_main(void *arg) {
    long n = (long)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr); /* SIGTRAP included */
    for (long i = 0; i < n; i++)
        round_of_calls((int)i);
    return nullptr;
}

static char alt_stack[1 << 16];

static void on_usr1(int) {
    char local;
    on_alt_stack = &local >= alt_stack && &local < alt_stack + sizeof alt_stack;
    round_of_calls(3);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "plain";
    long rounds = argc > 2 ? std::atol(argv[2]) : 1000;
    if (!std::strcmp(mode, "plain")) {
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        print_counts(mode, rounds);
    } else if (!std::strcmp(mode, "threads")) {
        pthread_t t[4];
        for (auto &x : t)
            pthread_create(&x, nullptr, thread_main, (void *)rounds);
        for (auto &x : t)
            pthread_join(x, nullptr);
        /* leafc_calls is racy across threads: derive it. */
        leafc_calls = 6 * 4 * rounds;
        print_counts(mode, 4 * rounds);
    } else if (!std::strcmp(mode, "handler")) {
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        struct sigaction sa, old;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_trap;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGTRAP);
        sigaction(SIGTRAP, &sa, nullptr);
        sigaction(SIGTRAP, nullptr, &old);
        std::printf("handler installed: same=%d nodefer=%d trap_in_mask=%d\n",
                    old.sa_handler == on_trap, (old.sa_flags & SA_NODEFER) != 0,
                    sigismember(&old.sa_mask, SIGTRAP));
        for (int k = 0; k < 3; k++)
            asm volatile("int3");
        raise(SIGTRAP);
        std::printf("traps seen by the program: %d\n", (int)traps_seen);
        print_counts(mode, rounds + handler_rounds);
    } else if (!std::strcmp(mode, "blocked")) {
        sigset_t s, old;
        sigemptyset(&s);
        sigaddset(&s, SIGTRAP);
        sigprocmask(SIG_BLOCK, &s, nullptr);
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        sigprocmask(SIG_SETMASK, nullptr, &old);
        print_counts(mode, rounds);
    } else if (!std::strcmp(mode, "ignored")) {
        void (*prev)(int) = signal(SIGTRAP, SIG_IGN);
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        void (*now)(int) = signal(SIGTRAP, SIG_DFL);
        std::printf("ignored: before=%s then=%s\n", prev == SIG_DFL ? "SIG_DFL" : "other",
                    now == SIG_IGN ? "SIG_IGN" : "other");
        print_counts(mode, rounds);
    } else if (!std::strcmp(mode, "altstack")) {
        stack_t ss;
        ss.ss_sp = alt_stack;
        ss.ss_size = sizeof alt_stack;
        ss.ss_flags = 0;
        sigaltstack(&ss, nullptr);
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaddset(&sa.sa_mask, SIGTRAP);
        sigaction(SIGUSR1, &sa, nullptr);
        for (long i = 0; i < rounds; i++) {
            round_of_calls((int)i);
            if (i % 100 == 0)
                raise(SIGUSR1);
        }
        std::printf("handler on the alternate stack: %d\n", (int)on_alt_stack);
        print_counts(mode, rounds + (rounds + 99) / 100);
    } else if (!std::strcmp(mode, "resethand")) {
        struct sigaction sa, q;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_trap;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTRAP, &sa, nullptr);
        for (long i = 0; i < rounds; i++) /* the tracer's traps must not reset it */
            round_of_calls((int)i);
        sigaction(SIGTRAP, nullptr, &q);
        std::printf("before: mine=%d resethand=%d\n", q.sa_handler == on_trap,
                    (q.sa_flags & SA_RESETHAND) != 0);
        asm volatile("int3"); /* runs the handler once, which resets it */
        sigaction(SIGTRAP, nullptr, &q);
        std::printf("after: default=%d traps seen=%d\n", q.sa_handler == SIG_DFL, (int)traps_seen);
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        signal(SIGTRAP, on_trap);
        void (*was)(int) = signal(SIGTRAP, SIG_DFL);
        std::printf("signal(): was mine=%d\n", was == on_trap);
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        print_counts(mode, 3 * rounds + handler_rounds);
        std::fflush(stdout);
        asm volatile("int3"); /* the default action: killed */
        std::printf("not reached\n");
    } else if (!std::strcmp(mode, "exec_blocked")) {
        /* SIGTRAP blocked by the raw system call, then exec: the new image
           starts with it blocked. */
        unsigned long set = 1UL << (SIGTRAP - 1);
        syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, nullptr, sizeof set);
        execl("/proc/self/exe", argv[0], "plain", argv[2], (char *)nullptr);
        std::perror("execl");
        return 1;
    } else if (!std::strcmp(mode, "int3")) {
        for (long i = 0; i < rounds; i++)
            round_of_calls((int)i);
        print_counts(mode, rounds);
        std::fflush(stdout);
        asm volatile("int3");
        std::printf("not reached\n");
    } else {
        std::fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
