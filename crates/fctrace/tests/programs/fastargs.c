/* Arguments and return values that the agent's generated code records
 * (tests/options/fast_args.rs): integer and pointer values in registers, of every
 * size, signed and not, negative ones, the 6th argument, a hot function
 * called many times (across buffers), and triggers on the same functions.
 *
 *   fastargs        the calls below, then `hot` N times (argv[1], default 3000)
 */
#include <stdio.h>
#include <stdlib.h>

#define NOIPA __attribute__((noipa))

/* Every argument a full 64-bit register (long): the formats' sizes cut
 * them, as the test computes. */
NOIPA long six(long a, long b, long c, long d, long e, long f)
{
    return a ^ b ^ c ^ d ^ e ^ f;
}

NOIPA long neg(long x) { return -x; }

NOIPA void *bump(void *p) { return (char *)p + 1; }

NOIPA long letter(long c) { return c + 1; }

NOIPA long hot(long x) { return x * 3 + 1; }

NOIPA long on(long x) { return x + 1; }

NOIPA long off(long x) { return x + 2; }

NOIPA long inner(long x) { return x - 1; }

NOIPA long both(long x) { return inner(x) * 2; }

static char buf[16];

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3000;
    long s = 0;
    s += six(-1, -2, 0x1234567890abcdefL, -300, 0x7fff00001234L, 70000);
    s += six(0x80, 0x8000, 0x80000000L, (long)0x8000000000000000UL, 0, 0x41);
    s += neg(5);
    s += neg(-0x123456789L);
    s += (long)bump(buf) - (long)buf;
    s += letter('A');
    for (long i = 0; i < n; i++)
        s += hot(i - 1000);
    /* `on` turns tracing on (trace_on triggers), `off` off. */
    for (long i = 0; i < 3; i++) {
        s += off(i);
        s += both(i);
        s += on(i);
        s += both(i + 10);
    }
    printf("s=%ld\n", s);
    return 0;
}
