/* A user's own auditing module (LD_AUDIT, rtld-audit(7)) for
 * tests/hygiene/hygiene.rs: the loader uses it (it answers the version
 * handshake) and it does nothing else. */
#include <link.h>

unsigned int la_version(unsigned int version) {
    return version;
}
