/*
 * cli_args.c: prints each of its arguments on a line of its own, then
 * top(argc): top calls mid, mid calls leaf. Exits with status 3 when it was
 * given arguments, 0 otherwise (so a test sees its status passed through).
 */
#include <stdio.h>

#define NOIPA __attribute__((noipa))

NOIPA int leaf(int x)
{
    return x + 1;
}

NOIPA int mid(int x)
{
    return leaf(x) * 2;
}

NOIPA int top(int x)
{
    return mid(x) + 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        puts(argv[i]);
    printf("top: %d\n", top(argc));
    return argc > 1 ? 3 : 0;
}
