/* The program of the SDT probe tests (--list-event, -E): probes of
 * <sys/sdt.h> in the program (app:start, app:step with one argument, in
 * a loop of 3) and in its library sdt_lib.c (applib:work with two). */
#include <stdio.h>
#include <sys/sdt.h>

void lib_work(int a, long b);

int main(void) {
    STAP_PROBE(app, start);
    for (int i = 0; i < 3; i++) {
        STAP_PROBE1(app, step, i);
        lib_work(i, 10L * i);
    }
    puts("done");
    return 0;
}
