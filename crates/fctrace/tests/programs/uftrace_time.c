/* uftrace's time= and trace trigger actions
 * (tests/options/uftrace_record.rs): slow() sleeps 30 ms then calls
 * quick(); fast() only calls quick(). */
#include <stdio.h>
#include <time.h>

void wait_ms(long ms)
{
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}
int quick(int x) { return x + 1; }
void slow(void) { wait_ms(30); quick(1); }
void fast(void) { quick(2); }

int main(void)
{
    slow();
    fast();
    printf("done\n");
    return 0;
}
