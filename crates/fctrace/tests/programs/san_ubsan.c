/* UndefinedBehaviorSanitizer test program (tests/runtimes/sanitizers.rs): a signed
 * overflow through three nested functions, reported with its stack under
 * UBSAN_OPTIONS=print_stacktrace=1. */
#include <limits.h>
#include <stdio.h>

__attribute__((noinline)) int add3(int a, int b) { return a + b; }
__attribute__((noinline)) int add2(int a, int b) { return add3(a, b) + 0; }
__attribute__((noinline)) int add1(int a, int b) { return add2(a, b) + 0; }

int main(int argc, char **argv) {
  (void)argv;
  printf("%d\n", add1(INT_MAX, argc));
  return 0;
}
