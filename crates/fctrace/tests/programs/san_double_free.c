/* Built without a sanitizer, run with the user's own
 * LD_PRELOAD=libasan.so.8 (tests/runtimes/sanitizers.rs): ASan's malloc and free
 * catch a double free through three nested functions. Prints the
 * LD_PRELOAD it sees. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void release3(char *p) { free(p); }
__attribute__((noinline)) void release2(char *p) { release3(p); }
__attribute__((noinline)) void release1(char *p) { release2(p); }

int main(void) {
  const char *pre = getenv("LD_PRELOAD");
  printf("LD_PRELOAD=%s\n", pre ? pre : "(unset)");
  fflush(stdout);
  char *p = malloc(32);
  release1(p);
  release1(p);
  return 0;
}
