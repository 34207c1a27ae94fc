/*
 * samename_lib.c: a shared library with a function of the same name as
 * one of samename.c's: helper() (static here and there). lib_entry(x)
 * returns helper(x), x + 10.
 */
__attribute__((noipa)) static int helper(int x)
{
    volatile int v = x;
    return v + 10;
}

__attribute__((noipa)) int lib_entry(int x) { return helper(x); }
