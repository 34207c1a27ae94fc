// attach_throw.cpp: a running C++ process for `fctrace -p` that throws
// through traced frames after fctrace attached. Each line "go" on stdin
// throws from thrower() through middle() and catches it in main; "quit"
// ends it (exit status 3).
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

__attribute__((noinline)) int thrower(int x) {
    if (x > 0)
        throw std::runtime_error("boom " + std::to_string(x));
    return x;
}
__attribute__((noinline)) int middle(int x) { return thrower(x) + 1; }

int main() {
    std::printf("ready\n");
    std::fflush(stdout);
    std::string line;
    int round = 0;
    while (std::getline(std::cin, line)) {
        if (line == "quit")
            break;
        try {
            middle(++round);
        } catch (const std::exception &e) {
            std::printf("round %d: caught %s\n", round, e.what());
            std::fflush(stdout);
        }
    }
    std::printf("done after %d rounds\n", round);
    return 3;
}
