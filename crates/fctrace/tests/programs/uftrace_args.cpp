/* uftrace's argument specs (tests/options/uftrace_args.rs): stack
 * arguments, floats of each size, octal, std::string, and functions whose
 * types come from the debug information (built with -g). */
#include <cstdio>
#include <string>

extern "C" {
__attribute__((noinline)) long many(long a, long b, long c, long d, long e, long f, long g,
                                    long h)
{
    return a + b + c + d + e + f + g + h;
}
__attribute__((noinline)) double mix(float x, double y) { return x + y; }
__attribute__((noinline)) long double twice(long double x) { return x * 2; }
__attribute__((noinline)) int perm(int mode) { return mode & 0777; }
__attribute__((noinline)) int typed(int n, const char *s) { return n + (s[0] == 'a'); }
__attribute__((noinline)) int str_first(const char *s) { return s[0]; }
__attribute__((noinline)) int str_second(const char *s) { return s[1]; }
__attribute__((noinline)) int apply(int (*f)(int), int x) { return f(x); }
}

__attribute__((noinline)) unsigned long slen(const std::string &s) { return s.size(); }

int main()
{
    long sum = many(1, 2, 3, 4, 5, 6, 7, 8);
    double d = mix(1.5f, 2.25);
    long double l = twice(3.5L);
    int p = perm(0755);
    int t = typed(3, "abc");
    std::string hello("hello world");
    unsigned long n = slen(hello);
    std::string big(40, 'x');
    n += slen(big);
    int c = str_first("xy") + str_second("xy") + apply(perm, 8);
    std::printf("%ld %g %Lg %o %d %lu %d\n", sum, d, l, p, t, n, c);
    return 0;
}
