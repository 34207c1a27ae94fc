/* A library whose code is in two segments with its data between them, as
 * a BOLT-optimised library's is (librustc_driver: code, data, then the
 * optimised code): late_code is placed at 0x400000 by the linker
 * (tests/tracing/segments.rs), after .data and .bss. Both functions write the
 * library's data. */
int counter;
int data_value = 5;

__attribute__((noinline)) int early_code(int x) {
    counter += x;
    return counter;
}

__attribute__((noinline, section(".late_text"))) int late_code(int x) {
    data_value += early_code(x);
    return data_value;
}
