/* The program of the --srcline, -L and --libname tests
 * (analysis/uftrace_srcline.rs), linked with srcline_lib.c's library:
 *
 *   main:  a() once, then prints its result
 *   a():   b()
 *   b():   lib_a(2) (library: lib_a -> lib_b)
 *
 * The tests find each function's definition line by its text below. */
#include <stdio.h>

int lib_a(int x);

static int __attribute__((noinline)) b(void)
{
	return lib_a(2);
}

static int __attribute__((noinline)) a(void)
{
	return b() + 1;
}

int main(void)
{
	printf("%d\n", a());
	return 0;
}
