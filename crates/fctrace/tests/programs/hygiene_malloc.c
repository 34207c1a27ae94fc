/* The program's own allocator: malloc, free, calloc and realloc (a
 * first-fit free list over sbrk, after Kernighan and Ritchie). Built -O2,
 * GCC turns calloc's malloc + memset into a call of calloc itself: the
 * program never calls calloc, so it runs natively; anyone else calling it
 * (an agent's constructor) would loop forever. Every allocation of the
 * process after start-up goes through these functions; a destructor
 * prints how often each was called. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef union header {
    struct {
        union header *next;
        size_t units;
    } s;
    max_align_t align;
} Header;

static Header base;
static Header *freep;
static unsigned long n_malloc, n_free, n_calloc, n_realloc;

void free(void *ap) {
    n_free++;
    if (!ap)
        return;
    Header *bp = (Header *)ap - 1, *p;
    for (p = freep; !(bp > p && bp < p->s.next); p = p->s.next)
        if (p >= p->s.next && (bp > p || bp < p->s.next))
            break;
    if (bp + bp->s.units == p->s.next) {
        bp->s.units += p->s.next->s.units;
        bp->s.next = p->s.next->s.next;
    } else {
        bp->s.next = p->s.next;
    }
    if (p + p->s.units == bp) {
        p->s.units += bp->s.units;
        p->s.next = bp->s.next;
    } else {
        p->s.next = bp;
    }
    freep = p;
}

static Header *more_core(size_t units) {
    if (units < 4096)
        units = 4096;
    void *cp = sbrk((intptr_t)(units * sizeof(Header)));
    if (cp == (void *)-1)
        return NULL;
    Header *up = cp;
    up->s.units = units;
    free(up + 1);
    return freep;
}

void *malloc(size_t nbytes) {
    n_malloc++;
    size_t units = (nbytes + sizeof(Header) - 1) / sizeof(Header) + 1;
    Header *prevp = freep, *p;
    if (!prevp) {
        base.s.next = freep = prevp = &base;
        base.s.units = 0;
    }
    for (p = prevp->s.next;; prevp = p, p = p->s.next) {
        if (p->s.units >= units) {
            if (p->s.units == units) {
                prevp->s.next = p->s.next;
            } else {
                p->s.units -= units;
                p += p->s.units;
                p->s.units = units;
            }
            freep = prevp;
            return p + 1;
        }
        if (p == freep && !(p = more_core(units)))
            return NULL;
    }
}

void *calloc(size_t n, size_t size) {
    n_calloc++;
    void *p = malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *realloc(void *old, size_t size) {
    n_realloc++;
    if (!old)
        return malloc(size);
    Header *h = (Header *)old - 1;
    size_t have = (h->s.units - 1) * sizeof(Header);
    if (have >= size)
        return old;
    void *p = malloc(size);
    if (p) {
        memcpy(p, old, have);
        free(old);
    }
    return p;
}

__attribute__((noinline)) static char *dup_word(const char *w) {
    size_t n = strlen(w) + 1;
    char *p = malloc(n);
    memcpy(p, w, n);
    return p;
}

__attribute__((noinline)) static long sum_squares(int n) {
    long *v = malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++)
        v[i] = (long)i * i;
    v = realloc(v, (size_t)n * 4 * sizeof *v);
    long s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    free(v);
    return s;
}

static void put_count(char *buf, size_t *len, const char *name, unsigned long v) {
    char digits[24];
    int k = 0;
    do
        digits[k++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    size_t n = strlen(name);
    memcpy(buf + *len, name, n);
    *len += n;
    while (k)
        buf[(*len)++] = digits[--k];
}

/* After main and stdio's last allocation: written without allocating. */
__attribute__((destructor)) static void report_counts(void) {
    char buf[128];
    size_t len = 0;
    put_count(buf, &len, "malloc=", n_malloc);
    put_count(buf, &len, " free=", n_free);
    put_count(buf, &len, " calloc=", n_calloc);
    put_count(buf, &len, " realloc=", n_realloc);
    buf[len++] = '\n';
    fflush(stdout);
    if (write(1, buf, len) != (ssize_t)len)
        _exit(1);
}

int main(void) {
    char *words[3] = {dup_word("alpha"), dup_word("beta"), dup_word("gamma")};
    long s = sum_squares(1000);
    printf("%s %s %s %ld\n", words[0], words[1], words[2], s);
    for (int i = 0; i < 3; i++)
        free(words[i]);
    return 0;
}
