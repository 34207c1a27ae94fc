/* reopt_lib.c: the library of attach_reopt.c. `lib_outer` (exported)
 * calls `lib_inner` (static): the program's call of lib_outer is traced
 * always, lib_inner only when fctrace also traces libraries (-l). */
__attribute__((noipa)) static int lib_inner(int x) { return x * 3; }

__attribute__((noipa)) int lib_outer(int x) { return lib_inner(x) + 1; }
