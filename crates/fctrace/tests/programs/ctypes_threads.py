# ctypes_threads.py: a threaded Python script whose system calls do not
# depend on timing but for futex (tests/kernel/kernel.rs, `report -k` against
# `strace -f -c`): one malloc arena (threads creating arenas of their own
# would depend on contention), and threads made and joined through the C
# library's pthread_create/pthread_join (Python's own threads are detached:
# the program can end while one still makes its last system calls). Each
# thread runs Python code (ctypes takes the interpreter lock for it).
import ctypes

libc = ctypes.CDLL("libc.so.6")
M_ARENA_MAX = -8
libc.mallopt(M_ARENA_MAX, 1)
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def work(arg):
    s = 0
    for i in range(20000):
        s += len(str(i))
    return 0


cb = CALLBACK(work)
threads = [ctypes.c_ulong() for _ in range(3)]
for t in threads:
    libc.pthread_create(ctypes.byref(t), None, cb, None)
for t in threads:
    libc.pthread_join(t, None)
print("done")
