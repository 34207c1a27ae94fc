/* The program of the test of graph's uftrace shape
 * (analysis/uftrace_graph_dump.rs), uftrace's s-sort.c call structure:
 *
 *   main:  foo() twice, then bar()
 *   foo(): loop() three times
 *   bar(): loop() once
 *
 * It calls nothing else and prints nothing: its status says whether the
 * sum came out (280). */

static int __attribute__((noinline)) loop(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += i;
	return s;
}

static int __attribute__((noinline)) foo(void)
{
	int s = 0;
	for (int i = 0; i < 3; i++)
		s += loop(10);
	return s;
}

static int __attribute__((noinline)) bar(void)
{
	return loop(5);
}

int main(void)
{
	int s = foo() + foo() + bar();
	return s == 280 ? 0 : 1;
}
