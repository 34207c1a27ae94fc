/* Built without a sanitizer (tests/sanitizers.rs): prints its environment. */
#include <stdio.h>

extern char **environ;

int main(void) {
  for (char **e = environ; *e; e++)
    printf("plain: %s\n", *e);
  return 0;
}
