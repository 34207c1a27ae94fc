/*
 * plugin.c: a library the dlopen test (dlhost.c) loads at run time. It
 * calls back into the program (host_log, exported with -rdynamic) and the
 * program calls back into it through a function pointer (plugin_square).
 */
extern void host_log(int v);

static int calls;

/* run by the dynamic linker inside dlopen and dlclose */
__attribute__((constructor, noipa)) static void plugin_init(void) { calls = 0; }
__attribute__((destructor, noipa)) static void plugin_fini(void) { calls = -1; }

__attribute__((noipa)) int plugin_square(int x) { return x * x; }

__attribute__((noipa)) static int plugin_helper(int x)
{
    calls++;
    host_log(x);
    return plugin_square(x) + 1;
}

__attribute__((noipa)) int plugin_compute(int x, int (*cb)(int))
{
    return plugin_helper(x) + cb(x);
}

__attribute__((noipa)) int plugin_calls(void) { return calls; }
