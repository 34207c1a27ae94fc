/* Calls split_code_lib.c's functions, which write the library's data
 * (tests/tracing/segments.rs). */
#include <stdio.h>

int late_code(int x);

int main(void) {
    int last = 0;
    for (int i = 1; i <= 3; i++) {
        last = late_code(i);
    }
    printf("%d\n", last);
    return 0;
}
