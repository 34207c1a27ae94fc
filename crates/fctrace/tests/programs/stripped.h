/* stripped_*.c: a program of several files traced stripped (tests/tracing/stripped.rs). */
#ifndef STRIPPED_H
#define STRIPPED_H
void die(const char *what) __attribute__((cold, noreturn, noinline));
void warn_cold(const char *what, long v) __attribute__((cold, noinline));
long parse_number(const char *s);
long sum_checked(const long *a, int n);
int classify(int x, int y);
long walk(int depth);
#endif
