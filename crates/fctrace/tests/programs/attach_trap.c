// A program with its own SIGTRAP handler (installed at start, as Go does
// for every signal), for go_cgo.rs: attached to, fctrace must not give it
// the trap fallback's int3. tiny2 (3 bytes between two functions, no
// padding around it) fits no jump. It prints "ready", then per "run" line
// calls tiny2 and next_fn 1000 times each (printing "round N"), and at
// "quit" prints how many SIGTRAPs its handler saw.
#include <signal.h>
#include <stdio.h>
#include <string.h>

__asm__(".text\n"
        ".p2align 4\n"
        ".globl pre_fn\n.type pre_fn,@function\npre_fn:\n  mov $1, %eax\n  ret\n.size pre_fn, .-pre_fn\n"
        ".globl tiny2\n.type tiny2,@function\ntiny2:\n  xor %eax, %eax\n  ret\n.size tiny2, .-tiny2\n"
        ".globl next_fn\n.type next_fn,@function\nnext_fn:\n  mov $7, %eax\n  ret\n.size next_fn, .-next_fn\n");

int pre_fn(void);
int tiny2(void);
int next_fn(void);

static volatile sig_atomic_t traps;

static void on_trap(int sig) {
    (void)sig;
    traps++;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_trap;
    sigaction(SIGTRAP, &sa, NULL);
    int (*volatile f)(void) = tiny2;
    int (*volatile g)(void) = next_fn;
    long total = pre_fn();
    printf("ready\n");
    fflush(stdout);
    char line[64];
    int round = 0;
    while (fgets(line, sizeof line, stdin) && strcmp(line, "run\n") == 0) {
        for (int i = 0; i < 1000; i++)
            total += f() + g();
        printf("round %d\n", ++round);
        fflush(stdout);
    }
    printf("total %ld, traps seen %d\n", total, (int)traps);
    return 0;
}
