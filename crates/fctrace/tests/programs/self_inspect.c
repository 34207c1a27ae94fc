/*
 * self_inspect.c: a program that looks at itself.
 *
 *   ./self_inspect maps      finds its own mappings in /proc/self/maps
 *   ./self_inspect body      checksums code bytes of a function it never
 *                            calls (past its entry) and compares them with
 *                            the executable file on disk
 *   ./self_inspect text      compares its whole executable segment with the
 *                            file, printing every range that differs
 *   ./self_inspect trap      its own SIGTRAP handler: int3 and raise(SIGTRAP)
 *   ./self_inspect segv      its own SIGSEGV handler: PROT_NONE pages made
 *                            accessible on first touch (a GC write barrier)
 *   ./self_inspect selfaddr  functions that take their own address in their
 *                            first instruction: the same pointer as anywhere
 *
 * Every function is noipa so that -O0 and -O2 make the same calls. The
 * expected trees are in tests/tracing/self_inspect.rs; keep both in step.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

volatile int sink;
int data_var = 7;

/* A function nobody calls, big enough that its body lies well past the
 * entry. */
NOIPA int never_called(int x)
{
    int s = 0;
    for (int i = 0; i < x; i++) {
        s += i * 31 + (s >> 3);
        s ^= x << (i & 7);
        s += (s * 17) ^ (i * 13);
        s -= (s >> 5) * 3;
    }
    return s * 7 + x;
}

struct map {
    uintptr_t lo, hi, off;
    char perms[8];
    char path[PATH_MAX];
};

/* The mapping holding addr. */
static int find_map(uintptr_t addr, struct map *m)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 128];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8], path[PATH_MAX];
        path[0] = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095[^\n]", &lo, &hi, perms, &off, path) < 4)
            continue;
        if (addr >= lo && addr < hi) {
            m->lo = lo;
            m->hi = hi;
            m->off = off;
            strcpy(m->perms, perms);
            strcpy(m->path, path);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Reads n bytes of the file backing mapping m at address a. */
static unsigned char *file_bytes(const struct map *m, uintptr_t a, size_t n)
{
    unsigned char *buf = malloc(n);
    int fd = open(m->path, O_RDONLY);
    if (fd < 0 || pread(fd, buf, n, (off_t)(m->off + (a - m->lo))) != (ssize_t)n) {
        perror("pread");
        exit(2);
    }
    close(fd);
    return buf;
}

NOIPA void show_maps(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n < 0 ? 0 : n] = 0;
    struct map m;
    int local;
    if (find_map((uintptr_t)&show_maps, &m))
        printf("code: %s self=%d\n", m.perms, strcmp(m.path, self) == 0);
    if (find_map((uintptr_t)&data_var, &m))
        printf("data: %s self=%d\n", m.perms, strcmp(m.path, self) == 0);
    if (find_map((uintptr_t)&local, &m))
        printf("stack: %s %s\n", m.perms, m.path);
    void *heap = malloc(100);
    if (find_map((uintptr_t)heap, &m))
        printf("heap: %s\n", m.perms);
    free(heap);
}

NOIPA void check_body(void)
{
    struct map m;
    uintptr_t a = (uintptr_t)&never_called + 16;
    if (!find_map(a, &m)) {
        printf("body: not mapped\n");
        return;
    }
    unsigned char *disk = file_bytes(&m, a, 48);
    uint64_t h = fnv((const unsigned char *)a, 48);
    printf("body: readable=%s same_as_file=%d\n", strchr(m.perms, 'r') ? "yes" : "no",
           h == fnv(disk, 48));
    free(disk);
}

