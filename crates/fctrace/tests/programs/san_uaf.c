/* AddressSanitizer test program (tests/runtimes/sanitizers.rs): a heap-use-after-
 * free through three nested functions; ASan's report names the access,
 * the free and the allocation with their callers. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static int *make(void) {
  int *p = malloc(16 * sizeof(int));
  p[0] = 1;
  return p;
}
__attribute__((noinline)) void drop(int *p) { free(p); }
__attribute__((noinline)) int use3(int *p) { return p[3]; }
__attribute__((noinline)) int use2(int *p) { return use3(p) + 1; }
__attribute__((noinline)) int use1(int *p) { return use2(p) + 1; }

int main(void) {
  int *p = make();
  drop(p);
  printf("%d\n", use1(p));
  return 0;
}
