// A shared library whose initialisers run before the program's main
// (tests/initialisers.rs): a C-style constructor that calls the library's
// own functions and a hook the program defines, and a C++ static object
// whose constructor calls a function of the library.

extern "C" {
// Defined by the program (linked with -rdynamic); weak, so that the
// library also loads into a program without it.
void program_hook(int value) __attribute__((weak));

__attribute__((noinline)) int lib_work(int x) { return x * 3 + 1; }

__attribute__((noinline)) int lib_sum(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        s += lib_work(i);
    }
    return s;
}

__attribute__((noinline)) int cxx_step(int x) { return x + 2; }
}

static volatile int at_init;

__attribute__((constructor)) static void lib_init() {
    at_init = lib_sum(4);
    if (program_hook) {
        program_hook(at_init);
    }
}

struct Registry {
    int total = 0;
    __attribute__((noinline)) Registry() {
        for (int i = 0; i < 3; i++) {
            total += cxx_step(i);
        }
    }
};

// Constructed by the library's initialiser, before main.
static Registry registry;

extern "C" int lib_value() { return at_init; }
extern "C" int cxx_total() { return registry.total; }
