/*
 * dlhost.c: loads a plugin at run time (dlopen), calls its functions
 * (which call back into the program), opens it a second time while it is
 * loaded, unloads it (dlclose), loads it again and calls it again.
 *
 *   dlhost PLUGIN.so N    N rounds of load / call / unload
 *
 * Built with -rdynamic so that the plugin can call host_log.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static long total;

__attribute__((noipa)) void host_log(int v) { total += v; }

__attribute__((noipa)) int host_twice(int x) { return 2 * x; }

/* calls back into the plugin, through the pointer the program looked up */
static int (*square)(int);

__attribute__((noipa)) int host_callback(int x) { return host_twice(square(x)); }

__attribute__((noipa)) int run_plugin(void *h, int x)
{
    int (*compute)(int, int (*)(int)) = (int (*)(int, int (*)(int)))dlsym(h, "plugin_compute");
    square = (int (*)(int))dlsym(h, "plugin_square");
    return compute(x, host_callback);
}

__attribute__((noipa)) int one_round(const char *path, int x)
{
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    int r = run_plugin(h, x);
    /* opened a second time while loaded: the same object, one more
       reference; closing it leaves the plugin loaded */
    void *again = dlopen(path, RTLD_NOW);
    if (again != h) {
        fprintf(stderr, "dlopen again: %s\n", again ? "another handle" : dlerror());
        exit(1);
    }
    r += run_plugin(again, x + 1);
    dlclose(again);
    int (*ncalls)(void) = (int (*)(void))dlsym(h, "plugin_calls");
    r += ncalls();
    dlclose(h);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int n = argc > 2 ? atoi(argv[2]) : 2;
    long sum = 0;
    for (int i = 1; i <= n; i++)
        sum += one_round(argv[1], i);
    printf("dlhost: %d rounds, sum %ld, total %ld\n", n, sum, total);
    return 0;
}
