/* A program with a function named as V8's builtins are (tests/v8.rs):
 * fctrace takes it for a V8 embedder (node) and leaves its functions
 * alone. */
#include <stdio.h>

__attribute__((noinline)) int Builtins_Example(int x) {
    return x + 1;
}

__attribute__((noinline)) int work(int x) {
    return Builtins_Example(x) * 2;
}

int main(void) {
    printf("%d\n", work(20));
    return 0;
}
