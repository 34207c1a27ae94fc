/* Built without a sanitizer (tests/runtimes/sanitizers.rs): prints its environment. */
#include <stdio.h>

extern char **environ;

int main(void) {
  for (char **e = environ; *e; e++)
    printf("plain: %s\n", *e);
  return 0;
}
