/* A function split in two as BOLT splits them (tests/tracing/split_parts.rs):
 * split_parent jumps to its part split_parent.warm, which reads the
 * parent's local at the top of the stack and returns for it. The part is
 * no function: patched as one, its stub would take that local for a
 * return address. */
#include <stdio.h>

long split_parent(long x);

__asm__(".text\n"
        ".globl split_parent\n"
        ".type split_parent, @function\n"
        "split_parent:\n"
        "    push %rbx\n"
        "    mov %rdi, %rbx\n"
        "    sub $16, %rsp\n"
        "    mov %rdi, (%rsp)\n"
        "    jmp split_parent.warm\n"
        ".size split_parent, .-split_parent\n"
        ".type split_parent.warm, @function\n"
        "split_parent.warm:\n"
        "    mov (%rsp), %rax\n"
        "    add %rbx, %rax\n"
        "    add $16, %rsp\n"
        "    pop %rbx\n"
        "    ret\n"
        ".size split_parent.warm, .-split_parent.warm\n");

int main(void) {
    printf("%ld\n", split_parent(21));
    return 0;
}
