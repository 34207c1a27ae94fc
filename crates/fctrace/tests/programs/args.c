/* Arguments and return values (tests/options/args.rs): each function is called
 * once from main with known values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

NOINLINE int add(int a, int b) { return a + b; }

NOINLINE long sizes(signed char a, unsigned char b, short c, unsigned short d,
                    int e, unsigned f, long g, unsigned long h)
{
    return a + b + c + d + e + (long)f + g + (long)h;
}

NOINLINE int put(char c) { return c + 1; }

static char greeting[128];

NOINLINE const char *greet(const char *who)
{
    snprintf(greeting, sizeof greeting, "hello %s", who);
    return greeting;
}

NOINLINE long slen(const char *s) { return s ? (long)strlen(s) : -1; }

/* Takes a pointer it never reads (shown with /s: unreadable). */
NOINLINE long opaque(const char *p) { return p != 0; }

NOINLINE double scale(double x, float y) { return x * y; }

NOINLINE int outer(int n) { return add(n, 5); }

/* `args loop N`: N calls of add and opaque, opaque's string i % 100
 * bytes long (payloads of every size cross buffer boundaries). */
static int loop(long n)
{
    static char text[101];
    long sink = 0;
    for (long i = 0; i < n; i++) {
        sink += add((int)i, (int)i + 1);
        int len = (int)(i % 100);
        memset(text, 'a' + (int)(i % 26), (size_t)len);
        text[len] = 0;
        sink += opaque(text);
    }
    printf("loop: %ld\n", sink);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "loop") == 0)
        return loop(atol(argv[2]));
    volatile long sink = 0;
    sink += add(2, 3);
    sink += sizes(-1, 255, -300, 65535, -70000, 4000000000u, -5000000000L,
                  18000000000000000000ul);
    sink += put('A');
    sink += (long)greet("world")[0];
    sink += slen("0123456789012345678901234567890123456789012345678901234567890123456789"
                 "0123456789");
    sink += slen(NULL);
    sink += opaque((const char *)1);
    sink += (long)scale(1.5, 2.0f);
    sink += outer(7);
    printf("args: %ld\n", (long)sink);
    return 0;
}
