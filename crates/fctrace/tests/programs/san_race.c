/* ThreadSanitizer test program (tests/runtimes/sanitizers.rs): a data race through
 * nested functions, made deterministic: the worker writes, then tells the
 * main thread with a relaxed atomic (no happens-before for TSan), which
 * reads through its own nested calls while the worker waits (still
 * running) until the main thread is done. */
#include <pthread.h>
#include <stdio.h>

int shared;
static int written, done;

__attribute__((noinline)) void bump3(void) { shared++; }
__attribute__((noinline)) void bump2(void) { bump3(); }
__attribute__((noinline)) void bump1(void) { bump2(); }
__attribute__((noinline)) int peek3(void) { return shared; }
__attribute__((noinline)) int peek2(void) { return peek3() + 0; }
__attribute__((noinline)) int peek1(void) { return peek2() + 0; }

static void *worker(void *arg) {
  (void)arg;
  bump1();
  __atomic_store_n(&written, 1, __ATOMIC_RELAXED);
  while (!__atomic_load_n(&done, __ATOMIC_RELAXED))
    ;
  return NULL;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  while (!__atomic_load_n(&written, __ATOMIC_RELAXED))
    ;
  int v = peek1();
  __atomic_store_n(&done, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  printf("%d\n", v);
  return 0;
}
