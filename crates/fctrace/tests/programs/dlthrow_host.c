// dlthrow_host.c: a C program (no libstdc++ at start) that dlopens the C++
// library DLTHROW_LIB (dlthrow_lib.cpp, RTLD_LOCAL) and calls lib_work,
// whose exceptions are thrown and caught inside the library.
// `dlthrow_host run N`: rounds 1..N, then exit 0. Without arguments, for
// `fctrace -p`: prints "ready", then each line "go" on stdin runs the next
// round, "quit" ends it (exit status 3). Built with -DDLTHROW_LATE, it
// loads the library at the first round instead (after fctrace attached).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*work_fn)(int);

__attribute__((noinline)) int one_round(work_fn work, int round) {
    int caught = work(round);
    printf("round %d: caught %d\n", round, caught);
    fflush(stdout);
    return caught;
}

static work_fn load(void) {
    void *h = dlopen(DLTHROW_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
    work_fn work = (work_fn)dlsym(h, "lib_work");
    if (!work) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        exit(2);
    }
    return work;
}

int main(int argc, char **argv) {
#ifdef DLTHROW_LATE
    work_fn work = argc > 2 ? load() : NULL;
#else
    work_fn work = load();
#endif
    if (argc > 2 && strcmp(argv[1], "run") == 0) {
        int n = atoi(argv[2]), total = 0;
        for (int r = 1; r <= n; r++)
            total += one_round(work, r);
        printf("total %d\n", total);
        return 0;
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    int round = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "quit", 4) == 0)
            break;
        if (!work)
            work = load();
        one_round(work, ++round);
    }
    printf("done after %d rounds\n", round);
    return 3;
}
