/* dlerror's message survives the agent (tests/hygiene/hygiene.rs): a failed dlsym,
 * then a call of a function fctrace's agent interposes (its first: the
 * agent looks the real one up then), then dlerror() must still say why
 * the lookup failed, as without fctrace. argv[1] chooses the call. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *call = argc > 1 ? argv[1] : "sigprocmask";
  void *self = dlopen(NULL, RTLD_NOW);
  void *p = dlsym(self, "no_such_function_anywhere");
  sigset_t set;
  if (!strcmp(call, "sigprocmask"))
    sigprocmask(SIG_BLOCK, NULL, &set);
  else if (!strcmp(call, "pthread_sigmask"))
    pthread_sigmask(SIG_BLOCK, NULL, &set);
  else if (!strcmp(call, "sigaction"))
    sigaction(SIGUSR1, NULL, NULL);
  else if (!strcmp(call, "signal"))
    signal(SIGUSR2, SIG_DFL);
  const char *e = dlerror();
  printf("%p %s\n", p, e ? e : "(no error)");
  return 0;
}
