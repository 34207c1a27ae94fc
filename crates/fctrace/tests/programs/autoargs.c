/* -a/--auto-args (tests/options/args.rs): functions whose parameter and return
 * types come from the debug information (enums, bool, char, floats,
 * strings, structs by value and by pointer), and calls of libc functions,
 * which have none (the built-in prototypes). noipa keeps every function
 * with its declared calling convention at -O2. Build with -fno-builtin so
 * that the libc calls stay calls. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define F __attribute__((noipa))

enum color { RED, GREEN, BLUE };
struct point { int x; int y; };
struct rect { struct point a; struct point b; };
struct mixed { double d; int i; };
struct big { long a, b, c; };

F enum color pick(enum color c) { return c == RED ? BLUE : RED; }
F int add(int a, int b) { return a + b; }
F bool is_even(unsigned n) { return n % 2 == 0; }
F char upper(char c) { return (char)(c - 32); }
F double scale(double x, float f) { return x * f; }
F int norm1(struct point p) { return abs(p.x) + abs(p.y); }
F struct point mid(struct rect r)
{
    struct point m = { (r.a.x + r.b.x) / 2, (r.a.y + r.b.y) / 2 };
    return m;
}
F double weigh(struct mixed m) { return m.d * m.i; }
F long total(struct big b) { return b.a + b.b + b.c; }
F void move_by(struct point *p, int dx) { p->x += dx; }
F struct big make_big(long v)
{
    struct big b = { v, v + 1, v + 2 };
    return b;
}
F const char *name_of(enum color c)
{
    return c == RED ? "red" : c == GREEN ? "green" : "blue";
}
F long many(long a, long b, long c, long d, long e, long f, long g, short h)
{
    return a + b + c + d + e + f + g + h;
}

int main(void)
{
    volatile long sink = 0;
    sink += pick(GREEN);
    sink += pick(RED);
    sink += add(2, 3);
    sink += is_even(4);
    sink += upper('a');
    sink += (long)scale(1.5, 2.0f);
    struct point p = { -3, 4 };
    sink += norm1(p);
    struct rect r = { { 0, 0 }, { 10, 20 } };
    sink += mid(r).x;
    struct mixed m = { 0.5, 4 };
    sink += (long)weigh(m);
    struct big b = { 1, 2, 3 };
    sink += total(b);
    move_by(&p, 1);
    sink += make_big(7).c;
    sink += name_of(BLUE)[0];
    sink += many(1, 2, 3, 4, 5, 6, 7, -8);
    char *s = malloc(16);
    strcpy(s, "abc");
    sink += (long)strlen(s);
    free(s);
    int fd = open("/dev/null", O_RDONLY);
    close(fd);
    printf("auto: %ld\n", (long)sink);
    return 0;
}
