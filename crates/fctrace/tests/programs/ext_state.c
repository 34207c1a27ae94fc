/* The slow paths' saving of the extended state (tests/tracing/ext_state.rs, run in
 * a VM whose CPU lacks XSAVE): main keeps doubles in xmm registers across
 * the calls of step (at -O2, GCC's inter-procedural register allocation
 * knows step clobbers none), and calls it often enough to fill several
 * 64 KiB event buffers, whose switches go through the slow path; scale has
 * a float argument and result, recorded with -A/-R by the slow path. */
#include <stdio.h>

#define STEPS 5000

__attribute__((noinline)) static int step(int i) { return i * 3 + 1; }

__attribute__((noinline)) static double scale(double x, int k) { return x * k + 0.5; }

int main(void) {
    long sum = 0;
    double f = 0.5;
    for (int i = 0; i < STEPS; i++) {
        sum += step(i);
        f += 0.25;
    }
    double a = scale(1.5, 2);
    double b = scale(a, 4);
    printf("sum=%ld f=%.2f a=%.2f b=%.2f\n", sum, f, a, b);
    return 0;
}
