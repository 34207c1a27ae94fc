/*
 * patch_shapes.c: functions whose entry a 5-byte jump cannot cover, because
 * a branch inside them lands in their first 5 bytes, and which also make
 * calls (or have a jump table), so that the whole function cannot be moved
 * into a stub either. fctrace gives them a 2-byte `jmp rel8` entry to a
 * 5-byte jump in padding within reach (docs/engine.md, "Patching an
 * entry"). Each placement of that 5-byte jump has its function here:
 *
 *   mark_near     C, at -O2: `push %rbx; mov %rdi,%rbx` then the head of
 *                 a loop (gcc's tail call of itself) at offset 4, and
 *                 calls; short enough for the padding after it (Lua's
 *                 reallymarkobject has this prologue and loop)
 *   far_before    asm: loop head at offset 4, calls, too long for the
 *                 padding after it; 15 bytes of padding before it (after
 *                 donor, a 1-byte function whose own 5-byte jump takes the
 *                 first 4 of them)
 *   far_inside    asm: endbr64, then the same; no padding before it (the
 *                 function before ends at its first byte), dead alignment
 *                 padding after a `jmp` inside it
 *   far_claimed   asm: the same, where the only padding in reach is the 5
 *                 bytes after donor2 (3 bytes long), whose own 5-byte jump
 *                 takes 2 of them: it must never share them (it takes
 *                 the trap fallback)
 *   entry_loop    asm: its loop branches back to its first instruction,
 *                 and it calls (a 2-byte jump at the entry would count
 *                 every iteration as a call): the trap fallback, which
 *                 tells a jump back from a call
 *
 * The call counts are in tests/tracing/patch_shapes.rs (and equal callgrind's).
 */
#include <stdio.h>
#include <stdlib.h>

#define NOIPA __attribute__((noipa))
#define NOINLINE __attribute__((noinline))

struct obj {
    unsigned char marked;
    struct obj *next, *child;
    long v;
};

volatile long sink;

NOIPA void visit(struct obj *o) { sink += o->v; }

NOIPA int leaf(void) { return (int)(sink & 1); }

/* A list walked by a loop that gcc makes of the tail call; the loop head
 * follows the 4-byte prologue. Marks children by a real recursive call. */
NOINLINE void mark_near(struct obj *o)
{
    for (;;) {
        o->marked = 1;
        visit(o);
        if (o->child && !o->child->marked)
            mark_near(o->child);
        o = o->next;
        if (!o || o->marked)
            return;
    }
}

/* int far_*(int n): n >= 1 calls of leaf, then 45 adds; returns the number
 * of adds. The loop head (`1:`) is at offset 4 after the entry (after
 * endbr64 for far_inside): inside the 5 bytes a plain jump would cover. */
#define FILLER                                                                 \
    "    xorl %eax, %eax\n"                                                    \
    "    .rept 45\n"                                                           \
    "    addl $1, %eax\n"                                                      \
    "    .endr\n"

__asm__(
    "    .text\n"
    "    .p2align 4\n"
    "    .globl donor\n"
    "    .type donor, @function\n"
    "donor:\n"
    "    ret\n"
    "    .size donor, .-donor\n"
    "    .p2align 4\n"
    "    .globl far_before\n"
    "    .type far_before, @function\n"
    "far_before:\n"
    "    pushq %rbx\n"
    "    movq %rdi, %rbx\n"
    "1:  call leaf@PLT\n"
    "    subl $1, %ebx\n"
    "    jg 1b\n"
    FILLER
    "    popq %rbx\n"
    "    ret\n"
    "    .size far_before, .-far_before\n"

    "    .p2align 4\n"
    "    .globl seven\n"
    "    .type seven, @function\n"
    "seven:\n"
    "    movl $7, %eax\n"
    "    ret\n"
    "    .size seven, .-seven\n"
    "    .globl far_inside\n"
    "    .type far_inside, @function\n"
    "far_inside:\n"
    "    endbr64\n"
    "    pushq %rbx\n"
    "    movq %rdi, %rbx\n"
    "1:  call leaf@PLT\n"
    "    subl $1, %ebx\n"
    "    jg 1b\n"
    "    jmp 2f\n"
    "    .p2align 4\n"
    "2:\n"
    FILLER
    "    popq %rbx\n"
    "    ret\n"
    "    .size far_inside, .-far_inside\n"

    "    .p2align 4\n"
    "    .globl donor2\n"
    "    .type donor2, @function\n"
    "donor2:\n"
    "    xorl %eax, %eax\n"
    "    ret\n"
    "    .size donor2, .-donor2\n"
    "    .p2align 3\n"
    "    .globl far_claimed\n"
    "    .type far_claimed, @function\n"
    "far_claimed:\n"
    "    pushq %rbx\n"
    "    movq %rdi, %rbx\n"
    "1:  call leaf@PLT\n"
    "    subl $1, %ebx\n"
    "    jg 1b\n"
    FILLER
    "    popq %rbx\n"
    "    ret\n"
    "    .size far_claimed, .-far_claimed\n"

    /* int entry_loop(void): calls leaf while --loops > 0. */
    "    .p2align 4\n"
    "    .globl entry_loop\n"
    "    .type entry_loop, @function\n"
    "entry_loop:\n"
    "    subq $8, %rsp\n"
    "    call leaf@PLT\n"
    "    addq $8, %rsp\n"
    "    subl $1, loops(%rip)\n"
    "    jg entry_loop\n"
    "    ret\n"
    "    .size entry_loop, .-entry_loop\n");

void donor(void);
int far_before(int n);
int seven(void);
int far_inside(int n);
int donor2(void);
int far_claimed(int n);
int entry_loop(void);
int loops;

/* A list of n nodes; every third one has a child node of its own. */
static struct obj *make(int n)
{
    struct obj *a = calloc(2 * n, sizeof *a);
    for (int i = 0; i < n; i++) {
        a[i].v = i;
        a[i].next = i + 1 < n ? &a[i + 1] : NULL;
        a[i].child = i % 3 == 0 ? &a[n + i] : NULL;
        a[n + i].v = 1000 + i;
    }
    return a;
}

int main(void)
{
    struct obj *a = make(100);
    mark_near(a);
    long acc = 0;
    for (int i = 0; i < 10; i++) {
        donor();
        acc += far_before(3) + seven() + far_inside(4) + donor2() + far_claimed(5);
    }
    loops = 6;
    acc += entry_loop();
    printf("patch_shapes: sink=%ld acc=%ld\n", (long)sink, acc);
    free(a);
    return 0;
}
