/*
 * tree.c: a program whose call tree is known by construction, at -O0 and
 * at -O2. Every function that -O2 could inline, clone, merge or drop is
 * `noipa` (noinline + noclone + no inter-procedural analysis, so gcc can
 * neither inline it nor delete a call to it as "pure"), except the ones
 * that are there precisely to be cloned.
 *
 * Shapes the tests check with objdump before trusting this program:
 *   inc         4 bytes at -O2 (lea 0x1(%rdi),%eax; ret)
 *   g -> h      at -O2, g ends with `jmp h`; h is entered only by that jump
 *   spin_entry  its own first instruction is the target of its loop branch
 *   sum_to      a loop branch targets offset 2, inside the first 5 bytes
 *   scale       at -O2 only reached through the clone `scale.constprop.0`
 *   checked     at -O2 has a `checked.cold` part, run once (x == 13)
 * The call tree is in tests/tracing/tree.rs; keep both in step.
 */
#include <stdio.h>
#include <string.h>

#define NOIPA __attribute__((noipa))

volatile int sink;
static char word[] = "call-tree";
char *volatile word_ptr = word;

NOIPA int inc(int x) { return x + 1; }

NOIPA int leaf(int x) { return x * 7 + 3; }

NOIPA int nest2(int x) { return leaf(x) + inc(x); }

NOIPA int nest1(int x)
{
    int a = nest2(x);
    int b = leaf(a);
    sink = b;
    return a ^ b;
}

/* Depth 3: rec(3) -> rec(2) -> rec(1) -> inc. The store after the call
 * keeps gcc from turning the recursion into a loop. */
NOIPA int rec(int n)
{
    if (n <= 1)
        return inc(n);
    int r = rec(n - 1);
    sink = r;
    return r + n;
}

/* h is reached only from g; at -O2 g's call is a sibling call: jmp h. */
NOIPA int h(int x) { return x * x - 5; }

NOIPA int g(int x) { return h(x * 3); }

/* int spin_entry(int n): for n >= 1, branches back to its own first
 * instruction n-1 times, then returns 42. One call, whatever n. */
__asm__(
    "    .text\n"
    "    .globl spin_entry\n"
    "    .type spin_entry, @function\n"
    "    .p2align 4\n"
    "spin_entry:\n"
    "    subl $1, %edi\n"
    "    jg spin_entry\n"
    "    movl $42, %eax\n"
    "    ret\n"
    "    .size spin_entry, .-spin_entry\n");
int spin_entry(int n);

/* int sum_to(int n): n + (n-1) + ... + 1 for n >= 1. The loop head is at
 * offset 2 and the loop body covers offsets 2..8: a 5-byte patch at the
 * entry would cut through a branch target. */
__asm__(
    "    .text\n"
    "    .globl sum_to\n"
    "    .type sum_to, @function\n"
    "    .p2align 4\n"
    "sum_to:\n"
    "    xorl %eax, %eax\n"
    "1:  addl %edi, %eax\n"
    "    subl $1, %edi\n"
    "    jg 1b\n"
    "    ret\n"
    "    .size sum_to, .-sum_to\n");
int sum_to(int n);

/* Only ever called with factor == 5: at -O2 gcc's IPA-CP specialises it
 * into scale.constprop.0 and calls only that. */
static __attribute__((noinline)) int scale(int x, int factor)
{
    int r = 0;
    for (int i = 0; i < factor; i++)
        r = r * 31 + (x ^ i);
    return r;
}

/* A cold function: gcc puts it in .text.unlikely, and the branch that
 * calls it in checked's separate `checked.cold` part. */
__attribute__((cold, noipa)) void rare(int x) { printf("tree: rare %d\n", x); }

NOIPA int checked(int x)
{
    if (__builtin_expect(x == 13, 0)) {
        rare(x);
        sink = x;
        return -1;
    }
    return x + 2;
}

int main(void)
{
    int total = 0;
    puts("tree: start");
    total += leaf(1);
    total += nest1(2);
    total += rec(3);
    total += g(4);
    total += spin_entry(3);
    total += sum_to(4);
    total += scale(total, 5);
    total += scale(sink, 5);
    total += checked(1);
    total += checked(13);
    size_t n = strlen(word_ptr);
    printf("tree: total=%d len=%zu\n", total, n);
    return 0;
}
