/* tests/analysis/flame.rs and tests/analysis/parquet.rs: a small program whose call paths
 * are known from its source. main parses twice (3 and 2 tokens), a thread
 * parses 4 tokens, then main computes fib(5) (15 calls, at 5 depths).
 * Prints the results. */
#include <pthread.h>
#include <stdio.h>

volatile int sink;

__attribute__((noinline)) void lex(int i) { sink += i; }

__attribute__((noinline)) void parse(int n) {
  for (int i = 0; i < n; i++)
    lex(i);
}

__attribute__((noinline)) int fib(int n) {
  return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

void *worker(void *arg) {
  parse(*(int *)arg);
  return NULL;
}

int main(void) {
  parse(3);
  parse(2);
  int four = 4;
  pthread_t t;
  pthread_create(&t, NULL, worker, &four);
  pthread_join(t, NULL);
  printf("sink %d fib(5) %d\n", sink, fib(5));
  return 0;
}
