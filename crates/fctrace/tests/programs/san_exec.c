/* Built with AddressSanitizer (tests/runtimes/sanitizers.rs): prints its
 * environment, then runs itself with `--child` (fork and execv: the child
 * prints its environment and makes a heap-use-after-free through nested
 * functions) and argv[1] (a program without sanitizer, with posix_spawn),
 * and prints how each ended. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void show(const char *who) {
  for (char **e = environ; *e; e++)
    printf("%s: %s\n", who, *e);
  fflush(stdout);
}

__attribute__((noinline)) int read3(int *p) { return p[2]; }
__attribute__((noinline)) int read2(int *p) { return read3(p) + 1; }
__attribute__((noinline)) int read1(int *p) { return read2(p) + 1; }

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--child") == 0) {
    show("asan child");
    int *p = malloc(8 * sizeof(int));
    free(p);
    return read1(p);
  }
  if (argc < 2)
    return 2;
  show("parent");
  pid_t pid = fork();
  if (pid == 0) {
    char *args[] = {argv[0], "--child", NULL};
    execv(argv[0], args);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  printf("asan child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  char *args[] = {argv[1], NULL};
  if (posix_spawn(&pid, argv[1], NULL, NULL, args, environ) != 0)
    return 3;
  waitpid(pid, &st, 0);
  printf("plain child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}
