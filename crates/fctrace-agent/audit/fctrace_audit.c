/* fctrace's auditing module (rtld-audit(7)); docs/engine.md, "Starting
 * before the libraries' initialisers".
 *
 * The recorder names this file in LD_AUDIT and the agent in LD_PRELOAD.
 * The dynamic loader loads this module first, into a namespace of its
 * own, and tells it about each object it loads (la_objopen) and when the
 * program's set of objects is complete (la_activity, LA_ACT_CONSISTENT):
 * everything is relocated, TLS is set up and libc's early set-up is done,
 * but no initialiser has run. The module then calls the preloaded agent's
 * fctrace_agent_early with the environment array (which libc publishes as
 * `environ` only in its own initialiser), so that the agent is set up
 * before the libraries' initialisers run and their calls are recorded.
 *
 * It uses no library (linked with -nostdlib): the loader maps no second
 * libc for it. It asks for no symbol-binding events (the loader binds as
 * usual), and when fctrace's variables are not in the environment its
 * la_version answers 0, which the loader takes silently as "not used". */

#define _GNU_SOURCE
#include <link.h>
#include <stddef.h>
#include <stdint.h>

/* The environment array, as the loader passes it to initialisers. */
static char **env;
/* The agent's path: the first of the last LD_PRELOAD (fctrace puts the
 * agent first in the one it adds, after the program's own variables). */
static char agent_path[4096];
static struct link_map *agent;
static int called;

static void capture(int argc, char **argv, char **envp) {
    (void)argc;
    (void)argv;
    env = envp;
}

__attribute__((used, section(".init_array"))) static void (*const init_entry)(int, char **, char **) =
    capture;

static const char *after(const char *s, const char *prefix) {
    while (*prefix) {
        if (*s++ != *prefix++) {
            return NULL;
        }
    }
    return s;
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

unsigned int la_version(unsigned int version) {
    const char *preload = NULL;
    int traced = 0;
    if (version == 0 || env == NULL) {
        return 0;
    }
    for (char **p = env; *p; p++) {
        const char *v = after(*p, "LD_PRELOAD=");
        if (v) {
            preload = v;
        }
        if (after(*p, "FCTRACE_SHM=")) {
            traced = 1;
        }
    }
    if (!traced || preload == NULL) {
        return 0;
    }
    size_t n = 0;
    while (preload[n] && preload[n] != ':' && preload[n] != ' ' && n + 1 < sizeof agent_path) {
        agent_path[n] = preload[n];
        n++;
    }
    agent_path[n] = 0;
    return n > 0 && (preload[n] == 0 || preload[n] == ':' || preload[n] == ' ') ? 1 : 0;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    (void)cookie;
    if (lmid == LM_ID_BASE && agent == NULL && map->l_name && same(map->l_name, agent_path)) {
        agent = map;
    }
    return 0;
}

/* The address of the dynamic symbol `name` of the loaded object `map`,
 * from its dynamic section and GNU hash table; 0 if it has none. */
static uintptr_t lookup(struct link_map *map, const char *name) {
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *hash = NULL;
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        uintptr_t v = d->d_un.d_ptr;
        /* The loader relocates these in place; an offset otherwise. */
        if (v < map->l_addr) {
            v += map->l_addr;
        }
        if (d->d_tag == DT_SYMTAB) {
            symtab = (const ElfW(Sym) *)v;
        } else if (d->d_tag == DT_STRTAB) {
            strtab = (const char *)v;
        } else if (d->d_tag == DT_GNU_HASH) {
            hash = (const uint32_t *)v;
        }
    }
    if (symtab == NULL || strtab == NULL || hash == NULL || hash[0] == 0) {
        return 0;
    }
    uint32_t h = 5381;
    for (const char *c = name; *c; c++) {
        h = h * 33 + (unsigned char)*c;
    }
    uint32_t nbuckets = hash[0], symoffset = hash[1], bloom_size = hash[2];
    const uint32_t *buckets = hash + 4 + 2 * (size_t)bloom_size;
    const uint32_t *chains = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset) {
        return 0;
    }
    for (;; i++) {
        uint32_t ch = chains[i - symoffset];
        if ((ch | 1) == (h | 1) && symtab[i].st_shndx != SHN_UNDEF && symtab[i].st_value != 0 &&
            same(strtab + symtab[i].st_name, name)) {
            return map->l_addr + symtab[i].st_value;
        }
        if (ch & 1) {
            return 0;
        }
    }
}

void la_activity(uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    if (flag != LA_ACT_CONSISTENT || agent == NULL || called) {
        return;
    }
    called = 1;
    uintptr_t early = lookup(agent, "fctrace_agent_early");
    if (early) {
        ((void (*)(char **))early)(env);
    }
}
