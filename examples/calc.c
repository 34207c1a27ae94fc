/* A small recursive-descent calculator: the example that README's quick
 * start traces. `calc "2*(3+4)-10/5"` prints 12. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

static const char *p;

static void skip_spaces(void) {
    while (isspace((unsigned char)*p))
        p++;
}

static long expr(void);

static long number(void) {
    char *end;
    long v = strtol(p, &end, 10);
    p = end;
    return v;
}

static long factor(void) {
    skip_spaces();
    if (*p == '(') {
        p++;
        long v = expr();
        skip_spaces();
        if (*p == ')')
            p++;
        return v;
    }
    return number();
}

static long term(void) {
    long v = factor();
    for (;;) {
        skip_spaces();
        if (*p == '*') { p++; v *= factor(); }
        else if (*p == '/') { p++; long d = factor(); v = d ? v / d : 0; }
        else return v;
    }
}

static long expr(void) {
    long v = term();
    for (;;) {
        skip_spaces();
        if (*p == '+') { p++; v += term(); }
        else if (*p == '-') { p++; v -= term(); }
        else return v;
    }
}

int main(int argc, char **argv) {
    p = argc > 1 ? argv[1] : "2*(3+4)-10/5";
    printf("%ld\n", expr());
    return 0;
}
