// A C program that calls Go code in a shared library (programs/go_cshared,
// built with -buildmode=c-shared) for fctrace's tests (go_cgo.rs).
#include <stdio.h>

extern int GoWork(int n);

__attribute__((noinline)) int host_add(int a) { return a + 1; }

int main(void) {
    int t = 0;
    for (int i = 0; i < 3; i++)
        t += GoWork(host_add(i));
    printf("host %d\n", t);
    return 0;
}
