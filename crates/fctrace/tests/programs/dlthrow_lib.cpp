// dlthrow_lib.cpp: a C++ shared library that a C program (dlthrow_host.c)
// or Python's ctypes loads with dlopen(RTLD_LOCAL): libstdc++ arrives with
// it. lib_work(n) throws a std::runtime_error from thrower() through
// middle() and catches it, n times, then once more through rethrower(),
// which catches and rethrows it (`throw;`) to lib_work's outer catch.
#include <stdexcept>
#include <string>

extern "C" {

__attribute__((noipa)) int thrower(int x) {
    if (x >= 0)
        throw std::runtime_error("boom " + std::to_string(x));
    return x;
}

__attribute__((noipa)) int middle(int x) { return thrower(x) + 1; }

__attribute__((noipa)) int rethrower(int x) {
    try {
        return middle(x);
    } catch (const std::runtime_error &) {
        throw;
    }
}

// n + 100: n caught in the loop, one after the rethrow.
__attribute__((noipa)) int lib_work(int n) {
    int caught = 0;
    for (int i = 0; i < n; i++) {
        try {
            middle(i);
        } catch (const std::runtime_error &e) {
            caught += e.what()[0] == 'b';
        }
    }
    try {
        rethrower(n);
    } catch (const std::exception &e) {
        caught += 100;
    }
    return caught;
}
}
