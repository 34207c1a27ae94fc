/* Built with AddressSanitizer (tests/sanitizers.rs): prints its
 * environment, then runs argv[1] (an ASan program) with fork and execv and
 * argv[2] (a program without sanitizer) with posix_spawn, and prints how
 * each ended. */
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void show(const char *who) {
  for (char **e = environ; *e; e++)
    printf("%s: %s\n", who, *e);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  show("parent");
  pid_t pid = fork();
  if (pid == 0) {
    char *args[] = {argv[1], NULL};
    execv(argv[1], args);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  printf("asan child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  char *args[] = {argv[2], NULL};
  if (posix_spawn(&pid, argv[2], NULL, NULL, args, environ) != 0)
    return 3;
  waitpid(pid, &st, 0);
  printf("plain child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}
