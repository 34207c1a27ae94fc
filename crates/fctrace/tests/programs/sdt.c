/* The program of the SDT probe tests (--list-event, -E): probes of
 * <sys/sdt.h> in the program (app:start, app:step with one argument, in
 * a loop of 3; app:gated, whose argument is computed only while its
 * semaphore is raised, as a tool that records it raises it) and in its
 * library sdt_lib.c (applib:work with two). */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <sys/sdt.h>

/* The probes' semaphores (<sys/sdt.h> names them provider_name_semaphore). */
#define SEMAPHORE(n) __extension__ unsigned short n __attribute__((unused, section(".probes")))
SEMAPHORE(app_start_semaphore);
SEMAPHORE(app_step_semaphore);
SEMAPHORE(app_gated_semaphore);

void lib_work(int a, long b);

/* What app:gated's argument costs: called only while the probe is on. */
__attribute__((noinline)) int expensive(int i) {
    return i * 7;
}

int main(void) {
    STAP_PROBE(app, start);
    for (int i = 0; i < 3; i++) {
        STAP_PROBE1(app, step, i);
        if (__builtin_expect(app_gated_semaphore, 0))
            STAP_PROBE1(app, gated, expensive(i));
        lib_work(i, 10L * i);
    }
    puts("done");
    return 0;
}