NOIPA void compare_text(void)
{
    struct map m;
    if (!find_map((uintptr_t)&compare_text, &m)) {
        printf("text: not mapped\n");
        return;
    }
    size_t n = m.hi - m.lo;
    unsigned char *disk = file_bytes(&m, m.lo, n);
    const unsigned char *mem = (const unsigned char *)m.lo;
    int ranges = 0;
    for (size_t i = 0; i < n;) {
        if (mem[i] == disk[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && mem[j] != disk[j])
            j++;
        /* As an address in the file's layout (the ELF's vaddr). */
        printf("diff %#lx %zu\n", (unsigned long)(m.off + i), j - i);
        ranges++;
        i = j;
    }
    printf("text: %d ranges differ\n", ranges);
    free(disk);
}

/* ---- own addresses ---- */

/* At -O2 both begin with `lea reg, [rip - N]`: their own address. */
NOIPA void *self_addr(void) { return (void *)&self_addr; }

NOIPA int registered(void (*cb)(void), int n);

NOIPA void self_register(void)
{
    sink += registered(self_register, 1);
}

static void (*seen)(void);

NOIPA int registered(void (*cb)(void), int n)
{
    seen = cb;
    return n;
}

/* ---- SIGTRAP ---- */

extern char after_int3[];
static volatile int trap_hits, trap_rip_ok, trap_codes;

NOIPA void on_trap(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    trap_hits++;
    if (si->si_code == SI_KERNEL)
        trap_rip_ok = uc->uc_mcontext.gregs[REG_RIP] == (greg_t)(uintptr_t)after_int3;
    trap_codes = trap_codes * 10 + (si->si_code == SI_KERNEL ? 1 : si->si_code == SI_TKILL ? 2 : 9);
    sink++;
}

NOIPA void breakpoint(void)
{
    sink++;
    __asm__ volatile("int3\n.globl after_int3\nafter_int3:" ::: "memory");
    sink++;
}

NOIPA void raise_trap(void)
{
    raise(SIGTRAP);
    sink++;
}

/* ---- SIGSEGV: a write barrier ---- */

#define PAGES 8
static char *heap_lo;
static long page;
static volatile int faults;

NOIPA void on_segv(int sig, siginfo_t *si, void *uc)
{
    char *a = si->si_addr;
    if (a < heap_lo || a >= heap_lo + PAGES * page) {
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    faults++;
    mprotect((void *)((uintptr_t)a & ~(uintptr_t)(page - 1)), page, PROT_READ | PROT_WRITE);
}

NOIPA void store(char *p, char v)
{
    *p = v;
    sink++;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "maps";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (strcmp(mode, "maps") == 0) {
        show_maps();
    } else if (strcmp(mode, "body") == 0) {
        check_body();
    } else if (strcmp(mode, "text") == 0) {
        compare_text();
    } else if (strcmp(mode, "selfaddr") == 0) {
        void *a = self_addr();
        self_register();
        printf("selfaddr: same=%d registered_same=%d\n", a == (void *)&self_addr,
               seen == self_register);
    } else if (strcmp(mode, "trap") == 0) {
        struct sigaction sa, old;
        sigaction(SIGTRAP, NULL, &old);
        printf("trap before: %s\n", old.sa_handler == SIG_DFL ? "SIG_DFL" : "other");
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_trap;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTRAP, &sa, NULL);
        breakpoint();
        raise_trap();
        printf("trap: hits=%d rip_ok=%d codes=%d\n", trap_hits, trap_rip_ok, trap_codes);
    } else if (strcmp(mode, "segv") == 0) {
        struct sigaction sa, old;
        sigaction(SIGSEGV, NULL, &old);
        printf("segv before: %s flags=%#x\n", old.sa_handler == SIG_DFL ? "SIG_DFL" : "other",
               old.sa_flags);
        page = sysconf(_SC_PAGESIZE);
        heap_lo = mmap(NULL, PAGES * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
        long sum = 0;
        for (int round = 0; round < 3; round++)
            for (int i = 0; i < PAGES; i++) {
                store(heap_lo + i * page + round, (char)(i + round));
                sum += heap_lo[i * page + round];
            }
        sigaction(SIGSEGV, NULL, &old);
        printf("segv: faults=%d sum=%ld handler_kept=%d\n", faults, sum,
               old.sa_sigaction == on_segv);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
