// The C side of go_cgo's program: functions that call each other, call
// back into Go, and call libc.
#include <stdio.h>
#include <stdlib.h>
#include "_cgo_export.h"

__attribute__((noinline)) int c_leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int c_middle(int x) { return c_leaf(x) + c_leaf(x + 1); }
__attribute__((noinline)) int c_top(int x) { return c_middle(x) - 1; }
__attribute__((noinline)) int c_calls_go(int x) { return goCallback(x) + c_leaf(x); }
__attribute__((noinline)) void c_print(const char *s) { fputs(s, stdout); fflush(stdout); }
__attribute__((noinline)) void free_string(char *s) { free(s); }
