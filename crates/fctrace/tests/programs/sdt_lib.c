/* The library of sdt.c: one SDT probe, applib:work, with two arguments. */
#include <sys/sdt.h>

volatile long sdt_lib_sink;

void lib_work(int a, long b) {
    STAP_PROBE2(applib, work, a, b);
    sdt_lib_sink += a + b;
}
