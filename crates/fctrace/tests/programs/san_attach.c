/* AddressSanitizer program that fctrace attaches to (tests/attach/attach.rs):
 * says "ready", then reads commands on stdin (main waits in read_command).
 * "keep": allocates a block and frees it through nested functions (ASan
 * collects both stacks, while fctrace may be attached) and keeps the
 * pointer; "use": reads the freed block through nested functions, a
 * heap-use-after-free whose report names the access, the free and the
 * allocation with their callers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int *kept;

__attribute__((noinline)) static int *make(void) {
  int *p = malloc(16 * sizeof(int));
  p[0] = 1;
  return p;
}
__attribute__((noinline)) void drop(int *p) { free(p); }
__attribute__((noinline)) void keep2(void) {
  kept = make();
  drop(kept);
}
__attribute__((noinline)) void keep1(void) { keep2(); }
__attribute__((noinline)) int use3(int *p) { return p[3]; }
__attribute__((noinline)) int use2(int *p) { return use3(p) + 1; }
__attribute__((noinline)) int use1(int *p) { return use2(p) + 1; }

/* One line of stdin, by read(2) (the thread waits in read). */
__attribute__((noinline)) static int read_command(char *buf, size_t len) {
  size_t n = 0;
  while (n + 1 < len) {
    char c;
    if (read(0, &c, 1) != 1)
      return 0;
    if (c == '\n')
      break;
    buf[n++] = c;
  }
  buf[n] = 0;
  return 1;
}

int main(void) {
  char cmd[64];
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("ready\n");
  while (read_command(cmd, sizeof cmd)) {
    if (!strcmp(cmd, "keep")) {
      keep1();
      printf("kept\n");
    } else if (!strcmp(cmd, "use")) {
      printf("%d\n", use1(kept));
    } else if (!strcmp(cmd, "quit")) {
      break;
    }
  }
  return 0;
}
