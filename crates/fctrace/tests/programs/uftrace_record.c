/* uftrace's record options and trigger actions
 * (tests/options/uftrace_record.rs): main calls a() three times, a calls
 * b, b calls c; then big() (a long body) and tiny(); it prints the sum. */
#include <stdio.h>

int c(int x) { return x + 1; }
int b(int x) { return c(x) * 2; }
int a(int x) { return b(x) + 3; }
int tiny(int x) { return x; }

int big(int x)
{
    volatile int v[8];
    for (int i = 0; i < 8; i++)
        v[i] = x * i + (x ^ i) - (i << 2);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

int main(void)
{
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += a(i);
    s += big(s);
    s += tiny(s);
    printf("%d\n", s);
    return 0;
}
